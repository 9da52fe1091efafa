import type { FastifyBaseLogger } from 'fastify'
import type { Storage, UsageBatch } from './storage.js'

/**
 * Gathers `calls` increments and key last-used times in memory and writes them
 * in one transaction per interval, so a request costs no write. A failed write
 * is merged back and retried at the next flush; `close` flushes what is left.
 */
export class UsageRecorder {
  private batch: UsageBatch = { calls: new Map(), lastUsed: new Map() }
  private flushing: Promise<void> | null = null
  private readonly timer: NodeJS.Timeout

  constructor (
    private readonly storage: Storage,
    intervalMs: number,
    private readonly log: FastifyBaseLogger
  ) {
    this.timer = setInterval(() => { this.flush().catch(() => {}) }, intervalMs)
    this.timer.unref()
  }

  record (endpointId: string, keyId: string): void {
    const { calls, lastUsed } = this.batch
    calls.set(endpointId, (calls.get(endpointId) ?? 0) + 1)
    lastUsed.set(keyId, new Date())
  }

  /** Number of increments not yet written. */
  get pendingCalls (): number {
    let n = 0
    for (const c of this.batch.calls.values()) n += c
    return n
  }

  /** Writes everything gathered so far. Rejects (after merging back) if storage fails. */
  async flush (): Promise<void> {
    // One write at a time; a flush asked for during a write runs after it.
    while (this.flushing !== null) await this.flushing.catch(() => {})
    if (this.batch.calls.size === 0 && this.batch.lastUsed.size === 0) return
    const batch = this.batch
    this.batch = { calls: new Map(), lastUsed: new Map() }
    this.flushing = this.storage.applyUsage(batch).catch((err: unknown) => {
      this.mergeBack(batch)
      this.log.error({ err }, 'fastify-data-endpoints: usage counters not written, will retry')
      throw err
    }).finally(() => { this.flushing = null })
    return this.flushing
  }

  private mergeBack (failed: UsageBatch): void {
    for (const [id, n] of failed.calls) this.batch.calls.set(id, (this.batch.calls.get(id) ?? 0) + n)
    for (const [id, at] of failed.lastUsed) {
      const newer = this.batch.lastUsed.get(id)
      if (newer === undefined || newer < at) this.batch.lastUsed.set(id, at)
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
          this.log.error({ lostCalls: this.pendingCalls }, 'fastify-data-endpoints: usage counters lost at close')
          throw err
        }
        await new Promise((resolve) => setTimeout(resolve, retryDelayMs * attempt))
      }
    }
  }
}
