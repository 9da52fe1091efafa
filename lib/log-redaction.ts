import type { FastifyBaseLogger, FastifyRequest, FastifyServerOptions } from 'fastify'
import { percentDecoded, redactKeys } from './api-key.js'

/** `api_key=<value>` with the value replaced, whatever the case or encoding of the name. */
function redactApiKeyParam (pair: string): string {
  const eq = pair.indexOf('=')
  if (eq < 0 || percentDecoded(pair.slice(0, eq)).toLowerCase() !== 'api_key') return pair
  return `${pair.slice(0, eq)}=[redacted]`
}

/**
 * A URL with the value of every `api_key` parameter replaced, and every key
 * masked wherever it sits, plain or percent-encoded.
 */
export function redactUrl (url: string): string {
  const q = url.indexOf('?')
  const redacted = q < 0 ? url : url.slice(0, q + 1) + url.slice(q + 1).split('&').map(redactApiKeyParam).join('&')
  return redactKeys(redacted)
}

/**
 * A pino `req` serializer that never logs a key: the URL has `api_key`
 * redacted and no header is logged. The plugin uses it on its own routes;
 * hosts should pass it to their logger too (README, "Security considerations"),
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

type ChildLoggerFactory = NonNullable<FastifyServerOptions['childLoggerFactory']>

/** A child logger factory whose `req` serializer is `redactingRequestSerializer`. */
export const redactingChildLogger: ChildLoggerFactory = function (logger, bindings, options) {
  return (logger as FastifyBaseLogger).child(bindings, {
    ...options,
    serializers: { ...options.serializers, req: redactingRequestSerializer }
  })
}
