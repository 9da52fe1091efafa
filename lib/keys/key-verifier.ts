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
 *
 * A request's value is digested once (`digestOf`), and that digest is what
 * the memo of matches, `hasVerified` and `comparison` take: a known key costs
 * one digest of its value and one lookup. Mismatches are remembered by a
 * digest of the pair, made only when no match is remembered.
 */
export class KeyVerifier {
  private readonly hasher: KeyHasher
  private readonly digest = memoDigest()
  // Matches and mismatches are kept apart, so a flood of wrong values
  // cannot evict the memo of the keys that legitimate clients use. A match
  // is kept by the value's digest, with the stored hash it matched.
  private readonly matches: LRUCache<string, string>
  private readonly mismatches: LRUCache<string, true>
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

  /** The digest of a supplied value that the other methods take: made once per request. */
  digestOf (value: string): string {
    return this.digest(value)
  }

  /**
   * True when the value (its digest) has matched a stored hash here before,
   * without looking at storage: the key hook lets such a value through to
   * the usual checks (its record is still read) past the failure throttle.
   */
  hasVerified (valueDigest: string): boolean {
    return this.matches.has(valueDigest)
  }

  /**
   * The comparison of the value (its digest) with a stored hash running (or
   * queued) now, as whether it matched (false when it failed), or undefined
   * when none runs. It settles after `hasVerified` has learnt its result.
   */
  comparison (valueDigest: string): Promise<boolean> | undefined {
    return this.inFlightByValue.get(valueDigest)
  }

  /**
   * Whether `value` matches `hash`: at once when the memo knows (the usual
   * case: no promise, no turn of the microtask queue), else when the
   * comparison ends.
   * @param valueDigest `digestOf(value)`
   * @throws VerificationBusyError (as a rejection) when the key's line or the whole queue is full
   */
  verify (hash: string, value: string, valueDigest: string): boolean | Promise<boolean> {
    // The clock is read only when someone watches: this is the hot path.
    const started = this.observe === undefined ? 0 : performance.now()
    if (this.matches.get(valueDigest) === hash) return this.memoHit(true, started)
    const pairKey = this.digest(hash + '\0' + value)
    if (this.mismatches.has(pairKey)) return this.memoHit(false, started)
    // Concurrent first requests with the same key share one comparison.
    const pending = this.inFlight.get(pairKey) ?? this.startComparison(pairKey, valueDigest, hash, value)
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

  private startComparison (pairKey: string, valueKey: string, hash: string, value: string): Promise<boolean> {
    // The stored hash stands for the key: one line per key. A refusal is
    // not listed below, so the next request with this value tries again.
    const turn = this.queue.acquire(hash)
    if (turn === null) return Promise.reject(new VerificationBusyError())
    const pending = this.compare(turn, pairKey, valueKey, hash, value)
    this.inFlight.set(pairKey, pending)
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

  private async compare (turn: Promise<void>, pairKey: string, valueKey: string, hash: string, value: string): Promise<boolean> {
    await turn
    try {
      const ok = await this.hasher.compare(value, hash)
      if (ok) this.matches.set(valueKey, hash)
      else this.mismatches.set(pairKey, true)
      return ok
    } finally {
      this.queue.release()
      this.inFlight.delete(pairKey)
    }
  }
}
