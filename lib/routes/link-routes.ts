import { setTimeout } from 'node:timers/promises'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { keyChecks, isLoopback, authenticateHook, type AuthenticatedCall } from '../keys/authenticate.js'
import { ThrottleClient } from '../keys/failure-throttle.js'
import { newLinkId } from '../keys/link-tokens.js'
import { downloadFileName, parseDownloadQuery, sendDataset, type DownloadContext } from '../downloads/dataset-download.js'
import { checkEntities } from '../formats/entity-model.js'
import type { ResourceRef } from '../host/dataset-source.js'
import {
  BadRequestError, DatasetNotFoundError, ExpiredLinkError, HttpsRequiredError, MethodNotAllowedError, RevokedLinkError,
  TooManyFailuresError, UnknownEndpointError, UnknownKeyError, UnknownLinkError, withDetails
} from '../errors.js'
import type { PluginContext } from './context.js'
import { DatasetQuery } from './schemas.js'
import { linkUseRoute, mintLinkRoute } from './openapi.js'
import { plainJsonBodies } from './json-body.js'

// Download links (DESIGN.md §4.2): minted with the API key, used with the
// token alone. Both sit in the data routes' context, with its compression,
// error answers and log lines.

/** Relative to /api: minting, on a dataset's own path. */
export const MINT_LINK_ROUTE = '/:organization/:project/model/:modelSequence/:type/:resourceSequence/links'
/**
 * Relative to /api: a link's URL, `/links/<token>/<file name>`. A wildcard,
 * not two parameters: a token is longer than Fastify's `maxParamLength`
 * (100 by default), past which the router answers 414 with the URL.
 */
export const LINK_ROUTE = '/links/*'

/** The token and file name of a link's path (after /links/); null when it has not both. */
export function linkPathParts (rest: string): { token: string, fileName: string } | null {
  const slash = rest.indexOf('/')
  if (slash <= 0 || slash === rest.length - 1) return null
  return { token: rest.slice(0, slash), fileName: rest.slice(slash + 1) }
}

/** The link's parameters: the GET's query parameters, those only (and never `api_key`). */
const LINK_PARAMETERS = new Set(Object.keys(DatasetQuery.properties))
/** The most characters a link's parameters take (as JSON): the token carries them. */
const MAX_PARAMS_LENGTH = 2000
const DEFAULT_EXPIRES_IN = 3600

export interface LinkRouteParts {
  ctx: PluginContext
  download: DownloadContext
  baseUrl: (request: FastifyRequest) => string
}

/** What the host's sources are asked by: the locator's parts without its type (a fresh object, whatever else the locator holds). */
export function refOf (locator: ResourceRef): ResourceRef {
  const { organization, project, modelSequence, resourceSequence } = locator
  return { organization, project, modelSequence, resourceSequence }
}

/**
 * A minting body: `expiresIn` (seconds) and the GET's query parameters, each
 * a string as in a query (a number is taken as its digits). Anything else is
 * 400 naming it; the values themselves are checked as the GET checks them.
 */
export function readLinkBody (body: unknown): { expiresIn: number, params: Record<string, string> } {
  if (body === undefined || body === null) return { expiresIn: DEFAULT_EXPIRES_IN, params: {} }
  if (typeof body !== 'object' || Array.isArray(body)) throw new BadRequestError('Invalid body: must be a JSON object')
  let expiresIn = DEFAULT_EXPIRES_IN
  const params: Record<string, string> = {}
  for (const [name, value] of Object.entries(body)) {
    if (name === 'expiresIn') {
      if (!Number.isSafeInteger(value) || (value as number) < 1) throw new BadRequestError('Invalid expiresIn: must be a positive integer (seconds)')
      expiresIn = value as number
    } else if (!LINK_PARAMETERS.has(name)) {
      throw new BadRequestError(`Invalid ${name}: not a parameter of the dataset download`)
    } else if (typeof value === 'string') {
      params[name] = value
    } else if (typeof value === 'number' && Number.isFinite(value)) {
      params[name] = String(value)
    } else {
      throw new BadRequestError(`Invalid ${name}: must be a string`)
    }
  }
  if (JSON.stringify(params).length > MAX_PARAMS_LENGTH) {
    throw new BadRequestError(`Invalid body: the parameters take more than ${MAX_PARAMS_LENGTH} characters`)
  }
  return { expiresIn, params }
}

export async function linkRoutes (app: FastifyInstance, { ctx, download, baseUrl }: LinkRouteParts): Promise<void> {
  const { options, storage, throttle, links } = ctx
  const checks = keyChecks(ctx)

  /**
   * A token that does not verify is refused before any storage read, and
   * counts as a failed authentication of its client. Checking one costs a
   * few microseconds, so unlike a wrong key (whose bcrypt paces a guesser)
   * nothing would slow a flood's connections down: each refusal is held
   * `failureThrottle.delayMs` first (a second by default), so they wait
   * instead of taking the event loop. A client over its bound then gets 429,
   * as for keys. Nobody with a good link waits: only garbage is held.
   */
  async function refuseToken (client: ThrottleClient): Promise<never> {
    if (throttle !== null) {
      throttle.recordFailure(client.name)
      const wait = throttle.over(client.name)
      await setTimeout(throttle.delayMs)
      if (wait > 0) throw withDetails(new TooManyFailuresError(), { headers: { 'retry-after': String(wait) } })
    }
    throw new UnknownLinkError()
  }

  // The key checks' own refusal, counted against the client as a key's is;
  // typed here so that TypeScript narrows after it.
  const refuse: (client: ThrottleClient, error: Error) => never = checks.refuse

  async function useLink (request: FastifyRequest, reply: FastifyReply): Promise<unknown> {
    // The URL is the credential: no page it leads to may pass it on, no shared cache keep it.
    reply.header('referrer-policy', 'no-referrer').header('cache-control', 'private, no-store')
    if (options.requireHttps && request.protocol !== 'https' && !isLoopback(request.ip)) throw new HttpsRequiredError()
    const parts = linkPathParts((request.params as Record<string, string>)['*'])
    const client = new ThrottleClient(request.ip)
    const claims = parts === null ? null : await links.verify(parts.token, parts.fileName)
    if (claims === null) return refuseToken(client)

    // One read: the link's revocation, its key and its endpoint as they are now.
    const use = await storage.findLinkUse(claims.id)
    const expired = claims.expiresAt <= Date.now()
    // Gone with its key (deleted).
    if (use === null) refuse(client, expired ? new ExpiredLinkError() : new UnknownKeyError())
    if (use.revokedAt !== null) refuse(client, new RevokedLinkError())
    if (expired) refuse(client, new ExpiredLinkError())
    const { endpoint, key } = use
    if (endpoint === null || endpoint.id !== claims.endpointId || endpoint.type !== 'dataset') refuse(client, new UnknownEndpointError())
    request.dataEndpointKeyPrefix = use.keyPrefix
    // Regenerated (another prefix), or no longer assigned here.
    if (key.id !== claims.keyId || key.prefix !== use.keyPrefix || !use.assigned) refuse(client, new UnknownKeyError())
    // The key's limits, read with the link (DESIGN.md §4.3): a use is a call of the key.
    const admitting = checks.admit(client, endpoint.id, key, reply, request.method === 'GET')
    if (admitting !== undefined) await admitting
    const call: AuthenticatedCall = { locator: endpoint, endpointId: endpoint.id, keyId: key.id, keyPrefix: key.prefix, keyExpiresAt: key.expiresAt }
    request.dataEndpointCall = call

    const ref = refOf(endpoint)
    const dataset = await options.datasets.getDataset(ref)
    if (dataset === null) throw new DatasetNotFoundError()
    return sendDataset(request, reply, dataset, ref, download, { query: claims.params, viaLink: true })
  }

  async function mintLink (request: FastifyRequest, reply: FastifyReply): Promise<unknown> {
    const call = request.dataEndpointCall as AuthenticatedCall
    const ref = refOf(call.locator)
    const dataset = await options.datasets.getDataset(ref)
    if (dataset === null) throw new DatasetNotFoundError()
    const { expiresIn, params } = readLinkBody(request.body)
    // As the GET would answer them, in its order.
    const q = parseDownloadQuery(params, dataset)
    checkEntities(dataset.entities)
    const maxSeconds = Math.floor(options.maxLinkLifetime / 1000)
    if (expiresIn > maxSeconds) throw new BadRequestError(`Invalid expiresIn: at most ${maxSeconds} seconds (maxLinkLifetime)`)
    const expiresAt = Date.now() + expiresIn * 1000
    if (call.keyExpiresAt !== null && expiresAt > call.keyExpiresAt) {
      throw new BadRequestError(`Invalid expiresIn: the key expires at ${new Date(call.keyExpiresAt).toISOString()}, before the link would`)
    }
    const fileName = downloadFileName(dataset, q, download)
    const id = newLinkId()
    // Signed before the write: nothing may fail after it.
    const token = await links.sign({ id, keyId: call.keyId, endpointId: call.endpointId, expiresAt, params }, fileName)
    const url = `${baseUrl(request)}/api/links/${token}/${encodeURIComponent(fileName)}`
    const created = await storage.createLink(call.locator, {
      id, keyId: call.keyId, keyPrefix: call.keyPrefix, endpointId: call.endpointId, params, expiresAt: new Date(expiresAt)
    }, { actor: `key ${call.keyPrefix}` })
    // The key was deleted since its check.
    if (created === null) throw new UnknownKeyError()
    return reply.code(201).type('application/json; charset=utf-8').send({ id, url, expiresAt: new Date(expiresAt).toISOString() })
  }

  const otherMethods = (allowed: string[]): string[] => app.supportedMethods.filter((m) => !allowed.includes(m))
  const notAllowed = (allow: string) => async (): Promise<never> => {
    throw withDetails(new MethodNotAllowedError(), { headers: { allow } })
  }

  // HEAD is served as GET is, and documented with it (as the dataset GET).
  app.route({ method: otherMethods(['GET', 'HEAD']), url: LINK_ROUTE, schema: { hide: true }, handler: notAllowed('GET, HEAD') })
  app.route({ method: 'HEAD', url: LINK_ROUTE, schema: { hide: true }, handler: useLink })
  app.route({ method: 'GET', url: LINK_ROUTE, exposeHeadRoute: false, ...linkUseRoute, handler: useLink })

  // Minting reads a JSON body, once the key hook has passed (onRequest runs first).
  await app.register(async function mintLinks (mint) {
    mint.removeAllContentTypeParsers()
    mint.addContentTypeParser('*', (request, payload, done) => {
      done(new BadRequestError('Invalid body: must be JSON (Content-Type: application/json)'), undefined)
    })
    // As the management bodies: numbers in plain digits only (`expiresIn: 1e2` is 400).
    plainJsonBodies(mint)
    const onRequest = authenticateHook({ ...ctx, requireHttps: options.requireHttps }, 'links')
    mint.route({ method: app.supportedMethods.filter((m) => m !== 'POST'), url: MINT_LINK_ROUTE, onRequest, schema: { hide: true }, handler: notAllowed('POST') })
    mint.route({ method: 'POST', url: MINT_LINK_ROUTE, onRequest, ...mintLinkRoute, handler: mintLink })
  })
}
