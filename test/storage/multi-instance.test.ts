import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import type { DataEndpointsOptions, PipelineRunner } from '../../lib/index.js'
import { PgStorage } from '../../lib/storage/pg-storage.js'
import { SqliteStorage } from '../../lib/storage/sqlite-storage.js'
import { MemoryJobs, PIPELINE_REF } from '../fixtures.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, inParallel, PIPELINE_URL, type TestApp } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'

// Two hosts with the plugin on one PostgreSQL database, as two instances
// behind a load balancer: what one does, the other sees on its next request;
// counters stay exact; an Idempotency-Key holds across both.

const url = await pgAvailable(t)
const P = '/api-keys/acme/shop'

/** Two app instances, each with its own PgStorage (own pool) on one schema of its own. */
async function twoInstances (t: Test, options: Partial<DataEndpointsOptions> = {}): Promise<[TestApp, TestApp]> {
  const schema = (await freshSchema(t, url as string)).schema
  const open = (): PgStorage => new PgStorage({ connectionString: url as string, schema, poolSize: 5 })
  const a = await buildApp(t, { storage: open(), ...options })
  const b = await buildApp(t, { storage: open(), ...options })
  return [a, b]
}

async function listen (app: TestApp['app']): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' })
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
}

async function status (app: TestApp['app'], key: string, method: 'GET' | 'POST' = 'GET'): Promise<[number, string?]> {
  const res = await app.inject({ method, url: method === 'GET' ? DATASET_URL : PIPELINE_URL, query: { api_key: key, format: 'json' } })
  return res.statusCode === 200 ? [200] : [res.statusCode, res.json().message]
}

/**
 * What one instance does, the other refuses on its very next request: for
 * PostgreSQL, and for two SQLite handles on one file (each remembers its
 * lookups until a write from anywhere, so this is what proves that memo).
 */
async function revokedEverywhere (t: Test, two: (t: Test) => Promise<[TestApp, TestApp]>): Promise<void> {
  const [{ app: a }, { app: b }] = await two(t)
  const k = await createKey(a, 'client')
  const other = await createKey(a, 'other')
  await assignKeys(a, 'dataset', [k.id, other.id])
  await assignKeys(a, 'pipeline', [k.id])
  t.same(await status(b, k.key), [200], 'B serves the key A made (and has now verified it once)')
  t.same(await status(b, k.key, 'POST'), [200])

  await a.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { isActive: false } })
  t.same(await status(b, k.key), [403, 'Disabled API key'], 'disable on A: B refuses at once')
  t.same(await status(b, k.key, 'POST'), [403, 'Disabled API key'])
  await a.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { isActive: true } })
  t.same(await status(b, k.key), [200], 'enable on A: B accepts at once')

  const regenerated = (await a.inject({ method: 'POST', url: `${P}/keys/${k.id}/regenerate`, headers: ADMIN })).json()
  t.same(await status(b, k.key), [403, 'Unknown API key'], 'regenerate on A: the old value fails on B')
  t.same(await status(b, regenerated.key), [200], 'the new value works on B, assignments kept')
  t.same(await status(b, regenerated.key, 'POST'), [200])

  await assignKeys(a, 'dataset', [other.id])
  t.same(await status(b, regenerated.key), [403, 'Unknown API key'], 'unassigned on A: refused on B')
  t.same(await status(b, regenerated.key, 'POST'), [200], 'still assigned to the pipeline')

  t.equal((await a.inject({ method: 'DELETE', url: `${P}/keys/${k.id}`, headers: ADMIN })).statusCode, 204)
  t.same(await status(b, regenerated.key, 'POST'), [403, 'Unknown API key'], 'delete on A: refused on B')

  t.same(await status(b, other.key), [200])
  t.equal((await a.inject({ method: 'DELETE', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN })).statusCode, 204)
  t.same(await status(b, other.key), [403, 'Unknown API Endpoint'], 'endpoint deleted on A: B answers as for no endpoint')
}

/** Two app instances, each with its own SqliteStorage handle on one file. */
async function twoSqliteInstances (t: Test): Promise<[TestApp, TestApp]> {
  const file = join(t.testdir(), 'shared.db')
  const a = await buildApp(t, { storage: new SqliteStorage({ filename: file }) })
  const b = await buildApp(t, { storage: new SqliteStorage({ filename: file }) })
  return [a, b]
}

t.test('SQLite, two handles on one file: a disable, regenerate, unassign or delete through A is refused on B\'s very next request', async (t) => {
  await revokedEverywhere(t, twoSqliteInstances)
})

if (url !== null) {
  t.test('a disable, regenerate, unassign or delete on instance A is refused on B\'s very next request', async (t) => {
    await revokedEverywhere(t, twoInstances)
  })

  t.test('concurrent load on both instances, then a graceful close of both: calls equal the successful requests', async (t) => {
    // Flushes every 5 ms, so both instances write increments while the load runs.
    const [a, b] = await twoInstances(t, { usageFlushInterval: 5 })
    const k = await createKey(a.app, 'load')
    const disabled = await createKey(a.app, 'disabled', false)
    await assignKeys(a.app, 'dataset', [k.id, disabled.id])
    await assignKeys(a.app, 'pipeline', [k.id])
    const bases = [await listen(a.app), await listen(b.app)]

    const kinds = [
      { path: DATASET_URL, method: 'GET', key: k.key },
      { path: PIPELINE_URL, method: 'POST', key: k.key },
      { path: DATASET_URL, method: 'GET', key: disabled.key },
      { path: DATASET_URL, method: 'GET', key: `${k.key.slice(0, 11)}${'x'.repeat(21)}` }
    ]
    // Downloads and runs on both instances; one request in five refused.
    const plan = Array.from({ length: 400 }, (_, i) => ({ base: bases[(i >> 1) % 2], ...kinds[i % 10 < 8 ? i % 2 : 2 + (i % 2)] }))
    const statuses = await inParallel(32, plan.map((r) => async () => {
      const res = await fetch(`${r.base}${r.path}?format=json`, { method: r.method, headers: { authorization: `Bearer ${r.key}` } })
      await res.arrayBuffer()
      return { path: r.path, status: res.status }
    }))
    const ok = (path: string): number => statuses.filter((s) => s.path === path && s.status === 200).length
    t.ok(ok(DATASET_URL) > 100 && ok(PIPELINE_URL) > 100, `served ${ok(DATASET_URL)} downloads and ${ok(PIPELINE_URL)} runs`)
    t.same(new Set(statuses.filter((s) => s.status !== 200).map((s) => s.status)), new Set([403]), 'the rest refused')

    await Promise.all([a.app.close(), b.app.close()])
    const check = new PgStorage({ connectionString: url, schema: (a.storage as PgStorage).schema })
    t.teardown(() => check.close())
    const calls = async (type: 'dataset' | 'pipeline'): Promise<number | undefined> =>
      (await check.getEndpoint({ organization: 'acme', project: 'shop', modelSequence: 1, type, resourceSequence: 1 }))?.calls
    t.equal(await calls('dataset'), ok(DATASET_URL), 'dataset calls = successful downloads')
    t.equal(await calls('pipeline'), ok(PIPELINE_URL), 'pipeline calls = successful runs')
    const keys = await check.listKeys({ organization: 'acme', project: 'shop' })
    t.not(keys.find((x) => x.id === k.id)?.updatedAt, null, 'the key\'s last use is recorded')
    t.equal(keys.find((x) => x.id === disabled.id)?.updatedAt, null, 'a refused key\'s is not')

    // The usage history counts the same requests, refusals too, by outcome.
    const history = await check.queryUsage({ organization: 'acme', project: 'shop' },
      { granularity: 'day', from: new Date(Date.now() - 2 * 86_400_000), to: new Date(Date.now() + 86_400_000), limit: 100 })
    const counted = (path: string, keyId: string, outcome: string): number => history
      .filter((r) => r.keyId === keyId && r.outcome === outcome && r.endpointId === endpointIds.get(path)).reduce((n, r) => n + r.count, 0)
    const endpointIds = new Map((await check.listEndpoints({ organization: 'acme', project: 'shop' }))
      .map((e) => [e.type === 'dataset' ? DATASET_URL : PIPELINE_URL, e.id]))
    const refused = (i: number): boolean => statuses[i].status === 403 && plan[i].key === disabled.key
    t.equal(counted(DATASET_URL, k.id, 'ok'), ok(DATASET_URL), 'history: ok downloads')
    t.equal(counted(PIPELINE_URL, k.id, 'ok'), ok(PIPELINE_URL), 'history: ok runs')
    t.equal(counted(DATASET_URL, disabled.id, 'disabled'), plan.filter((_, i) => refused(i)).length, 'history: the disabled key\'s refusals')
    t.equal(counted(DATASET_URL, k.id, 'unknown_key'), plan.filter((r, i) => statuses[i].status === 403 && r.key !== disabled.key).length,
      'history: the wrong secrets on the key\'s prefix')
  })

  t.test('batches flushed by both instances at the same moment add up (calls = calls + n)', async (t) => {
    const [a, b] = await twoInstances(t, { usageFlushInterval: 3_600_000 })
    const k = await createKey(a.app)
    await assignKeys(a.app, 'dataset', [k.id])
    const endpoints = async (): Promise<number> =>
      (await a.app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json()[0].calls
    for (let round = 1; round <= 5; round++) {
      for (let i = 0; i < 7; i++) t.equal((await status(a.app, k.key))[0], 200)
      for (let i = 0; i < 11; i++) t.equal((await status(b.app, k.key))[0], 200)
      await Promise.all([a.app.dataEndpoints.flushUsage(), b.app.dataEndpoints.flushUsage()])
      t.equal(await endpoints(), round * 18, `round ${round}: 7 + 11 more`)
    }
  })

  t.test('two concurrent POSTs with one Idempotency-Key, one on each instance, start one job and return the same body', async (t) => {
    const jobs = new MemoryJobs().addPipeline(PIPELINE_REF, 'refresh')
    // A run takes a while to start, so that the two calls overlap.
    const pipelines: PipelineRunner = {
      async getPipeline (ref) {
        const pipeline = await jobs.getPipeline(ref)
        return pipeline === null ? null : { name: pipeline.name, start: async (id) => { await sleep(50); await pipeline.start(id) } }
      }
    }
    const [a, b] = await twoInstances(t, { jobs, pipelines })
    const k = await createKey(a.app)
    await assignKeys(a.app, 'pipeline', [k.id])
    const bases = [await listen(a.app), await listen(b.app)]

    for (let round = 0; round < 8; round++) {
      const startsBefore = jobs.starts
      const responses = await Promise.all(bases.map(async (base) => {
        const res = await fetch(`${base}${PIPELINE_URL}`, {
          method: 'POST', headers: { authorization: `Bearer ${k.key}`, 'idempotency-key': `run-${round}` }
        })
        return { status: res.status, replayed: res.headers.get('idempotent-replayed'), body: await res.text() }
      }))
      t.same(responses.map((r) => r.status), [200, 200], `round ${round}: both answered`)
      t.equal(responses[0].body, responses[1].body, 'the same body')
      t.same(responses.map((r) => r.replayed).sort(), ['true', null].sort(), 'one of them replayed')
      t.equal(jobs.starts - startsBefore, 1, 'one job started')
      const job = JSON.parse(responses[0].body) as { job_id: string }
      t.equal((await b.app.inject({ url: `/api/job/${job.job_id}` })).statusCode, 200, 'the job is there')
    }
  })
}
