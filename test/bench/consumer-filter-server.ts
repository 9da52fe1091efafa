// The server of the consumer-parameters benchmark (consumer-filter.ts): the
// plugin over the example's SampleDatasets, with `events` of EVENTS_ROWS rows
// (default 1,000,000) seeded as the example seeds it (an index on ts), and its
// revision dropped, so that no download is served from the rendered caches:
// every download reads its rows. Prints "key <api key>" and "port <n>".
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify from 'fastify'
import dataEndpoints, { SqliteStorage, type Dataset, type DatasetSource } from '../../lib/index.js'
import { exampleDatabaseFile, openExampleDatabase, SampleDatasets, seedSampleData } from '../../examples/sample-datasets.js'
import { MemoryJobs } from '../fixtures.js'

const rows = Number(process.env.EVENTS_ROWS ?? 1_000_000)
const dir = mkdtempSync(join(tmpdir(), 'fde-bench-consumer-'))
const writer = openExampleDatabase(exampleDatabaseFile(dir))
seedSampleData(writer, rows)
writer.close()
const sample = new SampleDatasets(exampleDatabaseFile(dir))
const withoutRevision = new Map<number, Dataset>()
const datasets: DatasetSource = {
  async getDataset (ref) {
    let dataset = withoutRevision.get(ref.resourceSequence)
    if (dataset === undefined) {
      const found = await sample.getDataset(ref)
      if (found === null) return null
      const { revision, ...rest } = found
      void revision
      dataset = rest
      withoutRevision.set(ref.resourceSequence, dataset)
    }
    return dataset
  }
}
const jobs = new MemoryJobs()
const app = Fastify({ logger: false })
await app.register(dataEndpoints, {
  storage: new SqliteStorage({ filename: join(dir, 'bench.db') }),
  datasets,
  pipelines: jobs,
  jobs,
  requireHttps: false,
  getPermissions: (request) => String(request.headers['x-permissions'] ?? '').split(',')
})
const admin = { 'x-permissions': 'ManageAPIKeys' }
const created = (await app.inject({ method: 'POST', url: '/api-keys/acme/shop/keys', headers: admin, payload: { purpose: 'bench' } })).json()
await app.inject({ method: 'PUT', url: '/api-keys/acme/shop/endpoints/1/dataset/2', headers: admin, payload: { keyIds: [created.id] } })
await app.listen({ host: '127.0.0.1', port: 0 })
const address = app.server.address()
if (address === null || typeof address === 'string') throw new Error('no port')
console.log(`key ${String(created.key)}`)
console.log(`port ${address.port}`)

process.on('SIGTERM', () => {
  app.close().then(() => {
    sample.close()
    rmSync(dir, { recursive: true, force: true })
    process.exit(0)
  }, () => process.exit(1))
})
