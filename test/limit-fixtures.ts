import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import type { Dataset, DatasetSource, ResourceRef, Row } from '../lib/index.js'
import { ADMIN } from './helper.js'

// Parts shared by the tests of per-key limits (DESIGN.md §4.3).

export const P = '/api-keys/acme/shop'

/** A key made with these limits through the management API. */
export async function limitedKey (app: FastifyInstance, limits: Record<string, number | null>, purpose = 'limited'): Promise<{ id: string, key: string }> {
  const res = await app.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose, limits } })
  if (res.statusCode !== 201) throw new Error(`limitedKey: ${res.statusCode} ${res.body}`)
  return res.json()
}

/**
 * Waits, if need be, until a new UTC minute has at least `seconds` left, so
 * that a test's requests fall in one window of `requestsPerMinute`.
 */
export async function freshMinute (seconds = 20): Promise<void> {
  const left = 60_000 - (Date.now() % 60_000)
  if (left < seconds * 1000) await sleep(left + 50)
}

/**
 * Dataset 2 of acme/shop model 1: `gated`, one entity whose rows come in
 * pages of `pageRows`; after its first page each download waits for the
 * test to `finish()` (its rows end) or `fail()` (the source throws), so
 * that a download stays in progress for as long as a test needs.
 */
export class GatedDatasets implements DatasetSource {
  private gates: Array<{ resolve: () => void, reject: (err: Error) => void }> = []
  /** downloads whose first page has been read */
  started = 0

  constructor (private readonly inner: DatasetSource, private readonly pageRows = 2000) {}

  async getDataset (ref: ResourceRef): Promise<Dataset | null> {
    if (ref.resourceSequence !== 2) return this.inner.getDataset(ref)
    const self = this
    const pageRows = this.pageRows
    return {
      name: 'gated',
      entities: [{ name: 'items', columns: [{ name: 'id', type: 'integer' }, { name: 'text', type: 'text' }] }],
      async * rows () {
        for (let i = 0; i < pageRows; i++) yield [i, 'x'.repeat(100)] as Row
        self.started++
        await new Promise<void>((resolve, reject) => { self.gates.push({ resolve, reject }) })
        yield [-1, 'last'] as Row
      }
    }
  }

  /** Ends every download waiting at its gate. */
  finish (): void {
    for (const g of this.gates.splice(0)) g.resolve()
  }

  /** Fails every download waiting at its gate. */
  fail (): void {
    for (const g of this.gates.splice(0)) g.reject(new Error('the source failed'))
  }

  /** Waits until `n` downloads have read their first page. */
  async whenStarted (n: number): Promise<void> {
    for (let i = 0; i < 2000 && this.started < n; i++) await sleep(10)
    if (this.started < n) throw new Error(`only ${this.started} of ${n} downloads started`)
  }
}

export const GATED_URL = '/api/acme/shop/model/1/dataset/2'

/** Retries `probe` until it answers true, a bounded number of times (an asynchronous release takes a few turns). */
export async function eventually (probe: () => Promise<boolean>, tries = 200): Promise<boolean> {
  for (let i = 0; i < tries; i++) {
    if (await probe()) return true
    await sleep(20)
  }
  return false
}
