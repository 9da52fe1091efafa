// Memory per client that never reads (not a test): N connections each start
// a large json download and then read nothing, with the Accept-Encoding
// given; the server's RSS, heap and external memory are sampled before and
// once the downloads have stalled on backpressure.
//
//   node --expose-gc --import tsx test/bench/slow-readers.ts [clients=100] [encoding=identity]
//
// (--expose-gc lets it collect garbage before each reading; the figures still
// move by some 100 KiB per client from run to run on a busy machine.)
import net from 'node:net'
import Fastify from 'fastify'
import dataEndpoints, { SqliteStorage } from '../../lib/index.js'
import { MemoryJobs } from '../fixtures.js'
import { ProbeDatasets } from '../format-fixtures.js'

const CLIENTS = Number(process.argv[2] ?? 100)
const ENCODING = process.argv[3] ?? 'identity'

const jobs = new MemoryJobs()
const app = Fastify()
await app.register(dataEndpoints, {
  storage: new SqliteStorage({ filename: ':memory:' }),
  datasets: new ProbeDatasets(10_000_000, undefined, 'sync'),
  pipelines: jobs,
  jobs,
  bcryptCost: 4,
  managementUi: false,
  getPermissions: () => ['ManageAPIKeys']
})
const created = (await app.inject({ method: 'POST', url: '/api-keys/acme/shop/keys', payload: { purpose: 'bench' } })).json()
await app.inject({ method: 'PUT', url: '/api-keys/acme/shop/endpoints/1/dataset/1', payload: { keyIds: [created.id] } })
await app.listen({ host: '127.0.0.1', port: 0 })
const { port } = app.server.address() as net.AddressInfo

const settle = async (): Promise<{ rss: number, heap: number, external: number }> => {
  for (let i = 0; i < 5; i++) { global.gc?.(); await new Promise((resolve) => setTimeout(resolve, 200)) }
  const m = process.memoryUsage()
  return { rss: m.rss, heap: m.heapUsed, external: m.external }
}
// One warm-up download, so that first-use allocations are not counted per client.
await fetch(`http://127.0.0.1:${port}/api/acme/shop/model/1/dataset/1?format=json&limit=100000&api_key=${created.key}`).then(async (r) => r.arrayBuffer())
const before = await settle()
const sockets: net.Socket[] = []
for (let i = 0; i < CLIENTS; i++) {
  const socket = net.connect(port, '127.0.0.1')
  // A small receive window, then nothing is ever read.
  socket.setNoDelay(true)
  socket.write(`GET /api/acme/shop/model/1/dataset/1?format=json&api_key=${created.key} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: ${ENCODING}\r\n\r\n`)
  socket.pause()
  sockets.push(socket)
}
await new Promise((resolve) => setTimeout(resolve, 5000))
const after = await settle()
const per = (k: 'rss' | 'heap' | 'external'): string => ((after[k] - before[k]) / CLIENTS / 1024).toFixed(0)
console.log(`${CLIENTS} clients that never read, Accept-Encoding: ${ENCODING}: per client RSS +${per('rss')} KiB, heap +${per('heap')} KiB, external +${per('external')} KiB`)
for (const s of sockets) s.destroy()
await app.close()
