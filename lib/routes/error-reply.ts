import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { redactKeys } from '../keys/api-key.js'
import { PATTERN_MESSAGES } from './schemas.js'

function statusOf (error: FastifyError): number {
  // Only our own catalogue and Fastify's request errors (bad JSON, body too
  // large, ...) choose a status; anything else thrown is a server error.
  const own = typeof error.code === 'string' && (error.code.startsWith('FDE_') || error.code.startsWith('FST_'))
  const status = error.statusCode
  return own && typeof status === 'number' && status >= 400 && status < 600 ? status : 500
}

function messageOf (error: FastifyError): string {
  if (error.validation !== undefined && error.validation.length > 0) {
    const where = error.validationContext ?? 'request'
    // TypeBox reports an unknown field first as "schema is false" at its path;
    // name the field instead, which is what a caller needs to fix.
    const v = error.validation[0]
    const path = v.instancePath.replace(/^\//, '').replaceAll('/', '.')
    if (v.schemaPath.endsWith('/additionalProperties') || v.keyword === 'additionalProperties') {
      const extra = (v.params as { additionalProperties?: string[] | string, additionalProperty?: string })
      const name = extra.additionalProperty ?? [extra.additionalProperties ?? []].flat()[0] ?? path
      return `${where}: unknown field "${name}"`
    }
    // A pattern's failure says what the value must be, not the regex; an
    // enum's names the values; a date-time's shows one.
    const described = v.keyword === 'pattern'
      ? PATTERN_MESSAGES.get(String(v.params.pattern))
      : v.keyword === 'enum' && Array.isArray(v.params.allowedValues)
        ? `must be one of ${v.params.allowedValues.join(', ')}`
        : v.keyword === 'format' && v.params.format === 'date-time'
          ? 'must be an ISO 8601 date-time with a time zone, e.g. 2030-01-01T00:00:00Z'
          : undefined
    return `${where}${path === '' ? '' : '.' + path}: ${described ?? v.message ?? 'is invalid'}`
  }
  return error.message || 'Internal Server Error'
}

/**
 * What a 500's `cause` says, for its log line only (a storage failure's
 * answer says `Internal server error`): key-shaped text masked, three levels
 * at most.
 */
function causeOf (error: unknown, depth = 0): unknown {
  const cause = (error as { cause?: unknown } | null)?.cause
  if (cause === undefined || cause === null || depth >= 3) return undefined
  if (!(cause instanceof Error)) return redactKeys(String(cause))
  const { code, detail } = cause as { code?: unknown, detail?: unknown }
  return {
    type: cause.name,
    code,
    message: redactKeys(cause.message),
    ...(typeof detail === 'string' ? { detail: redactKeys(detail) } : {}),
    stack: redactKeys(cause.stack ?? ''),
    cause: causeOf(cause, depth + 1)
  }
}

const errorMessages = new WeakMap<FastifyRequest, string>()
const errorCodes = new WeakMap<FastifyRequest, string>()

/** The message an error response of this request carried, for its log line. */
export function errorMessageOf (request: FastifyRequest): string | undefined {
  return errorMessages.get(request)
}

/** The code of the error a response of this request answered (`FDE_UNKNOWN_KEY`), for metrics. */
export function errorCodeOf (request: FastifyRequest): string | undefined {
  return errorCodes.get(request)
}

/** Records why a response was cut short after its headers (no error response could say it), for its log line. */
export function noteFailure (request: FastifyRequest, message: string): void {
  errorMessages.set(request, redactKeys(message))
}

export function sendError (error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const status = statusOf(error)
  const message = redactKeys(messageOf(error))
  errorMessages.set(request, message)
  if (typeof error.code === 'string') errorCodes.set(request, error.code)
  if (status >= 500) {
    const err = { type: error.name, code: error.code, message: message, stack: redactKeys(error.stack ?? '') }
    const cause = causeOf(error)
    request.log.error({ err, ...(cause === undefined ? {} : { cause }), statusCode: status }, message)
  }
  const { headers, body } = error as { headers?: Record<string, string>, body?: Record<string, string> }
  if (headers !== undefined) reply.headers(headers)
  return reply.code(status).type('application/json; charset=utf-8').send({ ...body, message })
}
