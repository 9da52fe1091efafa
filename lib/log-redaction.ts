import type { FastifyBaseLogger, FastifyRequest, FastifyServerOptions } from 'fastify'
import { redactKeys } from './api-key.js'

const API_KEY_PARAM = /([?&]api_key=)[^&#]*/gi

/** A URL with the value of every `api_key` parameter replaced, and key-shaped text masked. */
export function redactUrl (url: string): string {
  return redactKeys(url.replace(API_KEY_PARAM, '$1[redacted]'))
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
    host: request.host,
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
