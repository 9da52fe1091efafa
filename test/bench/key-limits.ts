// What per-key limits cost (issue 26): authenticated meta=entities GETs on
// SQLite with a key without limits, a key with a request limit (one upsert
// per call), and a key with all three (the upsert, the day's bytes read with
// the lookup, a download slot claimed and freed). The limits are far above
// what the run reaches, so every answer is a 200. Not a test: run it with
//   nice -n -20 npx tsx test/bench/key-limits.ts [seconds-per-run] [plain]
// and record the printed table in docs/benchmarks.md. `plain` runs the key
// without limits only: run so from a copy of an older commit, it gives the
// figure from before limits existed.
import { cpus, totalmem, tmpdir } from 'node:os'
import { mkdtempSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import autocannon, { type Options, type Result } from 'autocannon'
import { call, startBenchServer, stopBenchServer } from './bench-process.js'
import { withCpuPerRequest, type CpuMeasured } from './process-cpu.js'
import { compileForBench, REPO } from './compile.js'

const seconds = Number(process.argv[2] ?? 5)
const plainOnly = process.argv[3] === 'plain'
const ROUNDS = 3

const buildDir = mkdtempSync(join(tmpdir(), 'fde-bench-build-'))
process.on('exit', () => rmSync(buildDir, { recursive: true, force: true }))
const server = await startBenchServer(compileForBench(join(REPO, 'test/bench/bench-server.ts'), buildDir))

type Run = CpuMeasured

async function load (options: Options): Promise<Run> {
  const result = await withCpuPerRequest(server.child, () => autocannon({ connections: 50, pipelining: 1, duration: seconds, ...options }))
  if (result.non2xx > 0) throw new Error(`${options.url}: ${result.non2xx} non-2xx answers`)
  return result
}

const URL_ENTITIES = `${server.base}/api/acme/shop/model/1/dataset/1?meta=entities`
const BIG = 1e12
const kinds: Record<string, unknown> = plainOnly
  ? { plain: undefined }
  : {
      plain: undefined,
      requestLimit: { requestsPerMinute: BIG },
      allLimits: { requestsPerMinute: BIG, concurrentDownloads: 1_000_000, bytesPerDay: BIG * 1000 }
    }
const keys: Record<string, string> = {}
for (const [name, limits] of Object.entries(kinds)) {
  const k = await call(server.base, 'POST', '/api-keys/acme/shop/keys', limits === undefined ? { purpose: name } : { purpose: name, limits })
  keys[name] = k.key
  ;(kinds as Record<string, unknown>)[name] = k.id
}
await call(server.base, 'PUT', '/api-keys/acme/shop/endpoints/1/dataset/1', { keyIds: Object.values(kinds) })
const options = (name: string): Options => ({ url: URL_ENTITIES, headers: { authorization: `Bearer ${keys[name]}` } })
for (const name of Object.keys(keys)) {
  // Each key's one bcrypt first: 50 first requests at once would find the comparison queue full (429).
  await (await fetch(URL_ENTITIES, { headers: { authorization: `Bearer ${keys[name]}` } })).arrayBuffer()
  await load({ ...options(name), duration: 2 }) // warm-up
}

// Runs vary on a shared machine: each kind ROUNDS times, interleaved; the median rate counts.
const runs: Record<string, Run[]> = {}
for (let round = 0; round < ROUNDS; round++) {
  for (const name of Object.keys(keys)) (runs[name] ??= []).push(await load(options(name)))
}
await stopBenchServer(server)
const rate = (r: Result): number => Math.round(r.requests.average)
const median = (name: string): Run => [...runs[name]].sort((x, y) => rate(x) - rate(y))[ROUNDS >> 1]
const plain = median('plain')

console.log(`\nMachine: ${cpus().length} x ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}; ${seconds} s per run, 50 connections, median of ${ROUNDS}`)
console.log('| key | req/s | p99 ms | server CPU µs/req | throughput vs no limits | CPU vs no limits | rates of the runs |')
console.log('|---|---:|---:|---:|---:|---:|---|')
for (const name of Object.keys(keys)) {
  const r = median(name)
  console.log(`| ${name} | ${rate(r)} | ${r.latency.p99} | ${r.cpuPerRequest.toFixed(0)} | ${(rate(r) / rate(plain)).toFixed(3)} | ` +
    `${(r.cpuPerRequest / plain.cpuPerRequest).toFixed(3)} | ${runs[name].map(rate).join(', ')} |`)
}
