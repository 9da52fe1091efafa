import type { FastifyBaseLogger } from 'fastify'
import type { Storage } from './storage.js'
import { DAY_MS, HOUR_MS } from './usage-buckets.js'

/** How long an expired download link stays listed (and its row kept) before it is deleted. */
export const EXPIRED_LINK_RETENTION_MS = 30 * DAY_MS

export interface HousekeepingOptions {
  /** usage history older than this is deleted (ms) */
  usageRetention: number
  /** audit entries older than this are deleted (ms) */
  auditRetention: number
  /** Idempotency-Key records older than this are deleted, answered or held (ms) */
  idempotencyTtl: number
}

/**
 * Deletes what storage keeps only for a while, in the background: usage
 * history and audit entries past their retention, Idempotency-Key
 * records past their ttl (a claim whose answer never came would otherwise
 * stay for good), and download links 30 days after they expired. Once soon after start, then every hour. Each instance of a
 * multi-instance deployment does so; deleting rows another instance has
 * just deleted is harmless. A failure is logged and tried again an hour later.
 */
export class Housekeeping {
  private readonly first: NodeJS.Timeout
  private readonly timer: NodeJS.Timeout
  private running: Promise<void> | null = null
  private closed = false

  constructor (
    private readonly storage: Storage,
    private readonly options: HousekeepingOptions,
    private readonly log: FastifyBaseLogger
  ) {
    this.first = setTimeout(() => { void this.run() }, 0).unref()
    this.timer = setInterval(() => { void this.run() }, HOUR_MS).unref()
  }

  /** One pass over every kind of record; never rejects. */
  run (): Promise<void> {
    if (this.closed) return Promise.resolve()
    this.running ??= this.pass().finally(() => { this.running = null })
    return this.running
  }

  private async pass (): Promise<void> {
    const now = Date.now()
    const { storage, options } = this
    await this.prune('usage history', async () => storage.pruneUsage(new Date(now - options.usageRetention)))
    await this.prune('audit entries', async () => storage.pruneAudit(new Date(now - options.auditRetention)))
    await this.prune('Idempotency-Key records', async () => storage.pruneIdempotencyKeys(new Date(now - options.idempotencyTtl)))
    await this.prune('expired download links', async () => storage.pruneLinks(new Date(now - EXPIRED_LINK_RETENTION_MS)))
  }

  private async prune (what: string, remove: () => Promise<number>): Promise<void> {
    try {
      const deleted = await remove()
      if (deleted > 0) this.log.info({ deleted }, `fastify-data-endpoints: old ${what} deleted`)
    } catch (err) {
      this.log.error({ err }, `fastify-data-endpoints: old ${what} not deleted, will try again`)
    }
  }

  /** Stops the timers and waits for a pass under way, so that storage can close after it. */
  async close (): Promise<void> {
    this.closed = true
    clearTimeout(this.first)
    clearInterval(this.timer)
    await this.running
  }
}
