// What a request allocates on the V8 heap, per route of the example bench
// server (example-bench-server.ts, LOG_LEVEL=warn, CACHE=off unless given):
// V8's sampling heap profiler, told to keep what the collector has freed,
// counts every byte allocated while a route is loaded (one sample every
// 1 KiB), and before it a `gc` performance observer the collectors' time
// over as many requests; both run in the server, a process of its own for
// each route. Not a test: run it with
//   nice -n -20 npx tsx test/bench/allocations.ts [routes, e.g. json,hand] [requests]
// Routes as request-profile.ts: json, meta, hand, download, bare, miss (with
// CACHE=on). Prints, for each route, the bytes a request allocates, the
// collectors' time a request, and the functions that allocate most. A
// heap that takes more bytes a request is scavenged more often, and on a
// machine slow at memory every new byte is a cache line written.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { compileForBench, REPO } from './compile.js'
import { benchServerStarted, routeLoad, type LoadedRoute } from './example-bench-start.js'

const routes = (process.argv[2] ?? 'json,hand,download').split(',') as LoadedRoute[]
const requests = Number(process.argv[3] ?? 20_000)
const TOP = 15
const SAMPLING_INTERVAL = 1024 // bytes

const dir = mkdtempSync(join(tmpdir(), 'fde-allocations-'))
process.on('exit', () => rmSync(dir, { recursive: true, force: true }))
const entry = compileForBench(join(REPO, 'test/bench/example-bench-server.ts'), join(dir, 'build'))
// The server under a wrapper that, at each SIGUSR2, starts timing the
// collectors; then stops and starts sampling (the profiler's own work would
// lengthen the collections); then writes the profile and the timing.
const wrapper = join(dir, 'build', 'allocation-sampler.mjs')
writeFileSync(wrapper, `
import { Session } from 'node:inspector/promises'
import { writeFileSync } from 'node:fs'
import { PerformanceObserver } from 'node:perf_hooks'
const session = new Session()
session.connect()
let step = 0
let gcMs = 0
new PerformanceObserver((list) => { for (const e of list.getEntries()) if (step === 1) gcMs += e.duration }).observe({ entryTypes: ['gc'] })
process.on('SIGUSR2', async () => {
  step++
  if (step === 2) await session.post('HeapProfiler.startSampling', { samplingInterval: ${SAMPLING_INTERVAL}, includeObjectsCollectedByMinorGC: true, includeObjectsCollectedByMajorGC: true })
  if (step === 3) {
    const { profile } = await session.post('HeapProfiler.stopSampling')
    writeFileSync(process.env.PROFILE_FILE, JSON.stringify({ profile, gcMs }))
  }
  console.log('step ' + step)
})
await import(${JSON.stringify(entry)})
`)

interface ProfileNode { callFrame: { functionName: string, url: string, lineNumber: number }, selfSize: number, children: ProfileNode[] }

for (const route of routes) {
  const file = join(dir, `${route}.json`)
  const child = spawn(process.execPath, [wrapper], {
    cwd: dir, env: { ...process.env, LOG_LEVEL: 'warn', CACHE: process.env.CACHE ?? 'off', PROFILE_FILE: file }, stdio: ['ignore', 'pipe', 'inherit']
  })
  const start = await benchServerStarted(child)
  let said = ''
  child.stdout?.on('data', (data: Buffer) => { said += data.toString() })
  const heard = async (word: string): Promise<void> => { while (!said.includes(word)) await new Promise((resolve) => setTimeout(resolve, 20)) }
  const load = routeLoad(start, route)
  await autocannon({ ...load, amount: 5000 }) // warm-up: the JIT's work and first-use allocations are not counted
  for (const step of [1, 2, 3]) {
    child.kill('SIGUSR2')
    await heard(`step ${step}`)
    if (step === 3) break
    const result = await autocannon({ ...load, amount: requests })
    if (result.non2xx > 0) throw new Error(`${route}: ${result.non2xx} requests failed`)
  }
  const { profile, gcMs } = JSON.parse(readFileSync(file, 'utf8')) as { profile: { head: ProfileNode }, gcMs: number }
  const bySite = new Map<string, number>()
  let total = 0
  const walk = (node: ProfileNode): void => {
    const { functionName, url, lineNumber } = node.callFrame
    const site = `${functionName === '' ? '(anonymous)' : functionName} ${url.replace(/^.*\/node_modules\//, '').replace(/^.*\/build\//, '')}:${lineNumber + 1}`
    if (node.selfSize > 0) {
      bySite.set(site, (bySite.get(site) ?? 0) + node.selfSize)
      total += node.selfSize
    }
    for (const next of node.children) walk(next)
  }
  walk(profile.head)
  const perRequest = (bytes: number): string => (bytes / requests).toFixed(0)
  console.log(`\n${route}: ${perRequest(total)} bytes allocated a request; the collectors ${(gcMs * 1000 / requests).toFixed(2)} µs a request\n`)
  console.log('| bytes/req | allocated in |\n|---:|---|')
  for (const [site, bytes] of [...bySite].sort((a, b) => b[1] - a[1]).slice(0, TOP)) console.log(`| ${perRequest(bytes)} | \`${site}\` |`)
  child.kill('SIGTERM')
  await once(child, 'exit')
}
