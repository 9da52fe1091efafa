import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import type pg from 'pg'
import { PgStorage } from '../../lib/storage/pg-storage.js'
import { usageRowsOf } from '../../lib/storage/usage-columns.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'

// The usage route on PostgreSQL: a range within the row cap answered in the
// documented order, its count and its read (in two halves) side by side; one over it
// refused from the count, never read sorted, and a burst of such requests
// leaves one read at most behind on the database.

const url = await pgAvailable(t)
const P = '/api-keys/acme/shop'

type Statement = 'count' | 'series' | 'sorted'

/** Records the usage statements the store sends through its pool, in order; `hold` keeps series reads from starting until it resolves. */
function watchUsageStatements (storage: PgStorage): { events: string[], hold: (gate: Promise<void> | null) => void } {
  const events: string[] = []
  let gate: Promise<void> | null = null
  const kindOf = (text: string): Statement | null =>
    text.includes('string_agg') ? 'series' : text.includes('ORDER BY u.start') ? 'sorted' : text.includes('SELECT count(*)::int AS n FROM (SELECT 1') ? 'count' : null
  const query = storage.pool.query.bind(storage.pool) as (config: pg.QueryConfig) => Promise<pg.QueryResult>
  ;(storage.pool as unknown as { query: (config: pg.QueryConfig) => Promise<pg.QueryResult> }).query = async (config) => {
    const kind = kindOf(config.text)
    if (kind === null) return query(config)
    events.push(`start ${kind}`)
    if (kind === 'series' && gate !== null) await gate
    try {
      return await query(config)
    } finally {
      events.push(`end ${kind}`)
    }
  }
  return { events, hold: (g) => { gate = g } }
}

/** The plugin on a PgStorage of its own fresh schema, with one key assigned to the dataset. */
async function keyedApp (t: Test, url: string, options: { usageQueryMaxRows?: number, poolSize?: number } = {}): Promise<{ storage: PgStorage, app: FastifyInstance, k: Awaited<ReturnType<typeof createKey>> }> {
  const { schema } = await freshSchema(t, url)
  const storage = new PgStorage({ connectionString: url, schema, poolSize: options.poolSize })
  t.teardown(() => storage.close())
  const { app } = await buildApp(t, { storage, usageQueryMaxRows: options.usageQueryMaxRows })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  return { storage, app, k }
}

const HOUR = 3_600_000
/** The first of the hours `hourlyUsage` writes. */
const FIRST_HOUR = Date.UTC(2030, 0, 1)

/** `hours` hourly buckets of the key's calls on the dataset from FIRST_HOUR, the h-th with a count of h + 1. */
async function hourlyUsage (storage: PgStorage, app: FastifyInstance, keyId: string, hours: number): Promise<void> {
  const [endpoint] = (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json() as Array<{ id: string }>
  const counts = new Map(Array.from({ length: hours }, (_, h) => [String(h), { hour: FIRST_HOUR + h * HOUR, endpointId: endpoint.id, keyId, outcome: 'ok' as const, count: h + 1 }]))
  await storage.applyUsage({ calls: new Map(), lastUsed: new Map(), counts })
}

if (url !== null) {
  t.test('usage on PostgreSQL: rows in order within the cap, counted and read at once; over it, 400 without a sorted read', async (t) => {
    const { storage, app, k } = await keyedApp(t, url, { usageQueryMaxRows: 3 })
    const { events } = watchUsageStatements(storage)
    for (let i = 0; i < 3; i++) await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })
    await app.inject({ url: DATASET_URL, query: { api_key: `${k.prefix}-${'y'.repeat(21)}` } })
    await app.inject({ url: DATASET_URL })
    const answer = await app.inject({ url: `${P}/usage`, headers: ADMIN })
    t.equal(answer.statusCode, 200)
    const rows = answer.json().rows as Array<{ keyId: string | null, outcome: string, count: number }>
    t.same(rows.map((r) => [r.keyId, r.outcome, r.count]), [[null, 'no_key', 1], [k.id, 'ok', 3], [k.id, 'unknown_key', 1]],
      'three rows, by key (none first), then outcome')
    t.same([...events].sort(), ['end count', 'end series', 'end series', 'start count', 'start series', 'start series'], 'one count, and a read of each half of the range')
    t.ok(events.lastIndexOf('start series') < events.indexOf('end count'), 'both reads began before the count ended')

    events.length = 0
    await app.inject({ url: DATASET_URL, query: { api_key: 'not-a-key' } })
    const over = await app.inject({ url: `${P}/usage`, headers: ADMIN })
    t.equal(over.statusCode, 400, 'a fourth row is over the cap')
    t.match(over.json().message, /more than 3 rows/)
    t.notOk(events.includes('start sorted'), 'nothing read sorted')
  })

  t.test('usage on PostgreSQL: a burst of ranges over the cap leaves one read at most running', async (t) => {
    const { storage, app, k } = await keyedApp(t, url, { usageQueryMaxRows: 1 })
    await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })
    await app.inject({ url: DATASET_URL })
    const { events, hold } = watchUsageStatements(storage)
    let open = (): void => {}
    hold(new Promise((resolve) => { open = resolve }))
    // The first request's read waits at the gate; every request is answered meanwhile.
    const answers = await Promise.all(Array.from({ length: 5 }, async () => app.inject({ url: `${P}/usage`, headers: ADMIN })))
    t.same(answers.map((a) => a.statusCode), [400, 400, 400, 400, 400], 'all refused, without waiting for the read')
    t.equal(events.filter((e) => e === 'start count').length, 5, 'each counted')
    t.equal(events.filter((e) => e === 'start series').length, 2, 'one request\'s read began (its two halves): the others counted alone while it ran')
    hold(null)
    open()
    while (events.filter((e) => e === 'end series').length < 2) await new Promise((resolve) => setImmediate(resolve))
    const columns = await storage.queryUsageWithinLimit({ organization: 'acme', project: 'shop' }, {
      granularity: 'hour', from: new Date(Date.now() - 3_600_000), to: new Date(Date.now() + 3_600_000), limit: 1
    })
    t.equal(columns, null, 'the store: two rows are over a limit of one')
    t.equal(events.filter((e) => e === 'start series').length, 4, 'once the left read ended, the next query read beside its count again')
  })

  t.test('usage on PostgreSQL: a bucket that starts at the middle of the range is read once, in the second half', async (t) => {
    const { storage, app, k } = await keyedApp(t, url)
    await hourlyUsage(storage, app, k.id, 3)
    const { events } = watchUsageStatements(storage)
    // [FIRST_HOUR, FIRST_HOUR + 2 h): its middle is the start of the second bucket.
    const columns = await storage.queryUsageWithinLimit({ organization: 'acme', project: 'shop' },
      { granularity: 'hour', from: new Date(FIRST_HOUR), to: new Date(FIRST_HOUR + 2 * HOUR), limit: 10 })
    t.same(columns === null ? null : usageRowsOf(columns).map((r) => [r.start.getTime(), r.count]), [[FIRST_HOUR, 1], [FIRST_HOUR + HOUR, 2]])
    t.equal(events.filter((e) => e === 'start series').length, 2, 'read in two halves')
    t.equal((await storage.queryUsageWithinLimit({ organization: 'acme', project: 'shop' },
      { granularity: 'hour', from: new Date(FIRST_HOUR), to: new Date(FIRST_HOUR + 3 * HOUR), limit: 2 })), null, 'three buckets are over a limit of two, one half or two')
  })

  t.test('usage on PostgreSQL: concurrent queries, within the cap and over it, each answered as if alone', async (t) => {
    // A pool of 4: the key checks hold one, a read ahead takes three.
    const { storage, app, k } = await keyedApp(t, url, { usageQueryMaxRows: 40, poolSize: 4 })
    // 60 hourly buckets: 30 in each half of [FIRST_HOUR, FIRST_HOUR + 60 h).
    await hourlyUsage(storage, app, k.id, 60)
    const range = (hours: number): string => `${P}/usage?granularity=hour&from=${new Date(FIRST_HOUR).toISOString()}&to=${new Date(FIRST_HOUR + hours * HOUR).toISOString()}`
    const asked = Array.from({ length: 12 }, (_, i) => [20, 40, 60][i % 3])
    const answers = await Promise.all(asked.map(async (hours) => app.inject({ url: range(hours), headers: ADMIN })))
    for (const [i, hours] of asked.entries()) {
      if (hours > 40) {
        t.equal(answers[i].statusCode, 400, `${hours} hours: over the cap of 40`)
      } else {
        t.equal(answers[i].statusCode, 200, `${hours} hours: within the cap`)
        t.same((answers[i].json().rows as Array<{ count: number }>).map((r) => r.count), Array.from({ length: hours }, (_, h) => h + 1), `${hours} hours: every bucket once, in order`)
      }
    }
    const data = await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })
    t.equal(data.statusCode, 200, 'the key checks still had their connection')
  })
}
