import { Writable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyServerOptions } from 'fastify'
import t, { type Test } from 'tap'
import type { DataEndpointsOptions } from '../../lib/index.js'
import { PgStorage } from '../../lib/storage/pg-storage.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, PIPELINE_URL, type TestApp } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'
import { TcpProxy } from '../tcp-proxy.js'

// PostgreSQL down or slow: every route that needs the database answers 500
// `Internal server error` within a bounded time (the reason is logged, never
// answered), and all recovers by itself when the database returns. PgStorage reaches PostgreSQL through a TCP proxy that the
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

async function behindProxy (t: Test, options: Partial<DataEndpointsOptions> = {}, queryTimeout = QUERY_TIMEOUT,
  fastifyOptions: FastifyServerOptions = {}): Promise<Setup> {
  const target = new URL(url as string)
  const proxy = await TcpProxy.start({ host: target.hostname, port: Number(target.port || 5432) })
  t.teardown(() => proxy.close())
  const schema = (await freshSchema(t, url as string)).schema
  const storage = new PgStorage({
    connectionString: proxy.urlFor(url as string), schema, poolSize: 4, queryTimeout, connectionTimeout: CONNECTION_TIMEOUT
  })
  const app = await buildApp(t, { storage, usageFlushInterval: 3_600_000, ...options }, fastifyOptions)
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

/** Every probe answers 500 `Internal server error`, none later than BOUND_MS, and neither a key nor the host leaks. */
async function expectFailures (t: Test, setup: Setup, key: { id: string, key: string }): Promise<void> {
  await Promise.all(probes(key).map(async (probe) => {
    const started = Date.now()
    const res = await setup.app.inject({ method: probe.method, url: probe.url, headers: probe.headers, payload: probe.payload })
    const took = Date.now() - started
    t.equal(res.statusCode, 500, `${probe.name}: 500`)
    const message = res.json().message
    t.equal(message, 'Internal server error', `${probe.name}: not in the driver's words`)
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

/** A key on the dataset endpoint and `n` downloads with it, counted in memory, not yet written. */
async function keyWithDownloads (t: Test, setup: Setup, n: number): Promise<{ id: string, key: string }> {
  const key = await createKey(setup.app)
  await assignKeys(setup.app, 'dataset', [key.id])
  for (let i = 0; i < n; i++) await download(t, setup, key)
  return key
}

async function expectService (t: Test, setup: Setup, key: { key: string }, what: string): Promise<void> {
  const download = await setup.app.inject({ url: DATASET_URL, query: { api_key: key.key, format: 'json' } })
  t.equal(download.statusCode, 200, `${what}: data route serves`)
  const list = await setup.app.inject({ url: `${P}/keys`, headers: ADMIN })
  t.equal(list.statusCode, 200, `${what}: management route serves`)
}

if (url !== null) {
  t.test('database down: 500 within a bounded time, the reason logged, then recovery by itself', async (t) => {
    const lines: Array<Record<string, any>> = []
    const stream = new Writable({ write (chunk, _encoding, done) { lines.push(JSON.parse(String(chunk))); done() } })
    const setup = await behindProxy(t, {}, QUERY_TIMEOUT, { logger: { level: 'error', stream } })
    const key = await createKey(setup.app)
    await assignKeys(setup.app, 'dataset', [key.id])
    await assignKeys(setup.app, 'pipeline', [key.id])
    await expectService(t, setup, key, 'before')

    setup.proxy.cut()
    await expectFailures(t, setup, key)
    await expectFailures(t, setup, key)
    const failures = lines.filter((l) => l.statusCode === 500)
    t.equal(failures.length, 2 * probes(key).length, 'each failure is logged')
    t.ok(failures.every((l) => l.msg === 'Internal server error' && /^PostgreSQL unavailable: \S/.test(l.cause?.message)),
      'with the reason, in the log only')
    t.notOk(JSON.stringify(lines).includes(key.key.slice(11)), 'and no key')
    t.equal((await setup.app.inject({ url: '/api/job/00000000-0000-4000-8000-000000000000' })).statusCode, 404,
      'the job route, which needs no storage, still answers')

    setup.proxy.restore()
    await expectService(t, setup, key, 'after the outage')
  })

  t.test('database slow: 500 within a bounded time, then recovery by itself', async (t) => {
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

  t.test('a usage history query is refused within a bounded time when the database is slow or gone, then served again', async (t) => {
    const setup = await behindProxy(t)
    await keyWithDownloads(t, setup, 3)
    await setup.app.dataEndpoints.flushUsage()
    const usage = async (): Promise<unknown> => {
      const res = await setup.app.inject({ url: `${P}/usage?granularity=hour`, headers: ADMIN })
      t.equal(res.statusCode, 200, 'usage answered')
      return res.json()
    }
    const before = await usage()
    t.ok((before as { rows: unknown[] }).rows.length > 0, 'the downloads are in the history')
    const project = { organization: 'acme', project: 'shop' }
    const query = { granularity: 'hour' as const, from: new Date(Date.now() - 86_400_000), to: new Date(Date.now() + 3_600_000), limit: 1000 }
    for (const fault of ['slow', 'cut'] as const) {
      setup.proxy[fault]()
      const started = Date.now()
      await t.rejects((setup.storage as PgStorage).queryUsageColumns(project, query), /^PostgreSQL unavailable: /, `${fault}: refused`)
      t.ok(Date.now() - started < BOUND_MS, `${fault}: within ${BOUND_MS} ms`)
      // The route's read: a count and a read at once.
      const again = Date.now()
      await t.rejects((setup.storage as PgStorage).queryUsageWithinLimit(project, query), /^PostgreSQL unavailable: /, `${fault}: the route's read refused too`)
      t.ok(Date.now() - again < BOUND_MS, `${fault}: that within ${BOUND_MS} ms too`)
      setup.proxy.restore()
      for (let i = 0; i < 5; i++) t.same(await usage(), before, `${fault}: the same answer once it is back (${i + 1})`)
    }
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
    const key = await keyWithDownloads(t, setup, 5)

    setup.proxy.cut()
    await t.rejects(setup.app.dataEndpoints.flushUsage(), 'the flush fails while the database is away')
    await t.rejects(setup.app.dataEndpoints.flushUsage(), 'and again')
    setup.proxy.restore()
    await setup.app.dataEndpoints.flushUsage()
    t.equal(await storedCalls(t, setup.schema), 5, 'every increment written once it is back, none twice')
  })

  t.test('a graceful close during a short outage still writes the increments', async (t) => {
    const setup = await behindProxy(t)
    const key = await keyWithDownloads(t, setup, 3)

    setup.proxy.cut()
    setTimeout(() => setup.proxy.restore(), 500)
    await setup.app.close()
    t.equal(await storedCalls(t, setup.schema), 3)
  })

  t.test('a flush whose COMMIT answer is lost is not counted twice', async (t) => {
    const setup = await behindProxy(t)
    const key = await keyWithDownloads(t, setup, 4)

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
    const key = await keyWithDownloads(t, setup, 4)

    setup.proxy.delayFrom('COMMIT', 1500)
    await t.rejects(setup.app.dataEndpoints.flushUsage(), 'the flush gives up, its transaction ended')
    await setup.app.dataEndpoints.flushUsage()
    await sleep(1500)
    t.equal(await storedCalls(t, setup.schema), 4, 'the late COMMIT changed nothing: the increments are in, once')
  })

  // Regression: when the answer to a flush's COMMIT was lost and the database
  // then stayed away longer than queryTimeout, the server could not be asked
  // whether it had committed, and the batch was written again: calls doubled.
  t.test('a flush whose COMMIT answer is lost, the database then away, is not counted twice', async (t) => {
    const setup = await behindProxy(t)
    const key = await keyWithDownloads(t, setup, 4)

    // The server gets the COMMIT and commits; its answer never arrives, and nothing gets through after it.
    setup.proxy.loseAnswerTo('COMMIT')
    setup.proxy.cutAfter('COMMIT')
    await t.rejects(setup.app.dataEndpoints.flushUsage(), 'the flush cannot learn whether it committed')
    await t.rejects(setup.app.dataEndpoints.flushUsage(), 'nor can the next one while the database is away')
    setup.proxy.restore()
    for (let i = 0; i < 2; i++) await download(t, setup, key)
    await setup.app.dataEndpoints.flushUsage()
    t.equal(await storedCalls(t, setup.schema), 6, 'the first four once, the two later ones too')
  })

  t.test('a flush in doubt that turns out not committed is written once it is known', async (t) => {
    // The COMMIT is held on the way past the time-out, and the database is
    // away when the flush asks what became of it; by then the transaction is
    // ended, by the server or by PgStorage, so it never commits.
    const setup = await behindProxy(t)
    const key = await keyWithDownloads(t, setup, 4)

    setup.proxy.delayFrom('COMMIT', 1500)
    setup.proxy.cutAfter('COMMIT')
    await t.rejects(setup.app.dataEndpoints.flushUsage(), { message: /whether the usage counters were written is not known yet/ },
      'the flush cannot learn whether it committed')
    setup.proxy.restore()
    await setup.app.dataEndpoints.flushUsage()
    await sleep(1500)
    t.equal(await storedCalls(t, setup.schema), 4, 'written once, after the server said the first try had not committed')
  })

  t.test('a graceful close while a flush is in doubt waits to know, and never counts it twice', async (t) => {
    const setup = await behindProxy(t)
    const key = await keyWithDownloads(t, setup, 3)

    setup.proxy.loseAnswerTo('COMMIT')
    setup.proxy.cutAfter('COMMIT')
    await t.rejects(setup.app.dataEndpoints.flushUsage(), 'in doubt')
    setTimeout(() => setup.proxy.restore(), 500)
    await setup.app.close()
    t.equal(await storedCalls(t, setup.schema), 3)
  })

  t.test('a close that gives up on a flush in doubt logs the calls it could not account for', async (t) => {
    const lines: Array<Record<string, unknown>> = []
    const stream = new Writable({ write (chunk, _encoding, done) { lines.push(JSON.parse(String(chunk))); done() } })
    const setup = await behindProxy(t, {}, QUERY_TIMEOUT, { logger: { level: 'error', stream } })
    const key = await keyWithDownloads(t, setup, 3)

    setup.proxy.loseAnswerTo('COMMIT')
    setup.proxy.cutAfter('COMMIT')
    await t.rejects(setup.app.dataEndpoints.flushUsage(), 'in doubt')
    await t.rejects(setup.app.close(), 'the close gives up while the database is away')
    t.match(lines.find((l) => l.msg === 'fastify-data-endpoints: usage counters lost at close'), { lostCalls: 0, inDoubtCalls: 3 },
      'the log says how many calls may be missing')
    setup.proxy.restore()
    t.equal(await storedCalls(t, setup.schema), 3, 'they had committed, and were not written again')
  })
}

if (url !== null) {
  // Regression: the claim of an Idempotency-Key was written but its answer
  // lost. Nothing ran, yet every retry with the key waited 10 s for a 409
  // until idempotencyTtl passed.
  const CLAIM = 'ON CONFLICT (endpoint_id, key_id, idempotency_key)'

  async function pipelineSetup (t: Test): Promise<Setup & { headers: Record<string, string> }> {
    const setup = await behindProxy(t)
    const key = await createKey(setup.app)
    await assignKeys(setup.app, 'pipeline', [key.id])
    return { ...setup, headers: { authorization: `Bearer ${key.key}`, 'idempotency-key': 'order-42' } }
  }

  t.test('an Idempotency-Key claim whose answer is lost is released: a retry runs, once', async (t) => {
    const { app, proxy, jobs, headers } = await pipelineSetup(t)
    const post = async () => app.inject({ method: 'POST', url: PIPELINE_URL, headers })
    proxy.loseAnswerTo(CLAIM)
    const lost = await post()
    t.same([lost.statusCode, lost.json()], [500, { message: 'Internal server error' }])
    t.equal(jobs.starts, 0, 'nothing started')

    const started = Date.now()
    const retry = await post()
    const took = Date.now() - started
    t.equal(retry.statusCode, 200, 'the retry runs')
    t.ok(took < BOUND_MS, `at once, not after the 10 s wait for a 409 (${took} ms)`)
    t.equal(retry.headers['idempotent-replayed'], undefined)
    const again = await post()
    t.same([again.statusCode, again.headers['idempotent-replayed'], again.body], [200, 'true', retry.body], 'later calls replay it')
    t.equal(jobs.starts, 1, 'one run')
  })

  t.test('a lost Idempotency-Key claim that cannot be released at once is released when the database returns', async (t) => {
    const { app, proxy, jobs, headers, schema } = await pipelineSetup(t)
    const post = async () => app.inject({ method: 'POST', url: PIPELINE_URL, headers })
    const direct = new PgStorage({ connectionString: url as string, schema })
    t.teardown(() => direct.close())
    const held = async (): Promise<number> => (await direct.pool.query(
      `SELECT 1 FROM "${schema}".idempotency_keys WHERE idempotency_key = 'order-42' AND response IS NULL`)).rowCount ?? 0

    proxy.loseAnswerTo(CLAIM)
    const pending = post()
    for (let i = 0; i < 200 && await held() === 0; i++) await sleep(10)
    proxy.cut()
    const lost = await pending
    t.same([lost.statusCode, lost.json()], [500, { message: 'Internal server error' }])
    t.equal(await held(), 1, 'the claim was written, and could not be released while the database was away')

    proxy.restore()
    const retry = await post()
    t.equal(retry.statusCode, 200, 'a retry runs once the claim is released in the background')
    t.equal(retry.headers['idempotent-replayed'], undefined)
    t.equal(jobs.starts, 1, 'one run')
  })
}
