import t from 'tap'
import { PgStorage } from '../../lib/storage/pg-storage.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'

// The usage route on PostgreSQL: a range within the row cap answered in the
// documented order; one over it refused from a count, its rows never read.

const url = await pgAvailable(t)
const P = '/api-keys/acme/shop'

if (url !== null) {
  t.test('usage on PostgreSQL: rows in order within the cap; over it, 400 without reading the rows', async (t) => {
    const { schema } = await freshSchema(t, url)
    const storage = new PgStorage({ connectionString: url, schema })
    t.teardown(() => storage.close())
    const { app } = await buildApp(t, { storage, usageQueryMaxRows: 3 })
    const k = await createKey(app)
    await assignKeys(app, 'dataset', [k.id])
    const reads: string[] = []
    const queryUsageColumns = storage.queryUsageColumns.bind(storage)
    storage.queryUsageColumns = async (project, query) => {
      reads.push(query.granularity)
      return queryUsageColumns(project, query)
    }
    for (let i = 0; i < 3; i++) await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })
    await app.inject({ url: DATASET_URL, query: { api_key: `${k.prefix}-${'y'.repeat(21)}` } })
    await app.inject({ url: DATASET_URL })
    const answer = await app.inject({ url: `${P}/usage`, headers: ADMIN })
    t.equal(answer.statusCode, 200)
    const rows = answer.json().rows as Array<{ keyId: string | null, outcome: string, count: number }>
    t.same(rows.map((r) => [r.keyId, r.outcome, r.count]), [[null, 'no_key', 1], [k.id, 'ok', 3], [k.id, 'unknown_key', 1]],
      'three rows, by key (none first), then outcome')
    t.same(reads, ['hour'], 'read once')

    await app.inject({ url: DATASET_URL, query: { api_key: 'not-a-key' } })
    const over = await app.inject({ url: `${P}/usage`, headers: ADMIN })
    t.equal(over.statusCode, 400, 'a fourth row is over the cap')
    t.match(over.json().message, /more than 3 rows/)
    t.same(reads, ['hour'], 'refused from the count: the rows were not read')
  })
}
