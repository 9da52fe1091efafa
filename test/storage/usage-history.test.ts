import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { SqliteStorage } from '../../lib/index.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, PIPELINE_URL } from '../helper.js'

// The usage history (DESIGN.md §4.1) through the plugin: every data request
// to an endpoint that exists is counted by hour, endpoint, key and outcome,
// and GET <prefix>/:organization/:project/usage answers it.

const P = '/api-keys/acme/shop'
const HOUR = 3_600_000

interface Row { start: string, endpointId: string, keyId: string | null, outcome: string, count: number }

async function usage (app: Awaited<ReturnType<typeof buildApp>>['app'], query: Record<string, string> = {}): Promise<Row[]> {
  const res = await app.inject({ url: `${P}/usage`, query, headers: ADMIN })
  if (res.statusCode !== 200) throw new Error(`usage: ${res.statusCode} ${res.body}`)
  return res.json().rows
}

/** The counts of `rows` by "outcome key" ("ok k1"), summed over buckets. */
function tally (rows: Row[], names: Map<string | null, string>): Record<string, number> {
  const out: Record<string, number> = {}
  for (const r of rows) {
    const name = `${r.outcome} ${names.get(r.keyId) ?? r.keyId}`
    out[name] = (out[name] ?? 0) + r.count
  }
  return out
}

t.test('every outcome of a data request is counted against its endpoint and key', async (t) => {
  const { app } = await buildApp(t)
  const good = await createKey(app, 'good')
  const off = await createKey(app, 'off', false)
  const unassigned = await createKey(app, 'unassigned')
  await assignKeys(app, 'dataset', [good.id, off.id])
  await assignKeys(app, 'pipeline', [good.id])
  const get = async (query: Record<string, string>, url = DATASET_URL): Promise<string> => {
    const res = await app.inject({ url, query })
    return res.statusCode === 200 ? 'ok' : res.json().message
  }

  t.equal(await get({ api_key: good.key, meta: 'entities' }), 'ok')
  t.equal(await get({ api_key: good.key, meta: 'entities' }), 'ok')
  t.equal(await get({ api_key: `${good.prefix}-${'x'.repeat(21)}` }), 'Unknown API key', 'a wrong secret on the prefix')
  t.equal(await get({ api_key: off.key }), 'Disabled API key')
  t.equal(await get({}), 'Not authorized', 'no key')
  t.equal(await get({ api_key: 'not a key' }), 'Unknown API key', 'a malformed key')
  t.equal(await get({ api_key: unassigned.key }), 'Unknown API key', 'a key not assigned here')
  t.equal(await get({ api_key: good.key }, '/api/acme/shop/model/1/dataset/9'), 'Unknown API Endpoint', 'no endpoint: nothing to count it against')
  t.equal((await app.inject({ method: 'POST', url: PIPELINE_URL, query: { api_key: good.key } })).statusCode, 200)

  const endpoints = (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json() as Array<{ id: string, type: string, calls: number }>
  const dataset = endpoints.find((e) => e.type === 'dataset')
  const pipeline = endpoints.find((e) => e.type === 'pipeline')
  const names = new Map<string | null, string>([[good.id, 'good'], [off.id, 'off'], [unassigned.id, 'unassigned'], [null, '-']])
  const rows = await usage(app)
  t.same(tally(rows.filter((r) => r.endpointId === dataset?.id), names), {
    'ok good': 2, 'unknown_key good': 1, 'disabled off': 1, 'no_key -': 1, 'unknown_prefix -': 2
  }, 'the dataset endpoint: ok, a guess at `good`, the disabled key, no key, two keys it does not know')
  t.same(tally(rows.filter((r) => r.endpointId === pipeline?.id), names), { 'ok good': 1 })
  t.equal(dataset?.calls, 2, '`calls` counts the successful ones only, as the ok rows do')
  const hour = Math.floor(Date.now() / HOUR) * HOUR
  t.ok(rows.length >= 6, `${rows.length} rows, each of the seven outcomes above in one or two hours`)
  t.ok(rows.every((r) => Date.parse(r.start) === hour || Date.parse(r.start) === hour - HOUR), 'in the current UTC hour')
  t.ok(rows.every((r) => r.count > 0), 'no zero rows')
})

t.test('the usage route: granularity, range, filters', async (t) => {
  const { app, storage } = await buildApp(t)
  const a = await createKey(app, 'a')
  const b = await createKey(app, 'b')
  await assignKeys(app, 'dataset', [a.id, b.id])
  const endpointId = (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json()[0].id as string
  const h = (day: number, hour: number): number => Date.UTC(2030, 0, day, hour)
  const count = (hour: number, keyId: string, n: number) => ({ hour, endpointId, keyId, outcome: 'ok' as const, count: n })
  const counts = [count(h(1, 5), a.id, 1), count(h(1, 6), a.id, 2), count(h(1, 6), b.id, 4), count(h(2, 0), b.id, 8)]
  await storage.applyUsage({ calls: new Map(), lastUsed: new Map(), counts: new Map(counts.map((c, i) => [String(i), c])) })
  const range = { from: '2030-01-01T00:00:00Z', to: '2030-01-03T00:00:00Z' }

  const hours = await usage(app, range)
  t.same(hours.map((r) => [r.start, r.keyId, r.count]), [
    ['2030-01-01T05:00:00.000Z', a.id, 1],
    ['2030-01-01T06:00:00.000Z', a.id, 2],
    ['2030-01-01T06:00:00.000Z', b.id, 4],
    ['2030-01-02T00:00:00.000Z', b.id, 8]
  ].sort((x, y) => (x[0] === y[0] ? (String(x[1]) < String(y[1]) ? -1 : 1) : 0)), 'by hour (the default), ISO starts')
  const body = (await app.inject({ url: `${P}/usage`, query: { ...range, granularity: 'day' }, headers: ADMIN })).json()
  t.equal(body.granularity, 'day')
  t.same(body.rows.map((r: Row) => [r.start, r.keyId, r.count]).sort(), [
    ['2030-01-01T00:00:00.000Z', a.id, 3],
    ['2030-01-01T00:00:00.000Z', b.id, 4],
    ['2030-01-02T00:00:00.000Z', b.id, 8]
  ].sort(), 'by UTC day')
  t.same((await usage(app, { ...range, keyId: a.id })).map((r) => r.count), [1, 2], 'keyId')
  t.same((await usage(app, { ...range, endpointId: randomUUID() })), [], 'endpointId of no endpoint: nothing')
  t.same((await usage(app, { from: '2030-01-01T06:30:00Z', to: '2030-01-01T07:00:00Z' })).map((r) => r.count).sort(), [2, 4],
    'the bucket holding `from` is included; those starting at `to` are not')
  t.same((await usage(app, { from: '2030-01-01T06:30:00+02:00', to: '2030-01-01T05:00:00.001Z' })).map((r) => r.count), [1],
    'offsets are honoured')
  t.same((await usage(app, { granularity: 'day', from: '2030-01-01T23:00:00Z', to: '2030-01-02T00:00:00Z' })).map((r) => r.count).sort(),
    [3, 4], 'a day is included from any time within it')
  t.same(await usage(app), [], 'by default the last 24 hours, which hold none of 2030')
})

t.test('bad usage parameters: 400 naming the parameter; no permission: 403', async (t) => {
  const { app } = await buildApp(t, { usageQueryMaxRows: 3 })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const status = async (query: Record<string, string>, headers: Record<string, string> = ADMIN): Promise<[number, string]> => {
    const res = await app.inject({ url: `${P}/usage`, query, headers })
    return [res.statusCode, res.json().message ?? '']
  }
  const cases: Array<[Record<string, string>, string]> = [
    [{ granularity: 'week' }, 'granularity'],
    [{ granularity: '' }, 'granularity'],
    [{ from: 'yesterday' }, 'from'],
    [{ from: '2030-01-01' }, 'from'],
    [{ to: '2030-01-01T00:00:00' }, 'to'],
    [{ to: '2030-02-30T00:00:00Z' }, 'to'],
    [{ from: '2030-01-02T00:00:00Z', to: '2030-01-01T00:00:00Z' }, 'from'],
    [{ from: '2030-01-01T00:00:00Z', to: '2030-01-01T00:00:00Z' }, 'from'],
    [{ keyId: '' }, 'keyId'],
    [{ endpointId: 'x'.repeat(101) }, 'endpointId'],
    [{ hour: '1' }, 'hour']
  ]
  for (const [query, name] of cases) {
    const [code, message] = await status(query)
    t.equal(code, 400, `${JSON.stringify(query)}: 400`)
    t.match(message, new RegExp(`\\b${name}\\b`), `${JSON.stringify(query)}: the message names ${name}: ${message}`)
  }
  t.same(await status({}, {}), [403, 'Not authorized'], 'no ManageAPIKeys')

  for (let i = 0; i < 4; i++) {
    await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })
    await app.inject({ url: DATASET_URL, query: { api_key: `${k.prefix}-${'y'.repeat(21)}` } })
  }
  await app.inject({ url: DATASET_URL })
  t.equal((await status({}))[0], 200, 'three rows (ok, unknown_key, no_key) fit usageQueryMaxRows = 3')
  await app.inject({ url: DATASET_URL, query: { api_key: 'not-a-key' } })
  const [code, message] = await status({})
  t.equal(code, 400, 'a fourth row does not')
  t.match(message, /more than 3 rows/)
})

t.test('counts written before a close are all there after it; none is written twice', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'fde-history-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const filename = join(dir, 'store.db')
  const { app } = await buildApp(t, { storage: new SqliteStorage({ filename }), usageFlushInterval: 5 })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  // Verified once first: the rest are memo hits, so nothing here races a bcrypt.
  t.equal((await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })).statusCode, 200)
  const results = await Promise.all(Array.from({ length: 2000 }, async (_, i) =>
    app.inject({ url: DATASET_URL, query: i % 4 === 3 ? {} : { api_key: k.key, meta: 'entities' } })))
  t.equal(results.filter((r) => r.statusCode === 200).length, 1500)
  await app.close()

  const reopened = new SqliteStorage({ filename })
  t.teardown(() => reopened.close())
  const rows = await reopened.queryUsage({ organization: 'acme', project: 'shop' },
    { granularity: 'day', from: new Date(Date.now() - 2 * 86_400_000), to: new Date(Date.now() + 86_400_000), limit: 10 })
  const sum = (outcome: string): number => rows.filter((r) => r.outcome === outcome).reduce((n, r) => n + r.count, 0)
  t.equal(sum('ok'), 1501, 'every success')
  t.equal(sum('no_key'), 500, 'every request without a key')
})

t.test('history older than usageRetention is deleted in the background; newer stays', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'fde-history-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const filename = join(dir, 'store.db')
  const seed = await buildApp(t, { storage: new SqliteStorage({ filename }) })
  const k = await createKey(seed.app)
  await assignKeys(seed.app, 'dataset', [k.id])
  const endpointId = (await seed.app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json()[0].id as string
  const now = Date.now()
  const at = (ago: number): number => Math.floor((now - ago) / HOUR) * HOUR
  const counts = [at(3 * 86_400_000), at(HOUR)].map((hour, i) => [String(i), { hour, endpointId, keyId: k.id, outcome: 'ok' as const, count: 1 }] as const)
  await seed.storage.applyUsage({ calls: new Map(), lastUsed: new Map(), counts: new Map(counts) })
  await seed.app.close()

  // Two days' retention: the three-day-old hour and day go, yesterday's stay.
  const storage = new SqliteStorage({ filename })
  const { app } = await buildApp(t, { storage, usageRetention: 2 * 86_400_000 })
  const history = async (granularity: 'hour' | 'day'): Promise<number[]> =>
    (await storage.queryUsage({ organization: 'acme', project: 'shop' },
      { granularity, from: new Date(0), to: new Date(now + 86_400_000), limit: 10 })).map((r) => r.start.getTime())
  for (let i = 0; i < 200 && (await history('hour')).length > 1; i++) await new Promise((resolve) => setTimeout(resolve, 10))
  t.same(await history('hour'), [at(HOUR)], 'the old hour is gone, the recent one stays')
  t.same(await history('day'), [Math.floor(at(HOUR) / 86_400_000) * 86_400_000], 'the old day is gone, the recent hour\'s day stays')
  t.equal((await app.inject({ url: `${P}/usage`, headers: ADMIN })).json().rows.length, 1, 'the route shows the one left')
})

t.test('the usage option values are checked at registration', async (t) => {
  for (const [name, value] of [['usageRetention', 0], ['usageRetention', 1.5], ['usageQueryMaxRows', 0], ['maxKeyLifetime', -1], ['maxKeyLifetime', 'x']] as const) {
    await t.rejects(buildApp(t, { [name]: value }), new RegExp(`"${name}"`), `${name}: ${String(value)}`)
  }
})

t.test('a long usage answer lets other requests through while it is read and written', async (t) => {
  const { app, storage } = await buildApp(t)
  const key = await createKey(app)
  await assignKeys(app, 'dataset', [key.id])
  const endpoint = ((await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json() as Array<{ id: string }>)[0]
  // 20,000 hourly buckets: several pages of the SQLite reader and of the answer's writer.
  const start = Date.UTC(2030, 0, 1)
  const counts = new Map(Array.from({ length: 20_000 }, (_, i) => {
    const count = { hour: start + Math.floor(i / 10) * HOUR, endpointId: endpoint.id, keyId: i % 10 === 0 ? key.id : randomUUID(), outcome: 'ok' as const, count: 1 }
    return [String(i), count]
  }))
  await storage.applyUsage({ calls: new Map(), lastUsed: new Map(), counts })

  const done: string[] = []
  const query = { from: new Date(start).toISOString(), to: new Date(start + 2000 * HOUR).toISOString() }
  const long = app.inject({ url: `${P}/usage`, query, headers: ADMIN }).then((res) => { done.push('usage'); return res })
  // Once the usage request holds the loop, a request made at the next turn
  // can only finish first if the usage request gives turns away.
  await new Promise((resolve) => setImmediate(resolve))
  const job = app.inject({ url: '/api/job/00000000-0000-4000-8000-000000000000' }).then((res) => { done.push('job'); return res })
  const [answer, other] = await Promise.all([long, job])
  t.equal(answer.statusCode, 200)
  t.equal(answer.json().rows.length, 20_000, 'the whole history')
  t.equal(other.statusCode, 404, 'the job route answered (no such job)')
  t.same(done, ['job', 'usage'], 'the other request finished while the usage answer was under way')
})
