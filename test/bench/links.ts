// Download links (issue "14 ·"). Not a test: run
//   nice -n -20 npx tsx test/bench/links.ts [seconds-per-run]
// and record the printed table in docs/benchmarks.md.
//   (l) a link download against the same download with the key, in the same
//       run, the two interleaved ROUNDS times, the median run of each
//       counting. Target: link / keyed >= 0.95.
//   (m) link and keyed downloads (10 connections each, at once) alone, then
//       during a flood of garbage tokens from 150 loopback addresses (its own
//       process, never honouring Retry-After). Target: each keeps >= 0.9 of
//       its throughput.
// The server runs compiled under plain node (bench-server.ts, default options).
import { fork } from 'node:child_process'
import { once } from 'node:events'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import http from 'node:http'
import { availableParallelism, cpus, tmpdir, totalmem } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import autocannon, { type Options, type Result } from 'autocannon'
import { call, newKeys, startBenchServer, stopBenchServer } from './bench-process.js'
import { withCpuPerRequest, type CpuMeasured } from './process-cpu.js'
import { compileForBench, REPO } from './compile.js'

const DATASET = '/api/acme/shop/model/1/dataset/1'
const FLOOD_CONNECTIONS = 150
const ROUNDS = 3

const garbage = (n: number): string => randomBytes(n).toString('base64url').slice(0, n)

// The flood, in its own process: `--flood <base> <secret id> <file name>`.
// Tokens of the right shape (the real secret id, so the server computes a
// signature for each) with random claims and signatures; one in ten names an
// unknown secret. Reports its status counts when told to stop.
if (process.argv[2] === '--flood') {
  const [base, secretId, fileName, control] = process.argv.slice(3)
  const url = new URL(base)
  const statuses: Record<number, number> = {}
  let stopping = false
  const connections = Array.from({ length: FLOOD_CONNECTIONS }, async (_, i) => {
    const localAddress = `127.0.${Math.floor(i / 254)}.${(i % 254) + 2}`
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1, localAddress })
    let n = 0
    while (!stopping) {
      const id = n++ % 10 === 0 ? garbage(12) : secretId
      const path = `${control === 'control' ? '/bench/held' : '/api/links'}/${id}.${garbage(240)}.${garbage(43)}/${fileName}`
      const status = await new Promise<number>((resolve) => {
        const req = http.get({ host: url.hostname, port: url.port, path, agent }, (res) => {
          res.resume()
          res.on('end', () => resolve(res.statusCode ?? 0))
        })
        req.on('error', () => resolve(0))
      })
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
  const seconds = Number(process.argv[2] ?? 10)
  const buildDir = mkdtempSync(join(tmpdir(), 'fde-bench-build-'))
  process.on('exit', () => rmSync(buildDir, { recursive: true, force: true }))
  const server = await startBenchServer(compileForBench(join(REPO, 'test/bench/bench-server.ts'), buildDir))
  const [k] = await newKeys(server.base, 1)
  await call(server.base, 'PUT', '/api-keys/acme/shop/endpoints/1/dataset/1', { keyIds: [k.id] })
  const minted = await fetch(`${server.base}${DATASET}/links`, {
    method: 'POST',
    headers: { authorization: `Bearer ${k.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ format: 'json', expiresIn: 3600 })
  })
  const link = await minted.json() as { url: string }
  const linkPath = new URL(link.url).pathname
  const [, , , token, fileName] = linkPath.split('/')

  const routes = {
    keyed: { url: `${server.base}${DATASET}?format=json`, headers: { authorization: `Bearer ${k.key}` } },
    link: { url: `${server.base}${linkPath}` }
  } satisfies Record<string, Options>
  const run = async (options: Options): Promise<Result> => {
    const result = await autocannon({ connections: 50, pipelining: 1, duration: seconds, ...options })
    if (result.non2xx > 0) throw new Error(`${options.url}: ${result.non2xx} non-2xx answers`)
    return result
  }
  // With the server's CPU time per request (µs), steadier than throughput when other work shares the machine.
  const measured = async (options: Options): Promise<CpuMeasured> => withCpuPerRequest(server.child, () => run(options))
  const rate = (r: Result): number => Math.round(r.requests.average)
  for (const options of Object.values(routes)) await run({ ...options, duration: 2 }) // warm-up

  const runs: Record<string, CpuMeasured[]> = { keyed: [], link: [] }
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, options] of Object.entries(routes)) runs[name].push(await measured(options))
  }
  const median = (name: string): CpuMeasured => [...runs[name]].sort((x, y) => rate(x) - rate(y))[ROUNDS >> 1]
  const keyed = median('keyed')
  const linked = median('link')

  // (m) keyed and link downloads at once, 10 connections each: alone, then
  // twice during the flood (its process given 2 s to open its connections:
  // that start-up is the load generator's, on the same two cores). Each
  // garbage token is verified, held failureThrottle.delayMs and refused.
  const ten = (options: Options): Options => ({ ...options, connections: 10 })
  const both = async (): Promise<[Result, Result]> => Promise.all([run(ten(routes.keyed)), run(ten(routes.link))])
  const [aloneKeyed, aloneLink] = await both()
  const flood = fork(fileURLToPath(import.meta.url), ['--flood', server.base, token.split('.')[0], fileName])
  await once(flood, 'message')
  await sleep(2000)
  const [burstKeyed, burstLink] = await both()
  const [heldKeyed, heldLink] = await both()
  flood.send('stop')
  const [floodStatuses] = await once(flood, 'message') as [Record<number, number>]
  // The control: the same flood on a route that holds a second and answers 403 without any check.
  const [controlAloneKeyed, controlAloneLink] = await both()
  const control = fork(fileURLToPath(import.meta.url), ['--flood', server.base, token.split('.')[0], fileName, 'control'])
  await once(control, 'message')
  await sleep(2000)
  const [controlKeyed, controlLink] = await both()
  control.send('stop')
  await once(control, 'message')
  await stopBenchServer(server)

  const codes = Object.entries(floodStatuses).map(([c, n]) => `${c}:${n}`).join(' ')
  console.log(`\nMachine: ${cpus().length} x ${cpus()[0]?.model ?? 'cpu'} (${availableParallelism()} available), ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`)
  console.log(`Command: nice -n -20 npx tsx test/bench/links.ts ${seconds}; ${seconds} s per run; format=json of the sample dataset (1 KiB)\n`)
  console.log('| scenario | req/s | p99 ms | ratio | server CPU µs/req | CPU ratio |')
  console.log('|---|---:|---:|---:|---:|---:|')
  console.log(`| (l) keyed GET, Bearer, 50 conns (median of ${ROUNDS}) | ${rate(keyed)} | ${keyed.latency.p99} | 1.00 | ${keyed.cpuPerRequest.toFixed(0)} | 1.00 |`)
  console.log(`| (l) link GET, 50 conns (median of ${ROUNDS}) | ${rate(linked)} | ${linked.latency.p99} | ${(rate(linked) / rate(keyed)).toFixed(2)} | ${linked.cpuPerRequest.toFixed(0)} | ${(keyed.cpuPerRequest / linked.cpuPerRequest).toFixed(2)} |`)
  console.log(`| (l) every run, req/s: keyed ${runs.keyed.map(rate).join(', ')}; link ${runs.link.map(rate).join(', ')} | | | | | |`)
  const row = (label: string, r: Result, alone: Result): void => {
    console.log(`| (m) ${label} | ${rate(r)} | ${r.latency.p99} | ${(rate(r) / rate(alone)).toFixed(2)} |`)
  }
  row('keyed GET alone (10 conns, beside the link GET)', aloneKeyed, aloneKeyed)
  row('link GET alone (10 conns, beside the keyed GET)', aloneLink, aloneLink)
  row('keyed GET during the flood, first run', burstKeyed, aloneKeyed)
  row('link GET during the flood, first run', burstLink, aloneLink)
  row('keyed GET during the flood, second run', heldKeyed, aloneKeyed)
  row('link GET during the flood, second run', heldLink, aloneLink)
  row('keyed GET alone again', controlAloneKeyed, controlAloneKeyed)
  row('link GET alone again', controlAloneLink, controlAloneLink)
  row('keyed GET during the control flood (same generator, a route that only holds 1 s and answers 403)', controlKeyed, controlAloneKeyed)
  row('link GET during the control flood', controlLink, controlAloneLink)
  console.log(`\nFlood: ${FLOOD_CONNECTIONS} connections from ${FLOOD_CONNECTIONS} addresses, garbage tokens [${codes}]`)
}
