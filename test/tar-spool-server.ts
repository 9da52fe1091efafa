// A host with the plugin in a process of its own, for the tar spool tests
// that kill it. Dataset acme/shop model 1 dataset 1 has one entity whose
// source hands out about 1 MB of rows and then waits until the client
// leaves, so a tar download holds a spool file for as long as the process
// lives. Env: SPOOL_DIR (tarSpool.directory). Prints one JSON line
// {"port","key"} once listening; SIGTERM closes gracefully.
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import dataEndpoints, { SqliteStorage, type DatasetSource } from '../lib/index.js'
import { MemoryJobs } from './fixtures.js'

const ADMIN = { 'x-permissions': 'ManageAPIKeys' }

const datasets: DatasetSource = {
  async getDataset (ref) {
    if (ref.resourceSequence !== 1) return null
    return {
      name: 'stalled',
      entities: [{ name: 'stalled', columns: [{ name: 'id', type: 'integer' }, { name: 'text', type: 'text' }] }],
      async * rows (_entity, { signal }) {
        for (let i = 0; i < 1000; i++) yield [i, 'x'.repeat(1000)]
        while (!signal.aborted) await sleep(50)
      }
    }
  }
}

const jobs = new MemoryJobs()
// Connections still open at close are cut, so a stalled download cannot hold it.
const app = Fastify({ forceCloseConnections: true })
await app.register(dataEndpoints, {
  storage: new SqliteStorage({ filename: ':memory:' }),
  datasets,
  pipelines: jobs,
  jobs,
  bcryptCost: 4,
  tarSpool: { directory: String(process.env.SPOOL_DIR), memoryPerEntry: 16 * 1024 },
  getPermissions: (request) => String(request.headers['x-permissions'] ?? '').split(',')
})
await app.listen({ port: 0, host: '127.0.0.1' })

const created = (await app.inject({ method: 'POST', url: '/api-keys/acme/shop/keys', headers: ADMIN, payload: { purpose: 'spool' } })).json()
await app.inject({ method: 'PUT', url: '/api-keys/acme/shop/endpoints/1/dataset/1', headers: ADMIN, payload: { keyIds: [created.id] } })
const address = app.server.address()
if (address === null || typeof address === 'string') throw new Error('not listening on a port')
console.log(JSON.stringify({ port: address.port, key: created.key }))

process.once('SIGTERM', () => {
  app.close().then(() => process.exit(0), () => process.exit(1))
})
