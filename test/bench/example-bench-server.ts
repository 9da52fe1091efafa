// The example server's app (examples/app.ts) for benchmark (h), run in its own
// process so the load generator does not share its event loop. Beside it, in
// the same process and with the same logger settings (exampleLoggerOptions at
// LOG_LEVEL), a second Fastify app serves what a developer would write by hand:
//   /hand/sales   the key checked against a Map, the `sales` tables read with
//                 three statements prepared once, JSON.stringify
//   /bare         the bytes of the example's json of `sales`, precomputed
//   /hand/source    as /hand/sales, but the rows read through the example's
//                   DatasetSource: what the source costs against .all()
//   /hand/download  the Map key check, then the plugin's download code
//                   (sendDataset) over the example's source: what the plugin's
//                   rendering costs; the example's route adds its key check
// (The benches read the process's CPU time from /proc, process-cpu.ts: a
// route for it here was itself a request to a second Fastify instance.)
// The example's own routes answer on the first port. Env: LOG_LEVEL (default
// info); CACHE=off: the example's datasets lose their revision, so that no
// download is served from the plugin's rendered-body cache (a host that gives
// no revision); DATABASE_URL (and DATABASE_SCHEMA): the plugin's storage on
// PostgreSQL, as the example's server with DATABASE_URL.
// Prints "key <api key>", then "ports <example> <hand-written>".
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import Fastify from 'fastify'
import { buildExampleApp, exampleLoggerOptions } from '../../examples/app.js'
import { exampleDatabaseFile, SampleDatasets } from '../../examples/sample-datasets.js'
import { sendDataset } from '../../lib/downloads/dataset-download.js'
import { TarSpool } from '../../lib/formats/tar-spool.js'
import { DEFAULTS } from '../../lib/options.js'
import { benchColumnar } from './bench-columnar.js'
import { handWrittenSales } from './hand-written-sales.js'

const logLevel = process.env.LOG_LEVEL ?? 'info'
const dir = mkdtempSync(join(tmpdir(), 'fde-bench-example-'))
const ADMIN_TOKEN = 'bench-admin'
const admin = { authorization: `Bearer ${ADMIN_TOKEN}` }

const example = await buildExampleApp({
  dataDir: dir,
  adminToken: ADMIN_TOKEN,
  eventsRows: 1000,
  logLevel,
  databaseUrl: process.env.DATABASE_URL,
  databaseSchema: process.env.DATABASE_SCHEMA,
  // The example's own way to serve datasets without a revision (a host that
  // has none); it replaced a wrapper of getDataset here, an async layer and
  // a lookup per request that the host's route would not have.
  revisions: process.env.CACHE !== 'off'
})
const created = (await example.inject({ method: 'POST', url: '/api-keys/acme/shop/keys', headers: admin, payload: { purpose: 'bench' } })).json()
await example.inject({ method: 'PUT', url: '/api-keys/acme/shop/endpoints/1/dataset/1', headers: admin, payload: { keyIds: [created.id] } })
const key = created.key as string
const bareBody = (await example.inject({ url: '/api/acme/shop/model/1/dataset/1?format=json', headers: { authorization: `Bearer ${key}` } })).body

// The hand-written host: what the example does, without the plugin.
const db = new Database(exampleDatabaseFile(dir), { readonly: true, fileMustExist: true })
const handSales = handWrittenSales(db)
const keys = new Map([[key, { purpose: 'bench' }]])
const hand = Fastify({ logger: exampleLoggerOptions(logLevel) })
hand.get('/hand/sales', async (request, reply) => {
  const auth = request.headers.authorization
  if (auth === undefined || !auth.startsWith('Bearer ') || !keys.has(auth.slice(7))) {
    return reply.code(403).send({ message: 'Unknown API key' })
  }
  return reply.type('application/json; charset=utf-8').send(handSales.text())
})
// A source of its own on the same file, as the example's (so that this
// server also runs against older versions of the example), with or without
// revisions as the example's: with one, /hand/download paid an ETag a
// request (9 µs on a slow machine) that the example's route without one does
// not. An older SampleDatasets ignores the option.
const source = new SampleDatasets(exampleDatabaseFile(dir), { revisions: process.env.CACHE !== 'off' })
const SALES_REF = { organization: 'acme', project: 'shop', modelSequence: 1, resourceSequence: 1 }
const sales = await source.getDataset(SALES_REF)
if (sales === null) throw new Error('no sales dataset')
const noSignal = new AbortController().signal
hand.get('/hand/source', async (request, reply) => {
  if (!keys.has(String(request.headers.authorization).slice(7))) return reply.code(403).send({ message: 'Unknown API key' })
  const document: Record<string, Array<Record<string, unknown>>> = {}
  for (const entity of sales.entities) {
    const objects: Array<Record<string, unknown>> = []
    const add = (row: readonly unknown[]): void => {
      const object: Record<string, unknown> = {}
      entity.columns.forEach((column, i) => { object[column.name] = row[i] })
      objects.push(object)
    }
    const rows = sales.rows(entity.name, { limit: undefined, signal: noSignal })
    if (Symbol.asyncIterator in rows) for await (const row of rows) add(row)
    else for (const row of rows) add(row)
    document[entity.name] = objects
  }
  return reply.type('application/json; charset=utf-8').send(JSON.stringify(document))
})
// (Its json never spools; sendDataset takes a spool for tar all the same.)
const download = { tarSpool: new TarSpool({ directory: tmpdir(), ...DEFAULTS.tarSpool }), chunkSize: DEFAULTS.downloadChunkSize, renderedBodies: null, renderedFiles: null, columnar: benchColumnar(), metrics: null, compression: false }
hand.get('/hand/download', async (request, reply) => {
  if (!keys.has(String(request.headers.authorization).slice(7))) return reply.code(403).send({ message: 'Unknown API key' })
  return sendDataset(request, reply, sales, SALES_REF, download)
})
hand.get('/bare', async (request, reply) => reply.type('application/json; charset=utf-8').header('cache-control', 'no-store').send(bareBody))

const examplePort = await listen(example)
const handPort = await listen(hand)
console.log(`key ${key}`)
console.log(`ports ${examplePort} ${handPort}`)

async function listen (app: typeof hand | typeof example): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  return address.port
}

async function stop (): Promise<void> {
  await Promise.all([example.close(), hand.close()])
  source.close()
  db.close()
  rmSync(dir, { recursive: true, force: true })
  process.exit(0)
}
process.on('SIGTERM', () => { stop().catch(() => process.exit(1)) })
