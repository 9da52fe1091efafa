import { LRUCache } from 'lru-cache'
import { ComparisonQueue } from './comparison-queue.js'
import type { KeyHasher } from './key-hasher.js'
import { VerificationBusyError } from '../errors.js'
import { memoDigest } from './memo-digest.js'

export interface KeyVerifierOptions {
  hasher: KeyHasher
  /** remembered comparison results, each of matches and mismatches */
  cacheSize: number
  /** bcrypt comparisons running at once; more wait in a queue */
  maxConcurrentHashes: number
  /** comparisons waiting for a slot; beyond it a request is refused with 429 */
  maxQueuedHashes: number
  /** comparisons waiting for a slot for one key (stored hash); beyond it 429 */
  maxQueuedHashesPerKey: number
  /** told how long each verification took, and whether the memo answered it (for metrics) */
  observe?: (memo: 'hit' | 'miss', seconds: number) => void
}

/**
 * Compares a supplied key with a stored bcrypt hash at most once per
 * (hash, value) pair. The comparison is a pure function of the two, so its
 * result is memoised in memory under a digest keyed by a per-process secret: the
 * value itself is never kept. The key's record is not cached here, so a
 * disable, delete or regenerate acts on the next request.
 */
export class KeyVerifier {
  private readonly hasher: KeyHasher
  private readonly digest = memoDigest()
  // Matches and mismatches are kept apart, so a flood of wrong values
  // cannot evict the memo of the keys that legitimate clients use.
  private readonly matches: LRUCache<string, true>
  private readonly mismatches: LRUCache<string, true>
  private readonly verifiedValues: LRUCache<string, true>
  private readonly inFlight = new Map<string, Promise<boolean>>()
  // The same comparisons by supplied value alone (its digest), each as whether
  // it matched: a request the failure throttle holds waits for its value's.
  private readonly inFlightByValue = new Map<string, Promise<boolean>>()
  // One line per key, served in turn: guesses at one key cannot hold the
  // places other keys' first comparisons need.
  private readonly queue: ComparisonQueue
  private readonly observe: KeyVerifierOptions['observe']

  constructor (options: KeyVerifierOptions) {
    this.hasher = options.hasher
    this.observe = options.observe
    this.matches = new LRUCache({ max: options.cacheSize })
    this.mismatches = new LRUCache({ max: options.cacheSize })
    this.verifiedValues = new LRUCache({ max: options.cacheSize })
    this.queue = new ComparisonQueue({
      maxRunning: options.maxConcurrentHashes,
      maxWaiting: options.maxQueuedHashes,
      maxWaitingPerKey: options.maxQueuedHashesPerKey
    })
  }

  /** comparisons waiting for a slot now */
  get queuedComparisons (): number {
    return this.queue.waiting
  }

  private memoKey (hash: string, value: string): string {
    return this.digest(hash + '\0' + value)
  }

  /**
   * True when `value` has matched a stored hash here before, without looking
   * at storage: the failure throttle lets such a value through to the usual
   * checks (its record is still read) and refuses anything else at once.
   */
  hasVerified (value: string): boolean {
    return this.verifiedValues.has(this.digest(value))
  }

  /**
   * The comparison of `value` with a stored hash running (or queued) now, as
   * whether it matched (false when it failed), or undefined when none runs.
   * It settles after `hasVerified` has learnt its result.
   */
  comparison (value: string): Promise<boolean> | undefined {
    return this.inFlightByValue.get(this.digest(value))
  }

  /**
   * Whether `value` matches `hash`: at once when the memo knows (the usual
   * case: no promise, no turn of the microtask queue), else when the
   * comparison ends.
   * @throws VerificationBusyError (as a rejection) when the key's line or the whole queue is full
   */
  verify (hash: string, value: string): boolean | Promise<boolean> {
    // The clock is read only when someone watches: this is the hot path.
    const started = this.observe === undefined ? 0 : performance.now()
    const memoKey = this.memoKey(hash, value)
    if (this.matches.has(memoKey)) return this.memoHit(true, started)
    if (this.mismatches.has(memoKey)) return this.memoHit(false, started)
    // Concurrent first requests with the same key share one comparison.
    const pending = this.inFlight.get(memoKey) ?? this.startComparison(memoKey, hash, value)
    return this.observe === undefined ? pending : this.observed(pending, started)
  }

  private async observed (pending: Promise<boolean>, started: number): Promise<boolean> {
    try {
      return await pending
    } finally {
      this.observe?.('miss', (performance.now() - started) / 1000)
    }
  }

  private memoHit (matched: boolean, started: number): boolean {
    if (this.observe !== undefined) this.observe('hit', (performance.now() - started) / 1000)
    return matched
  }

  private startComparison (memoKey: string, hash: string, value: string): Promise<boolean> {
    // The stored hash stands for the key: one line per key. A refusal is
    // not listed below, so the next request with this value tries again.
    const turn = this.queue.acquire(hash)
    if (turn === null) return Promise.reject(new VerificationBusyError())
    const valueKey = this.digest(value)
    const pending = this.compare(turn, memoKey, valueKey, hash, value)
    this.inFlight.set(memoKey, pending)
    // The same value may be compared with two hashes at once (a key being
    // regenerated): the later comparison stays listed until it ends.
    const settled = (ok: boolean): boolean => {
      if (this.inFlightByValue.get(valueKey) === outcome) this.inFlightByValue.delete(valueKey)
      return ok
    }
    const outcome = pending.then(settled, () => settled(false))
    this.inFlightByValue.set(valueKey, outcome)
    return pending
  }

  private async compare (turn: Promise<void>, memoKey: string, valueKey: string, hash: string, value: string): Promise<boolean> {
    await turn
    try {
      const ok = await this.hasher.compare(value, hash)
      ;(ok ? this.matches : this.mismatches).set(memoKey, true)
      if (ok) this.verifiedValues.set(valueKey, true)
      return ok
    } finally {
      this.queue.release()
      this.inFlight.delete(memoKey)
    }
  }
}
