// Benchmark (h) of issue "7 ·" and the harness of issue "15 ·": the example
// server's authenticated json of `sales` against a hand-written Fastify route
// that does the same job (key checked against a Map, three prepared SELECTs,
// JSON.stringify), each in a server process of its own, in the same run and
// with the same logger settings, the routes' runs interleaved. Not a test: run it with
//   nice -n -20 npx tsx test/bench/example-vs-handwritten.ts [seconds-per-run] [levels, e.g. info,warn]
// and record the printed table in docs/benchmarks.md. Env:
//   MODE=cached    (default) the example's datasets have a revision: repeated
//                  downloads come from the rendered-body cache
//   MODE=uncached  the server's datasets have no revision (CACHE=off in
//                  example-bench-server.ts): every download is rendered
//   MODE=miss      revisions kept, but every request a new `limit` (larger
//                  than the data): every request misses the cache
//   MODE=pg        authenticated meta=entities on two example servers, the
//                  plugin's storage on PostgreSQL (PGURL) and on SQLite
//   CONNECTIONS    autocannon connections, default 20
//   HAND=same      the hand-written routes (and /bare) served beside the
//                  example in its process. Default: by a second server
//                  process, as a user's own app runs. In one process the
//                  example's heap and timers slowed the hand-written route
//                  too: the uncached ratio read 0.66 there against 0.50 apart
//                  (docs/benchmarks.md)
//   ROUNDS         runs of each route, default 3 (the median counts)
//   FRESH=1        new server processes for every round (see below)
//   ONLY           the routes to run besides the hand-written one (see below)
//   WARMUP         seconds of load on each route before a round's runs, default 10 (see below)
//   SERVER=tsx     run the server's TypeScript under `node --import tsx`, as
//                  `npm start` runs the example; default: compiled (compile.ts)
//                  under plain node, as a host runs the package
//   ABBA=1         each round runs the routes in the order opposite to the
//                  round before (hand, json; json, hand; ...), and the table
//                  adds the median of each round's own ratio. With short runs
//                  and many rounds (`ABBA=1 ROUNDS=30 ... 2 warn`: 2-s runs), a
//                  slow stretch of this shared machine, which lasts seconds
//                  to tens of seconds, falls on both routes of a round
//                  alike (docs/benchmarks.md, "Many short interleaved runs")
//   SERVER_ARGS    node flags for every server process, space-separated
//                  (SERVER_ARGS=--no-memory-reducer: see docs/benchmarks.md,
//                  "A slow PostgreSQL, and the full run against the two-route form")
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { cpus, tmpdir, totalmem } from 'node:os'
import { join } from 'node:path'
import autocannon, { type Options, type Result } from 'autocannon'
import pg from 'pg'
import { compileForBench, REPO } from './compile.js'
import { benchServerStarted, missingLoad, type BenchServerStart } from './example-bench-start.js'
import { withCpuPerRequest, type CpuMeasured } from './process-cpu.js'

const seconds = Number(process.argv[2] ?? 10)
const levels = (process.argv[3] ?? 'info,warn').split(',')
const mode = process.env.MODE ?? 'cached'
if (!['cached', 'uncached', 'miss', 'pg'].includes(mode)) throw new Error(`MODE: cached, uncached, miss or pg, not ${mode}`)
const connections = Number(process.env.CONNECTIONS ?? 20)
const handApart = process.env.HAND !== 'same'
const underTsx = process.env.SERVER === 'tsx'
const serverArgs = (process.env.SERVER_ARGS ?? '').split(' ').filter((arg) => arg !== '')
const pgUrl = process.env.PGURL ?? 'postgres://postgres@127.0.0.1:5432/test'
// Runs on a shared 2-core machine vary by ±15%: each route runs this many
// times, the routes interleaved, and the run with the median rate counts.
const ROUNDS = Number(process.env.ROUNDS ?? 3)
const abba = process.env.ABBA === '1'
// FRESH=1: new server processes for each round. The same code took 49 to 65
// µs of CPU a request from one process to the next (the JIT's choices), so
// with one process a side, one run's ratio can be one process's luck.
const fresh = process.env.FRESH === '1'
// ONLY=json (a comma list of bare, source, download, json, meta): only these
// routes and the hand-written one, as an outside check that loads one route
// would; each server then warms up and runs only its own routes.
const only = process.env.ONLY?.split(',')
// A server's optimizing compiler works through its first 10 seconds of
// load (--trace-opt: 636 compiler events in the first 5 s, 113 in the next
// 5, a handful after). With 2 s a route, a side whose process served only
// its one route was measured still compiling: on 2026-11-28 the example's
// json read 0.84-0.92 of a hand-written route warmed that way (ONLY=json),
// and 0.76 with both warmed 10 s.
const warmUpSeconds = Number(process.env.WARMUP ?? 10)

const buildDir = mkdtempSync(join(tmpdir(), 'fde-bench-build-'))
process.on('exit', () => rmSync(buildDir, { recursive: true, force: true }))
const serverSource = join(REPO, 'test/bench/example-bench-server.ts')
const serverEntry = underTsx ? serverSource : compileForBench(serverSource, buildDir)

interface Server { child: ChildProcess, key: string, urls: BenchServerStart['urls'], schema?: string }

async function startServer (logLevel: string, env: Record<string, string> = {}): Promise<Server> {
  const args = [...serverArgs, ...(underTsx ? ['--import', 'tsx', serverEntry] : [serverEntry])]
  const child = spawn(process.execPath, args, { cwd: REPO, env: { ...process.env, LOG_LEVEL: logLevel, ...env }, stdio: ['ignore', 'pipe', 'inherit'] })
  const { key, urls } = await benchServerStarted(child)
  return { child, key, urls, schema: env.DATABASE_SCHEMA }
}

async function stopServer (server: Server): Promise<void> {
  server.child.kill('SIGTERM')
  await once(server.child, 'exit')
  if (server.schema === undefined) return
  const client = new pg.Client({ connectionString: pgUrl })
  await client.connect()
  await client.query(`DROP SCHEMA IF EXISTS "${server.schema}" CASCADE`)
  await client.end()
}

type Run = CpuMeasured

/** A route to load, on one server. */
interface Route { server: Server, options: Options }

/** One autocannon run, with the server's CPU time per request (µs): steadier than throughput on a shared machine. */
async function load ({ server, options }: Route): Promise<Run> {
  // Read from /proc, not asked of the server (process-cpu.ts says why).
  const result = await withCpuPerRequest(server.child, () => autocannon({ connections, pipelining: 1, duration: seconds, ...options }))
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${options.url}: ${result.non2xx} non-2xx answers, ${result.errors} errors`)
  return result
}

const rate = (r: Result): number => Math.round(r.requests.average)
const rows: string[][] = []

/** The routes of one mode on its servers, and the name of the one each is compared with. */
function routesOf (servers: Server[]): { routes: Record<string, Route>, baseline: string } {
  const [server] = servers
  // The hand-written routes of the second server, with its own key (unless HAND=same).
  const handServer = mode === 'pg' ? server : servers[1] ?? server
  const auth = { authorization: `Bearer ${server.key}` }
  const handAuth = { authorization: `Bearer ${handServer.key}` }
  const json = server.urls.json
  const meta = (s: Server): Route => ({ server: s, options: { url: s.urls.meta, headers: { authorization: `Bearer ${s.key}` } } })
  const hand = 'hand-written: Map key check, 3 prepared SELECTs, JSON.stringify'
  if (mode === 'pg') {
    return { baseline: 'SQLite storage: authenticated meta=entities', routes: { 'SQLite storage: authenticated meta=entities': meta(servers[0]), 'PostgreSQL storage: authenticated meta=entities': meta(servers[1]) } }
  }
  if (mode === 'miss') {
    return {
      baseline: hand,
      routes: {
        [hand]: { server: handServer, options: missingLoad(handServer.urls.hand, handAuth) },
        'example: authenticated json of sales, a new limit each request (cache misses)': { server, options: missingLoad(json, auth) }
      }
    }
  }
  const named: Array<[short: string, name: string, route: Route]> = [
    ['bare', 'bare route, the same bytes precomputed', { server: handServer, options: { url: handServer.urls.bare } }],
    ['hand', hand, { server: handServer, options: { url: handServer.urls.hand, headers: handAuth } }],
    ['source', 'hand-written, the rows read through the example\'s DatasetSource', { server: handServer, options: { url: handServer.urls.source, headers: handAuth } }],
    ['download', 'Map key check + the plugin\'s download code (sendDataset) over the example\'s source', { server: handServer, options: { url: handServer.urls.download, headers: handAuth } }],
    ['json', `example: authenticated json of sales (Bearer)${mode === 'uncached' ? ', no revision' : ''}`, { server, options: { url: json, headers: auth } }],
    ['meta', 'example: authenticated meta=entities (Bearer)', meta(server)]
  ]
  const routes: Record<string, Route> = {}
  for (const [short, name, route] of named) if (only === undefined || short === 'hand' || only.includes(short)) routes[name] = route
  return { baseline: hand, routes }
}

for (const level of levels) {
  const startServers = async (): Promise<Server[]> => {
    const started = mode === 'pg'
      ? [await startServer(level), await startServer(level, { DATABASE_URL: pgUrl, DATABASE_SCHEMA: `bench_example_${process.pid}` })]
      : [await startServer(level, mode === 'uncached' ? { CACHE: 'off' } : {})]
    if (handApart && mode !== 'pg') started.push(await startServer(level))
    for (const route of Object.values(routesOf(started).routes)) await load({ ...route, options: { ...route.options, duration: warmUpSeconds } }) // warm-up
    return started
  }
  let servers = await startServers()
  let { routes, baseline } = routesOf(servers)
  const runs = new Map<string, Run[]>()
  for (let round = 0; round < ROUNDS; round++) {
    if (fresh && round > 0) {
      for (const server of servers) await stopServer(server)
      servers = await startServers();
      ({ routes, baseline } = routesOf(servers))
    }
    const ordered = abba && round % 2 === 1 ? Object.entries(routes).reverse() : Object.entries(routes)
    for (const [name, route] of ordered) runs.set(name, [...(runs.get(name) ?? []), await load(route)])
  }
  const median = (name: string): Run => {
    const sorted = [...(runs.get(name) ?? [])].sort((x, y) => rate(x) - rate(y))
    return sorted[sorted.length >> 1]
  }
  const base = median(baseline)
  for (const name of Object.keys(routes)) {
    const r = median(name)
    const all = (runs.get(name) ?? []).map(rate).join('/')
    const row = [level, name, String(rate(r)), all, String(r.latency.p99), r.cpuPerRequest.toFixed(0),
      (rate(r) / rate(base)).toFixed(2), (base.cpuPerRequest / r.cpuPerRequest).toFixed(2)]
    if (abba) {
      // Each round's ratio against the baseline's run of the same round, then their median.
      const own = runs.get(name) ?? []
      const baseRuns = runs.get(baseline) ?? []
      const middle = (values: number[]): number => values.sort((x, y) => x - y)[values.length >> 1]
      row.push(middle(own.map((run, i) => rate(run) / rate(baseRuns[i]))).toFixed(2),
        middle(own.map((run, i) => baseRuns[i].cpuPerRequest / run.cpuPerRequest)).toFixed(2))
    }
    rows.push(row)
  }
  for (const server of servers) await stopServer(server)
}

const versus = mode === 'pg' ? 'SQLite storage' : 'hand-written'
console.log(`\nMachine: ${cpus().length} x ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}; ` +
  `MODE=${mode}, server ${underTsx ? 'under node --import tsx' : 'compiled, plain node'}${handApart ? ', the hand-written routes in a process of their own' : ''}; ${seconds} s per run after ${warmUpSeconds} s of warm-up a route, ${connections} connections, median of ${ROUNDS} interleaved runs${abba ? ' (ABBA: the order reversed every other round)' : ''}${fresh ? ', each round in new server processes' : ''}\n`)
const roundRatios = abba ? ` median of the rounds' throughput ratios | median of the rounds' CPU ratios |` : ''
console.log(`| LOG_LEVEL | route | req/s (median) | req/s of each run | p99 ms | server CPU µs/req | throughput vs ${versus} | CPU vs ${versus} |${roundRatios}`)
console.log(`|---|---|---:|---:|---:|---:|---:|---:|${abba ? '---:|---:|' : ''}`)
for (const r of rows) console.log(`| ${r.join(' | ')} |`)
