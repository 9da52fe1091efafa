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

/**
 * Calls `sent` with the body bytes each write hands to the connection while
 * it is open and the status is a success: after compression, without the
 * chunked framing. A client that leaves stops the count (writes to a
 * destroyed response go nowhere).
 */
function countBodyBytes (raw: ServerResponse, sent: (bytes: number) => void): void {
  const write = raw.write
  const end = raw.end
  // An `end` that writes its chunk through `write` (light-my-request's does) counts it once.
  let ending = false
  const count = (chunk: unknown): void => {
    if (ending || chunk === undefined || chunk === null || typeof chunk === 'function' || raw.destroyed || raw.statusCode >= 400) return
    const n = byteLength(chunk)
    if (n > 0) sent(n)
  }
  raw.write = function (this: ServerResponse, chunk: unknown, ...rest: unknown[]) {
    count(chunk)
    return (write as (...args: unknown[]) => boolean).call(this, chunk, ...rest)
  } as ServerResponse['write']
  raw.end = function (this: ServerResponse, chunk?: unknown, ...rest: unknown[]) {
    count(chunk)
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
   * sent bytes are counted in the key's usage, and which holds one of the
   * key's download slots until its response closes.
   *
   * In order: `requestsPerMinute` (a call of the key counts in its minute,
   * unless this limit refuses it), then `bytesPerDay` (a download starts
   * while the day's bytes are below the quota), then `concurrentDownloads`.
   * A key with no limit costs one comparison and no storage call.
   */
  async admit (reply: FastifyReply, call: LimitedCall, download: boolean): Promise<void> {
    const { usage } = this.parts
    const { limits } = call
    if (limits !== null) {
      const now = Date.now()
      if (limits.requestsPerMinute !== null) await this.takeRequest(reply, call, limits.requestsPerMinute, now)
      if (download && limits.bytesPerDay !== null) {
        const bytes = call.bytesToday + usage.pendingBytes(call.keyId, now)
        if (bytes >= limits.bytesPerDay) {
          this.refuse(call, 'bytesPerDay', new DailyQuotaError(), secondsUntil(bucketStart(now, DAY_MS) + DAY_MS, now))
        }
      }
      if (download && limits.concurrentDownloads !== null) await this.holdSlot(reply, call, limits.concurrentDownloads)
    }
    if (download) countBodyBytes(reply.raw, (bytes) => { usage.recordBytes(call.endpointId, call.keyId, bytes) })
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
