import { InternalServerError } from '../errors.js'
import type { Storage } from './storage.js'
import { UsageInDoubtError } from './usage-in-doubt.js'
import { isThenable } from '../host/thenable.js'

/**
 * The storage as the routes use it: a failure becomes 500
 * `Internal server error`, with the storage's own error as its `cause` for
 * the log, since a driver's text may name tables, values or the database
 * host. What the Storage contract itself throws (PrefixTakenError,
 * UsageInDoubtError) and the plugin's own errors, thrown by a callback such
 * as `beforeCommit`, pass as they are.
 */
export function guardStorage (storage: Storage): Storage {
  // One wrapper per method, made again only if the method itself is replaced.
  const wrappers = new Map<PropertyKey, { method: (...args: unknown[]) => unknown, wrapper: (...args: unknown[]) => unknown }>()
  const guarded = new Proxy(storage, {
    get (target, name, receiver) {
      const value: unknown = Reflect.get(target, name, receiver)
      if (typeof value !== 'function') return value
      const known = wrappers.get(name)
      if (known?.method === value) return known.wrapper
      const method = value as (...args: unknown[]) => unknown
      const wrapper = (...args: unknown[]): unknown => {
        try {
          const result = method.apply(target, args)
          // A host's store may answer with any thenable: it goes on as a Promise, its failure wrapped too.
          return isThenable(result) ? Promise.resolve(result).catch((err: unknown) => { throw storageFailure(err) }) : result
        } catch (err) {
          throw storageFailure(err)
        }
      }
      wrappers.set(name, { method, wrapper })
      return wrapper
    }
  })
  guardedStores.set(guarded, storage)
  return guarded
}

/** Each guard's storage, for unguarded(). */
const guardedStores = new WeakMap<Storage, Storage>()

/** What the guard turns a storage failure into: 500 with the failure as its `cause`, or the contract's own error as it is. */
export function storageFailure (err: unknown): unknown {
  const code = (err as { code?: unknown } | null)?.code
  if (err instanceof UsageInDoubtError || (typeof code === 'string' && code.startsWith('FDE_'))) return err
  return new InternalServerError({ cause: err })
}

/**
 * The storage behind a guard (or `storage` itself, if unguarded), for a
 * caller on every request's path that applies storageFailure itself: the
 * key check, which waits for its lookup and turns a failure in one step.
 * Through the guard, a lookup's promise took one more promise and turn of
 * the microtask queue a request: about 2% of PostgreSQL mode's server CPU
 * (docs/benchmarks.md).
 */
export function unguarded (storage: Storage): Storage {
  return guardedStores.get(storage) ?? storage
}
