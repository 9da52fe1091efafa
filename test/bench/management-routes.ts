// Management routes benchmark (not a test; issue "18 ·"): every management
// route in a project of 10, 100, 1,000 and 10,000 keys (and a fifth as many
// endpoints, 3 keys each, a week of hourly usage on 100 of them), timed over
// real HTTP on loopback one request after another (fetch, the whole body
// read): median and p95 of BENCH_RUNS runs after 3 warm-ups. Beside them, in
// the same run, two floors for a page of 50 keys: a bare Fastify route
// sending those keys' JSON, made once, and a hand-written route reading them
// with one prepared statement and JSON.stringify (SQLite only).
//
//   npx tsx test/bench/management-routes.ts
//
// Env: BENCH_SIZES (default 10,100,1000,10000), BENCH_RUNS (default 30),
// BENCH_STORAGE=pg (PgStorage on PGURL, in a schema of its own, dropped at the end).
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { PgStorage, SqliteStorage, type Storage } from '../../lib/index.js'
import { buildScaleProject, scalePurpose } from '../scale-project.js'
import { ADMIN, managementBenchApp } from './management-app.js'
import { median, percentile } from './quantiles.js'

const SIZES = (process.env.BENCH_SIZES ?? '10,100,1000,10000').split(',').map(Number)
const RUNS = Number(process.env.BENCH_RUNS ?? 30)
const P = '/api-keys/acme/shop'
const HOUR = 3_600_000
const onPg = process.env.BENCH_STORAGE === 'pg'
const pgUrl = process.env.PGURL ?? 'postgres://postgres@127.0.0.1:5432/test'
const dir = mkdtempSync(join(tmpdir(), 'fde-bench-management-'))

interface Case {
  name: string
  /** the request of run `i` (each may name another key or endpoint) */
  request: (i: number) => { method: string, url: string, body?: unknown }
  /** the status every run must answer */
  status: number
}

/** Median and p95 in milliseconds of `runs` calls of `request`, after 3 warm-ups. */
async function time (base: string, c: Case): Promise<[number, number]> {
  const times: number[] = []
  for (let i = 0; i < RUNS + 3; i++) {
    const { method, url, body } = c.request(i)
    const started = process.hrtime.bigint()
    const res = await fetch(base + url, body === undefined
      ? { method, headers: ADMIN }
      : { method, headers: { ...ADMIN, 'content-type': 'application/json' }, body: JSON.stringify(body) })
    await res.arrayBuffer()
    if (res.status !== c.status) throw new Error(`${c.name}: ${method} ${url} answered ${res.status}`)
    if (i >= 3) times.push(Number(process.hrtime.bigint() - started) / 1e6)
  }
  return [median(times), percentile(times, 95)]
}

const results = new Map<string, Map<number, [number, number]>>()
const sizeSchemas: string[] = []

for (const size of SIZES) {
  const schema = `bench_management_${process.pid}_${size}`
  const storage: Storage = onPg
    ? new PgStorage({ connectionString: pgUrl, schema })
    : new SqliteStorage({ filename: join(dir, `management-${size}.db`) })
  if (onPg) sizeSchemas.push(schema)
  const app = await managementBenchApp(storage)
  // The floors, beside the plugin in the same server.
  let pageOfKeys = ''
  app.get('/bare/keys', async (request, reply) => reply.type('application/json; charset=utf-8').send(pageOfKeys))
  if (storage instanceof SqliteStorage) {
    const statement = storage.db.prepare(`SELECT id, prefix, purpose, is_active, created_at, updated_at, expires_at FROM api_keys
      WHERE organization = ? AND project = ? ORDER BY created_at, id LIMIT 50`)
    app.get('/hand-written/keys', async (request, reply) => {
      const rows = statement.all('acme', 'shop') as Array<{ id: string, prefix: string, purpose: string, is_active: number, created_at: number, updated_at: number | null, expires_at: number | null }>
      return reply.type('application/json; charset=utf-8').send(JSON.stringify(rows.map((r) => ({
        id: r.id, prefix: r.prefix, purpose: r.purpose, isActive: r.is_active === 1, createdAt: new Date(r.created_at).toISOString(),
        updatedAt: r.updated_at === null ? null : new Date(r.updated_at).toISOString(), expiresAt: r.expires_at === null ? null : new Date(r.expires_at).toISOString()
      }))))
    })
  }
  const base = await app.listen({ host: '127.0.0.1', port: 0 })
  try {
    const building = Date.now()
    const { keys, endpoints } = await buildScaleProject(storage, { keys: size, endpoints: Math.max(1, size / 5), busyEndpoints: Math.min(100, size / 5) })
    // Rows for the deletions: a key and an endpoint (off the host's resources: a delete does not ask the host) per run.
    const extraKeys: string[] = []
    for (let i = 0; i < RUNS + 3; i++) {
      extraKeys.push((await storage.createKey({ organization: 'acme', project: 'shop', prefix: `DEL${String(i).padStart(7, '0')}`, hash: 'h', purpose: 'to delete', isActive: true, expiresAt: null }, { actor: null })).id)
      await storage.putEndpoint({ organization: 'acme', project: 'shop', modelSequence: 9000, type: 'dataset', resourceSequence: i + 1 }, [extraKeys[i]], { actor: null })
    }
    pageOfKeys = JSON.stringify((await (await fetch(`${base}${P}/keys?limit=50`, { headers: ADMIN })).json()))
    const middle = (await storage.listKeysPage({ organization: 'acme', project: 'shop' }, { limit: Math.floor(size / 2) })).next ?? ''
    console.log(`${size.toLocaleString('en')} keys, ${endpoints.length.toLocaleString('en')} endpoints: built in ${((Date.now() - building) / 1000).toFixed(1)} s`)
    const from = new Date(Math.floor(Date.now() / HOUR) * HOUR - 167 * HOUR).toISOString()
    const target = keys[Math.floor(size / 2)]
    const cases: Case[] = [
      { name: 'GET keys (the whole list)', request: () => ({ method: 'GET', url: `${P}/keys` }), status: 200 },
      { name: 'GET keys?limit=50', request: () => ({ method: 'GET', url: `${P}/keys?limit=50` }), status: 200 },
      { name: 'GET keys?limit=50&after= (the middle)', request: () => ({ method: 'GET', url: `${P}/keys?limit=50&after=${middle}` }), status: 200 },
      { name: 'GET keys?limit=50&q= (one match)', request: () => ({ method: 'GET', url: `${P}/keys?limit=50&q=${encodeURIComponent(scalePurpose(size - 1))}` }), status: 200 },
      { name: 'GET endpoints (the whole list)', request: () => ({ method: 'GET', url: `${P}/endpoints` }), status: 200 },
      { name: 'GET endpoints?limit=50', request: () => ({ method: 'GET', url: `${P}/endpoints?limit=50` }), status: 200 },
      { name: 'GET endpoints?limit=50&q= (a path)', request: () => ({ method: 'GET', url: `${P}/endpoints?limit=50&q=${encodeURIComponent('/pipeline/2')}` }), status: 200 },
      { name: 'GET endpoints?keyId=', request: () => ({ method: 'GET', url: `${P}/endpoints?keyId=${keys[0].id}` }), status: 200 },
      { name: 'POST keys (bcrypt cost 4)', request: (i) => ({ method: 'POST', url: `${P}/keys`, body: { purpose: `bench ${i}` } }), status: 201 },
      { name: 'PATCH keys/:id', request: (i) => ({ method: 'PATCH', url: `${P}/keys/${target.id}`, body: { isActive: i % 2 === 1 } }), status: 200 },
      { name: 'POST keys/:id/regenerate (bcrypt cost 4)', request: () => ({ method: 'POST', url: `${P}/keys/${target.id}/regenerate` }), status: 200 },
      { name: 'DELETE keys/:id', request: (i) => ({ method: 'DELETE', url: `${P}/keys/${extraKeys[i]}` }), status: 204 },
      { name: 'PUT endpoints/1/dataset/1 (3 keys)', request: (i) => ({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, body: { keyIds: keys.slice(i % 3, (i % 3) + 3).map((k) => k.id) } }), status: 200 },
      { name: 'POST endpoints/1/dataset/1/keys/:keyId', request: (i) => ({ method: i % 2 === 0 ? 'POST' : 'DELETE', url: `${P}/endpoints/1/dataset/1/keys/${target.id}` }), status: 200 },
      { name: 'DELETE endpoints/…', request: (i) => ({ method: 'DELETE', url: `${P}/endpoints/9000/dataset/${i + 1}` }), status: 204 },
      { name: 'GET usage (one key, 7 days by hour)', request: () => ({ method: 'GET', url: `${P}/usage?granularity=hour&from=${from}&keyId=${keys[0].id}` }), status: 200 },
      { name: 'GET usage (one endpoint, 7 days by hour)', request: () => ({ method: 'GET', url: `${P}/usage?granularity=hour&from=${from}&endpointId=${endpoints[0].id}` }), status: 200 },
      { name: 'GET audit?limit=25', request: () => ({ method: 'GET', url: `${P}/audit?limit=25` }), status: 200 },
      { name: 'GET resources', request: () => ({ method: 'GET', url: `${P}/resources` }), status: 200 },
      { name: 'floor: bare Fastify route, 50 keys\' JSON made once', request: () => ({ method: 'GET', url: '/bare/keys' }), status: 200 },
      ...(storage instanceof SqliteStorage ? [{ name: 'floor: hand-written route, 50 keys read and serialised', request: () => ({ method: 'GET', url: '/hand-written/keys' }), status: 200 }] : [])
    ]
    for (const c of cases) {
      const row = results.get(c.name) ?? new Map<number, [number, number]>()
      row.set(size, await time(base, c))
      results.set(c.name, row)
    }
  } finally {
    await app.close()
  }
}

console.log(`\nstorage: ${onPg ? 'PostgreSQL' : 'SQLite'}; ${RUNS} runs per route; milliseconds, median / p95\n`)
console.log(`| route | ${SIZES.map((s) => `${s.toLocaleString('en')} keys`).join(' | ')} |`)
console.log(`|---|${SIZES.map(() => '---:').join('|')}|`)
for (const [name, row] of results) {
  console.log(`| ${name} | ${SIZES.map((s) => { const r = row.get(s); return r === undefined ? '' : `${r[0].toFixed(1)} / ${r[1].toFixed(1)}` }).join(' | ')} |`)
}

if (onPg) {
  const client = new pg.Client({ connectionString: pgUrl })
  await client.connect()
  for (const schema of sizeSchemas) await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  await client.end()
}
rmSync(dir, { recursive: true, force: true })
