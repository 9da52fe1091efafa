import type { FastifyBaseLogger } from 'fastify'
import type { Storage, UsageBatch, UsageCount, UsageOutcome } from './storage.js'
import { addCount, bucketStart, countId, DAY_MS, HOUR_MS } from './usage-buckets.js'
import { UsageInDoubtError, type UsageFate } from './usage-in-doubt.js'

interface InDoubt { batch: UsageBatch, fate: () => Promise<UsageFate> }

function emptyBatch (): UsageBatch {
  return { calls: new Map(), lastUsed: new Map(), counts: new Map() }
}

function isEmpty (batch: UsageBatch): boolean {
  return batch.calls.size === 0 && batch.lastUsed.size === 0 && batch.counts.size === 0
}

function callsIn (batch: UsageBatch): number {
  let n = 0
  for (const c of batch.calls.values()) n += c
  return n
}

/**
 * Gathers `calls` increments, key last-used times and the hourly usage
 * history's counts in memory and writes them in one transaction per
 * interval, so a request costs no write. A failed write
 * is merged back and retried at the next flush; `close` flushes what is left.
 * A write whose outcome is unknown (UsageInDoubtError) is kept aside, and
 * nothing more is written until storage tells whether it took effect.
 */
export class UsageRecorder {
  private batch: UsageBatch = emptyBatch()
  private inDoubt: InDoubt | null = null
  private flushing: Promise<void> | null = null
  /** the batch being written now, whose bytes are not in storage yet */
  private writing: UsageBatch | null = null
  /** the `ok` count `record` added to last, in the batch it belongs to */
  private lastOk: { batch: UsageBatch, hour: number, endpointId: string, keyId: string, count: UsageCount } | null = null
  private readonly timer: NodeJS.Timeout

  constructor (
    private readonly storage: Storage,
    intervalMs: number,
    private readonly log: FastifyBaseLogger,
    /** told of every failed write (for metrics) */
    private readonly onFailure: () => void = () => {}
  ) {
    this.timer = setInterval(() => { this.flush().catch(() => {}) }, intervalMs)
    this.timer.unref()
  }

  /** A successful authentication: `calls`, the key's last use and an `ok` count. */
  record (endpointId: string, keyId: string): void {
    const now = Date.now()
    const batch = this.batch
    const { calls, lastUsed } = batch
    calls.set(endpointId, (calls.get(endpointId) ?? 0) + 1)
    // One Date per key and batch, moved forward, rather than one per request.
    const at = lastUsed.get(keyId)
    if (at === undefined) lastUsed.set(keyId, new Date(now))
    else if (at.getTime() < now) at.setTime(now)
    // The same key on the same endpoint in the same hour as the last call:
    // its count is at hand, without making its id and finding it again.
    const hour = bucketStart(now, HOUR_MS)
    const last = this.lastOk
    if (last !== null && last.batch === batch && last.hour === hour && last.endpointId === endpointId && last.keyId === keyId) {
      last.count.count++
      return
    }
    this.lastOk = { batch, hour, endpointId, keyId, count: this.count(now, endpointId, keyId, 'ok') }
  }

  /** A refused request to an endpoint that exists, for its usage history. */
  recordRefusal (endpointId: string, keyId: string | null, outcome: Exclude<UsageOutcome, 'ok'>): void {
    this.count(Date.now(), endpointId, keyId, outcome)
  }

  /**
   * Bytes a download of the key sent (DESIGN.md §4.3), added to the `ok`
   * bucket of the hour they went in, as they go: a download that runs for
   * hours counts towards each hour, and towards the key's daily quota,
   * before it ends.
   */
  recordBytes (endpointId: string, keyId: string, bytes: number): void {
    if (bytes <= 0) return
    const counted = this.bucket(Date.now(), endpointId, keyId, 'ok')
    counted.bytes = (counted.bytes ?? 0) + bytes
  }

  /** The key's bytes of the UTC day that holds `now` not yet written (this instance's only). */
  pendingBytes (keyId: string, now: number): number {
    const day = bucketStart(now, DAY_MS)
    let bytes = 0
    const add = (batch: UsageBatch): void => {
      for (const c of batch.counts.values()) {
        if (c.keyId === keyId && c.bytes !== undefined && c.hour >= day) bytes += c.bytes
      }
    }
    add(this.batch)
    if (this.inDoubt !== null) add(this.inDoubt.batch)
    if (this.writing !== null) add(this.writing)
    return bytes
  }

  /** Adds one to a count of the batch; answers that count. */
  private count (now: number, endpointId: string, keyId: string | null, outcome: UsageOutcome): UsageCount {
    const counted = this.bucket(now, endpointId, keyId, outcome)
    counted.count++
    return counted
  }

  /** The batch's count for the hour of `now`, made (at 0) if it has none yet. */
  private bucket (now: number, endpointId: string, keyId: string | null, outcome: UsageOutcome): UsageCount {
    const hour = bucketStart(now, HOUR_MS)
    const id = countId(hour, endpointId, keyId, outcome)
    let counted = this.batch.counts.get(id)
    if (counted === undefined) this.batch.counts.set(id, counted = { hour, endpointId, keyId, outcome, count: 0 })
    return counted
  }

  /** Number of increments not yet written. */
  get pendingCalls (): number {
    return callsIn(this.batch)
  }

  /** Number of increments whose write may or may not have taken effect. */
  get inDoubtCalls (): number {
    return this.inDoubt === null ? 0 : callsIn(this.inDoubt.batch)
  }

  /** Writes everything gathered so far. Rejects if storage fails; what was not written is kept for the next flush. */
  async flush (): Promise<void> {
    // One write at a time; a flush asked for during a write runs after it.
    while (this.flushing !== null) await this.flushing.catch(() => {})
    if (this.inDoubt === null && isEmpty(this.batch)) return
    this.flushing = this.write().finally(() => { this.flushing = null })
    return this.flushing
  }

  private async write (): Promise<void> {
    if (this.inDoubt !== null) await this.settle(this.inDoubt)
    if (isEmpty(this.batch)) return
    const batch = this.batch
    this.batch = emptyBatch()
    this.writing = batch
    try {
      await this.storage.applyUsage(batch)
    } catch (err) {
      this.onFailure()
      if (err instanceof UsageInDoubtError) {
        this.inDoubt = { batch, fate: err.fate }
        this.log.error({ err }, 'fastify-data-endpoints: usage counters perhaps not written, will find out before retrying')
      } else {
        this.mergeBack(batch)
        this.log.error({ err }, 'fastify-data-endpoints: usage counters not written, will retry')
      }
      throw err
    } finally {
      this.writing = null
    }
  }

  /** Learns what became of the batch in doubt; rejects, keeping it, while that cannot be known. */
  private async settle (inDoubt: InDoubt): Promise<void> {
    let fate: UsageFate
    try {
      fate = await inDoubt.fate()
    } catch (err) {
      this.log.error({ err, inDoubtCalls: callsIn(inDoubt.batch) }, 'fastify-data-endpoints: whether usage counters were written is not known yet, will ask again')
      throw err
    }
    this.inDoubt = null
    if (fate === 'not written') this.mergeBack(inDoubt.batch)
    // Writing it again could count it twice: better a loss that is logged.
    if (fate === 'unknowable') this.log.error({ lostCalls: callsIn(inDoubt.batch) }, 'fastify-data-endpoints: usage counters whose write cannot be confirmed are not written again')
  }

  private mergeBack (failed: UsageBatch): void {
    for (const [id, n] of failed.calls) this.batch.calls.set(id, (this.batch.calls.get(id) ?? 0) + n)
    for (const [id, at] of failed.lastUsed) {
      const newer = this.batch.lastUsed.get(id)
      if (newer === undefined || newer < at) this.batch.lastUsed.set(id, at)
    }
    for (const [id, c] of failed.counts) {
      const seen = this.batch.counts.get(id)
      if (seen === undefined) this.batch.counts.set(id, c)
      else addCount(seen, c)
    }
  }

  /** Stops the timer and flushes, retrying a few times before giving up loudly. */
  async close (attempts = 5, retryDelayMs = 200): Promise<void> {
    clearInterval(this.timer)
    for (let attempt = 1; ; attempt++) {
      try {
        await this.flush()
        return
      } catch (err) {
        if (attempt >= attempts) {
          this.log.error({ lostCalls: this.pendingCalls, inDoubtCalls: this.inDoubtCalls }, 'fastify-data-endpoints: usage counters lost at close')
          throw err
        }
        await new Promise((resolve) => setTimeout(resolve, retryDelayMs * attempt))
      }
    }
  }
}
