// The fair bcrypt queue under a guessing flood (issue "9 ·"). Not a test: run
//   npx tsx test/bench/fair-queue.ts [rounds]
// and record the printed table in docs/benchmarks.md.
//
// 150 connections, each from its own loopback address (127.0.x.y, so the
// per-address failure throttle sees 150 clients), send random secrets for one
// known prefix as fast as they are answered, and never honour Retry-After.
// Once the flood has run 2 s, 16 keys that were never verified each send
// their first request at once, each from another address of its own; each
// one's first answer and latency are recorded. Target: at least 15 of the 16
// answer 200 within 2 s. Each round uses 16 new keys while the flood goes on.
// For reference, before the flood: five first requests one after another
// (one bcrypt each on this machine), then 16 at once (one bcrypt after
// another: the best any queue can do with the default maxConcurrentHashes).
//
// The server runs compiled under plain node (bench-server.ts, default
// options, bcrypt cost 10); the flood runs in a child process of its own (this
// file with --flood), so this process only times the 16 requests.
import { fork } from 'node:child_process'
import { once } from 'node:events'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import http from 'node:http'
import { availableParallelism, cpus, tmpdir, totalmem } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { call, newKeys, startBenchServer, stopBenchServer } from './bench-process.js'
import { compileForBench, REPO } from './compile.js'

const DATASET = '/api/acme/shop/model/1/dataset/1'
const FLOOD_CONNECTIONS = 150
const FRESH_KEYS = 16
const WITHIN_MS = 2000
// first requests timed without a flood, one after another
const ALONE = 5

interface Answer { status: number, ms: number }

/** One GET from `localAddress` on a connection of its own; status and milliseconds to the whole body. */
async function get (base: string, path: string, localAddress: string, agent?: http.Agent): Promise<Answer> {
  const start = process.hrtime.bigint()
  const url = new URL(path, base)
  return new Promise((resolve, reject) => {
    const req = http.get({ host: url.hostname, port: url.port, path: url.pathname + url.search, localAddress, agent: agent ?? false }, (res) => {
      res.resume()
      res.on('end', () => resolve({ status: res.statusCode ?? 0, ms: Number(process.hrtime.bigint() - start) / 1e6 }))
      res.on('error', reject)
    })
    req.on('error', reject)
  })
}

/** The n-th loopback address of a /16 block, skipping .0 and .255 in the last byte. */
function loopback (block: number, n: number): string {
  return `127.${block}.${Math.floor(n / 254)}.${(n % 254) + 1}`
}

const randomSecret = (): string => randomBytes(24).toString('base64').replace(/[^A-Za-z0-9]/g, 'x').slice(0, 21)

// The flood, in its own process: `--flood <base> <prefix>`; reports its
// status counts when told to stop.
if (process.argv[2] === '--flood') {
  const [base, prefix] = process.argv.slice(3)
  const statuses: Record<number, number> = {}
  let stopping = false
  const connections = Array.from({ length: FLOOD_CONNECTIONS }, async (_, i) => {
    const localAddress = `127.0.${Math.floor(i / 254)}.${(i % 254) + 2}` // 127.0.0.2 ...
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1, localAddress })
    while (!stopping) {
      const { status } = await get(base, `${DATASET}?api_key=${prefix}-${randomSecret()}`, localAddress, agent)
      statuses[status] = (statuses[status] ?? 0) + 1
    }
    agent.destroy()
  })
  process.send?.('started')
  process.on('message', (message) => {
    if (message !== 'stop') return
    stopping = true
    Promise.all(connections).then(() => { process.send?.(statuses, () => process.exit(0)) }, (err) => { console.error(err); process.exit(1) })
  })
} else {
  const rounds = Number(process.argv[2] ?? 3)
  const buildDir = mkdtempSync(join(tmpdir(), 'fde-bench-build-'))
  process.on('exit', () => rmSync(buildDir, { recursive: true, force: true }))
  const server = await startBenchServer(compileForBench(join(REPO, 'test/bench/bench-server.ts'), buildDir))

  const keyCount = 1 + (rounds + 1) * FRESH_KEYS + ALONE
  const keys = await newKeys(server.base, keyCount)
  await call(server.base, 'PUT', '/api-keys/acme/shop/endpoints/1/dataset/1', { keyIds: keys.map((k) => k.id) })
  const [target, ...fresh] = keys
  // One request with the target key, so the flood guesses at a key already verified.
  if ((await get(server.base, `${DATASET}?format=json&api_key=${target.key}`, '127.0.0.1')).status !== 200) throw new Error('target key refused')
  // What a first request costs here without a flood (one bcrypt), to read the rounds by.
  const alone: number[] = []
  for (const k of fresh.splice((rounds + 1) * FRESH_KEYS)) {
    const answer = await get(server.base, `${DATASET}?format=json&api_key=${k.key}`, '127.0.0.1')
    if (answer.status !== 200) throw new Error(`first request alone: ${answer.status}`)
    alone.push(answer.ms)
  }
  alone.sort((x, y) => x - y)
  const firstRequests = async (batch: Array<{ key: string }>, addressFrom: number): Promise<Answer[]> =>
    Promise.all(batch.map(async (k, i) => get(server.base, `${DATASET}?format=json&api_key=${k.key}`, loopback(1, addressFrom + i))))
  // The same 16 at once without a flood: the best the queue can do (one bcrypt after another).
  const unflooded = await firstRequests(fresh.splice(0, FRESH_KEYS), rounds * FRESH_KEYS)

  const flood = fork(fileURLToPath(import.meta.url), ['--flood', server.base, target.key.slice(0, 10)])
  await once(flood, 'message')
  const floodStart = Date.now()
  const results: Answer[][] = []
  for (let round = 0; round < rounds; round++) {
    await sleep(2000) // the flood fills the queue
    results.push(await firstRequests(fresh.slice(round * FRESH_KEYS, (round + 1) * FRESH_KEYS), round * FRESH_KEYS))
  }
  flood.send('stop')
  const [floodStatuses] = await once(flood, 'message') as [Record<number, number>]
  const floodSeconds = (Date.now() - floodStart) / 1000
  await stopBenchServer(server)

  const inTime = (answers: Answer[]): number => answers.filter((a) => a.status === 200 && a.ms <= WITHIN_MS).length
  const codes = (counts: Record<number, number>): string => Object.entries(counts).map(([c, n]) => `${c}:${n}`).join(' ')
  const tally = (answers: Answer[]): Record<number, number> => {
    const counts: Record<number, number> = {}
    for (const a of answers) counts[a.status] = (counts[a.status] ?? 0) + 1
    return counts
  }
  const ms = (a: Answer): string => a.ms.toFixed(0)

  console.log(`\nMachine: ${cpus().length} x ${cpus()[0]?.model ?? 'cpu'} (${availableParallelism()} available), ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}; bcrypt cost 10, default queue options`)
  console.log(`Command: npx tsx test/bench/fair-queue.ts ${rounds}`)
  console.log(`A first request alone, before the flood (one bcrypt): median ${alone[ALONE >> 1].toFixed(0)} ms of ${ALONE}`)
  const floodTotal = Object.values(floodStatuses).reduce((a, b) => a + b, 0)
  console.log(`Flood: ${FLOOD_CONNECTIONS} connections from ${FLOOD_CONNECTIONS} addresses, random secrets for one known prefix, ${floodSeconds.toFixed(0)} s, ${(floodTotal / floodSeconds).toFixed(0)} answers/s [${codes(floodStatuses)}]\n`)
  console.log('| round | first requests answered 200 within 2 s | answers | latency ms: min / median / max |')
  console.log('|---|---:|---|---|')
  const row = (label: string, answers: Answer[]): void => {
    const sorted = [...answers].sort((x, y) => x.ms - y.ms)
    console.log(`| ${label} | ${inTime(answers)} of ${answers.length} | ${codes(tally(answers))} | ${ms(sorted[0])} / ${ms(sorted[sorted.length >> 1])} / ${ms(sorted[sorted.length - 1])} |`)
  }
  row('no flood (reference)', unflooded)
  results.forEach((answers, round) => row(`${round + 1}, during the flood`, answers))
  console.log('\n| key | ' + results.map((_, r) => `round ${r + 1}`).join(' | ') + ' |')
  console.log('|---:|' + results.map(() => '---|').join(''))
  for (let i = 0; i < FRESH_KEYS; i++) console.log(`| ${i + 1} | ${results.map((answers) => `${answers[i].status} in ${ms(answers[i])} ms`).join(' | ')} |`)
}
