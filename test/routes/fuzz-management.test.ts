import { deepEqual, equal, fail, match, ok } from 'node:assert/strict'
import type { AddressInfo } from 'node:net'
import fc from 'fast-check'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import dataEndpoints, { frameworkErrorReply, SqliteStorage } from '../../lib/index.js'
import { MemoryDatasets, MemoryJobs, PIPELINE_REF, SALES_REF, salesDataset } from '../fixtures.js'
import { checkProperty, isDotSegment, MAX_PARAM_LENGTH, monikerText, segment, sequenceOf, sequenceText, type Segment } from '../fuzz-arbitraries.js'
import { buildApp, type TestApp } from '../helper.js'
import { firstAnswer } from '../raw-http.js'
import { leaks } from '../secret-scan.js'

// Property-based tests of the management routes (DESIGN.md §4): sequences of
// requests with and without permission, odd monikers, ids and sequences,
// bodies that are invalid, huge, prototype-polluting, of the wrong type or
// content type. A model of keys and endpoints says what each answer must be;
// at the end of every run the data routes must agree with the model, every
// deleted or replaced key value included.

const P = '/api-keys'
const PERMISSIONS = ['', 'ReadData', 'manageapikeys', 'ManageAPIKeys', 'ReadData,ManageAPIKeys']
const granted = (permissions: string): boolean => permissions.split(',').includes('ManageAPIKeys')

type Route = 'listKeys' | 'createKey' | 'patchKey' | 'deleteKey' | 'regenerate' | 'listEndpoints' | 'putEndpoint' | 'deleteEndpoint' | 'noRoute'

type Body =
  | { kind: 'none' }
  | { kind: 'json', value: unknown, contentType: string }
  | { kind: 'raw', text: string, contentType: string }

/** A key id: one the run has created (by position, alive or not), or a literal. */
type KeyRef = { kind: 'created', index: number } | { kind: 'literal', text: string }

interface Command {
  permissions: string
  route: Route
  noRouteShape: number
  org: Segment
  project: Segment
  keyRef: KeyRef
  ms: Segment
  type: Segment
  rs: Segment
  body: Body
}

interface ModelKey { id: string, organization: string, project: string, purpose: string, isActive: boolean, value: string }

class Model {
  readonly keys = new Map<string, ModelKey>()
  readonly created: string[] = []
  /** key values that no longer authenticate: deleted or replaced */
  readonly deadValues: string[] = []
  /** `${org}/${project}/${ms}/${type}/${rs}` -> assigned key ids */
  readonly endpoints = new Map<string, Set<string>>()

  projectKeys (org: string, project: string): ModelKey[] {
    return [...this.keys.values()].filter((k) => k.organization === org && k.project === project)
  }
}

// ---- the oracle ----------------------------------------------------------

const isMoniker = (s: string): boolean => /^[A-Za-z0-9][A-Za-z0-9._~-]*$/.test(s) && s.length <= 100
const isKeyId = (s: string): boolean => s.length >= 1 && s.length <= 100
// 1 to 200 code points, a non-space one among them, no control character (C0, DEL).
const isPurpose = (p: unknown): boolean => typeof p === 'string' && [...p].length <= 200 && p.trim() !== '' &&
  !/[\x00-\x1f\x7f]/.test(p) // eslint-disable-line no-control-regex

interface Expected {
  status: number
  /** exact message, or a pattern for validation messages */
  message?: string | RegExp
  /** checks a 2xx body against the model and applies the change */
  apply?: (body: any) => void
}

function keyIdOf (c: Command, model: Model): string {
  if (c.keyRef.kind === 'literal') return c.keyRef.text
  return model.created.length === 0 ? 'none-yet' : model.created[c.keyRef.index % model.created.length]
}

function pathOf (c: Command, model: Model): { method: string, path: string } {
  const base = `${P}/${c.org.wire}/${c.project.wire}`
  const key = encodeURIComponent(keyIdOf(c, model))
  const endpoint = `${base}/endpoints/${c.ms.wire}/${c.type.wire}/${c.rs.wire}`
  switch (c.route) {
    case 'listKeys': return { method: 'GET', path: `${base}/keys` }
    case 'createKey': return { method: 'POST', path: `${base}/keys` }
    case 'patchKey': return { method: 'PATCH', path: `${base}/keys/${key}` }
    case 'deleteKey': return { method: 'DELETE', path: `${base}/keys/${key}` }
    case 'regenerate': return { method: 'POST', path: `${base}/keys/${key}/regenerate` }
    case 'listEndpoints': return { method: 'GET', path: `${base}/endpoints` }
    case 'putEndpoint': return { method: 'PUT', path: endpoint }
    case 'deleteEndpoint': return { method: 'DELETE', path: endpoint }
    case 'noRoute': return [
      { method: 'PUT', path: `${base}/keys` },
      { method: 'DELETE', path: `${base}/endpoints` },
      { method: 'GET', path: `${base}/keys/${key}` },
      { method: 'PATCH', path: `${base}/endpoints/1/dataset/1` },
      { method: 'POST', path: `${base}/nothing` }
    ][c.noRouteShape]
  }
}

const JSON_TYPES = ['application/json', 'application/json; charset=utf-8', 'APPLICATION/JSON']
const INVALID_JSON = 'Body is not valid JSON but content-type is set to \'application/json\''
const EMPTY_JSON = 'Body cannot be empty when content-type is set to \'application/json\''

/** Fastify's parsing of the body: the parsed value, or the error answer. */
function parsed (body: Body): { value: unknown } | Expected {
  if (body.kind === 'none') return { value: undefined }
  if (body.kind === 'json') return { value: body.value }
  if (body.text.length > 1024 * 1024) return { status: 413, message: 'Request body is too large' }
  if (!JSON_TYPES.includes(body.contentType)) return { status: 415, message: 'Unsupported Media Type' }
  if (body.text === '') return { status: 400, message: EMPTY_JSON }
  return { status: 400, message: INVALID_JSON }
}

/** The first problem TypeBox reports in a body (DESIGN.md §4: 400 with a message naming the field). */
function bodyProblem (schema: 'create' | 'update' | 'put', body: unknown): string | RegExp | null {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return 'body: must be object'
  const fields = Object.keys(body)
  const value = body as Record<string, unknown>
  if (schema === 'create' && !fields.includes('purpose')) return 'body: must have required properties purpose'
  const allowed = schema === 'put' ? ['keyIds'] : ['purpose', 'isActive']
  const unknown = fields.filter((f) => !allowed.includes(f))
  if (unknown.length > 0) return `body: unknown field "${unknown[0]}"`
  const wrong: string[] = []
  if ('purpose' in value && !isPurpose(value.purpose)) wrong.push('purpose')
  if ('isActive' in value && typeof value.isActive !== 'boolean') wrong.push('isActive')
  if ('keyIds' in value) {
    const ids = value.keyIds
    if (!Array.isArray(ids) || ids.length > 1000) wrong.push('keyIds')
    else if (ids.some((id) => typeof id !== 'string' || !isKeyId(id))) wrong.push('keyIds\\.\\d+')
  }
  return wrong.length === 0 ? null : new RegExp(`^body\\.(${wrong.join('|')}): `)
}

function expected (c: Command, model: Model): Expected {
  const { method } = pathOf(c, model)
  const keyId = keyIdOf(c, model)
  const org = c.org.text
  const project = c.project.text
  const long = [c.org, c.project].some((s) => s.text.length > MAX_PARAM_LENGTH) ||
    (['patchKey', 'deleteKey', 'regenerate'].includes(c.route) && keyId.length > MAX_PARAM_LENGTH) ||
    (['putEndpoint', 'deleteEndpoint'].includes(c.route) && [c.ms, c.type, c.rs].some((s) => s.text.length > MAX_PARAM_LENGTH))
  if (long) return { status: 414, message: 'URI Too Long' }
  // A miss is answered in onRequest: its body is never parsed.
  if (c.route === 'noRoute') return { status: 404, message: 'Not found' }
  if (!granted(c.permissions)) return { status: 403, message: 'Not authorized' }

  // Fastify parses the body of every method but GET (the API reads JSON only).
  const body = method === 'GET' ? { value: undefined } : parsed(c.body)
  if ('status' in body) return body

  const badParams: string[] = []
  if (!isMoniker(org)) badParams.push('organization')
  if (!isMoniker(project)) badParams.push('project')
  if (['patchKey', 'deleteKey', 'regenerate'].includes(c.route) && !isKeyId(keyId)) badParams.push('keyId')
  const endpointRoute = c.route === 'putEndpoint' || c.route === 'deleteEndpoint'
  const ms = sequenceOf(c.ms.text)
  const rs = sequenceOf(c.rs.text)
  if (endpointRoute) {
    if (ms === null) badParams.push('modelSequence')
    if (c.type.text !== 'dataset' && c.type.text !== 'pipeline') badParams.push('type')
    if (rs === null) badParams.push('resourceSequence')
  }
  if (badParams.length > 0) return { status: 400, message: new RegExp(`^params\\.${badParams[0]}: `) }

  const schema = c.route === 'createKey' ? 'create' : c.route === 'patchKey' ? 'update' : c.route === 'putEndpoint' ? 'put' : null
  // PUT: no body, or JSON null, means no keyIds (the route's preValidation).
  const value = c.route === 'putEndpoint' ? (body.value ?? {}) : body.value
  if (schema !== null) {
    const problem = bodyProblem(schema, value)
    if (problem !== null) return { status: 400, message: problem }
  }
  return handlerAnswer(c, model, keyId, value as Record<string, any>, ms as number, rs as number)
}

function handlerAnswer (c: Command, model: Model, keyId: string, body: Record<string, any>, ms: number, rs: number): Expected {
  const org = c.org.text
  const project = c.project.text
  const own = model.keys.get(keyId)
  const found = own !== undefined && own.organization === org && own.project === project ? own : undefined
  const notFound = { status: 404, message: 'API key not found' }
  const type = c.type.text as 'dataset' | 'pipeline'
  const where = `${org}/${project}/${ms}/${type}/${rs}`

  switch (c.route) {
    case 'listKeys': return {
      status: 200,
      apply: (list: any[]) => {
        const expectedKeys = model.projectKeys(org, project).map((k) => ({ id: k.id, purpose: k.purpose, isActive: k.isActive, prefix: k.value.slice(0, 10) }))
        deepEqual(list.map((k) => ({ id: k.id, purpose: k.purpose, isActive: k.isActive, prefix: k.prefix })).sort(byId), expectedKeys.sort(byId))
      }
    }
    case 'createKey': return {
      status: 201,
      apply: (created: any) => {
        match(created.key, /^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/)
        equal(created.prefix, created.key.slice(0, 10))
        deepEqual([created.purpose, created.isActive, created.updatedAt], [body.purpose, body.isActive ?? true, null])
        model.keys.set(created.id, { id: created.id, organization: org, project, purpose: body.purpose, isActive: body.isActive ?? true, value: created.key })
        model.created.push(created.id)
      }
    }
    case 'patchKey': if (found === undefined) return notFound
      return {
        status: 200,
        apply: (updated: any) => {
          if (body.purpose !== undefined) found.purpose = body.purpose
          if (body.isActive !== undefined) found.isActive = body.isActive
          deepEqual([updated.id, updated.purpose, updated.isActive, updated.key], [found.id, found.purpose, found.isActive, undefined])
        }
      }
    case 'deleteKey': if (found === undefined) return notFound
      return {
        status: 204,
        apply: () => {
          model.keys.delete(found.id)
          model.deadValues.push(found.value)
          for (const ids of model.endpoints.values()) ids.delete(found.id)
        }
      }
    case 'regenerate': if (found === undefined) return notFound
      return {
        status: 200,
        apply: (renewed: any) => {
          equal(renewed.id, found.id)
          match(renewed.key, /^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/)
          ok(renewed.key !== found.value, 'a new value')
          model.deadValues.push(found.value)
          found.value = renewed.key
        }
      }
    case 'listEndpoints': return {
      status: 200,
      apply: (list: any[]) => {
        const mine = [...model.endpoints.entries()].filter(([w]) => w.startsWith(`${org}/${project}/`))
        deepEqual(list.map((e) => `${e.path}:${e.keys.map((k: { id: string }) => k.id).sort().join(',')}`).sort(),
          mine.map(([w, ids]) => `/api/${w.replace(/^([^/]*\/[^/]*)\//, '$1/model/')}:${[...ids].sort().join(',')}`).sort())
      }
    }
    case 'putEndpoint': {
      const exists = org === 'acme' && project === 'shop' && ms === 1 && rs === 1
      if (!exists) return { status: 404, message: type === 'dataset' ? 'Dataset not found' : 'Pipeline not found' }
      const projectKeys = model.projectKeys(org, project)
      let requested: string[] = body.keyIds ?? []
      if (requested.length === 0) {
        if (projectKeys.length === 0) return { status: 400, message: 'keyIds: the project has no API key yet; create one first' }
        if (projectKeys.length > 1) return { status: 400, message: 'keyIds: choose at least one key; the project has several' }
        requested = [projectKeys[0].id]
      }
      const unknown = requested.filter((id) => !projectKeys.some((k) => k.id === id))
      if (unknown.length > 0) return { status: 400, message: `keyIds: not keys of this project: ${unknown.join(', ')}` }
      const created = !model.endpoints.has(where)
      return {
        status: created ? 201 : 200,
        apply: (endpoint: any) => {
          model.endpoints.set(where, new Set(requested))
          equal(endpoint.path, `/api/${org}/${project}/model/${ms}/${type}/${rs}`)
          equal(endpoint.method, type === 'dataset' ? 'GET' : 'POST')
          deepEqual(endpoint.keys.map((k: { id: string }) => k.id).sort(), [...new Set(requested)].sort())
        }
      }
    }
    case 'deleteEndpoint':
      if (!model.endpoints.has(where)) return { status: 404, message: 'Endpoint not found' }
      return { status: 204, apply: () => { model.endpoints.delete(where) } }
    default: throw new Error(`no answer for ${c.route}`)
  }
}

const byId = (a: { id: string }, b: { id: string }): number => a.id < b.id ? -1 : a.id > b.id ? 1 : 0

// ---- the arbitraries -----------------------------------------------------

const purpose = fc.oneof(
  { weight: 6, arbitrary: fc.string({ minLength: 1, maxLength: 30, unit: 'grapheme-ascii' }) },
  { weight: 1, arbitrary: fc.constantFrom('Bäckerei 中文', 'line\nbreak', 'quote"s', '\u0000nul', 'x'.repeat(200), '😀'.repeat(200), '   ', '\u3000') }
)
const badValue = fc.constantFrom<unknown>('', 'x'.repeat(201), 42, true, null, [], {}, 'yes', 0)
const keyIdText = fc.oneof(
  { weight: 1, arbitrary: fc.constantFrom('nope', 'x'.repeat(100), '%', 'ä', ' ', 'x'.repeat(MAX_PARAM_LENGTH + 1)) },
  { weight: 1, arbitrary: fc.string({ minLength: 1, maxLength: 8, unit: 'grapheme' }) }
).filter((s) => !isDotSegment(s))

const json = (value: fc.Arbitrary<unknown>): fc.Arbitrary<Body> =>
  fc.tuple(value, fc.oneof({ weight: 5, arbitrary: fc.constant(JSON_TYPES[0]) }, fc.constantFrom(...JSON_TYPES.slice(1))))
    .map(([v, contentType]) => ({ kind: 'json', value: v, contentType }))

const keyIds = fc.array(fc.oneof(
  { weight: 4, arbitrary: fc.nat(20).map((index) => ({ created: index })) },
  { weight: 1, arbitrary: fc.constantFrom<unknown>('nope', '', 7, 'x'.repeat(101)) }
), { maxLength: 3 })

/** Bodies that break: wrong fields and types, not objects, not JSON, polluting, over 1 MiB, other content types. */
const badBody: fc.Arbitrary<Body> = fc.oneof(
  json(fc.record({ purpose: fc.oneof(purpose, badValue), isActive: fc.oneof(fc.boolean(), badValue) }, { requiredKeys: [] })),
  json(fc.record({ keyIds: fc.oneof(keyIds, badValue) }, { requiredKeys: [] })),
  json(fc.dictionary(fc.constantFrom('purpose', 'isActive', 'keyIds', 'owner', 'id', 'hash', 'prefix'), fc.oneof(purpose, badValue, fc.boolean()), { maxKeys: 3 })),
  json(fc.constantFrom<unknown>(null, [], 'text', 1, true, [{ purpose: 'p' }])),
  fc.constantFrom<Body>(
    { kind: 'raw', contentType: 'application/json', text: '{"purpose":' },
    { kind: 'raw', contentType: 'application/json', text: '{"purpose":"p","__proto__":{"isAdmin":true}}' },
    { kind: 'raw', contentType: 'application/json', text: '{"constructor":{"prototype":{"isAdmin":true}}}' },
    { kind: 'raw', contentType: 'application/json', text: '' },
    { kind: 'raw', contentType: 'application/json', text: `{"purpose":"${'x'.repeat(1024 * 1024 + 16)}"}` },
    { kind: 'raw', contentType: 'text/plain', text: '{"purpose":"p"}' },
    { kind: 'raw', contentType: 'application/x-www-form-urlencoded', text: 'purpose=p' },
    { kind: 'raw', contentType: 'application/xml', text: '<purpose>p</purpose>' }
  ),
  fc.constant<Body>({ kind: 'none' })
)

/** Mostly the body the route expects, a quarter of the time one that breaks. */
function bodyFor (route: Route): fc.Arbitrary<Body> {
  const good = {
    createKey: json(fc.record({ purpose, isActive: fc.boolean() }, { requiredKeys: ['purpose'] })),
    patchKey: json(fc.record({ purpose, isActive: fc.boolean() }, { requiredKeys: [] })),
    putEndpoint: fc.oneof({ weight: 4, arbitrary: json(fc.record({ keyIds }, { requiredKeys: [] })) }, fc.constant<Body>({ kind: 'none' }))
  }[route as 'createKey'] ?? fc.constant<Body>({ kind: 'none' })
  return fc.oneof({ weight: 3, arbitrary: good }, { weight: 1, arbitrary: badBody })
}

/** Mostly acme/shop, sometimes a second project, sometimes anything. */
const moniker = (usual: string, second: string): fc.Arbitrary<Segment> => fc.oneof(
  { weight: 12, arbitrary: fc.constant(usual) }, { weight: 2, arbitrary: fc.constant(second) }, { weight: 2, arbitrary: monikerText(usual) }
).filter((s) => !isDotSegment(s)).map((s) => segment(s))

const command: fc.Arbitrary<Command> = fc.record({
  permissions: fc.oneof({ weight: 8, arbitrary: fc.constant('ManageAPIKeys') }, fc.constantFrom(...PERMISSIONS)),
  route: fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom<Route>('createKey', 'putEndpoint') },
    { weight: 3, arbitrary: fc.constantFrom<Route>('patchKey', 'deleteKey', 'regenerate', 'deleteEndpoint') },
    { weight: 2, arbitrary: fc.constantFrom<Route>('listKeys', 'listEndpoints', 'noRoute') }
  ),
  noRouteShape: fc.integer({ min: 0, max: 4 }),
  org: moniker('acme', 'globex'),
  project: moniker('shop', 'other'),
  keyRef: fc.oneof({ weight: 8, arbitrary: fc.nat(20).map((index): KeyRef => ({ kind: 'created', index })) },
    { weight: 1, arbitrary: keyIdText.map((text): KeyRef => ({ kind: 'literal', text })) }),
  ms: fc.oneof({ weight: 8, arbitrary: fc.constant('1') }, sequenceText).filter((s) => !isDotSegment(s)).map((s) => segment(s)),
  type: fc.oneof({ weight: 8, arbitrary: fc.constantFrom('dataset', 'pipeline') }, fc.constantFrom('table', 'Dataset', '')).map((s) => segment(s)),
  rs: fc.oneof({ weight: 8, arbitrary: fc.constant('1') }, sequenceText).filter((s) => !isDotSegment(s)).map((s) => segment(s))
}).chain((c) => bodyFor(c.route).map((body): Command => ({ ...c, body })))

/** keyIds in a body refer to created keys by position; resolved against the model when sent. */
function resolveBody (body: Body, model: Model): Body {
  if (body.kind !== 'json' || typeof body.value !== 'object' || body.value === null || !('keyIds' in body.value)) return body
  const ids = (body.value as { keyIds: unknown }).keyIds
  if (!Array.isArray(ids)) return body
  const keyIds = ids.map((id) => typeof id === 'object' && id !== null && 'created' in id
    ? (model.created.length === 0 ? 'none-yet' : model.created[(id as { created: number }).created % model.created.length])
    : id)
  return { ...body, value: { ...body.value, keyIds } }
}

// ---- running a sequence --------------------------------------------------

async function runCommands (app: TestApp['app'], commands: Command[]): Promise<void> {
  const model = new Model()
  const secrets = (): string[] => [...[...model.keys.values()].map((k) => k.value), ...model.deadValues]
  for (const raw of commands) {
    const c = { ...raw, body: resolveBody(raw.body, model) }
    const { method, path } = pathOf(c, model)
    const e = expected(c, model)
    const headers: Record<string, string> = c.permissions === '' ? {} : { 'x-permissions': c.permissions }
    let payload: string | undefined
    if (method !== 'GET' && c.body.kind !== 'none') {
      headers['content-type'] = c.body.contentType
      payload = c.body.kind === 'json' ? JSON.stringify(c.body.value) : c.body.text
    }
    const res = await app.inject({ method: method as 'GET', url: path, headers, ...(payload === undefined ? {} : { payload }) })
    const where = `${method} ${path.slice(0, 200)} [${c.permissions}] ${payload === undefined ? '' : payload.slice(0, 120)}`
    equal(res.statusCode, e.status, `${where}: status (${res.body.slice(0, 200)})`)
    if (e.message !== undefined) {
      const body = res.json<Record<string, unknown>>()
      deepEqual(Object.keys(body), ['message'], `${where}: only a message`)
      if (typeof e.message === 'string') equal(body.message, e.message, `${where}: message`)
      else match(String(body.message), e.message, `${where}: message`)
    }
    if (e.status !== 414 && !(e.status === 404 && e.message === 'Not found')) {
      equal(res.headers['cache-control'], 'no-store', `${where}: Cache-Control`)
    }
    // Only a creation or regeneration shows a key: its own new value.
    deepEqual(leaks([res.body], secrets()), [], `${where}: no key made before in the body`)
    if (e.apply !== undefined) e.apply(res.statusCode === 204 ? undefined : res.json())
    if (/\n\s+at .+:\d+/.test(res.body)) fail(`${where}: a stack trace`)
  }
  await dataPlaneAgrees(app, model)
}

/** Every key value the run made, alive or dead, against dataset 1 and pipeline 1. */
async function dataPlaneAgrees (app: TestApp['app'], model: Model): Promise<void> {
  for (const [type, method, url] of [['dataset', 'GET', '/api/acme/shop/model/1/dataset/1?meta=entities'], ['pipeline', 'POST', '/api/acme/shop/model/1/pipeline/1']] as const) {
    const assigned = model.endpoints.get(`acme/shop/1/${type}/1`)
    const values = [...[...model.keys.values()].map((k) => ({ value: k.value, key: k })), ...model.deadValues.map((value) => ({ value, key: undefined }))]
    for (const { value, key } of values) {
      const res = await app.inject({ method, url, headers: { authorization: `Bearer ${value}` } })
      const want = assigned === undefined
        ? 'Unknown API Endpoint'
        : key === undefined || !assigned.has(key.id) ? 'Unknown API key' : key.isActive ? 200 : 'Disabled API key'
      const got = res.statusCode === 200 ? 200 : res.json<{ message: string }>().message
      equal(got, want, `${method} ${type} 1 with ${key === undefined ? 'a dead' : key.isActive ? 'an active' : 'an inactive'} key`)
    }
  }
}

t.test('management: sequences of requests get the answers the model predicts; the data routes agree', async (t) => {
  const property = fc.asyncProperty(fc.array(command, { minLength: 1, maxLength: 25 }), async (commands) => {
    // A fresh app per run, closed at its end (buildApp only needs teardown).
    const closers: Array<() => unknown> = []
    const run = { teardown: (fn: () => unknown) => { closers.push(fn) } } as unknown as Test
    try {
      const { app } = await buildApp(run, { failureThrottle: false }, { frameworkErrors: frameworkErrorReply })
      await runCommands(app, commands)
    } finally {
      for (const close of closers) await close()
    }
  })
  await checkProperty(t, 'management', property, 60)
})

t.test('without permission a management request is refused before its body is read', async (t) => {
  // A host with spies in every hook after onRequest, registered before the plugin so they apply to it.
  const app = Fastify()
  const reached: string[] = []
  app.addHook('preParsing', async (request) => { reached.push(`preParsing ${request.method} ${request.url}`) })
  app.addHook('preValidation', async (request) => { reached.push(`preValidation ${request.method} ${request.url}`) })
  await app.register(dataEndpoints, {
    storage: new SqliteStorage({ filename: ':memory:' }),
    datasets: new MemoryDatasets().add(SALES_REF, salesDataset()),
    pipelines: new MemoryJobs().addPipeline(PIPELINE_REF, 'refresh'),
    jobs: new MemoryJobs(),
    bcryptCost: 4,
    getPermissions: (request) => String(request.headers['x-permissions'] ?? '').split(',')
  })
  t.teardown(() => app.close())
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as AddressInfo).port

  const bodies = ['{"purpose":', '{"purpose":"p","__proto__":{"x":1}}', `{"purpose":"${'x'.repeat(2 * 1024 * 1024)}"}`, '']
  const routes: Array<[string, string]> = [['POST', `${P}/acme/shop/keys`], ['PATCH', `${P}/acme/shop/keys/k`],
    ['PUT', `${P}/acme/shop/endpoints/1/dataset/1`], ['POST', `${P}/acme/shop/keys/k/regenerate`], ['DELETE', `${P}/acme/shop/keys/k`]]
  for (const [method, url] of routes) {
    for (const body of bodies) {
      const res = await app.inject({ method: method as 'POST', url, headers: { 'content-type': 'application/json', 'x-permissions': 'ReadData' }, payload: body })
      t.same([res.statusCode, res.json()], [403, { message: 'Not authorized' }], `${method} ${url}, body of ${body.length} bytes`)
    }
  }
  t.same(reached, [], 'no body was parsed and nothing was validated')
  const allowed = await app.inject({ method: 'POST', url: `${P}/acme/shop/keys`, headers: { 'content-type': 'application/json', 'x-permissions': 'ManageAPIKeys' }, payload: '{"purpose":' })
  t.equal(allowed.statusCode, 400, 'with permission the same body is parsed (and refused)')
  t.ok(reached.some((r) => r.startsWith('preParsing POST')), 'the spy sees a permitted request')

  // Over a socket: headers announce 50 MB, 11 bytes follow, then nothing. The
  // 403 comes back at once; the body is never waited for.
  for (const [method, url, headers] of [
    ['POST', `${P}/acme/shop/keys`, ''],
    ['PUT', `${P}/acme/shop/endpoints/1/dataset/1`, 'X-Permissions: ReadData\r\n'],
    ['POST', '/api/acme/shop/model/1/pipeline/1', '']
  ]) {
    const head = `${method} ${url} HTTP/1.1\r\nHost: 127.0.0.1\r\n${headers}Content-Type: application/json\r\nContent-Length: 50000000\r\n\r\n{"purpose":`
    const res = await firstAnswer(port, head)
    t.equal(res.status, 403, `${method} ${url}: 403 with 11 of 50,000,000 bytes sent`)
    t.same(JSON.parse(res.body), { message: 'Not authorized' })
  }
  // With permission and a body under the limit, the server waits for the rest.
  const waiting = await firstAnswer(port,
    `POST ${P}/acme/shop/keys HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Permissions: ManageAPIKeys\r\nContent-Type: application/json\r\nContent-Length: 500000\r\n\r\n{"purpose":`, 1000)
  t.equal(waiting.status, 0, 'a permitted request waits for its body (no answer within a second)')
})

t.test('regression: a sequence past 2^53 - 1 is refused by management (400), as on the data routes (404)', async (t) => {
  // The pattern allowed any 16 digits: 9999999999999999 reached the host rounded to 10000000000000000.
  const { app } = await buildApp(t, {}, { frameworkErrors: frameworkErrorReply })
  const headers = { 'x-permissions': 'ManageAPIKeys' }
  for (const [ms, rs, param] of [['9007199254740992', '1', 'modelSequence'], ['1', '9999999999999999', 'resourceSequence']]) {
    for (const method of ['PUT', 'DELETE'] as const) {
      const res = await app.inject({ method, url: `${P}/acme/shop/endpoints/${ms}/dataset/${rs}`, headers })
      t.equal(res.statusCode, 400, `${method} ${ms}/dataset/${rs}`)
      t.match(res.json().message, new RegExp(`^params\\.${param}: `))
    }
    const data = await app.inject({ url: `/api/acme/shop/model/${ms}/dataset/${rs}` })
    t.same([data.statusCode, data.json()], [404, { message: 'Not found' }], 'the data route says the same')
  }
  const largest = await app.inject({ method: 'DELETE', url: `${P}/acme/shop/endpoints/9007199254740991/dataset/9007199254740991`, headers })
  t.same([largest.statusCode, largest.json()], [404, { message: 'Endpoint not found' }], '2^53 - 1 itself is a sequence')
})
