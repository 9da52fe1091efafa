import t from 'tap'
import type { Dataset, ResourceRef } from '../../lib/index.js'
import { MemoryDatasets, SALES_REF, salesDataset } from '../fixtures.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'

// Conditional GET (issue 10): a dataset with a `revision` answers with an
// ETag that follows the revision and every parameter that shapes the body,
// and If-None-Match gets 304 with no body; a 304 is a counted call.

/** The sales fixture with a revision the test changes. */
class RevisedDatasets extends MemoryDatasets {
  revision: string | undefined = 'r1'

  override async getDataset (ref: ResourceRef): Promise<Dataset | null> {
    const dataset = await super.getDataset(ref)
    return dataset === null || this.revision === undefined ? dataset : { ...dataset, revision: this.revision }
  }

  pulled (): number {
    return [...this.rowsPulled.values()].reduce((a, b) => a + b, 0)
  }
}

async function setup (t: Parameters<typeof buildApp>[0], options: Parameters<typeof buildApp>[1] = {}) {
  const datasets = new RevisedDatasets().add(SALES_REF, salesDataset())
  const built = await buildApp(t, { datasets, ...options })
  const k = await createKey(built.app)
  await assignKeys(built.app, 'dataset', [k.id])
  const get = async (query: string, headers: Record<string, string> = {}) =>
    built.app.inject({ url: `${DATASET_URL}?${query}`, headers: { authorization: `Bearer ${k.key}`, ...headers } })
  return { ...built, datasets, key: k, get }
}

// Every parameter that changes the body, alone and in combination.
const SHAPES = [
  '', 'format=json', 'format=csv-zip', 'format=json-zip', 'format=oracle-loader',
  'format=csv-zip&archiveType=tar', 'format=json-zip&archiveType=tar', 'format=oracle-loader&archiveType=tar',
  'meta=entities', 'meta=ddl', 'format=oracle-loader&meta=ddl',
  'limit=1', 'limit=0', 'format=json&limit=1',
  'entity=customers', 'entity=orders', 'format=json&entity=orders', 'format=json&entity=orders&limit=1',
  'meta=entities&entity=orders'
]

t.test('each body shape has its own ETag; If-None-Match with it gets 304, with another shape\'s 200', async (t) => {
  const { get } = await setup(t)
  const etags = new Map<string, string>()
  for (const query of SHAPES) {
    const res = await get(query)
    t.equal(res.statusCode, 200, query)
    const etag = res.headers.etag as string
    t.match(etag, /^W\/"[A-Za-z0-9_-]{27}:[a-z-]+:[a-z]*:[a-z]+:[0-9]*:(\*|[0-9]+)"$/, `${query}: a weak ETag, the revision's digest and the shape`)
    t.equal(res.headers['cache-control'], 'private, no-cache', `${query}: stored, revalidated each time`)
    t.equal((await get(query)).headers.etag, etag, `${query}: the same ETag again`)
    etags.set(query, etag)
  }
  t.equal(new Set(etags.values()).size, SHAPES.length, 'no two shapes share an ETag')
  t.equal((await get('format=sql')).headers.etag, etags.get(''), 'format=sql is the default format: same body, same ETag')

  for (const [query, etag] of etags) {
    const hit = await get(query, { 'if-none-match': etag })
    t.equal(hit.statusCode, 304, `${query}: 304`)
    t.equal(hit.body, '', `${query}: no body`)
    t.equal(hit.headers.etag, etag, `${query}: the ETag again`)
    t.equal(hit.headers['cache-control'], 'private, no-cache')
    const other = SHAPES[(SHAPES.indexOf(query) + 1) % SHAPES.length]
    const miss = await get(query, { 'if-none-match': etags.get(other) as string })
    t.equal(miss.statusCode, 200, `${query}: another shape's ETag does not match`)
  }
})

t.test('If-None-Match: lists, strong and weak forms, *', async (t) => {
  const { get } = await setup(t)
  const etag = (await get('format=json')).headers.etag as string
  const opaque = etag.slice(2)
  for (const header of [etag, opaque, `"other", ${etag}`, `W/"x",${opaque}`, '*']) {
    t.equal((await get('format=json', { 'if-none-match': header })).statusCode, 304, header)
  }
  for (const header of ['"other"', '', etag.replace(/"$/, 'x"')]) {
    t.equal((await get('format=json', { 'if-none-match': header })).statusCode, 200, JSON.stringify(header))
  }
})

t.test('a new revision gives a new ETag; the old one gets the new body', async (t) => {
  const { get, datasets } = await setup(t)
  const before = await get('format=json')
  datasets.revision = 'r2'
  const after = await get('format=json', { 'if-none-match': before.headers.etag as string })
  t.equal(after.statusCode, 200, 'the stored copy is stale: 200')
  t.not(after.headers.etag, before.headers.etag)
  t.equal((await get('format=json', { 'if-none-match': after.headers.etag as string })).statusCode, 304)
})

t.test('without a revision: no ETag, no-store, and If-None-Match is ignored', async (t) => {
  const { get, datasets } = await setup(t)
  datasets.revision = undefined
  const res = await get('format=json', { 'if-none-match': '*' })
  t.equal(res.statusCode, 200)
  t.equal(res.headers.etag, undefined)
  t.equal(res.headers['cache-control'], 'no-store')
})

t.test('a 304 is a successful call: it counts and sets the key\'s updatedAt', async (t) => {
  const { app, storage, get, key } = await setup(t)
  const etag = (await get('format=json')).headers.etag as string
  await app.dataEndpoints.flushUsage()
  const endpoint = { organization: 'acme', project: 'shop', modelSequence: 1, type: 'dataset' as const, resourceSequence: 1 }
  const callsBefore = (await storage.getEndpoint(endpoint))?.calls
  const keyBefore = await keyRecord(app, key.id)
  await new Promise((resolve) => setTimeout(resolve, 5))
  for (let i = 0; i < 3; i++) t.equal((await get('format=json', { 'if-none-match': etag })).statusCode, 304)
  await app.dataEndpoints.flushUsage()
  t.equal((await storage.getEndpoint(endpoint))?.calls, (callsBefore ?? 0) + 3, 'three 304s, three calls')
  const keyAfter = await keyRecord(app, key.id)
  t.ok(Date.parse(keyAfter.updatedAt) > Date.parse(keyBefore.updatedAt), 'updatedAt moved')
})

t.test('the key is checked before the ETag: a wrong key with a matching If-None-Match gets 403', async (t) => {
  const { app, get } = await setup(t)
  const etag = (await get('format=json')).headers.etag as string
  const res = await app.inject({ url: `${DATASET_URL}?format=json`, headers: { authorization: 'Bearer Nope123456-abcdefghijklmnopqrstu', 'if-none-match': etag } })
  t.equal(res.statusCode, 403)
  t.equal(res.headers.etag, undefined)
})

t.test('a small body is kept under its ETag the second time it is rendered: a repeat after that reads no rows; off with renderedBodyCacheBytes: 0', async (t) => {
  const cached = await setup(t)
  const first = await cached.get('format=json')
  const once = cached.datasets.pulled()
  t.ok(once > 0, 'the first download read rows')
  const second = await cached.get('format=json')
  t.equal(cached.datasets.pulled(), 2 * once, 'the second read them again, and is kept')
  const again = await cached.get('format=json')
  for (const res of [second, again]) {
    t.equal(res.body, first.body, 'the same body')
    t.equal(res.headers['content-type'], first.headers['content-type'])
    t.equal(res.headers['content-disposition'], first.headers['content-disposition'])
  }
  t.equal(cached.datasets.pulled(), 2 * once, 'the third from memory: no rows read')
  cached.datasets.revision = 'r2'
  await cached.get('format=json')
  t.ok(cached.datasets.pulled() > 2 * once, 'a new revision is read again')

  const uncached = await setup(t, { renderedBodyCacheBytes: 0 })
  for (let i = 0; i < 3; i++) await uncached.get('format=json')
  t.equal(uncached.datasets.pulled(), 3 * once, 'without the cache every download reads')
})

t.test('downloads asked for once do not push out one asked for again and again', async (t) => {
  // Room for about one body: one-offs kept would push out the polled one.
  const { get, datasets } = await setup(t, { renderedBodyCacheBytes: 200 })
  const polled = await get('format=json&entity=orders')
  t.ok(polled.body.length > 100 && polled.body.length < 200, `the polled body fills most of the cache (${polled.body.length} bytes)`)
  await get('format=json&entity=orders')
  const kept = datasets.pulled()
  t.equal((await get('format=json&entity=orders')).body, polled.body)
  t.equal(datasets.pulled(), kept, 'the polled body is kept')
  for (let limit = 1; limit <= 20; limit++) t.equal((await get(`format=json&entity=orders&limit=${limit}`)).statusCode, 200)
  const afterOneOffs = datasets.pulled()
  t.equal((await get('format=json&entity=orders')).body, polled.body)
  t.equal(datasets.pulled(), afterOneOffs, 'still kept after 20 downloads asked for once')
})

async function keyRecord (app: Awaited<ReturnType<typeof buildApp>>['app'], id: string): Promise<{ updatedAt: string }> {
  const res = await app.inject({ url: '/api-keys/acme/shop/keys', headers: ADMIN })
  const body = res.json() as { keys?: Array<{ id: string, updatedAt: string }> } | Array<{ id: string, updatedAt: string }>
  const keys = Array.isArray(body) ? body : body.keys ?? []
  const found = keys.find((k) => k.id === id)
  if (found === undefined) throw new Error(`no key ${id}`)
  return found
}
