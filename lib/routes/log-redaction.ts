import type { FastifyBaseLogger, FastifyInstance, FastifyRequest, FastifyServerOptions, RouteOptions } from 'fastify'
import { percentDecoded, redactKeys } from '../keys/api-key.js'

/** `api_key=<value>` with the value replaced, whatever the case or encoding of the name. */
function redactApiKeyParam (pair: string): string {
  const eq = pair.indexOf('=')
  if (eq < 0 || percentDecoded(pair.slice(0, eq)).toLowerCase() !== 'api_key') return pair
  return `${pair.slice(0, eq)}=[redacted]`
}

// A download link's token: the path segment after /api/links/, however
// written (any case, a percent-encoded slash), up to the next slash or the query.
const LINK_TOKEN = /(\/api(?:\/|%2f)links(?:\/|%2f))[^/?#]*/gi

/**
 * A URL with the value of every `api_key` parameter replaced, a download
 * link's token replaced, and every key masked wherever it sits, plain or
 * percent-encoded.
 */
export function redactUrl (url: string): string {
  const q = url.indexOf('?')
  const path = q < 0 ? url : url.slice(0, q)
  const redacted = path.replace(LINK_TOKEN, '$1[redacted]') +
    (q < 0 ? '' : '?' + url.slice(q + 1).split('&').map(redactApiKeyParam).join('&'))
  return redactKeys(redacted)
}

/**
 * A pino `req` serializer that never logs a key: the URL has `api_key`
 * redacted and no header is logged. The plugin uses it on its own routes;
 * hosts should pass it to their logger too (docs/security.md, "Logger"),
 * since Fastify logs the URL of requests that reach no route.
 */
export function redactingRequestSerializer (request: FastifyRequest): Record<string, unknown> {
  return {
    method: request.method,
    url: redactUrl(request.url),
    // The Host header is the client's to write, a key included.
    host: redactUrl(request.host),
    remoteAddress: request.ip,
    remotePort: request.socket?.remotePort
  }
}

/**
 * Whether `log` will write a line at `level`. Asked each time, just before a
 * line would be made: a host may change its logger's level at run time. A
 * logger without pino's `isLevelEnabled` is taken to write every level.
 */
export function logsAt (log: FastifyBaseLogger, level: string): boolean {
  const isLevelEnabled = (log as { isLevelEnabled?: (level: string) => boolean }).isLevelEnabled
  return typeof isLevelEnabled !== 'function' || isLevelEnabled.call(log, level)
}

type ChildLoggerFactory = NonNullable<FastifyServerOptions['childLoggerFactory']>

// Per parent logger, its one child with the redacting `req` serializer.
const redactingParents = new WeakMap<FastifyBaseLogger, FastifyBaseLogger>()

function redactingParentOf (logger: FastifyBaseLogger): FastifyBaseLogger {
  let parent = redactingParents.get(logger)
  // pino children read their parent's level through the prototype chain,
  // so a level the host sets later governs this one too; a logger whose
  // children copy the level instead gets a new one when the two differ.
  if (parent === undefined || parent.level !== logger.level) {
    parent = logger.child({}, { serializers: { req: redactingRequestSerializer } })
    redactingParents.set(logger, parent)
  }
  return parent
}

/**
 * A child logger factory whose `req` serializer is `redactingRequestSerializer`
 * on every line, at every level: Fastify itself logs `req` with 5xx errors at
 * error level, and a host's hooks may log it at any level. The serializer is
 * set once, on one child of the host's logger; each request's logger is a
 * plain child of that one, as cheap as Fastify's own, where a child given its
 * own serializers costs pino a copy of all its parent's, several µs a request.
 */
export const redactingChildLogger: ChildLoggerFactory = function (logger, bindings, options) {
  const parent = redactingParentOf(logger as FastifyBaseLogger)
  // A route's own serializers must not replace ours.
  if (options.serializers === undefined) return parent.child(bindings, options)
  return parent.child(bindings, { ...options, serializers: { ...options.serializers, req: redactingRequestSerializer } })
}

// pino keeps a logger's serializers under this registered symbol (pino.symbols.serializersSym).
const PINO_SERIALIZERS = Symbol.for('pino.serializers')

/**
 * Makes every request logger in `scope` write `req` with
 * `redactingRequestSerializer`. When the host's logger has it already
 * (docs/security.md, "Logger"; the example's has) and `scope` makes its children
 * with Fastify's own factory, they inherit it, and no factory is set: Fastify
 * validates every child a factory other than its own makes (seven methods
 * looked up through pino's prototypes): with our factory's own work, 3,200 of
 * a small download's 518,000 instructions (docs/benchmarks.md). A route's own serializers (a
 * host's `logSerializers` on a plugin around ours) are then given our `req`.
 * Otherwise the scope gets `redactingChildLogger`.
 */
export function redactRequestLogs (scope: FastifyInstance): void {
  const serializers = (scope.log as unknown as Record<symbol, Record<string, unknown> | undefined>)[PINO_SERIALIZERS]
  // Fastify's default factory is told by its name: if that changes, the scope gets ours (slower, still redacting).
  if (serializers?.req !== redactingRequestSerializer || scope.childLoggerFactory.name !== 'defaultChildLoggerFactory') {
    scope.setChildLoggerFactory(redactingChildLogger)
    return
  }
  scope.addHook('onRoute', keepRedactingSerializer)
}

function keepRedactingSerializer (route: RouteOptions): void {
  const serializers = route.logSerializers
  if (serializers == null || serializers.req === undefined || serializers.req === redactingRequestSerializer) return
  route.logSerializers = Object.assign(Object.create(serializers), { req: redactingRequestSerializer })
}
