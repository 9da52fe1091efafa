// Two versions of the code, served at once and loaded at once: the server
// CPU each spends per request (from /proc), side by side. Not a test: run it with
//   nice -n -20 npx tsx test/bench/versions.ts <A> <B> [route or routeA,routeB] [seconds] [rounds]
// A and B are commits (anything `git worktree add` takes), or `.` for the
// files as they are. Each is compiled (compile.ts, this checkout's packages) and runs the example
// bench server (example-bench-server.ts) with CACHE=off and LOG_LEVEL=warn.
// Routes: json (the example's authenticated json of `sales`), meta
// (meta=entities), hand (the hand-written route), download (a Map key check
// and the plugin's download code), miss (the example's json with its
// revision and a new `limit` each request: every request misses the
// rendered-body cache). Default: json on both. With DATABASE_URL
// and DATABASE_SCHEMA, both on PostgreSQL, in schemas <schema>_a and _b
// (left behind: drop them after). With 10 connections a server, PostgreSQL
// mode's batches are small, and its rounds spread ±5% (2026-11-27).
//
// Why: runs one after the other on this shared 2-core machine vary by ±15%,
// more than most changes to the request path. Loaded at the same moment, the
// two servers see the same machine, and their CPU per request differed by
// ±4% between rounds of one version against itself (2026-11-26). Between
// runs it can be more: on 2026-11-27 (late night) two forms of one change
// read 7.7-10.4% and 0-2% cheaper, and 1.0% against each other; trust an
// effect under ~8% only when several runs agree. Throughput
// says little here: one autocannon process loading both servers at 5-15k
// req/s each is itself the bottleneck.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { benchServerStarted, missingLoad } from './example-bench-start.js'
import { compileForBench, REPO } from './compile.js'
import { withCpuPerRequest } from './process-cpu.js'

const [versionA, versionB] = [process.argv[2], process.argv[3]]
if (versionA === undefined || versionB === undefined) throw new Error('usage: versions.ts <A> <B> [route or routeA,routeB] [seconds] [rounds]')
const [routeA, routeB = routeA] = (process.argv[4] ?? 'json').split(',')
const seconds = Number(process.argv[5] ?? 6)
const rounds = Number(process.argv[6] ?? 3)
const CONNECTIONS = 10

const work = mkdtempSync(join(tmpdir(), 'fde-versions-'))
const trees: string[] = []
const children: ChildProcess[] = []
process.on('exit', () => {
  for (const child of children) child.kill('SIGTERM')
  for (const tree of trees) execFileSync('git', ['-C', REPO, 'worktree', 'remove', '--force', tree], { stdio: 'ignore' })
  rmSync(work, { recursive: true, force: true })
})

/** The source tree of a version: this checkout for `.`, else a worktree at the commit. */
function sourceOf (version: string, name: string): string {
  if (version === '.') return REPO
  const tree = join(work, `tree-${name}`)
  execFileSync('git', ['-C', REPO, 'worktree', 'add', '--detach', tree, version], { stdio: 'ignore' })
  trees.push(tree)
  return tree
}

interface Served { child: ChildProcess, url: string, key: string, route: string }

async function serve (entry: string, route: string, name: string): Promise<Served> {
  // With DATABASE_URL, each version on PostgreSQL in a schema of its own
  // (DATABASE_SCHEMA_a, _b): each server assigns its own key to the same endpoint.
  const schema = process.env.DATABASE_SCHEMA === undefined ? {} : { DATABASE_SCHEMA: `${process.env.DATABASE_SCHEMA}_${name}` }
  const cache = route === 'miss' ? 'on' : 'off'
  const child = spawn(process.execPath, [entry], { env: { ...process.env, LOG_LEVEL: 'warn', CACHE: cache, ...schema }, stdio: ['ignore', 'pipe', 'inherit'] })
  children.push(child)
  const { key, urls } = await benchServerStarted(child)
  const url = (urls as Record<string, string | undefined>)[route === 'miss' ? 'json' : route]
  if (url === undefined) throw new Error(`route: one of ${Object.keys(urls).join(', ')} or miss, not ${route}`)
  return { child, url, key, route }
}

/** The example bench server of a version, compiled. */
function compiled (version: string, name: string): string {
  const source = sourceOf(version, name)
  return compileForBench(join(source, 'test/bench/example-bench-server.ts'), join(work, name), source)
}

const a = await serve(compiled(versionA, 'a'), routeA, 'a')
const b = await serve(compiled(versionB, 'b'), routeB, 'b')
const load = async (s: Served, duration: number): Promise<{ rate: number, cpu: number }> => {
  const headers = { authorization: `Bearer ${s.key}` }
  const result = await withCpuPerRequest(s.child, () => autocannon({ ...(s.route === 'miss' ? missingLoad(s.url, headers) : { url: s.url, headers }), connections: CONNECTIONS, duration }))
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${s.url}: ${result.non2xx} non-2xx answers, ${result.errors} errors`)
  return { rate: result.requests.average, cpu: result.cpuPerRequest }
}
await Promise.all([load(a, 2), load(b, 2)]) // warm-up

console.log(`| round | A (${versionA}, ${routeA}): req/s | µs/req | B (${versionB}, ${routeB}): req/s | µs/req | CPU A / B (above 1: B is cheaper) |`)
console.log('|---|---:|---:|---:|---:|---:|')
const ratios: number[] = []
for (let round = 1; round <= rounds; round++) {
  const [x, y] = await Promise.all([load(a, seconds), load(b, seconds)])
  ratios.push(x.cpu / y.cpu)
  console.log(`| ${round} | ${Math.round(x.rate)} | ${x.cpu.toFixed(0)} | ${Math.round(y.rate)} | ${y.cpu.toFixed(0)} | ${(x.cpu / y.cpu).toFixed(3)} |`)
}
ratios.sort((x, y) => x - y)
console.log(`\nmedian CPU A / B: ${ratios[ratios.length >> 1].toFixed(3)}`)
process.exit(0)
