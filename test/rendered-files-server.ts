// A host with the plugin in a process of its own, for the test that kills
// it: dataset acme/shop model 1 dataset 1 has a `revision`, so its parquet
// download is rendered into the rendered-files folder under RENDER_DIR.
// Prints one JSON line {"port","key"} once listening; SIGTERM closes gracefully.
import Fastify from 'fastify'
import dataEndpoints, { SqliteStorage, type DatasetSource } from '../lib/index.js'
import { MemoryJobs } from './fixtures.js'

const ADMIN = { 'x-permissions': 'ManageAPIKeys' }

const datasets: DatasetSource = {
  async getDataset (ref) {
    if (ref.resourceSequence !== 1) return null
    return {
      name: 'numbers',
      revision: 'r1',
      entities: [{ name: 'numbers', columns: [{ name: 'id', type: 'integer' }, { name: 'text', type: 'text' }] }],
      * rows () {
        for (let i = 0; i < 20_000; i++) yield [i, `row ${i}`]
      }
    }
  }
}

const jobs = new MemoryJobs()
const app = Fastify({ forceCloseConnections: true })
await app.register(dataEndpoints, {
  storage: new SqliteStorage({ filename: ':memory:' }),
  datasets,
  pipelines: jobs,
  jobs,
  bcryptCost: 4,
  renderedFiles: { directory: String(process.env.RENDER_DIR) },
  getPermissions: (request) => String(request.headers['x-permissions'] ?? '').split(',')
})
await app.listen({ port: 0, host: '127.0.0.1' })

const created = (await app.inject({ method: 'POST', url: '/api-keys/acme/shop/keys', headers: ADMIN, payload: { purpose: 'render' } })).json()
await app.inject({ method: 'PUT', url: '/api-keys/acme/shop/endpoints/1/dataset/1', headers: ADMIN, payload: { keyIds: [created.id] } })
const address = app.server.address()
if (address === null || typeof address === 'string') throw new Error('not listening on a port')
console.log(JSON.stringify({ port: address.port, key: created.key }))

process.once('SIGTERM', () => {
  app.close().then(() => process.exit(0), () => process.exit(1))
})
