// Usage query benchmark (not a test; issue "8 ·"): a year of hourly usage
// history for 100 keys on SQLite, then the usage route as a user calls it,
// timed through the plugin (routing, schema, flush, query, serialisation),
// median and p95 (quantiles.ts; over HTTP the slowest too) of 20 runs after
// a warm-up: once over real HTTP on loopback (fetch, the whole body read as
// it comes), with the server's longest event-loop delay meanwhile
// (monitorEventLoopDelay) and the longest garbage collection among them
// (PerformanceObserver 'gc'); once through app.inject in the server's
// process (the body read as it comes, payloadAsStream).
//
// Processes (since 2026-11-26, night): this one seeds the history through
// the plugin, then closes it and forks the server (usage-server.ts, compiled,
// under plain node), whose heap then holds the server alone: before, the
// delays were measured in this process, whose heap also held tsx and what
// seeding 912,676 buckets left, and V8's collections walked all of it. The
// HTTP client runs in a process of its own (body-reader.ts). BENCH_SERVER=same
// serves from this process, as before. Every query is timed over HTTP before
// any through inject: the inject runs' chunks are the server process's own
// garbage. The first answer of each query is counted as it streams.
//
//   npx tsx test/bench/usage-query.ts
//
// Env: BENCH_KEYS (default 100), BENCH_DAYS (default 365), BENCH_ONLY (run the
// queries whose label contains it), BENCH_STORAGE=pg
// (PgStorage on PGURL, default postgres://postgres@127.0.0.1:5432/test, in a
// schema of its own that is dropped at the end; its tables are VACUUM
// ANALYZEd after the write, as autovacuum would).
import { fork, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { PgStorage, SqliteStorage, type Storage, type UsageCount } from '../../lib/index.js'
import { compileForBench, REPO } from './compile.js'
import { ADMIN, injectTimes, usageBenchApp, watchLoop, type LoopWatch } from './usage-bench-app.js'
import { median, percentile } from './quantiles.js'

const KEYS = Number(process.env.BENCH_KEYS ?? 100)
const DAYS = Number(process.env.BENCH_DAYS ?? 365)
const HOUR = 3_600_000
const P = '/api-keys/acme/shop'

const dir = mkdtempSync(join(tmpdir(), 'fde-bench-usage-'))
const pgUrl = process.env.PGURL ?? 'postgres://postgres@127.0.0.1:5432/test'
const pgSchema = `bench_usage_${process.pid}`
const storage: Storage = process.env.BENCH_STORAGE === 'pg'
  ? new PgStorage({ connectionString: pgUrl, schema: pgSchema })
  : new SqliteStorage({ filename: join(dir, 'usage.db') })
console.log(`storage: ${process.env.BENCH_STORAGE === 'pg' ? 'PostgreSQL' : 'SQLite'}`)
const app = await usageBenchApp(storage)
const sameProcess = process.env.BENCH_SERVER === 'same'
let server: ChildProcess | null = null

try {
  // 100 keys over two endpoints, as a project with a busy dataset would have.
  const keys: string[] = []
  for (let i = 0; i < KEYS; i++) keys.push((await app.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: `client ${i}` } })).json().id)
  await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN, payload: { keyIds: keys.slice(0, KEYS / 2) } })
  await app.inject({ method: 'PUT', url: `${P}/endpoints/1/pipeline/1`, headers: ADMIN, payload: { keyIds: keys.slice(KEYS / 2) } })
  const endpoints = (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json() as Array<{ id: string, type: string }>
  const endpointOf = (i: number): string => endpoints[i < KEYS / 2 ? 0 : 1].id

  // Every key calls every hour; one hour in 24 also sees a wrong secret for
  // it, one in 50 a request with no key. Written through the storage's own
  // batched path, a day at a time.
  const end = Math.floor(Date.now() / HOUR) * HOUR
  const start = end - DAYS * 24 * HOUR
  const began = Date.now()
  let buckets = 0
  for (let day = start; day < end; day += 24 * HOUR) {
    const counts = new Map<string, UsageCount>()
    for (let hour = day; hour < day + 24 * HOUR; hour += HOUR) {
      for (let i = 0; i < KEYS; i++) {
        const endpointId = endpointOf(i)
        counts.set(`${hour}|${i}|ok`, { hour, endpointId, keyId: keys[i], outcome: 'ok', count: 1 + ((hour / HOUR + i) % 7) })
        if ((hour / HOUR + i) % 24 === 0) counts.set(`${hour}|${i}|u`, { hour, endpointId, keyId: keys[i], outcome: 'unknown_key', count: 2 })
      }
      if ((hour / HOUR) % 50 === 0) counts.set(`${hour}|none`, { hour, endpointId: endpointOf(0), keyId: null, outcome: 'no_key', count: 1 })
    }
    buckets += counts.size
    await storage.applyUsage({ calls: new Map(), lastUsed: new Map(), counts })
  }
  if (process.env.BENCH_STORAGE === 'pg') {
    // Statistics for the planner and the visibility map for index-only
    // scans, as autovacuum makes them within a minute or so of such a load
    // (inserts alone start it): without them the planner guesses one row.
    const client = new pg.Client({ connectionString: pgUrl })
    await client.connect()
    await client.query(`VACUUM ANALYZE "${pgSchema}".usage_hourly, "${pgSchema}".usage_daily, "${pgSchema}".endpoints, "${pgSchema}".api_keys`)
    await client.end()
  }
  console.log(`${buckets.toLocaleString('en')} hourly buckets (${KEYS} keys, ${DAYS} days) written in ${((Date.now() - began) / 1000).toFixed(1)} s`)

  const from = new Date(start).toISOString()
  const to = new Date(end).toISOString()
  const day = new Date(end - 24 * HOUR).toISOString()
  const week = new Date(end - 7 * 24 * HOUR).toISOString()
  const cases: Array<[string, string]> = [
    ['one key, a year by hour', `granularity=hour&from=${from}&to=${to}&keyId=${keys[7]}`],
    ['one key on its endpoint, a year by hour', `granularity=hour&from=${from}&to=${to}&keyId=${keys[7]}&endpointId=${endpointOf(7)}`],
    ['all keys, a year by day', `granularity=day&from=${from}&to=${to}`],
    ['one endpoint, a year by day', `granularity=day&from=${from}&to=${to}&endpointId=${endpointOf(0)}`],
    ['all keys, the last 24 hours by hour (the page)', `granularity=hour&from=${day}&to=${to}`],
    ['all keys, the last 7 days by hour', `granularity=hour&from=${week}&to=${to}`],
    ['all keys, a year by hour (over the row cap: 400)', `granularity=hour&from=${from}&to=${to}`]
  ]
  let address: string
  if (sameProcess) {
    address = await app.listen({ host: '127.0.0.1', port: 0 })
  } else {
    await app.close()
    const build = join(dir, 'build')
    const entry = compileForBench(join(REPO, 'test/bench/usage-server.ts'), build)
    server = fork(entry, [], {
      // e.g. BENCH_SERVER_ARGS='--cpu-prof --cpu-prof-dir=/tmp/prof' to profile the server
      execArgv: (process.env.BENCH_SERVER_ARGS ?? '').split(' ').filter((arg) => arg !== ''),
      cwd: REPO,
      stdio: 'inherit',
      env: { ...process.env, PGURL: pgUrl, PG_SCHEMA: pgSchema, SQLITE_FILE: join(dir, 'usage.db') }
    })
    const [ready] = await once(server, 'message') as [{ address: string }]
    address = ready.address
  }
  const reader = fork(new URL('./body-reader.ts', import.meta.url), { stdio: 'inherit' })
  /** One request to the server process, and its answer. */
  const ask = async <T>(message: object): Promise<T> => {
    if (server === null) throw new Error('no server process')
    server.send(message)
    const [answer] = await once(server, 'message') as [T & { error?: string }]
    if (answer.error !== undefined) throw new Error(answer.error)
    return answer
  }
  const watch = async (): Promise<() => Promise<LoopWatch>> => {
    if (sameProcess) {
      const stop = watchLoop()
      return async () => stop()
    }
    await ask({ cmd: 'watch' })
    return async () => ask<LoopWatch>({ cmd: 'report' })
  }
  const injected = async (url: string, times: number, status: number, length: number): Promise<number[]> => sameProcess
    ? injectTimes(app, url, times, status, length)
    : (await ask<{ ms: number[] }>({ cmd: 'inject', url, times, status, length })).ms
  /**
   * The first answer's status, length and rows, counted in its bytes as they
   * come (with BENCH_SERVER=same, a 12 MB text, or 73,000 pieces of it, left
   * in the server's process would be collected during the timed runs).
   */
  const firstAnswer = async (url: string): Promise<{ status: number, length: number, rows: number }> => {
    const res = await fetch(address + url, { headers: ADMIN })
    const marker = Buffer.from('{"start":')
    let length = 0
    let rows = 0
    let tail = Buffer.alloc(0)
    for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
      length += chunk.byteLength
      // The marker may straddle two chunks: search from the last chunk's end.
      const text = Buffer.concat([tail, chunk])
      for (let at = text.indexOf(marker); at !== -1; at = text.indexOf(marker, at + 1)) rows++
      tail = text.subarray(Math.max(0, text.length - marker.length + 1))
    }
    return { status: res.status, length, rows: res.status === 200 ? rows : 0 }
  }
  /** The times of `times` HTTP calls made by the reader process. */
  const readTimes = async (url: string, times: number, status: number, length: number): Promise<number[]> => {
    reader.send({ url: address + url, headers: ADMIN, times, status, length })
    const [answer] = await once(reader, 'message') as [{ ms?: number[], error?: string }]
    if (answer.error !== undefined) throw new Error(answer.error)
    return answer.ms as number[]
  }
  const chosen = cases.filter(([label]) => process.env.BENCH_ONLY === undefined || label.includes(process.env.BENCH_ONLY))
  const firsts = new Map<string, { status: number, length: number, rows: number }>()
  const timed = new Map<string, { http: number[], inject: number[], loopMs: number, heldMs: number | null, gc: string }>()
  const quantiles = (times: number[]): string[] => [median(times), percentile(times, 95)].map((ms) => ms.toFixed(1))
  // Every query over HTTP first, then every query through inject: the inject
  // runs' garbage (their chunks are the server process's own) would otherwise
  // be collected while a later query's HTTP runs are timed, and counted as
  // the server's delay.
  for (const [label, query] of chosen) {
    const url = `${P}/usage?${query}`
    const first = await firstAnswer(url)
    firsts.set(label, first)
    const stop = await watch()
    const http = (await readTimes(url, 22, first.status, first.length)).slice(2)
    const { loopMs, heldMs, gc } = await stop()
    timed.set(label, { http, inject: [], loopMs, heldMs, gc })
  }
  for (const [label, query] of chosen) {
    const first = firsts.get(label) as { status: number, length: number }
    const entry = timed.get(label) as { inject: number[] }
    entry.inject = await injected(`${P}/usage?${query}`, 22, first.status, first.length)
  }
  console.log('| query | rows | status | inject: median (ms) | p95 (ms) | HTTP: median (ms) | p95 (ms) | slowest (ms) | HTTP: the server\'s longest event-loop delay (ms) | longest hold: the main thread\'s CPU between two 1 ms ticks (ms) | the longest collection (ms, kind) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
  for (const [label] of chosen) {
    const first = firsts.get(label) as { status: number, rows: number }
    const { http, inject, loopMs, heldMs, gc } = timed.get(label) as { http: number[], inject: number[], loopMs: number, heldMs: number | null, gc: string }
    const held = heldMs === null ? 'n/a' : heldMs.toFixed(1)
    console.log(`| ${label} | ${first.rows.toLocaleString('en')} | ${first.status} | ${[...quantiles(inject), ...quantiles(http), percentile(http, 100).toFixed(1), loopMs.toFixed(1), held, gc].join(' | ')} |`)
  }
  reader.disconnect()
} finally {
  if (server !== null) {
    server.disconnect()
    await once(server, 'exit')
  } else {
    await app.close()
  }
  if (process.env.BENCH_STORAGE === 'pg') {
    const client = new pg.Client({ connectionString: pgUrl })
    await client.connect()
    await client.query(`DROP SCHEMA IF EXISTS "${pgSchema}" CASCADE`)
    await client.end()
  }
  if (process.env.BENCH_KEEP === undefined) rmSync(dir, { recursive: true, force: true })
  else console.log(`kept ${dir}`)
}
