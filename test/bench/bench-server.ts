// A host with the plugin for the benchmarks, run in its own process so the
// load generator does not share its event loop. It serves, in the same app:
//   /bare                       the bytes of the small dataset as json, no plugin work
//   /bare/bearer                the same bytes behind @fastify/bearer-auth (key: BENCH_BEARER_KEY)
//   /bare/lookup                the same bytes after the one storage read a request needs
//   /bare/memo-digest           the same bytes after the one memo digest a request needs
//   /bare/unauthenticated       the same json made by the plugin's download code, no key check
//   /bare/lookup-download       that download code after the one storage read a request needs
//   /bare/naive-download        the sample's rows read from its source and serialised with
//                               JSON.stringify, then the precomputed bytes: a lower bound
//   /api/acme/shop/model/1/...  the plugin's routes (dataset 1 small, pipeline 1)
// Management: any request with `x-permissions: ManageAPIKeys`.
// Env: BENCH_THROTTLE=off disables the failure throttle. Prints "port <n>".
import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import bearerAuth from '@fastify/bearer-auth'
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify'
import dataEndpoints, { SqliteStorage, type Dataset } from '../../lib/index.js'
import { keyPrefixOf } from '../../lib/keys/api-key.js'
import { memoDigest } from '../../lib/keys/memo-digest.js'
import { sendDataset } from '../../lib/downloads/dataset-download.js'
import { TarSpool } from '../../lib/formats/tar-spool.js'
import { DEFAULTS } from '../../lib/options.js'
import { benchColumnar } from './bench-columnar.js'
import { MemoryDatasets, MemoryJobs, PIPELINE_REF, SALES_REF, salesDataset } from '../fixtures.js'

const dir = mkdtempSync(join(tmpdir(), 'fde-bench-'))
const storage = new SqliteStorage({ filename: join(dir, 'bench.db') })
const datasets = new MemoryDatasets().add(SALES_REF, salesDataset())
const jobs = new MemoryJobs().addPipeline(PIPELINE_REF, 'refresh')
// Keep the job map from growing through a long POST run.
jobs.getPipeline = async () => ({ name: 'refresh', start: async () => { jobs.starts++ } })

const app = Fastify({ logger: false })
await app.register(dataEndpoints, {
  storage,
  datasets,
  pipelines: jobs,
  jobs,
  requireHttps: false,
  failureThrottle: process.env.BENCH_THROTTLE === 'off' ? false : undefined,
  getPermissions: (request) => String(request.headers['x-permissions'] ?? '').split(',')
})

// The same bytes the json download of dataset 1 produces, sent directly.
let bareBody = ''
const sendBare = (reply: FastifyReply): FastifyReply => reply.type('application/json; charset=utf-8').header('cache-control', 'no-store').send(bareBody)
app.get('/bare', async (request, reply) => sendBare(reply))
app.get('/bare/pipeline', async () => ({ job_id: randomUUID(), job_url: 'http://x/api/job/' }))
// A control for floods (links.ts): held a second, then 403, with no check at all.
app.get('/bench/held/*', async (request, reply) => {
  await new Promise((resolve) => setTimeout(resolve, 1000))
  return reply.code(403).send({ message: 'Unknown link' })
})
// The reference: @fastify/bearer-auth (keys in clear, in memory, no
// storage read) in front of the same precomputed bytes, with the one key the
// runner passes in BENCH_BEARER_KEY.
await app.register(async (scope) => {
  await scope.register(bearerAuth, { keys: new Set([process.env.BENCH_BEARER_KEY ?? 'unused']) })
  scope.get('/bare/bearer', async (request, reply) => sendBare(reply))
})
// The floor the rules set: the same precomputed bytes after the one
// storage read every request must make (the key and endpoint records), for
// the key in the Authorization header.
const LOCATOR = { organization: 'acme', project: 'shop', modelSequence: 1, type: 'dataset', resourceSequence: 1 } as const
const bearerKey = (request: FastifyRequest): string => String(request.headers.authorization).slice('Bearer '.length)
async function readKeyRecords (request: FastifyRequest): Promise<void> {
  const prefix = keyPrefixOf(bearerKey(request))
  if ((await storage.findEndpointKey(LOCATOR, prefix))?.key == null) throw new Error('no key on the sample endpoint')
}
app.get('/bare/lookup', async (request, reply) => {
  await readKeyRecords(request)
  return sendBare(reply)
})
// The other floor: the HMAC the verification memo is keyed by, which every
// request computes over the stored hash and the supplied key (a bcrypt hash
// of the same length stands in for the stored one), in front of the same bytes.
const memoKeyOf = memoDigest()
const STORED_HASH = '$2b$10$' + 'N'.repeat(53)
app.get('/bare/memo-digest', async (request, reply) => {
  // The message KeyVerifier's memo key is made of: stored hash, NUL, supplied key.
  if (memoKeyOf(STORED_HASH + '\0' + bearerKey(request)) === '') throw new Error('no digest')
  return sendBare(reply)
})
// The same download code as the plugin's route, without the key check: what
// verification adds is the difference between this and the plugin's route.
async function sampleDataset (): Promise<Dataset> {
  const dataset = await datasets.getDataset(SALES_REF)
  if (dataset === null) throw new Error('no sample dataset')
  return dataset
}
// (Its json never spools; sendDataset takes a spool for tar all the same.)
const download = { tarSpool: new TarSpool({ directory: dir, ...DEFAULTS.tarSpool }), chunkSize: DEFAULTS.downloadChunkSize, renderedBodies: null, renderedFiles: null, columnar: benchColumnar(), metrics: null, compression: false }
async function sendSample (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  return sendDataset(request, reply, await sampleDataset(), SALES_REF, download)
}
app.get('/bare/unauthenticated', sendSample)
// What reading the same source costs, with the cheapest serialisation there
// is and none of the download code's checks: a lower bound for any download.
// (The sample holds no bigint, which JSON.stringify would refuse.)
const neverAborted = new AbortController().signal
app.get('/bare/naive-download', async (request, reply) => {
  const dataset = await sampleDataset()
  let text = ''
  for (const entity of dataset.entities) {
    for await (const row of dataset.rows(entity.name, { limit: undefined, signal: neverAborted })) text += JSON.stringify(row)
  }
  if (text === '') throw new Error('no rows')
  return sendBare(reply)
})
// The floor for the plugin's own route: its download code after the one
// storage read; what verification adds beyond that read is the difference.
app.get('/bare/lookup-download', async (request, reply) => {
  await readKeyRecords(request)
  return sendSample(request, reply)
})

await app.listen({ host: '127.0.0.1', port: 0 })
const address = app.server.address()
if (address === null || typeof address === 'string') throw new Error('no port')

// Fill /bare with what the plugin itself answers, through a throwaway key.
const created = await app.inject({ method: 'POST', url: '/api-keys/acme/shop/keys', headers: { 'x-permissions': 'ManageAPIKeys' }, payload: { purpose: 'bare' } })
const probe = created.json()
await app.inject({ method: 'PUT', url: '/api-keys/acme/shop/endpoints/1/dataset/1', headers: { 'x-permissions': 'ManageAPIKeys' }, payload: { keyIds: [probe.id] } })
bareBody = (await app.inject({ url: `/api/acme/shop/model/1/dataset/1?format=json&api_key=${probe.key}` })).body
await app.inject({ method: 'DELETE', url: '/api-keys/acme/shop/endpoints/1/dataset/1', headers: { 'x-permissions': 'ManageAPIKeys' } })
await app.inject({ method: 'DELETE', url: `/api-keys/acme/shop/keys/${probe.id}`, headers: { 'x-permissions': 'ManageAPIKeys' } })

console.log(`port ${address.port}`)

async function stop (): Promise<void> {
  await app.close()
  rmSync(dir, { recursive: true, force: true })
  process.exit(0)
}
process.on('SIGTERM', () => { stop().catch(() => process.exit(1)) })
