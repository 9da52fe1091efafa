import { createHash, randomUUID } from 'node:crypto'
import { createRequire } from 'node:module'
import type pg from 'pg'
import {
  PrefixTakenError,
  type ApiKeyPatch, type ApiKeyRecord, type EndpointKeyLookup, type EndpointKeySummary, type EndpointLocator,
  type EndpointRecord, type IdempotencyClaim, type NewApiKey, type ProjectRef, type PutEndpointResult,
  type ResourceType, type Storage, type UsageBatch
} from './storage.js'
import { UsageInDoubtError, type UsageFate } from './usage-in-doubt.js'

// pg is loaded when the first PgStorage is made, not with the plugin: a host
// on SQLite alone does not carry the driver (some 8 MB of memory).
const requireModule = createRequire(import.meta.url)
let pgModule: typeof pg | null = null
function loadPg (): typeof pg {
  return (pgModule ??= requireModule('pg') as typeof pg)
}

export interface PgStorageOptions {
  /**
   * A pool to use. It stays the caller's: `close()` does not end it, and its
   * own settings (statement_timeout, connectionTimeoutMillis) apply.
   * Without it PgStorage makes a pool from the options below and ends it in `close()`.
   */
  pool?: pg.Pool
  /** where PostgreSQL is, e.g. postgres://user:password@host:5432/database; default: the PG* environment */
  connectionString?: string
  /** connections in the pool PgStorage makes; default 10 */
  poolSize?: number
  /**
   * schema that holds the tables (and their schema_migrations), created if
   * missing; default 'data_endpoints', apart from the host's own tables
   */
  schema?: string
  /** milliseconds a statement may take, on the server and waiting for its answer; default 5000 */
  queryTimeout?: number
  /** milliseconds to open a connection or wait for a free one; default 5000 */
  connectionTimeout?: number
}

export const PG_STORAGE_DEFAULTS = {
  poolSize: 10,
  schema: 'data_endpoints',
  queryTimeout: 5000,
  connectionTimeout: 5000
} as const

// Versioned migrations, applied in order inside one transaction that holds an
// advisory lock, so two instances starting at once apply each exactly once.
// Each is recorded in schema_migrations. Never edit a shipped one.
// Ids are text, not uuid: a malformed id from a URL is simply not found.
const MIGRATIONS: string[] = [
  `CREATE TABLE api_keys (
     id text PRIMARY KEY,
     organization text NOT NULL,
     project text NOT NULL,
     prefix text NOT NULL UNIQUE,
     hash text NOT NULL,
     purpose text NOT NULL,
     is_active boolean NOT NULL,
     created_at timestamptz NOT NULL,
     updated_at timestamptz
   );
   CREATE INDEX api_keys_project ON api_keys (organization, project);
   CREATE TABLE endpoints (
     id text PRIMARY KEY,
     organization text NOT NULL,
     project text NOT NULL,
     model_sequence bigint NOT NULL,
     type text NOT NULL CHECK (type IN ('dataset', 'pipeline')),
     resource_sequence bigint NOT NULL,
     calls bigint NOT NULL DEFAULT 0,
     created_at timestamptz NOT NULL,
     UNIQUE (organization, project, model_sequence, type, resource_sequence)
   );
   CREATE TABLE endpoint_keys (
     endpoint_id text NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
     key_id text NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
     PRIMARY KEY (endpoint_id, key_id)
   );
   CREATE INDEX endpoint_keys_key ON endpoint_keys (key_id);
   CREATE TABLE idempotency_keys (
     endpoint_id text NOT NULL,
     idempotency_key text NOT NULL,
     response text,
     created_at timestamptz NOT NULL,
     PRIMARY KEY (endpoint_id, idempotency_key)
   );
   CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);`,
  // The random token of the call that claimed the key: only it may release
  // the claim. Records claimed before this migration have none.
  'ALTER TABLE idempotency_keys ADD COLUMN claim_token text'
]

// First key of the two-key advisory lock taken while migrating; the second is the schema's hash.
const MIGRATION_LOCK = 0x46444521
// Expired idempotency records are deleted at most this often per instance.
const PURGE_INTERVAL_MS = 60_000
// The names that mean the same schema quoted (as here) and unquoted (as a DBA
// types them; PostgreSQL folds those to lower case). pg_ is reserved by PostgreSQL.
const SCHEMA_NAME = /^(?!pg_)[a-z_][a-z0-9_]{0,62}$/

interface KeyRow {
  id: string
  organization: string
  project: string
  prefix: string
  purpose: string
  is_active: boolean
  created_at: Date
  updated_at: Date | null
}

interface EndpointRow {
  id: string
  organization: string
  project: string
  model_sequence: string
  type: ResourceType
  resource_sequence: string
  calls: string
  created_at: Date
  keys: EndpointKeySummary[]
}

function toKey (row: KeyRow): ApiKeyRecord {
  return {
    id: row.id,
    organization: row.organization,
    project: row.project,
    prefix: row.prefix,
    purpose: row.purpose,
    isActive: row.is_active,
    createdAt: row.created_at,
    updatedAt: row.updated_at
  }
}

// pg returns bigint (int8) as a string, so that no precision is lost; every
// value here stays below 2^53.
function toEndpoint (row: EndpointRow): EndpointRecord {
  return {
    id: row.id,
    organization: row.organization,
    project: row.project,
    modelSequence: Number(row.model_sequence),
    type: row.type,
    resourceSequence: Number(row.resource_sequence),
    calls: Number(row.calls),
    keys: row.keys,
    createdAt: row.created_at
  }
}

function locatorParams (l: EndpointLocator): [string, string, number, string, number] {
  return [l.organization, l.project, l.modelSequence, l.type, l.resourceSequence]
}

// PostgreSQL text cannot hold NUL (U+0000), and a query that sends one fails.
// No stored id, moniker or prefix has one, so a lookup by such a value finds
// nothing, as it would on SQLite; writes of such a value still fail.
function hasNul (...values: string[]): boolean {
  return values.some((v) => v.includes('\u0000'))
}

function isPrefixTaken (err: unknown): boolean {
  const e = err as { code?: string, constraint?: string }
  return e.code === '23505' && e.constraint === 'api_keys_prefix_key'
}

/**
 * An error on the way to the server (refused, reset, timed out) becomes
 * "PostgreSQL unavailable: <reason>", whose reason never names the host: the
 * plugin shows it to API clients in the 500. An answer from the server (a
 * constraint, a cancelled statement) is passed on as it is.
 */
function unavailable (err: unknown): unknown {
  if (err instanceof loadPg().DatabaseError || !(err instanceof Error)) return err
  const { code, syscall } = err as NodeJS.ErrnoException
  const reason = typeof syscall === 'string' && typeof code === 'string' ? code : err.message
  return new Error(`PostgreSQL unavailable: ${reason}`, { cause: err })
}

function positiveInteger (name: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) throw new TypeError(`PgStorage: option "${name}" must be a positive integer`)
  return value
}

type Queryable = pg.Pool | pg.PoolClient
/** A transaction's id and its server process. */
interface Session { xid: string, pid: number }
// pg reads a per-query `query_timeout` that its typings do not declare.
type TimedQuery = pg.QueryConfig & { query_timeout: number }

/**
 * The store for several instances: PostgreSQL through a `pg` pool. Every
 * query has a bounded time, so a down or slow database yields an error rather
 * than a hang, and the pool replaces broken connections by itself.
 */
export class PgStorage implements Storage {
  readonly pool: pg.Pool
  readonly schema: string
  private readonly ownPool: boolean
  private readonly queryTimeout: number
  private readonly sql
  private readonly lookupName: string
  private migrated: Promise<void> | null = null
  private lastPurge = 0
  private closed = false

  constructor (options: PgStorageOptions = {}) {
    const d = PG_STORAGE_DEFAULTS
    this.schema = options.schema ?? d.schema
    if (!SCHEMA_NAME.test(this.schema)) throw new TypeError('PgStorage: option "schema" must be 1 to 63 lower-case letters, digits or _, not starting with a digit or pg_')
    this.queryTimeout = positiveInteger('queryTimeout', options.queryTimeout ?? d.queryTimeout)
    if (options.pool !== undefined) {
      this.pool = options.pool
      this.ownPool = false
    } else {
      this.pool = new (loadPg().Pool)({
        connectionString: options.connectionString,
        max: positiveInteger('poolSize', options.poolSize ?? d.poolSize),
        connectionTimeoutMillis: positiveInteger('connectionTimeout', options.connectionTimeout ?? d.connectionTimeout),
        // The server gives up too, so that a statement nobody waits for any
        // more, or a transaction whose client vanished, does not hold locks.
        statement_timeout: this.queryTimeout,
        idle_in_transaction_session_timeout: this.queryTimeout * 2,
        application_name: 'fastify-data-endpoints'
      })
      this.ownPool = true
    }
    // A connection that breaks while idle is dropped by the pool, which opens
    // a new one for the next query; without a listener the error would crash
    // the process.
    this.pool.on('error', () => {})

    const t = (table: string): string => `"${this.schema}".${table}`
    const keyColumns = 'id, organization, project, prefix, purpose, is_active, created_at, updated_at'
    const locatorMatch = 'e.organization = $1 AND e.project = $2 AND e.model_sequence = $3 AND e.type = $4 AND e.resource_sequence = $5'
    const endpointSelect = `SELECT e.id, e.organization, e.project, e.model_sequence, e.type, e.resource_sequence, e.calls, e.created_at,
        COALESCE((SELECT json_agg(json_build_object('id', k.id, 'prefix', k.prefix, 'purpose', k.purpose, 'isActive', k.is_active)
                                  ORDER BY k.created_at, k.id)
                    FROM ${t('endpoint_keys')} ek JOIN ${t('api_keys')} k ON k.id = ek.key_id
                   WHERE ek.endpoint_id = e.id), '[]') AS keys
       FROM ${t('endpoints')} e`
    this.sql = {
      lookup: `SELECT e.id AS endpoint_id, k.id AS key_id, k.hash, k.is_active
                 FROM ${t('endpoints')} e
                 LEFT JOIN ${t('endpoint_keys')} ek ON ek.endpoint_id = e.id
                       AND ek.key_id = (SELECT id FROM ${t('api_keys')} WHERE prefix = $6)
                 LEFT JOIN ${t('api_keys')} k ON k.id = ek.key_id
                WHERE ${locatorMatch}`,
      // Rows are locked in id order, so that two instances flushing at once cannot deadlock.
      lockEndpoints: `SELECT 1 FROM ${t('endpoints')} WHERE id = ANY ($1::text[]) ORDER BY id FOR NO KEY UPDATE`,
      addCalls: `UPDATE ${t('endpoints')} e SET calls = e.calls + u.n
                   FROM unnest($1::text[], $2::bigint[]) AS u (id, n) WHERE e.id = u.id`,
      lockKeys: `SELECT 1 FROM ${t('api_keys')} WHERE id = ANY ($1::text[]) ORDER BY id FOR NO KEY UPDATE`,
      touchKeys: `UPDATE ${t('api_keys')} k SET updated_at = GREATEST(k.updated_at, u.at)
                    FROM unnest($1::text[], $2::timestamptz[]) AS u (id, at) WHERE k.id = u.id`,
      listKeys: `SELECT ${keyColumns} FROM ${t('api_keys')} WHERE organization = $1 AND project = $2 ORDER BY created_at, id`,
      getKey: `SELECT ${keyColumns} FROM ${t('api_keys')} WHERE organization = $1 AND project = $2 AND id = $3`,
      insertKey: `INSERT INTO ${t('api_keys')} (id, organization, project, prefix, hash, purpose, is_active, created_at)
                  VALUES ($1, $2, $3, $4, $5, $6, $7, now()) RETURNING ${keyColumns}`,
      updateKey: `UPDATE ${t('api_keys')} SET purpose = COALESCE($4, purpose), is_active = COALESCE($5, is_active)
                   WHERE organization = $1 AND project = $2 AND id = $3 RETURNING ${keyColumns}`,
      setSecret: `UPDATE ${t('api_keys')} SET prefix = $4, hash = $5
                   WHERE organization = $1 AND project = $2 AND id = $3 RETURNING ${keyColumns}`,
      deleteKey: `DELETE FROM ${t('api_keys')} WHERE organization = $1 AND project = $2 AND id = $3`,
      listEndpoints: `${endpointSelect} WHERE e.organization = $1 AND e.project = $2
                       ORDER BY e.model_sequence, e.type, e.resource_sequence`,
      getEndpoint: `${endpointSelect} WHERE ${locatorMatch}`,
      // KEY SHARE keeps the keys from being deleted until the assignment is
      // written, without waiting for a usage flush that touches updated_at.
      projectKeys: `SELECT id FROM ${t('api_keys')} WHERE organization = $1 AND project = $2 AND id = ANY ($3::text[])
                    FOR KEY SHARE`,
      lockEndpoint: `SELECT e.id FROM ${t('endpoints')} e WHERE ${locatorMatch} FOR UPDATE`,
      insertEndpoint: `INSERT INTO ${t('endpoints')} (id, organization, project, model_sequence, type, resource_sequence, created_at)
                       VALUES ($6, $1, $2, $3, $4, $5, now()) ON CONFLICT DO NOTHING RETURNING id`,
      clearAssignments: `DELETE FROM ${t('endpoint_keys')} WHERE endpoint_id = $1`,
      assign: `INSERT INTO ${t('endpoint_keys')} (endpoint_id, key_id) SELECT $1, unnest($2::text[])`,
      deleteEndpoint: `DELETE FROM ${t('endpoints')} e WHERE ${locatorMatch}`,
      // A live record wins; an expired one (older than the ttl) is taken over.
      claimIdempotency: `INSERT INTO ${t('idempotency_keys')} AS i (endpoint_id, idempotency_key, response, created_at, claim_token)
                         VALUES ($1, $2, NULL, now(), $4)
                         ON CONFLICT (endpoint_id, idempotency_key) DO UPDATE
                         SET response = NULL, created_at = now(), claim_token = EXCLUDED.claim_token
                          WHERE i.created_at < now() - $3::float8 * interval '1 millisecond'
                         RETURNING 1`,
      getIdempotency: `SELECT response FROM ${t('idempotency_keys')}
                        WHERE endpoint_id = $1 AND idempotency_key = $2 AND created_at >= now() - $3::float8 * interval '1 millisecond'`,
      purgeIdempotency: `DELETE FROM ${t('idempotency_keys')} WHERE created_at < now() - $1::float8 * interval '1 millisecond'`,
      completeIdempotency: `UPDATE ${t('idempotency_keys')} SET response = $3 WHERE endpoint_id = $1 AND idempotency_key = $2`,
      releaseIdempotency: `DELETE FROM ${t('idempotency_keys')}
                            WHERE endpoint_id = $1 AND idempotency_key = $2 AND claim_token = $3 AND response IS NULL`
    }
    // Named, so each connection parses and plans the per-request lookup once;
    // the schema is in the name because the text differs per schema.
    this.lookupName = 'fde_lookup_' + createHash('sha256').update(this.schema).digest('hex').slice(0, 16)
  }

  private query<R extends pg.QueryResultRow> (on: Queryable, text: string, values: unknown[] = [], name?: string): Promise<pg.QueryResult<R>> {
    const config: TimedQuery = { text, values, name, query_timeout: this.queryTimeout }
    return on.query<R>(config).catch((err: unknown) => { throw unavailable(err) })
  }

  /**
   * Creates the schema and tables, or brings them up to date. Runs by itself
   * before the first query; call it at start-up to fail early. A failed run is
   * tried again by the next call.
   */
  async migrate (): Promise<void> {
    if (this.closed) throw new Error('PgStorage is closed')
    this.migrated ??= this.transaction(async (client) => {
      await this.query(client, 'SELECT pg_advisory_xact_lock($1, hashtext($2))', [MIGRATION_LOCK, this.schema])
      // Only when missing: a role that owns a schema made for it need not
      // have CREATE on the database, which CREATE SCHEMA IF NOT EXISTS asks for.
      const exists = await this.query(client, 'SELECT 1 FROM pg_namespace WHERE nspname = $1', [this.schema])
      if (exists.rowCount === 0) await this.query(client, `CREATE SCHEMA "${this.schema}"`)
      await this.query(client, `SET LOCAL search_path TO "${this.schema}"`)
      await this.query(client, `CREATE TABLE IF NOT EXISTS schema_migrations (
        version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`)
      const { rows } = await this.query<{ version: number }>(client, 'SELECT version FROM schema_migrations')
      const applied = new Set(rows.map((r) => r.version))
      for (const [index, sql] of MIGRATIONS.entries()) {
        if (applied.has(index + 1)) continue
        await this.query(client, sql)
        await this.query(client, 'INSERT INTO schema_migrations (version) VALUES ($1)', [index + 1])
      }
    }).catch((err: unknown) => {
      this.migrated = null
      throw err
    })
    return this.migrated
  }

  private async run<R extends pg.QueryResultRow> (text: string, values: unknown[] = [], name?: string): Promise<pg.QueryResult<R>> {
    await this.migrate()
    return this.query<R>(this.pool, text, values, name)
  }

  /**
   * Runs `work` in a transaction on one connection; a failure drops the
   * connection, which rolls back. When COMMIT goes unanswered, `committed`
   * (if given) finds out, from what `work` returned, whether it took effect anyway.
   */
  private async transaction<T> (work: (client: pg.PoolClient) => Promise<T>, committed?: (result: T) => Promise<boolean>): Promise<T> {
    const client = await this.pool.connect().catch((err: unknown) => { throw unavailable(err) })
    // An error on the socket between two queries must not crash the process;
    // the next query fails instead.
    const ignore = (): void => {}
    client.on('error', ignore)
    let result: { value: T } | undefined
    try {
      await this.query(client, 'BEGIN')
      result = { value: await work(client) }
      await this.query(client, 'COMMIT')
      client.removeListener('error', ignore)
      client.release()
      return result.value
    } catch (err) {
      client.removeListener('error', ignore)
      client.release(err as Error)
      if (result !== undefined && committed !== undefined && await committed(result.value)) return result.value
      throw err
    }
  }

  async findEndpointKey (locator: EndpointLocator, prefix: string | null): Promise<EndpointKeyLookup | null> {
    if (hasNul(locator.organization, locator.project, locator.type)) return null
    // A prefix with NUL is no key's: the endpoint alone, as for an unknown prefix.
    const keyPrefix = prefix !== null && hasNul(prefix) ? null : prefix
    const { rows } = await this.run<{ endpoint_id: string, key_id: string | null, hash: string | null, is_active: boolean | null }>(
      this.sql.lookup, [...locatorParams(locator), keyPrefix], this.lookupName)
    if (rows.length === 0) return null
    const row = rows[0]
    return {
      endpointId: row.endpoint_id,
      key: row.key_id === null ? null : { id: row.key_id, hash: row.hash as string, isActive: row.is_active as boolean }
    }
  }

  async applyUsage (batch: UsageBatch): Promise<void> {
    if (batch.calls.size === 0 && batch.lastUsed.size === 0) return
    await this.migrate()
    const calls = [...batch.calls].sort(([a], [b]) => (a < b ? -1 : 1))
    const lastUsed = [...batch.lastUsed].sort(([a], [b]) => (a < b ? -1 : 1))
    await this.transaction(async (client) => {
      // Who this transaction is, to learn its fate should the COMMIT go unanswered.
      const session = (await this.query<Session>(client, 'SELECT txid_current()::text AS xid, pg_backend_pid() AS pid')).rows[0]
      if (calls.length > 0) {
        const ids = calls.map(([id]) => id)
        await this.query(client, this.sql.lockEndpoints, [ids])
        await this.query(client, this.sql.addCalls, [ids, calls.map(([, n]) => n)])
      }
      if (lastUsed.length > 0) {
        const ids = lastUsed.map(([id]) => id)
        await this.query(client, this.sql.lockKeys, [ids])
        await this.query(client, this.sql.touchKeys, [ids, lastUsed.map(([, at]) => at)])
      }
      return session
    }, async (session) => {
      // COMMIT went unanswered. A retry would count the batch twice if it did
      // commit, so it is retried only once the server says it did not.
      const fate = await this.usageFate(session).catch(() => null)
      if (fate === 'written' || fate === 'not written') return fate === 'written'
      throw new UsageInDoubtError('PostgreSQL unavailable: the answer to COMMIT was lost; whether the usage counters were written is not known yet',
        () => this.usageFate(session))
    })
  }

  /**
   * What became of a usage transaction whose COMMIT went unanswered, asked on
   * another connection. Rejects while that cannot be told: the server is
   * unreachable, or the transaction is still running.
   */
  private async usageFate (session: Session): Promise<UsageFate> {
    for (let attempt = 0; attempt < 20; attempt++) {
      const { rows } = await this.query<{ status: string | null }>(this.pool, 'SELECT txid_status($1::bigint) AS status', [session.xid])
        .catch((err: unknown) => {
          // "is in the future": this server never had the transaction (a
          // failover to a replica behind the old primary), so its data lacks it.
          if ((err as { code?: string }).code === '22023') return { rows: [{ status: 'aborted' }] }
          throw err
        })
      const status = rows[0].status
      // null: too old for the server to remember.
      if (status !== 'in progress') return status === 'committed' ? 'written' : status === 'aborted' ? 'not written' : 'unknowable'
      // Its session still holds it open, or is committing it: end that session,
      // then look again. The xid must match too, should the pid have been reused.
      await this.query(this.pool, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                                    WHERE pid = $1 AND backend_xid::text = ($2::bigint % 4294967296)::text`,
      [session.pid, session.xid])
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    throw new Error('PostgreSQL unavailable: a usage transaction is still in progress')
  }

  async listKeys (project: ProjectRef): Promise<ApiKeyRecord[]> {
    if (hasNul(project.organization, project.project)) return []
    return (await this.run<KeyRow>(this.sql.listKeys, [project.organization, project.project])).rows.map(toKey)
  }

  async getKey (project: ProjectRef, keyId: string): Promise<ApiKeyRecord | null> {
    if (hasNul(project.organization, project.project, keyId)) return null
    const { rows } = await this.run<KeyRow>(this.sql.getKey, [project.organization, project.project, keyId])
    return rows.length === 0 ? null : toKey(rows[0])
  }

  async createKey (key: NewApiKey): Promise<ApiKeyRecord> {
    try {
      const { rows } = await this.run<KeyRow>(this.sql.insertKey,
        [randomUUID(), key.organization, key.project, key.prefix, key.hash, key.purpose, key.isActive])
      return toKey(rows[0])
    } catch (err) {
      if (isPrefixTaken(err)) throw new PrefixTakenError()
      throw err
    }
  }

  async updateKey (project: ProjectRef, keyId: string, patch: ApiKeyPatch): Promise<ApiKeyRecord | null> {
    if (hasNul(project.organization, project.project, keyId)) return null
    const { rows } = await this.run<KeyRow>(this.sql.updateKey,
      [project.organization, project.project, keyId, patch.purpose ?? null, patch.isActive ?? null])
    return rows.length === 0 ? null : toKey(rows[0])
  }

  async replaceKeySecret (project: ProjectRef, keyId: string, secret: { prefix: string, hash: string }): Promise<ApiKeyRecord | null> {
    if (hasNul(project.organization, project.project, keyId)) return null
    try {
      const { rows } = await this.run<KeyRow>(this.sql.setSecret,
        [project.organization, project.project, keyId, secret.prefix, secret.hash])
      return rows.length === 0 ? null : toKey(rows[0])
    } catch (err) {
      if (isPrefixTaken(err)) throw new PrefixTakenError()
      throw err
    }
  }

  async deleteKey (project: ProjectRef, keyId: string): Promise<boolean> {
    if (hasNul(project.organization, project.project, keyId)) return false
    return (await this.run(this.sql.deleteKey, [project.organization, project.project, keyId])).rowCount === 1
  }

  async listEndpoints (project: ProjectRef): Promise<EndpointRecord[]> {
    if (hasNul(project.organization, project.project)) return []
    return (await this.run<EndpointRow>(this.sql.listEndpoints, [project.organization, project.project])).rows.map(toEndpoint)
  }

  async getEndpoint (locator: EndpointLocator): Promise<EndpointRecord | null> {
    if (hasNul(locator.organization, locator.project, locator.type)) return null
    const { rows } = await this.run<EndpointRow>(this.sql.getEndpoint, locatorParams(locator))
    return rows.length === 0 ? null : toEndpoint(rows[0])
  }

  async putEndpoint (locator: EndpointLocator, keyIds: string[]): Promise<PutEndpointResult> {
    await this.migrate()
    // An id with NUL is no key's: reported unknown below, never sent.
    const wanted = [...new Set(keyIds)].filter((id) => !hasNul(id))
    const where = locatorParams(locator)
    return this.transaction(async (client): Promise<PutEndpointResult> => {
      const { rows: known } = await this.query<{ id: string }>(client, this.sql.projectKeys,
        [locator.organization, locator.project, wanted])
      const knownIds = new Set(known.map((r) => r.id))
      const unknownKeyIds = keyIds.filter((id) => !knownIds.has(id))
      if (unknownKeyIds.length > 0) return { ok: false, unknownKeyIds }

      // Lock the endpoint, or create it. If another instance creates it at
      // the same moment, the insert does nothing and the second look locks theirs.
      let endpointId = (await this.query<{ id: string }>(client, this.sql.lockEndpoint, where)).rows[0]?.id
      let created = false
      if (endpointId === undefined) {
        endpointId = (await this.query<{ id: string }>(client, this.sql.insertEndpoint, [...where, randomUUID()])).rows[0]?.id
        created = endpointId !== undefined
        endpointId ??= (await this.query<{ id: string }>(client, this.sql.lockEndpoint, where)).rows[0]?.id
      }
      if (endpointId === undefined) throw new Error('endpoint deleted while its keys were being assigned')
      if (!created) await this.query(client, this.sql.clearAssignments, [endpointId])
      await this.query(client, this.sql.assign, [endpointId, wanted])
      const { rows } = await this.query<EndpointRow>(client, this.sql.getEndpoint, where)
      return { ok: true, created, endpoint: toEndpoint(rows[0]) }
    })
  }

  async deleteEndpoint (locator: EndpointLocator): Promise<boolean> {
    if (hasNul(locator.organization, locator.project, locator.type)) return false
    return (await this.run(this.sql.deleteEndpoint, locatorParams(locator))).rowCount === 1
  }

  async claimIdempotencyKey (endpointId: string, key: string, ttlMs: number, token: string): Promise<IdempotencyClaim> {
    await this.migrate()
    if (Date.now() - this.lastPurge >= PURGE_INTERVAL_MS) {
      this.lastPurge = Date.now()
      await this.query(this.pool, this.sql.purgeIdempotency, [ttlMs])
    }
    // The insert decides alone, atomically, who owns the key. If the record
    // it met is gone (released or expired) by the time it is read, try again.
    for (;;) {
      const claim = await this.query(this.pool, this.sql.claimIdempotency, [endpointId, key, ttlMs, token])
      if (claim.rowCount === 1) return { claimed: true }
      const { rows } = await this.query<{ response: string | null }>(this.pool, this.sql.getIdempotency, [endpointId, key, ttlMs])
      if (rows.length === 1) return { claimed: false, response: rows[0].response }
    }
  }

  async completeIdempotencyKey (endpointId: string, key: string, response: string): Promise<void> {
    await this.run(this.sql.completeIdempotency, [endpointId, key, response])
  }

  async releaseIdempotencyKey (endpointId: string, key: string, token: string): Promise<boolean> {
    return (await this.run(this.sql.releaseIdempotency, [endpointId, key, token])).rowCount === 1
  }

  /** Ends the pool PgStorage made (a pool passed in stays open). Safe to call twice. */
  async close (): Promise<void> {
    if (this.closed) return
    this.closed = true
    if (this.ownPool) await this.pool.end()
  }
}
