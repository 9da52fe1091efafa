import type { ServerResponse } from 'node:http'
import type { FastifyReply } from 'fastify'
import { DailyQuotaError, RateLimitedError, TooManyDownloadsError, withDetails } from '../errors.js'
import type { PluginMetrics } from '../metrics.js'
import type { KeyLimits, Storage } from '../storage/storage.js'
import { bucketStart, DAY_MS } from '../storage/usage-buckets.js'
import type { UsageRecorder } from '../storage/usage-recorder.js'
import type { DownloadSlots } from './download-slots.js'

export type LimitName = keyof KeyLimits

const MINUTE_MS = 60_000
/** what a refusal for concurrency tells to wait: a slot frees when a download ends, which nobody can foretell */
const SLOT_RETRY_SECONDS = 1
/**
 * The policy's name in the RateLimit fields of
 * draft-ietf-httpapi-ratelimit-headers-11 (docs/design-decisions.md).
 */
const POLICY = 'minute'

/** A verified call, as the limits see it: the lookup's key, with its limits and bytes of the day. */
export interface LimitedCall {
  endpointId: string
  keyId: string
  /** null: the key has no limit */
  limits: KeyLimits | null
  /** with a bytesPerDay limit, the key's bytes of the UTC day as stored */
  bytesToday: number
}

function secondsUntil (ms: number, now: number): number {
  return Math.max(1, Math.ceil((ms - now) / 1000))
}

function byteLength (chunk: unknown): number {
  if (typeof chunk === 'string') return Buffer.byteLength(chunk)
  return chunk instanceof Uint8Array ? chunk.byteLength : 0
}

/** Bytes gathered before they are reported, so that a long download counts towards its hour and quota as it goes. */
const REPORT_BYTES = 256 * 1024

/**
 * Calls `sent` with the body bytes the writes hand to the connection while
 * it is open and the status is a success: after compression, without the
 * chunked framing; every REPORT_BYTES, at the end, and when the response
 * closes. A client that leaves stops the count (writes to a destroyed
 * response go nowhere).
 */
function countBodyBytes (raw: ServerResponse, sent: (bytes: number) => void): void {
  const write = raw.write
  const end = raw.end
  // An `end` that writes its chunk through `write` (light-my-request's does) counts it once.
  let ending = false
  let gathered = 0
  const report = (): void => {
    if (gathered > 0) sent(gathered)
    gathered = 0
  }
  const count = (chunk: unknown): void => {
    if (ending || chunk === undefined || chunk === null || typeof chunk === 'function' || raw.destroyed || raw.statusCode >= 400) return
    gathered += byteLength(chunk)
    if (gathered >= REPORT_BYTES) report()
  }
  raw.once('close', report)
  raw.write = function (this: ServerResponse, chunk: unknown, ...rest: unknown[]) {
    count(chunk)
    return (write as (...args: unknown[]) => boolean).call(this, chunk, ...rest)
  } as ServerResponse['write']
  raw.end = function (this: ServerResponse, chunk?: unknown, ...rest: unknown[]) {
    count(chunk)
    report()
    ending = true
    try {
      return (end as (...args: unknown[]) => ServerResponse).call(this, chunk, ...rest)
    } finally {
      ending = false
    }
  } as ServerResponse['end']
}

export interface KeyLimiterParts {
  storage: Storage
  usage: UsageRecorder
  slots: DownloadSlots
  metrics: PluginMetrics | null
}

/**
 * Per-key limits (DESIGN.md §4.3), checked once the key is verified (§2
 * step 5) and before the call counts (step 6). `admit` is the one check:
 * the data routes call it, and so must any other route that uses a key's
 * calls (download links).
 */
export class KeyLimiter {
  constructor (private readonly parts: KeyLimiterParts) {}

  /**
   * Admits a verified call or throws a 429 catalogue error with
   * `Retry-After`, after counting the refusal (usage outcome `rate_limited`,
   * metric `data_endpoints_limited_total`). `download`: a dataset GET, whose
   * sent bytes a key with limits counts in its usage, and which holds one of the
   * key's download slots until its response closes.
   *
   * In order: `requestsPerMinute` (a call of the key counts in its minute,
   * unless this limit refuses it), then `bytesPerDay` (a download starts
   * while the day's bytes are below the quota), then `concurrentDownloads`.
   * A key with no limit costs one comparison and no storage call, and
   * nothing to wait for: `admit` then answers undefined, not a promise.
   */
  admit (reply: FastifyReply, call: LimitedCall, download: boolean): Promise<void> | undefined {
    if (call.limits === null) return undefined
    // Bytes are counted for keys with limits only: counting every write of
    // every download cost keys without limits some 8% of meta=entities
    // throughput (docs/benchmarks.md).
    const { usage } = this.parts
    if (download) countBodyBytes(reply.raw, (bytes) => { usage.recordBytes(call.endpointId, call.keyId, bytes) })
    return this.check(reply, call, call.limits, download)
  }

  private async check (reply: FastifyReply, call: LimitedCall, limits: KeyLimits, download: boolean): Promise<void> {
    const now = Date.now()
    if (limits.requestsPerMinute !== null) await this.takeRequest(reply, call, limits.requestsPerMinute, now)
    if (download && limits.bytesPerDay !== null) {
      const bytes = call.bytesToday + this.parts.usage.pendingBytes(call.keyId, now)
      if (bytes >= limits.bytesPerDay) {
        this.refuse(call, 'bytesPerDay', new DailyQuotaError(), secondsUntil(bucketStart(now, DAY_MS) + DAY_MS, now))
      }
    }
    if (download && limits.concurrentDownloads !== null) await this.holdSlot(reply, call, limits.concurrentDownloads)
  }

  private async takeRequest (reply: FastifyReply, call: LimitedCall, limit: number, now: number): Promise<void> {
    const windowStart = bucketStart(now, MINUTE_MS)
    const reset = secondsUntil(windowStart + MINUTE_MS, now)
    const count = await this.parts.storage.takeRequest(call.keyId, windowStart, limit)
    // The fields of draft-ietf-httpapi-ratelimit-headers-11 §3 and §4.
    reply.header('ratelimit-policy', `"${POLICY}";q=${limit};w=60`)
    reply.header('ratelimit', `"${POLICY}";r=${count === null ? 0 : Math.max(0, limit - count)};t=${reset}`)
    if (count === null) this.refuse(call, 'requestsPerMinute', new RateLimitedError(), reset)
  }

  private async holdSlot (reply: FastifyReply, call: LimitedCall, limit: number): Promise<void> {
    const { slots } = this.parts
    const slot = await slots.claim(call.keyId, limit)
    if (slot === null) this.refuse(call, 'concurrentDownloads', new TooManyDownloadsError(), SLOT_RETRY_SECONDS)
    // 'close' comes however the response ends: sent, the client gone, an
    // error, the server closing; unless it came while the slot was claimed.
    if (reply.raw.destroyed || reply.raw.writableFinished) slots.release(slot)
    else reply.raw.once('close', () => { slots.release(slot) })
  }

  private refuse (call: LimitedCall, limit: LimitName, error: Error, retryAfter: number): never {
    this.parts.usage.recordRefusal(call.endpointId, call.keyId, 'rate_limited')
    this.parts.metrics?.limited(limit)
    throw withDetails(error, { headers: { 'retry-after': String(retryAfter) } })
  }
}
