import { isIPv4, isIPv6 } from 'node:net'
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
   * from legitimate traffic (each answer still says when to come back). A
   * held request whose key is being compared waits for that comparison
   * instead, and goes through if the key matched.
   */
  delayMs?: number
}

interface Window {
  failures: number
  resetAt: number
}

/**
 * The address a throttle counts under: IPv4 as is, IPv6 by its /64 (a client
 * usually holds a whole /64, so it could otherwise rotate addresses), an
 * IPv4-mapped IPv6 address as its IPv4 address. Anything else is kept as is.
 */
export function clientKey (ip: string): string {
  if (!ip.includes(':') || ip === '::1') return ip
  if (ip.startsWith('::ffff:') && isIPv4(ip.slice(7))) return ip.slice(7)
  if (!isIPv6(ip)) return ip
  let s = ip.toLowerCase()
  const zone = s.indexOf('%')
  if (zone !== -1) s = s.slice(0, zone)
  if (s.includes('.')) {
    // an IPv4 tail is the last two groups
    const at = s.lastIndexOf(':') + 1
    const [a, b, c, d] = s.slice(at).split('.').map(Number)
    s = s.slice(0, at) + ((a << 8) | b).toString(16) + ':' + ((c << 8) | d).toString(16)
  }
  const [head, tail] = s.split('::')
  const left = head === '' ? [] : head.split(':')
  const right = tail === undefined || tail === '' ? [] : tail.split(':')
  const groups = [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right].map((g) => parseInt(g, 16))
  if (groups[5] === 0xffff && groups.slice(0, 5).every((g) => g === 0)) {
    return `${groups[6] >> 8}.${groups[6] & 255}.${groups[7] >> 8}.${groups[7] & 255}`
  }
  return groups.slice(0, 4).map((g) => g.toString(16)).join(':') + '::/64'
}

/**
 * A request's client as the throttle names it (`clientKey`), made when first
 * asked: a request that is neither refused nor counted as an attempt (a key
 * verified here before) never asks, and an IPv6 address costs about 1.4 µs
 * to name.
 */
export class ThrottleClient {
  #name: string | undefined
  constructor (readonly ip: string) {}
  get name (): string {
    return (this.#name ??= clientKey(this.ip))
  }
}

/**
 * Counts failed authentications per client (see `clientKey`) in fixed
 * windows. Beyond the spec: a client over its bound gets 429 with
 * `Retry-After` until its window ends, so a brute-force run cannot keep the
 * bcrypt pool busy. Attempts still in flight count against the bound, so
 * requests arriving at once cannot overshoot it.
 */
export class FailureThrottle {
  private readonly windows: LRUCache<string, Window>
  // Attempts admitted and not yet settled, by client; an entry lives only
  // while its client has one in flight (a plain Map: LRUCache.delete of the
  // last entry clears arrays of maxClients slots).
  private readonly inFlight = new Map<string, number>()
  private readonly maxClients: number

  readonly delayMs: number

  constructor (private readonly options: FailureThrottleOptions) {
    this.maxClients = options.maxClients ?? 100_000
    this.windows = new LRUCache({ max: this.maxClients })
    this.delayMs = options.delayMs ?? 1000
  }

  /**
   * Seconds to wait when `client` is over its bound, failures plus attempts in
   * flight, else 0; then the attempt counts as in flight, and the caller must
   * call `settle` once, however it ends.
   */
  admit (client: string, now = Date.now()): number {
    const inFlight = this.inFlight.get(client) ?? 0
    const wait = this.wait(client, inFlight, now)
    if (wait === 0) this.inFlight.set(client, inFlight + 1)
    return wait
  }

  /** Seconds `client` would wait now, as `admit` answers, without counting an attempt. */
  over (client: string, now = Date.now()): number {
    return this.wait(client, this.inFlight.get(client) ?? 0, now)
  }

  settle (client: string): void {
    const n = this.inFlight.get(client)
    if (n === undefined) return
    if (n > 1) this.inFlight.set(client, n - 1)
    else this.inFlight.delete(client)
  }

  recordFailure (client: string, now = Date.now()): void {
    const w = this.windows.get(client)
    if (w === undefined || w.resetAt <= now) {
      this.windows.set(client, { failures: 1, resetAt: now + this.options.windowMs })
    } else {
      w.failures++
    }
  }

  private wait (client: string, inFlight: number, now: number): number {
    const w = this.windows.get(client)
    const failures = w === undefined || w.resetAt <= now ? 0 : w.failures
    if (failures + inFlight < this.options.maxFailures) {
      // as many clients in flight as the table holds: a new one waits
      return inFlight === 0 && this.inFlight.size >= this.maxClients ? 1 : 0
    }
    // Over only because of attempts in flight: they end soon.
    if (w === undefined || failures < this.options.maxFailures) return 1
    return Math.max(1, Math.ceil((w.resetAt - now) / 1000))
  }
}
