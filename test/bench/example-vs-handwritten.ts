// Benchmark (h) of issue "7 ·": the example server's authenticated json of
// `sales` against a hand-written Fastify route that does the same job (key
// checked against a Map, three prepared SELECTs, JSON.stringify), in the same
// server process, the same run and with the same logger settings; a bare
// route sending the precomputed bytes is kept as a record. Not a test: run it
// with
//   npx tsx test/bench/example-vs-handwritten.ts [seconds-per-run] [levels, e.g. info,warn]
// and record the printed table in docs/benchmarks.md. The server runs compiled
// under plain node (compile.ts); see example-bench-server.ts.
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { cpus, tmpdir, totalmem } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import autocannon, { type Options, type Result } from 'autocannon'
import { compileForBench, REPO } from './compile.js'

const seconds = Number(process.argv[2] ?? 10)
const levels = (process.argv[3] ?? 'info,warn').split(',')
// Runs on a shared 2-core machine vary by ±15%: each route runs this many
// times, the routes interleaved, and the run with the median rate counts.
const ROUNDS = 3

const buildDir = mkdtempSync(join(tmpdir(), 'fde-bench-build-'))
process.on('exit', () => rmSync(buildDir, { recursive: true, force: true }))
const serverEntry = compileForBench(join(REPO, 'test/bench/example-bench-server.ts'), buildDir)

interface Server { child: ChildProcess, example: string, hand: string, key: string }

async function startServer (logLevel: string): Promise<Server> {
  const child = spawn(process.execPath, [serverEntry], { env: { ...process.env, LOG_LEVEL: logLevel }, stdio: ['ignore', 'pipe', 'inherit'] })
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream })
  let key = ''
  for await (const line of lines) {
    key = /^key (\S+)$/.exec(line)?.[1] ?? key
    const ports = /^ports (\d+) (\d+)$/.exec(line)
    if (ports === null) continue
    // The log lines go on coming: read and drop them, as a log shipper would.
    child.stdout?.resume()
    return { child, key, example: `http://127.0.0.1:${ports[1]}`, hand: `http://127.0.0.1:${ports[2]}` }
  }
  throw new Error('bench server did not start')
}

type Run = Result & { cpuPerRequest: number }

async function serverCpu (server: Server): Promise<number> {
  const { user, system } = await (await fetch(`${server.hand}/bench/cpu`)).json() as { user: number, system: number }
  return user + system
}

/** One autocannon run, with the server's CPU time per request (µs): steadier than throughput on a shared machine. */
async function load (server: Server, options: Options): Promise<Run> {
  const before = await serverCpu(server)
  const result = await autocannon({ connections: 50, pipelining: 1, duration: seconds, ...options })
  const cpu = await serverCpu(server) - before
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${options.url}: ${result.non2xx} non-2xx answers, ${result.errors} errors`)
  return Object.assign(result, { cpuPerRequest: cpu / Math.max(1, result.requests.total) })
}

const rate = (r: Result): number => Math.round(r.requests.average)
const rows: string[][] = []

for (const level of levels) {
  const server = await startServer(level)
  const auth = { authorization: `Bearer ${server.key}` }
  const routes = {
    'bare route, the same bytes precomputed': { url: `${server.hand}/bare` },
    'hand-written: Map key check, 3 prepared SELECTs, JSON.stringify': { url: `${server.hand}/hand/sales`, headers: auth },
    'hand-written, the rows read through the example\'s DatasetSource': { url: `${server.hand}/hand/source`, headers: auth },
    'Map key check + the plugin\'s download code (sendDataset) over the example\'s source': { url: `${server.hand}/hand/download?format=json`, headers: auth },
    'example: authenticated json of sales (Bearer)': { url: `${server.example}/api/acme/shop/model/1/dataset/1?format=json`, headers: auth },
    'example: authenticated meta=entities (Bearer)': { url: `${server.example}/api/acme/shop/model/1/dataset/1?meta=entities`, headers: auth }
  } satisfies Record<string, Options>
  for (const options of Object.values(routes)) await load(server, { ...options, duration: 2 }) // warm-up
  const runs = new Map<string, Run[]>()
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, options] of Object.entries(routes)) runs.set(name, [...(runs.get(name) ?? []), await load(server, options)])
  }
  const median = (name: string): Run => {
    const sorted = [...(runs.get(name) ?? [])].sort((x, y) => rate(x) - rate(y))
    return sorted[sorted.length >> 1]
  }
  const hand = median('hand-written: Map key check, 3 prepared SELECTs, JSON.stringify')
  for (const name of Object.keys(routes)) {
    const r = median(name)
    const all = (runs.get(name) ?? []).map(rate).join('/')
    rows.push([level, name, String(rate(r)), all, String(r.latency.p99), r.cpuPerRequest.toFixed(0),
      (rate(r) / rate(hand)).toFixed(2), (hand.cpuPerRequest / r.cpuPerRequest).toFixed(2)])
  }
  server.child.kill('SIGTERM')
  await once(server.child, 'exit')
}

console.log(`\nMachine: ${cpus().length} x ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}; ${seconds} s per run, 50 connections, median of ${ROUNDS} interleaved runs\n`)
console.log('| LOG_LEVEL | route | req/s (median) | req/s of each run | p99 ms | server CPU µs/req | throughput vs hand-written | CPU vs hand-written |')
console.log('|---|---|---:|---:|---:|---:|---:|---:|')
for (const r of rows) console.log(`| ${r.join(' | ')} |`)
