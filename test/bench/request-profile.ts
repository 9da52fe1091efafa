// Where a request's server CPU goes, in µs per request, on the example bench
// server (example-bench-server.ts, CACHE=off, LOG_LEVEL=warn): each route is
// loaded with autocannon (20 connections) while `perf record` samples the
// server's threads, and the samples are shared out, for the main thread, by
// the innermost JavaScript frame (native code and the kernel count for the
// JavaScript that called them: a SQLite read for the function that ran it, a
// socket write for the stream code) and by its module. Not a test: run it with
//   nice -n -20 npx tsx test/bench/request-profile.ts [routes, e.g. json,hand] [seconds]
// Three tables a route: µs by module and by innermost frame, then by frame
// with everything it called (inclusive).
// Routes: json (the example's authenticated json of `sales`), meta
// (meta=entities), hand (the hand-written route), download (a Map key check
// and the plugin's download code), bare (precomputed bytes), miss (the
// example's json with a new `limit` each request: with CACHE=on, every
// request misses the rendered-body cache). CACHE=on: the example's datasets
// keep their revision (json is then served from the cache). Needs Linux
// `perf`. Inlined functions count under their caller; compare two routes or
// two versions rather than reading one figure as exact.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import autocannon from 'autocannon'
import { compileForBench, REPO } from './compile.js'
import { benchServerStarted, routeLoad, type LoadedRoute } from './example-bench-start.js'
import { mainThreadStacks, PERF_NODE_ARGS, recordPerf } from './perf-samples.js'

const routes = (process.argv[2] ?? 'json,hand').split(',') as LoadedRoute[]
const seconds = Number(process.argv[3] ?? 8)
const FREQUENCY = 2000 // samples a second
const TOP = 25
const TOP_INCLUSIVE = 60

// PERF_KEEP=1 keeps perf's files (their folder is printed) for `perf report`.
const dir = mkdtempSync(join(tmpdir(), 'fde-request-profile-'))
if (process.env.PERF_KEEP === '1') console.log(`perf files in ${dir}`)
else process.on('exit', () => rmSync(dir, { recursive: true, force: true }))
const entry = compileForBench(join(REPO, 'test/bench/example-bench-server.ts'), join(dir, 'build'))
// In the temporary folder: the JIT's dump goes to the process's own (PERF_NODE_ARGS).
const child = spawn(process.execPath, [...PERF_NODE_ARGS, entry], {
  cwd: dir, env: { ...process.env, LOG_LEVEL: 'warn', CACHE: process.env.CACHE ?? 'off' }, stdio: ['ignore', 'pipe', 'inherit']
})
const start = await benchServerStarted(child)

/** The main thread's samples (stacks of frame names, innermost first) while `route` is loaded, and the requests answered meanwhile. */
async function record (route: LoadedRoute): Promise<{ stacks: string[][], requests: number }> {
  const options = routeLoad(start, route)
  await autocannon({ ...options, duration: 2 }) // warm-up
  const load = autocannon({ ...options, duration: seconds + 3 })
  await sleep(1500)
  const data = join(dir, `perf-${route}.data`)
  await recordPerf(child.pid as number, data, seconds, FREQUENCY)
  // After the load: its rate counts the requests of the whole run.
  const result = await load
  if (result.non2xx > 0) throw new Error(`${route}: ${result.non2xx} requests failed`)
  const stacks = mainThreadStacks(data)
  return { stacks, requests: result.requests.average * seconds }
}

/** The innermost JavaScript frame of a sample, without the build directory; or the native frame it ran in. */
function innermostJs (stack: string[]): string {
  const js = stack.find((frame) => frame.startsWith('JS:'))
  if (js === undefined) return `(no JavaScript frame) ${stack.find((f) => /^(uv__|node::|v8::)/.test(f)) ?? stack[0] ?? ''}`
  return js.replace(/^JS:[*~^]?/, '').replace(/file:\/\/\/\S*?\/build\//, '').replace(/\/\S*?\/node_modules\//, '')
}

function moduleOf (frame: string): string {
  if (frame.startsWith('(no JavaScript frame)')) return '(no JavaScript frame: the event loop, GC, the parser)'
  return /(node:[a-z_/]+|(?:lib|examples|test)\/[a-z]+(?:\/[a-z-]+)?|@fastify\/[a-z-]+|[a-z-]+\/(?=lib|index|fastify))/.exec(frame)?.[1] ?? 'other'
}

for (const route of routes) {
  const { stacks, requests } = await record(route)
  const perRequest = (samples: number): string => (samples / FREQUENCY * 1e6 / requests).toFixed(1)
  const tally = (name: (stack: string[]) => string): Array<[string, number]> => {
    const counts = new Map<string, number>()
    for (const stack of stacks) counts.set(name(stack), (counts.get(name(stack)) ?? 0) + 1)
    return [...counts].sort((a, b) => b[1] - a[1]).slice(0, TOP)
  }
  console.log(`\n${route}: ${Math.round(requests / seconds)} req/s; the main thread ${perRequest(stacks.length)} µs of CPU a request\n`)
  console.log('| µs/req | module (by the innermost JavaScript frame) |\n|---:|---|')
  for (const [name, n] of tally((s) => moduleOf(innermostJs(s)))) console.log(`| ${perRequest(n)} | ${name} |`)
  console.log('\n| µs/req | innermost JavaScript frame |\n|---:|---|')
  for (const [name, n] of tally(innermostJs)) console.log(`| ${perRequest(n)} | \`${name}\` |`)
  // Inclusive: a frame with everything it called, each frame once per sample.
  const inclusive = new Map<string, number>()
  for (const stack of stacks) {
    for (const frame of new Set(stack.filter((f) => f.startsWith('JS:')).map((f) => innermostJs([f])))) {
      inclusive.set(frame, (inclusive.get(frame) ?? 0) + 1)
    }
  }
  console.log('\n| µs/req | JavaScript frame with what it called |\n|---:|---|')
  for (const [name, n] of [...inclusive].sort((a, b) => b[1] - a[1]).slice(0, TOP_INCLUSIVE)) console.log(`| ${perRequest(n)} | \`${name}\` |`)
}
child.kill('SIGTERM')
await once(child, 'exit')
