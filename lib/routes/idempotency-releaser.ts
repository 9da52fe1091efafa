import type { FastifyBaseLogger } from 'fastify'
import { redactKeys } from '../keys/api-key.js'
import type { IdempotencyScope, Storage } from '../storage/storage.js'

// Waits before each background attempt, about 3 minutes in all.
export const RELEASE_RETRY_DELAYS_MS = [1000, 2000, 4000, 8000, 15_000, 30_000, 60_000, 60_000]
// Claims retried at most at once; each is three short strings and a timer.
export const MAX_PENDING_RELEASES = 10_000

interface PendingRelease {
  scope: IdempotencyScope
  key: string
  /** the map key: the claim's token, or `complete:` and the token */
  id: string
  /** true: done; false: nothing to do yet (a release that found no claim) */
  run: () => Promise<boolean>
  /** for the log line when it gives up */
  what: 'claim not released' | 'answer not stored'
  timer: NodeJS.Timeout | undefined
}

/**
 * Releases the Idempotency-Key claim of a call that started no run, so that
 * a retry with the key may run. When the claim call itself failed, the claim
 * may have been written with its answer lost, or may still land late; so a
 * release that fails, or finds nothing to release, is tried again in the
 * background a few times. The token keeps it from touching any other claim.
 * Likewise the answer of a run that started, when storing it fails: until it
 * is stored, calls with the key get 409 rather than the replay.
 */
export class IdempotencyReleaser {
  private readonly pending = new Map<string, PendingRelease>()
  private closed = false

  constructor (
    private readonly storage: Storage,
    private readonly log: FastifyBaseLogger,
    private readonly retryDelaysMs: readonly number[] = RELEASE_RETRY_DELAYS_MS,
    private readonly maxPending = MAX_PENDING_RELEASES
  ) {}

  /** Claims being retried in the background. */
  get size (): number {
    return this.pending.size
  }

  /** Tries once now, then in the background if need be. Never rejects. */
  async release (scope: IdempotencyScope, key: string, token: string): Promise<void> {
    const run = async (): Promise<boolean> => this.storage.releaseIdempotencyKey(scope, key, token)
    await this.start({ scope, key, id: token, run, what: 'claim not released', timer: undefined })
  }

  /** Stores the answer of a run that started; tries once now, then in the background if need be. Never rejects. */
  async complete (scope: IdempotencyScope, key: string, token: string, response: string): Promise<void> {
    const run = async (): Promise<boolean> => { await this.storage.completeIdempotencyKey(scope, key, response); return true }
    await this.start({ scope, key, id: `complete:${token}`, run, what: 'answer not stored', timer: undefined })
  }

  private async start (p: PendingRelease): Promise<void> {
    if (await this.attempt(p) === true || this.closed) return
    if (this.pending.size >= this.maxPending) {
      this.log.error({ endpointId: p.scope.endpointId, idempotencyKey: redactKeys(p.key) },
        'fastify-data-endpoints: too many Idempotency-Key claims to release; this key may stay held until idempotencyTtl')
      return
    }
    this.schedule(p, 0)
  }

  /** Stops the background retries after one last attempt at each. */
  async close (): Promise<void> {
    this.closed = true
    const left = [...this.pending.values()]
    this.pending.clear()
    for (const p of left) clearTimeout(p.timer)
    const outcomes = await Promise.all(left.map(async (p) => this.attempt(p)))
    const failed = outcomes.filter((o) => o instanceof Error).length
    if (failed > 0) {
      this.log.error({ claims: failed },
        'fastify-data-endpoints: Idempotency-Key claims not released, or answers not stored, at close; those keys stay held until idempotencyTtl')
    }
  }

  /** true: done; false: no such claim to release (or not yet); an Error: storage failed. */
  private async attempt (p: PendingRelease): Promise<boolean | Error> {
    try {
      return await p.run()
    } catch (err) {
      return err instanceof Error ? err : new Error(String(err))
    }
  }

  private schedule (p: PendingRelease, retry: number): void {
    this.pending.set(p.id, p)
    p.timer = setTimeout(() => { this.retry(p, retry).catch(() => {}) }, this.retryDelaysMs[retry])
    p.timer.unref()
  }

  private async retry (p: PendingRelease, retry: number): Promise<void> {
    const outcome = await this.attempt(p)
    if (this.closed) return
    if (outcome !== true && retry + 1 < this.retryDelaysMs.length) {
      this.schedule(p, retry + 1)
      return
    }
    this.pending.delete(p.id)
    // Finding nothing to the end means the claim was never written.
    if (outcome instanceof Error) {
      this.log.error({ err: outcome, endpointId: p.scope.endpointId, idempotencyKey: redactKeys(p.key) },
        `fastify-data-endpoints: Idempotency-Key ${p.what}; the key stays held until idempotencyTtl`)
    }
  }
}
