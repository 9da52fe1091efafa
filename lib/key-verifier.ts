import { LRUCache } from 'lru-cache'
import type { KeyHasher } from './key-hasher.js'
import { VerificationBusyError } from './errors.js'
import { memoHmac } from './memo-hmac.js'

export interface KeyVerifierOptions {
  hasher: KeyHasher
  /** remembered comparison results, each of matches and mismatches */
  cacheSize: number
  /** bcrypt comparisons running at once; more wait in a queue */
  maxConcurrentHashes: number
  /** comparisons waiting for a slot; beyond it a request is refused with 429 */
  maxQueuedHashes: number
}

/**
 * Compares a supplied key with a stored bcrypt hash at most once per
 * (hash, value) pair. The comparison is a pure function of the two, so its
 * result is memoised in memory under an HMAC with a per-process secret: the
 * value itself is never kept. The key's record is not cached here, so a
 * disable, delete or regenerate acts on the next request.
 */
export class KeyVerifier {
  private readonly hasher: KeyHasher
  private readonly hmac = memoHmac()
  // Matches and mismatches are kept apart, so a flood of wrong values
  // cannot evict the memo of the keys that legitimate clients use.
  private readonly matches: LRUCache<string, true>
  private readonly mismatches: LRUCache<string, true>
  private readonly verifiedValues: LRUCache<string, true>
  private readonly inFlight = new Map<string, Promise<boolean>>()
  private readonly maxRunning: number
  private readonly maxQueued: number
  private running = 0
  private readonly queue: Array<() => void> = []

  constructor (options: KeyVerifierOptions) {
    this.hasher = options.hasher
    this.matches = new LRUCache({ max: options.cacheSize })
    this.mismatches = new LRUCache({ max: options.cacheSize })
    this.verifiedValues = new LRUCache({ max: options.cacheSize })
    this.maxRunning = options.maxConcurrentHashes
    this.maxQueued = options.maxQueuedHashes
  }

  private memoKey (hash: string, value: string): string {
    return this.hmac(hash + '\0' + value)
  }

  /**
   * True when `value` has matched a stored hash here before, without looking
   * at storage: the failure throttle lets such a value through to the usual
   * checks (its record is still read) and refuses anything else at once.
   */
  hasVerified (value: string): boolean {
    return this.verifiedValues.has(this.hmac(value))
  }

  /** Whether `value` matches `hash`. @throws VerificationBusyError when the queue is full */
  async verify (hash: string, value: string): Promise<boolean> {
    const memoKey = this.memoKey(hash, value)
    if (this.matches.has(memoKey)) return true
    if (this.mismatches.has(memoKey)) return false
    // Concurrent first requests with the same key share one comparison.
    let pending = this.inFlight.get(memoKey)
    if (pending === undefined) {
      pending = this.compare(memoKey, hash, value)
      this.inFlight.set(memoKey, pending)
    }
    return pending
  }

  private async compare (memoKey: string, hash: string, value: string): Promise<boolean> {
    try {
      await this.acquireSlot()
      try {
        const ok = await this.hasher.compare(value, hash)
        ;(ok ? this.matches : this.mismatches).set(memoKey, true)
        if (ok) this.verifiedValues.set(this.hmac(value), true)
        return ok
      } finally {
        this.releaseSlot()
      }
    } finally {
      this.inFlight.delete(memoKey)
    }
  }

  private async acquireSlot (): Promise<void> {
    if (this.running < this.maxRunning) {
      this.running++
      return
    }
    if (this.queue.length >= this.maxQueued) throw new VerificationBusyError()
    // The slot is handed over by releaseSlot, so `running` stays counted.
    await new Promise<void>((resolve) => this.queue.push(resolve))
  }

  private releaseSlot (): void {
    const next = this.queue.shift()
    if (next !== undefined) next()
    else this.running--
  }
}
