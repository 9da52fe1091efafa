import type Database from 'better-sqlite3'
import pg from 'pg'
import type { JobStatus } from '../lib/index.js'

// Where the example's jobs live. One machine keeps them in the example's
// SQLite file; several instances behind a balancer keep them in PostgreSQL,
// beside the plugin's storage, so that a job started through one instance is
// answered by any other (docs/deployment.md).

export interface JobRow {
  id: string
  status: JobStatus
  error: string | null
  createdAt: Date | string
  updatedAt: Date | string
}

export interface JobStore {
  /** records a queued run of `pipeline`, started by the instance `owner` */
  insert (id: string, pipeline: number, owner: string): Promise<void>
  setStatus (id: string, status: JobStatus, error: string | null): Promise<void>
  get (id: string): Promise<JobRow | null>
  /**
   * Fails the unfinished jobs of `owner` (an instance closing), or, with
   * `owner` null, those not updated for `staleMs` (an instance that crashed:
   * runs last about a second). Returns how many.
   */
  failUnfinished (error: string, scope: { owner: string } | { staleMs: number }): Promise<number>
  close (): Promise<void>
}

const UNFINISHED = "status IN ('queued', 'running')"

// A connection the server ended (a failover, a restart, an idle-connection
// reaper: pg_terminate_backend) fails the statement it was running, with
// 57P01 and its kin from the server, or a client-side error without a code.
// Such a statement is tried again on a new connection; the writes below are
// idempotent, so one whose answer was lost is safe to repeat.
const CONNECTION_LOST = /^(57P0[1-3]|08\d{3})$/
const RETRY_DELAYS_MS = [50, 250, 1000]

function connectionLost (err: unknown): boolean {
  const { code, message } = err as { code?: unknown, message?: unknown }
  if (typeof code === 'string') return CONNECTION_LOST.test(code) || code === 'ECONNRESET' || code === 'ECONNREFUSED' || code === 'EPIPE'
  return typeof message === 'string' && /Connection terminated|connection timeout|Client has encountered a connection error/i.test(message)
}

/** Jobs in the example's SQLite database: one process. */
export class SqliteJobStore implements JobStore {
  private readonly statements

  constructor (db: Database.Database) {
    db.exec(`CREATE TABLE IF NOT EXISTS jobs (
      id TEXT PRIMARY KEY,
      pipeline INTEGER NOT NULL,
      status TEXT NOT NULL,
      error TEXT,
      created_at TEXT NOT NULL,
      updated_at TEXT NOT NULL
    )`)
    // Added after the first version: jobs made before it have no owner.
    const columns = db.prepare<[], { name: string }>('PRAGMA table_info(jobs)').all().map((c) => c.name)
    if (!columns.includes('owner')) db.exec('ALTER TABLE jobs ADD COLUMN owner TEXT')
    this.statements = {
      insert: db.prepare<[string, number, string, string, string]>(
        'INSERT INTO jobs (id, pipeline, owner, status, created_at, updated_at) VALUES (?, ?, ?, \'queued\', ?, ?)'),
      setStatus: db.prepare<[JobStatus, string | null, string, string]>('UPDATE jobs SET status = ?, error = ?, updated_at = ? WHERE id = ?'),
      get: db.prepare<[string], { id: string, status: JobStatus, error: string | null, created_at: string, updated_at: string }>(
        'SELECT id, status, error, created_at, updated_at FROM jobs WHERE id = ?'),
      failOwn: db.prepare<[string, string, string]>(`UPDATE jobs SET status = 'failed', error = ?, updated_at = ? WHERE ${UNFINISHED} AND owner = ?`),
      failStale: db.prepare<[string, string, string]>(`UPDATE jobs SET status = 'failed', error = ?, updated_at = ? WHERE ${UNFINISHED} AND updated_at < ?`)
    }
  }

  async insert (id: string, pipeline: number, owner: string): Promise<void> {
    const now = new Date().toISOString()
    this.statements.insert.run(id, pipeline, owner, now, now)
  }

  async setStatus (id: string, status: JobStatus, error: string | null): Promise<void> {
    this.statements.setStatus.run(status, error, new Date().toISOString(), id)
  }

  async get (id: string): Promise<JobRow | null> {
    const row = this.statements.get.get(id)
    return row === undefined ? null : { id: row.id, status: row.status, error: row.error, createdAt: row.created_at, updatedAt: row.updated_at }
  }

  async failUnfinished (error: string, scope: { owner: string } | { staleMs: number }): Promise<number> {
    const now = new Date()
    const result = 'owner' in scope
      ? this.statements.failOwn.run(error, now.toISOString(), scope.owner)
      : this.statements.failStale.run(error, now.toISOString(), new Date(now.getTime() - scope.staleMs).toISOString())
    return result.changes
  }

  /** The database is the example's, closed by its owner. */
  async close (): Promise<void> {}
}

/** Jobs in PostgreSQL, shared by every instance; times are the database's, so instances' clocks need not agree. */
export class PgJobStore implements JobStore {
  private readonly pool: pg.Pool
  private readonly table: string
  private ready: Promise<void> | null = null

  /**
   * `schema`: as PgStorage's (lower-case letters, digits, _), which it has
   * created. `onError` hears a connection the server ended while idle.
   */
  constructor (options: { connectionString: string, schema: string }, onError: (err: Error) => void = () => {}) {
    if (!/^[a-z_][a-z0-9_]{0,62}$/.test(options.schema)) throw new TypeError('PgJobStore: bad schema name')
    this.pool = new pg.Pool({ connectionString: options.connectionString, max: 4 })
    // Without a listener, an idle connection the server ends is an
    // 'error' event nobody handles, and the process exits. The pool drops
    // the connection and opens another for the next query.
    this.pool.on('error', onError)
    this.table = `"${options.schema}".example_jobs`
  }

  /** A statement, tried again on a new connection when the server ended the one it ran on. */
  private async query<R extends pg.QueryResultRow> (text: string, values: unknown[]): Promise<pg.QueryResult<R>> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.pool.query<R>(text, values)
      } catch (err) {
        if (attempt >= RETRY_DELAYS_MS.length || !connectionLost(err)) throw err
        await new Promise((resolve) => setTimeout(resolve, RETRY_DELAYS_MS[attempt]))
      }
    }
  }

  /** Creates the table once (IF NOT EXISTS, so instances starting together agree). */
  async open (): Promise<void> {
    this.ready ??= (async () => {
      // IF NOT EXISTS still fails when two sessions create at the same moment:
      // instances starting together take turns under a lock.
      const client = await this.pool.connect()
      // An error on the socket between two statements: the next one fails instead.
      const ignore = (): void => {}
      client.on('error', ignore)
      try {
        await client.query('BEGIN')
        await client.query("SELECT pg_advisory_xact_lock(hashtext('fastify-data-endpoints example_jobs'))")
        await client.query(`CREATE SCHEMA IF NOT EXISTS "${this.table.split('"')[1]}"`)
        await client.query(`CREATE TABLE IF NOT EXISTS ${this.table} (
          id text PRIMARY KEY,
          pipeline integer NOT NULL,
          owner text NOT NULL,
          status text NOT NULL,
          error text,
          created_at timestamptz NOT NULL DEFAULT now(),
          updated_at timestamptz NOT NULL DEFAULT now()
        )`)
        await client.query('COMMIT')
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {})
        throw err
      } finally {
        client.removeListener('error', ignore)
        client.release()
      }
    })().catch((err: unknown) => {
      this.ready = null
      throw err
    })
    return this.ready
  }

  async insert (id: string, pipeline: number, owner: string): Promise<void> {
    // ON CONFLICT: a retry of an insert whose answer was lost finds its row.
    await this.query(`INSERT INTO ${this.table} (id, pipeline, owner, status) VALUES ($1, $2, $3, 'queued') ON CONFLICT (id) DO NOTHING`, [id, pipeline, owner])
  }

  async setStatus (id: string, status: JobStatus, error: string | null): Promise<void> {
    await this.query(`UPDATE ${this.table} SET status = $1, error = $2, updated_at = now() WHERE id = $3`, [status, error, id])
  }

  async get (id: string): Promise<JobRow | null> {
    const { rows } = await this.query<{ id: string, status: JobStatus, error: string | null, created_at: Date, updated_at: Date }>(
      `SELECT id, status, error, created_at, updated_at FROM ${this.table} WHERE id = $1`, [id])
    const row = rows[0]
    return row === undefined ? null : { id: row.id, status: row.status, error: row.error, createdAt: row.created_at, updatedAt: row.updated_at }
  }

  async failUnfinished (error: string, scope: { owner: string } | { staleMs: number }): Promise<number> {
    const result = 'owner' in scope
      ? await this.query(`UPDATE ${this.table} SET status = 'failed', error = $1, updated_at = now() WHERE ${UNFINISHED} AND owner = $2`, [error, scope.owner])
      : await this.query(`UPDATE ${this.table} SET status = 'failed', error = $1, updated_at = now()
          WHERE ${UNFINISHED} AND updated_at < now() - make_interval(secs => $2)`, [error, scope.staleMs / 1000])
    return result.rowCount ?? 0
  }

  async close (): Promise<void> {
    await this.pool.end()
  }
}
