import { randomUUID } from 'node:crypto'
import pg from 'pg'
import t from 'tap'
import { startServer, tempDir, type Started } from '../example-process.js'
import { pgAvailable } from '../pg.js'

// PostgreSQL ends every connection of the example's database while two
// example instances are under load (issue 12): what a failover, a restart or
// an idle-connection reaper does. Both keep answering, and nothing is lost:
// every job a client was given runs to its end, the key still works, and
// each endpoint's `calls` holds every answered call, counted once. The test
// runs in a database of its own, so that ending its connections touches no
// other test.

const ADMIN = 'terminate-admin'
const ROUNDS = 3

interface Outcome { instance: number, kind: 'download' | 'run' | 'keys', status: number | 'error', jobId?: string, at: number }

async function terminateAll (admin: pg.Client, database: string): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(
    'SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [database])
  return rows[0].n
}

async function jobStatus (base: string, id: string): Promise<string> {
  const deadline = Date.now() + 15_000
  for (;;) {
    const res = await fetch(`${base}/api/job/${id}`)
    const body = await res.json() as { status?: string, message?: string }
    if (res.status === 200 && (body.status === 'succeeded' || body.status === 'failed')) return body.status
    if (Date.now() > deadline) return `${res.status} ${body.status ?? body.message ?? ''}`
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

t.test('every connection of the database ended, three times, under load on two instances: both keep answering, nothing lost', async (t) => {
  const url = await pgAvailable(t)
  if (url === null) return
  const database = `fde_terminate_${process.pid}_${randomUUID().slice(0, 8)}`
  const admin = new pg.Client({ connectionString: url })
  await admin.connect()
  await admin.query(`CREATE DATABASE "${database}"`)
  t.teardown(async () => {
    await admin.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`)
    await admin.end()
  })
  const target = new URL(url)
  target.pathname = `/${database}`
  const env = { DATABASE_URL: target.toString(), ADMIN_TOKEN: ADMIN, DEMO_KEY: 'off', LOG_LEVEL: 'warn' }
  const instances: Started[] = [await startServer(t, { ...env, DATA_DIR: tempDir(t) }), await startServer(t, { ...env, DATA_DIR: tempDir(t) })]
  const [a, b] = instances
  const json = { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }
  const created = await fetch(`${a.baseUrl}/api-keys/acme/shop/keys`, { method: 'POST', headers: json, body: JSON.stringify({ purpose: 'terminate' }) })
  t.equal(created.status, 201)
  const key = await created.json() as { id: string, key: string }
  for (const type of ['dataset', 'pipeline']) {
    const put = await fetch(`${b.baseUrl}/api-keys/acme/shop/endpoints/1/${type}/1`, { method: 'PUT', headers: json, body: JSON.stringify({ keyIds: [key.id] }) })
    t.equal(put.status, 201, `${type} endpoint`)
  }

  // Four clients per instance: downloads, pipeline runs and key listings, in turn.
  const outcomes: Outcome[] = []
  let running = true
  const client = async (instance: number, n: number): Promise<void> => {
    const base = instances[instance].baseUrl
    for (let i = n; running; i++) {
      const kind = (['download', 'run', 'keys'] as const)[i % 3]
      try {
        const res = kind === 'download'
          ? await fetch(`${base}/api/acme/shop/model/1/dataset/1?format=json`, { headers: { authorization: `Bearer ${key.key}` } })
          : kind === 'run'
            ? await fetch(`${base}/api/acme/shop/model/1/pipeline/1`, { method: 'POST', headers: { authorization: `Bearer ${key.key}` } })
            : await fetch(`${base}/api-keys/acme/shop/keys`, { headers: { authorization: `Bearer ${ADMIN}` } })
        const body = await res.json() as { job_id?: string }
        outcomes.push({ instance, kind, status: res.status, jobId: body.job_id, at: Date.now() })
      } catch {
        outcomes.push({ instance, kind, status: 'error', at: Date.now() })
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
    }
  }
  const clients = [0, 1].flatMap((instance) => [0, 1, 2, 3].map(async (n) => client(instance, n)))

  const terminatedAt: number[] = []
  for (let round = 0; round < ROUNDS; round++) {
    await new Promise((resolve) => setTimeout(resolve, 1500))
    terminatedAt.push(Date.now())
    t.ok(await terminateAll(admin, database) > 0, `round ${round + 1}: connections ended`)
  }
  await new Promise((resolve) => setTimeout(resolve, 2000))
  running = false
  await Promise.all(clients)

  // Both keep answering: each kind, on each instance, succeeds after the last termination.
  const last = terminatedAt[terminatedAt.length - 1]
  for (const instance of [0, 1]) {
    for (const kind of ['download', 'run', 'keys'] as const) {
      const after = outcomes.filter((o) => o.instance === instance && o.kind === kind && o.at > last + 500)
      t.ok(after.length > 0 && after.every((o) => o.status === 200),
        `instance ${instance === 0 ? 'A' : 'B'}, ${kind}: ${after.length} answers after the last termination, all 200`)
    }
  }
  const failed = outcomes.filter((o) => o.status !== 200)
  t.ok(failed.every((o) => o.status === 500), `the few answers cut by a termination are 500s (${failed.length} of ${outcomes.length}), none a dropped connection`)

  // Every job a client was given runs to its end.
  const jobs = outcomes.filter((o) => o.kind === 'run' && o.status === 200).map((o) => o.jobId as string)
  t.ok(jobs.length > 10, `${jobs.length} jobs started`)
  const statuses = await Promise.all(jobs.map(async (id, i) => jobStatus(instances[i % 2].baseUrl, id)))
  t.same(statuses.filter((s) => s !== 'succeeded'), [], 'every one succeeded, as either instance tells')

  // The key still works, on both.
  for (const instance of instances) {
    const res = await fetch(`${instance.baseUrl}/api/acme/shop/model/1/dataset/1?meta=entities`, { headers: { authorization: `Bearer ${key.key}` } })
    t.equal(res.status, 200, 'the key still authenticates')
  }

  // Both stop gracefully (they did not die on the way), writing their counters.
  for (const instance of instances) {
    const { code, stdout } = await instance.stop('SIGTERM')
    t.equal(code, 0, 'exits 0 on SIGTERM')
    t.notMatch(stdout, /Unhandled 'error' event|uncaught/i, 'no unhandled error')
  }

  // Counters: every call answered 200 is counted, once; a call cut after its
  // key was checked (a 500) may be counted too (DESIGN.md §2 step 6). The
  // usage history, written in the same transactions, agrees.
  const stored = new pg.Client({ connectionString: target.toString() })
  await stored.connect()
  t.teardown(() => stored.end())
  const { rows } = await stored.query<{ type: string, calls: string, ok: string }>(
    `SELECT e.type, e.calls, (SELECT COALESCE(sum(u.count), 0) FROM data_endpoints.usage_hourly u WHERE u.endpoint_id = e.id AND u.outcome = 'ok') AS ok
       FROM data_endpoints.endpoints e`)
  for (const [type, kind] of [['dataset', 'download'], ['pipeline', 'run']] as const) {
    const row = rows.find((r) => r.type === type)
    const answered = outcomes.filter((o) => o.kind === kind && o.status === 200).length
    const cut = outcomes.filter((o) => o.kind === kind && o.status !== 200).length + 2 // + the key checks after the load
    const calls = Number(row?.calls)
    t.ok(calls >= answered + (type === 'dataset' ? 2 : 0) && calls <= answered + cut, `${type}: ${calls} calls for ${answered} answered 200 and ${cut} others`)
    t.equal(Number(row?.ok), calls, `${type}: the usage history counts the same`)
  }
})
