// The plugin as the management and usage benches register it: a store of
// the bench's choice, the sample `sales` dataset and a pipeline in memory,
// bcrypt cost 4 (new keys and regenerations cost one bcrypt each; at 4 they
// do not hide the rest), no management page, and the caller's permissions
// from the `x-permissions` header (ADMIN holds ManageAPIKeys). Not ready
// yet: a bench may add routes of its own beside the plugin's.
import Fastify, { type FastifyInstance } from 'fastify'
import dataEndpoints, { type Storage } from '../../lib/index.js'
import { MemoryDatasets, MemoryJobs, PIPELINE_REF, SALES_REF, salesDataset } from '../fixtures.js'

export const ADMIN = { 'x-permissions': 'ManageAPIKeys' }

export async function managementBenchApp (storage: Storage): Promise<FastifyInstance> {
  const jobs = new MemoryJobs().addPipeline(PIPELINE_REF, 'refresh')
  const app = Fastify()
  await app.register(dataEndpoints, {
    storage,
    datasets: new MemoryDatasets().add(SALES_REF, salesDataset()),
    pipelines: jobs,
    jobs,
    bcryptCost: 4,
    managementUi: false,
    getPermissions: (request) => String(request.headers['x-permissions'] ?? '').split(',')
  })
  return app
}
