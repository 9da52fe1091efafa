import fastifySwagger from '@fastify/swagger'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { PluginContext } from './context.js'
import { dataRoutes } from './data-routes.js'
import { sendError } from './error-reply.js'
import { NotFoundError } from './errors.js'
import { FailureThrottle } from './failure-throttle.js'
import { IdempotencyReleaser } from './idempotency-releaser.js'
import { jobRoute } from './job-route.js'
import { bcryptHasher } from './key-hasher.js'
import { KeyVerifier } from './key-verifier.js'
import { redactingChildLogger } from './log-redaction.js'
import { managementRoutes } from './management-routes.js'
import { managementUi } from './management-ui.js'
import { openapiRoute, swaggerOptions } from './openapi.js'
import { resolveOptions, type DataEndpointsOptions } from './options.js'
import type { Storage } from './storage.js'
import { UsageRecorder } from './usage-recorder.js'

export interface DataEndpointsDecorator {
  storage: Storage
  /** writes the batched `calls` and `updatedAt` now */
  flushUsage (): Promise<void>
}

declare module 'fastify' {
  interface FastifyInstance {
    dataEndpoints: DataEndpointsDecorator
  }
}

/**
 * Fastify's own 404 echoes and logs the URL, and with it any ?api_key=. Under
 * the plugin's prefixes a miss gets 404 {"message":"Not found"} instead,
 * decided in onRequest so that a body sent to nowhere is never parsed.
 */
function answerMissesWithNotFound (scope: FastifyInstance): void {
  // (Fastify's types omit these two options of setNotFoundHandler.)
  scope.setNotFoundHandler({
    onRequest: async () => { throw new NotFoundError() },
    errorHandler: sendError
  } as never, (request, reply) => sendError(new NotFoundError(), request, reply))
}

async function dataEndpoints (app: FastifyInstance, rawOptions: DataEndpointsOptions): Promise<void> {
  const options = resolveOptions(rawOptions)
  const hasher = options.hasher ?? bcryptHasher(options.bcryptCost)
  // Without a logger Fastify skips child loggers; keep that fast path.
  const logs = typeof app.log.level === 'string' && app.log.level !== 'silent'
  const ctx: PluginContext = {
    options,
    storage: options.storage,
    hasher,
    verifier: new KeyVerifier({
      hasher,
      cacheSize: options.verificationCacheSize,
      maxConcurrentHashes: options.maxConcurrentHashes,
      maxQueuedHashes: options.maxQueuedHashes
    }),
    usage: new UsageRecorder(options.storage, options.usageFlushInterval, app.log),
    idempotencyReleaser: new IdempotencyReleaser(options.storage, app.log),
    throttle: options.failureThrottle === false ? null : new FailureThrottle(options.failureThrottle),
    logs
  }

  app.decorate('dataEndpoints', {
    storage: ctx.storage,
    flushUsage: () => ctx.usage.flush()
  })
  // Fastify closes the server first, so in-flight requests have been counted
  // by the time the counters are flushed (and Idempotency-Key claims waiting
  // for release are tried a last time); then the storage closes.
  app.addHook('onClose', async () => {
    const released = ctx.idempotencyReleaser.close()
    try {
      await ctx.usage.close()
    } finally {
      await released
      if (options.closeStorage) await ctx.storage.close()
    }
  })

  // Each group of routes sits in its own encapsulated context: the key hook,
  // error handler and validator never touch the host's other routes.
  await app.register(async function dataEndpointsRoutes (routes) {
    // Our own @fastify/swagger, in our own context: it sees the routes
    // registered below it (ours) and never the host's; a host's swagger is
    // left alone.
    await routes.register(fastifySwagger, swaggerOptions(options))
    await routes.register(async function apiRoutes (api) {
      // Every request logger under /api, the 404s' included, logs the URL with
      // api_key redacted, whatever serializers the host's logger has.
      if (logs) api.setChildLoggerFactory(redactingChildLogger)
      if (options.apiNotFoundHandler) answerMissesWithNotFound(api)
      await api.register(dataRoutes, { ctx })
      await api.register(jobRoute, { ctx })
    }, { prefix: '/api' })
    await routes.register(async function management (scope) {
      if (logs) scope.setChildLoggerFactory(redactingChildLogger)
      if (options.apiNotFoundHandler) answerMissesWithNotFound(scope)
      await scope.register(managementRoutes, { ctx })
      await scope.register(openapiRoute, { ctx })
      if (options.managementUi) await scope.register(managementUi, { prefix: '/ui' })
    }, { prefix: options.managementPrefix })
  })
}

export default fp(dataEndpoints, { fastify: '5.x', name: 'fastify-data-endpoints' })

export { dataEndpoints }
export type { DataEndpointsOptions } from './options.js'
export { MANAGE_API_KEYS } from './options.js'
export type * from './storage.js'
export { PrefixTakenError } from './storage.js'
export { UsageInDoubtError, type UsageFate } from './usage-in-doubt.js'
export type * from './dataset-source.js'
export type * from './pipeline-runner.js'
export type * from './job-source.js'
export type { KeyHasher } from './key-hasher.js'
export { bcryptHasher } from './key-hasher.js'
export { SqliteStorage, type SqliteStorageOptions } from './sqlite-storage.js'
export { PgStorage, type PgStorageOptions } from './pg-storage.js'
export { redactingRequestSerializer, redactUrl } from './log-redaction.js'
export { frameworkErrorReply } from './framework-errors.js'
export * as errors from './errors.js'
