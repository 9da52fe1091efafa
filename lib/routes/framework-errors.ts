import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { redactUrl } from './log-redaction.js'

// Fastify answers a malformed URL (400) and an over-long path parameter (414)
// itself, before any route or plugin runs, quoting the URL in the body,
// `?api_key=` included. Only a server option can change that answer.

const MESSAGES: Record<string, string> = {
  FST_ERR_BAD_URL: 'Malformed URL',
  FST_ERR_MAX_PARAM_LENGTH: 'URI Too Long'
}

/**
 * For Fastify's `frameworkErrors` option: answers the errors Fastify raises
 * before routing with Fastify's status and a `{ message }` that never quotes
 * the URL. `Fastify({ frameworkErrors: frameworkErrorReply })`.
 */
export function frameworkErrorReply (error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  const status = typeof error.statusCode === 'number' && error.statusCode >= 400 ? error.statusCode : 500
  void reply.code(status).header('cache-control', 'no-store').type('application/json; charset=utf-8')
    .send({ message: MESSAGES[error.code] ?? redactUrl(error.message) })
}
