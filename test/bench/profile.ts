// Where the authenticated small download spends the server's CPU: runs the
// bench server under `perf record` while autocannon loads the (a) route, and
// prints the share of the server's main-thread samples whose stack holds each
// part. Needs Linux `perf` (Debian's linux-perf). Not a test: run it with
//   npx tsx test/bench/profile.ts [seconds]
// Inlined functions count under their caller, so compare shares between two
// versions of the code rather than reading them as exact, and record 8 s or
// more: in a 3 s run the memo digest's (then an HMAC's) frames did not show at all.
// The digest's closure is often inlined into the key verifier, and its row
// then reads 0% (2026-11-26): test/bench/request-profile.ts charges native
// time to the innermost JavaScript frame and shows the hash's cost instead.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import autocannon from 'autocannon'
import { call, newKeys, startBenchServer, stopBenchServer } from './bench-process.js'
import { compileForBench, REPO } from './compile.js'
import { mainThreadStacks, PERF_NODE_ARGS, recordPerf } from './perf-samples.js'

const seconds = Number(process.argv[2] ?? 8)

// Each sample counts for the first part, in this order, with a frame whose
// name holds one of the part's strings.
const DOWNLOAD = 'making the download (lib/formats, the source)'
const PARTS: Array<[string, ...string[]]> = [
  ['the memo digest (lib/keys/memo-digest)', '/lib/keys/memo-digest.js'],
  ['the storage read (better-sqlite3 Statement.get)', 'Statement::JS_get'],
  ['writing the response (writev)', 'writev'],
  [DOWNLOAD, '/lib/formats/', '/test/fixtures.js'],
  ['the rest of the request in llhttp callbacks (Fastify, the key hook, headers)', 'llhttp'],
  ['garbage collection', 'Scavenge', 'MarkCompact']
]
const REST = 'everything else (event loop, microtasks, the HTTP server)'
// Shown within DOWNLOAD: costs that code can avoid.
const WITHIN_DOWNLOAD: Array<[string, ...string[]]> = [
  ['inline-cache misses', 'LoadIC_Miss'],
  ['property definitions', 'DefineAccessor', 'ObjectDefineProperty']
]

const DATASET = '/api/acme/shop/model/1/dataset/1?format=json'

const dir = mkdtempSync(join(tmpdir(), 'fde-profile-'))
try {
  const entry = compileForBench(join(REPO, 'test/bench/bench-server.ts'), dir)
  // In the temporary folder: the JIT's dump goes to the process's own (PERF_NODE_ARGS).
  const server = await startBenchServer(entry, { nodeArgs: PERF_NODE_ARGS, cwd: dir })
  const [key] = await newKeys(server.base, 1)
  await call(server.base, 'PUT', '/api-keys/acme/shop/endpoints/1/dataset/1', { keyIds: [key.id] })

  // Load from before the recording starts until after it ends.
  const load = autocannon({ url: server.base + DATASET, headers: { authorization: `Bearer ${key.key}` }, connections: 50, duration: seconds + 4 })
  await sleep(2000)
  const data = join(dir, 'perf.data')
  await recordPerf(server.child.pid as number, data, seconds, 2000)
  const result = await load
  if (result.non2xx > 0) throw new Error(`${result.non2xx} requests failed`)
  await stopBenchServer(server)
  const main = mainThreadStacks(data)

  console.log(`${main.length} samples of the server's main thread over ${seconds} s, ${Math.round(result.requests.average)} req/s\n`)
  const holds = (stack: string[], names: string[]): boolean => stack.some((frame) => names.some((name) => frame.includes(name)))
  const share = (n: number): string => `${(100 * n / Math.max(1, main.length)).toFixed(1)}%`
  const counts = new Map<string, number>()
  const download: string[][] = []
  for (const stack of main) {
    const part = PARTS.find(([, ...names]) => holds(stack, names))?.[0] ?? REST
    counts.set(part, (counts.get(part) ?? 0) + 1)
    if (part === DOWNLOAD) download.push(stack)
  }
  console.log('| part | share of the samples |')
  console.log('|---|---:|')
  for (const part of [...PARTS.map(([label]) => label), REST]) {
    console.log(`| ${part} | ${share(counts.get(part) ?? 0)} |`)
    if (part !== DOWNLOAD) continue
    for (const [label, ...names] of WITHIN_DOWNLOAD) console.log(`| — of which ${label} | ${share(download.filter((stack) => holds(stack, names)).length)} |`)
  }
} finally {
  rmSync(dir, { recursive: true, force: true })
}
