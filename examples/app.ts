import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyServerOptions } from 'fastify'
import { collectDefaultMetrics, Registry } from 'prom-client'
import dataEndpoints, {
  frameworkErrorReply, MANAGE_API_KEYS, PgStorage, redactingRequestSerializer, SqliteStorage, type Storage
} from '../lib/index.js'
import { adminTokenPermissions } from './admin-auth.js'
import type { ExampleConfig } from './config.js'
import { PgJobStore, SqliteJobStore, type JobStore } from './job-store.js'
import { SampleJobs } from './jobs.js'
import { exampleDatabaseFile, openExampleDatabase, SampleDatasets, seedSampleData } from './sample-datasets.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** the example's dataset source */
    sampleDatasets: SampleDatasets
  }
}

export type AppConfig = Pick<ExampleConfig, 'dataDir' | 'adminToken' | 'eventsRows' | 'logLevel'> &
  Partial<Pick<ExampleConfig, 'databaseUrl' | 'databaseSchema'>> & {
  /** false: the datasets without their revision (SampleDatasets), as a host that has none; default true */
  revisions?: boolean
}

/** The plugin's storage: keys, endpoints and counters. */
export function openStorage (config: Pick<ExampleConfig, 'dataDir' | 'databaseUrl' | 'databaseSchema'>): Storage {
  // Several instances share one PostgreSQL database; one machine needs only SQLite.
  if (config.databaseUrl !== undefined) {
    return new PgStorage({ connectionString: config.databaseUrl, schema: config.databaseSchema })
  }
  // One process owns the file (as it owns the jobs, above): exclusive says so to
  // SQLite, which then refuses a second process on it instead of sharing, and
  // the key check of every request skips asking whether another process wrote.
  return new SqliteStorage({ filename: join(config.dataDir, 'data-endpoints.db'), exclusive: true })
}

/** The example's pino settings: JSON lines to stdout that never carry a key. */
export function exampleLoggerOptions (level: string): Exclude<FastifyServerOptions['logger'], boolean | undefined> {
  return {
    level,
    // Request lines show the URL with api_key redacted and no headers.
    // (Fastify types this serializer with the raw request; it is given Fastify's.)
    serializers: { req: redactingRequestSerializer as unknown as (req: unknown) => Record<string, unknown> },
    // At trace level Fastify logs a request Node could not parse with its
    // raw bytes, key included.
    redact: { paths: ['err.rawPacket'], remove: true }
  }
}

/**
 * The example host: the plugin with sample datasets, pipelines and jobs, all
 * in SQLite files under `config.dataDir`. Ready, not listening.
 */
export async function buildExampleApp (config: AppConfig): Promise<FastifyInstance> {
  mkdirSync(config.dataDir, { recursive: true })
  // First: on SQLite the storage takes its file for this process alone, so a
  // second server on the same folder stops here, before it fails the jobs
  // the first one is running.
  const storage = openStorage(config)

  // The sample data lives in a database of its own, apart from the plugin's
  // storage, so that another storage can take its place alone. The jobs
  // live beside the sample data on one machine, and in PostgreSQL with
  // DATABASE_URL, where every instance can answer for every job.
  const exampleFile = exampleDatabaseFile(config.dataDir)
  let exampleDb: ReturnType<typeof openExampleDatabase>
  try {
    exampleDb = openExampleDatabase(exampleFile)
  } catch (err) {
    await storage.close()
    throw err
  }
  let datasets: SampleDatasets | undefined
  let jobStore: JobStore | undefined
  let jobs: SampleJobs | undefined
  // The app's logger, once the app is made: a connection may be closed before.
  const logs: { to?: FastifyBaseLogger } = {}
  // Timers first, then the connections they write through.
  const closeExample = async (): Promise<void> => {
    try {
      await jobs?.close()
    } finally {
      await jobStore?.close().catch(() => {})
      datasets?.close()
      if (exampleDb.open) exampleDb.close()
    }
  }
  try {
    seedSampleData(exampleDb, config.eventsRows)
    datasets = new SampleDatasets(exampleFile, { revisions: config.revisions })
    if (config.databaseUrl === undefined) {
      jobStore = new SqliteJobStore(exampleDb)
    } else {
      const pgJobs = new PgJobStore({ connectionString: config.databaseUrl, schema: config.databaseSchema ?? 'data_endpoints' },
        (err) => { logs.to?.warn({ err }, 'the database closed an idle job store connection; the next query opens another') })
      jobStore = pgJobs
      await pgJobs.open()
    }
    jobs = new SampleJobs(jobStore, (err, jobId) => { app.log.error({ err, jobId }, 'a job step could not be recorded') })
    // One process owns the SQLite file: whatever is unfinished now was cut
    // short by its last run. Instances sharing PostgreSQL leave each other's
    // running jobs alone, and fail only those that stopped moving.
    await jobs.failAbandoned(config.databaseUrl === undefined ? 0 : undefined)
  } catch (err) {
    await closeExample().catch(() => {})
    await storage.close().catch(() => {})
    throw err
  }

  const app = Fastify({
    logger: exampleLoggerOptions(config.logLevel),
    // A malformed URL or an over-long path parameter: answered without quoting the URL.
    frameworkErrors: frameworkErrorReply
  })
  logs.to = app.log
  app.addHook('onClose', closeExample)
  // For tests and a curious host: the pools of prepared statements show through it.
  app.decorate('sampleDatasets', datasets)

  // Fastify's own 404 answer and log line quote the URL, which may carry ?api_key=.
  app.setNotFoundHandler((request, reply) => reply.code(404).send({ message: 'Not found' }))

  // Prometheus metrics: the plugin's, and Node's own, in one registry, served
  // to the admin token only, as the management routes are.
  const permissions = adminTokenPermissions(config.adminToken)
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })
  app.get('/metrics', async (request, reply) => {
    if (!permissions(request).includes(MANAGE_API_KEYS)) return reply.code(403).send({ message: 'Not authorized' })
    return reply.header('cache-control', 'no-store').type(registry.contentType).send(await registry.metrics())
  })

  try {
    await app.register(dataEndpoints, {
      storage,
      datasets,
      pipelines: jobs,
      jobs,
      getPermissions: permissions,
      metrics: { registry },
      // Audit entries name who made each change. The example has one admin
      // token, so one actor; a real host names the signed-in user.
      getActor: () => 'admin'
      // requireHttps stays at its default (true): the server listens on
      // 127.0.0.1 only, and the plugin lets loopback clients use plain HTTP.
      // Put it behind a TLS proxy (with trustProxy) before exposing it.
    })
    await app.ready()
  } catch (err) {
    await app.close().catch(() => {})
    // Safe twice: onClose may or may not have run after a failed start.
    await closeExample().catch(() => {})
    await storage.close().catch(() => {})
    throw err
  }
  return app
}
