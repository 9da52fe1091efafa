import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'
import t from 'tap'
import type { Dataset, DatasetSource, Pipeline, PipelineRunner, ResourceRef, Storage } from '../../lib/index.js'
import { SqliteStorage } from '../../lib/index.js'
import { EVENT_COLUMNS } from '../format-fixtures.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, PIPELINE_URL } from '../helper.js'
import { leaks } from '../secret-scan.js'

// Faults in the parts the host hands the plugin: a row source that throws
// half-way, a pipeline runner that throws, a storage that fails inside a
// write. Each gives a visible failure, the counters stay exact, and nothing
// is left half-written.

const P = '/api-keys/acme/shop'
const SHOP = { organization: 'acme', project: 'shop' }
const DATASET_1 = { ...SHOP, modelSequence: 1, type: 'dataset', resourceSequence: 1 } as const

function captureLogs (): { stream: Writable, lines: () => Array<Record<string, any>>, raw: string[] } {
  const raw: string[] = []
  const stream = new Writable({ write (chunk, _encoding, done) { raw.push(...String(chunk).split('\n').filter(Boolean)); done() } })
  return { stream, raw, lines: () => raw.map((l) => JSON.parse(l)) }
}

/** Dataset 1 with one entity of `rows` rows; while `failWith` is set, the read throws it at row `failAt`. */
class FlakySource implements DatasetSource {
  failWith: string | null = null
  constructor (private readonly rows: number, private readonly failAt: number) {}

  async getDataset (ref: ResourceRef): Promise<Dataset | null> {
    if (ref.resourceSequence !== 1) return null
    const { rows, failAt, failWith } = this
    return {
      name: 'events',
      entities: [{ name: 'events', columns: EVENT_COLUMNS }],
      async * rows () {
        for (let i = 1; i <= rows; i++) {
          if (failWith !== null && i === failAt) throw new Error(failWith)
          if (i % 500 === 0) await new Promise((resolve) => setImmediate(resolve))
          yield [i, 'view', `payload ${i} ${'x'.repeat(60)}`]
        }
      }
    }
  }
}

interface Outcome { status: number, complete: boolean, bytes: number, body: Buffer }

function download (port: number, path: string, stopAfterBytes?: number): Promise<Outcome> {
  return new Promise((resolve) => {
    const req = http.get({ port, host: '127.0.0.1', path }, (res) => {
      const chunks: Buffer[] = []
      let bytes = 0
      res.on('data', (chunk: Buffer) => {
        chunks.push(chunk)
        bytes += chunk.length
        if (stopAfterBytes !== undefined && bytes >= stopAfterBytes) req.destroy()
      })
      res.on('error', () => {})
      res.on('close', () => resolve({ status: res.statusCode ?? 0, complete: res.complete, bytes, body: Buffer.concat(chunks) }))
    })
    req.on('error', () => {})
  })
}

async function until (condition: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms
  while (!condition() && Date.now() < end) await new Promise((resolve) => setTimeout(resolve, 10))
}

async function callsOf (app: { dataEndpoints: { flushUsage: () => Promise<void> } }, storage: Storage, type: 'dataset' | 'pipeline' = 'dataset'): Promise<number | undefined> {
  await app.dataEndpoints.flushUsage()
  return (await storage.getEndpoint({ ...DATASET_1, type }))?.calls
}

t.test('a source that throws mid-stream: the response is cut, the call counted once and logged, the key masked', async (t) => {
  const logs = captureLogs()
  const source = new FlakySource(40_000, 25_000)
  const { app, storage } = await buildApp(t, { datasets: source }, { logger: { level: 'trace', stream: logs.stream } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as AddressInfo).port
  const url = (format: string, n: number): string => `${DATASET_URL}?api_key=${k.key}&format=${format}&n=${n}`

  // good, failing, good, failing, good: the plugin keeps serving between failures.
  const plan: Array<[string, boolean]> = [['json', false], ['json', true], ['csv-zip', false], ['csv-zip', true], ['sql', true], ['json', false]]
  const outcomes: Outcome[] = []
  for (const [i, [format, fail]] of plan.entries()) {
    source.failWith = fail ? `upstream refused token ${k.key}` : null
    outcomes.push(await download(port, url(format, i)))
  }
  for (const [i, [format, fail]] of plan.entries()) {
    const o = outcomes[i]
    t.equal(o.status, 200, `${format} ${fail ? 'failing' : 'good'}: the headers went out`)
    if (fail) {
      t.ok(o.bytes > 0, `${format}: ${o.bytes} bytes arrived before the failure`)
      t.equal(o.complete, false, `${format}: the client sees an incomplete response`)
    } else {
      t.equal(o.complete, true, `${format}: complete`)
    }
  }
  t.equal(JSON.parse(outcomes[5].body.toString('utf8')).events.length, 40_000, 'the last good download is whole')

  // A client that leaves half-way is counted and logged too.
  source.failWith = null
  const left = await download(port, url('json', 99), 100_000)
  t.equal(left.complete, false, 'the client left')

  t.equal(await callsOf(app, storage), plan.length + 1, 'every authenticated call counted once, failed ones included')

  await until(() => logs.lines().filter((l) => l.msg === 'data endpoint call').length >= plan.length + 1)
  const calls = logs.lines().filter((l) => l.msg === 'data endpoint call')
  t.equal(calls.length, plan.length + 1, 'one log line per call, cut ones included')
  const lineOf = (n: number): Record<string, any> | undefined => calls.find((l) => l.url.endsWith(`&n=${n}`))
  for (const [i, [format, fail]] of plan.entries()) {
    t.match(lineOf(i), {
      statusCode: 200,
      keyPrefix: k.prefix,
      message: fail ? `Download failed after it started: upstream refused token ${k.prefix}-[redacted]` : undefined
    }, `${format} ${fail ? 'failing' : 'good'}: logged with its message`)
  }
  t.match(lineOf(99), { statusCode: 200, message: 'Response not completed: the client closed the connection', keyPrefix: k.prefix },
    'the call the client left is logged as not completed')
  t.ok(logs.lines().some((l) => l.level === 40 && l.err?.message === `upstream refused token ${k.prefix}-[redacted]`),
    'Fastify\'s own warning about the cut stream has the key masked')
  t.same(leaks(logs.raw, [k.key]), [], 'the key is in no log line')
})

/** A runner whose start fails in the way `fail` says, after recording the job ids it was given. */
function failingRunner (fail: (jobId: string) => Promise<void>): PipelineRunner & { ids: string[] } {
  const ids: string[] = []
  return {
    ids,
    async getPipeline (ref: ResourceRef): Promise<Pipeline | null> {
      if (ref.resourceSequence !== 1) return null
      return { name: 'flaky', start: async (jobId) => { ids.push(jobId); await fail(jobId) } }
    }
  }
}

t.test('a pipeline runner that throws: 500 with its message, no job record, the call counted', async (t) => {
  let mode = 0
  let secret = ''
  const pipelines = failingRunner(async () => {
    mode++
    if (mode === 1) throw new Error('scheduler unavailable')
    if (mode === 2) throw new Error(`scheduler rejected credentials ${secret}`)
    if (mode === 3) throw Object.assign(new Error('quota exceeded'), { statusCode: 429, code: 'QUOTA' })
    // eslint-disable-next-line @typescript-eslint/only-throw-error
    throw 'a bare string'
  })
  const { app, jobs, storage } = await buildApp(t, { pipelines })
  const k = await createKey(app)
  secret = k.key
  await assignKeys(app, 'pipeline', [k.id])

  const expected = ['scheduler unavailable', `scheduler rejected credentials ${k.prefix}-[redacted]`, 'quota exceeded']
  const answers = []
  for (let i = 0; i < 4; i++) {
    const res = await app.inject({ method: 'POST', url: PIPELINE_URL, headers: { authorization: `Bearer ${k.key}` } })
    answers.push([res.statusCode, res.json()])
  }
  t.same(answers.slice(0, 3), expected.map((message) => [500, { message }]), 'the runner\'s message, the key masked, its own status ignored')
  t.equal(answers[3][0], 500, 'a bare string thrown: still a 500')
  t.type(answers[3][1].message, 'string', 'with a message')
  t.same(Object.keys(answers[3][1]), ['message'])

  t.equal(pipelines.ids.length, 4, 'start was called four times')
  for (const id of pipelines.ids) {
    const job = await app.inject({ url: `/api/job/${id}` })
    t.same([job.statusCode, job.json()], [404, { job: id, message: 'Job is not available or has been deleted' }], 'no job under the id it was given')
  }
  t.equal(jobs.jobs.size, 0)
  t.equal(await callsOf(app, storage, 'pipeline'), 4, 'the key was good: each call counted')
})

/** A real SqliteStorage whose next write fails inside its transaction, through a trigger. */
function failNext (storage: SqliteStorage, table: string, event: string, when = '1'): () => void {
  const name = `fail_${table}_${event.replace(/\W+/g, '_')}`.toLowerCase()
  storage.db.exec(`CREATE TRIGGER ${name} BEFORE ${event} ON ${table} WHEN ${when}
    BEGIN SELECT RAISE(ABORT, 'simulated disk failure'); END`)
  return () => storage.db.exec(`DROP TRIGGER ${name}`)
}

t.test('storage failing inside a write: 500 Internal server error, the detail logged, nothing half-written', async (t) => {
  const storage = new SqliteStorage({ filename: ':memory:' })
  const logs = captureLogs()
  const { app } = await buildApp(t, { storage }, { logger: { level: 'error', stream: logs.stream } })
  const status = async (key: string): Promise<[number, string?]> => {
    const res = await app.inject({ url: DATASET_URL, query: { api_key: key, meta: 'entities' } })
    return res.statusCode === 200 ? [200] : [res.statusCode, res.json().message]
  }
  const failed = async (method: 'POST' | 'PUT' | 'PATCH' | 'DELETE', url: string, payload?: unknown): Promise<void> => {
    const logged = logs.raw.length
    const res = await app.inject({ method, url, headers: ADMIN, ...(payload === undefined ? {} : { payload: payload as object }) })
    t.same([res.statusCode, res.json()], [500, { message: 'Internal server error' }], `${method} ${url}: 500, not in the storage's words`)
    const line = logs.lines().slice(logged).find((l) => l.statusCode === 500)
    t.match(line, { msg: 'Internal server error', err: { code: 'FDE_INTERNAL' }, cause: { code: 'SQLITE_CONSTRAINT_TRIGGER', message: 'simulated disk failure' } },
      `${method} ${url}: the storage's own error is in the log`)
  }
  const keys = async (): Promise<Array<{ id: string, prefix: string, purpose: string, isActive: boolean }>> =>
    (await app.inject({ url: `${P}/keys`, headers: ADMIN })).json()
  const endpoints = async (): Promise<Array<{ keys: Array<{ id: string }> }>> =>
    (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json()

  // createKey
  let restore = failNext(storage, 'api_keys', 'INSERT')
  await failed('POST', `${P}/keys`, { purpose: 'first' })
  t.same(await keys(), [], 'no key was created')
  restore()
  const a = await createKey(app, 'a')
  const b = await createKey(app, 'b')

  // putEndpoint, creating: the second assignment fails after the endpoint row and the first assignment.
  restore = failNext(storage, 'endpoint_keys', 'INSERT', `NEW.key_id = '${b.id}'`)
  await failed('PUT', `${P}/endpoints/1/dataset/1`, { keyIds: [a.id, b.id] })
  t.same(await endpoints(), [], 'no endpoint, not even one without keys')
  t.same(await status(a.key), [403, 'Unknown API Endpoint'])
  restore()

  // putEndpoint, replacing: the old assignments were cleared inside the failed transaction.
  await assignKeys(app, 'dataset', [a.id])
  restore = failNext(storage, 'endpoint_keys', 'INSERT', `NEW.key_id = '${b.id}'`)
  await failed('PUT', `${P}/endpoints/1/dataset/1`, { keyIds: [a.id, b.id] })
  t.same((await endpoints())[0].keys.map((k) => k.id), [a.id], 'the endpoint keeps its old keys')
  t.same(await status(a.key), [200], 'and the old key still works')
  t.same(await status(b.key), [403, 'Unknown API key'])
  restore()

  // updateKey: the purpose is written, then the active flag fails.
  restore = failNext(storage, 'api_keys', 'UPDATE OF is_active')
  await failed('PATCH', `${P}/keys/${a.id}`, { purpose: 'renamed', isActive: false })
  t.match((await keys()).find((k) => k.id === a.id), { purpose: 'a', isActive: true }, 'neither change was kept')
  t.same(await status(a.key), [200])
  restore()

  // replaceKeySecret
  restore = failNext(storage, 'api_keys', 'UPDATE OF hash')
  await failed('POST', `${P}/keys/${a.id}/regenerate`)
  t.equal((await keys()).find((k) => k.id === a.id)?.prefix, a.prefix, 'the prefix is unchanged')
  t.same(await status(a.key), [200], 'the old value still works')
  restore()

  // deleteKey (its assignments go by cascade, inside the same statement)
  restore = failNext(storage, 'endpoint_keys', 'DELETE')
  await failed('DELETE', `${P}/keys/${a.id}`)
  t.ok((await keys()).some((k) => k.id === a.id), 'the key is still there')
  t.same((await endpoints())[0].keys.map((k) => k.id), [a.id], 'and still assigned')
  t.same(await status(a.key), [200])
  restore()

  // deleteEndpoint
  restore = failNext(storage, 'endpoints', 'DELETE')
  await failed('DELETE', `${P}/endpoints/1/dataset/1`)
  t.same(await status(a.key), [200], 'the endpoint still serves')
  restore()

  // And every write works again once the fault is gone.
  t.equal((await app.inject({ method: 'DELETE', url: `${P}/keys/${a.id}`, headers: ADMIN })).statusCode, 204)
  t.same(await status(a.key), [403, 'Unknown API key'])
})

t.test('storage failing on a data request: 500 Internal server error, the detail logged, nothing counted', async (t) => {
  const real = new SqliteStorage({ filename: ':memory:' })
  // How the next lookups fail: a rejected promise, a throw before any
  // promise, a thenable's rejection (a host's promise library).
  const failing: Array<'rejects' | 'throws' | 'thenable'> = []
  const flaky: Storage = Object.assign(Object.create(real) as Storage, {
    findEndpointKey (...args: Parameters<Storage['findEndpointKey']>) {
      const how = failing.shift()
      const err = new Error('database is locked')
      if (how === 'throws') throw err
      if (how === 'rejects') return Promise.reject(err)
      if (how === 'thenable') return { then: (_: unknown, reject: (e: Error) => void) => { setImmediate(() => reject(err)) } } as unknown as Promise<null>
      return real.findEndpointKey(...args)
    }
  })
  const logs = captureLogs()
  const { app } = await buildApp(t, { storage: flaky }, { logger: { level: 'error', stream: logs.stream } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  failing.push('rejects', 'rejects', 'throws', 'thenable')
  for (let i = 0; i < 4; i++) {
    const res = await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })
    t.same([res.statusCode, res.json()], [500, { message: 'Internal server error' }])
    t.equal(res.headers['cache-control'], 'no-store')
  }
  const failures = logs.lines().filter((l) => l.statusCode === 500)
  t.equal(failures.length, 4, 'each failure logged')
  t.ok(failures.every((l) => l.cause.message === 'database is locked'), 'with the storage\'s own message')
  t.same(leaks(logs.raw, [k.key]), [], 'and no key')
  t.equal(await callsOf(app, real), 0, 'a request that never authenticated is not counted')
  const ok = await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })
  t.equal(ok.statusCode, 200, 'the next request is served')
  t.equal(await callsOf(app, real), 1)
})
