// Usage query benchmark (not a test; issue "8 ·"): a year of hourly usage
// history for 100 keys on SQLite, then the usage route as a user calls it,
// timed through the plugin (routing, schema, flush, query, serialisation),
// median and p95 of 20 runs after a warm-up: once through app.inject (the
// body read as it comes, payloadAsStream, since 2026-11-26: gathered into one
// buffer, as before, it cost this process a 12 MB copy per call), once
// over real HTTP on loopback (fetch, the whole body read as it comes), with
// the server's longest event-loop delay meanwhile (monitorEventLoopDelay).
// The HTTP client runs in a process of its own (body-reader.ts): in this one
// its own garbage and parsing counted as the server's delay. BENCH_CLIENT=same
// puts it back in this process, as before.
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
import { monitorEventLoopDelay } from 'node:perf_hooks'
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
  /** The times of `times` HTTP calls made by the reader process. */
  const readTimes = async (url: string, times: number, status: number, length: number): Promise<number[]> => {
    if (reader === null) throw new Error('no reader process')
    reader.send({ url: address + url, headers: ADMIN, times, status, length })
    const [answer] = await once(reader, 'message') as [{ ms?: number[], error?: string }]
    if (answer.error !== undefined) throw new Error(answer.error)
    return answer.ms as number[]
  }
  console.log('| query | rows | status | inject: median (ms) | p95 (ms) | HTTP: median (ms) | p95 (ms) | HTTP: the server\'s longest event-loop delay (ms) |\n|---|---:|---:|---:|---:|---:|---:|---:|')
  for (const [label, query] of cases) {
    if (process.env.BENCH_ONLY !== undefined && !label.includes(process.env.BENCH_ONLY)) continue
    const url = `${P}/usage?${query}`
    const first = await app.inject({ url, headers: ADMIN })
    // Counted in the text: parsing 12 MB of JSON here would leave the
    // server process tens of thousands of objects to collect meanwhile.
    const rows = first.statusCode === 200 ? first.body.split('{"start":').length - 1 : 0
    const figures: string[] = []
    const loop = monitorEventLoopDelay({ resolution: 1 })
    for (const http of [false, true]) {
      if (http) loop.enable()
      let times: number[] = []
      if (http && reader !== null) {
        times = (await readTimes(url, 22, first.statusCode, first.rawPayload.length)).slice(2)
      } else {
        for (let i = 0; i < 22; i++) {
          const t0 = process.hrtime.bigint()
          const [status, length] = await call(url, http)
          if (status !== first.statusCode || length !== first.rawPayload.length) throw new Error(`${label}: ${status}, ${length} bytes`)
          if (i >= 2) times.push(Number(process.hrtime.bigint() - t0) / 1e6)
        }
      }
      times.sort((a, b) => a - b)
      const at = (q: number): string => times[Math.min(times.length - 1, Math.floor(q * times.length))].toFixed(1)
      figures.push(at(0.5), at(0.95))
    }
    loop.disable()
    figures.push((loop.max / 1e6).toFixed(1))
    console.log(`| ${label} | ${rows.toLocaleString('en')} | ${first.statusCode} | ${figures.join(' | ')} |`)
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
