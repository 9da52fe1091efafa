import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import type { DataEndpointsOptions } from '../lib/index.js'
import { PgStorage } from '../lib/pg-storage.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, PIPELINE_URL, type TestApp } from './helper.js'
import { freshSchema, pgAvailable } from './pg.js'
import { TcpProxy } from './tcp-proxy.js'

// PostgreSQL down or slow: every route that needs the database answers 500
// with a message within a bounded time, and all recovers by itself when the
// database returns. PgStorage reaches PostgreSQL through a TCP proxy that the
// tests cut, slow down and restore.

const url = await pgAvailable(t)
const P = '/api-keys/acme/shop'
const QUERY_TIMEOUT = 400
const CONNECTION_TIMEOUT = 400
// A request may wait for a connection, then for its queries: well under this.
const BOUND_MS = 3000

interface Setup extends TestApp {
  proxy: TcpProxy
  schema: string
}

async function behindProxy (t: Test, options: Partial<DataEndpointsOptions> = {}, queryTimeout = QUERY_TIMEOUT): Promise<Setup> {
  const target = new URL(url as string)
  const proxy = await TcpProxy.start({ host: target.hostname, port: Number(target.port || 5432) })
  t.teardown(() => proxy.close())
  const schema = (await freshSchema(t, url as string)).schema
  const storage = new PgStorage({
    connectionString: proxy.urlFor(url as string), schema, poolSize: 4, queryTimeout, connectionTimeout: CONNECTION_TIMEOUT
  })
  const app = await buildApp(t, { storage, usageFlushInterval: 3_600_000, ...options })
  return { ...app, proxy, schema }
}

/** The calls of the dataset endpoint, read straight from the database (not through the proxy). */
async function storedCalls (t: Test, schema: string): Promise<number | undefined> {
  const direct = new PgStorage({ connectionString: url as string, schema })
  t.teardown(() => direct.close())
  return (await direct.getEndpoint({ organization: 'acme', project: 'shop', modelSequence: 1, type: 'dataset', resourceSequence: 1 }))?.calls
}

interface Probe { name: string, method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE', url: string, headers?: Record<string, string>, payload?: object }

function probes (key: { id: string, key: string }): Probe[] {
  const auth = { authorization: `Bearer ${key.key}` }
  return [
    { name: 'dataset download', method: 'GET', url: `${DATASET_URL}?format=json`, headers: auth },
    { name: 'pipeline run', method: 'POST', url: PIPELINE_URL, headers: auth },
    { name: 'pipeline run with Idempotency-Key', method: 'POST', url: PIPELINE_URL, headers: { ...auth, 'idempotency-key': 'once' } },
    { name: 'list keys', method: 'GET', url: `${P}/keys`, headers: ADMIN },
    { name: 'create key', method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: 'x' } },
    { name: 'disable key', method: 'PATCH', url: `${P}/keys/${key.id}`, headers: ADMIN, payload: { isActive: false } },
    { name: 'list endpoints', method: 'GET', url: `${P}/endpoints`, headers: ADMIN },
    { name: 'assign keys', method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN, payload: { keyIds: [key.id] } }
  ]
}

/** Every probe answers 500 with a message, none later than BOUND_MS, and neither a key nor the host leaks. */
async function expectFailures (t: Test, setup: Setup, key: { id: string, key: string }): Promise<void> {
  await Promise.all(probes(key).map(async (probe) => {
    const started = Date.now()
    const res = await setup.app.inject({ method: probe.method, url: probe.url, headers: probe.headers, payload: probe.payload })
    const took = Date.now() - started
    t.equal(res.statusCode, 500, `${probe.name}: 500`)
    const message = res.json().message
    t.match(message, /^PostgreSQL unavailable: \S/, `${probe.name}: with a message (${message})`)
    t.notMatch(message, /127\.0\.0\.1|localhost|:\d{2,5}\b/, `${probe.name}: naming no host or port`)
    t.ok(took < BOUND_MS, `${probe.name}: answered in ${took} ms`)
    t.notOk(res.body.includes(key.key), `${probe.name}: no key in the answer`)
  }))
}

/** One successful download: counted in memory, not yet written. */
async function download (t: Test, setup: Setup, key: { key: string }): Promise<void> {
  const res = await setup.app.inject({ url: DATASET_URL, query: { api_key: key.key, format: 'json' } })
  t.equal(res.statusCode, 200, 'download')
}

async function expectService (t: Test, setup: Setup, key: { key: string }, what: string): Promise<void> {
  const download = await setup.app.inject({ url: DATASET_URL, query: { api_key: key.key, format: 'json' } })
  t.equal(download.statusCode, 200, `${what}: data route serves`)
  const list = await setup.app.inject({ url: `${P}/keys`, headers: ADMIN })
  t.equal(list.statusCode, 200, `${what}: management route serves`)
}

if (url !== null) {
  t.test('database down: 500 with a message within a bounded time, then recovery by itself', async (t) => {
    const setup = await behindProxy(t)
    const key = await createKey(setup.app)
    await assignKeys(setup.app, 'dataset', [key.id])
    await assignKeys(setup.app, 'pipeline', [key.id])
    await expectService(t, setup, key, 'before')

    setup.proxy.cut()
    await expectFailures(t, setup, key)
    await expectFailures(t, setup, key)
    t.equal((await setup.app.inject({ url: '/api/job/00000000-0000-4000-8000-000000000000' })).statusCode, 404,
      'the job route, which needs no storage, still answers')

    setup.proxy.restore()
    await expectService(t, setup, key, 'after the outage')
  })

  t.test('database slow: 500 with a message within a bounded time, then recovery by itself', async (t) => {
    const setup = await behindProxy(t)
    const key = await createKey(setup.app)
    await assignKeys(setup.app, 'dataset', [key.id])
    await assignKeys(setup.app, 'pipeline', [key.id])
    await expectService(t, setup, key, 'before')

    setup.proxy.slow()
    await expectFailures(t, setup, key)
    setup.proxy.restore()
    await expectService(t, setup, key, 'when it is fast again')
  })

  t.test('a storage opened while the database is down starts working when it returns', async (t) => {
    const setup = await behindProxy(t)
    setup.proxy.cut()
    const res = await setup.app.inject({ url: `${P}/keys`, headers: ADMIN })
    t.equal(res.statusCode, 500, 'no tables can be made yet: 500')
    setup.proxy.restore()
    const key = await createKey(setup.app)
    await assignKeys(setup.app, 'dataset', [key.id])
    await expectService(t, setup, key, 'once it is up')
  })

  t.test('batched increments survive a short outage', async (t) => {
    const setup = await behindProxy(t)
    const key = await createKey(setup.app)
    await assignKeys(setup.app, 'dataset', [key.id])
    for (let i = 0; i < 5; i++) await download(t, setup, key)

    setup.proxy.cut()
    await t.rejects(setup.app.dataEndpoints.flushUsage(), 'the flush fails while the database is away')
    await t.rejects(setup.app.dataEndpoints.flushUsage(), 'and again')
    setup.proxy.restore()
    await setup.app.dataEndpoints.flushUsage()
    t.equal(await storedCalls(t, setup.schema), 5, 'every increment written once it is back, none twice')
  })

  t.test('a graceful close during a short outage still writes the increments', async (t) => {
    const setup = await behindProxy(t)
    const key = await createKey(setup.app)
    await assignKeys(setup.app, 'dataset', [key.id])
    for (let i = 0; i < 3; i++) await download(t, setup, key)

    setup.proxy.cut()
    setTimeout(() => setup.proxy.restore(), 500)
    await setup.app.close()
    t.equal(await storedCalls(t, setup.schema), 3)
  })

  t.test('a flush whose COMMIT answer is lost is not counted twice', async (t) => {
    const setup = await behindProxy(t)
    const key = await createKey(setup.app)
    await assignKeys(setup.app, 'dataset', [key.id])
    for (let i = 0; i < 4; i++) await download(t, setup, key)

    // The server gets the COMMIT and commits; its answer never arrives.
    setup.proxy.loseAnswerTo('COMMIT')
    await setup.app.dataEndpoints.flushUsage().catch(() => {})
    await setup.app.dataEndpoints.flushUsage()
    t.equal(await storedCalls(t, setup.schema), 4, 'the increments are in, once')
  })

  t.test('a flush whose COMMIT arrives after the timeout is not applied as well as retried', async (t) => {
    // queryTimeout 1000 ms: the server itself ends an idle transaction after
    // 2000 ms, so a COMMIT 1500 ms late would still commit, unless PgStorage
    // ends that transaction before it answers the flush.
    const setup = await behindProxy(t, {}, 1000)
    const key = await createKey(setup.app)
    await assignKeys(setup.app, 'dataset', [key.id])
    for (let i = 0; i < 4; i++) await download(t, setup, key)

    setup.proxy.delayFrom('COMMIT', 1500)
    await t.rejects(setup.app.dataEndpoints.flushUsage(), 'the flush gives up, its transaction ended')
    await setup.app.dataEndpoints.flushUsage()
    await sleep(1500)
    t.equal(await storedCalls(t, setup.schema), 4, 'the late COMMIT changed nothing: the increments are in, once')
  })
}
