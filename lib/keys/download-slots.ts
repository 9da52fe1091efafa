import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { DownloadSlot, Storage } from '../storage/storage.js'

/**
 * The download slots this instance holds for keys with a
 * `concurrentDownloads` limit (DESIGN.md §4.3). A slot is a row in storage
 * held by a lease: it ends `leaseMs` after its last renewal, so the slot of
 * an instance that crashed (a kill -9 runs no close) is free again within
 * `leaseMs`. While a download runs its lease is renewed every third of
 * `leaseMs`, all this instance's leases in one write. A slot is freed when
 * its response closes, whichever way it ends, and at close.
 */
export class DownloadSlots {
  private readonly held = new Map<string, DownloadSlot>()
  private readonly releasing = new Set<Promise<void>>()
  private readonly timer: NodeJS.Timeout
  private renewing: Promise<void> | null = null

  constructor (
    private readonly storage: Storage,
    private readonly leaseMs: number,
    private readonly log: FastifyBaseLogger
  ) {
    this.timer = setInterval(() => { void this.renew() }, Math.max(1, Math.floor(leaseMs / 3)))
    this.timer.unref()
  }

  /** Slots held here now. */
  get size (): number {
    return this.held.size
  }

  /** One of the key's `limit` slots, or null when all are held (here or elsewhere). */
  async claim (keyId: string, limit: number): Promise<DownloadSlot | null> {
    const leaseId = randomUUID()
    const now = Date.now()
    const slot = await this.storage.claimDownloadSlot(keyId, limit, leaseId, now, now + this.leaseMs)
    if (slot === null) return null
    const held = { keyId, slot, leaseId }
    this.held.set(leaseId, held)
    return held
  }

  /** Frees a slot (once; later calls do nothing). A failed write leaves it to its lease. */
  release (slot: DownloadSlot): void {
    if (!this.held.delete(slot.leaseId)) return
    const released = this.storage.releaseDownloadSlot(slot).catch((err: unknown) => {
      this.log.warn({ err }, 'fastify-data-endpoints: a download slot could not be freed; its lease ends it')
    }).finally(() => { this.releasing.delete(released) })
    this.releasing.add(released)
  }

  private async renew (): Promise<void> {
    if (this.held.size === 0 || this.renewing !== null) return
    this.renewing = this.storage.renewDownloadSlots([...this.held.values()], Date.now() + this.leaseMs)
      .catch((err: unknown) => {
        this.log.warn({ err, slots: this.held.size }, 'fastify-data-endpoints: download slots could not be renewed; will try again')
      })
      .finally(() => { this.renewing = null })
    await this.renewing
  }

  /** Stops renewing and frees every slot still held; waits for the frees under way. */
  async close (): Promise<void> {
    clearInterval(this.timer)
    await this.renewing
    for (const slot of [...this.held.values()]) this.release(slot)
    await Promise.all([...this.releasing])
  }
}
