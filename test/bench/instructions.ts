// Instructions a request, counted rather than timed: each route of the
// example bench server (example-bench-server.ts, CACHE=off, LOG_LEVEL=warn)
// in a server process of its own under valgrind's callgrind, as
// example-vs-handwritten.ts gives each side a process. After a warm-up, the
// count runs over `requests` requests from four keep-alive connections, for
// the main thread and for all threads; callgrind's cache and branch
// simulation adds its misses (a model's, not this CPU's). The same code
// in two processes mostly counts within 1%, whatever else the machine does
// (one process in about ten counted 7% more: the JIT's choices differ from
// process to process; rerun a surprising figure), so a change of a thousand
// instructions shows where a timed run cannot. But a count is not a time:
// cache misses and mispredicted branches cost time the count does not
// show. "All threads" takes in V8's optimizing compiler, still at work
// after the warm-up: on 2026-11-28, 45,000 instructions a request of the
// example's json and 15,000 of the hand-written route ran in its threads
// (GraphReducer and the like), where a timed run's server optimized two
// functions in all after its first 10 seconds (--trace-opt); read the
// main thread's column. Not a test: run it with
//   npx tsx test/bench/instructions.ts [routes, e.g. hand,json,download] [requests] [warm-up requests]
// ROOT=<another checkout> counts that one's code. KEEP=1 keeps the callgrind files and perf maps (their paths are printed).
// DIFF=1 then lists the functions whose counts differ most between the
// first two routes (JIT code named through node's --perf-basic-prof map).
// Needs valgrind; about a minute a route.
import { execFileSync, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import http from 'node:http'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { compileForBench, REPO } from './compile.js'
import { benchServerStarted, type BenchRoute } from './example-bench-start.js'

const routes = (process.argv[2] ?? 'hand,json,download').split(',')
const requests = Number(process.argv[3] ?? 1000)
const warmUp = Number(process.argv[4] ?? 5000)
const dir = mkdtempSync(join(tmpdir(), 'fde-instructions-'))
if (process.env.KEEP === '1') console.log(`callgrind files in ${dir}`)
else process.on('exit', () => rmSync(dir, { recursive: true, force: true }))
// ROOT: another checkout of this repository (a git worktree of an older commit) to count instead.
const root = process.env.ROOT ?? REPO
const entry = compileForBench(join(root, 'test/bench/example-bench-server.ts'), join(dir, 'build'), root)
const EVENTS = ['Ir', 'I1mr', 'D1mr', 'Bcm', 'Bim'] as const

interface Count { route: string, all: number, main: Record<string, number>, file: string, pid: number }

async function count (route: string, run: number): Promise<Count> {
  const out = join(dir, `cg.${run}`)
  const child = spawn('valgrind', ['--tool=callgrind', '--instr-atstart=no', '--smc-check=all-non-file', `--callgrind-out-file=${out}`,
    '--dump-instr=no', '--separate-threads=yes', '--cache-sim=yes', '--branch-sim=yes', process.execPath, '--perf-basic-prof', entry],
  { cwd: REPO, env: { ...process.env, LOG_LEVEL: 'warn', CACHE: 'off' }, stdio: ['ignore', 'pipe', 'ignore'] })
  const { key, urls } = await benchServerStarted(child)
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 })
  const url = urls[route as BenchRoute]
  const get = async (): Promise<void> => await new Promise((resolve, reject) => {
    http.get(url, { agent, headers: { authorization: `Bearer ${key}` } }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`${route}: ${res.statusCode ?? 0}`))
      res.resume()
      res.on('end', resolve)
    }).on('error', reject)
  })
  const load = async (n: number): Promise<void> => {
    let left = n
    await Promise.all([0, 1, 2, 3].map(async () => { while (left-- > 0) await get() }))
  }
  const pid = String(child.pid)
  await load(warmUp)
  execFileSync('callgrind_control', ['-z', pid], { stdio: 'ignore' })
  execFileSync('callgrind_control', ['-i', 'on', pid], { stdio: 'ignore' })
  await load(requests)
  execFileSync('callgrind_control', ['-i', 'off', pid], { stdio: 'ignore' })
  execFileSync('callgrind_control', ['-d', pid], { stdio: 'ignore' })
  child.kill('SIGKILL')
  agent.destroy()
  let all = 0
  let main: Record<string, number> = {}
  let file = ''
  // One dump a thread: cg.<run>.1-<thread>; thread 01 is the main thread.
  for (const name of readdirSync(dir).filter((f) => f.startsWith(`cg.${run}.`))) {
    const text = readFileSync(join(dir, name), 'utf8')
    const names = (/^events: (.+)$/m.exec(text)?.[1] ?? '').trim().split(/\s+/)
    const totals = (/^totals: (.+)$/m.exec(text)?.[1] ?? '0').trim().split(/\s+/).map(Number)
    all += totals[0] / requests
    if (name.endsWith('-01')) {
      main = Object.fromEntries(names.map((n, i) => [n, (totals[i] ?? 0) / requests]))
      file = join(dir, name)
    }
  }
  return { route, all, main, file, pid: child.pid ?? 0 }
}

/** Function name → event count a request, self cost, JIT code named by the process's perf map. */
function byFunction (c: Count, event: string): Map<string, number> {
  const map = `/tmp/perf-${c.pid}.map`
  const ranges: Array<[number, number, string]> = []
  if (existsSync(map)) {
    for (const line of readFileSync(map, 'utf8').split('\n')) {
      const m = /^([0-9a-f]+) ([0-9a-f]+) (.*)$/.exec(line)
      if (m !== null) ranges.push([parseInt(m[1], 16), parseInt(m[2], 16), m[3]])
    }
  }
  // The latest entry wins: code moves, and its addresses are reused.
  const jitName = (address: number): string | undefined => {
    for (let i = ranges.length - 1; i >= 0; i--) if (address >= ranges[i][0] && address < ranges[i][0] + ranges[i][1]) return ranges[i][2]
    return undefined
  }
  const text = execFileSync('callgrind_annotate', ['--inclusive=no', `--show=${event}`, `--sort=${event}`, '--threshold=100', c.file], { encoding: 'utf8', maxBuffer: 1 << 28 })
  const counts = new Map<string, number>()
  let started = false
  for (const line of text.split('\n')) {
    if (line.includes('file:function')) {
      started = true
      continue
    }
    const m = started ? /^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(.+)$/.exec(line) : null
    if (m === null) continue
    const address = /^\?\?\?:0x([0-9a-f]+)/.exec(m[2])
    const name = ((address !== null ? jitName(parseInt(address[1], 16)) : undefined) ?? m[2])
      .replace(/\s*\[.*\]$/, '').replace(/^\?\?\?:/, '').replace(/^JS:[*^~+]?/, 'JS ')
      .replace(/file:\/\/\/tmp\/fde-instructions-[^/]+\/build\//, '').replace(`${REPO}/node_modules/`, '').slice(0, 100)
    counts.set(name, (counts.get(name) ?? 0) + Number(m[1].replace(/,/g, '')) / requests)
  }
  return counts
}

const results: Count[] = []
for (const [run, route] of routes.entries()) results.push(await count(route, run))
const k = (n: number): string => (n / 1000).toFixed(1)
console.log(`\nMachine: ${cpus().length} x ${cpus()[0]?.model.trim() ?? 'unknown'}, Node ${process.version}; ${requests} requests a route after ${warmUp}; thousands a request\n`)
console.log('| route | instructions, all threads | instructions, main thread | I1 misses | D1 read misses | conditional branches mispredicted | indirect branches mispredicted |')
console.log('|---|---:|---:|---:|---:|---:|---:|')
for (const r of results) console.log(`| ${r.route} | ${k(r.all)} | ${EVENTS.map((e) => k(r.main[e] ?? 0)).join(' | ')} |`)

if (process.env.DIFF === '1' && results.length >= 2) {
  const [a, b] = results
  for (const event of ['Ir', 'Bcm', 'D1mr']) {
    const [ca, cb] = [byFunction(a, event), byFunction(b, event)]
    const rows = [...new Set([...ca.keys(), ...cb.keys()])].map((name) => [name, ca.get(name) ?? 0, cb.get(name) ?? 0] as const)
      .sort((x, y) => Math.abs(y[2] - y[1]) - Math.abs(x[2] - x[1])).slice(0, 30)
    console.log(`\n${event}, main thread, a request: ${a.route} against ${b.route}, the 30 functions that differ most\n`)
    console.log(`| ${a.route} | ${b.route} | difference | function |\n|---:|---:|---:|---|`)
    for (const [name, x, y] of rows) console.log(`| ${x.toFixed(0)} | ${y.toFixed(0)} | ${(y - x).toFixed(0)} | \`${name}\` |`)
  }
}
if (process.env.KEEP !== '1') for (const r of results) rmSync(`/tmp/perf-${r.pid}.map`, { force: true })
else for (const r of results) console.log(`${r.route}: ${r.file}, /tmp/perf-${r.pid}.map`)
