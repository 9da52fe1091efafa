import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify'
import type { Test } from 'tap'
import dataEndpoints, { SqliteStorage, type DataEndpointsOptions, type Storage } from '../lib/index.js'
import { MemoryDatasets, MemoryJobs, PIPELINE_REF, SALES_REF, salesDataset } from './fixtures.js'

export const ADMIN = { 'x-permissions': 'ManageAPIKeys' }

export interface TestApp {
  app: FastifyInstance
  storage: Storage
  datasets: MemoryDatasets
  jobs: MemoryJobs
}

/**
 * Builds a host with the plugin on an in-memory SQLite store, sample data at
 * acme/shop model 1 (dataset 1 `sales`, pipeline 1 `refresh`), and
 * `x-permissions` as the caller's permission list. Closed after the test.
 */
export async function buildApp (t: Test, options: Partial<DataEndpointsOptions> = {}, fastifyOptions: FastifyServerOptions = {}): Promise<TestApp> {
  const storage = options.storage ?? new SqliteStorage({ filename: ':memory:' })
  const datasets = new MemoryDatasets().add(SALES_REF, salesDataset())
  const jobs = new MemoryJobs().addPipeline(PIPELINE_REF, 'refresh')
  const app = Fastify(fastifyOptions)
  await app.register(dataEndpoints, {
    storage,
    datasets,
    pipelines: jobs,
    jobs,
    bcryptCost: 4,
    getPermissions: (request) => String(request.headers['x-permissions'] ?? '').split(',').filter(Boolean),
    ...options
  })
  await app.ready()
  t.teardown(() => app.close())
  return { app, storage, datasets, jobs }
}

const project = '/api-keys/acme/shop'

/** Creates a key through the management API; returns its record and value. */
export async function createKey (app: FastifyInstance, purpose = 'test', isActive = true): Promise<{ id: string, key: string, prefix: string }> {
  const res = await app.inject({ method: 'POST', url: `${project}/keys`, headers: ADMIN, payload: { purpose, isActive } })
  if (res.statusCode !== 201) throw new Error(`createKey: ${res.statusCode} ${res.body}`)
  return res.json()
}

/** Assigns keys to an endpoint through the management API. */
export async function assignKeys (app: FastifyInstance, type: 'dataset' | 'pipeline', keyIds: string[], resource = 1): Promise<void> {
  const res = await app.inject({
    method: 'PUT', url: `${project}/endpoints/1/${type}/${resource}`, headers: ADMIN, payload: { keyIds }
  })
  if (res.statusCode !== 200 && res.statusCode !== 201) throw new Error(`assignKeys: ${res.statusCode} ${res.body}`)
}

export const DATASET_URL = '/api/acme/shop/model/1/dataset/1'
export const PIPELINE_URL = '/api/acme/shop/model/1/pipeline/1'

/** Runs `tasks` with at most `width` at once. */
export async function inParallel<T> (width: number, tasks: Array<() => Promise<T>>): Promise<T[]> {
  const results: T[] = []
  let next = 0
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < tasks.length) {
      const i = next++
      results[i] = await tasks[i]()
    }
  }))
  return results
}
