// Parquet downloads (issue 13). Not a test.
//
//   npx tsx test/bench/parquet.ts
//
// The server runs compiled in a child process (see formats.ts for why), over
// a better-sqlite3 `events` table of BENCH_ROWS rows (default 1,000,000; id,
// timestamp, kind, float, JSON text), with the plugin's defaults. Readers are
// curl processes (worker threads of this process without curl); the probe
// runs on this process's own loop, GET /api/job/<uuid> every 20 ms.
//
//   alone     one download at a time: the plugin's parquet, a hand-written
//             route that writes the same rows with the same library
//             (hyparquet-writer) and no plugin, on the event loop, and the
//             plugin's csv-zip: seconds and bytes, and parquet against the
//             hand-written route (hand seconds / plugin seconds; target >= 0.9)
//   four      four parquet downloads at once with the probe: probe p99 and max
//             (target p99 < 100 ms), each download's finish time (target:
//             slowest / fastest <= 1.5), the server's peak RSS (target < 300 MiB)
//   four-hand the same four from the hand-written route, for contrast
//
// Env: BENCH_ROWS, BENCH_LABEL (the first column of the tables), BENCH_BATCH_BYTES (the
// plugin's columnarBatchBytes; its default otherwise).
import { execFile, fork, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import http from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import { Worker } from 'node:worker_threads'
import Database from 'better-sqlite3'
import Fastify from 'fastify'
import { ByteWriter, ParquetWriter } from 'hyparquet-writer'
import dataEndpoints, { SqliteStorage, type DatasetSource } from '../../lib/index.js'
import { MemoryJobs } from '../fixtures.js'
import { compileForBench } from './compile.js'
import { EVENTS_SELECT, createEventsTable, eventsDataset } from './events-table.js'
import { percentile } from './quantiles.js'

const ROWS = Number(process.env.BENCH_ROWS ?? 1_000_000)
const LABEL = process.env.BENCH_LABEL ?? 'this code'
const PROBE_EVERY_MS = 20
/** Rows per row group of the hand-written route: about the plugin's default 4 MiB of these rows. */
const HAND_GROUP_ROWS = 50_000
const MiB = 2 ** 20

// ---- child: the server ------------------------------------------------------

interface Report { peakRssMB: number, maxRssMB: number, heapAtPeakMB: number, externalAtPeakMB: number, loopP99: number, loopMax: number }

/**
 * What a host would write without the plugin: rows into column arrays,
 * hyparquet-writer's ParquetWriter a row group at a time on the event loop,
 * its bytes to the response as they come, with backpressure.
 */
function handWrittenParquet (db: Database.Database): PassThrough {
  const out = new PassThrough()
  const schema = [
    { name: 'schema', num_children: 5 },
    { name: 'id', type: 'INT32' as const, repetition_type: 'REQUIRED' as const },
    { name: 'ts', type: 'INT64' as const, repetition_type: 'REQUIRED' as const, converted_type: 'TIMESTAMP_MICROS' as const, logical_type: { type: 'TIMESTAMP' as const, isAdjustedToUTC: true, unit: 'MICROS' as const } },
    { name: 'kind', type: 'BYTE_ARRAY' as const, repetition_type: 'REQUIRED' as const, converted_type: 'UTF8' as const },
    { name: 'value', type: 'DOUBLE' as const, repetition_type: 'OPTIONAL' as const },
    { name: 'payload', type: 'BYTE_ARRAY' as const, repetition_type: 'OPTIONAL' as const, converted_type: 'UTF8' as const }
  ]
  const writer = new ByteWriter()
  const parquet = new ParquetWriter({ writer, schema })
  const take = (): Buffer => {
    const bytes = Buffer.from(writer.getBuffer())
    writer.index = 0
    return bytes
  }
  const drained = (): Promise<void> => new Promise((resolve) => out.once('drain', resolve))
  void (async () => {
    out.write(take())
    let columns = { id: [] as number[], ts: [] as bigint[], kind: [] as string[], value: [] as Array<number | null>, payload: [] as Array<string | null> }
    const flush = async (): Promise<void> => {
      parquet.write({
        rowGroupSize: columns.id.length,
        // The same encodings as the plugin's: integers and times DELTA_BINARY_PACKED.
        columnData: Object.entries(columns).map(([name, data]) => ({
          name, data, ...(name === 'id' || name === 'ts' ? { encoding: 'DELTA_BINARY_PACKED' as const } : {})
        }))
      })
      columns = { id: [], ts: [], kind: [], value: [], payload: [] }
      if (!out.write(take())) await drained()
    }
    for (const [id, ts, kind, value, payload] of db.prepare(EVENTS_SELECT).raw().iterate() as Iterable<[number, string, string, number | null, string | null]>) {
      columns.id.push(id)
      columns.ts.push(BigInt(Date.parse(ts)) * 1000n)
      columns.kind.push(kind)
      columns.value.push(value)
      columns.payload.push(payload)
      if (columns.id.length === HAND_GROUP_ROWS) await flush()
    }
    if (columns.id.length > 0) await flush()
    void parquet.finish()
    out.end(take())
  })().catch((err: Error) => out.destroy(err))
  return out
}

async function serve (file: string): Promise<void> {
  const db = new Database(file, { readonly: true })
  const dataset = eventsDataset(db)
  const datasets: DatasetSource = { getDataset: async (ref) => (ref.resourceSequence === 1 ? dataset : null) }
  const jobs = new MemoryJobs()
  const job = jobs.addJob({ type: 'pipeline', status: 'running' })
  const app = Fastify({ logger: false })
  await app.register(dataEndpoints, {
    storage: new SqliteStorage({ filename: ':memory:' }),
    datasets,
    pipelines: jobs,
    jobs,
    bcryptCost: 4,
    managementUi: false, // the web page's files are not part of this build
    getPermissions: () => ['ManageAPIKeys'],
    ...(process.env.BENCH_BATCH_BYTES === undefined ? {} : { columnarBatchBytes: Number(process.env.BENCH_BATCH_BYTES) })
  })
  app.get('/hand/parquet', async (request, reply) => reply.type('application/vnd.apache.parquet').send(handWrittenParquet(db)))
  const created = (await app.inject({ method: 'POST', url: '/api-keys/acme/shop/keys', payload: { purpose: 'bench' } })).json()
  await app.inject({ method: 'PUT', url: '/api-keys/acme/shop/endpoints/1/dataset/1', payload: { keyIds: [created.id] } })
  await app.listen({ host: '127.0.0.1', port: 0 })

  const delay = monitorEventLoopDelay({ resolution: 1 })
  let peakRss = 0
  let atPeak = process.memoryUsage()
  const sample = setInterval(() => {
    const m = process.memoryUsage()
    if (m.rss > peakRss) { peakRss = m.rss; atPeak = m }
  }, 20)
  process.on('message', (command) => {
    if (command === 'start') {
      delay.reset()
      delay.enable()
      peakRss = process.memoryUsage.rss()
      process.send?.('started')
    } else if (command === 'report') {
      process.send?.({
        peakRssMB: peakRss / MiB,
        maxRssMB: process.resourceUsage().maxRSS / 1024,
        heapAtPeakMB: atPeak.heapTotal / MiB,
        externalAtPeakMB: atPeak.external / MiB,
        loopP99: delay.percentile(99) / 1e6,
        loopMax: delay.max / 1e6
      } satisfies Report)
    } else if (command === 'exit') {
      clearInterval(sample)
      app.close().then(() => db.close()).finally(() => process.exit(0))
    }
  })
  const { port } = app.server.address() as { port: number }
  process.send?.({ port, key: created.key, jobId: job.id })
}

// ---- parent: readers, probe, tables ------------------------------------------

let compiled = ''
let table = ''

interface Server { child: ChildProcess, port: number, key: string, jobId: string }

function message<T> (child: ChildProcess): Promise<T> {
  return new Promise((resolve, reject) => {
    const onExit = (code: number | null): void => reject(new Error(`server exited with ${code}`))
    child.once('exit', onExit)
    child.once('message', (m) => {
      child.off('exit', onExit)
      resolve(m as T)
    })
  })
}

async function startServer (): Promise<Server> {
  const child = fork(compiled, ['--serve', table], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  return { child, ...(await message<{ port: number, key: string, jobId: string }>(child)) }
}

async function ask<T> (server: Server, command: string): Promise<T> {
  const answer = message<T>(server.child)
  server.child.send(command)
  return answer
}

async function stopServer (server: Server): Promise<void> {
  const exited = new Promise((resolve) => server.child.once('exit', resolve))
  server.child.send('exit')
  await exited
}

interface Downloaded { status: number, bytes: number, seconds: number }

const HAVE_CURL = spawnSync('curl', ['--version']).status === 0

function curlDownload (url: string): Promise<Downloaded> {
  return new Promise((resolve, reject) => {
    execFile('curl', ['-s', '-o', '/dev/null', '-w', '%{http_code} %{size_download} %{time_total}', url], (err, stdout) => {
      if (err !== null) return reject(err)
      const [status, bytes, seconds] = stdout.trim().split(' ').map(Number)
      resolve({ status, bytes, seconds })
    })
  })
}

const READER = `
const { parentPort, workerData: { url } } = require('node:worker_threads')
const http = require('node:http')
const start = performance.now()
http.get(url, { agent: false }, (res) => {
  let bytes = 0
  res.on('data', (chunk) => { bytes += chunk.length })
  res.on('end', () => parentPort.postMessage({ status: res.statusCode, bytes, seconds: (performance.now() - start) / 1000 }))
})
`

function workerDownload (url: string): Promise<Downloaded> {
  const worker = new Worker(READER, { eval: true, workerData: { url } })
  return new Promise((resolve, reject) => {
    worker.once('message', (result: Downloaded) => { void worker.terminate(); resolve(result) })
    worker.once('error', reject)
  })
}

function download (port: number, path: string): Promise<Downloaded> {
  const url = `http://127.0.0.1:${port}${path}`
  return HAVE_CURL ? curlDownload(url) : workerDownload(url)
}

function probe (port: number, jobId: string): { stop: () => Promise<number[]> } {
  const latencies: number[] = []
  const pending = new Set<Promise<void>>()
  const timer = setInterval(() => {
    const at = performance.now()
    const call = new Promise<void>((resolve) => {
      http.get({ host: '127.0.0.1', port, path: `/api/job/${jobId}`, agent: false }, (res) => {
        res.resume()
        res.on('end', () => { latencies.push(performance.now() - at); resolve() })
      }).on('error', () => resolve())
    })
    pending.add(call)
    void call.then(() => pending.delete(call))
  }, PROBE_EVERY_MS)
  return {
    stop: async () => {
      clearInterval(timer)
      await Promise.all(pending)
      return latencies
    }
  }
}

interface Run { downloads: Downloaded[], probes: number[], report: Report }

async function downloadsWithProbe (server: Server, paths: string[]): Promise<Run> {
  await ask(server, 'start')
  const probing = probe(server.port, server.jobId)
  const downloads = await Promise.all(paths.map((path) => download(server.port, path)))
  const probes = await probing.stop()
  const report = await ask<Report>(server, 'report')
  for (const [i, d] of downloads.entries()) if (d.status !== 200) throw new Error(`${paths[i]}: status ${d.status}`)
  return { downloads, probes, report }
}

async function main (): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'fde-bench-parquet-'))
  const file = join(dir, 'events.db')
  try {
    process.stdout.write('compiling ... ')
    compiled = compileForBench(fileURLToPath(import.meta.url), join(dir, 'build'))
    process.stdout.write(`creating ${ROWS} rows ... `)
    createEventsTable(file, ROWS)
    table = file
    console.log('done')

    // Each case in a server of its own, so that one's garbage is not counted in the next's memory.
    const plugin = (server: Server, query: string): string => `/api/acme/shop/model/1/dataset/1?api_key=${server.key}&${query}`
    let alone: Record<string, Downloaded>
    let server = await startServer()
    try {
      // Warm up each once, then measure.
      await download(server.port, plugin(server, 'format=parquet&limit=100000'))
      await download(server.port, '/hand/parquet')
      alone = {
        parquet: await download(server.port, plugin(server, 'format=parquet')),
        hand: await download(server.port, '/hand/parquet'),
        'csv-zip': await download(server.port, plugin(server, 'format=csv-zip'))
      }
    } finally {
      await stopServer(server)
    }
    let four: Run
    server = await startServer()
    await ask(server, 'start')
    const idleRss = (await ask<Report>(server, 'report')).peakRssMB
    try {
      four = await downloadsWithProbe(server, Array.from({ length: 4 }, () => plugin(server, 'format=parquet')))
    } finally {
      await stopServer(server)
    }
    let fourHand: Run
    server = await startServer()
    try {
      fourHand = await downloadsWithProbe(server, Array.from({ length: 4 }, () => '/hand/parquet'))
    } finally {
      await stopServer(server)
    }

    const s = (d: Downloaded): string => d.seconds.toFixed(2)
    const mb = (d: Downloaded): string => (d.bytes / 1e6).toFixed(1)
    const ms = (n: number): string => n.toFixed(0)
    const row = (name: string, r: Run): string => {
      const times = r.downloads.map((d) => d.seconds)
      return `| ${LABEL} | ${name} | ${ms(percentile(r.probes, 99))} / ${ms(Math.max(...r.probes))} | ${ms(r.report.loopP99)} / ${ms(r.report.loopMax)} | ${times.map((x) => x.toFixed(1)).join(', ')} | ` +
        `${(Math.max(...times) / Math.min(...times)).toFixed(2)} | ${r.report.peakRssMB.toFixed(0)} / ${r.report.maxRssMB.toFixed(0)} | ` +
        `${r.report.heapAtPeakMB.toFixed(0)} / ${r.report.externalAtPeakMB.toFixed(0)} |`
    }
    console.log([
      '',
      `${ROWS.toLocaleString('en')} rows, node ${process.version}, readers: ${HAVE_CURL ? 'curl' : 'worker threads'}; probe every ${PROBE_EVERY_MS} ms; ` +
        `server RSS before the four: ${idleRss.toFixed(0)} MiB`,
      '',
      '| code | parquet (s) | hand-written parquet (s) | hand / plugin | csv-zip (s) | parquet (MB) | hand-written (MB) | csv-zip (MB) |',
      '|---|---:|---:|---:|---:|---:|---:|---:|',
      `| ${LABEL} | ${s(alone.parquet)} | ${s(alone.hand)} | ${(alone.hand.seconds / alone.parquet.seconds).toFixed(2)} | ${s(alone['csv-zip'])} | ` +
        `${mb(alone.parquet)} | ${mb(alone.hand)} | ${mb(alone['csv-zip'])} |`,
      '',
      '| code | four at once | probe p99 / max (ms) | server event-loop delay p99 / max (ms) | finish (s) | slowest / fastest | server peak RSS (MiB, sampled / maxRSS) | main thread at the peak: V8 heap / external (MiB) |',
      '|---|---|---:|---:|---:|---:|---:|---:|',
      row('plugin parquet', four),
      row('hand-written parquet', fourHand)
    ].join('\n'))
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

if (process.argv[2] === '--serve') await serve(process.argv[3])
else await main()
