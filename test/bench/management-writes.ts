// Write cost against project size (not a test; issue "18 ·"): PUT (3 keys),
// PATCH and DELETE of a key in a project of 10 and of 10,000 keys (a fifth
// as many endpoints), through app.inject, median and p95 of 40 runs after 3
// warm-ups. Only routes every version has, so the same file measures a
// checkout from before issue 18 (copy it and test/scale-project.ts there).
//
//   npx tsx test/bench/management-writes.ts
//
// Env: BENCH_STORAGE=pg (PgStorage on PGURL, in a schema of its own, dropped at the end).
import pg from 'pg'
import { PgStorage, SqliteStorage, type Storage } from '../../lib/index.js'
import { buildScaleProject } from '../scale-project.js'
import { ADMIN, managementBenchApp } from './management-app.js'
import { median, percentile } from './quantiles.js'

const RUNS = 40
const P = '/api-keys/acme/shop'
const onPg = process.env.BENCH_STORAGE === 'pg'
const pgUrl = process.env.PGURL ?? 'postgres://postgres@127.0.0.1:5432/test'

console.log(`storage: ${onPg ? 'PostgreSQL' : 'SQLite in memory'}; milliseconds, median / p95\n`)
console.log('| keys in the project | PUT endpoint (3 keys) | PATCH key | DELETE key |\n|---:|---:|---:|---:|')
for (const size of [10, 10_000]) {
  const schema = `bench_writes_${process.pid}_${size}`
  const storage: Storage = onPg ? new PgStorage({ connectionString: pgUrl, schema }) : new SqliteStorage({ filename: ':memory:' })
  const app = await managementBenchApp(storage)
  await app.ready()
  try {
    const { keys } = await buildScaleProject(storage, { keys: size, endpoints: Math.max(2, size / 5) })
    const doomed: string[] = []
    for (let i = 0; i < RUNS + 3; i++) {
      doomed.push((await storage.createKey({ organization: 'acme', project: 'shop', prefix: `DEL${String(i).padStart(7, '0')}`, hash: 'h', purpose: 'to delete', isActive: true, expiresAt: null }, { actor: null })).id)
    }
    const time = async (request: (i: number) => { method: 'PUT' | 'PATCH' | 'DELETE', url: string, payload?: object }): Promise<string> => {
      const times: number[] = []
      for (let i = 0; i < RUNS + 3; i++) {
        const started = process.hrtime.bigint()
        const res = await app.inject({ headers: ADMIN, ...request(i) })
        if (res.statusCode >= 300) throw new Error(`${request(i).method} ${request(i).url}: ${res.statusCode} ${res.body}`)
        if (i >= 3) times.push(Number(process.hrtime.bigint() - started) / 1e6)
      }
      return `${median(times).toFixed(2)} / ${percentile(times, 95).toFixed(2)}`
    }
    const put = await time((i) => ({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, payload: { keyIds: keys.slice(i % 3, (i % 3) + 3).map((k) => k.id) } }))
    const patch = await time((i) => ({ method: 'PATCH', url: `${P}/keys/${keys[Math.floor(size / 2)].id}`, payload: { isActive: i % 2 === 1 } }))
    const remove = await time((i) => ({ method: 'DELETE', url: `${P}/keys/${doomed[i]}` }))
    console.log(`| ${size.toLocaleString('en')} | ${put} | ${patch} | ${remove} |`)
  } finally {
    await app.close()
    if (onPg) {
      const client = new pg.Client({ connectionString: pgUrl })
      await client.connect()
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await client.end()
    }
  }
}
