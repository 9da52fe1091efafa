import fc from 'fast-check'
import t, { type Test } from 'tap'
import { PgStorage, SqliteStorage, type Storage } from '../../lib/index.js'
import { checkProperty, integerText, plainIntegerOf, sequenceOf, STORABLE, timestampCases, type TimestampCase } from '../fuzz-arbitraries.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'

// Every input a user types, generated, sent to every route that takes it, on
// SQLite and on PostgreSQL (issue 12): date-times at the edges of what a
// store holds (years 0000, 0001, 9999, 10000, leap seconds, offsets of
// ±23:59 and beyond) and integers in every spelling. Each answer is 400 or a
// success, as an oracle that shares no code with lib/inputs.ts says; a
// success reads back the very value sent. Never a 500, never a silent change.

const P = '/api-keys/acme/shop'
const HOUR = 3_600_000
const RUNS = Number(process.env.FUZZ_RUNS ?? 150)

const iso = (ms: number): string => new Date(ms).toISOString()
const q = encodeURIComponent

/** Usage buckets seeded at the edges of time, to see exactly which a range reads. */
const SEEDED_HOURS = [STORABLE.from, Date.UTC(1969, 11, 31, 23), Date.UTC(1970, 0, 1), Date.UTC(2030, 5, 30, 23), STORABLE.to - HOUR + 1]

function fail (what: string, res: { statusCode: number, body: string }, expected: string): never {
  throw new Error(`${what}: ${res.statusCode} ${res.body.slice(0, 300)}; expected ${expected}`)
}

async function inputProperties (t: Test, name: string, open: (t: Test) => Promise<Storage>): Promise<void> {
  await t.test(name, async (t) => {
    const storage = await open(t)
    const { app } = await buildApp(t, { storage, usageFlushInterval: 3_600_000 })
    const base = await createKey(app, 'patched')
    await assignKeys(app, 'dataset', [base.id])
    const endpointId: string = (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json()[0].id
    await storage.applyUsage({
      calls: new Map(),
      lastUsed: new Map(),
      counts: new Map(SEEDED_HOURS.map((hour) => [String(hour), { hour, endpointId, keyId: base.id, outcome: 'ok' as const, count: 1 }]))
    })
    const thisYear = new Date().getUTCFullYear()
    // Not the years around now, where "in the future" would depend on the moment the request is made.
    const expiries = timestampCases((year) => Math.abs(year - thisYear) > 1)

    const keyCount = async (): Promise<number> => (await storage.listKeys({ organization: 'acme', project: 'shop' })).length

    await checkProperty(t, `${name}: POST keys with expiresAt`, fc.asyncProperty(expiries, async ({ text, instant }: TimestampCase) => {
      const before = await keyCount()
      const res = await app.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: 'fuzz', expiresAt: text } })
      const accept = instant !== null && instant > Date.now()
      if (!accept) {
        if (res.statusCode !== 400 || !res.json().message.startsWith('body.expiresAt: ')) fail(`POST ${text}`, res, '400 naming body.expiresAt')
        if (await keyCount() !== before) throw new Error(`POST ${text}: refused, yet a key was made`)
        return
      }
      if (res.statusCode !== 201 || res.json().expiresAt !== iso(instant)) fail(`POST ${text}`, res, `201 with expiresAt ${iso(instant)}`)
      const { id } = res.json()
      const listed = (await app.inject({ url: `${P}/keys`, headers: ADMIN })).json().find((k: { id: string }) => k.id === id)
      if (listed?.expiresAt !== iso(instant)) throw new Error(`POST ${text}: listed with ${String(listed?.expiresAt)}`)
      const [entry] = (await app.inject({ url: `${P}/audit?limit=1`, headers: ADMIN })).json().items
      if (entry.action !== 'key.created' || entry.changes.expiresAt?.to !== iso(instant)) throw new Error(`POST ${text}: audited as ${JSON.stringify(entry)}`)
      await app.inject({ method: 'DELETE', url: `${P}/keys/${id}`, headers: ADMIN })
    }), RUNS)

    await checkProperty(t, `${name}: PATCH a key's expiresAt`, fc.asyncProperty(expiries, async ({ text, instant }: TimestampCase) => {
      const read = async (): Promise<string | null> => (await storage.getKey({ organization: 'acme', project: 'shop' }, base.id))?.expiresAt?.toISOString() ?? null
      const was = await read()
      const res = await app.inject({ method: 'PATCH', url: `${P}/keys/${base.id}`, headers: ADMIN, payload: { expiresAt: text } })
      if (instant === null || instant <= Date.now()) {
        if (res.statusCode !== 400 || !res.json().message.startsWith('body.expiresAt: ')) fail(`PATCH ${text}`, res, '400 naming body.expiresAt')
        if (await read() !== was) throw new Error(`PATCH ${text}: refused, yet the expiry changed`)
        return
      }
      if (res.statusCode !== 200 || res.json().expiresAt !== iso(instant)) fail(`PATCH ${text}`, res, `200 with expiresAt ${iso(instant)}`)
      if (await read() !== iso(instant)) throw new Error(`PATCH ${text}: stored as ${String(await read())}`)
    }), RUNS)
    // Only expiries in the future were accepted.
    t.equal((await app.inject({ url: DATASET_URL, query: { api_key: base.key, meta: 'entities' } })).statusCode, 200, 'the patched key still serves')

    // Every bucket there is: the seeded ones, and this hour's of the requests above.
    const everything = await app.inject({ url: `${P}/usage?from=${q(iso(STORABLE.from))}&to=${q(iso(STORABLE.to))}`, headers: ADMIN })
    const known: number[] = [...new Set(everything.json().rows.map((r: { start: string }) => Date.parse(r.start)))] as number[]
    t.same(known.filter((h) => SEEDED_HOURS.includes(h)), SEEDED_HOURS, 'the seeded buckets, from the year 1 to 9999, read back')
    /** The buckets a usage query of [from, to) must answer: those that overlap it. */
    const expectedStarts = (from: number, to: number): string[] =>
      known.filter((h) => h >= Math.floor(from / HOUR) * HOUR && h < to).map(iso)

    for (const bound of ['from', 'to'] as const) {
      await checkProperty(t, `${name}: usage ${bound}`, fc.asyncProperty(timestampCases(), async ({ text, instant }: TimestampCase) => {
        const other = bound === 'from' ? iso(STORABLE.to) : iso(STORABLE.from)
        const [from, to] = bound === 'from' ? [instant, STORABLE.to] : [STORABLE.from, instant]
        const res = await app.inject({ url: `${P}/usage?${bound}=${q(text)}&${bound === 'from' ? 'to' : 'from'}=${q(other)}`, headers: ADMIN })
        if (from === null || to === null) {
          if (res.statusCode !== 400 || !res.json().message.startsWith(`querystring.${bound}: `)) fail(`usage ${bound}=${text}`, res, `400 naming querystring.${bound}`)
          return
        }
        if (from >= to) {
          if (res.statusCode !== 400 || res.json().message !== 'querystring.from: must be before to') fail(`usage ${bound}=${text}`, res, '400 from before to')
          return
        }
        if (res.statusCode !== 200) fail(`usage ${bound}=${text}`, res, '200')
        const starts = res.json().rows.map((r: { start: string }) => r.start)
        const expected = expectedStarts(from, to)
        if (starts.join() !== expected.join()) throw new Error(`usage ${bound}=${text}: rows at ${starts.join()}, expected ${expected.join()}`)
      }), RUNS)
    }

    // Audit entries to page through: a few more changes.
    for (let i = 0; i < 5; i++) await app.inject({ method: 'PATCH', url: `${P}/keys/${base.id}`, headers: ADMIN, payload: { purpose: `p${i}` } })
    const all: Array<{ id: string }> = (await app.inject({ url: `${P}/audit?limit=500`, headers: ADMIN })).json().items
    t.ok(all.length >= 8, `${all.length} audit entries to page through`)

    await checkProperty(t, `${name}: audit limit`, fc.asyncProperty(integerText, async (text) => {
      const limit = plainIntegerOf(text, 1, 500)
      const res = await app.inject({ url: `${P}/audit?limit=${q(text)}`, headers: ADMIN })
      if (limit === null) {
        if (res.statusCode !== 400 || !res.json().message.startsWith('querystring.limit: ')) fail(`audit limit=${JSON.stringify(text)}`, res, '400 naming querystring.limit')
        return
      }
      const ids = res.json().items?.map((e: { id: string }) => e.id)
      if (res.statusCode !== 200 || ids.join() !== all.slice(0, limit).map((e) => e.id).join()) fail(`audit limit=${text}`, res, `the newest ${limit}`)
    }), RUNS)

    const cursors = fc.oneof(integerText, fc.constantFrom(...all.map((e) => e.id)))
    await checkProperty(t, `${name}: audit before`, fc.asyncProperty(cursors, async (text) => {
      const res = await app.inject({ url: `${P}/audit?before=${q(text)}&limit=500`, headers: ADMIN })
      if (!/^[1-9][0-9]{0,17}$/.test(text)) {
        if (res.statusCode !== 400 || !res.json().message.startsWith('querystring.before: ')) fail(`audit before=${JSON.stringify(text)}`, res, '400 naming querystring.before')
        return
      }
      const expected = all.filter((e) => BigInt(e.id) < BigInt(text)).map((e) => e.id)
      if (res.statusCode !== 200 || res.json().items.map((e: { id: string }) => e.id).join() !== expected.join()) fail(`audit before=${text}`, res, `ids ${expected.join()}`)
    }), RUNS)

    const customers = (await app.inject({ url: DATASET_URL, query: { api_key: base.key, format: 'json', entity: 'customers' } })).json().customers.length
    t.ok(customers >= 2, `${customers} customers to limit`)
    await checkProperty(t, `${name}: data route limit`, fc.asyncProperty(integerText, async (text) => {
      const limit = plainIntegerOf(text, 0, Number.MAX_SAFE_INTEGER)
      const res = await app.inject({ url: `${DATASET_URL}?api_key=${base.key}&format=json&entity=customers&limit=${q(text)}` })
      if (limit === null) {
        if (res.statusCode !== 400 || res.json().message !== 'Invalid limit: must be a non-negative integer') fail(`limit=${JSON.stringify(text)}`, res, '400 Invalid limit')
        return
      }
      if (res.statusCode !== 200 || res.json().customers.length !== Math.min(limit, customers)) fail(`limit=${text}`, res, `${Math.min(limit, customers)} rows`)
    }), RUNS)

    await checkProperty(t, `${name}: sequences in data paths`, fc.asyncProperty(integerText, integerText, async (m, r) => {
      const res = await app.inject({ url: `/api/acme/shop/model/${q(m)}/dataset/${q(r)}?meta=entities`, headers: { authorization: `Bearer ${base.key}` } })
      const [model, resource] = [sequenceOf(m), sequenceOf(r)]
      const expected = model === null || resource === null ? [404, 'Not found'] : model === 1 && resource === 1 ? [200] : [403, 'Unknown API Endpoint']
      if (res.statusCode !== expected[0] || (expected[1] !== undefined && res.json().message !== expected[1])) {
        fail(`GET model/${JSON.stringify(m)}/dataset/${JSON.stringify(r)}`, res, expected.join(' '))
      }
    }), RUNS)

    await checkProperty(t, `${name}: sequences in management paths`, fc.asyncProperty(integerText, integerText, async (m, r) => {
      const res = await app.inject({ method: 'DELETE', url: `${P}/endpoints/${q(m)}/pipeline/${q(r)}`, headers: ADMIN })
      const valid = sequenceOf(m) !== null && sequenceOf(r) !== null
      if (valid ? res.statusCode !== 404 || res.json().message !== 'Endpoint not found' : res.statusCode !== 400 && res.statusCode !== 404) {
        fail(`DELETE endpoints/${m}/pipeline/${r}`, res, valid ? '404 Endpoint not found' : '400')
      }
    }), RUNS)
  })
}

await inputProperties(t, 'SQLite', async () => new SqliteStorage({ filename: ':memory:' }))

t.test('PostgreSQL', async (t) => {
  const url = await pgAvailable(t)
  if (url === null) return
  const { schema } = await freshSchema(t, url)
  await inputProperties(t, 'PostgreSQL', async () => new PgStorage({ connectionString: url, schema }))
})
