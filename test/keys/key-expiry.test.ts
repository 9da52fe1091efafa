import t, { type Test } from 'tap'
import { bcryptHasher, PgStorage, SqliteStorage, type KeyHasher, type Storage } from '../../lib/index.js'
import { ADMIN, assignKeys, buildApp, DATASET_URL } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'

// Key expiry (DESIGN.md §4.1): set at creation or by PATCH, never in the
// past; from `expiresAt` on the key is inactive, checked against the clock on
// every request, whether its comparison is memoised or not.

const P = '/api-keys/acme/shop'
const DAY = 86_400_000

const url = await pgAvailable(t)

/** The adapters to run against: SQLite always, PostgreSQL when reachable. */
const adapters: Array<[string, (t: Test) => Promise<Storage>]> = [
  ['SqliteStorage', async () => new SqliteStorage({ filename: ':memory:' })]
]
if (url !== null) {
  adapters.push(['PgStorage', async (t) => new PgStorage({ connectionString: url, schema: (await freshSchema(t, url)).schema })])
}

/** Date.now under the test's control while `at` is set; the real clock otherwise. */
const realNow = Date.now.bind(Date)
let frozen: number | null = null
Date.now = () => frozen ?? realNow()
t.teardown(() => { Date.now = realNow })

/** A bcrypt hasher that counts its comparisons. */
function countingHasher (): KeyHasher & { compares: number } {
  const inner = bcryptHasher(4)
  const hasher = {
    compares: 0,
    hash: (value: string) => inner.hash(value),
    compare: async (value: string, hash: string) => { hasher.compares++; return inner.compare(value, hash) }
  }
  return hasher
}

for (const [name, open] of adapters) {
  t.test(`${name}: expiresAt through the management API`, async (t) => {
    const { app } = await buildApp(t, { storage: await open(t) })
    const create = (body: Record<string, unknown>) => app.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: 'p', ...body } })
    const patch = (id: string, body: Record<string, unknown>) => app.inject({ method: 'PATCH', url: `${P}/keys/${id}`, headers: ADMIN, payload: body })

    const later = new Date(Date.now() + 30 * DAY)
    const made = await create({ expiresAt: later.toISOString().replace('Z', '+00:00') })
    t.equal(made.statusCode, 201)
    t.equal(made.json().expiresAt, later.toISOString(), 'stored and answered in UTC, to the millisecond')
    t.equal((await create({})).json().expiresAt, null, 'none given: never')
    t.equal((await create({ expiresAt: null })).json().expiresAt, null, 'null: never')

    for (const [value, message] of [
      [new Date(Date.now() - 1000).toISOString(), 'body.expiresAt: must be in the future'],
      ['2030-01-01', 'body.expiresAt: must be an ISO 8601 date-time with a time zone, e.g. 2030-01-01T00:00:00Z'],
      ['2030-01-01T00:00:00', 'body.expiresAt: must be an ISO 8601 date-time with a time zone, e.g. 2030-01-01T00:00:00Z'],
      [12345, 'body.expiresAt: must be string']
    ] as const) {
      const res = await create({ expiresAt: value })
      t.same([res.statusCode, res.json().message], [400, message], `create with ${String(value)}`)
      const again = await patch(made.json().id, { expiresAt: value })
      t.same([again.statusCode, again.json().message], [400, message], `patch with ${String(value)}`)
    }
    t.equal((await app.inject({ url: `${P}/keys`, headers: ADMIN })).json().length, 3, 'no key was made by a refused body')

    const sooner = new Date(Date.now() + DAY)
    t.equal((await patch(made.json().id, { expiresAt: sooner.toISOString() })).json().expiresAt, sooner.toISOString(), 'patched')
    t.equal((await patch(made.json().id, { purpose: 'q' })).json().expiresAt, sooner.toISOString(), 'kept by a patch without it')
    t.equal((await patch(made.json().id, { expiresAt: null })).json().expiresAt, null, 'cleared')
    t.equal((await patch('no-such-key', { expiresAt: sooner.toISOString() })).statusCode, 404)
  })

  t.test(`${name}: maxKeyLifetime bounds every key's expiry`, async (t) => {
    const max = 90 * DAY
    const { app } = await buildApp(t, { storage: await open(t), maxKeyLifetime: max })
    const create = (body: Record<string, unknown>) => app.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: 'p', ...body } })

    const before = Date.now()
    const made = (await create({})).json()
    const after = Date.now()
    const expiresAt = Date.parse(made.expiresAt)
    t.ok(expiresAt >= before + max && expiresAt <= after + max, 'a key made without expiresAt expires maxKeyLifetime after its creation')
    t.equal((await create({ expiresAt: new Date(Date.now() + max - DAY).toISOString() })).statusCode, 201, 'sooner is fine')

    const tooLate = await create({ expiresAt: new Date(Date.now() + max + DAY).toISOString() })
    t.equal(tooLate.statusCode, 400)
    t.match(tooLate.json().message, /^body\.expiresAt: must be no later than \d{4}-\d\d-\d\dT.*Z \(maxKeyLifetime\)$/)
    const never = await create({ expiresAt: null })
    t.equal(never.statusCode, 400, 'never expiring is refused')
    t.match(never.json().message, /^body\.expiresAt: must be set, no later than .* \(maxKeyLifetime\)$/)
    const patched = await app.inject({ method: 'PATCH', url: `${P}/keys/${made.id}`, headers: ADMIN, payload: { expiresAt: null } })
    t.equal(patched.statusCode, 400, 'nor can a patch remove the expiry')
    const extended = await app.inject({ method: 'PATCH', url: `${P}/keys/${made.id}`, headers: ADMIN, payload: { expiresAt: new Date(Date.now() + 2 * max).toISOString() } })
    t.equal(extended.statusCode, 400, 'or push it past the lifetime')
    t.equal((await app.inject({ url: `${P}/keys`, headers: ADMIN })).json().length, 2)
  })

  t.test(`${name}: at expiresAt the key is inactive, with the memo warm and cold`, async (t) => {
    const hasher = countingHasher()
    const { app } = await buildApp(t, { storage: await open(t), hasher })
    t.teardown(() => { frozen = null })
    const expiry = Math.floor(realNow() / 1000) * 1000 + DAY
    frozen = expiry - 60_000
    const make = async (purpose: string) => {
      const res = await app.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose, expiresAt: new Date(expiry).toISOString() } })
      return res.json() as { id: string, key: string, prefix: string }
    }
    const warm = await make('warm')
    const cold = await make('cold')
    await assignKeys(app, 'dataset', [warm.id, cold.id])
    const get = async (key: string): Promise<string> => {
      const res = await app.inject({ url: DATASET_URL, query: { api_key: key, meta: 'entities' } })
      return res.statusCode === 200 ? 'ok' : res.json().message
    }

    frozen = expiry - 1
    t.equal(await get(warm.key), 'ok', 'one millisecond before: the key works (and its comparison is memoised)')
    const compares = hasher.compares
    frozen = expiry
    t.equal(await get(warm.key), 'Disabled API key', 'at expiresAt: refused, memo warm')
    t.equal(hasher.compares, compares, 'without a new comparison')
    t.equal(await get(cold.key), 'Disabled API key', 'at expiresAt: refused, memo cold (first request)')
    t.equal(await get(`${cold.prefix}-${'z'.repeat(21)}`), 'Unknown API key', 'a wrong secret says nothing of the expiry')
    frozen = expiry + DAY
    t.equal(await get(warm.key), 'Disabled API key', 'and later')

    // Moving the expiry on brings it back, as enabling does.
    frozen = expiry + DAY
    const res = await app.inject({ method: 'PATCH', url: `${P}/keys/${warm.id}`, headers: ADMIN, payload: { expiresAt: new Date(expiry + 2 * DAY).toISOString() } })
    t.equal(res.statusCode, 200)
    t.equal(await get(warm.key), 'ok', 'a later expiry: works again')

    await app.dataEndpoints.flushUsage()
    const rows = (await app.inject({ url: `${P}/usage`, query: { from: new Date(expiry - DAY).toISOString(), to: new Date(expiry + 3 * DAY).toISOString() }, headers: ADMIN })).json().rows as Array<{ keyId: string, outcome: string, count: number }>
    const count = (keyId: string, outcome: string): number => rows.filter((r) => r.keyId === keyId && r.outcome === outcome).reduce((n, r) => n + r.count, 0)
    t.same([count(warm.id, 'ok'), count(warm.id, 'expired'), count(cold.id, 'expired'), count(cold.id, 'unknown_key')], [2, 2, 1, 1],
      'the usage history tells expired refusals apart')
  })
}
