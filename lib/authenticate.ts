import { setTimeout } from 'node:timers/promises'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { keyPrefixOf, loggablePrefix } from './api-key.js'
import type { PluginContext } from './context.js'
import { clientKey } from './failure-throttle.js'
import {
  DisabledKeyError, HttpsRequiredError, MethodNotAllowedError, NotAuthorizedError, NotFoundError,
  TooManyFailuresError, UnknownEndpointError, UnknownKeyError, VerificationBusyError
} from './errors.js'
import { withDetails } from './error-reply.js'
import type { EndpointLocator } from './storage.js'

export interface DataRouteParams {
  organization: string
  project: string
  modelSequence: string
  type: string
  resourceSequence: string
}

/** What a data request carries once its key is verified. */
export interface AuthenticatedCall {
  locator: EndpointLocator
  endpointId: string
}

declare module 'fastify' {
  interface FastifyRequest {
    /** set by the key hook on data routes once the key is verified */
    dataEndpointCall: AuthenticatedCall | null
    /** the supplied key's first 10 characters, for log lines */
    dataEndpointKeyPrefix: string | undefined
  }
}

// Positive integers up to 2^53 - 1, written without sign, exponent or leading zero.
const SEQUENCE = /^[1-9][0-9]{0,15}$/

function sequence (text: string): number | null {
  if (!SEQUENCE.test(text)) return null
  const n = Number(text)
  return Number.isSafeInteger(n) ? n : null
}

export function parseLocator (params: DataRouteParams): EndpointLocator | null {
  const { type } = params
  if (type !== 'dataset' && type !== 'pipeline') return null
  const modelSequence = sequence(params.modelSequence)
  const resourceSequence = sequence(params.resourceSequence)
  if (modelSequence === null || resourceSequence === null) return null
  return { organization: params.organization, project: params.project, modelSequence, type, resourceSequence }
}

const BEARER = /^bearer[ \t]+([^ \t].*?)[ \t]*$/i

/**
 * The supplied key: a non-empty `api_key` query value wins over
 * `Authorization: Bearer <key>` (scheme in any case). A repeated `api_key`
 * is passed on as is, and fails later as a malformed key.
 */
export function suppliedKey (request: FastifyRequest): unknown {
  const fromQuery = (request.query as Record<string, unknown>).api_key
  if (fromQuery !== undefined && fromQuery !== '') return fromQuery
  const header = request.headers.authorization
  if (typeof header === 'string') {
    const match = BEARER.exec(header)
    if (match !== null) return match[1]
  }
  return undefined
}

function isLoopback (ip: string): boolean {
  return ip === '::1' || ip.startsWith('127.') || ip.startsWith('::ffff:127.')
}

/**
 * The key hook of the data routes (DESIGN.md §2 steps 1-6), run in
 * `onRequest` so that an unauthenticated body is never read. Each refusal
 * throws a catalogue error; the context's error handler writes `{ message }`.
 */
export function authenticateHook (ctx: PluginContext) {
  const { storage, verifier, usage, throttle } = ctx
  const { requireHttps } = ctx.options

  // A key verified here before passes a client's bound: a neighbour behind
  // the same address keeps working (its key still goes through every check).
  // (A prefix means the supplied value is a well-formed key, so a string.)
  function verifiedBefore (prefix: string | null, supplied: unknown): boolean {
    return prefix !== null && verifier.hasVerified(supplied as string)
  }

  function refuse (client: string, error: Error): never {
    throttle?.recordFailure(client)
    throw error
  }

  return async function authenticate (request: FastifyRequest, reply: FastifyReply): Promise<void> {
    // Data and refusals alike must not be kept by caches on the way.
    reply.header('cache-control', 'no-store')
    const locator = parseLocator(request.params as DataRouteParams)
    if (locator === null) throw new NotFoundError()
    const allowed = locator.type === 'dataset' ? 'GET' : 'POST'
    if (request.method !== allowed) throw withDetails(new MethodNotAllowedError(), { headers: { allow: allowed } })
    if (requireHttps && request.protocol !== 'https' && !isLoopback(request.ip)) throw new HttpsRequiredError()

    const supplied = suppliedKey(request)
    if (supplied === undefined) throw new NotAuthorizedError()
    request.dataEndpointKeyPrefix = loggablePrefix(supplied)
    const client = clientKey(request.ip)
    const prefix = keyPrefixOf(supplied)
    let admitted = false
    if (throttle !== null) {
      // Admitted attempts count as in flight until settled below, so a burst
      // cannot pass the check before its failures are recorded.
      let wait = throttle.admit(client)
      // A client over its bound is refused before any storage read or bcrypt,
      // unless it sends a key already verified here.
      if (wait > 0 && !verifiedBefore(prefix, supplied)) {
        if (throttle.delayMs > 0) await setTimeout(throttle.delayMs)
        // Asked again after the hold: a burst of first requests with a good
        // key is over the bound only until its first verification ends.
        wait = throttle.admit(client)
        if (wait > 0 && !verifiedBefore(prefix, supplied)) {
          throw withDetails(new TooManyFailuresError(), { headers: { 'retry-after': String(wait) } })
        }
      }
      admitted = wait === 0
    }
    try {
      const found = await storage.findEndpointKey(locator, prefix)
      const key = found?.key ?? null
      if (found === null) refuse(client, new UnknownEndpointError())
      if (key === null || prefix === null) refuse(client, new UnknownKeyError())

      let matches: boolean
      try {
        matches = await verifier.verify(key.hash, supplied as string)
      } catch (err) {
        if (err instanceof VerificationBusyError) throw withDetails(err, { headers: { 'retry-after': '1' } })
        throw err
      }
      if (!matches) refuse(client, new UnknownKeyError())
      // The secret matched, so saying "disabled" reveals nothing to a guesser.
      if (!key.isActive) refuse(client, new DisabledKeyError())

      usage.record(found.endpointId, key.id)
      request.dataEndpointCall = { locator, endpointId: found.endpointId }
    } finally {
      if (admitted) throttle?.settle(client)
    }
  }
}
