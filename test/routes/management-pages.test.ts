import fc from 'fast-check'
import t from 'tap'
import type { Storage } from '../../lib/index.js'
import { foldSearch } from '../../lib/storage/list-cursor.js'
import { MAX_ENDPOINT_KEYS } from '../../lib/storage/storage.js'
import { ADMIN, buildApp, createKey } from '../helper.js'
import { salesDataset, SALES_REF } from '../fixtures.js'

// The management lists in pages (issue 18): `limit`, `after`, `q` and, for
// endpoints, `keyId`; the next page in a `Link` header (RFC 8288); unknown
// query parameters refused on every route; one key on or off an endpoint.

const P = '/api-keys/acme/shop'
const PROJECT = { organization: 'acme', project: 'shop' }
const AUDIT = { actor: 'test' }

interface KeyBody { id: string, prefix: string, purpose: string }
interface EndpointBody { id: string, path: string, resourceName?: string, keys: Array<{ id: string }> }

let madeKeys = 0

/** Keys made straight in storage (no bcrypt): the routes only list them. */
async function keysIn (storage: Storage, purposes: string[]): Promise<KeyBody[]> {
  const made: KeyBody[] = []
  for (const purpose of purposes) {
    const i = madeKeys++
    const prefix = `K${String(i).padStart(5, '0')}${'abcde'[i % 5]}Xy`
    made.push(await storage.createKey({ ...PROJECT, prefix, hash: 'not a hash', purpose, isActive: true, expiresAt: null }, AUDIT))
  }
  return made
}

/** The next page's URL from a Link header, or null. */
function nextOf (link: string | string[] | undefined): string | null {
  if (link === undefined) return null
  const match = /^<([^>]+)>; rel="next"$/.exec(String(link))
  if (match === null) throw new Error(`not a next link: ${String(link)}`)
  return match[1]
}

t.test('GET keys: without limit the whole list as before; with limit pages that a Link header chains, each key once', async (t) => {
  const { app, storage } = await buildApp(t)
  await keysIn(storage, Array.from({ length: 7 }, (_, i) => `client ${i}`))
  const whole = await app.inject({ url: `${P}/keys`, headers: ADMIN })
  t.equal(whole.statusCode, 200)
  t.equal(whole.headers.link, undefined, 'no Link without limit')
  const all = whole.json() as KeyBody[]
  t.equal(all.length, 7)

  const seen: KeyBody[] = []
  const links: string[] = []
  let url: string | null = `${P}/keys?limit=3`
  while (url !== null) {
    const res = await app.inject({ url, headers: ADMIN })
    t.equal(res.statusCode, 200, url)
    const page = res.json() as KeyBody[]
    t.ok(Array.isArray(page), 'the body stays an array')
    seen.push(...page)
    url = nextOf(res.headers.link)
    if (url !== null) {
      links.push(url)
      const next = new URL(url)
      t.equal(next.origin, 'http://localhost', 'an absolute URL on the request\'s host, as job_url')
      t.equal(next.pathname, `${P}/keys`)
      t.equal(next.searchParams.get('limit'), '3', 'the same limit')
      url = next.pathname + next.search
    }
  }
  t.same(seen, all, 'the pages hold the whole list, in order, each key once')
  t.equal(links.length, 2, 'three pages: 3, 3, 1; the last has no Link')
  const exact = await app.inject({ url: `${P}/keys?limit=7`, headers: ADMIN })
  t.same([exact.json().length, exact.headers.link], [7, undefined], 'a page that holds the rest has no Link')

  // The host's baseUrl is the Link's address, as it is job_url's.
  const behindProxy = await buildApp(t, { baseUrl: 'https://data.example.com/prefix' })
  await keysIn(behindProxy.storage, ['a', 'b'])
  const first = await behindProxy.app.inject({ url: `${P}/keys?limit=1&q=`, headers: ADMIN })
  t.match(first.headers.link, /^<https:\/\/data\.example\.com\/prefix\/api-keys\/acme\/shop\/keys\?limit=1&q=&after=[A-Za-z0-9_-]+>; rel="next"$/)
})

t.test('GET keys?q: a prefix or purpose holding the text, A-Z in either case; with limit in pages, without it all of them', async (t) => {
  const { app, storage } = await buildApp(t)
  const keys = await keysIn(storage, ['Nightly ETL', 'partner feed', 'nightly backup', 'reports', 'NIGHTLY check'])
  const search = async (query: string): Promise<string[]> => {
    const res = await app.inject({ url: `${P}/keys?${query}`, headers: ADMIN })
    t.equal(res.statusCode, 200, query)
    return (res.json() as KeyBody[]).map((k) => k.purpose)
  }
  // In the list's order: keys made in one millisecond go by id.
  const nightly = (await search('')).filter((purpose) => /nightly/i.test(purpose))
  t.same([...nightly].sort(), ['NIGHTLY check', 'Nightly ETL', 'nightly backup'])
  t.same(await search('q=nightly'), nightly)
  t.same(await search('q=NiGhTlY&limit=2'), nightly.slice(0, 2))
  t.same(await search(`q=${keys[3].prefix.toLowerCase()}`), ['reports'], 'a prefix in either case')
  t.same(await search('q=night%20ly'), [])
  t.same(await search('q='), await search(''), 'an empty q is no search')
})

t.test('a search typed by a user finds exactly the keys whose prefix or purpose holds it, however it is written', async (t) => {
  const { app, storage } = await buildApp(t)
  const purposes = ['Nightly ETL', 'night', 'ÉTL café', '100% sure_thing', 'a\\b', 'tab\tin', 'Ünïcode 😀 keys', "it's \"quoted\"", 'x'.repeat(200)]
  await keysIn(storage, purposes)
  const keys = (await app.inject({ url: `${P}/keys`, headers: ADMIN })).json() as KeyBody[]
  await checkQueries(fc.string({ maxLength: 12, unit: fc.constantFrom(...[...'aEiNtT%_\\\'"😀é É'], ...keys.map((k) => k.prefix.slice(2, 5))) }))
  await checkQueries(fc.string({ maxLength: 200, unit: 'binary' }))

  async function checkQueries (queries: fc.Arbitrary<string>): Promise<void> {
    await fc.assert(fc.asyncProperty(queries, fc.constantFrom(undefined, 1, 2, 500), async (typed, limit) => {
      // What reaches the server: a URL holds UTF-8, so a lone surrogate arrives as U+FFFD.
      const q = new URLSearchParams(new URLSearchParams({ q: typed }).toString()).get('q') ?? ''
      const wanted = q === '' ? keys : keys.filter((k) => foldSearch(k.prefix).includes(foldSearch(q)) || foldSearch(k.purpose).includes(foldSearch(q)))
      const found: KeyBody[] = []
      let url: string | null = `${P}/keys?${new URLSearchParams({ q, ...(limit === undefined ? {} : { limit: String(limit) }) })}`
      while (url !== null) {
        const res = await app.inject({ url, headers: ADMIN })
        if (res.statusCode !== 200) throw new Error(`${url}: ${res.statusCode} ${res.body}`)
        found.push(...res.json() as KeyBody[])
        const next = nextOf(res.headers.link)
        url = next === null ? null : new URL(next).pathname + new URL(next).search
      }
      if (JSON.stringify(found.map((k) => k.id)) !== JSON.stringify(wanted.map((k) => k.id))) {
        throw new Error(`q=${JSON.stringify(q)}: found ${found.map((k) => k.purpose).join(', ')}`)
      }
    }), { numRuns: 60 })
    t.pass('every generated search answered exactly')
  }
})

t.test('GET endpoints: pages, a search in the path or the host\'s name, the endpoints of one key', async (t) => {
  const { app, storage, datasets } = await buildApp(t)
  const [a, b] = await keysIn(storage, ['a', 'b'])
  for (let r = 2; r <= 5; r++) datasets.add({ ...SALES_REF, resourceSequence: r }, { ...salesDataset(), name: r === 4 ? 'Returns' : `sales ${r}` })
  Object.assign(datasets, {
    listResources: async () => [1, 2, 3, 4, 5].map((r) => ({ modelSequence: 1, resourceSequence: r, name: r === 4 ? 'Returns' : r === 1 ? 'sales' : `sales ${r}` }))
  })
  for (const r of [1, 2, 3, 4, 5]) await storage.putEndpoint({ ...PROJECT, modelSequence: 1, type: 'dataset', resourceSequence: r }, r % 2 === 0 ? [a.id] : [a.id, b.id], AUDIT)
  await storage.putEndpoint({ ...PROJECT, modelSequence: 1, type: 'pipeline', resourceSequence: 1 }, [b.id], AUDIT)
  const whole = (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json() as EndpointBody[]
  t.equal(whole.length, 6)
  t.equal(whole[3].resourceName, 'Returns')

  const list = async (query: string): Promise<EndpointBody[]> => {
    const found: EndpointBody[] = []
    let url: string | null = `${P}/endpoints?${query}`
    while (url !== null) {
      const res = await app.inject({ url, headers: ADMIN })
      t.equal(res.statusCode, 200, url)
      found.push(...res.json() as EndpointBody[])
      const next = nextOf(res.headers.link)
      url = next === null ? null : new URL(next).pathname + new URL(next).search
    }
    return found
  }
  t.same(await list('limit=4'), whole, 'pages of 4: the whole list, names and keys included')
  t.same(await list('limit=1'), whole)
  t.same((await list('q=pipeline')).map((e) => e.path), ['/api/acme/shop/model/1/pipeline/1'], 'by path')
  t.same((await list('q=RETURNS&limit=1')).map((e) => e.path), ['/api/acme/shop/model/1/dataset/4'], 'by the host\'s name, either case')
  t.same((await list('q=sales')).map((e) => e.resourceName), ['sales', 'sales 2', 'sales 3', 'sales 5'])
  t.same((await list('q=dataset/5')).map((e) => e.resourceName), ['sales 5'])
  t.same((await list(`keyId=${b.id}`)).map((e) => e.path), whole.filter((e) => e.keys.some((k) => k.id === b.id)).map((e) => e.path), 'one key\'s')
  t.same((await list(`keyId=${b.id}&q=dataset&limit=1`)).map((e) => e.path),
    ['/api/acme/shop/model/1/dataset/1', '/api/acme/shop/model/1/dataset/3', '/api/acme/shop/model/1/dataset/5'])
  t.same(await list('keyId=nobody'), [])

  // A host whose list fails: names are left out, the path search still works.
  Object.assign(datasets, { listResources: async () => { throw new Error('catalogue down') } })
  t.same((await list('q=dataset/4')).map((e) => [e.path, e.resourceName]), [['/api/acme/shop/model/1/dataset/4', undefined]])
  t.same(await list('q=returns'), [])
})

t.test('bad page parameters and unknown query parameters are 400s that name them, on every management route', async (t) => {
  const { app, storage } = await buildApp(t)
  const [key] = await keysIn(storage, ['k'])
  for (const list of ['keys', 'endpoints']) {
    // As every integer of a query (issue 12): plain digits, then the range.
    for (const [limit, message] of [['0', 'must be >= 1'], ['501', 'must be <= 500'], ['-1', 'must be an integer in plain digits, e.g. 50'],
      ...['1e2', '2.5', ' 1', '0x10', 'true', ''].map((text) => [text, 'must be an integer in plain digits, e.g. 50'])]) {
      const res = await app.inject({ url: `${P}/${list}?limit=${encodeURIComponent(limit)}`, headers: ADMIN })
      t.same([res.statusCode, res.json()], [400, { message: `querystring.limit: ${message}` }], `${list} limit=${JSON.stringify(limit)}`)
    }
    for (const limit of ['1', '500', '01']) t.equal((await app.inject({ url: `${P}/${list}?limit=${limit}`, headers: ADMIN })).statusCode, 200)
    for (const after of ['nope', 'WzFd', 'x'.repeat(1000)]) {
      const res = await app.inject({ url: `${P}/${list}?limit=5&after=${after}`, headers: ADMIN })
      t.same([res.statusCode, res.json()], [400, { message: 'querystring.after: not a cursor of this list; follow the Link header\'s rel="next" URL' }], `${list} after=${after.slice(0, 8)}`)
    }
    const long = await app.inject({ url: `${P}/${list}?q=${'x'.repeat(201)}`, headers: ADMIN })
    t.same([long.statusCode, long.json().message], [400, 'querystring.q: must not have more than 200 characters'])
    // What callers used to send, silently ignored before.
    for (const name of ['page', 'before', 'per_page', 'search']) {
      const res = await app.inject({ url: `${P}/${list}?${name}=2`, headers: ADMIN })
      t.same([res.statusCode, res.json()], [400, { message: `querystring: unknown field "${name}"` }], `${list}?${name}`)
    }
  }
  const routes: Array<[string, string, unknown?]> = [
    ['POST', `${P}/keys`, { purpose: 'x' }], ['PATCH', `${P}/keys/${key.id}`, { purpose: 'y' }], ['DELETE', `${P}/keys/${key.id}`],
    ['POST', `${P}/keys/${key.id}/regenerate`], ['GET', `${P}/usage`], ['GET', `${P}/audit`], ['GET', `${P}/resources`],
    ['PUT', `${P}/endpoints/1/dataset/1`, { keyIds: [key.id] }], ['DELETE', `${P}/endpoints/1/dataset/1`],
    ['POST', `${P}/endpoints/1/dataset/1/keys/${key.id}`], ['DELETE', `${P}/endpoints/1/dataset/1/keys/${key.id}`]
  ]
  for (const [method, url, payload] of routes) {
    const res = await app.inject({ method: method as 'GET', url: `${url}?dryRun=1`, headers: ADMIN, ...(payload === undefined ? {} : { payload: payload as object }) })
    t.same([res.statusCode, res.json()], [400, { message: 'querystring: unknown field "dryRun"' }], `${method} ${url}`)
  }
  t.match(await storage.getKey(PROJECT, key.id), { purpose: 'k' }, 'nothing was changed by the refused calls')
  t.same(await storage.listEndpoints(PROJECT), [])
})

t.test('POST and DELETE …/endpoints/…/keys/:keyId: one key on or off, audited as a PUT; the errors of §4', async (t) => {
  const { app, storage, datasets } = await buildApp(t, { getActor: () => 'ops' })
  const a = await createKey(app, 'a')
  const b = await createKey(app, 'b')
  const theirs = await storage.createKey({ organization: 'acme', project: 'other', prefix: 'THEIRS0000', hash: 'h', purpose: 'x', isActive: true, expiresAt: null }, AUDIT)
  const url = (keyId: string, where = '1/dataset/1'): string => `${P}/endpoints/${where}/keys/${keyId}`
  const send = async (method: 'POST' | 'DELETE', target: string, headers: Record<string, string> = ADMIN): Promise<{ status: number, body: EndpointBody & { message?: string } }> => {
    const res = await app.inject({ method, url: target, headers })
    return { status: res.statusCode, body: res.json() }
  }

  for (const method of ['POST', 'DELETE'] as const) {
    t.same(await send(method, url(a.id), {}), { status: 403, body: { message: 'Not authorized' } }, `${method} needs ManageAPIKeys`)
    t.same(await send(method, url(a.id)), { status: 404, body: { message: 'Endpoint not found' } }, `${method} on no endpoint: it is not created`)
  }
  t.same((await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json(), [])
  await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN, payload: { keyIds: [a.id] } })

  const added = await send('POST', url(b.id))
  t.equal(added.status, 200)
  t.same(added.body.keys.map((k) => k.id).sort(), [a.id, b.id].sort())
  t.equal(added.body.resourceName, 'sales')
  t.equal((await fetchAudit())[0].action, 'endpoint.updated')
  t.match((await fetchAudit())[0], { actor: 'ops', changes: { keyIds: { from: [a.id], to: [a.id, b.id].sort() } } })
  const again = await send('POST', url(b.id))
  t.same([again.status, again.body.keys.length], [200, 2], 'twice: the same, unchanged')
  t.equal((await fetchAudit()).length, 4, 'two keys created, the PUT, one addition: no entry for a change that changed nothing')

  for (const method of ['POST', 'DELETE'] as const) {
    t.same(await send(method, url(theirs.id)), { status: 404, body: { message: 'API key not found' } }, `${method}: another project's key`)
    t.same(await send(method, url('no-such-key')), { status: 404, body: { message: 'API key not found' } })
    t.same(await send(method, url(a.id, '1/dataset/0')), { status: 400, body: { message: `params.modelSequence: must be a positive integer (1 to ${Number.MAX_SAFE_INTEGER}, no sign, exponent or leading zero)`.replace('modelSequence', 'resourceSequence') } })
  }

  const removed = await send('DELETE', url(a.id))
  t.same([removed.status, removed.body.keys.map((k) => k.id)], [200, [b.id]])
  t.match((await fetchAudit())[0], { action: 'endpoint.updated', changes: { keyIds: { from: [a.id, b.id].sort(), to: [b.id] } } })
  t.same((await send('DELETE', url(a.id))).status, 200, 'not on it: unchanged')
  t.same(await send('DELETE', url(b.id)), { status: 400, body: { message: 'keyId: the endpoint\'s last key; assign another first, or delete the endpoint' } })

  // The host loses the dataset: no key may be added to it, one may still be taken off.
  const sales = datasets.datasets.get([...datasets.datasets.keys()][0])
  datasets.datasets.clear()
  t.same(await send('POST', url(a.id)), { status: 404, body: { message: 'Dataset not found' } })
  await app.inject({ method: 'PUT', url: `${P}/endpoints/1/pipeline/1`, headers: ADMIN, payload: { keyIds: [a.id] } })
  t.equal((await send('POST', url(b.id, '1/pipeline/1'))).status, 200)
  if (sales !== undefined) datasets.datasets.set('restored', sales)

  async function fetchAudit (): Promise<Array<{ action: string }>> {
    return (await app.inject({ url: `${P}/audit?limit=100`, headers: ADMIN })).json().items
  }
})

t.test(`POST …/keys/:keyId stops at ${MAX_ENDPOINT_KEYS} keys on an endpoint, the most one PUT assigns`, async (t) => {
  const { app, storage } = await buildApp(t)
  const keys = await keysIn(storage, Array.from({ length: MAX_ENDPOINT_KEYS + 1 }, (_, i) => `k${i}`))
  const put = await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN, payload: { keyIds: keys.slice(0, MAX_ENDPOINT_KEYS).map((k) => k.id) } })
  t.equal(put.statusCode, 201)
  const over = await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN, payload: { keyIds: keys.map((k) => k.id) } })
  t.same([over.statusCode, over.json().message], [400, `body.keyIds: must not have more than ${MAX_ENDPOINT_KEYS} items`], 'the cap on one PUT stays')
  const one = await app.inject({ method: 'POST', url: `${P}/endpoints/1/dataset/1/keys/${keys[MAX_ENDPOINT_KEYS].id}`, headers: ADMIN })
  t.same([one.statusCode, one.json()], [400, { message: `keyId: the endpoint has ${MAX_ENDPOINT_KEYS} keys, the most it holds; remove one first` }])
})

t.test('PUT without keyIds assigns a project\'s only key, read as two keys at most', async (t) => {
  const { app, storage } = await buildApp(t)
  const reads: string[] = []
  const listKeys = storage.listKeys.bind(storage)
  Object.assign(storage, { listKeys: async (...args: Parameters<typeof listKeys>) => { reads.push('listKeys'); return await listKeys(...args) } })
  const put = async (): Promise<{ statusCode: number, json: () => { message?: string, keys?: unknown[] } }> =>
    await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN, payload: {} })
  t.same((await put()).json(), { message: 'keyIds: the project has no API key yet; create one first' })
  const [only] = await keysIn(storage, ['only'])
  const created = await put()
  t.same([created.statusCode, created.json().keys], [201, [{ id: only.id, prefix: only.prefix, purpose: 'only', isActive: true }]])
  await keysIn(storage, ['second', 'third'])
  t.match((await put()).json(), { message: /choose at least one key; the project has several/ })
  t.same(reads, [], 'never the whole list of keys')
})
