import pg from 'pg'
import t, { type Test } from 'tap'
import { HeldConnection } from '../../lib/storage/held-connection.js'
import { PgStorage } from '../../lib/storage/pg-storage.js'
import { eventually } from '../limit-fixtures.js'
import { freshSchema, pgAvailable } from '../pg.js'

// The connection PostgreSQL mode's key checks keep: one connection for run
// after run, replaced when it breaks, given back when unused or closed.

const url = await pgAvailable(t)

function poolOf (t: Test, max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: url as string, max })
  t.teardown(() => pool.end())
  return pool
}

const pid = async (client: pg.PoolClient): Promise<number> => (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0].pid
const checkedOut = (pool: pg.Pool): number => pool.totalCount - pool.idleCount

/** A HeldConnection on a pool of its own, closed after the test, and its connection's backend. */
async function heldOnce (t: Test): Promise<{ pool: pg.Pool, held: HeldConnection, first: number }> {
  const pool = poolOf(t)
  const held = new HeldConnection(pool)
  t.teardown(() => held.close())
  return { pool, held, first: await held.run(pid) }
}

/** A run that holds its connection until released; resolves once it has begun, and answers its backend. */
async function blockedRun (held: HeldConnection): Promise<{ running: Promise<number>, release: () => void }> {
  let release: () => void = () => {}
  let started: () => void = () => {}
  const starting = new Promise<void>((resolve) => { started = resolve })
  const running = held.run(async (client) => {
    const waiting = new Promise<void>((resolve) => { release = resolve })
    started()
    await waiting
    return pid(client)
  })
  await starting
  return { running, release }
}

if (url !== null) {
  t.test('runs share one connection, one at a time', async (t) => {
    const { pool, held, first } = await heldOnce(t)
    const { running, release } = await blockedRun(held)
    t.ok(held.busy, 'busy while a statement runs')
    await t.rejects(held.run(pid), /busy/, 'a second run at once is refused (the caller takes the pool)')
    release()
    t.equal(await running, first, 'the same connection')
    t.notOk(held.busy)
    t.equal(await held.run(pid), first, 'and again')
    t.equal(checkedOut(pool), 1, 'one connection out of the pool')
  })

  t.test('a connection killed while held: no crash, the next run takes another', async (t) => {
    const { pool, held, first } = await heldOnce(t)
    const admin = new pg.Client({ connectionString: url })
    await admin.connect()
    t.teardown(() => admin.end())
    await admin.query('SELECT pg_terminate_backend($1)', [first])
    // The break is heard as the connection's error (or by the next run, which then fails once).
    let failures = 0
    let next: number | null = null
    t.ok(await eventually(async () => {
      try {
        next = await held.run(pid)
        return true
      } catch {
        failures++
        return false
      }
    }), 'a run succeeds again')
    t.ok(failures <= 1, `at most one run failed (${failures})`)
    t.not(next, first, 'on another connection')
    t.equal(checkedOut(pool), 1, 'the broken one given back')
  })

  t.test('a failed statement gives its connection back, to be closed', async (t) => {
    const { pool, held, first } = await heldOnce(t)
    await t.rejects(held.run(async (client) => client.query('SELECT * FROM no_such_table')), /no_such_table/)
    t.not(await held.run(pid), first, 'the next run on a new connection')
    t.equal(checkedOut(pool), 1)
  })

  t.test('an unused connection goes back to the pool, so that a pool ended without closing ends', async (t) => {
    const pool = new pg.Pool({ connectionString: url, max: 4 })
    const held = new HeldConnection(pool, undefined, 50)
    await held.run(pid)
    t.equal(checkedOut(pool), 1)
    t.ok(await eventually(async () => checkedOut(pool) === 0), 'given back after a while unused')
    await pool.end()
    t.pass('the pool ended')
    await held.close()
  })

  t.test('close gives the connection back once its statement has run; no run after it', async (t) => {
    const pool = poolOf(t)
    const held = new HeldConnection(pool)
    const { running, release } = await blockedRun(held)
    const closed = held.close()
    release()
    t.type(await running, 'number', 'the running statement finishes')
    await closed
    t.equal(checkedOut(pool), 0, 'given back')
    await t.rejects(held.run(pid), /closed/)
  })

  t.test('a failure to connect rejects as the caller maps it, and the next run tries again', async (t) => {
    const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/test', max: 4, connectionTimeoutMillis: 2000 })
    t.teardown(() => pool.end())
    const held = new HeldConnection(pool, (err) => new Error(`mapped: ${(err as Error).message}`))
    await t.rejects(held.run(pid), /^mapped: /)
    await t.rejects(held.run(pid), /^mapped: /, 'tried again, not a remembered failure')
    await held.close()
  })

  t.test('PgStorage holds a connection for its lookups only with a pool of four or more, and gives it back on close', async (t) => {
    const { schema } = await freshSchema(t, url)
    for (const [max, held] of [[3, 0], [4, 1]]) {
      const pool = new pg.Pool({ connectionString: url, max })
      const storage = new PgStorage({ pool, schema })
      await storage.migrate()
      const locator = { organization: 'acme', project: 'shop', modelSequence: 1, type: 'dataset' as const, resourceSequence: 1 }
      t.equal(await storage.findEndpointKey(locator, null), null)
      t.equal(checkedOut(pool), held, `a pool of ${max}: ${held} connection(s) held after a lookup`)
      await storage.close()
      t.equal(checkedOut(pool), 0, `a pool of ${max}: none after close`)
      await pool.end()
    }
  })
}
