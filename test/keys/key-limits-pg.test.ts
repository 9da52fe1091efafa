import { spawn } from 'node:child_process'
import { once } from 'node:events'
import t, { type Test } from 'tap'
import type { DataEndpointsOptions } from '../../lib/index.js'
import { PgStorage } from '../../lib/storage/pg-storage.js'
import { ROOT } from '../example-process.js'
import { MemoryDatasets, SALES_REF, salesDataset } from '../fixtures.js'
import { ADMIN, assignKeys, buildApp, DATASET_URL, inParallel, type TestApp } from '../helper.js'
import { eventually, freshMinute, GATED_URL, GatedDatasets, limitedKey, P } from '../limit-fixtures.js'
import { freshSchema, pgAvailable } from '../pg.js'

// Per-key limits (DESIGN.md §4.3) on two instances sharing one PostgreSQL
// schema: each limit at its boundary across both, and a slot whose instance
// was killed (SIGKILL: no close runs) freed by its lease.

const url = await pgAvailable(t)

async function twoInstances (t: Test, options: Partial<DataEndpointsOptions> = {}): Promise<[TestApp, TestApp, string]> {
  const schema = (await freshSchema(t, url as string)).schema
  const open = (): PgStorage => new PgStorage({ connectionString: url as string, schema, poolSize: 5 })
  const a = await buildApp(t, { storage: open(), ...options }, { forceCloseConnections: true })
  const b = await buildApp(t, { storage: open(), ...options }, { forceCloseConnections: true })
  return [a, b, schema]
}

if (url !== null) {
  t.test('requestsPerMinute 100: 300 attempts spread over two instances get 100 to 105 successes', async (t) => {
    const [a, b] = await twoInstances(t)
    const k = await limitedKey(a.app, { requestsPerMinute: 100 })
    await assignKeys(a.app, 'dataset', [k.id])
    // Each instance has verified the key once (bcrypt), outside the minute counted.
    await freshMinute(40)
    const answers = await inParallel(24, Array.from({ length: 300 }, (_, i) => async () => {
      const res = await (i % 2 === 0 ? a : b).app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })
      return { status: res.statusCode, message: res.statusCode === 200 ? '' : res.json().message, rateLimit: String(res.headers.ratelimit) }
    }))
    const ok = answers.filter((r) => r.status === 200).length
    t.ok(ok >= 100 && ok <= 105, `${ok} successes`)
    t.equal(ok, 100, 'in fact exact: one atomic upsert per call')
    t.same(new Set(answers.filter((r) => r.status !== 200).map((r) => `${r.status} ${r.message}`)), new Set(['429 Rate limit exceeded']))
    t.ok(answers.filter((r) => r.status === 429).every((r) => /^"minute";r=0;t=\d+$/.test(r.rateLimit)), 'refusals say r=0')

    await Promise.all([a.app.dataEndpoints.flushUsage(), b.app.dataEndpoints.flushUsage()])
    const endpoints = (await a.app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json() as Array<{ calls: number }>
    t.equal(endpoints[0].calls, 100, 'calls: the admitted ones only')
    const from = new Date(Date.now() - 3600_000).toISOString()
    const to = new Date(Date.now() + 3600_000).toISOString()
    const rows = (await b.app.inject({ url: `${P}/usage`, query: { granularity: 'day', from, to, keyId: k.id }, headers: ADMIN })).json().rows as Array<{ outcome: string, count: number }>
    t.equal(rows.filter((r) => r.outcome === 'rate_limited').reduce((n, r) => n + r.count, 0), 200, 'every refusal counted, on both instances')
  })

  t.test('concurrentDownloads 3: ten downloads at once over two instances, three run', async (t) => {
    const datasets = new GatedDatasets(new MemoryDatasets().add(SALES_REF, salesDataset()))
    const [a, b] = await twoInstances(t, { datasets, compression: false })
    const k = await limitedKey(a.app, { concurrentDownloads: 3 })
    await assignKeys(a.app, 'dataset', [k.id], 2)
    await assignKeys(a.app, 'dataset', [k.id], 1)
    const bases = [await a.app.listen({ port: 0, host: '127.0.0.1' }), await b.app.listen({ port: 0, host: '127.0.0.1' })]
    const controller = new AbortController()
    const answers = await Promise.all(Array.from({ length: 10 }, async (_, i) =>
      await fetch(`${bases[i % 2]}${GATED_URL}?api_key=${k.key}&format=csv`, { signal: controller.signal })))
    const statuses = answers.map((r) => r.status)
    t.equal(statuses.filter((s) => s === 200).length, 3, `statuses ${statuses.join(' ')}`)
    t.equal(statuses.filter((s) => s === 429).length, 7)
    await datasets.whenStarted(3)
    const probe = async (base: string): Promise<number> => (await fetch(`${base}${DATASET_URL}?api_key=${k.key}&meta=entities`)).status
    t.same([await probe(bases[0]), await probe(bases[1])], [429, 429], 'both refuse while three run')
    datasets.finish()
    for (const r of answers) if (r.status === 200) await r.text()
    t.ok(await eventually(async () => await probe(bases[1]) === 200), 'ended: their slots are free on both')
    controller.abort()
  })

  t.test('bytesPerDay: the bytes one instance wrote count on the other', async (t) => {
    const [a, b] = await twoInstances(t, { compression: false })
    const k = await limitedKey(a.app, { bytesPerDay: 100 })
    await assignKeys(a.app, 'dataset', [k.id])
    const first = await a.app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })
    t.equal(first.statusCode, 200)
    t.equal((await a.app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })).statusCode, 429, 'A counts its own unwritten bytes')
    await a.app.dataEndpoints.flushUsage()
    const refused = await b.app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })
    t.equal(refused.statusCode, 429)
    t.same(refused.json(), { message: 'Daily download quota exceeded' })
    const from = new Date(Date.now() - 86_400_000).toISOString()
    const to = new Date(Date.now() + 86_400_000).toISOString()
    const rows = (await b.app.inject({ url: `${P}/usage`, query: { granularity: 'day', from, to, keyId: k.id }, headers: ADMIN })).json().rows as Array<{ outcome: string, bytes: number }>
    t.equal(rows.filter((r) => r.outcome === 'ok').reduce((n, r) => n + r.bytes, 0), first.rawPayload.byteLength, 'usage bytes: what was sent')
  })

  t.test('the slot of an instance killed with SIGKILL frees itself when its lease ends', async (t) => {
    const schema = (await freshSchema(t, url)).schema
    const storage = new PgStorage({ connectionString: url, schema })
    t.teardown(() => storage.close())
    const key = await storage.createKey({ organization: 'acme', project: 'shop', prefix: 'Slotholder', hash: 'x', purpose: 'p', isActive: true, expiresAt: null, limits: { requestsPerMinute: null, concurrentDownloads: 1, bytesPerDay: null } }, { actor: null })
    const leaseMs = 1500
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/keys/slot-holder.ts', url, schema, key.id, String(leaseMs)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
    t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
    const [line] = await once(child.stdout, 'data') as [Buffer]
    t.match(line.toString(), /^held /, 'the child holds the key\'s one slot')
    const claim = async (): Promise<number | null> => await storage.claimDownloadSlot(key.id, 1, 'parent', Date.now(), Date.now() + 60_000)

    // Alive past two whole leases: its renewals keep the slot.
    const until = Date.now() + 2 * leaseMs + 500
    while (Date.now() < until) {
      t.equal(await claim(), null, 'held while its instance lives')
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
    child.kill('SIGKILL')
    await once(child, 'exit')
    const { rows } = await storage.pool.query<{ expires_at: string }>(`SELECT expires_at FROM "${schema}".download_slots WHERE key_id = $1`, [key.id])
    const expiresAt = Number(rows[0].expires_at)
    let freedAt = 0
    t.ok(await eventually(async () => {
      const slot = await claim()
      if (slot !== null) freedAt = Date.now()
      return slot !== null
    }, 500), 'free again once the lease ends')
    t.ok(freedAt >= expiresAt, 'not before its lease ended')
  })
}
