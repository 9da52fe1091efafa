import net from 'node:net'
import type { AddressInfo } from 'node:net'
import fc from 'fast-check'
import { Registry } from 'prom-client'
import t from 'tap'
import { SqliteStorage } from '../../lib/index.js'
import { checkProperty } from '../fuzz-arbitraries.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, PIPELINE_URL } from '../helper.js'
import { eventually, freshMinute, GATED_URL, GatedDatasets, limitedKey, P } from '../limit-fixtures.js'
import { MemoryDatasets, SALES_REF, salesDataset } from '../fixtures.js'

// Per-key limits (DESIGN.md §4.3) on SQLite, where they are exact: each at
// its boundary, what the answers say, what is counted, and the download
// slots freed on every end of a download.

const NONE = { requestsPerMinute: null, concurrentDownloads: null, bytesPerDay: null }

function gated (): GatedDatasets {
  return new GatedDatasets(new MemoryDatasets().add(SALES_REF, salesDataset()))
}

async function endpointCalls (app: Awaited<ReturnType<typeof buildApp>>['app'], path = DATASET_URL): Promise<number> {
  const res = await app.inject({ url: `${P}/endpoints`, headers: ADMIN })
  return (res.json() as Array<{ path: string, calls: number }>).find((e) => e.path === path)?.calls ?? -1
}

async function usageRows (app: Awaited<ReturnType<typeof buildApp>>['app'], keyId: string): Promise<Array<{ outcome: string, count: number, bytes: number }>> {
  await app.dataEndpoints.flushUsage()
  const from = new Date(Date.now() - 2 * 3600_000).toISOString()
  const to = new Date(Date.now() + 3600_000).toISOString()
  const res = await app.inject({ url: `${P}/usage`, query: { granularity: 'hour', from, to, keyId }, headers: ADMIN })
  return res.json().rows
}

function sum (rows: Array<{ outcome: string, count: number, bytes: number }>, outcome: string, field: 'count' | 'bytes'): number {
  return rows.filter((r) => r.outcome === outcome).reduce((n, r) => n + r[field], 0)
}

t.test('limits are set at creation and by PATCH, shown in the key, and audited', async (t) => {
  const { app } = await buildApp(t)
  const plain = await createKey(app, 'plain')
  t.same((await app.inject({ url: `${P}/keys`, headers: ADMIN })).json()[0].limits, NONE, 'a key made without limits has none')

  const k = await limitedKey(app, { requestsPerMinute: 60, concurrentDownloads: 2 })
  t.same((k as unknown as { limits: unknown }).limits, { requestsPerMinute: 60, concurrentDownloads: 2, bytesPerDay: null },
    'the limits named, the others none')
  const patched = await app.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { limits: { bytesPerDay: 10_000_000_000, concurrentDownloads: null } } })
  t.equal(patched.statusCode, 200)
  t.same(patched.json().limits, { requestsPerMinute: 60, concurrentDownloads: null, bytesPerDay: 10_000_000_000 }, 'PATCH changes the named ones only')
  const same = await app.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { limits: { requestsPerMinute: 60 } } })
  t.equal(same.statusCode, 200)

  const audit = (await app.inject({ url: `${P}/audit`, headers: ADMIN })).json().items as Array<{ action: string, keyId: string, changes: Record<string, unknown> }>
  const ofKey = audit.filter((e) => e.keyId === k.id)
  t.same(ofKey.map((e) => e.action), ['key.updated', 'key.created'], 'a PATCH that changes nothing writes no entry')
  t.same(ofKey[1].changes.limits, { from: null, to: { requestsPerMinute: 60, concurrentDownloads: 2, bytesPerDay: null } })
  t.same(ofKey[0].changes, {
    limits: {
      from: { requestsPerMinute: 60, concurrentDownloads: 2, bytesPerDay: null },
      to: { requestsPerMinute: 60, concurrentDownloads: null, bytesPerDay: 10_000_000_000 }
    }
  })
  t.notOk('limits' in audit.find((e) => e.keyId === plain.id)!.changes, 'a key without limits: no limits in its entry')
})

t.test('defaultKeyLimits: for keys whose creation names no limits', async (t) => {
  const { app } = await buildApp(t, { defaultKeyLimits: { requestsPerMinute: 100 } })
  const k = await createKey(app)
  t.same((k as unknown as { limits: unknown }).limits, { requestsPerMinute: 100, concurrentDownloads: null, bytesPerDay: null })
  const own = await limitedKey(app, { concurrentDownloads: 1 })
  t.same((own as unknown as { limits: unknown }).limits, { requestsPerMinute: null, concurrentDownloads: 1, bytesPerDay: null })
  const none = await limitedKey(app, {})
  t.same((none as unknown as { limits: unknown }).limits, NONE, 'an empty object: no limits')
  await t.rejects(buildApp(t, { defaultKeyLimits: { requestsPerMinute: 0 } }), /defaultKeyLimits\.requestsPerMinute/)
  await t.rejects(buildApp(t, { defaultKeyLimits: { perHour: 5 } as never }), /no field "perHour"/)
})

t.test('bad limits are 400 naming the field, and write nothing', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  // As JSON text: 1e400 is a number JSON.parse makes Infinity.
  const bad = ['0', '-1', '1.5', '"5"', '"1e3"', 'true', '[]', '{}', String(2 ** 53), '1e400', '-0']
  for (const value of bad) {
    for (const field of ['requestsPerMinute', 'concurrentDownloads', 'bytesPerDay']) {
      const payload = `{"purpose":"p","limits":{"${field}":${value}}}`
      const created = await app.inject({ method: 'POST', url: `${P}/keys`, headers: { ...ADMIN, 'content-type': 'application/json' }, payload })
      t.equal(created.statusCode, 400, `create ${field}=${value}`)
      // A number not in plain digits is refused by the JSON parser (`Invalid <field>: ...`), the rest by the schema (`body.limits.<field>: ...`).
      t.match(created.json().message, field, 'the message names the field')
    }
  }
  const unknown = await app.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { limits: { perHour: 5 } } })
  t.equal(unknown.statusCode, 400)
  t.match(unknown.json().message, 'perHour')
  t.equal((await app.inject({ url: `${P}/keys`, headers: ADMIN })).json().length, 1, 'no key was made')

  // Finite doubles only: JSON writes NaN and ±Infinity as null, which is a valid limit (none).
  const notLimit = fc.oneof(
    fc.integer({ max: 0 }), fc.double({ noNaN: true, noDefaultInfinity: true }).filter((d) => !Number.isInteger(d) || d < 1 || d > Number.MAX_SAFE_INTEGER),
    fc.string(), fc.boolean(), fc.constant([]), fc.constant({}), fc.bigInt({ min: 2n ** 53n, max: 2n ** 70n }).map((n) => ({ raw: n.toString() }))
  )
  await checkProperty(t, 'a limit that is no positive integer', fc.asyncProperty(
    fc.constantFrom('requestsPerMinute', 'concurrentDownloads', 'bytesPerDay'), notLimit, fc.boolean(),
    async (field, value, patch) => {
      const text = typeof value === 'object' && value !== null && 'raw' in value ? (value as { raw: string }).raw : JSON.stringify(value)
      const payload = patch ? `{"limits":{"${field}":${text}}}` : `{"purpose":"p","limits":{"${field}":${text}}}`
      const res = await app.inject({
        method: patch ? 'PATCH' : 'POST', url: patch ? `${P}/keys/${k.id}` : `${P}/keys`, headers: { ...ADMIN, 'content-type': 'application/json' }, payload
      })
      if (res.statusCode !== 400 || !(res.json().message as string).includes(field)) {
        throw new Error(`${field}=${text}: ${res.statusCode} ${res.body}`)
      }
    }), 100)
  const after = (await app.inject({ url: `${P}/keys`, headers: ADMIN })).json()
  t.equal(after.length, 1)
  t.same(after[0].limits, NONE, 'nothing was written')
})

t.test('requestsPerMinute: exact at its boundary, with RateLimit fields, Retry-After, usage and metrics', async (t) => {
  const registry = new Registry()
  const { app } = await buildApp(t, { metrics: { registry } })
  const k = await limitedKey(app, { requestsPerMinute: 3 })
  const free = await createKey(app, 'free')
  await assignKeys(app, 'dataset', [k.id, free.id])
  await freshMinute()
  const answers = []
  for (let i = 0; i < 5; i++) answers.push(await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } }))
  t.same(answers.map((r) => r.statusCode), [200, 200, 200, 429, 429])
  const reset = Number(/;t=(\d+)$/.exec(String(answers[0].headers.ratelimit))?.[1])
  t.ok(reset >= 1 && reset <= 60, 't is the seconds left in the minute')
  for (const [i, res] of answers.entries()) {
    t.equal(res.headers['ratelimit-policy'], '"minute";q=3;w=60', `answer ${i}: the policy`)
    t.match(String(res.headers.ratelimit), new RegExp(`^"minute";r=${Math.max(0, 2 - i)};t=\\d+$`), `answer ${i}: what is left`)
  }
  t.same(answers[3].json(), { message: 'Rate limit exceeded' })
  const retry = Number(answers[3].headers['retry-after'])
  t.ok(Number.isInteger(retry) && retry >= 1 && retry <= 60, 'Retry-After: the seconds until the minute ends')

  const other = await app.inject({ url: DATASET_URL, query: { api_key: free.key, meta: 'entities' } })
  t.equal(other.statusCode, 200, 'another key is not limited')
  t.notOk('ratelimit' in other.headers, 'a key without a request limit gets no RateLimit fields')
  t.notOk('ratelimit-policy' in other.headers)

  t.equal(await endpointCalls(app), 4, 'a refused call is no call of the endpoint')
  const keys = (await app.inject({ url: `${P}/keys`, headers: ADMIN })).json() as Array<{ id: string, updatedAt: string | null }>
  t.ok(keys.find((x) => x.id === k.id)?.updatedAt, 'updatedAt was set by the admitted calls')
  const rows = await usageRows(app, k.id)
  t.equal(sum(rows, 'ok', 'count'), 3)
  t.equal(sum(rows, 'rate_limited', 'count'), 2, 'each refusal in the usage history, with its key')
  const metrics = await registry.getSingleMetricAsString('data_endpoints_limited_total')
  t.match(metrics, 'data_endpoints_limited_total{limit="requestsPerMinute"} 2')
  t.notMatch(metrics, k.id)
})

t.test('a refused call does not set updatedAt', async (t) => {
  const { app } = await buildApp(t)
  const k = await limitedKey(app, { bytesPerDay: 1 })
  await assignKeys(app, 'dataset', [k.id])
  t.equal((await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })).statusCode, 200)
  await app.dataEndpoints.flushUsage()
  const before = (await app.inject({ url: `${P}/keys`, headers: ADMIN })).json()[0].updatedAt
  await new Promise((resolve) => setTimeout(resolve, 5))
  const refused = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })
  t.equal(refused.statusCode, 429)
  await app.dataEndpoints.flushUsage()
  t.equal((await app.inject({ url: `${P}/keys`, headers: ADMIN })).json()[0].updatedAt, before)
})

t.test('requestsPerMinute counts pipeline calls too, and a refused one starts nothing', async (t) => {
  const { app, jobs } = await buildApp(t)
  const k = await limitedKey(app, { requestsPerMinute: 2 })
  await assignKeys(app, 'pipeline', [k.id])
  await freshMinute()
  const codes = []
  for (let i = 0; i < 3; i++) codes.push((await app.inject({ method: 'POST', url: PIPELINE_URL, query: { api_key: k.key } })).statusCode)
  t.same(codes, [200, 200, 429])
  t.equal(jobs.starts, 2)
  t.equal(await endpointCalls(app, PIPELINE_URL), 2)
})

t.test('bytesPerDay: a download starts below the quota, the next is refused once over; bytes are what was sent', async (t) => {
  const registry = new Registry()
  const { app } = await buildApp(t, { metrics: { registry }, compression: false })
  const json = await app.inject({ url: DATASET_URL, query: { api_key: (await (async () => {
    const probe = await createKey(app, 'probe')
    await assignKeys(app, 'dataset', [probe.id])
    return probe.key
  })()), format: 'json' } })
  const size = json.rawPayload.byteLength
  const k = await limitedKey(app, { bytesPerDay: 2 * size })
  await assignKeys(app, 'dataset', [k.id])
  const get = async (): Promise<{ statusCode: number, body: string, headers: Record<string, unknown>, bytes: number }> => {
    const res = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })
    return { statusCode: res.statusCode, body: res.body, headers: res.headers, bytes: res.rawPayload.byteLength }
  }
  const first = await get()
  const second = await get()
  t.same([first.statusCode, second.statusCode], [200, 200], 'below the quota (a download does not know its size before it starts)')
  const third = await get()
  t.equal(third.statusCode, 429, 'at the quota: refused (this instance\'s bytes count before they are written)')
  t.same(JSON.parse(third.body), { message: 'Daily download quota exceeded' })
  const midnight = Math.ceil(Date.now() / 86_400_000) * 86_400_000
  const retry = Number(third.headers['retry-after'])
  t.ok(Math.abs(retry - Math.ceil((midnight - Date.now()) / 1000)) <= 2, 'Retry-After: until the next UTC day')
  t.notOk('ratelimit' in third.headers, 'no request limit: no RateLimit fields')

  const metaOnly = await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })
  t.equal(metaOnly.statusCode, 429, 'every dataset GET is a download')
  const pipeline = await app.inject({ method: 'HEAD', url: DATASET_URL, query: { api_key: k.key, format: 'json' } })
  t.equal(pipeline.statusCode, 200, 'a HEAD sends no body: not refused')

  const rows = await usageRows(app, k.id)
  t.equal(sum(rows, 'ok', 'bytes'), first.bytes + second.bytes, 'usage bytes: exactly the bytes the client received')
  t.equal(sum(rows, 'rate_limited', 'count'), 2)
  t.equal(first.bytes, size)
  t.match(await registry.getSingleMetricAsString('data_endpoints_limited_total'), 'data_endpoints_limited_total{limit="bytesPerDay"} 2')

  // Read back from storage by a new instance: the bytes stored are what it checks.
  await app.dataEndpoints.flushUsage()
})

t.test('bytesPerDay reads the bytes stored by another instance on one SQLite file', async (t) => {
  const dir = t.testdir()
  const filename = `${dir}/limits.db`
  const a = await buildApp(t, { storage: new SqliteStorage({ filename }), compression: false })
  const b = await buildApp(t, { storage: new SqliteStorage({ filename }), compression: false })
  const k = await limitedKey(a.app, { bytesPerDay: 100 })
  await assignKeys(a.app, 'dataset', [k.id])
  t.equal((await a.app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })).statusCode, 200)
  t.equal((await b.app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })).statusCode, 200, 'B has not seen A\'s bytes yet (A has not written them)')
  await a.app.dataEndpoints.flushUsage()
  t.equal((await b.app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })).statusCode, 429, 'once written, B refuses')
})

t.test('concurrentDownloads: a slot is freed when a download completes, fails, or its client leaves', async (t) => {
  const datasets = gated()
  // undici keeps its connections open; the close should not wait for them.
  const { app } = await buildApp(t, { datasets, compression: false }, { forceCloseConnections: true })
  const k = await limitedKey(app, { concurrentDownloads: 1 })
  await assignKeys(app, 'dataset', [k.id])
  await assignKeys(app, 'dataset', [k.id], 2)
  const base = await app.listen({ port: 0, host: '127.0.0.1' })
  const url = `${base}${GATED_URL}?api_key=${k.key}&format=csv`

  const status = async (): Promise<number> => (await fetch(`${base}${DATASET_URL}?api_key=${k.key}&format=json`)).status

  // completion
  const first = await fetch(url)
  t.equal(first.status, 200)
  await datasets.whenStarted(1)
  t.equal(await status(), 429, 'a second download while the first runs: refused')
  const refused = await fetch(`${base}${DATASET_URL}?api_key=${k.key}&format=json`)
  t.same(await refused.json(), { message: 'Too many concurrent downloads' })
  t.equal(refused.headers.get('retry-after'), '1')
  datasets.finish()
  t.match(await first.text(), /last/, 'the first ends whole')
  t.ok(await eventually(async () => await status() === 200), 'completed: its slot is free')

  // the source fails after the headers
  const failing = await fetch(url)
  await datasets.whenStarted(2)
  t.equal(await status(), 429)
  datasets.fail()
  await t.rejects(failing.text(), 'the download is cut')
  t.ok(await eventually(async () => await status() === 200), 'failed: its slot is free')

  // the client leaves
  const controller = new AbortController()
  const leaving = await fetch(url, { signal: controller.signal })
  t.equal(leaving.status, 200)
  await datasets.whenStarted(3)
  t.equal(await status(), 429)
  controller.abort()
  t.ok(await eventually(async () => await status() === 200), 'left: its slot is free at once')
  datasets.finish()
})

t.test('concurrentDownloads: a slow reader holds its slot, one that leaves frees it', async (t) => {
  const big = new MemoryDatasets().add(SALES_REF, salesDataset()).add({ ...SALES_REF, resourceSequence: 2 }, {
    name: 'big',
    entities: [{ name: 'items', columns: [{ name: 'id', type: 'integer' }, { name: 'text', type: 'text' }], rows: Array.from({ length: 100_000 }, (_, i) => [i, 'y'.repeat(200)]) }]
  })
  const { app } = await buildApp(t, { datasets: big, compression: false })
  const k = await limitedKey(app, { concurrentDownloads: 1 })
  await assignKeys(app, 'dataset', [k.id])
  await assignKeys(app, 'dataset', [k.id], 2)
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as AddressInfo
  const status = async (): Promise<number> => (await fetch(`http://127.0.0.1:${port}${DATASET_URL}?api_key=${k.key}&meta=entities`)).status

  // Asks for 20 MB and reads only the first bytes: the server's writes wait.
  const socket = net.connect(port, '127.0.0.1')
  await new Promise<void>((resolve) => socket.once('connect', resolve))
  socket.write(`GET ${GATED_URL}?api_key=${k.key}&format=csv HTTP/1.1\r\nHost: x\r\n\r\n`)
  await new Promise<void>((resolve) => socket.once('data', () => resolve()))
  socket.pause()
  for (let i = 0; i < 5; i++) t.equal(await status(), 429, `the slow reader still holds its slot (${i})`)
  socket.destroy()
  t.ok(await eventually(async () => await status() === 200), 'it left: the slot is free')
})

t.test('concurrentDownloads: the server\'s close frees the slots of downloads it cuts', async (t) => {
  const datasets = gated()
  const dir = t.testdir()
  const storage = new SqliteStorage({ filename: `${dir}/close.db` })
  const built = await buildApp(t, { datasets, storage, closeStorage: false, compression: false }, { forceCloseConnections: true })
  const k = await limitedKey(built.app, { concurrentDownloads: 1 })
  await assignKeys(built.app, 'dataset', [k.id], 2)
  const base = await built.app.listen({ port: 0, host: '127.0.0.1' })
  const res = await fetch(`${base}${GATED_URL}?api_key=${k.key}&format=csv`)
  t.equal(res.status, 200)
  await datasets.whenStarted(1)
  t.equal(await storage.claimDownloadSlot(k.id, 1, 'probe', Date.now(), Date.now() + 1000), null, 'held while it runs')
  await built.app.close()
  await t.rejects(res.text())
  t.equal(await storage.claimDownloadSlot(k.id, 1, 'probe', Date.now(), Date.now() + 1000), 0, 'freed by the close')
  await storage.close()
})

t.test('a key without limits: no RateLimit fields, no limit rows', async (t) => {
  const { app, storage } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const res = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })
  t.equal(res.statusCode, 200)
  t.notOk('ratelimit' in res.headers)
  const db = (storage as SqliteStorage).db
  t.equal(db.prepare('SELECT count(*) FROM key_request_windows').pluck().get(), 0)
  t.equal(db.prepare('SELECT count(*) FROM download_slots').pluck().get(), 0)
})

