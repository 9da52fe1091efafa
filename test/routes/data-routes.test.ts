import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import t from 'tap'
import dataEndpoints, { SqliteStorage } from '../../lib/index.js'
import type { Dataset } from '../../lib/host/dataset-source.js'
import { MemoryDatasets, MemoryJobs, PIPELINE_REF, SALES_REF, salesDataset } from '../fixtures.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, PIPELINE_URL } from '../helper.js'
import { rawRequest } from '../raw-http.js'

// The error contract of SPEC.md §7.2 and the order of checks of DESIGN.md §2,
// through the plugin as a host registers it.

const UNKNOWN_FORMAT = (v: string): string =>
  `Unknown download format ${v}, supported formats = json|sql|csv-zip|json-zip|oracle-loader|csv|parquet|parquet-zip|arrow`

t.test('a valid key gets the dataset (200) and starts a pipeline (200)', async (t) => {
  const { app, jobs } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  await assignKeys(app, 'pipeline', [k.id])

  const data = await app.inject(`${DATASET_URL}?format=json&api_key=${k.key}`)
  t.equal(data.statusCode, 200)
  t.same(Object.keys(data.json()), ['customers', 'orders'])
  t.same(data.json().customers[0], { id: 1, name: 'Ann "the" Buyer, Esq.', vip: true })
  t.equal(data.headers['cache-control'], 'no-store')

  const run = await app.inject({ method: 'POST', url: PIPELINE_URL, headers: { authorization: `Bearer ${k.key}` } })
  t.equal(run.statusCode, 200)
  const body = run.json()
  t.match(body.job_id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
  t.equal(body.job_url, `http://localhost:80/api/job/${body.job_id}`)
  t.same(Object.keys(body).sort(), ['job_id', 'job_url'])
  t.equal(jobs.starts, 1)
  t.ok(jobs.jobs.has(body.job_id), 'the host recorded the job under the id returned')
})

t.test('job_url uses the baseUrl option when given', async (t) => {
  const { app } = await buildApp(t, { baseUrl: 'https://data.example.org/base/' })
  const k = await createKey(app)
  await assignKeys(app, 'pipeline', [k.id])
  const run = await app.inject({ method: 'POST', url: `${PIPELINE_URL}?api_key=${k.key}` })
  t.equal(run.json().job_url, `https://data.example.org/base/api/job/${run.json().job_id}`)
})

t.test('job_url never carries a key, a path or a query from the Host header; without Host it names the server', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  const other = await createKey(app, 'other')
  await assignKeys(app, 'pipeline', [k.id])
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as AddressInfo).port
  // Labels name the Host's shape, never its text: some hold a key.
  const post = async (headers: Array<[string, string]>, version = '1.1'): Promise<{ job_id: string, job_url: string }> => {
    const target = `${PIPELINE_URL}?api_key=${k.key}`
    const lines = [`POST ${target} HTTP/${version}`, ...headers.map(([n, v]) => `${n}: ${v}`), 'Connection: close', '', '']
    const res = await rawRequest(port, Buffer.from(lines.join('\r\n'), 'latin1'))
    t.equal(res.status, 200, `HTTP/${version}, ${headers.length === 0 ? 'no Host' : 'a Host header'}: 200`)
    return JSON.parse(res.body)
  }
  const server = `http://127.0.0.1:${port}/api/job/`
  t.equal((await post([['Host', 'data.example.org:8443']])).job_url.split('/api/')[0], 'http://data.example.org:8443', 'a plain host is used')
  t.equal((await post([['Host', '[::1]:3000']])).job_url.split('/api/')[0], 'http://[::1]:3000', 'an IPv6 host is used')
  for (const host of [other.key, `${other.key}x`, 'evil.example/x?y=', 'user@evil.example', 'a b']) {
    const body = await post([['Host', host]])
    t.equal(body.job_url, server + body.job_id, `Host ${JSON.stringify(host.replace(other.key.slice(11), '<secret>'))} is not used`)
  }
  const http10 = await post([], '1.0')
  t.equal(http10.job_url, server + http10.job_id, 'HTTP/1.0 without Host')
})

t.test('a pipeline call ignores any request body, in any content type or none', async (t) => {
  const { app, jobs } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'pipeline', [k.id])
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as AddressInfo).port
  const cases: Array<[string, Array<[string, string]>, string | undefined]> = [
    ["curl -d ''", [['Content-Type', 'application/x-www-form-urlencoded']], ''],
    ['empty JSON', [['Content-Type', 'application/json']], ''],
    ['broken JSON', [['Content-Type', 'application/json']], '{"a":'],
    ['bytes', [['Content-Type', 'application/octet-stream']], '\u0000\u0001'],
    ['no content type', [], 'hello'],
    ['a made-up content type', [['Content-Type', 'x/y; charset=nope']], 'hello'],
    ['over the default body limit', [['Content-Type', 'application/json']], 'x'.repeat(1024 * 1024 + 1)]
  ]
  for (const [name, headers, body] of cases) {
    const before = jobs.starts
    const res = await rawRequest(port, { method: 'POST', target: `${PIPELINE_URL}?api_key=${k.key}`, headers, body })
    t.equal(res.status, 200, name)
    t.match(JSON.parse(res.body), { job_id: String, job_url: String }, name)
    t.equal(jobs.starts, before + 1, `${name}: one run started`)
  }
})

t.test('a method the host adds to Fastify before registering the plugin gets 405 with Allow', async (t) => {
  const app = Fastify()
  app.addHttpMethod('PROPFIND', { hasBody: true })
  await app.register(dataEndpoints, {
    storage: new SqliteStorage({ filename: ':memory:' }),
    datasets: new MemoryDatasets().add(SALES_REF, salesDataset()),
    pipelines: new MemoryJobs().addPipeline(PIPELINE_REF, 'refresh'),
    jobs: new MemoryJobs(),
    getPermissions: () => []
  })
  t.teardown(() => app.close())
  for (const [url, allow] of [[DATASET_URL, 'GET, HEAD'], [PIPELINE_URL, 'POST']]) {
    const res = await app.inject({ method: 'PROPFIND' as 'GET', url })
    t.equal(res.statusCode, 405, url)
    t.equal(res.headers.allow, allow)
    t.same(res.json(), { message: 'Endpoint or method not allowed' })
  }
})

t.test('403 Not authorized when no key is supplied, in any of the ways a key can be missing', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  for (const [name, request] of [
    ['nothing', {}],
    ['empty api_key', { query: { api_key: '' } }],
    ['Basic scheme', { headers: { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` } }],
    ['Bearer without value', { headers: { authorization: 'Bearer ' } }],
    ['bare key without scheme', { headers: { authorization: k.key } }]
  ] as const) {
    const res = await app.inject({ url: DATASET_URL, ...request })
    t.equal(res.statusCode, 403, name)
    t.same(res.json(), { message: 'Not authorized' }, name)
  }
})

t.test('403 Unknown API Endpoint when the resource has no endpoint, before the key is looked at', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  for (const key of [k.key, 'not-a-key']) {
    const res = await app.inject({ url: `/api/acme/shop/model/1/dataset/2?api_key=${key}` })
    t.equal(res.statusCode, 403)
    t.same(res.json(), { message: 'Unknown API Endpoint' })
  }
  const pipeline = await app.inject({ method: 'POST', url: `/api/other/shop/model/1/pipeline/1?api_key=${k.key}` })
  t.same(pipeline.json(), { message: 'Unknown API Endpoint' })
})

t.test('403 Unknown API key for malformed, unassigned, foreign and wrong-secret keys', async (t) => {
  const { app } = await buildApp(t)
  const assigned = await createKey(app, 'assigned')
  const unassigned = await createKey(app, 'not assigned')
  await assignKeys(app, 'dataset', [assigned.id])
  const wrongSecret = assigned.key.slice(0, 11) + 'A'.repeat(21)
  const cases = {
    malformed: 'hello',
    'too long': assigned.key + 'x',
    unassigned: unassigned.key,
    'wrong secret on an assigned prefix': wrongSecret,
    'unknown prefix': 'ZZZZZZZZZZ-' + 'a'.repeat(21)
  }
  for (const [name, key] of Object.entries(cases)) {
    const res = await app.inject({ url: DATASET_URL, query: { api_key: key } })
    t.equal(res.statusCode, 403, name)
    t.same(res.json(), { message: 'Unknown API key' }, name)
  }
  const repeated = await app.inject({ url: `${DATASET_URL}?api_key=${assigned.key}&api_key=${assigned.key}` })
  t.same([repeated.statusCode, repeated.json()], [403, { message: 'Unknown API key' }], 'a repeated api_key is not a key')
})

t.test('403 Disabled API key only when the whole key matches an inactive assigned key', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app, 'inactive', false)
  await assignKeys(app, 'dataset', [k.id])
  const res = await app.inject({ url: DATASET_URL, headers: { authorization: `Bearer ${k.key}` } })
  t.equal(res.statusCode, 403)
  t.same(res.json(), { message: 'Disabled API key' })

  const guess = k.key.slice(0, 11) + 'b'.repeat(21)
  const guessed = await app.inject({ url: DATASET_URL, headers: { authorization: `Bearer ${guess}` } })
  t.same(guessed.json(), { message: 'Unknown API key' }, 'a wrong secret on a disabled key\'s prefix reveals nothing')
})

t.test('404 Dataset not found / Pipeline not found when the host has no such resource', async (t) => {
  const { app, datasets, jobs } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  await assignKeys(app, 'pipeline', [k.id])
  datasets.datasets.clear()
  jobs.pipelines.clear()
  const data = await app.inject(`${DATASET_URL}?api_key=${k.key}`)
  t.equal(data.statusCode, 404)
  t.same(data.json(), { message: 'Dataset not found' })
  const run = await app.inject({ method: 'POST', url: `${PIPELINE_URL}?api_key=${k.key}` })
  t.equal(run.statusCode, 404)
  t.same(run.json(), { message: 'Pipeline not found' })
  t.equal(jobs.starts, 0)
})

t.test('a host whose getDataset answers without a promise: the dataset, 404, or 500 when it throws, as with a promise', async (t) => {
  const sales = await new MemoryDatasets().add(SALES_REF, salesDataset()).getDataset(SALES_REF)
  let answer: () => Dataset | null = () => sales
  const { app } = await buildApp(t, { datasets: { getDataset: () => answer() } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])

  const found = await app.inject(`${DATASET_URL}?format=json&api_key=${k.key}`)
  t.equal(found.statusCode, 200)
  t.same(Object.keys(found.json()), ['customers', 'orders'])
  answer = () => null
  const missing = await app.inject(`${DATASET_URL}?api_key=${k.key}`)
  t.same([missing.statusCode, missing.json()], [404, { message: 'Dataset not found' }])
  // As a promise's rejection would be.
  answer = () => { throw new Error('the host failed') }
  const failed = await app.inject(`${DATASET_URL}?api_key=${k.key}`)
  t.same([failed.statusCode, failed.json()], [500, { message: 'the host failed' }])
})

t.test('404 Not found for a path that is not a data endpoint\'s shape', async (t) => {
  const { app } = await buildApp(t)
  for (const path of ['model/1/table/1', 'model/0/dataset/1', 'model/1/dataset/0', 'model/-1/dataset/1',
    'model/1.5/dataset/1', 'model/1e3/dataset/1', 'model/0x10/dataset/1', 'model/01/dataset/1',
    'model/1/dataset/1234567890123456789012345', 'model/1/dataset/abc', 'model/1/Dataset/1']) {
    const res = await app.inject({ method: 'GET', url: `/api/acme/shop/${path}` })
    t.equal(res.statusCode, 404, path)
    t.same(res.json(), { message: 'Not found' }, path)
  }
})

t.test('405 with Allow for the wrong method, before any key check', async (t) => {
  const { app } = await buildApp(t)
  const cases: Array<[string, string, string]> = [
    ['GET', PIPELINE_URL, 'POST'],
    ['POST', DATASET_URL, 'GET, HEAD'],
    ['PUT', DATASET_URL, 'GET, HEAD'],
    ['DELETE', PIPELINE_URL, 'POST'],
    ['PATCH', DATASET_URL, 'GET, HEAD'],
    ['HEAD', PIPELINE_URL, 'POST']
  ]
  for (const [method, url, allow] of cases) {
    const res = await app.inject({ method: method as 'GET', url })
    t.equal(res.statusCode, 405, `${method} ${url}`)
    t.equal(res.headers.allow, allow)
    if (method !== 'HEAD') t.same(res.json(), { message: 'Endpoint or method not allowed' })
  }
})

t.test('500 with the exact message for an unknown format, after the key check', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  for (const format of ['xml', 'JSON', '', 'tsv', 'PARQUET']) {
    const res = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format } })
    t.equal(res.statusCode, 500, format)
    t.same(res.json(), { message: UNKNOWN_FORMAT(format) }, format)
  }
  const noKey = await app.inject({ url: `${DATASET_URL}?format=xml` })
  t.same(noKey.json(), { message: 'Not authorized' }, 'the key is checked first')
})

t.test('400 naming the parameter for bad archiveType, meta, limit and entity', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ archiveType: 'rar', format: 'csv-zip' }, /archiveType/],
    [{ meta: 'columns' }, /meta/],
    [{ limit: '-1' }, /limit/],
    [{ limit: '1.5' }, /limit/],
    [{ limit: 'ten' }, /limit/],
    [{ limit: '99999999999999999999' }, /limit/],
    [{ entity: 'nope', format: 'json' }, /entity/]
  ]
  for (const [query, message] of cases) {
    const res = await app.inject({ url: DATASET_URL, query: { api_key: k.key, ...query } })
    t.equal(res.statusCode, 400, JSON.stringify(query))
    t.match(res.json(), { message }, JSON.stringify(query))
    t.same(Object.keys(res.json()), ['message'])
  }
})

t.test('entity, limit and meta=entities shape the json download', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const one = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json', entity: 'orders', limit: '1' } })
  t.same(one.json(), { orders: [{ id: 10, amount: '19.99', placed_at: '2024-01-02T03:04:05.678Z' }] })
  const none = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json', limit: '0' } })
  t.same(none.json(), { customers: [], orders: [] })
  const meta = await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })
  t.equal(meta.headers['content-type'], 'application/json; charset=utf-8')
  t.same(meta.json(), ['customers', 'orders'])
})

t.test('500 with the server message for an unexpected exception, never a stack or a key', async (t) => {
  const { app, datasets } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  datasets.getDataset = async () => { throw new Error(`catalog offline while serving ${k.key}`) }
  const res = await app.inject({ url: DATASET_URL, query: { api_key: k.key } })
  t.equal(res.statusCode, 500)
  t.same(Object.keys(res.json()), ['message'])
  t.match(res.json().message, /^catalog offline while serving /)
  t.notMatch(res.body, k.key.slice(11), 'the secret is masked')
  t.notMatch(res.body, /at .*\.ts:\d+/, 'no stack trace')
})

t.test('a host error carrying its own statusCode is still a 500', async (t) => {
  const { app, jobs } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'pipeline', [k.id])
  jobs.getPipeline = async () => { throw Object.assign(new Error('runner says no'), { statusCode: 401 }) }
  const res = await app.inject({ method: 'POST', url: PIPELINE_URL, query: { api_key: k.key } })
  t.same([res.statusCode, res.json()], [500, { message: 'runner says no' }])
})

t.test('the query key wins over the header; the Bearer scheme is case-insensitive', async (t) => {
  const { app } = await buildApp(t)
  const good = await createKey(app, 'good')
  const other = await createKey(app, 'unassigned')
  await assignKeys(app, 'dataset', [good.id])

  const queryWins = await app.inject({ url: DATASET_URL, query: { api_key: good.key, format: 'json' }, headers: { authorization: `Bearer ${other.key}` } })
  t.equal(queryWins.statusCode, 200, 'good query key, bad header: accepted')
  const queryLoses = await app.inject({ url: DATASET_URL, query: { api_key: other.key, format: 'json' }, headers: { authorization: `Bearer ${good.key}` } })
  t.same([queryLoses.statusCode, queryLoses.json()], [403, { message: 'Unknown API key' }], 'bad query key, good header: refused')

  for (const scheme of ['Bearer', 'bearer', 'BEARER', 'bEaReR']) {
    const res = await app.inject({ url: DATASET_URL, query: { format: 'json' }, headers: { authorization: `${scheme} ${good.key}` } })
    t.equal(res.statusCode, 200, scheme)
  }
  const spaced = await app.inject({ url: DATASET_URL, query: { format: 'json' }, headers: { authorization: `Bearer   ${good.key}  ` } })
  t.equal(spaced.statusCode, 200, 'extra blanks around the key are tolerated')
})

t.test('any one of several assigned keys authenticates', async (t) => {
  const { app } = await buildApp(t)
  const keys = [await createKey(app, 'a'), await createKey(app, 'b'), await createKey(app, 'c')]
  await assignKeys(app, 'dataset', keys.map((k) => k.id))
  for (const k of keys) {
    const res = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })
    t.equal(res.statusCode, 200, k.prefix)
  }
})

t.test('requireHttps refuses plain HTTP from other hosts and honours trustProxy', async (t) => {
  const { app } = await buildApp(t, {}, { trustProxy: true })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const remote = { 'x-forwarded-for': '203.0.113.7' }
  const plain = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' }, headers: remote })
  t.same([plain.statusCode, plain.json()], [403, { message: 'HTTPS required' }])
  const viaTls = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' }, headers: { ...remote, 'x-forwarded-proto': 'https' } })
  t.equal(viaTls.statusCode, 200, 'HTTPS at a trusted proxy is accepted')
  const local = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })
  t.equal(local.statusCode, 200, 'loopback is exempt for local trials')
})

t.test('requireHttps: false accepts plain HTTP from anywhere', async (t) => {
  const { app } = await buildApp(t, { requireHttps: false }, { trustProxy: true })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const res = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' }, headers: { 'x-forwarded-for': '203.0.113.7' } })
  t.equal(res.statusCode, 200)
})

t.test('an unauthenticated POST body is never parsed', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'pipeline', [k.id])
  const res = await app.inject({
    method: 'POST', url: PIPELINE_URL, headers: { 'content-type': 'application/json' }, payload: '{"broken json'
  })
  t.same([res.statusCode, res.json()], [403, { message: 'Not authorized' }], 'refused before the body is read')
})

t.test('management is separate: data keys grant no management access', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  const res = await app.inject({ url: '/api-keys/acme/shop/keys', headers: { authorization: `Bearer ${k.key}` } })
  t.same([res.statusCode, res.json()], [403, { message: 'Not authorized' }])
  const ok = await app.inject({ url: '/api-keys/acme/shop/keys', headers: ADMIN })
  t.equal(ok.statusCode, 200)
})
