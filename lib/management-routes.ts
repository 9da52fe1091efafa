import fastifyAuth from '@fastify/auth'
import { TypeBoxValidatorCompiler, type FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyRequest } from 'fastify'
import { Type, type Static } from 'typebox'
import { generateKey } from './api-key.js'
import type { PluginContext } from './context.js'
import { sendError } from './error-reply.js'
import {
  BadRequestError, DatasetNotFoundError, EndpointNotFoundError, KeyNotFoundError,
  ManagementNotAuthorizedError, PipelineNotFoundError
} from './errors.js'
import { MANAGE_API_KEYS, type ResolvedOptions } from './options.js'
import {
  ApiKey, ApiKeyWithValue, CreateKeyBody, Endpoint, EndpointParams, ErrorBody, KeyParams, ProjectParams,
  PutEndpointBody, UpdateKeyBody, type ApiKeyBody, type EndpointBody
} from './schemas.js'
import { PrefixTakenError, type ApiKeyRecord, type EndpointLocator, type EndpointRecord, type ProjectRef } from './storage.js'

const PREFIX_ATTEMPTS = 5

export function endpointPath (l: EndpointLocator): string {
  return `/api/${l.organization}/${l.project}/model/${l.modelSequence}/${l.type}/${l.resourceSequence}`
}

function keyBody (k: ApiKeyRecord): ApiKeyBody {
  return {
    id: k.id,
    prefix: k.prefix,
    purpose: k.purpose,
    isActive: k.isActive,
    createdAt: k.createdAt.toISOString(),
    updatedAt: k.updatedAt === null ? null : k.updatedAt.toISOString()
  }
}

function endpointBody (e: EndpointRecord): EndpointBody {
  return {
    id: e.id,
    path: endpointPath(e),
    method: e.type === 'dataset' ? 'GET' : 'POST',
    type: e.type,
    organization: e.organization,
    project: e.project,
    modelSequence: e.modelSequence,
    resourceSequence: e.resourceSequence,
    calls: e.calls,
    keys: e.keys,
    createdAt: e.createdAt.toISOString()
  }
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

/**
 * Key and endpoint management (DESIGN.md §4). Every route needs
 * `ManageAPIKeys`, checked in `onRequest`, before any body is read.
 */
export const managementRoutes: FastifyPluginAsyncTypebox<{ ctx: PluginContext }> = async (app, { ctx }) => {
  const { storage, hasher, usage, options } = ctx

  app.setValidatorCompiler(TypeBoxValidatorCompiler)
  app.setErrorHandler(sendError)
  // JSON only. A cross-site HTML form can post text/plain without a CORS
  // preflight, with the victim's cookies: without this parser such a post
  // (say, to regenerate a key) is refused with 415 before any handler runs.
  app.removeContentTypeParser('text/plain')
  await app.register(fastifyAuth)

  app.addHook('onRequest', app.auth([async (request) => requireManageApiKeys(options, request)]))
  app.addHook('onSend', async (request, reply, payload) => {
    reply.header('cache-control', 'no-store')
    return payload
  })

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

  async function requireResource (l: EndpointLocator): Promise<void> {
    const ref = { organization: l.organization, project: l.project, modelSequence: l.modelSequence, resourceSequence: l.resourceSequence }
    if (l.type === 'dataset') {
      if (await options.datasets.getDataset(ref) === null) throw new DatasetNotFoundError()
    } else if (await options.pipelines.getPipeline(ref) === null) {
      throw new PipelineNotFoundError()
    }
  }

  async function keyIdsToAssign (project: ProjectRef, requested: string[] | undefined): Promise<string[]> {
    if (requested !== undefined && requested.length > 0) return requested
    // SPEC.md §3.2: a project's single key is assigned automatically.
    const keys = await storage.listKeys(project)
    if (keys.length === 1) return [keys[0].id]
    throw new BadRequestError(keys.length === 0
      ? 'keyIds: the project has no API key yet; create one first'
      : 'keyIds: choose at least one key; the project has several')
  }

  app.get('/:organization/:project/keys', {
    schema: { params: ProjectParams, response: { 200: Type.Array(ApiKey), ...errors(400, 403) } }
  }, async (request) => {
    await usage.flush()
    return (await storage.listKeys(request.params)).map(keyBody)
  })

  app.post('/:organization/:project/keys', {
    schema: { params: ProjectParams, body: CreateKeyBody, response: { 201: ApiKeyWithValue, ...errors(400, 403) } }
  }, async (request, reply) => {
    const { organization, project } = request.params
    const { purpose, isActive = true } = request.body
    const { record, value } = await withUniquePrefix((s) =>
      storage.createKey({ organization, project, prefix: s.prefix, hash: s.hash, purpose, isActive }))
    return reply.code(201).send({ ...keyBody(record as ApiKeyRecord), key: value })
  })

  app.patch('/:organization/:project/keys/:keyId', {
    schema: { params: KeyParams, body: UpdateKeyBody, response: { 200: ApiKey, ...errors(400, 403, 404) } }
  }, async (request) => {
    const { keyId, ...project } = request.params
    const updated = await storage.updateKey(project, keyId, request.body)
    if (updated === null) throw new KeyNotFoundError()
    return keyBody(updated)
  })

  app.delete('/:organization/:project/keys/:keyId', {
    schema: { params: KeyParams, response: { 204: Type.Null(), ...errors(400, 403, 404) } }
  }, async (request, reply) => {
    const { keyId, ...project } = request.params
    if (!await storage.deleteKey(project, keyId)) throw new KeyNotFoundError()
    return reply.code(204).send(null)
  })

  app.post('/:organization/:project/keys/:keyId/regenerate', {
    schema: { params: KeyParams, response: { 200: ApiKeyWithValue, ...errors(400, 403, 404) } }
  }, async (request) => {
    const { keyId, ...project } = request.params
    if (await storage.getKey(project, keyId) === null) throw new KeyNotFoundError()
    const { record, value } = await withUniquePrefix((s) =>
      storage.replaceKeySecret(project, keyId, { prefix: s.prefix, hash: s.hash }))
    if (record === null) throw new KeyNotFoundError()
    return { ...keyBody(record), key: value }
  })

  app.get('/:organization/:project/endpoints', {
    schema: { params: ProjectParams, response: { 200: Type.Array(Endpoint), ...errors(400, 403) } }
  }, async (request) => {
    await usage.flush()
    return (await storage.listEndpoints(request.params)).map(endpointBody)
  })

  app.put('/:organization/:project/endpoints/:modelSequence/:type/:resourceSequence', {
    schema: {
      params: EndpointParams,
      body: PutEndpointBody,
      response: { 200: Endpoint, 201: Endpoint, ...errors(400, 403, 404) }
    },
    // No body at all means "no keyIds" (assign the project's only key).
    preValidation: async (request) => { request.body ??= {} }
  }, async (request, reply) => {
    const locator = locatorOf(request.params)
    await requireResource(locator)
    const keyIds = await keyIdsToAssign(locator, request.body.keyIds)
    const result = await storage.putEndpoint(locator, keyIds)
    if (!result.ok) throw new BadRequestError(`keyIds: not keys of this project: ${result.unknownKeyIds.join(', ')}`)
    return reply.code(result.created ? 201 : 200).send(endpointBody(result.endpoint))
  })

  app.delete('/:organization/:project/endpoints/:modelSequence/:type/:resourceSequence', {
    schema: { params: EndpointParams, response: { 204: Type.Null(), ...errors(400, 403, 404) } }
  }, async (request, reply) => {
    if (!await storage.deleteEndpoint(locatorOf(request.params))) throw new EndpointNotFoundError()
    return reply.code(204).send(null)
  })
}
