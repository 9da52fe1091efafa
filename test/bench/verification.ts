// Benchmarks of the request path (issue "3 ·"), each against a bare Fastify
// route in the same server and the same run. Not a test: run it with
//   npx tsx test/bench/verification.ts [seconds-per-run] [scenarios, e.g. ad]
// and record the printed table in docs/benchmarks.md.
//   (a) authenticated format=json GET of a small dataset vs the bare route
//   (b) first-request verification cost with 1, 10 and 100 keys assigned
//   (c) legitimate traffic during a wrong-secret flood on a known prefix
//   (d) pipeline POST throughput
import { cpus, totalmem } from 'node:os'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon, { type Options, type Result } from 'autocannon'
import { call, newKeys, startBenchServer, stopBenchServer, type BenchServer } from './bench-process.js'
import { withCpuPerRequest, type CpuMeasured } from './process-cpu.js'
import { compileForBench, REPO } from './compile.js'

const seconds = Number(process.argv[2] ?? 10)
// (a) runs each of its routes this many times (see there)
const ROUNDS = 3
// Which scenarios to run, e.g. `ad`; all by default.
const only = process.argv[3] ?? 'abcd'

// The server runs compiled, under plain node (see compile.ts).
const buildDir = mkdtempSync(join(tmpdir(), 'fde-bench-build-'))
process.on('exit', () => rmSync(buildDir, { recursive: true, force: true }))
const serverEntry = compileForBench(join(REPO, 'test/bench/bench-server.ts'), buildDir)

// A key for the @fastify/bearer-auth reference route, the length of ours.
const BEARER_KEY = randomBytes(24).toString('base64url').slice(0, 32)

async function startServer (env: Record<string, string> = {}): Promise<BenchServer> {
  return startBenchServer(serverEntry, { env: { BENCH_BEARER_KEY: BEARER_KEY, ...env } })
}

type Run = CpuMeasured

/**
 * One autocannon run, with the server's CPU time per request (microseconds):
 * steadier than throughput when the load generator shares the machine.
 */
async function load (server: BenchServer, options: Options): Promise<Run> {
  return withCpuPerRequest(server.child, () => autocannon({ connections: 50, pipelining: 1, duration: seconds, ...options }))
}

function rate (r: Result): number {
  return Math.round(r.requests.average)
}

function cpu (r: Run): string {
  return r.cpuPerRequest.toFixed(0)
}

const DATASET = '/api/acme/shop/model/1/dataset/1'
const PIPELINE = '/api/acme/shop/model/1/pipeline/1'
const rows: string[][] = []
const note = (...cells: Array<string | number>): void => { rows.push(cells.map(String)) }

// (a) and (d)
if (only.includes('a') || only.includes('d')) {
  const server = await startServer()
  const [k] = await newKeys(server.base, 1)
  await call(server.base, 'PUT', '/api-keys/acme/shop/endpoints/1/dataset/1', { keyIds: [k.id] })
  await call(server.base, 'PUT', '/api-keys/acme/shop/endpoints/1/pipeline/1', { keyIds: [k.id] })
  const auth = { authorization: `Bearer ${k.key}` }
  await load(server, { url: server.base + '/bare', duration: 2 }) // warm-up
  await load(server, { url: `${server.base}${DATASET}?format=json`, headers: auth, duration: 2 })
  // Runs on this kind of machine vary by ±15%, so each route runs ROUNDS
  // times, the routes interleaved, and the run with the median rate counts.
  const routes = {
    bare: { url: server.base + '/bare' },
    bearer: { url: server.base + '/bare/bearer', headers: { authorization: `Bearer ${BEARER_KEY}` } },
    lookup: { url: server.base + '/bare/lookup', headers: auth },
    hmac: { url: server.base + '/bare/memo-digest', headers: auth },
    naive: { url: `${server.base}/bare/naive-download` },
    unauthenticated: { url: `${server.base}/bare/unauthenticated?format=json` },
    lookupDownload: { url: `${server.base}/bare/lookup-download?format=json`, headers: auth },
    data: { url: `${server.base}${DATASET}?format=json`, headers: auth }
  } satisfies Record<string, Options>
  const runs: Record<string, Run[]> = {}
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, options] of Object.entries(routes)) (runs[name] ??= []).push(await load(server, options))
  }
  const median = (name: string): Run => {
    const sorted = [...runs[name]].sort((x, y) => rate(x) - rate(y))
    if (sorted.some((r) => r.non2xx > 0)) throw new Error(`(a) ${name}: non-2xx answers`)
    return sorted[sorted.length >> 1]
  }
  const { bare, bearer, lookup, hmac, naive, unauthenticated, lookupDownload, data } =
    Object.fromEntries(Object.keys(routes).map((name) => [name, median(name)])) as Record<keyof typeof routes, Run>
  const versusBare = (r: Run): string[] => [(rate(r) / rate(bare)).toFixed(2), (bare.cpuPerRequest / r.cpuPerRequest).toFixed(2)]
  note('(a) bare route, same bytes precomputed', rate(bare), bare.latency.p99, cpu(bare), '1.00', '1.00')
  note('(a) reference: @fastify/bearer-auth (one key in clear) + the same bytes', rate(bearer), bearer.latency.p99, cpu(bearer), ...versusBare(bearer))
  note('(a) floor: the one storage read a request must make + the same bytes', rate(lookup), lookup.latency.p99, cpu(lookup), ...versusBare(lookup))
  note('(a) floor: the one memo digest a request must compute + the same bytes', rate(hmac), hmac.latency.p99, cpu(hmac), ...versusBare(hmac))
  note('(a) lower bound for a download: the rows read from the same source, JSON.stringify, the same bytes', rate(naive), naive.latency.p99, cpu(naive), ...versusBare(naive))
  note('(a) bare route, same bytes made by the download code, no key check', rate(unauthenticated), unauthenticated.latency.p99, cpu(unauthenticated), ...versusBare(unauthenticated))
  note('(a) the download code after the one storage read, no other check', rate(lookupDownload), lookupDownload.latency.p99, cpu(lookupDownload), ...versusBare(lookupDownload))
  note('(a) authenticated json GET, Bearer', rate(data), data.latency.p99, cpu(data), ...versusBare(data))
  const versus = (r: Run): string[] => [(rate(data) / rate(r)).toFixed(2), (r.cpuPerRequest / data.cpuPerRequest).toFixed(2)]
  note('(a) verification alone: authenticated / download code without key check', '', '', '', ...versus(unauthenticated))
  note('(a) verification beyond the read: authenticated / download code after the read', '', '', '', ...versus(lookupDownload))

  const barePost = await load(server, { url: server.base + '/bare/pipeline' })
  const post = await load(server, { url: server.base + PIPELINE, method: 'POST', headers: auth })
  note('(d) bare route, job-reference JSON', rate(barePost), barePost.latency.p99, cpu(barePost), '1.00', '1.00')
  note('(d) pipeline POST', rate(post), post.latency.p99, cpu(post), (rate(post) / rate(barePost)).toFixed(2), (barePost.cpuPerRequest / post.cpuPerRequest).toFixed(2))
  if (post.non2xx > 0) throw new Error(`(d) ${post.non2xx} non-2xx answers`)
  await stopBenchServer(server)
}

// (b): first request of each of 10 keys, with 1, 10 and 100 keys assigned.
if (only.includes('b')) {
  const server = await startServer()
  for (const assigned of [1, 10, 100]) {
    await call(server.base, 'DELETE', '/api-keys/acme/shop/endpoints/1/dataset/1').catch(() => {})
    const keys = await newKeys(server.base, assigned)
    const samples: number[] = []
    // Each sample: a key never used before, with `assigned` keys on the endpoint.
    for (let i = 0; i < 10; i++) {
      const fresh = await newKeys(server.base, 1)
      const onEndpoint = [...keys.slice(0, assigned - 1).map((k) => k.id), fresh[0].id]
      await call(server.base, 'PUT', '/api-keys/acme/shop/endpoints/1/dataset/1', { keyIds: onEndpoint })
      const start = process.hrtime.bigint()
      const res = await fetch(`${server.base}${DATASET}?format=json`, { headers: { authorization: `Bearer ${fresh[0].key}` } })
      await res.arrayBuffer()
      samples.push(Number(process.hrtime.bigint() - start) / 1e6)
      if (res.status !== 200) throw new Error(`(b) status ${res.status}`)
    }
    samples.sort((x, y) => x - y)
    note(`(b) first request, ${assigned} key(s) assigned: median ms (min-max)`, samples[5].toFixed(1), `${samples[0].toFixed(1)}-${samples[9].toFixed(1)}`, '', '', '')
  }
  await stopBenchServer(server)
}

// (c): legitimate traffic alone, then during a flood of wrong secrets on its prefix.
for (const throttle of only.includes('c') ? ['on', 'off'] : []) {
  const server = await startServer(throttle === 'off' ? { BENCH_THROTTLE: 'off' } : {})
  const [k] = await newKeys(server.base, 1)
  await call(server.base, 'PUT', '/api-keys/acme/shop/endpoints/1/dataset/1', { keyIds: [k.id] })
  const legitOptions: Options = { url: `${server.base}${DATASET}?format=json`, headers: { authorization: `Bearer ${k.key}` }, connections: 10 }
  await load(server, { ...legitOptions, duration: 2 })
  const alone = await load(server, legitOptions)
  const prefix = k.key.slice(0, 11)
  const floodRun = load(server, {
    url: server.base + DATASET,
    connections: 50,
    requests: [{
      setupRequest: (request) => ({
        ...request,
        path: `${DATASET}?api_key=${prefix}${randomBytes(16).toString('base64').replace(/[^A-Za-z0-9]/g, 'x').slice(0, 21)}`
      })
    }]
  })
  const during = await load(server, legitOptions)
  const flood = await floodRun
  const ratio = (rate(during) / rate(alone)).toFixed(2)
  note(`(c) throttle ${throttle}: legitimate alone (10 conns)`, rate(alone), alone.latency.p99, cpu(alone), '1.00', '')
  note(`(c) throttle ${throttle}: legitimate during flood`, rate(during), during.latency.p99, '', ratio, '')
  const codes = Object.entries(flood.statusCodeStats ?? {}).map(([c, s]) => `${c}:${(s as { count: number }).count}`).join(' ')
  note(`(c) throttle ${throttle}: flood (50 conns, random secrets) [${codes}]`, rate(flood), flood.latency.p99, '', '', '')
  if (during.non2xx > 0) throw new Error(`(c) ${during.non2xx} legitimate requests failed`)
  await stopBenchServer(server)
}

console.log(`\nMachine: ${cpus().length} x ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}; ${seconds} s per run, 50 connections unless stated; bcrypt cost 10\n`)
console.log('| scenario | req/s (or ms) | p99 ms (or range) | server CPU µs/req | throughput ratio | CPU ratio |')
console.log('|---|---:|---:|---:|---:|---:|')
for (const r of rows) console.log(`| ${r.join(' | ')} |`)
