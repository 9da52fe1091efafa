import { Readable } from 'node:stream'
import fastifyAuth from '@fastify/auth'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { Type, type Static, type TSchema } from 'typebox'
import { Compile } from 'typebox/compile'
import { generateKey } from '../keys/api-key.js'
import type { PluginContext } from './context.js'
import { endpointPath } from '../storage/endpoint-path.js'
import { sendError } from './error-reply.js'
import { strictValidatorCompiler } from './validator-compiler.js'
import { EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, readTimestamp } from '../inputs.js'
import { usageAnswerWithTurns } from './usage-answer.js'
import { usageColumnsOf } from '../storage/usage-columns.js'
import {
  BadRequestError, DatasetNotFoundError, EndpointNotFoundError, InternalServerError, KeyNotFoundError,
  LinkNotFoundError, ManagementNotAuthorizedError, PipelineNotFoundError
} from '../errors.js'
import { MANAGE_API_KEYS, type ResolvedOptions } from '../options.js'
import {
  ApiKey, ApiKeyWithValue, CreateKeyBody, Endpoint, EndpointParams, ErrorBody, KeyParams, ProjectParams,
  PutEndpointBody, ResourcesAnswer, UpdateKeyBody, UsageAnswer, UsageQuerystring, AuditAnswer, AuditQuerystring,
  EndpointKeyParams, EndpointsQuerystring, KeysQuerystring, NextPageHeader, NoQuerystring,
  LinkParams, LinksAnswer, LinksQuerystring, type LinkBody,
  type ApiKeyBody, type EndpointBody, type ResourceItem
} from './schemas.js'
import { bucketStart, DAY_MS, HOUR_MS } from '../storage/usage-buckets.js'
import { NO_LIMITS, PrefixTakenError, type LinkRecord, type AuditContext, type ResourceType, type ApiKeyRecord, type EndpointLocator, type EndpointRecord, type ProjectRef } from '../storage/storage.js'
import { InvalidCursorError, MAX_ENDPOINT_KEYS, type EndpointKeyResult, type ListPage, type UsageColumns, type UsageQuery } from '../storage/storage.js'
import { foldSearch } from '../storage/list-cursor.js'
import { hostOf } from './data-routes.js'
import { plainJsonBodies } from './json-body.js'

const PREFIX_ATTEMPTS = 5
/** A list asked for without `limit`: all of it, as before lists had pages. */
const WHOLE_LIST = Number.MAX_SAFE_INTEGER - 1


function keyBody (k: ApiKeyRecord): ApiKeyBody {
  return {
    id: k.id,
    prefix: k.prefix,
    purpose: k.purpose,
    isActive: k.isActive,
    createdAt: k.createdAt.toISOString(),
    updatedAt: k.updatedAt === null ? null : k.updatedAt.toISOString(),
    expiresAt: k.expiresAt === null ? null : k.expiresAt.toISOString(),
    limits: { ...k.limits }
  }
}

function endpointBody (e: EndpointRecord, resourceName: string | undefined): EndpointBody {
  return {
    id: e.id,
    path: endpointPath(e),
    method: e.type === 'dataset' ? 'GET' : 'POST',
    type: e.type,
    organization: e.organization,
    project: e.project,
    modelSequence: e.modelSequence,
    resourceSequence: e.resourceSequence,
    ...(resourceName === undefined ? {} : { resourceName }),
    calls: e.calls,
    keys: e.keys,
    createdAt: e.createdAt.toISOString()
  }
}

function linkBody (l: LinkRecord): LinkBody {
  return {
    id: l.id,
    keyId: l.keyId,
    endpointId: l.endpointId,
    params: l.params,
    createdAt: l.createdAt.toISOString(),
    expiresAt: l.expiresAt.toISOString(),
    revokedAt: l.revokedAt === null ? null : l.revokedAt.toISOString()
  }
}

/** A resource's place, as a map key: `dataset/1/2`. */
function placeOf (r: { type: ResourceType, modelSequence: number, resourceSequence: number }): string {
  return `${r.type}/${r.modelSequence}/${r.resourceSequence}`
}

/** The place a `placeOf` key names. */
function placeFrom (key: string): { type: ResourceType, modelSequence: number, resourceSequence: number } {
  const [type, modelSequence, resourceSequence] = key.split('/')
  return { type: type as ResourceType, modelSequence: Number(modelSequence), resourceSequence: Number(resourceSequence) }
}

function locatorOf (params: Static<typeof EndpointParams>): EndpointLocator {
  return { ...params, modelSequence: Number(params.modelSequence), resourceSequence: Number(params.resourceSequence) }
}

/** Throws 403 `Not authorized` unless the host grants the caller `ManageAPIKeys`. */
export async function requireManageApiKeys (options: Pick<ResolvedOptions, 'getPermissions'>, request: FastifyRequest): Promise<void> {
  for (const permission of await options.getPermissions(request)) {
    if (permission === MANAGE_API_KEYS) return
  }
  throw new ManagementNotAuthorizedError()
}

const errors = (...codes: number[]): Record<number, typeof ErrorBody> =>
  Object.fromEntries(codes.map((c) => [c, ErrorBody]))

/** A page read from storage; a cursor it did not give is the caller's 400. */
async function pageOf<T> (read: () => Promise<ListPage<T>>): Promise<ListPage<T>> {
  try {
    return await read()
  } catch (err) {
    if (err instanceof InvalidCursorError) throw new BadRequestError('querystring.after: not a cursor of this list; follow the Link header\'s rel="next" URL')
    throw err
  }
}

/** Throws the refusal of a change of one key on an endpoint, if it was refused. */
function refuseEndpointKeyChange (result: EndpointKeyResult): void {
  if (result.ok) return
  switch (result.problem) {
    case 'no_endpoint': throw new EndpointNotFoundError()
    case 'no_key': throw new KeyNotFoundError()
    case 'full': throw new BadRequestError(`keyId: the endpoint has ${MAX_ENDPOINT_KEYS} keys, the most it holds; remove one first`)
    case 'last_key': throw new BadRequestError('keyId: the endpoint\'s last key; assign another first, or delete the endpoint')
  }
}

/** A timestamp from the request, read once (lib/inputs.ts); 400 naming `field` if no store could hold it. */
function timestampOf (text: string, field: string): Date {
  const read = readTimestamp(text)
  if (!read.ok) throw new BadRequestError(`${field}: ${read.problem}`)
  return read.value
}

const answerChecks = new Map<TSchema, ReturnType<typeof Compile>>()

/**
 * The JSON text of a write's answer, made with the route's own serializer
 * for `status` once the body has been checked against its schema. Called
 * inside the write's transaction (`beforeCommit`): an answer that cannot be
 * made rolls the write back, so a 500 never follows a change.
 */
function answerText (reply: FastifyReply, status: number, schema: TSchema, body: unknown): string {
  let check = answerChecks.get(schema)
  if (check === undefined) answerChecks.set(schema, check = Compile(schema))
  if (!check.Check(body)) {
    const problem = check.Errors(body)[0]
    throw new InternalServerError({ cause: new Error(`the answer does not fit its schema: ${problem?.instancePath ?? ''} ${problem?.message ?? ''}; nothing was changed`) })
  }
  reply.code(status)
  return reply.serialize(body) as string
}

/** Sends what `answerText` made. */
function sendAnswer (reply: FastifyReply, text: string | undefined): FastifyReply {
  if (text === undefined) throw new InternalServerError({ cause: new Error('the storage did not call beforeCommit') })
  return reply.type('application/json; charset=utf-8').send(text)
}

/**
 * Key and endpoint management (DESIGN.md §4). Every route needs
 * `ManageAPIKeys`, checked in `onRequest`, before any body is read.
 */
export const managementRoutes: FastifyPluginAsyncTypebox<{ ctx: PluginContext }> = async (app, { ctx }) => {
  const { storage, hasher, usage, options } = ctx

  // Integers in query strings and paths only from plain digits (validator-compiler.ts).
  app.setValidatorCompiler(strictValidatorCompiler)
  app.setErrorHandler(sendError)
  // JSON only. A cross-site HTML form can post text/plain without a CORS
  // preflight, with the victim's cookies: without this parser such a post
  // (say, to regenerate a key) is refused with 415 before any handler runs.
  app.removeContentTypeParser('text/plain')
  plainJsonBodies(app)
  await app.register(fastifyAuth)

  app.addHook('onRequest', app.auth([async (request) => requireManageApiKeys(options, request)]))
  app.addHook('onSend', async (request, reply, payload) => {
    reply.header('cache-control', 'no-store')
    return payload
  })

  /** Who makes this change, for its audit entry: what the host's getActor answers. */
  async function auditOf (request: FastifyRequest): Promise<AuditContext> {
    if (options.getActor === undefined) return { actor: null }
    const actor = await options.getActor(request)
    if (actor !== null && actor !== undefined && typeof actor !== 'string') throw new TypeError('getActor must answer a string or null')
    return { actor: actor ?? null }
  }

  async function newSecret (): Promise<{ value: string, prefix: string, hash: string }> {
    const { value, prefix } = generateKey()
    return { value, prefix, hash: await hasher.hash(value) }
  }

  /** Runs `write` with fresh key material until its prefix is unique. */
  async function withUniquePrefix (write: (secret: { value: string, prefix: string, hash: string }) => Promise<ApiKeyRecord | null>):
  Promise<{ record: ApiKeyRecord | null, value: string }> {
    for (let attempt = 1; ; attempt++) {
      const secret = await newSecret()
      try {
        return { record: await write(secret), value: secret.value }
      } catch (err) {
        if (!(err instanceof PrefixTakenError) || attempt >= PREFIX_ATTEMPTS) throw err
      }
    }
  }

  /** The latest expiry `maxKeyLifetime` allows from `now` (never past the last instant the stores hold); undefined without it. */
  function latestExpiry (now: number): Date | undefined {
    const { maxKeyLifetime } = options
    return maxKeyLifetime === undefined ? undefined : new Date(Math.min(now + maxKeyLifetime, LATEST_TIMESTAMP))
  }

  /**
   * The expiry a body asks for (undefined: not asked), checked against the
   * clock and `maxKeyLifetime` (DESIGN.md §4.1).
   */
  function requestedExpiry (value: string | null | undefined, now: number): Date | null | undefined {
    if (value === undefined) return undefined
    const latest = latestExpiry(now)
    if (value === null) {
      if (latest !== undefined) throw new BadRequestError(`body.expiresAt: must be set, no later than ${latest.toISOString()} (maxKeyLifetime)`)
      return null
    }
    const at = timestampOf(value, 'body.expiresAt')
    if (at.getTime() <= now) throw new BadRequestError('body.expiresAt: must be in the future')
    if (latest !== undefined && at > latest) throw new BadRequestError(`body.expiresAt: must be no later than ${latest.toISOString()} (maxKeyLifetime)`)
    return at
  }

  /** The resource's name; 404 when the host has no such dataset or pipeline. */
  async function requireResource (l: EndpointLocator): Promise<string> {
    const ref = { organization: l.organization, project: l.project, modelSequence: l.modelSequence, resourceSequence: l.resourceSequence }
    const resource = l.type === 'dataset' ? await options.datasets.getDataset(ref) : await options.pipelines.getPipeline(ref)
    if (resource === null) throw l.type === 'dataset' ? new DatasetNotFoundError() : new PipelineNotFoundError()
    return resource.name
  }

  /** The resource's name, when the host still has it. */
  async function resourceNameOf (l: EndpointLocator): Promise<string | undefined> {
    return await requireResource(l).catch((err: unknown) => {
      if (err instanceof DatasetNotFoundError || err instanceof PipelineNotFoundError) return undefined
      throw err
    })
  }

  /** The project's datasets and pipelines as the host lists them (none where it does not). */
  async function resourcesOf (project: ProjectRef): Promise<ResourceItem[]> {
    const [datasets, pipelines] = await Promise.all([
      options.datasets.listResources?.(project) ?? [],
      options.pipelines.listResources?.(project) ?? []
    ])
    const items = [
      ...datasets.map((r) => ({ type: 'dataset' as const, modelSequence: r.modelSequence, resourceSequence: r.resourceSequence, name: r.name })),
      ...pipelines.map((r) => ({ type: 'pipeline' as const, modelSequence: r.modelSequence, resourceSequence: r.resourceSequence, name: r.name }))
    ]
    return items.sort((a, b) => a.modelSequence - b.modelSequence || (a.type < b.type ? -1 : a.type > b.type ? 1 : 0) ||
      a.resourceSequence - b.resourceSequence)
  }

  /**
   * Names for an endpoint listing. The listing stays usable when the host
   * cannot list its resources: the failure is logged and names are left out.
   */
  async function resourceNames (request: FastifyRequest, project: ProjectRef): Promise<Map<string, string>> {
    try {
      return new Map((await resourcesOf(project)).map((r) => [placeOf(r), r.name]))
    } catch (err) {
      request.log.error({ err }, 'fastify-data-endpoints: listResources failed; endpoints listed without resource names')
      return new Map()
    }
  }

  /** Writes this instance's pending counts, so that a listing shows them; a storage failure is 500 `Internal server error`. */
  async function flushUsage (): Promise<void> {
    await usage.flush().catch((err: unknown) => { throw new InternalServerError({ cause: err }) })
  }

  /**
   * The usage history of `query`'s range as columns, or null when it holds
   * more than `cap` rows. A store that can tell at once does (PostgreSQL
   * counts and reads side by side); one that counts refuses a range over
   * the cap without reading its rows; else the rows read tell.
   */
  async function usageWithinCap (project: ProjectRef, query: UsageQuery, cap: number): Promise<UsageColumns | null> {
    if (storage.queryUsageWithinLimit !== undefined) return storage.queryUsageWithinLimit(project, { ...query, limit: cap })
    // One more than the cap tells a range over it.
    const over = { ...query, limit: cap + 1 }
    if (storage.countUsage !== undefined && await storage.countUsage(project, over) > cap) return null
    // Columns when the store gives them: no object per row of a long history.
    const rows = storage.queryUsageColumns !== undefined
      ? await storage.queryUsageColumns(project, over)
      : usageColumnsOf(await storage.queryUsage(project, over))
    return rows.length > cap ? null : rows
  }

  async function keyIdsToAssign (project: ProjectRef, requested: string[] | undefined): Promise<string[]> {
    if (requested !== undefined && requested.length > 0) return requested
    // SPEC.md §3.2: a project's single key is assigned automatically. Two
    // keys read tell one from several, however many the project has.
    const keys = (await storage.listKeysPage(project, { limit: 2 })).items
    if (keys.length === 1) return [keys[0].id]
    throw new BadRequestError(keys.length === 0
      ? 'keyIds: the project has no API key yet; create one first'
      : 'keyIds: choose at least one key; the project has several')
  }

  /**
   * `Link: <…>; rel="next"` (RFC 8288, as GitHub's API pages): this
   * request's URL with the next page's cursor, on the address `job_url` uses.
   */
  function nextPageLink (request: FastifyRequest, next: string): string {
    const url = new URL(request.url, 'http://localhost')
    url.searchParams.set('after', next)
    return `<${options.baseUrl ?? `${request.protocol}://${hostOf(request)}`}${url.pathname}${url.search}>; rel="next"`
  }

  app.get('/:organization/:project/keys', {
    schema: { params: ProjectParams, querystring: KeysQuerystring, response: { 200: Type.Array(ApiKey, { headers: NextPageHeader }), ...errors(400, 403) } }
  }, async (request, reply) => {
    await flushUsage()
    const { limit, after, q } = request.query
    if (limit === undefined && after === undefined && (q ?? '') === '') return (await storage.listKeys(request.params)).map(keyBody)
    const page = await pageOf(() => storage.listKeysPage(request.params, {
      limit: limit ?? WHOLE_LIST, after, search: q === '' ? undefined : q
    }))
    if (page.next !== null) reply.header('link', nextPageLink(request, page.next))
    return page.items.map(keyBody)
  })

  app.post('/:organization/:project/keys', {
    schema: { params: ProjectParams, querystring: NoQuerystring, body: CreateKeyBody, response: { 201: ApiKeyWithValue, ...errors(400, 403) } }
  }, async (request, reply) => {
    const { organization, project } = request.params
    const { purpose, isActive = true } = request.body
    const audit = await auditOf(request)
    const now = Date.now()
    const expiresAt = requestedExpiry(request.body.expiresAt, now) ?? latestExpiry(now) ?? null
    // A creation that names no limits takes defaultKeyLimits; one that names some, those only.
    const limits = request.body.limits === undefined ? options.defaultKeyLimits : { ...NO_LIMITS, ...request.body.limits }
    let answer: string | undefined
    await withUniquePrefix((s) =>
      storage.createKey({ organization, project, prefix: s.prefix, hash: s.hash, purpose, isActive, expiresAt, limits }, audit,
        (record) => { answer = answerText(reply, 201, ApiKeyWithValue, { ...keyBody(record), key: s.value }) }))
    return sendAnswer(reply, answer)
  })

  app.patch('/:organization/:project/keys/:keyId', {
    schema: { params: KeyParams, querystring: NoQuerystring, body: UpdateKeyBody, response: { 200: ApiKey, ...errors(400, 403, 404) } }
  }, async (request, reply) => {
    const { keyId, ...project } = request.params
    const { expiresAt, ...rest } = request.body
    let answer: string | undefined
    const updated = await storage.updateKey(project, keyId, { ...rest, expiresAt: requestedExpiry(expiresAt, Date.now()) }, await auditOf(request),
      (record) => { answer = answerText(reply, 200, ApiKey, keyBody(record)) })
    if (updated === null) throw new KeyNotFoundError()
    return sendAnswer(reply, answer)
  })

  app.delete('/:organization/:project/keys/:keyId', {
    schema: { params: KeyParams, querystring: NoQuerystring, response: { 204: Type.Null(), ...errors(400, 403, 404) } }
  }, async (request, reply) => {
    const { keyId, ...project } = request.params
    if (!await storage.deleteKey(project, keyId, await auditOf(request))) throw new KeyNotFoundError()
    return reply.code(204).send(null)
  })

  app.post('/:organization/:project/keys/:keyId/regenerate', {
    schema: { params: KeyParams, querystring: NoQuerystring, response: { 200: ApiKeyWithValue, ...errors(400, 403, 404) } }
  }, async (request, reply) => {
    const { keyId, ...project } = request.params
    if (await storage.getKey(project, keyId) === null) throw new KeyNotFoundError()
    const audit = await auditOf(request)
    let answer: string | undefined
    const { record } = await withUniquePrefix((s) =>
      storage.replaceKeySecret(project, keyId, { prefix: s.prefix, hash: s.hash }, audit,
        (replaced) => { answer = answerText(reply, 200, ApiKeyWithValue, { ...keyBody(replaced), key: s.value }) }))
    if (record === null) throw new KeyNotFoundError()
    return sendAnswer(reply, answer)
  })

  // Download links (DESIGN.md §4.2): never their tokens, which only minting shows.
  app.get('/:organization/:project/links', {
    schema: { params: ProjectParams, querystring: LinksQuerystring, response: { 200: LinksAnswer, ...errors(400, 403) } }
  }, async (request) => {
    const { keyId, limit = 100 } = request.query
    return { items: (await storage.listLinks(request.params, { keyId, limit })).map(linkBody) }
  })

  app.delete('/:organization/:project/links/:linkId', {
    schema: { params: LinkParams, querystring: NoQuerystring, response: { 204: Type.Null(), ...errors(400, 403, 404) } }
  }, async (request, reply) => {
    const { linkId, ...project } = request.params
    if (await storage.revokeLink(project, linkId, await auditOf(request)) === null) throw new LinkNotFoundError()
    return reply.code(204).send(null)
  })

  app.get('/:organization/:project/usage', {
    schema: { params: ProjectParams, querystring: UsageQuerystring, response: { 200: UsageAnswer, ...errors(400, 403) } }
  }, async (request, reply) => {
    const { granularity = 'hour', keyId, endpointId } = request.query
    const size = granularity === 'hour' ? HOUR_MS : DAY_MS
    const to = request.query.to === undefined ? new Date() : timestampOf(request.query.to, 'querystring.to')
    const from = request.query.from === undefined
      ? new Date(Math.max(to.getTime() - (granularity === 'hour' ? DAY_MS : 30 * DAY_MS), EARLIEST_TIMESTAMP))
      : timestampOf(request.query.from, 'querystring.from')
    if (from >= to) throw new BadRequestError('querystring.from: must be before to')
    await flushUsage()
    const limit = options.usageQueryMaxRows
    // Every bucket that overlaps [from, to): from the one that holds `from`.
    const query = { granularity, from: new Date(bucketStart(from.getTime(), size)), to, keyId, endpointId, limit }
    const rows = await usageWithinCap(request.params, query, limit)
    if (rows === null) {
      throw new BadRequestError(`querystring.from: the range holds more than ${limit} rows; narrow from and to, or filter by keyId or endpointId`)
    }
    // The schema documents the answer; usageAnswerPieces writes its text,
    // streamed a piece at a time (Fastify pipes it, with backpressure), with
    // turns of the event loop between them. With its encoding set the stream
    // hands the texts on as they are, instead of making a Buffer of each.
    const body: unknown = Readable.from(usageAnswerWithTurns(granularity, rows), { objectMode: false, encoding: 'utf8' })
    return reply.type('application/json; charset=utf-8').send(body as Static<typeof UsageAnswer>)
  })

  app.get('/:organization/:project/audit', {
    schema: { params: ProjectParams, querystring: AuditQuerystring, response: { 200: AuditAnswer, ...errors(400, 403) } }
  }, async (request) => {
    const { before, limit = 50 } = request.query
    // One more than asked for tells whether there is a next page.
    const entries = await storage.listAudit(request.params, { before, limit: limit + 1 })
    const items = entries.slice(0, limit).map((e) => ({ ...e, at: e.at.toISOString() }))
    return { items, next: entries.length > limit ? items[items.length - 1].id : null }
  })

  app.get('/:organization/:project/endpoints', {
    schema: { params: ProjectParams, querystring: EndpointsQuerystring, response: { 200: Type.Array(Endpoint, { headers: NextPageHeader }), ...errors(400, 403) } }
  }, async (request, reply) => {
    await flushUsage()
    const { limit, after, q, keyId } = request.query
    const search = q === '' ? undefined : q
    if (limit === undefined && after === undefined && search === undefined && keyId === undefined) {
      const [endpoints, names] = await Promise.all([storage.listEndpoints(request.params), resourceNames(request, request.params)])
      return endpoints.map((e) => endpointBody(e, names.get(placeOf(e))))
    }
    // A search matches the host's names too: the places of the names that hold it.
    const names = await resourceNames(request, request.params)
    const text = search === undefined ? '' : foldSearch(search)
    const searchPlaces = search === undefined ? undefined : [...names].filter(([, name]) => foldSearch(name).includes(text)).map(([place]) => placeFrom(place))
    const page = await pageOf(() => storage.listEndpointsPage(request.params, {
      limit: limit ?? WHOLE_LIST, after, search, searchPlaces, keyId
    }))
    if (page.next !== null) reply.header('link', nextPageLink(request, page.next))
    return page.items.map((e) => endpointBody(e, names.get(placeOf(e))))
  })

  app.get('/:organization/:project/resources', {
    schema: { params: ProjectParams, querystring: NoQuerystring, response: { 200: ResourcesAnswer, ...errors(400, 403) } }
  }, async (request) => ({ items: await resourcesOf(request.params) }))

  app.put('/:organization/:project/endpoints/:modelSequence/:type/:resourceSequence', {
    schema: {
      params: EndpointParams,
      querystring: NoQuerystring,
      body: PutEndpointBody,
      response: { 200: Endpoint, 201: Endpoint, ...errors(400, 403, 404) }
    },
    // No body at all means "no keyIds" (assign the project's only key).
    preValidation: async (request) => { request.body ??= {} }
  }, async (request, reply) => {
    const locator = locatorOf(request.params)
    const resourceName = await requireResource(locator)
    const keyIds = await keyIdsToAssign(locator, request.body.keyIds)
    let answer: string | undefined
    const result = await storage.putEndpoint(locator, keyIds, await auditOf(request),
      (endpoint, created) => { answer = answerText(reply, created ? 201 : 200, Endpoint, endpointBody(endpoint, resourceName)) })
    if (!result.ok) throw new BadRequestError(`keyIds: not keys of this project: ${result.unknownKeyIds.join(', ')}`)
    return sendAnswer(reply, answer)
  })

  app.delete('/:organization/:project/endpoints/:modelSequence/:type/:resourceSequence', {
    schema: { params: EndpointParams, querystring: NoQuerystring, response: { 204: Type.Null(), ...errors(400, 403, 404) } }
  }, async (request, reply) => {
    if (!await storage.deleteEndpoint(locatorOf(request.params), await auditOf(request))) throw new EndpointNotFoundError()
    return reply.code(204).send(null)
  })

  // One key on or off an endpoint without sending its whole list: what a
  // rotation or an integration script does, and at any size of list. As for a
  // PUT, the answer is made before the change commits.
  app.post('/:organization/:project/endpoints/:modelSequence/:type/:resourceSequence/keys/:keyId', {
    schema: { params: EndpointKeyParams, querystring: NoQuerystring, response: { 200: Endpoint, ...errors(400, 403, 404) } }
  }, async (request, reply) => {
    const { keyId, ...where } = request.params
    const locator = locatorOf(where)
    // As a PUT: no access is granted to a dataset or pipeline the host no longer has.
    const resourceName = await requireResource(locator)
    let answer: string | undefined
    const result = await storage.addEndpointKey(locator, keyId, await auditOf(request),
      (endpoint) => { answer = answerText(reply, 200, Endpoint, endpointBody(endpoint, resourceName)) })
    refuseEndpointKeyChange(result)
    return sendAnswer(reply, answer)
  })

  app.delete('/:organization/:project/endpoints/:modelSequence/:type/:resourceSequence/keys/:keyId', {
    schema: { params: EndpointKeyParams, querystring: NoQuerystring, response: { 200: Endpoint, ...errors(400, 403, 404) } }
  }, async (request, reply) => {
    const { keyId, ...where } = request.params
    const locator = locatorOf(where)
    // Access is taken away whether or not the host still has the resource; its name, when it has.
    const resourceName = await resourceNameOf(locator)
    let answer: string | undefined
    const result = await storage.removeEndpointKey(locator, keyId, await auditOf(request),
      (endpoint) => { answer = answerText(reply, 200, Endpoint, endpointBody(endpoint, resourceName)) })
    refuseEndpointKeyChange(result)
    return sendAnswer(reply, answer)
  })
}
