// Download formats benchmark (not a test): streams an `events` entity of
// BENCH_ROWS rows (default 1,000,000) from a real better-sqlite3 table through
// the real plugin over HTTP, in every format, and records rows/s and the
// server's peak RSS next to a baseline measured in the same run: raw
// better-sqlite3 iteration plus JSON.stringify of each row.
//
//   npx tsx test/bench/formats.ts
//
// Each measurement runs in its own child process (this file with --serve or
// --baseline), so every peak RSS is that of one server doing one download.
// The children run compiled JavaScript under plain node (this file and what
// it imports, built with tsc into a temporary directory first), as a server
// in production would: tsx alone would add some 60 MB to every RSS.
// Every case runs BENCH_REPEAT times (default 3), round by round: the table
// shows the median rows/s, the highest peak RSS and the median CPU time of
// the server process (all threads) during the download. On a shared machine
// rows/s follow the load; CPU time follows it less ("vs baseline, CPU").
// Env: BENCH_ROWS, BENCH_REPEAT, BENCH_CASES (comma-separated query strings, e.g.
// "format=json,format=csv-zip&archiveType=tar"), BENCH_NODE_ARGS (node
// options for the children, e.g. "--max-old-space-size=96"), BENCH_SOURCE=async,
// BENCH_ENCODINGS (comma-separated Accept-Encoding values, default identity;
// e.g. "identity,gzip,br": each case once per encoding, its size as sent).
import { fork, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import http from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import Database from 'better-sqlite3'
import Fastify, { type FastifyInstance } from 'fastify'
import dataEndpoints, { SqliteStorage, type DatasetSource } from '../../lib/index.js'
import { MemoryJobs } from '../fixtures.js'
import { compileForBench } from './compile.js'
import { createEventsTable, eventsDataset, EVENTS_COLUMNS, EVENTS_SELECT } from './events-table.js'

const ROWS = Number(process.env.BENCH_ROWS ?? 1_000_000)
const REPEAT = Number(process.env.BENCH_REPEAT ?? 3)
const CASES = (process.env.BENCH_CASES ?? [
  'format=sql', 'format=json', 'format=csv-zip', 'format=json-zip', 'format=oracle-loader',
  'format=csv-zip&archiveType=tar', 'format=json-zip&archiveType=tar', 'format=oracle-loader&archiveType=tar'
].join(',')).split(',')
const ENCODINGS = (process.env.BENCH_ENCODINGS ?? 'identity').split(',')


interface Memory { sampledMB: number, maxRssMB: number, cpuSeconds: number }

// ---- child: a host serving the table through the plugin ------------------

/**
 * Samples RSS every 20 ms; maxRSS from the OS catches what sampling misses.
 * Also tells the CPU time the process (all its threads) used meanwhile:
 * unlike rows/s, it hardly depends on what else the machine runs.
 */
function memoryWatch (): () => Memory {
  let peak = process.memoryUsage.rss()
  const cpu = process.cpuUsage()
  const timer = setInterval(() => { peak = Math.max(peak, process.memoryUsage.rss()) }, 20)
  return () => {
    clearInterval(timer)
    const { user, system } = process.cpuUsage(cpu)
    return { sampledMB: peak / 2 ** 20, maxRssMB: process.resourceUsage().maxRSS / 1024, cpuSeconds: (user + system) / 1e6 }
  }
}

async function serve (file: string): Promise<void> {
  const db = new Database(file, { readonly: true })
  const dataset = eventsDataset(db)
  const datasets: DatasetSource = { getDataset: async (ref) => (ref.resourceSequence === 1 ? dataset : null) }
  const jobs = new MemoryJobs()
  const app = Fastify({ logger: false })
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
  await listenAndReport(app, db, { key: created.key })
}

/** Listens, tells the parent its port, and reports peak memory when asked. */
async function listenAndReport (app: FastifyInstance, db: Database.Database, extra: Record<string, unknown>): Promise<void> {
  await app.listen({ host: '127.0.0.1', port: 0 })
  const { port } = app.server.address() as { port: number }
  const idleMB = process.memoryUsage.rss() / 2 ** 20
  const watch = memoryWatch()
  process.send?.({ port, idleMB, ...extra })
  process.once('message', () => {
    process.send?.(watch())
    app.close().then(() => db.close()).finally(() => process.exit(0))
  })
}

// Every side reads the rows as arrays (`.raw().iterate()`), as the plugin's
// source does (events-table.ts): better-sqlite3 makes row objects at 0.71-0.77
// of the rate of arrays here, and a baseline reading objects flattered the
// plugin's ratio. Each row is written as the object JSON.stringify would
// write, its names quoted once.
const QUOTED_NAMES = EVENTS_COLUMNS.map((c, i) => (i === 0 ? '{' : ',') + JSON.stringify(c.name) + ':')
function rowObjectText (row: readonly unknown[]): string {
  let text = ''
  for (let i = 0; i < row.length; i++) text += QUOTED_NAMES[i] + JSON.stringify(row[i])
  return text + '}'
}

/**
 * The json download as a competent user would write it by hand: a route
 * that streams the statement's row objects through JSON.stringify, in
 * 64 KiB chunks, waiting for 'drain' whenever write() asks it to. The same
 * bytes as format=json, without the plugin's key check and type checks.
 */
async function serveHandWritten (file: string): Promise<void> {
  const db = new Database(file, { readonly: true })
  const app = Fastify({ logger: false })
  app.get('/events.json', (request, reply) => {
    reply.hijack()
    const res = reply.raw
    res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' })
    const send = async (): Promise<void> => {
      let chunk = '{"events":[\n'
      let first = true
      for (const row of db.prepare(EVENTS_SELECT).raw().iterate() as Iterable<unknown[]>) {
        chunk += (first ? '' : ',\n') + rowObjectText(row)
        first = false
        if (chunk.length >= 64 * 1024) {
          if (!res.write(chunk)) await once(res, 'drain')
          chunk = ''
        }
      }
      res.end(chunk + '\n]}\n')
    }
    send().catch((err: Error) => res.destroy(err))
  })
  await listenAndReport(app, db, {})
}

function baseline (file: string): void {
  const db = new Database(file, { readonly: true })
  const idleMB = process.memoryUsage.rss() / 2 ** 20
  const start = process.hrtime.bigint()
  const watch = memoryWatch()
  let rows = 0
  let bytes = 0
  for (const row of db.prepare(EVENTS_SELECT).raw().iterate() as Iterable<unknown[]>) {
    bytes += rowObjectText(row).length
    rows++
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9
  process.send?.({ rows, bytes, seconds, idleMB, ...watch() })
  db.close()
}

// ---- parent: builds the table, runs each case in a child ------------------

/** Compiles this file and its imports to `dir`; returns the compiled path of this file. */
function compile (dir: string): string {
  return compileForBench(fileURLToPath(import.meta.url), dir)
}

let compiled = ''

function child (mode: string, file: string): ChildProcess {
  return fork(compiled, [mode, file], { execArgv: (process.env.BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean), stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
}

function message<T> (proc: ChildProcess): Promise<T> {
  return new Promise((resolve, reject) => {
    proc.once('message', (m) => resolve(m as T))
    proc.once('exit', (code) => reject(new Error(`child exited with ${code}`)))
  })
}


function download (port: number, path: string, encoding = 'identity'): Promise<{ status: number, bytes: number, seconds: number }> {
  const start = process.hrtime.bigint()
  return new Promise((resolve, reject) => {
    // The bytes as they cross the connection: node:http does not decompress.
    http.get({ host: '127.0.0.1', port, path, headers: { 'accept-encoding': encoding } }, (res) => {
      let bytes = 0
      res.on('data', (chunk: Buffer) => { bytes += chunk.length })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes, seconds: Number(process.hrtime.bigint() - start) / 1e9 }))
      res.on('error', reject)
    }).on('error', reject)
  })
}

async function main (): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'fde-bench-formats-'))
  const file = join(dir, 'events.db')
  try {
    process.stdout.write('compiling ... ')
    compiled = compile(join(dir, 'build'))
    process.stdout.write(`creating ${ROWS} rows ... `)
    createEventsTable(file, ROWS)
    console.log('done')

    // The runs go round by round (baseline, reference, each case, then again),
    // so that a change in the machine's load mid-run touches every row alike.
    interface Run extends Memory { rows: number, bytes: number, seconds: number, idleMB: number }
    const runs = new Map<string, Run[]>()
    const record = (label: string, run: Run): void => { runs.set(label, [...(runs.get(label) ?? []), run]) }
    const serverRun = async (mode: string, path: (key: string) => string, encoding?: string): Promise<Run> => {
      const server = child(mode, file)
      const { port, key, idleMB } = await message<{ port: number, key: string, idleMB: number }>(server)
      const result = await download(port, path(key), encoding)
      if (result.status !== 200) throw new Error(`${path('…')}: status ${result.status}`)
      const memory = message<Memory>(server)
      server.send('report')
      return { ...result, rows: ROWS, idleMB, ...(await memory) }
    }
    const BASELINE = 'baseline: iterate + JSON.stringify'
    const REFERENCE = 'reference: a hand-written json route (stringify, write with backpressure, HTTP)'
    for (let i = 0; i < REPEAT; i++) {
      record(BASELINE, await message<Run>(child('--baseline', file)))
      if (CASES.includes('format=json')) record(REFERENCE, await serverRun('--hand-written', () => '/events.json'))
      for (const query of CASES) {
        for (const encoding of ENCODINGS) {
          const label = ENCODINGS.length === 1 && encoding === 'identity' ? query : `${query}, Accept-Encoding: ${encoding}`
          record(label, await serverRun('--serve', (key) => `/api/acme/shop/model/1/dataset/1?api_key=${key}&${query}`, encoding))
        }
      }
      process.stdout.write(`round ${i + 1} of ${REPEAT} done\n`)
    }

    const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]
    const mb = (bytes: number): string => (bytes / 2 ** 20).toFixed(1)
    const rate = (label: string): number => median((runs.get(label) ?? []).map((r) => r.rows / r.seconds))
    const cpu = (label: string): number => median((runs.get(label) ?? []).map((r) => r.cpuSeconds * ROWS / r.rows))
    console.log([
      `${ROWS.toLocaleString('en')} rows, median of ${REPEAT} runs, node ${process.version}, ${process.env.BENCH_SOURCE === 'async' ? 'async generator' : 'plain iterator'} source`,
      '| case | rows/s | MB/s | size (MB) | peak RSS (MB, maxRSS / sampled) | RSS before (MB) | server CPU (s) | vs baseline | vs baseline, CPU |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|'
    ].join('\n'))
    for (const [label, list] of runs) {
      const { bytes, rows, idleMB } = list[0]
      const peak = `${Math.max(...list.map((r) => r.maxRssMB)).toFixed(0)} / ${Math.max(...list.map((r) => r.sampledMB)).toFixed(0)}`
      console.log(`| ${label} | ${Math.round(rate(label)).toLocaleString('en')} | ${mb(bytes * rate(label) / rows)} | ${mb(bytes)} | ${peak} | ${idleMB.toFixed(0)} | ` +
        `${cpu(label).toFixed(2)} | ${(rate(label) / rate(BASELINE)).toFixed(2)} | ${(cpu(BASELINE) / cpu(label)).toFixed(2)} |`)
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

const [mode, file] = process.argv.slice(2)
if (mode === '--serve') await serve(file)
else if (mode === '--hand-written') await serveHandWritten(file)
else if (mode === '--baseline') baseline(file)
else await main()
