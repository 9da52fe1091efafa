// Downloads sharing the server (issue 7, benchmarks (e), (f), (g)), and what
// clients that stop reading cost. Not a test.
//
//   npx tsx test/bench/concurrency.ts
//
// The server, the plugin over a better-sqlite3 `events` table of BENCH_ROWS
// rows (default 1,000,000; id, timestamp, kind, float, JSON text), runs
// compiled in a child process (see formats.ts for why). Each reader is a
// curl process (a worker thread of this process without curl), reading as
// fast as loopback allows; the probe runs on this process's own loop.
//
//   alone  one json download, while a probe calls GET /api/job/<uuid> every 20 ms
//   four   json, json, json and sql at once, with the same probe: (e) probe p99
//          and max, the server's event-loop delay (monitorEventLoopDelay) p99
//          and max; (f) each download's finish time, and the four together's
//          bytes/s against the one alone; (g) the server's peak RSS
//   slow   BENCH_SLOW_CLIENTS (default 100) clients ask for the json download
//          and never read: the server's RSS growth per client, and its live
//          memory (heap + external, after a full GC) per client
//
// Env: BENCH_ROWS, BENCH_SLOW_CLIENTS, BENCH_SOURCE=async (rows through an
// async generator instead of better-sqlite3's plain iterator), BENCH_LABEL
// (the first column of the table, e.g. "before"/"after").
import { execFile, fork, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import { Worker } from 'node:worker_threads'
import Database from 'better-sqlite3'
import Fastify from 'fastify'
import dataEndpoints, { SqliteStorage, type DatasetSource } from '../../lib/index.js'
import { MemoryJobs } from '../fixtures.js'
import { compileForBench } from './compile.js'
import { createEventsTable, eventsDataset } from './events-table.js'
import { percentile } from './quantiles.js'

const ROWS = Number(process.env.BENCH_ROWS ?? 1_000_000)
const SLOW_CLIENTS = Number(process.env.BENCH_SLOW_CLIENTS ?? 100)
const LABEL = process.env.BENCH_LABEL ?? 'this code'
const PROBE_EVERY_MS = 20

const MiB = 2 ** 20

// ---- child: the server ------------------------------------------------------

interface Report { loopP99: number, loopMax: number, peakRssMB: number, maxRssMB: number }
interface Live { rss: number, heapUsed: number, external: number, sent: number }

async function serve (file: string): Promise<void> {
  const db = new Database(file, { readonly: true })
  const dataset = eventsDataset(db)
  const datasets: DatasetSource = { getDataset: async (ref) => (ref.resourceSequence === 1 ? dataset : null) }
  const jobs = new MemoryJobs()
  const job = jobs.addJob({ type: 'pipeline', status: 'running' })
  const app = Fastify({ logger: false })
  // The sockets of the downloads, to tell when slow clients stopped taking bytes.
  const sockets = new Set<net.Socket>()
  app.addHook('onRequest', async (request) => {
    const { socket } = request.raw
    if (!request.url.startsWith('/api/acme/') || sockets.has(socket)) return
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
  })
  await app.register(dataEndpoints, {
    storage: new SqliteStorage({ filename: ':memory:' }),
    datasets,
    pipelines: jobs,
    jobs,
    bcryptCost: 4,
    managementUi: false, // the web page's files are not part of this build
    getPermissions: () => ['ManageAPIKeys']
  })
  const created = (await app.inject({ method: 'POST', url: '/api-keys/acme/shop/keys', payload: { purpose: 'bench' } })).json()
  await app.inject({ method: 'PUT', url: '/api-keys/acme/shop/endpoints/1/dataset/1', payload: { keyIds: [created.id] } })
  await app.listen({ host: '127.0.0.1', port: 0 })

  const delay = monitorEventLoopDelay({ resolution: 1 })
  let peakRss = 0
  const sample = setInterval(() => { peakRss = Math.max(peakRss, process.memoryUsage.rss()) }, 20)
  const live = (): Live => {
    const gc = (globalThis as { gc?: () => void }).gc
    gc?.()
    gc?.()
    const m = process.memoryUsage()
    let sent = 0
    for (const socket of sockets) sent += socket.bytesWritten
    return { rss: m.rss, heapUsed: m.heapUsed, external: m.external, sent }
  }
  process.on('message', (command) => {
    if (command === 'start') {
      delay.reset()
      delay.enable()
      peakRss = process.memoryUsage.rss()
      process.send?.('started')
    } else if (command === 'report') {
      delay.disable()
      const report: Report = {
        loopP99: delay.percentile(99) / 1e6,
        loopMax: delay.max / 1e6,
        peakRssMB: peakRss / MiB,
        maxRssMB: process.resourceUsage().maxRSS / 1024
      }
      process.send?.(report)
    } else if (command === 'live') {
      process.send?.(live())
    } else if (command === 'exit') {
      clearInterval(sample)
      app.close().then(() => db.close()).finally(() => process.exit(0))
    }
  })
  const { port } = app.server.address() as { port: number }
  process.send?.({ port, key: created.key, jobId: job.id })
}

// ---- parent: readers, probe, table -------------------------------------------

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
  const child = fork(compiled, ['--serve', table], { execArgv: ['--expose-gc'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
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

// One download, read as fast as loopback allows: by curl when it is
// installed (a reader in C leaves the most CPU to the server), else by a
// worker thread.
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

/** Calls the job route every PROBE_EVERY_MS until stopped; the latencies in ms. */
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

interface Run { downloads: Downloaded[], seconds: number, probes: number[], report: Report }

async function downloadsWithProbe (queries: string[]): Promise<Run> {
  const server = await startServer()
  try {
    const path = (query: string): string => `/api/acme/shop/model/1/dataset/1?api_key=${server.key}&${query}`
    await ask(server, 'start')
    const probing = probe(server.port, server.jobId)
    const start = performance.now()
    const downloads = await Promise.all(queries.map((query) => download(server.port, path(query))))
    const seconds = (performance.now() - start) / 1000
    const probes = await probing.stop()
    const report = await ask<Report>(server, 'report')
    for (const [i, d] of downloads.entries()) if (d.status !== 200) throw new Error(`${queries[i]}: status ${d.status}`)
    return { downloads, seconds, probes, report }
  } finally {
    await stopServer(server)
  }
}

/** Clients that ask for the json download and never read; what the server holds for them. */
async function slowClients (count: number): Promise<{ rssPerClient: number, livePerClient: number, sentPerClient: number }> {
  const server = await startServer()
  const sockets: net.Socket[] = []
  try {
    const path = `/api/acme/shop/model/1/dataset/1?api_key=${server.key}&format=json`
    // Warm up: one download read to the end.
    await download(server.port, `${path}&limit=100000`)
    const before = await ask<Live>(server, 'live')
    for (let i = 0; i < count; i++) {
      const socket = net.connect(server.port, '127.0.0.1', () => socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`))
      socket.pause() // reads nothing
      sockets.push(socket)
    }
    // Until the server has sent nothing more for a second.
    let last = -1
    let after = before
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, 1000))
      after = await ask<Live>(server, 'live')
      if (after.sent === last) break
      last = after.sent
    }
    return {
      rssPerClient: (after.rss - before.rss) / count,
      livePerClient: (after.heapUsed + after.external - before.heapUsed - before.external) / count,
      sentPerClient: (after.sent - before.sent) / count
    }
  } finally {
    for (const socket of sockets) socket.destroy()
    await stopServer(server)
  }
}

async function main (): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'fde-bench-concurrency-'))
  const file = join(dir, 'events.db')
  try {
    process.stdout.write('compiling ... ')
    compiled = compileForBench(fileURLToPath(import.meta.url), join(dir, 'build'))
    process.stdout.write(`creating ${ROWS} rows ... `)
    createEventsTable(file, ROWS)
    table = file
    console.log('done')

    const alone = await downloadsWithProbe(['format=json'])
    const four = await downloadsWithProbe(['format=json', 'format=json', 'format=json', 'format=sql'])
    const slow = await slowClients(SLOW_CLIENTS)

    const rate = (run: Run): number => run.downloads.reduce((sum, d) => sum + d.bytes, 0) / run.seconds
    const ms = (n: number): string => n.toFixed(0)
    const json = four.downloads.slice(0, 3).map((d) => d.seconds)
    console.log([
      '',
      `${ROWS.toLocaleString('en')} rows, node ${process.version}, ${process.env.BENCH_SOURCE === 'async' ? 'async generator' : 'plain iterator'} source, ` +
        `readers: ${HAVE_CURL ? 'curl' : 'worker threads'}; probe every ${PROBE_EVERY_MS} ms`,
      '',
      '| code | case | probe p99 / max (ms) | event-loop delay p99 / max (ms) | finish (s): json, json, json, sql | json slowest / fastest | MB/s | together / alone | peak RSS (MiB, sampled / maxRSS) |',
      '|---|---|---:|---:|---:|---:|---:|---:|---:|',
      ...[['alone', alone], ['four', four]].map(([name, run]) => {
        const r = run as Run
        return `| ${LABEL} | ${name as string} | ${ms(percentile(r.probes, 99))} / ${ms(Math.max(...r.probes))} | ${ms(r.report.loopP99)} / ${ms(r.report.loopMax)} | ` +
          `${r.downloads.map((d) => d.seconds.toFixed(1)).join(', ')} | ${name === 'four' ? (Math.max(...json) / Math.min(...json)).toFixed(2) : ''} | ` +
          `${(rate(r) / 1e6).toFixed(1)} | ${name === 'four' ? (rate(four) / rate(alone)).toFixed(2) : '1.00'} | ${r.report.peakRssMB.toFixed(0)} / ${r.report.maxRssMB.toFixed(0)} |`
      }),
      '',
      '| code | clients that never read | RSS growth per client (KiB) | live heap + external per client, after GC (KiB) | sent to each before it stopped (KiB) |',
      '|---|---:|---:|---:|---:|',
      `| ${LABEL} | ${SLOW_CLIENTS} | ${(slow.rssPerClient / 1024).toFixed(0)} | ${(slow.livePerClient / 1024).toFixed(0)} | ${(slow.sentPerClient / 1024).toFixed(0)} |`
    ].join('\n'))
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

if (process.argv[2] === '--serve') await serve(process.argv[3])
else await main()
