// Benchmark of issue 27: a filtered download that selects 1% of the
// 1,000,000 `events` rows through an indexed column (ts, and id by since=)
// against the whole download, per format. Not a test: run it with
//   nice -n -20 npx tsx test/bench/consumer-filter.ts [rows, default 1000000] [formats, default csv,json,parquet]
// and record the printed table in docs/benchmarks.md. The server runs
// compiled under plain node in its own process (consumer-filter-server.ts);
// this process only downloads, one request at a time, each read to its end.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { compileForBench, REPO } from './compile.js'

const rows = Number(process.argv[2] ?? 1_000_000)
const formats = (process.argv[3] ?? 'csv,json,parquet').split(',')
const buildDir = mkdtempSync(join(tmpdir(), 'fde-bench-build-'))
process.on('exit', () => rmSync(buildDir, { recursive: true, force: true }))
const entry = compileForBench(join(REPO, 'test/bench/consumer-filter-server.ts'), buildDir)

const child = spawn(process.execPath, [entry], { env: { ...process.env, EVENTS_ROWS: String(rows) }, stdio: ['ignore', 'pipe', 'inherit'] })
let key = ''
let port = 0
for await (const line of createInterface({ input: child.stdout })) {
  const k = /^key (\S+)$/.exec(line)
  if (k !== null) key = k[1]
  const p = /^port (\d+)$/.exec(line)
  if (p !== null) { port = Number(p[1]); break }
}
const base = `http://127.0.0.1:${port}/api/acme/shop/model/1/dataset/2`
const headers = { authorization: `Bearer ${key}` }

async function download (query: Record<string, string>): Promise<{ ms: number, bytes: number, until: string | null }> {
  const started = process.hrtime.bigint()
  const res = await fetch(`${base}?${new URLSearchParams(query).toString()}`, { headers })
  if (res.status !== 200) throw new Error(`${res.status} ${await res.text()}`)
  const bytes = (await res.arrayBuffer()).byteLength
  return { ms: Number(process.hrtime.bigint() - started) / 1e6, bytes, until: res.headers.get('data-changes-until') }
}

async function median (runs: number, query: Record<string, string>): Promise<{ ms: number, bytes: number }> {
  await download(query) // warm-up: statements prepared, pages cached
  const results = []
  for (let i = 0; i < runs; i++) results.push(await download(query))
  results.sort((a, b) => a.ms - b.ms)
  return results[Math.floor(runs / 2)]
}

// The ts range of the middle 1% of the rows, read through the API itself.
const first = Math.floor(rows * 0.495) + 1
const last = first + rows / 100 - 1
const bounds = await fetch(`${base}?${new URLSearchParams({ format: 'json', columns: 'ts', where: `id in (${first}, ${last})` }).toString()}`, { headers })
const [from, to] = ((await bounds.json()) as { events: Array<{ ts: string }> }).events.map((r) => r.ts)
const byTs = `ts >= '${from}' and ts <= '${to}'`
const since = String(rows - rows / 100)

console.log(`events: ${rows} rows; 1% = ${rows / 100}; where=${byTs}; since=${since}`)
console.log('| format | whole (ms, MB) | where ts range (ms, MB) | × | since= (ms, MB) | × |')
console.log('|---|---|---|---|---|---|')
for (const format of formats) {
  const whole = await median(3, { format })
  const filtered = await median(9, { format, where: byTs })
  const changed = await median(9, { format, since })
  const mb = (b: number): string => (b / 1e6).toFixed(1)
  console.log(`| ${format} | ${whole.ms.toFixed(0)}, ${mb(whole.bytes)} | ${filtered.ms.toFixed(1)}, ${mb(filtered.bytes)} | ${(whole.ms / filtered.ms).toFixed(0)} | ` +
    `${changed.ms.toFixed(1)}, ${mb(changed.bytes)} | ${(whole.ms / changed.ms).toFixed(0)} |`)
}
child.kill('SIGTERM')
await once(child, 'exit')
