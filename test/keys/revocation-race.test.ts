import { mkdtempSync, rmSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import t, { type Test } from 'tap'
import { PgStorage, SqliteStorage } from '../../lib/index.js'
import { ADMIN, buildApp, DATASET_URL, type TestApp } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'

// Keys deleted, regenerated and disabled while traffic runs (issue 6): no
// request sent after the revoking management call returned authenticates with
// the old value, on any instance. Clients and controller share one clock
// (performance.now() in this process): a data request records when it was
// sent, the controller when its call returned.

const P = '/api-keys/acme/shop'

interface Sent { value: string, sentAt: number, status: number, message?: string }
interface Revoked { at: number, messages: string[] }

async function listen (app: TestApp['app']): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' })
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
}

/**
 * Runs `loops` clients against `bases` while `rounds` revocations go through
 * `manager`; returns what the clients saw and when each value was revoked.
 */
async function race (manager: string, bases: string[], { loops = 8, rounds = 15, slots = 3 } = {}): Promise<{ sent: Sent[], revoked: Map<string, Revoked> }> {
  const call = async (method: string, path: string, body?: unknown): Promise<any> => {
    const res = await fetch(`${manager}${P}${path}`, {
      method,
      headers: { ...ADMIN, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body)
    })
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`)
    return res.status === 204 ? null : res.json()
  }
  const live: Array<{ id: string, key: string }> = []
  for (let i = 0; i < slots; i++) live.push(await call('POST', '/keys', { purpose: `slot ${i}` }))
  await call('PUT', '/endpoints/1/dataset/1', { keyIds: live.map((k) => k.id) })

  const revoked = new Map<string, Revoked>()
  const everIssued: string[] = live.map((k) => k.key)
  const sent: Sent[] = []
  let stop = false
  const client = async (n: number): Promise<void> => {
    for (let i = 0; !stop; i++) {
      // Mostly keys in use; a third of the time one already revoked (or about to be).
      const pool = i % 3 === 0 ? everIssued : live.map((k) => k.key)
      const value = pool[(n * 7 + i) % pool.length]
      const sentAt = performance.now()
      const res = await fetch(`${bases[(n + i) % bases.length]}${DATASET_URL}?meta=entities`, { headers: { authorization: `Bearer ${value}` } })
      const body = await res.json() as { message?: string }
      sent.push({ value, sentAt, status: res.status, message: body.message })
    }
  }
  const clients = Array.from({ length: loops }, async (_, n) => client(n))

  for (let round = 0; round < rounds; round++) {
    await new Promise((resolve) => setTimeout(resolve, 40))
    const slot = round % slots
    const old = live[slot]
    if (round % 3 === 0) {
      const renewed = await call('POST', `/keys/${old.id}/regenerate`)
      revoked.set(old.key, { at: performance.now(), messages: ['Unknown API key'] })
      live[slot] = { id: old.id, key: renewed.key }
    } else {
      if (round % 3 === 1) {
        await call('DELETE', `/keys/${old.id}`)
        revoked.set(old.key, { at: performance.now(), messages: ['Unknown API key'] })
      } else {
        // Disabled, then unassigned by the PUT below: either refusal is right.
        await call('PATCH', `/keys/${old.id}`, { isActive: false })
        revoked.set(old.key, { at: performance.now(), messages: ['Disabled API key', 'Unknown API key'] })
      }
      // The slot's new key goes to the clients once it is assigned.
      const fresh = await call('POST', '/keys', { purpose: `slot ${slot}, round ${round}` })
      await call('PUT', '/endpoints/1/dataset/1', { keyIds: [...live.filter((_, i) => i !== slot).map((k) => k.id), fresh.id] })
      live[slot] = fresh
    }
    everIssued.push(live[slot].key)
  }
  // Let the clients try the last revoked values a few more times.
  await new Promise((resolve) => setTimeout(resolve, 100))
  stop = true
  await Promise.all(clients)
  return { sent, revoked }
}

function checkRace (t: Test, { sent, revoked }: Awaited<ReturnType<typeof race>>): void {
  const after = sent.filter((s) => { const r = revoked.get(s.value); return r !== undefined && s.sentAt > r.at })
  const before = sent.filter((s) => { const r = revoked.get(s.value); return r !== undefined && s.sentAt <= r.at })
  t.ok(after.length > 0, `${after.length} requests used a value after its revocation returned`)
  t.ok(before.some((s) => s.status === 200), `${before.filter((s) => s.status === 200).length} used it with success before`)
  t.same(after.filter((s) => s.status === 200), [], 'none of them authenticated')
  t.same(after.filter((s) => s.status !== 403 || !(revoked.get(s.value)?.messages ?? []).includes(s.message ?? '')).map((s) => [s.status, s.message]), [],
    'each got 403 Unknown API key (deleted, regenerated) or Disabled API key (disabled)')
  const live = sent.filter((s) => !revoked.has(s.value))
  t.ok(live.length > 0 && live.every((s) => s.status === 200), `the ${live.length} requests with values never revoked all succeeded`)
}

t.test('SQLite: no request sent after a revocation returned authenticates with the old value', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'fde-race-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  // failureThrottle off: the refusals are what the test is after, not 429s.
  const { app } = await buildApp(t, { storage: new SqliteStorage({ filename: join(dir, 'store.db') }), failureThrottle: false })
  const base = await listen(app)
  checkRace(t, await race(base, [base]))
})

t.test('PostgreSQL, two instances: a revocation on A holds on B at once', async (t) => {
  const url = await pgAvailable(t)
  if (url === null) return
  const { schema } = await freshSchema(t, url)
  const open = (): PgStorage => new PgStorage({ connectionString: url, schema, poolSize: 5 })
  const a = await buildApp(t, { storage: open(), failureThrottle: false })
  const b = await buildApp(t, { storage: open(), failureThrottle: false })
  const baseA = await listen(a.app)
  const baseB = await listen(b.app)
  checkRace(t, await race(baseA, [baseA, baseB]))
})
