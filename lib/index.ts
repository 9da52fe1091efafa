import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { PluginContext } from './context.js'
import { dataRoutes } from './data-routes.js'
import { FailureThrottle } from './failure-throttle.js'
import { jobRoute } from './job-route.js'
import { bcryptHasher } from './key-hasher.js'
import { KeyVerifier } from './key-verifier.js'
import { redactingRequestSerializer } from './log-redaction.js'
import { managementRoutes } from './management-routes.js'
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

async function dataEndpoints (app: FastifyInstance, rawOptions: DataEndpointsOptions): Promise<void> {
  const options = resolveOptions(rawOptions)
  const hasher = options.hasher ?? bcryptHasher(options.bcryptCost)
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
    throttle: options.failureThrottle === false ? null : new FailureThrottle(options.failureThrottle)
  }

  app.decorate('dataEndpoints', {
    storage: ctx.storage,
    flushUsage: () => ctx.usage.flush()
  })
  // Fastify closes the server first, so in-flight requests have been counted
  // by the time the counters are flushed; then the storage closes.
  app.addHook('onClose', async () => {
    try {
      await ctx.usage.close()
    } finally {
      if (options.closeStorage) await ctx.storage.close()
    }
  })

  // Each group of routes sits in its own encapsulated context: the key hook,
  // error handler and validator never touch the host's other routes.
  // (Fastify types serializers as returning strings; pino takes objects.)
  const logSerializers = { req: redactingRequestSerializer } as unknown as Record<string, (value: unknown) => string>
  await app.register(dataRoutes, { ctx, logSerializers })
  await app.register(jobRoute, { ctx, logSerializers })
  await app.register(managementRoutes, { prefix: options.managementPrefix, ctx, logSerializers })
}

export default fp(dataEndpoints, { fastify: '5.x', name: 'fastify-data-endpoints' })

export { dataEndpoints }
export type { DataEndpointsOptions } from './options.js'
export { MANAGE_API_KEYS } from './options.js'
export type * from './storage.js'
export { PrefixTakenError } from './storage.js'
export type * from './dataset-source.js'
export type * from './pipeline-runner.js'
export type * from './job-source.js'
export type { KeyHasher } from './key-hasher.js'
export { bcryptHasher } from './key-hasher.js'
export { SqliteStorage, type SqliteStorageOptions } from './sqlite-storage.js'
export { PgStorage, type PgStorageOptions } from './pg-storage.js'
export { redactingRequestSerializer, redactUrl } from './log-redaction.js'
export * as errors from './errors.js'
