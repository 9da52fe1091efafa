import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { get as httpGet, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import type { FastifyRequest } from 'fastify'
import t from 'tap'
import { adminTokenPermissions } from '../../examples/admin-auth.js'
import { buildExampleApp } from '../../examples/app.js'
import { readConfig } from '../../examples/config.js'
import { createDemoKey, firstStartDemoKey } from '../../examples/demo-key.js'
import { SqliteJobStore } from '../../examples/job-store.js'
import { ABANDONED, INTERRUPTED, SampleJobs } from '../../examples/jobs.js'
import { IDLE_STATEMENTS_PER_ENTITY, openExampleDatabase, SAMPLE_MODEL, SampleDatasets, seedSampleData, SMALL_ENTITY_ROWS } from '../../examples/sample-datasets.js'
import { logLines, pasteCurl, startServer, tempDir, type Curl } from '../example-process.js'
import { freshSchema, pgAvailable } from '../pg.js'

// The example server (DESIGN.md §5), run as `npm start` runs it: a real
// process on a real port, driven by the curl lines it prints.

const KEY_ANYWHERE = /[A-Za-z0-9]{10}-[A-Za-z0-9]{21}/g

async function send (c: Pick<Curl, 'method' | 'headers' | 'url'> & { body?: string }): Promise<{ status: number, body: any }> {
  const res = await fetch(c.url, { method: c.method, headers: c.headers, body: c.body })
  return { status: res.status, body: await res.json() }
}

interface JobBody { job_id: string, status: string, error?: string, created_at: string, updated_at: string }

/** Polls the job until it is finished; returns every status seen, in order, and the last body. */
async function followJob (jobUrl: string, timeoutMs = 5000): Promise<{ seen: string[], job: JobBody }> {
  const seen: string[] = []
  const deadline = Date.now() + timeoutMs
  while (true) {
    const { status, body } = await send({ method: 'GET', headers: {}, url: jobUrl })
    if (status !== 200) throw new Error(`job status ${status} ${JSON.stringify(body)}`)
    if (seen[seen.length - 1] !== body.status) seen.push(body.status)
    if (body.status === 'succeeded' || body.status === 'failed' || Date.now() > deadline) return { seen, job: body }
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

t.test('first start, restart with the same data, graceful stop', async (t) => {
  const dataDir = tempDir(t)
  // The most verbose level, where a leak would show first.
  const server = await startServer(t, { DATA_DIR: dataDir, LOG_LEVEL: 'trace' })
  const { baseUrl, curl, adminToken } = server
  const key = server.demoKey as string
  t.match(key, /^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/, 'the demo key is printed')
  t.ok(adminToken !== undefined && adminToken.length >= 20, 'a generated admin token is printed')
  const model = `${baseUrl}/api/acme/shop/model/1`
  t.same(curl.map((c) => [c.method, c.url.replace(baseUrl, ''), c.output]), [
    ['GET', '/api/acme/shop/model/1/dataset/1?format=json', undefined],
    ['GET', '/api/acme/shop/model/1/dataset/1?format=csv-zip', 'sales.zip'],
    ['GET', '/api/acme/shop/model/1/dataset/1?format=parquet&entity=orders', 'orders.parquet'],
    ['POST', '/api/acme/shop/model/1/pipeline/1', undefined],
    ['GET', '/api/job/<job_id>', undefined],
    ['GET', '/api-keys/acme/shop/endpoints', undefined]
  ], 'curl lines for json, csv-zip, parquet, the pipeline, the job and management')
  const [datasetJson, csvZip, parquet, pipelinePost, jobStatus, management] = curl
  for (const c of [datasetJson, csvZip, parquet, pipelinePost]) t.equal(c.headers.authorization, `Bearer ${key}`)
  t.equal(management.headers.authorization, `Bearer ${adminToken}`)
  t.same((await pasteCurl(management.line)).request.headers, { authorization: `Bearer ${adminToken}` },
    'a generated admin token is in the line itself: it works pasted as is')

  // Authenticated data calls, counted per endpoint to check `calls` after a restart.
  let datasetCalls = 0
  let pipelineCalls = 0

  const orders = await fetch(parquet.url, { headers: parquet.headers })
  t.same([orders.status, orders.headers.get('content-type'), orders.headers.get('accept-ranges')],
    [200, 'application/vnd.apache.parquet', 'bytes'], 'the orders as Parquet, rendered (the sample data has a revision)')
  t.equal(Buffer.from(await orders.arrayBuffer()).subarray(0, 4).toString(), 'PAR1')
  datasetCalls++

  const json = await send(datasetJson)
  datasetCalls++
  t.equal(json.status, 200)
  t.same(Object.keys(json.body), ['customers', 'products', 'orders'], 'three entities')
  const [ann, bjorn, taro] = json.body.customers
  t.equal(ann.name, 'Ann "The Buyer" O\'Neil', 'quotes survive')
  t.equal(bjorn.notes, 'Line one\nLine two', 'newlines survive')
  t.same(taro, { id: 3, name: '山田 太郎', email: null, city: '東京', vip: null, notes: null, signed_up: null },
    'non-ASCII text and NULLs')
  t.equal(ann.vip, true, 'booleans')
  t.equal(ann.signed_up, '2021-03-04', 'dates')
  t.same(json.body.products.map((p: { price: string }) => p.price), ['9.99', '19.50', '1234.00', '0.00', '99999999.99'],
    'decimal(10,2) prices, exact')
  t.equal(json.body.orders[1].placed_at, '2024-02-29T23:59:59.999Z', 'timestamps with milliseconds')
  t.equal(json.body.orders[1].note, 'Gift wrap, please: "Happy birthday!"', 'commas and quotes together')

  const entities = await send({ method: 'GET', headers: {}, url: `${model}/dataset/1?format=json&meta=entities&api_key=${key}` })
  datasetCalls++
  t.same(entities, { status: 200, body: ['customers', 'products', 'orders'] }, 'meta=entities, key in the query')

  const limited = await send({ ...datasetJson, url: `${datasetJson.url}&limit=2&entity=orders` })
  datasetCalls++
  t.same(limited.body.orders.map((o: { id: number }) => o.id), [1, 2], 'limit and entity')

  t.same(await send({ ...datasetJson, headers: { authorization: `Bearer ${key.slice(0, 11)}${'x'.repeat(21)}` } }),
    { status: 403, body: { message: 'Unknown API key' } }, 'a wrong key is refused (and not counted)')

  // Pipeline 1: the job runs about a second, then succeeds.
  const run = await send(pipelinePost)
  pipelineCalls++
  t.equal(run.status, 200)
  t.match(run.body, { job_id: /^[0-9a-f-]{36}$/, job_url: `${baseUrl}/api/job/${run.body.job_id as string}` })
  const refreshJobUrl = jobStatus.url.replace('<job_id>', run.body.job_id)
  t.equal(refreshJobUrl, run.body.job_url, 'the printed job line is the job_url')
  const refresh = await followJob(refreshJobUrl)
  t.equal(refresh.seen[refresh.seen.length - 1], 'succeeded')
  t.ok(refresh.seen.includes('running'), `it ran first (seen: ${refresh.seen.join(', ')})`)
  t.ok(Date.parse(refresh.job.updated_at) - Date.parse(refresh.job.created_at) >= 1000, 'for about a second')

  // Management needs the admin token, and nothing else will do.
  const listed = await send(management)
  t.equal(listed.status, 200)
  t.same(listed.body.map((e: { path: string, keys: Array<{ purpose: string }> }) => [e.path, e.keys.map((k) => k.purpose)]), [
    ['/api/acme/shop/model/1/dataset/1', ['demo']],
    ['/api/acme/shop/model/1/pipeline/1', ['demo']]
  ], 'the demo key is assigned to dataset 1 and pipeline 1')
  for (const authorization of [`Bearer ${(adminToken as string).slice(0, -1)}`, `Bearer ${adminToken as string}x`, 'Bearer x',
    `Basic ${adminToken as string}`, `Bearer ${key}`, '']) {
    t.same(await send({ ...management, headers: authorization === '' ? {} : { authorization } }),
      { status: 403, body: { message: 'Not authorized' } }, `management refused for "${authorization.slice(0, 12)}..."`)
  }

  // Pipeline 2 has no endpoint until a key is assigned; its job fails.
  const broken = { ...pipelinePost, url: `${model}/pipeline/2` }
  t.same(await send(broken), { status: 403, body: { message: 'Unknown API Endpoint' } })
  const demoKeyId = listed.body[0].keys[0].id
  const assigned = await fetch(`${baseUrl}/api-keys/acme/shop/endpoints/1/pipeline/2`, {
    method: 'PUT',
    headers: { ...management.headers, 'content-type': 'application/json' },
    body: JSON.stringify({ keyIds: [demoKeyId] })
  })
  t.equal(assigned.status, 201, 'assigned with the admin token')
  const brokenRun = await send(broken)
  t.equal(brokenRun.status, 200)
  const failed = await followJob(brokenRun.body.job_url)
  t.match(failed.job, { status: 'failed', error: /\S/ }, 'pipeline 2 ends failed with an error')

  // Fastify's own 404 would echo the URL, key included.
  const notFound = await send({ method: 'GET', headers: {}, url: `${baseUrl}/nothing/here?api_key=${key}` })
  t.same(notFound, { status: 404, body: { message: 'Not found' } })

  // The last calls go just before the signal: only the close can have written them.
  const lastRun = await send(pipelinePost)
  pipelineCalls++
  t.equal((await send(datasetJson)).status, 200)
  datasetCalls++
  const stopped = await server.stop('SIGTERM')
  t.equal(stopped.code, 0, 'SIGTERM exits 0')

  const logs = logLines(stopped.stdout)
  t.ok(logs.length > 10, 'log lines are pino JSON')
  const logText = logs.map((l) => JSON.stringify(l)).join('\n')
  t.notOk(logText.includes(key), 'the demo key is never in a log line')
  t.notOk(logText.includes(key.slice(11)), 'nor its secret part')
  t.notOk(logText.includes(adminToken as string), 'nor the admin token')
  t.ok(logText.includes('api_key=[redacted]'), 'query keys are logged redacted')
  t.equal(stopped.stdout.split(key).length - 1, 5, 'the key is printed in the start-up block only (once, plus 4 curl lines)')

  // Restart on the same data: no new demo key, counters and jobs kept.
  const again = await startServer(t, { DATA_DIR: dataDir })
  t.equal(again.demoKey, undefined, 'no new demo key')
  t.match(again.banner.join('\n'), /Demo API key: +none new/)
  t.same(again.banner.join('\n').match(KEY_ANYWHERE), null, 'nothing key-shaped is printed')
  t.not(again.adminToken, adminToken, 'a new admin token for this run')
  const endpoints = await send(again.curl[again.curl.length - 1])
  t.same(endpoints.body.map((e: { path: string, calls: number }) => [e.path, e.calls]), [
    ['/api/acme/shop/model/1/dataset/1', datasetCalls],
    ['/api/acme/shop/model/1/pipeline/1', pipelineCalls],
    ['/api/acme/shop/model/1/pipeline/2', 1]
  ], 'calls equal the authenticated calls made, the last ones included')
  const jobUrl = (id: string): string => `${again.baseUrl}/api/job/${id}`
  t.match((await send({ method: 'GET', headers: {}, url: jobUrl(run.body.job_id) })).body,
    { status: 'succeeded' }, 'finished jobs survive the restart')
  t.match((await send({ method: 'GET', headers: {}, url: jobUrl(lastRun.body.job_id) })).body,
    { status: 'failed', error: INTERRUPTED }, 'a job cut short by the stop is failed')
  t.same(await send({ method: 'GET', headers: { authorization: `Bearer ${key}` }, url: `${again.baseUrl}/api/acme/shop/model/1/dataset/1?format=json&meta=entities` }),
    { status: 200, body: ['customers', 'products', 'orders'] }, 'the demo key still works')

  // Emptied by hand, the project gets no new demo key: that is for the first start only.
  const admin = { authorization: `Bearer ${again.adminToken as string}` }
  for (const path of [`keys/${demoKeyId as string}`, 'endpoints/1/dataset/1', 'endpoints/1/pipeline/1', 'endpoints/1/pipeline/2']) {
    const deleted = await fetch(`${again.baseUrl}/api-keys/acme/shop/${path}`, { method: 'DELETE', headers: admin })
    t.equal(deleted.status, 204, `DELETE ${path}`)
  }
  t.equal((await again.stop('SIGINT')).code, 0, 'SIGINT exits 0')
  const third = await startServer(t, { DATA_DIR: dataDir })
  t.equal(third.demoKey, undefined, 'no demo key on a later start, even with the project empty')
  t.match(third.banner.join('\n'), /Demo API key: +none new/)
  t.same(await send({ method: 'GET', headers: { authorization: `Bearer ${third.adminToken as string}` }, url: `${third.baseUrl}/api-keys/acme/shop/keys` }),
    { status: 200, body: [] }, 'and none was created')
  t.equal((await third.stop()).code, 0)
})

t.test('DEMO_KEY=off and a given ADMIN_TOKEN', async (t) => {
  const adminToken = `admin-${randomUUID()}`
  const dataDir = tempDir(t)
  const server = await startServer(t, { DATA_DIR: dataDir, DEMO_KEY: 'off', ADMIN_TOKEN: adminToken, LOG_LEVEL: 'warn' })
  t.equal(server.demoKey, undefined)
  t.match(server.banner.join('\n'), /Demo API key: +none \(DEMO_KEY=off\)/)
  t.match(server.banner.join('\n'), /Admin token: +the value of ADMIN_TOKEN/, 'the given admin token is not printed')
  const keys = await send({ method: 'GET', headers: { authorization: `Bearer ${adminToken}` }, url: `${server.baseUrl}/api-keys/acme/shop/keys` })
  t.same(keys, { status: 200, body: [] }, 'no key was created')

  // The admin line reads the token from the user's shell, which often has none.
  const management = server.curl[server.curl.length - 1]
  const unset = await pasteCurl(management.line)
  t.not(unset.code, 0, 'pasted where ADMIN_TOKEN is unset, the line does not run')
  t.match(unset.stderr, 'set ADMIN_TOKEN to the token you started the server with', 'and the shell says why')
  t.same(await send((await pasteCurl(management.line, { ADMIN_TOKEN: adminToken })).request), { status: 200, body: [] },
    'with ADMIN_TOKEN set, it works as printed')

  const { code, stdout } = await server.stop()
  t.equal(code, 0)
  t.notOk(stdout.includes(adminToken), 'the admin token appears nowhere in the output')
  t.same(stdout.match(KEY_ANYWHERE), null)
  t.same(logLines(stdout).filter((l) => (l.level as number) < 40), [], 'LOG_LEVEL=warn: no info lines')

  // DEMO_KEY=off used up the first start: a later start without it makes no key either.
  const again = await startServer(t, { DATA_DIR: dataDir, ADMIN_TOKEN: adminToken, LOG_LEVEL: 'warn' })
  t.equal(again.demoKey, undefined, 'no demo key on a later start')
  t.match(again.banner.join('\n'), /Demo API key: +none new/)
  const createLine = again.banner.find((l) => l.trim().startsWith('curl -X POST') && l.includes('/keys')) as string
  t.match((await pasteCurl(createLine)).stderr, 'set ADMIN_TOKEN', 'the "Create one with" line says why it cannot run')
  const created = await send((await pasteCurl(createLine, { ADMIN_TOKEN: adminToken })).request)
  t.match(created, { status: 201, body: { purpose: 'trial' } }, 'and works with ADMIN_TOKEN set')
  t.match((await pasteCurl(again.curl[0].line)).stderr, 'set API_KEY', 'the key lines ask for API_KEY likewise')
  t.equal((await again.stop()).code, 0)
})

t.test('bad settings stop the server with a message naming them', async (t) => {
  t.throws(() => readConfig({ PORT: 'abc' }), /PORT must be an integer/)
  t.throws(() => readConfig({ EVENTS_ROWS: '-1' }), /EVENTS_ROWS must be an integer/)
  t.throws(() => readConfig({ LOG_LEVEL: 'loud' }), /LOG_LEVEL must be one of/)
  t.match(readConfig({}), { port: 3000, dataDir: './.data', demoKey: true, eventsRows: 100000, logLevel: 'info', adminTokenGenerated: true })
  t.match(readConfig({ ADMIN_TOKEN: '' }), { adminTokenGenerated: true }, 'an empty ADMIN_TOKEN is no token')
})

t.test('admin token permissions', async (t) => {
  const permissions = adminTokenPermissions('s3cret-token')
  const ask = (authorization?: string): string[] =>
    permissions({ headers: authorization === undefined ? {} : { authorization } } as FastifyRequest)
  t.same(ask('Bearer s3cret-token'), ['ManageAPIKeys'])
  t.same(ask('bearer  s3cret-token '), ['ManageAPIKeys'], 'scheme in any case')
  for (const wrong of [undefined, '', 'Bearer', 'Bearer s3cret-toke', 'Bearer s3cret-tokenn', 'Basic s3cret-token', 's3cret-token']) {
    t.same(ask(wrong), [], `nothing for ${JSON.stringify(wrong)}`)
  }
})

t.test('sample datasets stream from SQLite', async (t) => {
  const dir = tempDir(t)
  const file = join(dir, 'example.db')
  const db = openExampleDatabase(file)
  t.teardown(() => db.close())
  seedSampleData(db, 100_000)
  t.same(db.prepare('SELECT count(*) AS n FROM events').get(), { n: 100_000 }, '100000 events generated')
  const datasets = new SampleDatasets(file)
  t.teardown(() => datasets.close())
  const ref = { ...SAMPLE_MODEL, resourceSequence: 2 }
  const events = await datasets.getDataset(ref)
  if (events === null) throw new Error('no events dataset')
  t.same(events.entities[0].columns.map((c) => [c.name, c.type]),
    [['id', 'integer'], ['ts', 'timestamp'], ['kind', 'text'], ['value', 'float'], ['payload', 'text']])
  t.equal(await datasets.getDataset({ ...ref, resourceSequence: 3 }), null, 'dataset 3 does not exist')
  t.equal(await datasets.getDataset({ ...ref, project: 'other' }), null, 'nor dataset 2 of another project')

  // A plain iterable: read without an await per row (lib/host/dataset-source.ts).
  const count = (limit: number | undefined, leaveAfter?: number): number => {
    const ids: unknown[] = []
    const rows = events.rows('events', { limit, signal: new AbortController().signal }) as Iterable<readonly unknown[]>
    t.equal(typeof (rows as Partial<AsyncIterable<unknown>>)[Symbol.asyncIterator], 'undefined', 'rows() returns a plain iterable')
    for (const row of rows) {
      ids.push(row[0])
      if (ids.length === leaveAfter) break
    }
    t.same(ids, ids.map((_, i) => i + 1), 'rows come in id order')
    return ids.length
  }
  t.equal(count(5), 5, 'the source honours limit')
  t.equal(count(SMALL_ENTITY_ROWS), SMALL_ENTITY_ROWS, 'a limit that a small read serves')
  t.equal(count(SMALL_ENTITY_ROWS + 1), SMALL_ENTITY_ROWS + 1, 'a limit just beyond it, streamed')
  t.equal(count(undefined, 10), 10, 'and stops reading when the reader leaves')
  t.same(datasets.statementCounts(2, 'events'), { prepared: 1, idle: 1 },
    'one statement served every read, and went back to the pool each time, whether the rows ended or the reader left')

  // Two reads of one entity at once, interleaved: a statement still iterating
  // is never handed out again (better-sqlite3 would refuse it as busy).
  const iterate = (): Iterator<readonly unknown[]> =>
    (events.rows('events', { signal: new AbortController().signal }) as Iterable<readonly unknown[]>)[Symbol.iterator]()
  const a = iterate()
  const b = iterate()
  t.same([a.next().value?.[0], b.next().value?.[0], a.next().value?.[0], b.next().value?.[0]], [1, 1, 2, 2])
  t.same(datasets.statementCounts(2, 'events'), { prepared: 2, idle: 0 }, 'each read holds its own statement')
  // A write on the other connection while both are open (WAL).
  const jobs = new SampleJobs(new SqliteJobStore(db))
  await (await jobs.getPipeline({ ...SAMPLE_MODEL, resourceSequence: 1 }))?.start(randomUUID())
  await jobs.close()
  a.return?.()
  b.return?.()
  t.same(datasets.statementCounts(2, 'events'), { prepared: 2, idle: 2 }, 'both went back when their readers left')

  // More reads at once than the pool keeps idle: it never grows past its bound.
  const many = Array.from({ length: IDLE_STATEMENTS_PER_ENTITY + 3 }, iterate)
  t.same(many.map((it) => it.next().value?.[0]), many.map(() => 1))
  for (const it of many) it.return?.()
  t.same(datasets.statementCounts(2, 'events'), { prepared: IDLE_STATEMENTS_PER_ENTITY + 3, idle: IDLE_STATEMENTS_PER_ENTITY },
    'the statements beyond the bound were dropped')
  t.equal(count(3), 3, 'and reads go on from the pool')
  t.equal(datasets.statementCounts(2, 'events').prepared, IDLE_STATEMENTS_PER_ENTITY + 3, 'with no new statement')
  t.throws(() => events.rows('nothing', { signal: new AbortController().signal }), /no entity nothing/)

  seedSampleData(db, 20)
  t.equal(count(undefined), 20, 'a new EVENTS_ROWS regenerates the events, and the pooled statements see them')
  // Either side of the size read in one call: every row, once, in order.
  for (const rows of [SMALL_ENTITY_ROWS, SMALL_ENTITY_ROWS + 1]) {
    seedSampleData(db, rows)
    t.equal(count(undefined), rows, `${rows} rows`)
  }
  const sales = await datasets.getDataset({ ...ref, resourceSequence: 1 })
  const customers = sales?.rows('customers', { limit: undefined, signal: new AbortController().signal }) as Iterable<readonly unknown[]>
  t.same([...customers].map((row) => row[0]), [1, 2, 3, 4, 5, 6], 'a small entity, whole')
  t.same(datasets.statementCounts(1, 'customers'), { prepared: 0, idle: 0 }, 'read in one call by its statement with the limit written in: no pooled statement taken')
  t.same([...sales?.rows('customers', { limit: 2, signal: new AbortController().signal }) as Iterable<readonly unknown[]>].map((row) => row[0]), [1, 2], 'a small limit, bound')
  t.same(datasets.statementCounts(1, 'customers'), { prepared: 1, idle: 1 }, 'read with one pooled statement, given back at once')
})

t.test('concurrent downloads of one entity over HTTP, some cut off: no busy statement, the pool stays bounded', async (t) => {
  // 14 MB of json per download: far more than loopback buffers hold, so a
  // client that stops reading keeps its download, and its statement, open.
  const app = await buildExampleApp({ dataDir: tempDir(t), adminToken: 'admin', eventsRows: 100_000, logLevel: 'silent' })
  t.teardown(() => app.close())
  const demo = await createDemoKey(app, 'admin')
  if (demo === null) throw new Error('no demo key')
  const assigned = await app.inject({
    method: 'PUT', url: '/api-keys/acme/shop/endpoints/1/dataset/2', headers: { authorization: 'Bearer admin' }, payload: { keyIds: [demo.id] }
  })
  t.equal(assigned.statusCode, 201)
  await app.listen({ host: '127.0.0.1', port: 0 })
  const { port } = app.server.address() as AddressInfo
  const counts = (): { prepared: number, idle: number } => app.sampleDatasets.statementCounts(2, 'events')

  /** A download that stops reading after its first bytes until told to go on (or to leave). */
  const download = (query: string): { started: Promise<void>, resume: () => Promise<{ status: number, body: string }>, leave: () => void } => {
    const chunks: Buffer[] = []
    let response: IncomingMessage | undefined
    let ended: Promise<unknown> | undefined
    const request = httpGet({ host: '127.0.0.1', port, path: `/api/acme/shop/model/1/dataset/2?${query}`, headers: { authorization: `Bearer ${demo.key}` }, agent: false })
    const started = new Promise<void>((resolve, reject) => {
      request.once('error', reject)
      request.once('response', (res) => {
        response = res
        // Listened for at once: a short body may end while paused.
        ended = once(res, 'end')
        ended.catch(() => {}) // a download the client leaves ends with an error
        res.on('data', (chunk: Buffer) => {
          if (chunks.push(chunk) === 1) {
            res.pause()
            resolve()
          }
        })
      })
    })
    return {
      started,
      resume: async () => {
        if (response === undefined) throw new Error('not started')
        response.resume()
        await ended
        return { status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString() }
      },
      leave: () => { request.destroy() }
    }
  }
  const idsOf = (body: string): number[] => (JSON.parse(body) as { events: Array<{ id: number }> }).events.map((e) => e.id)

  // Twelve at once, all open together: each holds a statement of its own.
  const open = Array.from({ length: 12 }, () => download('format=json'))
  await Promise.all(open.map((d) => d.started))
  t.same(counts(), { prepared: 12, idle: 0 }, 'twelve downloads open at once, each on its own statement')
  // Half are cut off by their client, half read to the end.
  for (const d of open.slice(0, 6)) d.leave()
  const finished = await Promise.all(open.slice(6).map(async (d) => d.resume()))
  for (const { status, body } of finished) {
    t.equal(status, 200)
    const ids = idsOf(body)
    t.ok(ids.length === 100_000 && ids.every((id, i) => id === i + 1), 'a whole download, every row once, in order')
  }
  // The cut-off ones give their statements back once the server sees the close.
  // (Waited for, up to a deadline far beyond need, so that a leak fails with the counts.)
  for (let waited = 0; counts().idle < IDLE_STATEMENTS_PER_ENTITY && waited < 30_000; waited += 20) {
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  t.same(counts(), { prepared: 12, idle: IDLE_STATEMENTS_PER_ENTITY }, 'all came back; the pool kept its bound and dropped the rest')

  // More downloads still work, from the pool, with and without a limit.
  const more = await Promise.all(['format=json&limit=3', 'format=json', 'format=csv-zip&limit=10'].map(async (query) => {
    const d = download(query)
    await d.started
    return d.resume()
  }))
  t.same(more.map((r) => r.status), [200, 200, 200])
  t.same(idsOf(more[0].body), [1, 2, 3], 'limit honoured')
  t.equal(idsOf(more[1].body).length, 100_000)
  t.same(counts(), { prepared: 12, idle: IDLE_STATEMENTS_PER_ENTITY }, 'no new statement was prepared')
})

t.test('jobs: timers are cleared on close, unfinished runs fail', async (t) => {
  const db = new Database(':memory:')
  t.teardown(() => db.close())
  const jobs = new SampleJobs(new SqliteJobStore(db))
  const pipeline = await jobs.getPipeline({ ...SAMPLE_MODEL, resourceSequence: 1 })
  t.equal(pipeline?.name, 'refresh-sales')
  t.equal((await jobs.getPipeline({ ...SAMPLE_MODEL, resourceSequence: 2 }))?.name, 'broken')
  t.equal(await jobs.getPipeline({ ...SAMPLE_MODEL, resourceSequence: 3 }), null)
  const id = randomUUID()
  await pipeline?.start(id)
  t.match(await jobs.getJob(id), { id, type: 'pipeline', status: 'queued' })
  t.equal(jobs.pendingSteps, 1)
  await jobs.close()
  t.equal(jobs.pendingSteps, 0, 'no timer left')
  t.match(await jobs.getJob(id), { status: 'failed', error: INTERRUPTED })
  await t.rejects(pipeline?.start(randomUUID()) as Promise<void>, /shutting down/, 'no run starts after close')
  t.equal(await jobs.getJob(randomUUID()), null)
})

t.test('buildExampleApp in process: close stops running jobs, restart keeps data', async (t) => {
  const config = { dataDir: join(tempDir(t), 'nested', 'data'), adminToken: 'in-process', eventsRows: 10, logLevel: 'silent' }
  const app = await buildExampleApp(config)
  const demo = await createDemoKey(app, config.adminToken)
  if (demo === null) throw new Error('no demo key on empty storage')
  t.equal(await createDemoKey(app, config.adminToken), null, 'only on empty storage')
  const run = await app.inject({
    method: 'POST', url: '/api/acme/shop/model/1/pipeline/1', headers: { authorization: `Bearer ${demo.key}` }
  })
  t.equal(run.statusCode, 200)
  const { job_id: jobId } = run.json<{ job_id: string }>()
  const notFound = await app.inject({ method: 'GET', url: `/no/such/route?api_key=${demo.key}` })
  t.same([notFound.statusCode, notFound.json()], [404, { message: 'Not found' }], 'the 404 does not echo the URL')
  // With its timers left running, a step would write to a closed database and throw.
  await app.close()
  await new Promise((resolve) => setTimeout(resolve, 1500))

  const reopened = await buildExampleApp(config)
  t.teardown(() => reopened.close())
  const job = await reopened.inject({ method: 'GET', url: `/api/job/${jobId}` })
  t.match(job.json(), { job_id: jobId, status: 'failed', error: INTERRUPTED }, 'the run cut short by close is failed')
  const keys = await reopened.inject({ method: 'GET', url: '/api-keys/acme/shop/keys', headers: { authorization: 'Bearer in-process' } })
  t.same(keys.json<Array<{ prefix: string }>>().map((k) => k.prefix), [demo.prefix], 'the key is kept')
})

t.test('a second server on the same data folder stops at start, and leaves the first one\'s jobs and data alone', async (t) => {
  const config = { dataDir: tempDir(t), adminToken: 'first', eventsRows: 10, logLevel: 'silent' }
  const app = await buildExampleApp(config)
  t.teardown(() => app.close())
  const demo = await createDemoKey(app, config.adminToken)
  if (demo === null) throw new Error('no demo key on empty storage')
  const headers = { authorization: `Bearer ${demo.key}` }
  const run = await app.inject({ method: 'POST', url: '/api/acme/shop/model/1/pipeline/1', headers })
  const { job_id: jobId } = run.json<{ job_id: string }>()

  await t.rejects(buildExampleApp(config), { message: /data-endpoints\.db is in use by another connection or process/ },
    'the second start fails, saying why')
  const job = (await app.inject({ url: `/api/job/${jobId}` })).json<{ status: string }>()
  t.not(job.status, 'failed', `the first server's run goes on (${job.status})`)
  const download = await app.inject({ url: '/api/acme/shop/model/1/dataset/1?format=json', headers })
  t.equal(download.statusCode, 200, 'and the first server answers as before')
})

t.test('GET /metrics: the plugin\'s metrics and Node\'s, to the admin token only', async (t) => {
  const config = { dataDir: join(tempDir(t), 'data'), adminToken: 'metrics-admin', eventsRows: 10, logLevel: 'silent' }
  const app = await buildExampleApp(config)
  t.teardown(() => app.close())
  const demo = await createDemoKey(app, config.adminToken)
  if (demo === null) throw new Error('no demo key on empty storage')
  await app.inject({ url: '/api/acme/shop/model/1/dataset/1?format=json', headers: { authorization: `Bearer ${demo.key}` } })
  await app.inject({ url: '/api/acme/shop/model/1/dataset/1?format=json', headers: { authorization: `Bearer ${demo.key.slice(0, 11)}${'x'.repeat(21)}` } })
  for (const headers of [{}, { authorization: 'Bearer wrong' }, { authorization: `Bearer ${demo.key}` }]) {
    const refused = await app.inject({ url: '/metrics', headers })
    t.same([refused.statusCode, refused.json()], [403, { message: 'Not authorized' }], 'refused without the admin token')
  }
  const res = await app.inject({ url: '/metrics', headers: { authorization: 'Bearer metrics-admin' } })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /^text\/plain/)
  t.match(res.body, /^data_endpoints_requests_total\{route="dataset",status="200",reason="ok"\} 1$/m)
  t.match(res.body, /^data_endpoints_requests_total\{route="dataset",status="403",reason="unknown_key"\} 1$/m)
  t.match(res.body, /^process_cpu_user_seconds_total /m, 'Node\'s own metrics too')
  t.notOk(res.body.includes(demo.key.slice(11)), 'no key in the metrics')
})

t.test('the sample datasets carry revisions: 304 until their data is rewritten, across restarts', async (t) => {
  const config = { dataDir: join(tempDir(t), 'data'), adminToken: 'etag-admin', eventsRows: 10, logLevel: 'silent' }
  const etagsOf = async (eventsRows: number, previous?: Map<number, string>): Promise<Map<number, string>> => {
    const app = await buildExampleApp({ ...config, eventsRows })
    try {
      const admin = { authorization: 'Bearer etag-admin' }
      const { id, key } = (await app.inject({ method: 'POST', url: '/api-keys/acme/shop/keys', headers: admin, payload: { purpose: 'etag' } })).json() as { id: string, key: string }
      for (const resource of [1, 2]) {
        await app.inject({ method: 'PUT', url: `/api-keys/acme/shop/endpoints/1/dataset/${resource}`, headers: admin, payload: { keyIds: [id] } })
      }
      const etags = new Map<number, string>()
      for (const resource of [1, 2]) {
        const url = `/api/acme/shop/model/1/dataset/${resource}?format=json`
        const headers = { authorization: `Bearer ${key}` }
        const res = await app.inject({ url, headers })
        t.equal(res.statusCode, 200)
        const etag = res.headers.etag as string
        t.match(etag, /^W\/"/, `dataset ${resource}: an ETag`)
        t.equal((await app.inject({ url, headers: { ...headers, 'if-none-match': etag } })).statusCode, 304, `dataset ${resource}: 304 with it`)
        const old = previous?.get(resource)
        if (old !== undefined) {
          t.equal((await app.inject({ url, headers: { ...headers, 'if-none-match': old } })).statusCode,
            old === etag ? 304 : 200, `dataset ${resource}: the ETag of the last start`)
        }
        etags.set(resource, etag)
      }
      return etags
    } finally {
      await app.close()
    }
  }
  const first = await etagsOf(10)
  const same = await etagsOf(10, first)
  t.same(same, first, 'a restart on the same data keeps both revisions')
  const more = await etagsOf(20, same)
  t.equal(more.get(1), first.get(1), 'sales was not rewritten: same ETag')
  t.not(more.get(2), first.get(2), 'events was regenerated with EVENTS_ROWS=20: a new ETag')
})

t.test('revisions: false serves the sample datasets as a host without revisions: no ETag, every download rendered', async (t) => {
  const app = await buildExampleApp({ dataDir: tempDir(t), adminToken: 'plain-admin', eventsRows: 10, logLevel: 'silent', revisions: false })
  t.teardown(() => app.close())
  const admin = { authorization: 'Bearer plain-admin' }
  const { id, key } = (await app.inject({ method: 'POST', url: '/api-keys/acme/shop/keys', headers: admin, payload: { purpose: 'plain' } })).json() as { id: string, key: string }
  await app.inject({ method: 'PUT', url: '/api-keys/acme/shop/endpoints/1/dataset/1', headers: admin, payload: { keyIds: [id] } })
  const url = '/api/acme/shop/model/1/dataset/1?format=json'
  const headers = { authorization: `Bearer ${key}` }
  const first = await app.inject({ url, headers })
  t.equal(first.statusCode, 200)
  t.equal(first.headers.etag, undefined, 'no ETag')
  t.match(first.json(), { customers: Array, orders: Array }, 'the whole dataset')
  const again = await app.inject({ url, headers: { ...headers, 'if-none-match': '*' } })
  t.equal(again.statusCode, 200, 'If-None-Match gets the body again')
  t.equal(again.body, first.body, 'the same body')
})

t.test('the demo key is made by the first start that gets that far, and by no other', async (t) => {
  const config = { dataDir: tempDir(t), adminToken: 'in-process', eventsRows: 10, logLevel: 'silent', demoKey: true }
  // A start that failed before its demo key step (say, the port was taken) uses up nothing.
  await (await buildExampleApp(config)).close()
  const app = await buildExampleApp(config)
  t.teardown(() => app.close())
  t.match(await firstStartDemoKey(app, config), { key: /^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/ }, 'made on the first start')
  t.equal(await firstStartDemoKey(app, config), 'none', 'not again')
  t.equal(await firstStartDemoKey(app, { ...config, demoKey: false }), 'none', 'DEMO_KEY=off on a later start: none new all the same')

  // Data made before first starts were recorded: a later start.
  const older = { ...config, dataDir: tempDir(t) }
  const db = openExampleDatabase(join(older.dataDir, 'example.db'))
  seedSampleData(db, 10)
  db.prepare('DELETE FROM sample_meta WHERE name = ?').run('first_start')
  db.close()
  const olderApp = await buildExampleApp(older)
  t.teardown(() => olderApp.close())
  t.equal(await firstStartDemoKey(olderApp, older), 'none', 'no key on data from an older version')
})

t.test('with DATABASE_URL the example keeps keys and counters in PostgreSQL', async (t) => {
  const url = await pgAvailable(t)
  if (url === null) return
  const { client, schema } = await freshSchema(t, url)
  const config = { dataDir: tempDir(t), adminToken: 'pg-admin', eventsRows: 10, logLevel: 'silent', databaseUrl: url, databaseSchema: schema }
  const app = await buildExampleApp(config)
  const demo = await createDemoKey(app, config.adminToken)
  if (demo === null) throw new Error('no demo key on empty storage')
  const res = await app.inject({ url: '/api/acme/shop/model/1/dataset/1?format=json', headers: { authorization: `Bearer ${demo.key}` } })
  t.equal(res.statusCode, 200)
  await app.close()
  const stored = await client.query(`SELECT e.calls, k.prefix FROM "${schema}".endpoints e
    JOIN "${schema}".endpoint_keys ek ON ek.endpoint_id = e.id JOIN "${schema}".api_keys k ON k.id = ek.key_id
    WHERE e.type = 'dataset'`)
  t.same(stored.rows.map((r) => [Number(r.calls), r.prefix]), [[1, demo.prefix]], 'the key and its call are in PostgreSQL')
})

t.test('jobs left unfinished by an instance that stopped without closing are failed once stale; fresh ones are not', async (t) => {
  const db = new Database(':memory:')
  t.teardown(() => db.close())
  const store = new SqliteJobStore(db)
  await store.insert('stale', 1, 'crashed-instance')
  await store.insert('fresh', 1, 'live-instance')
  db.prepare('UPDATE jobs SET updated_at = ? WHERE id = ?').run(new Date(Date.now() - 120_000).toISOString(), 'stale')
  const jobs = new SampleJobs(store)
  t.teardown(() => jobs.close())
  t.equal(await jobs.failAbandoned(), 1, 'one job had not moved for a minute')
  t.match(await jobs.getJob('stale'), { status: 'failed', error: ABANDONED })
  t.match(await jobs.getJob('fresh'), { status: 'queued' }, 'a running instance\'s job is left alone')
})

t.test('with DATABASE_URL, two example instances share the jobs: either answers for any job; a stop fails only its own', async (t) => {
  const url = await pgAvailable(t)
  if (url === null) return
  const { client, schema } = await freshSchema(t, url)
  const env = { DATABASE_URL: url, DATABASE_SCHEMA: schema, ADMIN_TOKEN: 'two-instances', DEMO_KEY: 'off', LOG_LEVEL: 'warn' }
  const a = await startServer(t, { ...env, DATA_DIR: tempDir(t) })
  const b = await startServer(t, { ...env, DATA_DIR: tempDir(t) })
  const admin = { authorization: 'Bearer two-instances', 'content-type': 'application/json' }
  const created = await send({ method: 'POST', headers: admin, url: `${a.baseUrl}/api-keys/acme/shop/keys`, body: JSON.stringify({ purpose: 'two instances' }) })
  t.equal(created.status, 201)
  for (const pipeline of [1, 2]) {
    const put = await send({ method: 'PUT', headers: admin, url: `${b.baseUrl}/api-keys/acme/shop/endpoints/1/pipeline/${pipeline}`, body: JSON.stringify({ keyIds: [created.body.id] }) })
    t.ok(put.status === 200 || put.status === 201, `pipeline ${pipeline} endpoint made through the other instance`)
  }
  const run = async (base: string, pipeline: number): Promise<string> => {
    const res = await send({ method: 'POST', headers: { authorization: `Bearer ${created.body.key}` }, url: `${base}/api/acme/shop/model/1/pipeline/${pipeline}` })
    t.equal(res.status, 200)
    return res.body.job_id as string
  }
  const jobUrl = (base: string, id: string): string => `${base}/api/job/${id}`

  const onA = await run(a.baseUrl, 1)
  const seen = await followJob(jobUrl(b.baseUrl, onA))
  t.same(seen.seen.at(-1), 'succeeded', 'a job started through A runs to its end, as B sees it')
  const broken = await run(b.baseUrl, 2)
  t.match((await followJob(jobUrl(a.baseUrl, broken))).job, { status: 'failed', error: /legacy_orders/ }, 'and the other way round')

  // Each starts a run (they last about a second); A stops meanwhile.
  const cutShort = await run(a.baseUrl, 1)
  const goesOn = await run(b.baseUrl, 1)
  const { code } = await a.stop('SIGTERM')
  t.equal(code, 0, 'A stopped gracefully')
  t.match((await send({ method: 'GET', headers: {}, url: jobUrl(b.baseUrl, cutShort) })).body, { status: 'failed', error: INTERRUPTED },
    'A failed its own run as it stopped')
  t.equal((await followJob(jobUrl(b.baseUrl, goesOn))).job.status, 'succeeded', 'B\'s run was left to finish')
  const rows = await client.query(`SELECT count(*)::int AS n FROM "${schema}".example_jobs`)
  t.equal(rows.rows[0].n, 4, 'the jobs are rows in PostgreSQL')
  await b.stop('SIGTERM')
})
