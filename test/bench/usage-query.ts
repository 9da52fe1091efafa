// Usage query benchmark (not a test; issue "8 ·"): a year of hourly usage
// history for 100 keys on SQLite, then the usage route as a user calls it,
// timed through the plugin (routing, schema, flush, query, serialisation),
// median and p95 of 20 runs after a warm-up: once through app.inject (the
// body read as it comes, payloadAsStream, since 2026-11-26: gathered into one
// buffer, as before, it cost this process a 12 MB copy per call), once
// over real HTTP on loopback (fetch, the whole body read as it comes), with
// the server's longest event-loop delay meanwhile (monitorEventLoopDelay),
// and the longest garbage collection among them (PerformanceObserver 'gc').
// The HTTP client runs in a process of its own (body-reader.ts): in this one
// its own garbage and parsing counted as the server's delay. BENCH_CLIENT=same
// puts it back in this process, as before. Every query is timed over HTTP
// before any is timed through inject (since 2026-11-26 evening): the inject
// runs' chunks are this process's own garbage, and were collected while the
// next query's HTTP runs were timed; the first answer of each query is
// counted as it streams for the same reason.
//
//   npx tsx test/bench/usage-query.ts
//
// Env: BENCH_KEYS (default 100), BENCH_DAYS (default 365), BENCH_ONLY (run the
// queries whose label contains it), BENCH_STORAGE=pg
// (PgStorage on PGURL, default postgres://postgres@127.0.0.1:5432/test, in a
// schema of its own that is dropped at the end; its tables are VACUUM
// ANALYZEd after the write, as autovacuum would).
import { fork } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { constants as perfConstants, monitorEventLoopDelay, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks'
import Fastify from 'fastify'
import pg from 'pg'
import dataEndpoints, { PgStorage, SqliteStorage, type Storage, type UsageCount } from '../../lib/index.js'
import { MemoryDatasets, MemoryJobs, PIPELINE_REF, SALES_REF, salesDataset } from '../fixtures.js'

const KEYS = Number(process.env.BENCH_KEYS ?? 100)
const DAYS = Number(process.env.BENCH_DAYS ?? 365)
const HOUR = 3_600_000
const ADMIN = { 'x-permissions': 'ManageAPIKeys' }
const P = '/api-keys/acme/shop'

const dir = mkdtempSync(join(tmpdir(), 'fde-bench-usage-'))
const pgUrl = process.env.PGURL ?? 'postgres://postgres@127.0.0.1:5432/test'
const pgSchema = `bench_usage_${process.pid}`
const storage: Storage = process.env.BENCH_STORAGE === 'pg'
  ? new PgStorage({ connectionString: pgUrl, schema: pgSchema })
  : new SqliteStorage({ filename: join(dir, 'usage.db') })
console.log(`storage: ${process.env.BENCH_STORAGE === 'pg' ? 'PostgreSQL' : 'SQLite'}`)
const jobs = new MemoryJobs().addPipeline(PIPELINE_REF, 'refresh')
const app = Fastify()
await app.register(dataEndpoints, {
  storage,
  datasets: new MemoryDatasets().add(SALES_REF, salesDataset()),
  pipelines: jobs,
  jobs,
  bcryptCost: 4,
  managementUi: false,
  getPermissions: (request) => String(request.headers['x-permissions'] ?? '').split(',')
})
await app.ready()

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
  const address = await app.listen({ host: '127.0.0.1', port: 0 })
  const sameProcess = process.env.BENCH_CLIENT === 'same'
  const reader = sameProcess ? null : fork(new URL('./body-reader.ts', import.meta.url), { stdio: 'inherit' })
  /** Status and body length of one call, over HTTP (in this process) or through inject. */
  const call = async (url: string, http: boolean): Promise<[number, number]> => {
    if (!http) {
      // Read as it comes too: gathering the whole body first (rawPayload)
      // is the harness's own copy of up to 12 MB, on the server's thread.
      const res = await app.inject({ url, headers: ADMIN, payloadAsStream: true })
      let length = 0
      for await (const chunk of res.stream() as AsyncIterable<Buffer>) length += chunk.byteLength
      return [res.statusCode, length]
    }
    const res = await fetch(address + url, { headers: ADMIN })
    // The body read as it comes, its bytes counted. Gathering 12 MB in one
    // arrayBuffer() is a copy of tens of milliseconds in one go, the
    // client's, not the server's.
    let length = 0
    for await (const chunk of res.body as AsyncIterable<Uint8Array>) length += chunk.byteLength
    return [res.status, length]
  }
  /**
   * The first answer's status, length and rows (counted in its bytes as they
   * come: a 12 MB text, or 73,000 pieces of it, left in this process would
   * be collected during the timed runs).
   */
  const firstAnswer = async (url: string): Promise<{ status: number, length: number, rows: number }> => {
    const res = await app.inject({ url, headers: ADMIN, payloadAsStream: true })
    const marker = Buffer.from('{"start":')
    let length = 0
    let rows = 0
    let tail = Buffer.alloc(0)
    for await (const chunk of res.stream() as AsyncIterable<Buffer>) {
      length += chunk.byteLength
      // The marker may straddle two chunks: search from the last chunk's end.
      const text = Buffer.concat([tail, chunk])
      for (let at = text.indexOf(marker); at !== -1; at = text.indexOf(marker, at + 1)) rows++
      tail = text.subarray(Math.max(0, text.length - marker.length + 1))
    }
    return { status: res.statusCode, length, rows: res.statusCode === 200 ? rows : 0 }
  }
  /** The times of `times` HTTP calls made by the reader process. */
  const readTimes = async (url: string, times: number, status: number, length: number): Promise<number[]> => {
    if (reader === null) throw new Error('no reader process')
    reader.send({ url: address + url, headers: ADMIN, times, status, length })
    const [answer] = await once(reader, 'message') as [{ ms?: number[], error?: string }]
    if (answer.error !== undefined) throw new Error(answer.error)
    return answer.ms as number[]
  }
  const GC_KINDS: Record<number, string> = {
    [perfConstants.NODE_PERFORMANCE_GC_MINOR]: 'scavenge',
    [perfConstants.NODE_PERFORMANCE_GC_MAJOR]: 'mark-compact',
    [perfConstants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental marking',
    [perfConstants.NODE_PERFORMANCE_GC_WEAKCB]: 'weak callbacks'
  }
  const gcText = (entry: PerformanceEntry | undefined): string => {
    if (entry === undefined) return 'none'
    const kind = ((entry as PerformanceEntry & { detail?: { kind?: number } }).detail)?.kind ?? -1
    return `${entry.duration.toFixed(1)} ${GC_KINDS[kind] ?? 'other'}`
  }
  const chosen = cases.filter(([label]) => process.env.BENCH_ONLY === undefined || label.includes(process.env.BENCH_ONLY))
  const firsts = new Map<string, { status: number, length: number, rows: number }>()
  const timed = new Map<string, { http: number[], inject: number[], loopMs: number, gc: string }>()
  const quantiles = (times: number[]): string[] => {
    const sorted = [...times].sort((a, b) => a - b)
    return [0.5, 0.95].map((q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))].toFixed(1))
  }
  // Every query over HTTP first, then every query through inject: the inject
  // runs' garbage (their chunks are this process's own) would otherwise be
  // collected while a later query's HTTP runs are timed, and counted as the
  // server's delay.
  for (const [label, query] of chosen) {
    const url = `${P}/usage?${query}`
    const first = await firstAnswer(url)
    firsts.set(label, first)
    const loop = monitorEventLoopDelay({ resolution: 1 })
    // The longest garbage collection meanwhile: how much of the delay is V8's.
    let longestGc: PerformanceEntry | undefined
    const gcs = new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) if (longestGc === undefined || entry.duration > longestGc.duration) longestGc = entry
    })
    gcs.observe({ entryTypes: ['gc'] })
    loop.enable()
    let http: number[] = []
    if (reader !== null) {
      http = (await readTimes(url, 22, first.status, first.length)).slice(2)
    } else {
      for (let i = 0; i < 22; i++) {
        const t0 = process.hrtime.bigint()
        const [status, length] = await call(url, true)
        if (status !== first.status || length !== first.length) throw new Error(`${label}: ${status}, ${length} bytes`)
        if (i >= 2) http.push(Number(process.hrtime.bigint() - t0) / 1e6)
      }
    }
    loop.disable()
    gcs.disconnect()
    timed.set(label, { http, inject: [], loopMs: loop.max / 1e6, gc: gcText(longestGc) })
  }
  for (const [label, query] of chosen) {
    const first = firsts.get(label) as { status: number, length: number }
    const inject = (timed.get(label) as { inject: number[] }).inject
    for (let i = 0; i < 22; i++) {
      const t0 = process.hrtime.bigint()
      const [status, length] = await call(`${P}/usage?${query}`, false)
      if (status !== first.status || length !== first.length) throw new Error(`${label}: ${status}, ${length} bytes`)
      if (i >= 2) inject.push(Number(process.hrtime.bigint() - t0) / 1e6)
    }
  }
  console.log('| query | rows | status | inject: median (ms) | p95 (ms) | HTTP: median (ms) | p95 (ms) | HTTP: the server\'s longest event-loop delay (ms) | of which the longest collection (ms, kind) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|')
  for (const [label] of chosen) {
    const first = firsts.get(label) as { status: number, rows: number }
    const { http, inject, loopMs, gc } = timed.get(label) as { http: number[], inject: number[], loopMs: number, gc: string }
    console.log(`| ${label} | ${first.rows.toLocaleString('en')} | ${first.status} | ${[...quantiles(inject), ...quantiles(http), loopMs.toFixed(1), gc].join(' | ')} |`)
  }
  reader?.disconnect()
} finally {
  await app.close()
  if (process.env.BENCH_STORAGE === 'pg') {
    const client = new pg.Client({ connectionString: pgUrl })
    await client.connect()
    await client.query(`DROP SCHEMA IF EXISTS "${pgSchema}" CASCADE`)
    await client.end()
  }
  if (process.env.BENCH_KEEP === undefined) rmSync(dir, { recursive: true, force: true })
  else console.log(`kept ${dir}`)
}
