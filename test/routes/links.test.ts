import { Writable } from 'node:stream'
import zlib from 'node:zlib'
import type { FastifyInstance } from 'fastify'
import fc from 'fast-check'
import t, { type Test } from 'tap'
import { checkProperty } from '../fuzz-arbitraries.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, PIPELINE_URL } from '../helper.js'
import { redactKeys } from '../../lib/keys/api-key.js'
import { SqliteStorage, type Storage } from '../../lib/index.js'
import { parseCsv } from '../format-readers.js'
import { MemoryDatasets, SALES_REF } from '../fixtures.js'
import { duckdbQuery, parquetFolder } from '../columnar-readers.js'
import { EXPIRED_LINK_RETENTION_MS, Housekeeping } from '../../lib/storage/housekeeping.js'
import { freshMinute, limitedKey } from '../limit-fixtures.js'

// Download links (DESIGN.md §4.2): minted with the key, used with the token
// alone, answering what the keyed GET answers, and refused in the documented
// order when the link, its key or its endpoint is no longer good.

const MANAGE = '/api-keys/acme/shop'
const LINKS_URL = `${DATASET_URL}/links`

interface Minted { id: string, url: string, expiresAt: string }

async function mint (app: FastifyInstance, key: string, body: Record<string, unknown> = { format: 'csv', entity: 'customers' }): Promise<Minted> {
  const res = await app.inject({ method: 'POST', url: LINKS_URL, headers: { authorization: `Bearer ${key}` }, payload: body })
  if (res.statusCode !== 201) throw new Error(`mint: ${res.statusCode} ${res.body}`)
  return res.json()
}

/** The path of a link's URL, for inject. */
function pathOf (url: string): string {
  return new URL(url).pathname
}

async function withClock<T> (now: number, work: () => Promise<T>): Promise<T> {
  const real = Date.now
  Date.now = () => now
  try {
    return await work()
  } finally {
    Date.now = real
  }
}

async function setup (t: Test, options = {}): Promise<{ app: FastifyInstance, storage: Storage, datasets: MemoryDatasets, key: { id: string, key: string, prefix: string } }> {
  const { app, storage, datasets } = await buildApp(t, options)
  const key = await createKey(app)
  await assignKeys(app, 'dataset', [key.id])
  return { app, storage, datasets, key }
}

t.test('a minted link downloads what the keyed GET answers, without the key, and counts as the key\'s call', async (t) => {
  const { app, key } = await setup(t)
  const before = Date.now()
  const link = await mint(app, key.key)
  t.match(link.url, /^http:\/\/localhost:80\/api\/links\/[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}\/customers\.csv$/, 'ends in the file name')
  t.notOk(link.url.includes(key.key.slice(11)), 'no key in the URL')
  const expires = Date.parse(link.expiresAt)
  t.ok(expires >= before + 3600_000 && expires <= Date.now() + 3600_000, 'an hour by default')

  const keyed = await app.inject({ url: `${DATASET_URL}?api_key=${key.key}&format=csv&entity=customers` })
  const res = await app.inject({ url: pathOf(link.url) })
  t.equal(res.statusCode, 200)
  t.equal(res.body, keyed.body, 'the same bytes')
  t.equal(res.headers['content-type'], 'text/csv; charset=utf-8')
  t.equal(res.headers['content-disposition'], keyed.headers['content-disposition'])
  t.equal(res.headers['referrer-policy'], 'no-referrer')
  t.equal(res.headers['cache-control'], 'private, no-store')
  t.equal(parseCsv(res.body).length, 4, 'header and three rows')

  const head = await app.inject({ method: 'HEAD', url: pathOf(link.url) })
  t.equal(head.statusCode, 200)
  t.equal(head.headers['content-type'], 'text/csv; charset=utf-8')
  t.equal(head.body, '')
  const post = await app.inject({ method: 'POST', url: pathOf(link.url) })
  t.equal(post.statusCode, 405)
  t.equal(post.headers.allow, 'GET, HEAD')

  await app.dataEndpoints.flushUsage()
  const endpoints = (await app.inject({ url: `${MANAGE}/endpoints`, headers: ADMIN })).json()
  t.equal(endpoints[0].calls, 4, 'the minting, the keyed GET, the link GET and the link HEAD')
  const keys = (await app.inject({ url: `${MANAGE}/keys`, headers: ADMIN })).json()
  t.ok(Date.parse(keys[0].updatedAt) >= before, 'the key\'s updatedAt is set')
  const usage = (await app.inject({ url: `${MANAGE}/usage`, headers: ADMIN })).json()
  t.same(usage.rows.map((r: { keyId: string, outcome: string, count: number }) => [r.keyId, r.outcome, r.count]), [[key.id, 'ok', 4]])
})

t.test('a link answers every format and parameter as the GET: json, sql, zip, meta, limit; gzip when asked', async (t) => {
  const { app, key, datasets } = await setup(t)
  for (const [params, name] of [
    [{ format: 'json', limit: 1 }, 'sales.json'],
    [{}, 'sales.sql'],
    [{ format: 'csv-zip', archiveType: 'tar' }, 'sales-csv.tar'],
    [{ format: 'parquet', entity: 'orders' }, 'orders.parquet'],
    [{ meta: 'entities' }, 'sales-entities.json']
  ] as const) {
    const link = await mint(app, key.key, params)
    t.ok(link.url.endsWith(`/${name}`), `${JSON.stringify(params)}: ${name}`)
    const query = new URLSearchParams(Object.entries(params).map(([k, v]): [string, string] => [k, String(v)])).toString()
    const keyed = await app.inject({ url: `${DATASET_URL}?api_key=${key.key}&${query}` })
    const res = await app.inject({ url: pathOf(link.url) })
    t.equal(res.statusCode, 200)
    // A tar's entries carry the time each download was made: two a second apart differ there alone.
    const comparable = name.endsWith('.tar') ? withoutTarTimes : (bytes: Buffer): Buffer => bytes
    t.same(comparable(res.rawPayload), comparable(keyed.rawPayload), `${JSON.stringify(params)}: the same bytes${name.endsWith('.tar') ? ' but the entries\' times' : ''}`)
    t.equal(res.headers['content-type'], keyed.headers['content-type'])
  }
  const many = { name: 'many', columns: [{ name: 'id', type: 'integer' } as const], rows: Array.from({ length: 2000 }, (_, i) => [i]) }
  datasets.add({ ...SALES_REF, resourceSequence: 2 }, { name: 'many', entities: [many] })
  await assignKeys(app, 'dataset', [key.id], 2)
  const res = await app.inject({
    method: 'POST', url: '/api/acme/shop/model/1/dataset/2/links', headers: { authorization: `Bearer ${key.key}` }, payload: { format: 'csv' }
  })
  t.ok(res.json().url.endsWith('/many.csv'), 'a one-entity dataset needs no entity')
  const gz = await app.inject({ url: pathOf(res.json().url), headers: { 'accept-encoding': 'gzip' } })
  t.equal(gz.headers['content-encoding'], 'gzip')
  const keyed = await app.inject({ url: `/api/acme/shop/model/1/dataset/2?api_key=${key.key}&format=csv` })
  t.equal(zlib.gunzipSync(gz.rawPayload).toString(), keyed.body, 'compressed over HTTP when asked')
})

t.test('a link of a dataset with a revision: ETag and 304, and Range on Parquet', async (t) => {
  const { app, datasets } = await buildApp(t)
  const original = datasets.getDataset.bind(datasets)
  datasets.getDataset = async (ref) => {
    const d = await original(ref)
    return d === null ? null : { ...d, revision: 'r1' }
  }
  const key = await createKey(app)
  await assignKeys(app, 'dataset', [key.id])
  const link = await mint(app, key.key, { format: 'json' })
  const first = await app.inject({ url: pathOf(link.url) })
  const keyed = await app.inject({ url: `${DATASET_URL}?api_key=${key.key}&format=json` })
  t.equal(first.headers.etag, keyed.headers.etag, 'the GET\'s ETag')
  t.equal(first.headers['cache-control'], 'private, no-cache')
  const again = await app.inject({ url: pathOf(link.url), headers: { 'if-none-match': String(first.headers.etag) } })
  t.equal(again.statusCode, 304)

  const parquet = await mint(app, key.key, { format: 'parquet', entity: 'orders' })
  const whole = await app.inject({ url: pathOf(parquet.url) })
  const part = await app.inject({ url: pathOf(parquet.url), headers: { range: 'bytes=0-3' } })
  t.equal(part.statusCode, 206)
  t.equal(part.body, 'PAR1')
  t.equal(part.headers['content-range'], `bytes 0-3/${whole.rawPayload.length}`)
})

t.test('minting is authenticated as the GET and checks its body as the GET checks its query', async (t) => {
  const { app, key } = await setup(t, { maxLinkLifetime: 2 * 3600_000 })
  const post = (payload: unknown, headers: Record<string, string> = { authorization: `Bearer ${key.key}` }, url = LINKS_URL) =>
    app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json', ...headers }, payload: typeof payload === 'string' ? payload : JSON.stringify(payload) })
  const cases: Array<[unknown, number, string, Record<string, string>?, string?]> = [
    [{}, 403, 'Not authorized', {}],
    [{}, 403, 'Unknown API key', { authorization: `Bearer ${key.prefix}-${'x'.repeat(21)}` }],
    [{}, 403, 'Unknown API Endpoint', undefined, '/api/acme/shop/model/1/dataset/9/links'],
    [{}, 404, 'Not found', undefined, `${PIPELINE_URL}/links`],
    [{ format: 'xml' }, 500, 'Unknown download format xml, supported formats = json|sql|csv-zip|json-zip|oracle-loader|csv|parquet|parquet-zip|arrow'],
    [{ format: 'csv' }, 400, 'Invalid entity: csv holds one entity; name one with entity='],
    [{ limit: 'x' }, 400, 'Invalid limit: must be a non-negative integer'],
    [{ limit: -1 }, 400, 'Invalid limit: must be a non-negative integer'],
    [{ entity: 'nope' }, 400, 'Invalid entity: the dataset has no entity of that name'],
    [{ archiveType: 'rar' }, 400, 'Invalid archiveType: must be one of zip, tar'],
    [{ api_key: key.key }, 400, 'Invalid api_key: not a parameter of the dataset download'],
    [{ format: 'csv', entity: 'orders', columns: 'id' }, 400, 'Invalid columns: not supported by this dataset'],
    [{ entity: ['a'] }, 400, 'Invalid entity: must be a string'],
    [{ expiresIn: 0 }, 400, 'Invalid expiresIn: must be a positive integer (seconds)'],
    [{ expiresIn: '60' }, 400, 'Invalid expiresIn: must be a positive integer (seconds)'],
    ['{"expiresIn": 1e2}', 400, 'Invalid expiresIn: must be an integer in plain digits, e.g. 50 (not 1e2)'],
    [{ expiresIn: 7201 }, 400, 'Invalid expiresIn: at most 7200 seconds (maxLinkLifetime)'],
    [[1], 400, 'Invalid body: must be a JSON object']
  ]
  for (const [body, status, message, headers, url] of cases) {
    const res = await post(body, headers, url)
    // The title is printed: a key in a body is redacted there, as in the logs.
    t.same([res.statusCode, res.json().message], [status, message], redactKeys(JSON.stringify(body)))
  }
  const get = await app.inject({ url: `${LINKS_URL}?api_key=${key.key}` })
  t.same([get.statusCode, get.headers.allow], [405, 'POST'])
  const text = await app.inject({ method: 'POST', url: LINKS_URL, headers: { authorization: `Bearer ${key.key}`, 'content-type': 'text/plain' }, payload: 'format=csv' })
  t.same([text.statusCode, text.json().message], [400, 'Invalid body: must be JSON (Content-Type: application/json)'])
  const bare = await app.inject({ method: 'POST', url: LINKS_URL, headers: { authorization: `Bearer ${key.key}` } })
  t.equal(bare.statusCode, 201, 'no body: the defaults (sql, an hour)')
  t.equal(new URL(bare.json().url).pathname.split('/').pop(), 'sales.sql')

  // The key's own expiry caps the link.
  const soon = new Date(Date.now() + 600_000).toISOString()
  await app.inject({ method: 'PATCH', url: `${MANAGE}/keys/${key.id}`, headers: ADMIN, payload: { expiresAt: soon } })
  const past = await post({ expiresIn: 3600 })
  t.same([past.statusCode, past.json().message], [400, `Invalid expiresIn: the key expires at ${soon}, before the link would`])
  t.equal((await post({ expiresIn: 300 })).statusCode, 201)
})

t.test('refusals in the documented order: expired at the boundary, revoked, key disabled, expired, regenerated, unassigned, deleted, endpoint deleted', async (t) => {
  const { app, key } = await setup(t)
  const use = async (url: string, now?: number): Promise<[number, string | undefined]> => {
    const run = async (): Promise<[number, string | undefined]> => {
      const res = await app.inject({ url: pathOf(url) })
      return [res.statusCode, res.statusCode === 200 ? undefined : res.json().message]
    }
    return now === undefined ? run() : withClock(now, run)
  }
  const link = await mint(app, key.key)
  const expiresAt = Date.parse(link.expiresAt)
  t.same(await use(link.url, expiresAt - 1), [200, undefined], 'a millisecond before its expiry')
  t.same(await use(link.url, expiresAt), [403, 'Expired link'], 'at its expiry')

  // Disabled, then enabled again: the link follows its key.
  await app.inject({ method: 'PATCH', url: `${MANAGE}/keys/${key.id}`, headers: ADMIN, payload: { isActive: false } })
  t.same(await use(link.url), [403, 'Disabled API key'])
  t.same(await use(link.url, expiresAt), [403, 'Expired link'], 'the link\'s own refusal comes first')
  await app.inject({ method: 'PATCH', url: `${MANAGE}/keys/${key.id}`, headers: ADMIN, payload: { isActive: true } })
  t.same(await use(link.url), [200, undefined])

  // The key expires.
  const keyExpiry = Date.now() + 120_000
  await app.inject({ method: 'PATCH', url: `${MANAGE}/keys/${key.id}`, headers: ADMIN, payload: { expiresAt: new Date(keyExpiry).toISOString() } })
  const short = await mint(app, key.key, { format: 'json', expiresIn: 60 })
  t.same(await use(short.url, keyExpiry - 61_000), [200, undefined])
  t.same(await use(link.url, keyExpiry), [403, 'Disabled API key'], 'an expired key')
  await app.inject({ method: 'PATCH', url: `${MANAGE}/keys/${key.id}`, headers: ADMIN, payload: { expiresAt: null } })

  // Revoked.
  const revoked = await mint(app, key.key)
  t.equal((await app.inject({ method: 'DELETE', url: `${MANAGE}/links/${revoked.id}`, headers: ADMIN })).statusCode, 204)
  t.same(await use(revoked.url), [403, 'Revoked link'])
  t.same(await use(revoked.url, Date.parse(revoked.expiresAt)), [403, 'Revoked link'], 'revoked comes before expired')

  // Unassigned, then assigned again.
  const other = await createKey(app, 'other')
  await assignKeys(app, 'dataset', [other.id])
  t.same(await use(link.url), [403, 'Unknown API key'], 'no longer assigned')
  await assignKeys(app, 'dataset', [key.id, other.id])
  t.same(await use(link.url), [200, undefined])

  // Regenerated: every link of the old value ends, and stays ended.
  await app.inject({ method: 'POST', url: `${MANAGE}/keys/${key.id}/regenerate`, headers: ADMIN })
  t.same(await use(link.url), [403, 'Unknown API key'], 'regenerated')

  // Another key's link: its endpoint deleted, then its key deleted.
  const otherLink = await mint(app, other.key)
  const third = await createKey(app, 'third')
  await assignKeys(app, 'dataset', [third.id])
  const thirdLink = await mint(app, third.key)
  await app.inject({ method: 'DELETE', url: `${MANAGE}/keys/${other.id}`, headers: ADMIN })
  t.same(await use(otherLink.url), [403, 'Unknown API key'], 'deleted key')
  t.same(await use(otherLink.url, Date.parse(otherLink.expiresAt)), [403, 'Expired link'], 'deleted key, link past its expiry')
  await app.inject({ method: 'DELETE', url: `${MANAGE}/endpoints/1/dataset/1`, headers: ADMIN })
  t.same(await use(thirdLink.url), [403, 'Unknown API Endpoint'], 'endpoint deleted')
  await assignKeys(app, 'dataset', [third.id])
  t.same(await use(thirdLink.url), [403, 'Unknown API Endpoint'], 'an endpoint made again is another endpoint')
})

t.test('a token that does not verify is refused with no storage read: each part changed, another file name, garbage', async (t) => {
  const reads: string[] = []
  const storage = new SqliteStorage({ filename: ':memory:' })
  const counted = new Proxy(storage, {
    get (target, name, receiver) {
      const value = Reflect.get(target, name, receiver)
      if (typeof value !== 'function') return value
      return (...args: unknown[]) => {
        reads.push(String(name))
        return (value as (...a: unknown[]) => unknown).apply(target, args)
      }
    }
  })
  // (Refusals held no time: the hold is the throttle's, tested on its own.)
  const { app, key } = await setup(t, { storage: counted, failureThrottle: { maxFailures: 1000, windowMs: 60_000, delayMs: 0 } })
  const link = await mint(app, key.key)
  const path = pathOf(link.url)
  const [, , , token, fileName] = path.split('/')
  const [secretId, claims, mac] = token.split('.')
  const flip = (s: string, i: number): string => s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1)
  const claimsOf = (c: string): unknown[] => JSON.parse(Buffer.from(c, 'base64url').toString()) as unknown[]
  const withClaim = (index: number, value: unknown): string => {
    const c = claimsOf(claims)
    c[index] = value
    return Buffer.from(JSON.stringify(c)).toString('base64url')
  }
  const tampered: Array<[string, string]> = [
    [`${flip(secretId, 0)}.${claims}.${mac}`, 'secret id'],
    [`${secretId}.${flip(claims, 5)}.${mac}`, 'claims, a character'],
    [`${secretId}.${withClaim(1, 'x'.repeat(22))}.${mac}`, 'link id'],
    [`${secretId}.${withClaim(2, 'another-key')}.${mac}`, 'key id'],
    [`${secretId}.${withClaim(3, 'another-endpoint')}.${mac}`, 'endpoint id'],
    [`${secretId}.${withClaim(4, Date.now() + 86_400_000)}.${mac}`, 'expiry'],
    [`${secretId}.${withClaim(5, { format: 'json' })}.${mac}`, 'params'],
    [`${secretId}.${claims}.${flip(mac, 10)}`, 'signature'],
    [`${secretId}.${claims}.${mac.slice(0, 42)}B`, 'the signature\'s last character'],
    [`${secretId}.${claims}`, 'no signature'],
    ['garbage', 'garbage'],
    ['a'.repeat(5000), 'a long token']
  ]
  reads.length = 0
  // The clock stands still: a token naming a secret not seen here reads the
  // secrets once (one minted on another instance after a rotation), then not
  // again within missRefreshMs, however many come.
  await withClock(Date.now(), async () => {
    for (const [bad, what] of tampered) {
      const res = await app.inject({ url: `/api/links/${bad}/${fileName}` })
      t.same([res.statusCode, res.json().message], [403, 'Unknown link'], what)
      t.equal(res.headers['referrer-policy'], 'no-referrer')
    }
    for (const name of ['orders.csv', 'customers.json', 'customers.csv.exe']) {
      const res = await app.inject({ url: `/api/links/${token}/${name}` })
      t.same([res.statusCode, res.json().message], [403, 'Unknown link'], `moved to ${name}`)
    }
    for (let i = 0; i < 20; i++) await app.inject({ url: `/api/links/unknown${i}.${claims}.${mac}/${fileName}` })
  })
  t.same(reads, ['listLinkSecrets'], 'no storage read but one read of the secrets, for the first unknown secret id')
  t.equal((await app.inject({ url: path })).statusCode, 200, 'the minted token still works')
  t.equal((await app.inject({ url: `${DATASET_URL}/${token}` })).statusCode, 404, 'under the data route, no link')
})

t.test('bad tokens count against the failure throttle, each refusal held delayMs', async (t) => {
  const { app, key } = await setup(t, { failureThrottle: { maxFailures: 3, windowMs: 60_000, delayMs: 0 } })
  const link = await mint(app, key.key)
  const statuses: number[] = []
  for (let i = 0; i < 5; i++) statuses.push((await app.inject({ url: `/api/links/x.y.${'z'.repeat(43)}/a.csv` })).statusCode)
  t.same(statuses, [403, 403, 429, 429, 429])

  // The hold: a refusal is not answered before delayMs has passed (a lower bound, not a timing race).
  const held = await setup(t, { failureThrottle: { maxFailures: 50, windowMs: 60_000, delayMs: 300 } })
  const started = performance.now()
  const res = await held.app.inject({ url: `/api/links/x.y.${'z'.repeat(43)}/a.csv` })
  t.equal(res.statusCode, 403)
  t.ok(performance.now() - started >= 290, 'held about delayMs')
  const limited = await app.inject({ url: `/api/links/x.y.${'z'.repeat(43)}/a.csv` })
  t.ok(Number(limited.headers['retry-after']) > 0, 'with Retry-After')
  t.equal((await app.inject({ url: pathOf(link.url) })).statusCode, 200, 'a token that verifies still passes')
})

t.test('links are managed per project: listed without tokens, revoked once, audited', async (t) => {
  const { app, key } = await setup(t)
  const a = await mint(app, key.key)
  const other = await createKey(app, 'other')
  await assignKeys(app, 'dataset', [key.id, other.id])
  const b = await mint(app, other.key, { format: 'json', expiresIn: 120 })
  const list = await app.inject({ url: `${MANAGE}/links`, headers: ADMIN })
  t.equal(list.statusCode, 200)
  t.same(list.json().items.map((l: { id: string }) => l.id), [b.id, a.id], 'newest first')
  t.same(Object.keys(list.json().items[0]).sort(), ['createdAt', 'endpointId', 'expiresAt', 'id', 'keyId', 'params', 'revokedAt'])
  for (const link of [a, b]) t.notOk(list.body.includes(pathOf(link.url).split('/')[3]), 'no token in the list')
  t.same(list.json().items[0].params, { format: 'json' })
  t.same((await app.inject({ url: `${MANAGE}/links?keyId=${key.id}`, headers: ADMIN })).json().items.map((l: { id: string }) => l.id), [a.id])
  t.equal((await app.inject({ url: `${MANAGE}/links?limit=1`, headers: ADMIN })).json().items.length, 1)
  t.equal((await app.inject({ url: `${MANAGE}/links?nope=1`, headers: ADMIN })).statusCode, 400)
  t.equal((await app.inject({ url: `${MANAGE}/links` })).statusCode, 403, 'needs ManageAPIKeys')

  // Another project sees none of them and cannot revoke them.
  t.same((await app.inject({ url: '/api-keys/acme/other/links', headers: ADMIN })).json().items, [])
  const foreign = await app.inject({ method: 'DELETE', url: `/api-keys/acme/other/links/${a.id}`, headers: ADMIN })
  t.same([foreign.statusCode, foreign.json().message], [404, 'Link not found'])
  const unknown = await app.inject({ method: 'DELETE', url: `${MANAGE}/links/nope`, headers: ADMIN })
  t.same([unknown.statusCode, unknown.json().message], [404, 'Link not found'])

  t.equal((await app.inject({ method: 'DELETE', url: `${MANAGE}/links/${a.id}`, headers: { ...ADMIN, 'x-user': 'erin' } })).statusCode, 204)
  t.equal((await app.inject({ method: 'DELETE', url: `${MANAGE}/links/${a.id}`, headers: ADMIN })).statusCode, 204, 'again: no change')
  const revokedAt = (await app.inject({ url: `${MANAGE}/links?keyId=${key.id}`, headers: ADMIN })).json().items[0].revokedAt
  t.type(revokedAt, 'string')

  const audit = (await app.inject({ url: `${MANAGE}/audit`, headers: ADMIN })).json().items
    .filter((e: { action: string }) => e.action.startsWith('link.'))
  t.same(audit.map((e: { action: string, actor: string | null, target: string }) => [e.action, e.actor, e.target]), [
    ['link.revoked', null, a.id],
    ['link.created', `key ${other.prefix}`, b.id],
    ['link.created', `key ${key.prefix}`, a.id]
  ], 'one revocation entry; the minting key named as the actor')
})

t.test('the signing secret rotates while links are live: old and new both work until the old is retired', async (t) => {
  const { app, key } = await setup(t)
  const before = await mint(app, key.key)
  const { ids: [first] } = await app.dataEndpoints.linkSecretIds()
  const second = await app.dataEndpoints.rotateLinkSecret()
  t.same(await app.dataEndpoints.linkSecretIds(), { ids: [first, second], signing: second })
  const after = await mint(app, key.key)
  t.ok(pathOf(after.url).split('/')[3].startsWith(`${second}.`), 'the new secret signs')
  t.equal((await app.inject({ url: pathOf(before.url) })).statusCode, 200, 'a link of the old secret still works')
  t.equal((await app.inject({ url: pathOf(after.url) })).statusCode, 200)
  await t.rejects(app.dataEndpoints.retireLinkSecret(second), /rotate before retiring it/)
  t.equal(await app.dataEndpoints.retireLinkSecret(first), true)
  t.same((await app.inject({ url: pathOf(before.url) })).json(), { message: 'Unknown link' }, 'retired: its links stop')
  t.equal((await app.inject({ url: pathOf(after.url) })).statusCode, 200)
})

t.test('no token and no key in any log line, at trace level', async (t) => {
  const lines: string[] = []
  const stream = new Writable({
    write (chunk, _encoding, done) {
      lines.push(...String(chunk).split('\n').filter(Boolean))
      done()
    }
  })
  const { app, datasets } = await buildApp(t, { failureThrottle: { maxFailures: 50, windowMs: 60_000, delayMs: 0 } }, { logger: { level: 'trace', stream } })
  const key = await createKey(app)
  await assignKeys(app, 'dataset', [key.id])
  const link = await mint(app, key.key)
  const path = pathOf(link.url)
  const token = path.split('/')[3]
  await app.inject({ url: path })
  await app.inject({ url: `${path}?x=1` })
  await app.inject({ method: 'POST', url: path })
  await app.inject({ url: path.replace('customers.csv', 'x.csv') })
  await app.inject({ url: path.replace('/api/links/', '/api/LINKS/') })
  await app.inject({ method: 'DELETE', url: `${MANAGE}/links/${link.id}`, headers: ADMIN })
  await app.inject({ url: path })
  datasets.getDataset = async () => { throw new Error('backend down') }
  const revived = await mint(app, key.key).catch(() => null)
  t.equal(revived, null, 'minting fails with the host')
  t.ok(lines.length > 8, `${lines.length} lines`)
  const mac = token.split('.')[2]
  t.same(lines.filter((l) => l.includes(mac)), [], 'no line carries the token\'s signature')
  t.same(lines.filter((l) => l.includes(key.key.slice(11))), [], 'no line carries the key')
  t.ok(lines.some((l) => l.includes('/api/links/[redacted]/customers.csv')), 'the URL is logged with the token redacted')
})

t.test('the plain csv: entity required when several, <entity>.csv, through a link too', async (t) => {
  const { app, key, storage } = await setup(t)
  void storage
  const several = await app.inject({ url: `${DATASET_URL}?api_key=${key.key}&format=csv` })
  t.same([several.statusCode, several.json().message], [400, 'Invalid entity: csv holds one entity; name one with entity='])
  const link = await mint(app, key.key, { format: 'csv', entity: 'orders' })
  const res = await app.inject({ url: pathOf(link.url) })
  t.match(res.headers['content-disposition'], 'filename="orders.csv"')
  t.same(parseCsv(res.body)[0], ['id', 'amount', 'placed_at'])
  t.equal(SALES_REF.resourceSequence, 1)
})

t.test('DuckDB reads the Parquet and the csv a link downloads, saved under the URL\'s own file name', async (t) => {
  const { app, key } = await setup(t)
  const save = await parquetFolder(t)
  const parquet = await mint(app, key.key, { format: 'parquet', entity: 'orders' })
  const parquetName = decodeURIComponent(pathOf(parquet.url).split('/').pop() as string)
  const parquetFile = await save(parquetName, (await app.inject({ url: pathOf(parquet.url) })).rawPayload)
  t.same(await duckdbQuery(`SELECT id, CAST(amount AS VARCHAR) FROM '${parquetFile}' ORDER BY id`), [[10, '19.99'], [11, '0.10']])
  const csv = await mint(app, key.key, { format: 'csv', entity: 'customers' })
  const csvFile = await save(decodeURIComponent(pathOf(csv.url).split('/').pop() as string), (await app.inject({ url: pathOf(csv.url) })).rawPayload)
  t.same(await duckdbQuery(`SELECT count(*)::INTEGER FROM '${csvFile}'`), [[3]], 'DuckDB goes by the .csv extension')
})

t.test('housekeeping deletes links 30 days after they expired, and no sooner', async (t) => {
  const { app, storage, key } = await setup(t)
  const link = await mint(app, key.key, { format: 'json', expiresIn: 60 })
  const expiry = Date.parse(link.expiresAt)
  const housekeeping = new Housekeeping(storage, { usageRetention: 3600_000, auditRetention: 3600_000, idempotencyTtl: 3600_000 }, app.log)
  t.teardown(() => housekeeping.close())
  await withClock(expiry + EXPIRED_LINK_RETENTION_MS, () => housekeeping.run())
  t.equal((await app.inject({ url: `${MANAGE}/links`, headers: ADMIN })).json().items.length, 1, 'kept until 30 days have passed')
  await withClock(expiry + EXPIRED_LINK_RETENTION_MS + 1, () => housekeeping.run())
  t.same((await app.inject({ url: `${MANAGE}/links`, headers: ADMIN })).json().items, [])
})

t.test('property: any minting body is answered 201, 400 naming a parameter, or the GET\'s 500 for an unknown format; never another 5xx', async (t) => {
  const { app, key } = await setup(t)
  const value = fc.oneof(fc.string({ maxLength: 12 }), fc.integer({ min: -5, max: 10 ** 7 }), fc.constantFrom('csv', 'json', 'orders', 'customers', 'zip', 'tar', 'ddl', 'entities', '10'),
    fc.boolean(), fc.constant(null), fc.array(fc.string({ maxLength: 3 }), { maxLength: 2 }), fc.double())
  const body = fc.dictionary(fc.constantFrom('format', 'entity', 'limit', 'meta', 'archiveType', 'expiresIn', 'columns', 'junk', '__proto__x'), value, { maxKeys: 5 })
  await checkProperty(t, 'minting bodies', fc.asyncProperty(body, async (payload) => {
    const res = await app.inject({ method: 'POST', url: LINKS_URL, headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' }, payload: JSON.stringify(payload) })
    const message = res.json().message as string | undefined
    if (res.statusCode === 201) return typeof res.json().url === 'string'
    if (res.statusCode === 500) return /^Unknown download format /.test(message ?? '')
    return res.statusCode === 400 && /^Invalid [A-Za-z_]+/.test(message ?? '') && !res.body.includes(key.key.slice(11))
  }), 300)
})

t.test('a link\'s use passes its key\'s limits: requests a minute and bytes a day, with the key\'s answers', async (t) => {
  const { app } = await buildApp(t)
  const k = await limitedKey(app, { requestsPerMinute: 3 })
  await assignKeys(app, 'dataset', [k.id])
  await freshMinute()
  const link = await mint(app, k.key, { format: 'json' }) // the minting is the first call of the minute
  const uses = [await app.inject({ url: pathOf(link.url) }), await app.inject({ url: pathOf(link.url) }), await app.inject({ url: pathOf(link.url) })]
  t.same(uses.map((r) => r.statusCode), [200, 200, 429], 'the third call of the key in the minute, the second use, then refused')
  t.same(uses[2].json(), { message: 'Rate limit exceeded' })
  t.ok(Number(uses[2].headers['retry-after']) >= 1)
  t.equal(uses[0].headers['ratelimit-policy'], '"minute";q=3;w=60', 'a link\'s answers carry the key\'s RateLimit fields')

  const small = await limitedKey(app, { bytesPerDay: 1 }, 'small')
  await assignKeys(app, 'dataset', [k.id, small.id])
  const smallLink = await mint(app, small.key, { format: 'json' })
  t.equal((await app.inject({ url: pathOf(smallLink.url) })).statusCode, 200, 'below the quota: it starts')
  await app.dataEndpoints.flushUsage()
  const over = await app.inject({ url: pathOf(smallLink.url) })
  t.same([over.statusCode, over.json()], [429, { message: 'Daily download quota exceeded' }], 'over it: refused, through the link as with the key')
})

/** A copy of a tar with every header's mtime and checksum blanked (512-byte headers, each entry's data padded to 512). */
function withoutTarTimes (tar: Buffer): Buffer {
  const copy = Buffer.from(tar)
  for (let at = 0; at + 512 <= copy.length && copy[at] !== 0; ) {
    const size = parseInt(copy.toString('latin1', at + 124, at + 136).replace(/\0.*$/, '').trim(), 8)
    copy.fill(0x20, at + 136, at + 156) // mtime (12 bytes) and checksum (8)
    at += 512 + Math.ceil(size / 512) * 512
  }
  return copy
}

