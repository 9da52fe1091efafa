import { constants } from 'node:fs'
import { access, stat } from 'node:fs/promises'
import { join } from 'node:path'
import fastifySwagger from '@fastify/swagger'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { PluginContext } from './routes/context.js'
import { dataRoutes } from './routes/data-routes.js'
import { sendError } from './routes/error-reply.js'
import { InvalidOptionError, NotFoundError } from './errors.js'
import { FailureThrottle } from './keys/failure-throttle.js'
import { removeStaleSpoolFolders } from './formats/spool-folder.js'
import { TarSpool, type TarSpoolUsage } from './formats/tar-spool.js'
import { ParquetEncoders } from './formats/parquet-encoders.js'
import { RenderedFiles } from './downloads/rendered-files.js'
import { IdempotencyReleaser } from './routes/idempotency-releaser.js'
import { jobRoute } from './routes/job-route.js'
import { bcryptHasher } from './keys/key-hasher.js'
import { KeyVerifier } from './keys/key-verifier.js'
import { LinkSigner } from './keys/link-tokens.js'
import { redactRequestLogs } from './routes/log-redaction.js'
import { managementRoutes } from './routes/management-routes.js'
import { managementUi } from './routes/management-ui.js'
import { openapiRoute, swaggerOptions } from './routes/openapi.js'
import { resolveOptions, type DataEndpointsOptions } from './options.js'
import type { Storage } from './storage/storage.js'
import { guardStorage } from './storage/guarded-storage.js'
import { PluginMetrics } from './metrics.js'
import { RenderedBodies } from './downloads/rendered-bodies.js'
import { UsageRecorder } from './storage/usage-recorder.js'
import { DownloadSlots } from './keys/download-slots.js'
import { KeyLimiter } from './keys/key-limits.js'
import { Housekeeping } from './storage/housekeeping.js'

export interface DataEndpointsDecorator {
  storage: Storage
  /** writes the batched `calls` and `updatedAt` now */
  flushUsage (): Promise<void>
  /** the tar spool's disk budget in use and the downloads waiting for it (for metrics) */
  tarSpoolUsage (): TarSpoolUsage
  /**
   * Adds a link-signing secret, which signs new links from now on (on other
   * instances after their next read, `linkSecretRefreshInterval`); links
   * signed before keep working until their secret is retired. Answers its id.
   */
  rotateLinkSecret (): Promise<string>
  /** Deletes an older link-signing secret: the links it signed stop. */
  retireLinkSecret (id: string): Promise<boolean>
  /** The link-signing secrets' ids, oldest first, and the one that signs. */
  linkSecretIds (): Promise<{ ids: string[], signing: string }>
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

/**
 * Checks the tar spool's parent folder, and removes the spool folders that
 * processes which no longer run left there (a kill -9 skips onClose).
 */
/**
 * Checks a folder the plugin makes its own folder in (the tar spool's, the
 * rendered files'), and removes what processes that no longer run left there.
 */
async function prepareSpoolDirectory (app: FastifyInstance, option: string, what: string, directory: string): Promise<void> {
  // Not made if missing: a mistyped path should fail here, not grow folders.
  try {
    if (!(await stat(directory)).isDirectory()) throw new Error('not a directory')
    await access(directory, constants.W_OK | constants.X_OK)
  } catch (err) {
    throw new InvalidOptionError(`option "${option}" must be an existing folder this process can write to (${directory}: ${(err as Error).message})`)
  }
  const { removed, failed } = await removeStaleSpoolFolders(directory)
  for (const name of removed) app.log.info({ folder: join(directory, name) }, `removed a ${what} folder whose process no longer runs`)
  for (const { name, error } of failed) {
    app.log.warn({ folder: join(directory, name), err: error }, `could not remove a ${what} folder whose process no longer runs`)
  }
}

async function dataEndpoints (app: FastifyInstance, rawOptions: DataEndpointsOptions): Promise<void> {
  const options = resolveOptions(rawOptions)
  await prepareSpoolDirectory(app, 'tarSpool.directory', 'tar spool', options.tarSpool.directory)
  if (options.renderedFiles.maxBytes > 0 && options.renderedFiles.directory !== options.tarSpool.directory) {
    await prepareSpoolDirectory(app, 'renderedFiles.directory', 'rendered files', options.renderedFiles.directory)
  }
  const hasher = options.hasher ?? bcryptHasher(options.bcryptCost)
  // Made first: the verifier, the recorder and the routes report to it.
  let metrics: PluginMetrics | null = null
  const tarSpool = new TarSpool(options.tarSpool)
  // Without a logger Fastify skips child loggers; keep that fast path. A
  // silent logger counts as one: the host may raise its level at run time.
  const logs = typeof app.log.level === 'string'
  // A storage failure answers 500 `Internal server error`, its detail logged.
  const storage = guardStorage(options.storage)
  const usage = new UsageRecorder(options.storage, options.usageFlushInterval, app.log, () => metrics?.flushFailed())
  const downloadSlots = new DownloadSlots(storage, options.downloadSlotLease, app.log)
  const ctx: PluginContext = {
    options,
    storage,
    links: new LinkSigner(storage, { refreshMs: options.linkSecretRefreshInterval }),
    hasher,
    verifier: new KeyVerifier({
      hasher,
      cacheSize: options.verificationCacheSize,
      maxConcurrentHashes: options.maxConcurrentHashes,
      maxQueuedHashes: options.maxQueuedHashes,
      maxQueuedHashesPerKey: options.maxQueuedHashesPerKey,
      observe: options.metrics === undefined ? undefined : (memo, seconds) => metrics?.verified(memo, seconds)
    }),
    usage,
    housekeeping: new Housekeeping(options.storage, options, app.log),
    idempotencyReleaser: new IdempotencyReleaser(options.storage, app.log),
    throttle: options.failureThrottle === false ? null : new FailureThrottle(options.failureThrottle),
    tarSpool,
    renderedBodies: options.renderedBodyCacheBytes === 0 ? null : new RenderedBodies(options.renderedBodyCacheBytes),
    renderedFiles: options.renderedFiles.maxBytes === 0 ? null : new RenderedFiles(options.renderedFiles),
    parquetEncoders: new ParquetEncoders({ threads: options.parquetThreads, maxWaiting: options.parquetMaxWaiting, batchBytes: options.columnarBatchBytes }),
    metrics: null,
    logs,
    downloadSlots,
    limiter: new KeyLimiter({ storage, usage, slots: downloadSlots, get metrics () { return metrics } })
  }
  if (options.metrics !== undefined) {
    const { registry } = options.metrics
    metrics = ctx.metrics = new PluginMetrics(registry, {
      queuedComparisons: () => ctx.verifier.queuedComparisons,
      tarSpoolBytes: () => tarSpool.usage().reservedBytes
    })
    // So that a host can register the plugin again (a restart in tests) in the same registry.
    app.addHook('onClose', async () => { metrics?.unregister() })
  }

  app.decorate('dataEndpoints', {
    storage: options.storage,
    flushUsage: () => ctx.usage.flush(),
    tarSpoolUsage: () => ctx.tarSpool.usage(),
    rotateLinkSecret: () => ctx.links.rotate(),
    retireLinkSecret: (id) => ctx.links.retire(id),
    linkSecretIds: () => ctx.links.secretIds()
  })
  // Fastify closes the server first: tar downloads still running then
  // (injected, or cut by the host's forceCloseConnections) are stopped, and
  // the spool folder goes.
  app.addHook('onClose', async () => {
    await ctx.tarSpool.close().catch((err: Error) => { app.log.warn({ err, folder: ctx.tarSpool.folder }, 'could not remove the tar spool folder') })
  })
  // Likewise the rendered files and their folder, and the encoding threads.
  app.addHook('onClose', async () => {
    await ctx.renderedFiles?.close().catch((err: Error) => { app.log.warn({ err, folder: ctx.renderedFiles?.folder }, 'could not remove the rendered files folder') })
    await ctx.parquetEncoders.close()
  })
  // In-flight requests have been counted by the time the counters are flushed
  // (and Idempotency-Key claims waiting for release are tried a last time);
  // then the storage closes.
  app.addHook('onClose', async () => {
    const released = ctx.idempotencyReleaser.close()
    const pruned = ctx.housekeeping.close()
    // Slots still held (a download the server's close cut) are freed, not left to their leases.
    await ctx.downloadSlots.close()
    try {
      await ctx.usage.close()
    } finally {
      await released
      await pruned
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
      if (logs) redactRequestLogs(api)
      if (options.apiNotFoundHandler) answerMissesWithNotFound(api)
      await api.register(dataRoutes, { ctx })
      await api.register(jobRoute, { ctx })
    }, { prefix: '/api' })
    await routes.register(async function management (scope) {
      if (logs) redactRequestLogs(scope)
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
export type { TarSpoolOptions, TarSpoolUsage } from './formats/tar-spool.js'
export type { MetricsOptions } from './metrics.js'
export { MANAGE_API_KEYS } from './options.js'
export type * from './storage/storage.js'
export { AUDIT_ACTIONS, InvalidCursorError, MAX_ENDPOINT_KEYS, PrefixTakenError, USAGE_OUTCOMES } from './storage/storage.js'
export { UsageInDoubtError, type UsageFate } from './storage/usage-in-doubt.js'
export type * from './host/dataset-source.js'
export type * from './host/pipeline-runner.js'
export type * from './host/job-source.js'
export type { KeyHasher } from './keys/key-hasher.js'
export { bcryptHasher } from './keys/key-hasher.js'
export { SqliteStorage, type SqliteStorageOptions } from './storage/sqlite-storage.js'
export { PgStorage, type PgStorageOptions } from './storage/pg-storage.js'
export { redactingRequestSerializer, redactUrl } from './routes/log-redaction.js'
export { frameworkErrorReply } from './routes/framework-errors.js'
export * as errors from './errors.js'
