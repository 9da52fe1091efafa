import { deepEqual, equal, fail, ok } from 'node:assert/strict'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import fc from 'fast-check'
import t from 'tap'
import { frameworkErrorReply } from '../../lib/index.js'
import { ADMIN, assignKeys, buildApp, createKey, type TestApp } from '../helper.js'
import { PIPELINE_REF, SALES_REF, salesDataset } from '../fixtures.js'
import {
  checkProperty, isDotSegment, MAX_PARAM_LENGTH, monikerText, segment, sequenceOf, sequenceText, type Segment
} from '../fuzz-arbitraries.js'
import { rawRequest } from '../raw-http.js'
import { leaks } from '../secret-scan.js'

// Property-based tests of the data routes (issue 6): requests built from
// malformed paths, odd sequences, keys in every place and shape, odd query
// parameters, bodies and client addresses. A small oracle derives from each
// request the answer DESIGN.md §2 prescribes (or Fastify's documented one
// where Fastify answers), and the property checks status, message, headers,
// that no body carries a key or a stack, and that `calls` moved exactly by
// the requests that authenticated.

const FORMATS = ['sql', 'json', 'csv-zip', 'json-zip', 'oracle-loader', 'csv', 'parquet', 'parquet-zip', 'arrow']
const SUPPORTED = 'json|sql|csv-zip|json-zip|oracle-loader|csv|parquet|parquet-zip|arrow'
const REMOTE = '203.0.113.9'

type Verdict = 'active' | 'inactive' | 'unknown'
interface KeyChoice { value: string, verdict: Verdict }

type QueryKey =
  | { kind: 'none' | 'empty' | 'bare' }
  | { kind: 'single' | 'encoded-name', key: KeyChoice }
  | { kind: 'repeated', key: KeyChoice, second: KeyChoice }
  | { kind: 'other-name', name: string, key: KeyChoice }

type HeaderKey =
  | { kind: 'none' }
  | { kind: 'bearer', scheme: string, trailing: string, key: KeyChoice }
  | { kind: 'bearer-extra', key: KeyChoice }
  | { kind: 'not-bearer', value: string }

type Param = string | string[] | undefined

interface DataRequest {
  method: string
  org: Segment
  project: Segment
  modelWord: Segment
  ms: Segment
  type: Segment
  rs: Segment
  /** dot-dot: `/..` then another resource, which a normalising proxy would resolve (real HTTP only) */
  structure: 'exact' | 'trailing-slash' | 'extra-segment' | 'missing-segment' | 'double-slash' | 'dot-dot'
  queryKey: QueryKey
  headerKey: HeaderKey
  params: { format: Param, meta: Param, archiveType: Param, limit: Param, entity: Param }
  idempotencyKey: string | undefined
  body: 'none' | 'json' | 'bad-json' | 'empty-json' | 'text' | 'octet' | 'huge'
  client: string
}

interface Expected {
  status: number
  message?: string
  /** the answer came from a data route (its key hook sets Cache-Control) */
  routed: boolean
  allow?: string
  contentType?: string
  /** `acme/shop/1/<type>/<rs>` of the endpoint whose `calls` this request increments */
  counts?: string
  job?: boolean
}

// ---- the oracle ----------------------------------------------------------

type PathOutcome = { kind: '414' | 'nomatch' } | { kind: 'route' }

/** What Fastify's router makes of the path (find-my-way walks the parameters in order). */
function routeOf (r: DataRequest): PathOutcome {
  const long = (s: Segment): boolean => s.text.length > MAX_PARAM_LENGTH
  if (long(r.org) || long(r.project)) return { kind: '414' }
  if (r.structure === 'double-slash' || r.modelWord.text !== 'model') return { kind: 'nomatch' }
  const walked = r.structure === 'missing-segment' ? [r.ms, r.type] : [r.ms, r.type, r.rs]
  if (walked.some(long)) return { kind: '414' }
  return r.structure === 'exact' ? { kind: 'route' } : { kind: 'nomatch' }
}

function suppliedVerdict (r: DataRequest): Verdict | 'none' {
  const q = r.queryKey
  if (q.kind === 'single' || q.kind === 'encoded-name') return q.key.verdict
  if (q.kind === 'repeated') return 'unknown'
  const h = r.headerKey
  if (h.kind === 'bearer') return h.key.verdict
  if (h.kind === 'bearer-extra') return 'unknown'
  return 'none'
}

const isOneOf = (value: Param, allowed: string[]): boolean => typeof value === 'string' && allowed.includes(value)

function datasetAnswer (p: DataRequest['params']): Pick<Expected, 'status' | 'message' | 'contentType'> {
  if (p.format !== undefined && !isOneOf(p.format, FORMATS)) {
    return { status: 500, message: `Unknown download format ${String(p.format)}, supported formats = ${SUPPORTED}` }
  }
  if (p.archiveType !== undefined && !isOneOf(p.archiveType, ['zip', 'tar'])) return { status: 400, message: 'Invalid archiveType: must be one of zip, tar' }
  if (p.meta !== undefined && !isOneOf(p.meta, ['entities', 'ddl'])) return { status: 400, message: 'Invalid meta: must be one of entities, ddl' }
  if (p.limit !== undefined && !(typeof p.limit === 'string' && /^[0-9]+$/.test(p.limit) && BigInt(p.limit) <= BigInt(Number.MAX_SAFE_INTEGER))) {
    return { status: 400, message: 'Invalid limit: must be a non-negative integer' }
  }
  if (p.entity !== undefined && !isOneOf(p.entity, ['customers', 'orders'])) return { status: 400, message: 'Invalid entity: the dataset has no entity of that name' }
  if (p.format === 'csv' && p.meta === undefined && p.entity === undefined) {
    return { status: 400, message: 'Invalid entity: csv holds one entity; name one with entity=' }
  }
  if (p.meta === 'entities') return { status: 200, contentType: 'application/json; charset=utf-8' }
  if (p.meta === 'ddl') return { status: 200, contentType: 'text/plain; charset=utf-8' }
  const format = p.format ?? 'sql'
  if (format === 'json') return { status: 200, contentType: 'application/json; charset=utf-8' }
  if (format === 'sql') return { status: 200, contentType: 'application/sql; charset=utf-8' }
  if (format === 'csv') return { status: 200, contentType: 'text/csv; charset=utf-8' }
  return { status: 200, contentType: p.archiveType === 'tar' ? 'application/x-tar' : 'application/zip' }
}

function pipelineAnswer (r: DataRequest, resource: number): Pick<Expected, 'status' | 'message' | 'job'> {
  // A pipeline call reads no body (SPEC.md §4.2 describes none): whatever
  // comes, in any content type and of any size, is ignored.
  if (resource !== 1) return { status: 404, message: 'Pipeline not found' }
  if (r.idempotencyKey !== undefined && !/^[\x21-\x7e]{1,255}$/.test(r.idempotencyKey)) {
    return { status: 400, message: 'Idempotency-Key must be 1 to 255 visible ASCII characters' }
  }
  return { status: 200, job: true }
}

/** DESIGN.md §2, checks in order; the first failure answers. */
function expected (r: DataRequest): Expected {
  const route = routeOf(r)
  if (route.kind === '414') return { status: 414, message: 'URI Too Long', routed: false }
  // No route: the plugin's not-found answer comes in onRequest, so a body
  // sent to nowhere is never parsed, whatever it holds.
  if (route.kind === 'nomatch') return { status: 404, message: 'Not found', routed: false }
  const ms = sequenceOf(r.ms.text)
  const rs = sequenceOf(r.rs.text)
  const type = r.type.text
  if ((type !== 'dataset' && type !== 'pipeline') || ms === null || rs === null) return { status: 404, message: 'Not found', routed: true }
  // A dataset answers HEAD as it answers GET, without the body.
  const allowed = type === 'dataset' ? ['GET', 'HEAD'] : ['POST']
  if (!allowed.includes(r.method)) return { status: 405, message: 'Endpoint or method not allowed', allow: allowed.join(', '), routed: true }
  if (r.client === REMOTE) return { status: 403, message: 'HTTPS required', routed: true }
  const verdict = suppliedVerdict(r)
  if (verdict === 'none') return { status: 403, message: 'Not authorized', routed: true }
  const endpointExists = r.org.text === 'acme' && r.project.text === 'shop' && ms === 1 && (rs === 1 || rs === 2)
  if (!endpointExists) return { status: 403, message: 'Unknown API Endpoint', routed: true }
  if (verdict === 'unknown') return { status: 403, message: 'Unknown API key', routed: true }
  if (verdict === 'inactive') return { status: 403, message: 'Disabled API key', routed: true }
  const counts = `acme/shop/1/${type}/${rs}`
  if (type === 'pipeline') return { ...pipelineAnswer(r, rs), routed: true, counts }
  if (rs !== 1) return { status: 404, message: 'Dataset not found', routed: true, counts }
  return { ...datasetAnswer(r.params), routed: true, counts }
}

// ---- building the request ------------------------------------------------

function queryString (r: DataRequest): string {
  const parts: string[] = []
  const enc = encodeURIComponent
  const q = r.queryKey
  if (q.kind === 'single') parts.push(`api_key=${enc(q.key.value)}`)
  if (q.kind === 'encoded-name') parts.push(`api%5Fkey=${enc(q.key.value)}`)
  if (q.kind === 'repeated') parts.push(`api_key=${enc(q.key.value)}`, `api_key=${enc(q.second.value)}`)
  if (q.kind === 'empty') parts.push('api_key=')
  if (q.kind === 'bare') parts.push('api_key')
  if (q.kind === 'other-name') parts.push(`${q.name}=${enc(q.key.value)}`)
  for (const [name, value] of Object.entries(r.params)) {
    for (const v of value === undefined ? [] : [value].flat()) parts.push(`${name}=${enc(v)}`)
  }
  return parts.length === 0 ? '' : `?${parts.join('&')}`
}

function pathOf (r: DataRequest): string {
  const s = [r.org, r.project, r.modelWord, r.ms, r.type, r.rs].map((x) => x.wire)
  if (r.structure === 'trailing-slash') return `/api/${s.join('/')}/`
  if (r.structure === 'extra-segment') return `/api/${s.join('/')}/extra`
  if (r.structure === 'missing-segment') return `/api/${s.slice(0, 5).join('/')}`
  if (r.structure === 'double-slash') return `/api/${s.slice(0, 2).join('/')}//${s.slice(2).join('/')}`
  if (r.structure === 'dot-dot') return `/api/${s.join('/')}/../2`
  return `/api/${s.join('/')}`
}

function headersOf (r: DataRequest): Record<string, string> {
  const headers: Record<string, string> = {}
  const h = r.headerKey
  if (h.kind === 'bearer') headers.authorization = `${h.scheme}${h.key.value}${h.trailing}`
  if (h.kind === 'bearer-extra') headers.authorization = `Bearer ${h.key.value} extra`
  if (h.kind === 'not-bearer') headers.authorization = h.value
  if (r.idempotencyKey !== undefined) headers['idempotency-key'] = r.idempotencyKey
  const contentTypes = { json: 'application/json', 'bad-json': 'application/json', 'empty-json': 'application/json', text: 'text/plain', octet: 'application/octet-stream', huge: 'application/json' }
  if (r.body !== 'none') headers['content-type'] = contentTypes[r.body]
  return headers
}

/** Over Fastify's default bodyLimit of 1 MiB. */
const HUGE = `{"run":"${'x'.repeat(1024 * 1024)}"}`

function bodyOf (r: DataRequest): string | undefined {
  return { none: undefined, json: '{"run":"now","__proto__x":1}', 'bad-json': '{"run":', 'empty-json': '', text: 'run it', octet: '\u0001\u0002', huge: HUGE }[r.body]
}

interface Answer { status: number, headers: Record<string, unknown>, body: string }

// ---- the arbitraries -----------------------------------------------------

interface Keys {
  active: string
  inactive: string
  dead: string[]
  /** for the leak check: every key value the test knows */
  all: string[]
}

function requestArbitrary (keys: Keys, transport: 'inject' | 'http'): fc.Arbitrary<DataRequest> {
  const a = keys.active
  const unknownValues = [...keys.dead, `${a.slice(0, 11)}${'W'.repeat(21)}`, `${keys.inactive.slice(0, 11)}${'W'.repeat(21)}`,
    `${a}x`, a.slice(0, -1), a.toLowerCase(), a.replace('-', '_'), `${a.slice(0, 15)}\0${a.slice(16)}`, 'ключ', 'k'.repeat(10 * 1024),
    a.repeat(2), ` ${a}`, `${a} `, '%', '\u{1F511}']
  const anyKey: fc.Arbitrary<KeyChoice> = fc.oneof(
    { weight: 6, arbitrary: fc.constant<KeyChoice>({ value: a, verdict: 'active' }) },
    { weight: 2, arbitrary: fc.constant<KeyChoice>({ value: keys.inactive, verdict: 'inactive' }) },
    { weight: 3, arbitrary: fc.constantFrom(...unknownValues).map((value): KeyChoice => ({ value, verdict: 'unknown' })) },
    { weight: 1, arbitrary: fc.string({ minLength: 1, maxLength: 40, unit: 'grapheme' }).map((value): KeyChoice => ({ value, verdict: 'unknown' })) }
  )
  // Header values: visible ASCII with no blank at either end (what a header can carry as is).
  const headerKey = anyKey.filter((k) => /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/.test(k.value))
  const queryKey: fc.Arbitrary<QueryKey> = fc.oneof(
    { weight: 6, arbitrary: anyKey.map((key): QueryKey => ({ kind: 'single', key })) },
    { weight: 4, arbitrary: fc.constant<QueryKey>({ kind: 'none' }) },
    { weight: 1, arbitrary: anyKey.map((key): QueryKey => ({ kind: 'encoded-name', key })) },
    { weight: 1, arbitrary: fc.tuple(anyKey, anyKey).map(([key, second]): QueryKey => ({ kind: 'repeated', key, second })) },
    { weight: 1, arbitrary: fc.constantFrom<QueryKey>({ kind: 'empty' }, { kind: 'bare' }) },
    {
      weight: 1,
      arbitrary: fc.tuple(fc.constantFrom('API_KEY', 'apikey', 'api-key', 'api_key%5B%5D', 'api_key%20', 'key'), anyKey)
        .map(([name, key]): QueryKey => ({ kind: 'other-name', name, key }))
    }
  )
  const header: fc.Arbitrary<HeaderKey> = fc.oneof(
    { weight: 4, arbitrary: fc.constant<HeaderKey>({ kind: 'none' }) },
    {
      weight: 5,
      arbitrary: fc.tuple(fc.constantFrom('Bearer ', 'bearer ', 'BEARER   ', 'bEaReR\t'), fc.constantFrom('', ' ', '  '), headerKey)
        .map(([scheme, trailing, key]): HeaderKey => ({ kind: 'bearer', scheme, trailing, key }))
    },
    { weight: 1, arbitrary: headerKey.map((key): HeaderKey => ({ kind: 'bearer-extra', key })) },
    {
      weight: 2,
      arbitrary: fc.tuple(fc.constantFrom('Basic ', 'Token ', '', 'Bearer', 'Bearer:'), headerKey)
        .map(([scheme, key]): HeaderKey => ({ kind: 'not-bearer', value: scheme === 'Bearer' ? 'Bearer' : `${scheme}${key.value}` }))
    }
  )
  const param = (usual: string[], odd: string[]): fc.Arbitrary<Param> => fc.oneof(
    { weight: 6, arbitrary: fc.constant(undefined) },
    { weight: 3, arbitrary: fc.constantFrom(...usual) },
    { weight: 1, arbitrary: fc.constantFrom(...odd) },
    { weight: 1, arbitrary: fc.string({ maxLength: 6, unit: 'grapheme' }) },
    { weight: 1, arbitrary: fc.array(fc.constantFrom(...usual), { minLength: 2, maxLength: 2 }) }
  )
  const keep = (s: string): boolean => transport === 'http' || !isDotSegment(s)
  const seg = (text: fc.Arbitrary<string>): fc.Arbitrary<Segment> => text.filter(keep).map((x) => segment(x))
  const request: fc.Arbitrary<DataRequest> = fc.record({
    method: fc.oneof({ weight: 8, arbitrary: fc.constantFrom('GET', 'POST') }, { weight: 2, arbitrary: fc.constantFrom('PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS') }),
    org: seg(monikerText('acme')),
    project: seg(monikerText('shop')),
    modelWord: fc.oneof({ weight: 10, arbitrary: fc.constant(segment('model')) },
      fc.constantFrom(segment('model', 'mod%65l'), segment('Model'), segment('models'), segment(''))),
    ms: seg(sequenceText),
    type: fc.oneof({ weight: 10, arbitrary: fc.constantFrom('dataset', 'pipeline') },
      fc.constantFrom('Dataset', 'datasets', 'job', '', 'dataset\0', 'x'.repeat(MAX_PARAM_LENGTH + 1))).map((x) => segment(x)),
    rs: seg(sequenceText),
    structure: fc.oneof({ weight: 12, arbitrary: fc.constant('exact' as const) },
      fc.constantFrom('trailing-slash' as const, 'extra-segment' as const, 'missing-segment' as const, 'double-slash' as const,
        ...(transport === 'http' ? ['dot-dot' as const] : []))),
    queryKey,
    headerKey: header,
    params: fc.record({
      format: param(['json', 'sql', 'csv-zip', 'csv'], ['xml', 'JSON', '', 'tsv', 'Parquet', 'json-zip', 'oracle-loader']),
      meta: param(['entities', 'ddl'], ['columns', '', 'ENTITIES']),
      archiveType: param(['zip', 'tar'], ['rar', '', 'ZIP']),
      limit: param(['0', '1', '007'], ['-1', '1.5', '1e3', '0x10', '', '99999999999999999999', '1234567890123456789012345', '9007199254740991']),
      entity: param(['customers', 'orders'], ['nope', '', 'Orders'])
    }),
    idempotencyKey: fc.oneof({ weight: 6, arbitrary: fc.constant(undefined) },
      { weight: 2, arbitrary: fc.uuid().map((u) => `run-${u}`) },
      { weight: 1, arbitrary: fc.constantFrom('', 'x'.repeat(256), 'with space', 'a\tb') }),
    body: fc.oneof({ weight: 6, arbitrary: fc.constant('none' as const) },
      fc.constantFrom('json' as const, 'bad-json' as const, 'empty-json' as const, 'text' as const, 'octet' as const, 'huge' as const)),
    client: transport === 'inject'
      ? fc.oneof({ weight: 8, arbitrary: fc.constant('127.0.0.1') }, fc.constantFrom('::1', REMOTE))
      : fc.constant('127.0.0.1')
  })
  // Over HTTP, Node refuses a request head over 16 KB (431): stay well under
  // it. A huge body is left to inject: it is ignored like any other.
  return transport === 'inject'
    ? request
    : request.filter((r) => r.body !== 'huge' && pathOf(r).length + queryString(r).length + JSON.stringify(headersOf(r)).length < 12_000)
}

// ---- checking one answer -------------------------------------------------

function check (r: DataRequest, e: Expected, a: Answer, keys: Keys, jobs: TestApp['jobs']): void {
  const where = `${r.method} ${pathOf(r)}${queryString(r)}`.slice(0, 300)
  equal(a.status, e.status, `${where}: status`)
  if (e.routed) equal(a.headers['cache-control'], 'no-store', `${where}: Cache-Control`)
  if (e.allow !== undefined) equal(a.headers.allow, e.allow, `${where}: Allow`)
  if (r.method !== 'HEAD') {
    if (e.message !== undefined) {
      deepEqual(JSON.parse(a.body), { message: e.message }, `${where}: body`)
    }
    if (e.contentType !== undefined) equal(a.headers['content-type'], e.contentType, `${where}: content type`)
    if (e.job === true) {
      const body = JSON.parse(a.body) as { job_id: string, job_url: string }
      deepEqual(Object.keys(body), ['job_id', 'job_url'])
      ok(body.job_url.endsWith(`/api/job/${body.job_id}`), `${where}: job_url`)
      ok(jobs.jobs.has(body.job_id), `${where}: the job is recorded`)
    }
  }
  deepEqual(leaks([a.body], keys.all), [], `${where}: no key in the body`)
  if (/\n\s+at .+:\d+/.test(a.body)) fail(`${where}: a stack trace in the body`)
}

async function setup (t: Parameters<typeof buildApp>[0]): Promise<TestApp & { keys: Keys, endpoints: string[] }> {
  const built = await buildApp(t, { failureThrottle: false }, { frameworkErrors: frameworkErrorReply })
  const { app, datasets, jobs } = built
  // Dataset 2 and pipeline 2 get endpoints, then the host loses them (404 "... not found").
  datasets.add({ ...SALES_REF, resourceSequence: 2 }, salesDataset())
  jobs.addPipeline({ ...PIPELINE_REF, resourceSequence: 2 }, 'second')
  const active = await createKey(app, 'active')
  const inactive = await createKey(app, 'inactive', false)
  const rotated = await createKey(app, 'rotated')
  const deleted = await createKey(app, 'deleted')
  const unassigned = await createKey(app, 'unassigned')
  const foreign = (await app.inject({ method: 'POST', url: '/api-keys/acme/other/keys', headers: ADMIN, payload: { purpose: 'foreign' } })).json()
  const assigned = [active.id, inactive.id, rotated.id, deleted.id]
  for (const type of ['dataset', 'pipeline'] as const) {
    for (const resource of [1, 2]) await assignKeys(app, type, assigned, resource)
  }
  const renewed = (await app.inject({ method: 'POST', url: `/api-keys/acme/shop/keys/${rotated.id}/regenerate`, headers: ADMIN })).json()
  await app.inject({ method: 'DELETE', url: `/api-keys/acme/shop/keys/${deleted.id}`, headers: ADMIN })
  datasets.datasets.delete('acme/shop/1/2')
  jobs.pipelines.delete('acme/shop/1/2')
  const dead = [rotated.key, deleted.key, unassigned.key, foreign.key]
  return {
    ...built,
    keys: { active: active.key, inactive: inactive.key, dead, all: [active.key, inactive.key, renewed.key, ...dead] },
    endpoints: ['dataset/1', 'dataset/2', 'pipeline/1', 'pipeline/2'].map((e) => `acme/shop/1/${e}`)
  }
}

async function callCounts (built: TestApp, endpoints: string[]): Promise<Map<string, number>> {
  await built.app.dataEndpoints.flushUsage()
  const list = (await built.app.inject({ url: '/api-keys/acme/shop/endpoints', headers: ADMIN })).json<Array<{ path: string, calls: number }>>()
  return new Map(endpoints.map((e) => [e, list.find((x) => x.path === `/api/${e.replace('/1/', '/model/1/')}`)?.calls ?? -1]))
}

/** Runs a batch of requests through `send` and checks each answer and the counters. */
function batchProperty (built: Awaited<ReturnType<typeof setup>>, transport: 'inject' | 'http', send: (r: DataRequest) => Promise<Answer>): fc.IAsyncPropertyWithHooks<[DataRequest[]]> {
  return fc.asyncProperty(fc.array(requestArbitrary(built.keys, transport), { minLength: 1, maxLength: 12 }), async (requests) => {
    const before = await callCounts(built, built.endpoints)
    const counted = new Map(built.endpoints.map((e) => [e, 0]))
    for (const r of requests) {
      const e = expected(r)
      check(r, e, await send(r), built.keys, built.jobs)
      if (e.counts !== undefined) counted.set(e.counts, (counted.get(e.counts) ?? 0) + 1)
    }
    const after = await callCounts(built, built.endpoints)
    for (const e of built.endpoints) {
      equal((after.get(e) ?? 0) - (before.get(e) ?? 0), counted.get(e), `calls of ${e} moved by the requests that authenticated`)
    }
  })
}

t.test('data routes through inject: every request gets its documented answer; calls move exactly', async (t) => {
  const built = await setup(t)
  const send = async (r: DataRequest): Promise<Answer> => {
    const body = bodyOf(r)
    const res = await built.app.inject({
      method: r.method as 'GET', url: pathOf(r) + queryString(r), headers: headersOf(r), remoteAddress: r.client, ...(body === undefined ? {} : { payload: body })
    })
    return { status: res.statusCode, headers: res.headers, body: res.body }
  }
  await checkProperty(t, 'inject', batchProperty(built, 'inject', send), 60)
  const alive = await built.app.inject({ url: '/api/acme/shop/model/1/dataset/1?meta=entities', headers: { authorization: `Bearer ${built.keys.active}` } })
  t.equal(alive.statusCode, 200, 'the server still serves afterwards')
})

t.test('data routes over real HTTP (dot segments and all): the same answers', async (t) => {
  const built = await setup(t)
  await built.app.listen({ port: 0, host: '127.0.0.1' })
  const port = (built.app.server.address() as AddressInfo).port
  const send = async (r: DataRequest): Promise<Answer> => new Promise((resolve, reject) => {
    // A connection per request: an answer on a reused socket proves nothing more.
    const body = bodyOf(r)
    // Node's client frames a body on DELETE or OPTIONS only with a Content-Length.
    const headers = { ...headersOf(r), ...(body === undefined ? {} : { 'content-length': String(Buffer.byteLength(body)) }) }
    const req = http.request({ agent: false, port, host: '127.0.0.1', method: r.method, path: pathOf(r) + queryString(r), headers }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      // UTF-8, as inject gives its body: an answer that quotes a non-ASCII parameter quotes it in UTF-8.
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(body)
  })
  await checkProperty(t, 'http', batchProperty(built, 'http', send), 25)
})

t.test('a byte HTTP does not allow anywhere in the request target: Node answers 400 before Fastify', async (t) => {
  const built = await setup(t)
  await built.app.listen({ port: 0, host: '127.0.0.1' })
  const port = (built.app.server.address() as AddressInfo).port
  const target = `/api/acme/shop/model/1/dataset/1?meta=entities&api_key=${built.keys.active}`
  const forbidden = fc.oneof(fc.integer({ min: 0x00, max: 0x20 }), fc.constant(0x7f), fc.integer({ min: 0x80, max: 0xff }))
  // Before one of the target's characters: a space after the whole target
  // would only widen the separator before `HTTP/1.1`, which Node accepts.
  const property = fc.asyncProperty(forbidden, fc.integer({ min: 1, max: target.length - 1 }), async (byte, at) => {
    const bytes = Buffer.concat([
      Buffer.from(`GET ${target.slice(0, at)}`, 'latin1'), Buffer.from([byte]),
      Buffer.from(`${target.slice(at)} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`, 'latin1')
    ])
    const res = await rawRequest(port, bytes)
    equal(res.status, 400, `byte 0x${byte.toString(16)} at ${at}`)
    deepEqual(JSON.parse(res.body), { error: 'Bad Request', message: 'Client Error', statusCode: 400 })
    deepEqual(leaks([res.body], built.keys.all), [])
  })
  await checkProperty(t, 'raw bytes', property, 60)
  t.equal(await callCounts(built, built.endpoints).then((c) => c.get('acme/shop/1/dataset/1')), 0, 'none of them was counted')
})

t.test('the oracle knows the rules: a hand-picked request of each kind', async (t) => {
  // Guards the oracle itself against drifting into agreement with a bug.
  const base: DataRequest = {
    method: 'GET', org: segment('acme'), project: segment('shop'), modelWord: segment('model'), ms: segment('1'), type: segment('dataset'),
    rs: segment('1'), structure: 'exact', queryKey: { kind: 'none' }, headerKey: { kind: 'none' },
    params: { format: undefined, meta: undefined, archiveType: undefined, limit: undefined, entity: undefined },
    idempotencyKey: undefined, body: 'none', client: '127.0.0.1'
  }
  const active: KeyChoice = { value: 'k', verdict: 'active' }
  const cases: Array<[Partial<DataRequest>, number, string?]> = [
    [{}, 403, 'Not authorized'],
    [{ queryKey: { kind: 'single', key: active } }, 200],
    [{ ms: segment('1e3'), queryKey: { kind: 'single', key: active } }, 404, 'Not found'],
    [{ rs: segment('1234567890123456789012345') }, 404, 'Not found'],
    [{ rs: segment('9007199254740991') }, 403, 'Not authorized'],
    [{ method: 'POST' }, 405, 'Endpoint or method not allowed'],
    [{ client: REMOTE }, 403, 'HTTPS required'],
    [{ org: segment('x'.repeat(101)) }, 414, 'URI Too Long'],
    [{ structure: 'trailing-slash' }, 404, 'Not found'],
    [{ queryKey: { kind: 'repeated', key: active, second: active } }, 403, 'Unknown API key'],
    [{ queryKey: { kind: 'empty' }, headerKey: { kind: 'bearer', scheme: 'Bearer ', trailing: '', key: active } }, 200],
    [{ queryKey: { kind: 'single', key: { value: 'x', verdict: 'inactive' } } }, 403, 'Disabled API key'],
    [{ rs: segment('3'), queryKey: { kind: 'single', key: active } }, 403, 'Unknown API Endpoint'],
    [{ rs: segment('2'), queryKey: { kind: 'single', key: active } }, 404, 'Dataset not found'],
    [{ queryKey: { kind: 'single', key: active }, params: { ...base.params, format: ['json', 'sql'] } }, 500, `Unknown download format json,sql, supported formats = ${SUPPORTED}`],
    [{ queryKey: { kind: 'single', key: active }, params: { ...base.params, limit: '99999999999999999999' } }, 400, 'Invalid limit: must be a non-negative integer']
  ]
  for (const [change, status, message] of cases) {
    const e = expected({ ...base, ...change })
    t.same([e.status, e.message], [status, message], JSON.stringify(change).slice(0, 120))
  }
})
