import fastifySwagger from '@fastify/swagger'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import dataEndpoints, { SqliteStorage, type KeyHasher } from '../../lib/index.js'
import { MemoryDatasets, MemoryJobs } from '../fixtures.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, PIPELINE_URL, type TestApp } from '../helper.js'

// The OpenAPI document at <managementPrefix>/openapi.json: who may read it,
// what it covers, and that documenting the data routes changed none of
// their answers.

interface Parameter { name: string, in: string, required?: boolean, schema: Record<string, unknown> }
interface Response { description: string, content?: Record<string, { schema: Record<string, unknown> }>, headers?: Record<string, unknown> }
interface Operation { parameters?: Parameter[], responses: Record<string, Response>, security?: unknown[], requestBody?: unknown, tags?: string[] }
interface Document {
  openapi: string
  info: { title: string, version: string }
  paths: Record<string, Record<string, Operation>>
  components: { securitySchemes: Record<string, Record<string, string>> }
}

const DOC = '/api-keys/openapi.json'
const DATASET = '/api/{organization}/{project}/model/{modelSequence}/dataset/{resourceSequence}'
const PIPELINE = '/api/{organization}/{project}/model/{modelSequence}/pipeline/{resourceSequence}'
const KEYS = '/api-keys/{organization}/{project}/keys'
const ENDPOINT = '/api-keys/{organization}/{project}/endpoints/{modelSequence}/{type}/{resourceSequence}'

// Every documented operation and its statuses: DESIGN.md §2 for the data
// and job routes, §4 for management (plus 500, e.g. getPermissions failing,
// and Fastify's 413 and 415 where a body is read).
const EXPECTED: Record<string, string[]> = {
  [`GET ${DATASET}`]: ['200', '206', '304', '400', '403', '404', '405', '416', '429', '500', '503'],
  [`POST ${PIPELINE}`]: ['200', '400', '403', '404', '405', '409', '429', '500'],
  'GET /api/job/{jobId}': ['200', '404', '500'],
  [`GET ${KEYS}`]: ['200', '400', '403', '500'],
  [`POST ${KEYS}`]: ['201', '400', '403', '413', '415', '500'],
  [`PATCH ${KEYS}/{keyId}`]: ['200', '400', '403', '404', '413', '415', '500'],
  [`DELETE ${KEYS}/{keyId}`]: ['204', '400', '403', '404', '413', '415', '500'],
  [`POST ${KEYS}/{keyId}/regenerate`]: ['200', '400', '403', '404', '413', '415', '500'],
  'GET /api-keys/{organization}/{project}/usage': ['200', '400', '403', '500'],
  'GET /api-keys/{organization}/{project}/audit': ['200', '400', '403', '500'],
  'GET /api-keys/{organization}/{project}/resources': ['200', '400', '403', '500'],
  'GET /api-keys/{organization}/{project}/endpoints': ['200', '400', '403', '500'],
  [`PUT ${ENDPOINT}`]: ['200', '201', '400', '403', '404', '413', '415', '500'],
  [`DELETE ${ENDPOINT}`]: ['204', '400', '403', '404', '413', '415', '500'],
  [`POST ${ENDPOINT}/keys/{keyId}`]: ['200', '400', '403', '404', '413', '415', '500'],
  [`DELETE ${ENDPOINT}/keys/{keyId}`]: ['200', '400', '403', '404', '413', '415', '500'],
  'GET /api-keys/openapi.json': ['200', '403', '500'],
  [`POST ${DATASET}/links`]: ['201', '400', '403', '404', '405', '429', '500'],
  'GET /api/links/{token}/{fileName}': ['200', '206', '304', '400', '403', '404', '405', '416', '429', '500', '503'],
  'GET /api-keys/{organization}/{project}/links': ['200', '400', '403', '500'],
  'DELETE /api-keys/{organization}/{project}/links/{linkId}': ['204', '400', '403', '404', '413', '415', '500']
}

async function documentOf (t: Test): Promise<Document> {
  const { app } = await buildApp(t)
  const res = await app.inject({ url: DOC, headers: ADMIN })
  t.equal(res.statusCode, 200)
  return res.json()
}

function operations (doc: Document): Map<string, Operation> {
  const ops = new Map<string, Operation>()
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) ops.set(`${method.toUpperCase()} ${path}`, op)
  }
  return ops
}

t.test('the document needs ManageAPIKeys', async (t) => {
  const { app } = await buildApp(t)
  for (const headers of [{}, { 'x-permissions': 'ReadData' }, { 'x-permissions': 'manageapikeys' }]) {
    const res = await app.inject({ url: DOC, headers })
    t.equal(res.statusCode, 403, JSON.stringify(headers))
    t.same(res.json(), { message: 'Not authorized' })
  }
  const ok = await app.inject({ url: DOC, headers: ADMIN })
  t.equal(ok.statusCode, 200)
  t.match(ok.headers['content-type'], /^application\/json/)
  t.equal(ok.headers['cache-control'], 'no-store')

  const { app: failing } = await buildApp(t, { getPermissions: async () => { throw new Error('directory unavailable') } })
  const res = await failing.inject(DOC)
  t.same([res.statusCode, res.json()], [500, { message: 'directory unavailable' }])
})

t.test('OpenAPI 3 with every data, job and management route, and nothing else', async (t) => {
  const doc = await documentOf(t)
  t.match(doc.openapi, /^3\.\d+\.\d+$/)
  t.equal(doc.info.title, 'fastify-data-endpoints')
  t.type(doc.info.version, 'string')
  const ops = operations(doc)
  t.same([...ops.keys()].sort(), Object.keys(EXPECTED).sort(), 'exactly these operations (no HEAD, no page, no generic {type} data path)')
  for (const [name, statuses] of Object.entries(EXPECTED)) {
    t.same(Object.keys(ops.get(name)?.responses ?? {}).sort(), statuses, `${name}: responses`)
  }
})

t.test('every error answer is documented as a JSON {message} with a description', async (t) => {
  const doc = await documentOf(t)
  for (const [name, op] of operations(doc)) {
    for (const [status, response] of Object.entries(op.responses)) {
      t.not(response.description, 'Default Response', `${name} ${status}: described`)
      if (Number(status) < 400) continue
      const schema = response.content?.['application/json']?.schema as { type?: string, required?: string[], properties?: Record<string, { type: string }> }
      t.equal(schema?.type, 'object', `${name} ${status}: an object`)
      t.ok(schema?.required?.includes('message'), `${name} ${status}: message required`)
      t.equal(schema?.properties?.message?.type, 'string', `${name} ${status}: message is a string`)
    }
  }
  const job404 = operations(doc).get('GET /api/job/{jobId}')?.responses['404'].content?.['application/json'].schema
  t.match(job404, { properties: { id: { type: 'string' }, job: { type: 'string' } } }, 'the job errors\' extra fields')
  t.match(operations(doc).get(`GET ${DATASET}`)?.responses['405'].headers, { allow: {} }, '405 documents Allow')
  t.match(operations(doc).get(`GET ${DATASET}`)?.responses['429'].headers, { 'retry-after': {} }, '429 documents Retry-After')
  t.match(operations(doc).get(`GET ${DATASET}`)?.responses['503'].headers, { 'retry-after': {} }, '503 documents Retry-After')
})

t.test('path parameters match the path templates', async (t) => {
  const doc = await documentOf(t)
  for (const [name, op] of operations(doc)) {
    const inTemplate = [...name.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort()
    const declared = (op.parameters ?? []).filter((p) => p.in === 'path')
    t.same(declared.map((p) => p.name).sort(), inTemplate, `${name}: path parameters`)
    t.ok(declared.every((p) => p.required === true), `${name}: path parameters required`)
  }
})

t.test('the data routes: key security, the query of a download, the headers of a run', async (t) => {
  const doc = await documentOf(t)
  t.same(doc.components.securitySchemes.apiKeyQuery, {
    type: 'apiKey', in: 'query', name: 'api_key', description: doc.components.securitySchemes.apiKeyQuery.description
  })
  t.match(doc.components.securitySchemes.bearerAuth, { type: 'http', scheme: 'bearer' })

  const dataset = doc.paths[DATASET].get
  const pipeline = doc.paths[PIPELINE].post
  for (const op of [dataset, pipeline]) t.same(op.security, [{ apiKeyQuery: [] }, { bearerAuth: [] }])
  t.same(doc.paths['/api/job/{jobId}'].get.security, [], 'the job status is public')

  const query = Object.fromEntries((dataset.parameters ?? []).filter((p) => p.in === 'query').map((p) => [p.name, p]))
  t.same(Object.keys(query).sort(), ['archiveType', 'columns', 'entity', 'format', 'limit', 'meta', 'since', 'where'])
  t.same(query.format.schema.enum, ['sql', 'json', 'csv-zip', 'json-zip', 'oracle-loader', 'csv', 'parquet', 'parquet-zip', 'arrow'])
  t.equal(query.format.schema.default, 'sql')
  t.same(query.meta.schema.enum, ['entities', 'ddl'])
  t.same(query.archiveType.schema.enum, ['zip', 'tar'])
  t.equal(query.archiveType.schema.default, 'zip')
  t.match(query.limit.schema, { type: 'integer', minimum: 0 })
  t.ok(Object.values(query).every((p) => p.required === false), 'all optional')
  t.same(Object.keys(dataset.responses['200'].content ?? {}).sort(),
    ['application/json', 'application/sql', 'application/vnd.apache.arrow.stream', 'application/vnd.apache.parquet',
      'application/x-tar', 'application/zip', 'text/csv', 'text/plain'])

  t.notOk(pipeline.parameters?.some((p) => p.in === 'query'), 'a run takes no download query')
  t.ok(pipeline.parameters?.some((p) => p.in === 'header' && p.name === 'idempotency-key'))
  t.match(pipeline.responses['200'].content?.['application/json'].schema, {
    required: ['job_id', 'job_url'], properties: { job_id: { type: 'string' }, job_url: { type: 'string' } }
  })
})

t.test('the management routes: bodies, and answers that carry a key value say it is shown once', async (t) => {
  const doc = await documentOf(t)
  const created = doc.paths[KEYS].post
  t.match(created.requestBody, { content: { 'application/json': { schema: { required: ['purpose'] } } } })
  t.match(created.responses['201'].description, /once/)
  t.match(doc.paths[`${KEYS}/{keyId}/regenerate`].post.responses['200'].description, /once/)
  t.match(doc.paths[ENDPOINT].put.requestBody, { content: { 'application/json': { schema: { properties: { keyIds: { type: 'array' } } } } } })
  t.match(doc.paths[ENDPOINT].put.responses['404'].description, /Dataset not found/)
  t.notOk(JSON.stringify(doc).includes('"hash"'), 'no hash field anywhere')
  for (const [name, op] of operations(doc)) {
    if (name.includes('/api-keys/')) t.same(op.tags, ['management'], name)
  }
})

// The tests below derive what the document must say from the server's own
// answers: provoke the answer, then find its status and exact message.

type Inject = Awaited<ReturnType<TestApp['app']['inject']>>

/**
 * The document lists the status `res` answered for `operation`, quoting its
 * message exactly, but for a time or a row count, which it writes as
 * `<time>` or `<n>`.
 */
async function assertQuoted (t: Test, app: TestApp['app'], operation: string, res: Inject): Promise<void> {
  const doc = (await app.inject({ url: DOC, headers: ADMIN })).json() as Document
  const message = (res.json() as { message: string }).message
    .replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/g, '<time>')
    .replace(/more than \d+ rows/, 'more than <n> rows')
  const described = operations(doc).get(operation)?.responses[String(res.statusCode)]?.description ?? ''
  t.ok(described.includes(`\`${message}\``), `${operation} ${res.statusCode} quotes \`${message}\`: ${described}`)
}

/** The URL of a management operation's path template, for the key `keyId`. */
function urlOf (template: string, keyId: string): string {
  const values: Record<string, string> = {
    organization: 'acme', project: 'shop', keyId, modelSequence: '1', type: 'dataset', resourceSequence: '1'
  }
  return template.replace(/\{(\w+)\}/g, (_, name: string) => values[name])
}

t.test('management operations list 413 and 415 exactly where the server answers them, with their messages', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  const doc = (await app.inject({ url: DOC, headers: ADMIN })).json() as Document
  const unreadable = {
    415: { 'content-type': 'text/plain', payload: 'purpose=x' },
    413: { 'content-type': 'application/json', payload: JSON.stringify({ purpose: 'x'.repeat(1024 * 1024) }) }
  }
  const answered: Record<string, number> = { 413: 0, 415: 0 }
  for (const [name, op] of operations(doc)) {
    if (op.tags?.[0] !== 'management') continue
    const [method, template] = name.split(' ')
    for (const [status, { payload, ...headers }] of Object.entries(unreadable)) {
      const res = await app.inject({ method: method as 'GET', url: urlOf(template, k.id), headers: { ...ADMIN, ...headers }, payload })
      if (res.statusCode === Number(status)) {
        answered[status]++
        await assertQuoted(t, app, name, res)
      } else {
        t.notOk(status in op.responses, `${name}: answers ${res.statusCode}, so does not list ${status}`)
      }
    }
  }
  t.ok(answered[413] > 0 && answered[415] > 0, `answered: ${JSON.stringify(answered)}`)
})

t.test('every message of the dataset and pipeline 400s is quoted in the document', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  await assignKeys(app, 'pipeline', [k.id])
  const queries: Array<Record<string, string>> = [{ limit: 'abc' }, { entity: 'nope' }, { archiveType: 'rar' }, { meta: 'all' },
    { entity: 'orders', columns: 'id' }, { entity: 'orders', where: 'id = 1' }, { entity: 'orders', since: '1' }]
  for (const query of queries) {
    const res = await app.inject({ url: DATASET_URL, query: { ...query, api_key: k.key } })
    t.equal(res.statusCode, 400, JSON.stringify(query))
    await assertQuoted(t, app, `GET ${DATASET}`, res)
  }
  const res = await app.inject({ method: 'POST', url: PIPELINE_URL, headers: { authorization: `Bearer ${k.key}`, 'idempotency-key': 'has space' } })
  t.equal(res.statusCode, 400)
  await assertQuoted(t, app, `POST ${PIPELINE}`, res)
})

t.test('the 409 of a held Idempotency-Key is quoted in the document', async (t) => {
  const { app, storage } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'pipeline', [k.id])
  // Another call holds the key and never finishes; the clock jumps past the
  // wait at each look, so the test need not wait it out.
  const realNow = Date.now
  let skew = 0
  Date.now = () => realNow() + skew
  t.teardown(() => { Date.now = realNow })
  storage.claimIdempotencyKey = async () => {
    skew += 60_000
    return { claimed: false, response: null }
  }
  const res = await app.inject({ method: 'POST', url: PIPELINE_URL, headers: { authorization: `Bearer ${k.key}`, 'idempotency-key': 'held' } })
  t.equal(res.statusCode, 409)
  await assertQuoted(t, app, `POST ${PIPELINE}`, res)
})

t.test('both 429 messages are quoted in the document', async (t) => {
  const wrong = (key: string, i: number): string => key.slice(0, 11) + String(i).padStart(21, 'x')

  const { app: throttled } = await buildApp(t, { failureThrottle: { maxFailures: 1, windowMs: 60_000, delayMs: 0 } })
  const k = await createKey(throttled)
  await assignKeys(throttled, 'dataset', [k.id])
  t.equal((await throttled.inject({ url: DATASET_URL, query: { api_key: wrong(k.key, 1) } })).statusCode, 403)
  const limited = await throttled.inject({ url: DATASET_URL, query: { api_key: wrong(k.key, 2) } })
  t.equal(limited.statusCode, 429)
  await assertQuoted(t, throttled, `GET ${DATASET}`, limited)

  // One comparison at a time and no queue: a second one, while the first
  // is held, is refused.
  let comparing!: () => void
  const compared = new Promise<void>((resolve) => { comparing = resolve })
  let release!: () => void
  const held = new Promise<void>((resolve) => { release = resolve })
  const hasher: KeyHasher = {
    hash: async (value) => value,
    compare: async (value, hash) => {
      comparing()
      await held
      return value === hash
    }
  }
  const { app: busy } = await buildApp(t, { hasher, maxConcurrentHashes: 1, maxQueuedHashes: 0, failureThrottle: false })
  const b = await createKey(busy)
  await assignKeys(busy, 'pipeline', [b.id])
  const first = busy.inject({ method: 'POST', url: PIPELINE_URL, query: { api_key: wrong(b.key, 1) } })
  await compared
  const refused = await busy.inject({ method: 'POST', url: PIPELINE_URL, query: { api_key: wrong(b.key, 2) } })
  release()
  t.equal((await first).statusCode, 403)
  t.equal(refused.statusCode, 429)
  await assertQuoted(t, busy, `POST ${PIPELINE}`, refused)
})

t.test('the expiry and usage 400s are quoted in the document', async (t) => {
  const { app } = await buildApp(t, { maxKeyLifetime: 86_400_000, usageQueryMaxRows: 1 })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const past = { expiresAt: '2000-01-01T00:00:00Z' }
  const tooLate = { expiresAt: '2999-01-01T00:00:00Z' }
  for (const payload of [past, tooLate, { expiresAt: null }]) {
    await assertQuoted(t, app, `POST ${KEYS}`, await app.inject({ method: 'POST', url: urlOf(KEYS, k.id), headers: ADMIN, payload: { purpose: 'x', ...payload } }))
    await assertQuoted(t, app, `PATCH ${KEYS}/{keyId}`, await app.inject({ method: 'PATCH', url: urlOf(`${KEYS}/{keyId}`, k.id), headers: ADMIN, payload }))
  }
  const usage = '/api-keys/{organization}/{project}/usage'
  await assertQuoted(t, app, `GET ${usage}`, await app.inject({ url: urlOf(usage, k.id), query: { from: '2030-01-02T00:00:00Z', to: '2030-01-01T00:00:00Z' }, headers: ADMIN }))
  await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })
  await app.inject({ url: DATASET_URL })
  await assertQuoted(t, app, `GET ${usage}`, await app.inject({ url: urlOf(usage, k.id), headers: ADMIN }))
})

t.test('the 503 of a full tar spool is quoted in the document', async (t) => {
  // No memory and no disk for tar entries: the first one gets no budget.
  const { app } = await buildApp(t, { tarSpool: { maxBytes: 0, memoryPerEntry: 0 } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const full = await app.inject({ url: DATASET_URL, query: { format: 'json-zip', archiveType: 'tar', api_key: k.key } })
  t.equal(full.statusCode, 503, full.body)
  await assertQuoted(t, app, `GET ${DATASET}`, full)
})

t.test('the pipeline 200 documents the headers a replay adds', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'pipeline', [k.id])
  const call = async (): Promise<Inject> =>
    app.inject({ method: 'POST', url: PIPELINE_URL, headers: { authorization: `Bearer ${k.key}`, 'idempotency-key': 'once' } })
  const first = await call()
  const replay = await call()
  t.same([first.statusCode, replay.statusCode, replay.body], [200, 200, first.body])
  const added = Object.keys(replay.headers).filter((name) => !(name in first.headers))
  t.ok(added.length > 0, `a replay adds ${added.join(', ')}`)
  const documented = operations((await app.inject({ url: DOC, headers: ADMIN })).json()).get(`POST ${PIPELINE}`)?.responses['200'].headers as
    Record<string, { schema: { enum?: unknown[] } }> | undefined
  for (const name of added) t.same(documented?.[name]?.schema.enum, [replay.headers[name]], `${name} documented with its value`)
})

t.test('a request body is required in the document exactly where the server refuses a request without one', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  const doc = (await app.inject({ url: DOC, headers: ADMIN })).json() as Document
  let bodies = 0
  for (const [name, op] of operations(doc)) {
    const body = op.requestBody as { required?: boolean } | undefined
    if (body === undefined) continue
    bodies++
    const [method, template] = name.split(' ')
    const res = await app.inject({ method: method as 'PUT', url: urlOf(template, k.id), headers: ADMIN })
    t.equal(body.required === true, res.statusCode === 400, `${name}: without a body ${res.statusCode} ${res.body}; required ${body.required}`)
  }
  t.ok(bodies >= 3, `${bodies} operations take a body`)
})

/** Every `$ref` in `doc` (at any depth), and those that point nowhere in it: another document, or a missing JSON pointer. */
function references (doc: unknown): { refs: string[], unresolved: string[] } {
  const refs: string[] = []
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) node.forEach(walk)
    else if (node !== null && typeof node === 'object') {
      for (const [name, value] of Object.entries(node)) {
        if (name === '$ref' && typeof value === 'string') refs.push(value)
        else walk(value)
      }
    }
  }
  walk(doc)
  const resolves = (ref: string): boolean => ref.startsWith('#/') && ref.slice(2).split('/')
    .map((part) => decodeURIComponent(part).replaceAll('~1', '/').replaceAll('~0', '~'))
    .reduce<unknown>((node, part) => (node !== null && typeof node === 'object' && Object.hasOwn(node, part) ? (node as Record<string, unknown>)[part] : undefined), doc) !== undefined
  return { refs, unresolved: refs.filter((ref) => !resolves(ref)) }
}

t.test('every $ref in the document resolves within it', async (t) => {
  const doc = await documentOf(t)
  const { refs, unresolved } = references(doc)
  t.same(unresolved, [], `${refs.length} references (schemas are written inline), none pointing nowhere`)

  // The check sees what it must: a reference to a missing schema, to another
  // document, or to an inherited property, however deep; and one that resolves.
  const broken = structuredClone(doc) as Document & { components: { schemas?: Record<string, unknown> } }
  const schemaOf = (d: typeof broken): { items: unknown } => d.paths[KEYS].get.responses['200'].content?.['application/json'].schema as { items: unknown }
  schemaOf(broken).items = { allOf: [{ $ref: '#/components/schemas/Missing' }, { $ref: 'other.json#/Key' }, { $ref: '#/components/schemas/toString' }] }
  t.same(references(broken).unresolved, ['#/components/schemas/Missing', 'other.json#/Key', '#/components/schemas/toString'], 'broken references are found')
  broken.components.schemas = { Missing: { type: 'object' } }
  t.same(references(broken), { refs: ['#/components/schemas/Missing', 'other.json#/Key', '#/components/schemas/toString'], unresolved: ['other.json#/Key', '#/components/schemas/toString'] },
    'and one that resolves is not')
})

t.test('documenting the routes changed no answer: their checks still run first, in DESIGN.md §2 order', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const cases: Array<[string, string, number, Record<string, string>]> = [
    ['GET', `${DATASET_URL}?format=xml&api_key=${k.key}`, 500,
      { message: 'Unknown download format xml, supported formats = json|sql|csv-zip|json-zip|oracle-loader|csv|parquet|parquet-zip|arrow' }],
    ['GET', `${DATASET_URL}?limit=abc&format=json&api_key=${k.key}`, 400, { message: 'Invalid limit: must be a non-negative integer' }],
    ['GET', `${DATASET_URL}?meta=all&api_key=${k.key}`, 400, { message: 'Invalid meta: must be one of entities, ddl' }],
    ['GET', '/api/acme/shop/model/0/dataset/1', 404, { message: 'Not found' }],
    ['GET', '/api/acme/shop/model/1/table/1', 404, { message: 'Not found' }],
    ['POST', DATASET_URL, 405, { message: 'Endpoint or method not allowed' }],
    ['GET', PIPELINE_URL, 405, { message: 'Endpoint or method not allowed' }],
    ['PUT', DATASET_URL, 405, { message: 'Endpoint or method not allowed' }],
    ['GET', `${DATASET_URL}?format=xml`, 403, { message: 'Not authorized' }],
    ['POST', `${PIPELINE_URL}?api_key=${k.key}`, 403, { message: 'Unknown API Endpoint' }],
    ['GET', '/api/job/42', 404, { id: '42', message: 'Invalid job id' }]
  ]
  for (const [method, url, status, body] of cases) {
    const res = await app.inject({ method: method as 'GET', url })
    t.same([res.statusCode, res.json()], [status, body], `${method} ${url.replace(k.key, '<key>')}`)
  }
  const head = await app.inject({ method: 'HEAD', url: DATASET_URL })
  t.same([head.statusCode, head.headers.allow], [403, undefined], 'HEAD on a dataset goes through the key checks, as GET does')
  const limited = await app.inject(`${DATASET_URL}?format=json&limit=1&api_key=${k.key}`)
  t.equal(limited.statusCode, 200)
  t.equal(limited.json().customers.length, 1, 'limit reaches the handler as given')
  const entities = await app.inject(`${DATASET_URL}?meta=entities&api_key=${k.key}`)
  t.same(entities.json(), ['customers', 'orders'], 'a JSON answer is written as without a schema')
})

t.test('our document leaves a host\'s own @fastify/swagger alone, and the other way round', async (t) => {
  for (const order of ['host swagger first', 'host swagger after the plugin']) {
    const app = Fastify()
    t.teardown(() => app.close())
    const jobs = new MemoryJobs()
    const plugin = async (): Promise<void> => {
      await app.register(dataEndpoints, {
        storage: new SqliteStorage({ filename: ':memory:' }),
        datasets: new MemoryDatasets(),
        pipelines: jobs,
        jobs,
        bcryptCost: 4,
        getPermissions: () => ['ManageAPIKeys']
      })
    }
    if (order === 'host swagger after the plugin') await plugin()
    await app.register(fastifySwagger, { openapi: { info: { title: 'host', version: '1.0.0' } } })
    app.get('/host/hello', { schema: { response: { 200: { type: 'string' } } } }, async () => 'hi')
    if (order === 'host swagger first') await plugin()
    await app.ready()

    const hostPaths = Object.keys((app.swagger() as unknown as Document).paths)
    t.ok(hostPaths.includes('/host/hello'), `${order}: the host's document has its route`)
    if (order === 'host swagger first') {
      t.ok(hostPaths.includes(DATASET), 'a host swagger registered first documents our routes too, without our security schemes')
    }
    const ours = (await app.inject(DOC)).json() as Document
    t.equal(ours.info.title, 'fastify-data-endpoints', order)
    t.notOk('/host/hello' in ours.paths, `${order}: ours has none of the host's routes`)
    t.ok(DATASET in ours.paths && PIPELINE in ours.paths, `${order}: ours has the data routes`)
  }
})

t.test('the document follows managementPrefix', async (t) => {
  const { app } = await buildApp(t, { managementPrefix: '/admin/data-keys' })
  t.equal((await app.inject({ url: DOC, headers: ADMIN })).statusCode, 404)
  const doc = (await app.inject({ url: '/admin/data-keys/openapi.json', headers: ADMIN })).json() as Document
  t.ok('/admin/data-keys/{organization}/{project}/keys' in doc.paths)
  t.ok('/admin/data-keys/openapi.json' in doc.paths)
  t.equal(doc.paths['/admin/data-keys/{organization}/{project}/keys'].get.tags?.[0], 'management', 'summaries follow the prefix')
})

t.test('the lists document their pages (limit, after, q, keyId, the Link header), and every 400 of pages and single keys is quoted', async (t) => {
  const doc = await documentOf(t)
  for (const [list, names] of [[KEYS, ['after', 'limit', 'q']], ['/api-keys/{organization}/{project}/endpoints', ['after', 'keyId', 'limit', 'q']]] as const) {
    const op = doc.paths[list].get
    t.same((op.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name).sort(), names, `${list}: its query`)
    t.match(op.responses['200'].headers, { link: { description: /rel="next"/ } }, `${list}: the Link header`)
  }
  const { app } = await buildApp(t)
  const key = await createKey(app, 'only')
  await assignKeys(app, 'dataset', [key.id])
  await assertQuoted(t, app, `GET ${KEYS}`, await app.inject({ url: '/api-keys/acme/shop/keys?limit=5&after=nope', headers: ADMIN }))
  await assertQuoted(t, app, 'GET /api-keys/{organization}/{project}/endpoints',
    await app.inject({ url: '/api-keys/acme/shop/endpoints?limit=5&after=nope', headers: ADMIN }))
  await assertQuoted(t, app, `DELETE ${ENDPOINT}/keys/{keyId}`,
    await app.inject({ method: 'DELETE', url: `/api-keys/acme/shop/endpoints/1/dataset/1/keys/${key.id}`, headers: ADMIN }))
  for (const method of ['POST', 'DELETE'] as const) {
    await assertQuoted(t, app, `${method} ${ENDPOINT}/keys/{keyId}`,
      await app.inject({ method, url: `/api-keys/acme/shop/endpoints/1/dataset/2/keys/${key.id}`, headers: ADMIN }))
  }
})
