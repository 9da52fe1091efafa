import { createHash, randomUUID } from 'node:crypto'
import { createRequire } from 'node:module'
import { setImmediate } from 'node:timers/promises'
import type pg from 'pg'
import {
  PrefixTakenError,
  type ApiKeyPatch, type ApiKeyRecord, type EndpointKeyLookup, type EndpointKeySummary, type EndpointLocator,
  type EndpointRecord, type IdempotencyClaim, type NewApiKey, type ProjectRef, type PutEndpointResult,
  type ResourceType, type Storage, type UsageBatch, type UsageColumns, type UsageCount, type UsageOutcome, type UsageQuery, type UsageRow,
  type AuditAction, type AuditChange, type AuditContext, type AuditEntry, type AuditQuery, type IdempotencyScope, type BeforeCommit,
  InvalidCursorError, MAX_ENDPOINT_KEYS, type EndpointKeyResult, type EndpointListQuery, type ListPage, type ListQuery,
  NO_LIMITS, limitsOrNull, type DownloadSlot, type KeyLimits,
  type LinkListQuery, type LinkRecord, type LinkSecret, type LinkUse, type NewLink
} from './storage.js'
import { decodeCursor, encodeCursor, foldSearch } from './list-cursor.js'
import { keyChanges, keyIdChanges, linkChanges } from './audit-changes.js'
import { endpointPath } from './endpoint-path.js'
import { dailyCounts } from './usage-buckets.js'
import { migrationsFor } from './migrations.js'
import { LINK_SECRETS_TABLE, LINKS_TABLE } from './link-tables.js'
import { fromRow, insertSql, toColumns } from './table-list.js'
import { UsageInDoubtError, type UsageFate } from './usage-in-doubt.js'
import { HeldConnection } from './held-connection.js'
import { LookupBatch } from './lookup-batch.js'
import { LookupMemo } from './lookup-memo.js'
import { queryRow, type TextRow } from './row-statement.js'
import { mergeSeriesColumns } from './usage-series.js'
import { usageColumns, usageColumnsOf, usageRowsOf } from './usage-columns.js'

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
   * With `max` 4 or more, one connection is kept for key checks while they
   * come (given back after a second unused, and by `close()`).
   */
  pool?: pg.Pool
  /** where PostgreSQL is, e.g. postgres://user:password@host:5432/database; default: the PG* environment */
  connectionString?: string
  /** connections in the pool PgStorage makes (from 4, one kept for key checks while they come); default 10 */
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
//
// Migrations 1 to 5 below were written by hand for this dialect and have
// shipped. From 6 on, a migration is added once, for both adapters, to
// SHARED_MIGRATIONS (migrations.ts): tables are described in a table list
// (table-list.ts) and this dialect's DDL is generated from it.
export const MIGRATIONS: readonly string[] = [
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
  'ALTER TABLE idempotency_keys ADD COLUMN claim_token text',
  // Key expiry, and the usage history (DESIGN.md §4.1): requests by hour and
  // by UTC day, per endpoint, key ('' for none, so that the primary key
  // holds) and outcome. An endpoint's history goes with it; a deleted key's stays.
  `ALTER TABLE api_keys ADD COLUMN expires_at timestamptz;
   CREATE TABLE usage_hourly (
     endpoint_id text NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
     start timestamptz NOT NULL,
     key_id text NOT NULL,
     outcome text NOT NULL,
     count bigint NOT NULL,
     PRIMARY KEY (endpoint_id, start, key_id, outcome)
   );
   CREATE INDEX usage_hourly_start ON usage_hourly (start);
   CREATE TABLE usage_daily (
     endpoint_id text NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
     start timestamptz NOT NULL,
     key_id text NOT NULL,
     outcome text NOT NULL,
     count bigint NOT NULL,
     PRIMARY KEY (endpoint_id, start, key_id, outcome)
   );
   CREATE INDEX usage_daily_start ON usage_daily (start);`,
  // The audit log of management changes (DESIGN.md §4.1), and Idempotency-Key
  // records per API key. Records from before hold for their whole endpoint
  // (key_id '') until they expire, so a retry across the upgrade is still answered.
  `CREATE TABLE audit_log (
     id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
     organization text NOT NULL,
     project text NOT NULL,
     at timestamptz NOT NULL,
     actor text,
     action text NOT NULL,
     key_id text,
     endpoint_id text,
     target text NOT NULL,
     changes jsonb NOT NULL
   );
   CREATE INDEX audit_log_project ON audit_log (organization, project, id);
   CREATE INDEX audit_log_at ON audit_log (at);
   ALTER TABLE idempotency_keys ADD COLUMN key_id text NOT NULL DEFAULT '';
   ALTER TABLE idempotency_keys ALTER COLUMN key_id DROP DEFAULT;
   ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
   ALTER TABLE idempotency_keys ADD PRIMARY KEY (endpoint_id, key_id, idempotency_key);`,
  // One key's history without reading every key's (test/bench/usage-query.ts).
  `CREATE INDEX usage_hourly_key ON usage_hourly (key_id, endpoint_id, start);
   CREATE INDEX usage_daily_key ON usage_daily (key_id, endpoint_id, start);`,
  ...migrationsFor('pg')
]

// A key cursor's creation time, as listKeysPage writes it (to the microsecond).
const CURSOR_TIME = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.\d{6}Z$/

/** Whether `text` is a time as listKeysPage writes them, and a real one: PostgreSQL refuses 2030-02-30. */
function isCursorTime (text: string): boolean {
  const parts = CURSOR_TIME.exec(text)?.slice(1).map(Number)
  if (parts === undefined) return false
  const [year, month, day, hour, minute, second] = parts
  const at = new Date(Date.UTC(year, month - 1, day, hour, minute, second))
  return at.getUTCFullYear() === year && at.getUTCMonth() === month - 1 && at.getUTCDate() === day &&
    at.getUTCHours() === hour && at.getUTCMinutes() === minute && at.getUTCSeconds() === second
}
// First key of the two-key advisory lock taken while migrating; the second is the schema's hash.
const MIGRATION_LOCK = 0x46444521
// First key of the advisory lock a key's deletion takes on each endpoint it leaves; the second is the endpoint id's hash.
const ASSIGNMENTS_LOCK = 0x46444522
// Expired idempotency records are deleted at most this often per instance.
const PURGE_INTERVAL_MS = 60_000
// The names that mean the same schema quoted (as here) and unquoted (as a DBA
// types them; PostgreSQL folds those to lower case). pg_ is reserved by PostgreSQL.
const SCHEMA_NAME = /^(?!pg_)[a-z_][a-z0-9_]{0,62}$/

/** The smallest pool that gives lookups a connection of their own (HeldConnection). */
const HELD_LOOKUP_POOL = 4
/** Most findEndpointKey lookups answered by one query. */
const LOOKUP_BATCH = 64
/**
 * How long the lookup memo's reading (one snapshot of the database) is
 * checked against the change log, from the sending of the lookup that took
 * it; then the next lookups read everything again.
 */
const MEMO_GENERATION_MS = 60_000
/**
 * The change log is pruned at most this often per instance, of the
 * transactions every snapshot at least this old saw: every memo's
 * snapshot is younger (MEMO_GENERATION_MS), so none of them needs those rows.
 */
const CHANGE_LOG_PRUNE_MS = 10 * 60_000

/** The snapshot the lookup memo's answers were read in, and the batch that read it. */
interface MemoGeneration { snapshot: string, sentAt: number, batch: number }

interface Lookup { locator: EndpointLocator, prefix: string | null }

// A lookup's answer, as one JSON array a lookup (lookup_answers, migrations.ts): its
// number, the endpoint, then the key (null when the prefix names no key of
// the endpoint), its expiry as epoch milliseconds (no Date parsed per
// request). The limits ride on the lookup (DESIGN.md §4.3); a key with a
// bytesPerDay limit reads its bytes of the UTC day too, a key without one
// nothing more.
type LookupAnswer = [i: number, endpointId: string, keyId: string | null, hash: string | null, isActive: boolean | null, expiresMs: number | string | null,
  requestsPerMinute: number | null, concurrentDownloads: number | null, bytesPerDay: number | null, bytesToday: number | null]
/**
 * The key's bytes of the UTC day, in the schema's usage_daily (a column of a link's use). The key
 * check reads the same in lookup_answers, a migration's function whose text stays as it shipped.
 */
const lookupBytesToday = (usageDaily: string): string =>
  `CASE WHEN k.bytes_per_day IS NOT NULL THEN (SELECT COALESCE(sum(u.bytes), 0) FROM ${usageDaily} u
     WHERE u.key_id = k.id AND u.start = date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') END`

/** The one row of a batch of lookups. */
interface LookupBatchRow {
  /** whether anything a lookup reads changed since the memo's snapshot */
  changed: boolean
  /** the statement's snapshot, when `changed` */
  snapshot: string | null
  /** null when the memo answers every lookup; else one answer for each lookup that found its endpoint */
  answers: LookupAnswer[] | null
}

/** The lookup statement's row, from the text of its three columns (RowStatement). */
function lookupBatchRow (row: TextRow | undefined): LookupBatchRow {
  if (row === undefined) throw new Error('The lookup statement answered no row')
  const [changed, snapshot, answers] = row
  return { changed: changed === 't', snapshot, answers: answers === null ? null : JSON.parse(answers) as LookupAnswer[] }
}

/** A key's limits from its three columns (bigint text): null when it has none. */
function limitsOf (row: { requests_per_minute: string | null, concurrent_downloads: string | null, bytes_per_day: string | null }): KeyLimits | null {
  return limitsOrNull(integerOrNull(row.requests_per_minute), integerOrNull(row.concurrent_downloads), integerOrNull(row.bytes_per_day))
}

function toLookup ([, endpointId, keyId, hash, isActive, expiresAt, requestsPerMinute, concurrentDownloads, bytesPerDay, bytesToday]: LookupAnswer): EndpointKeyLookup {
  if (keyId === null) return { endpointId, key: null }
  const limits = limitsOrNull(requestsPerMinute, concurrentDownloads, bytesPerDay)
  // JSON has no infinity: PostgreSQL writes an expiry of 'infinity' as the text "Infinity".
  const expires = typeof expiresAt === 'string' ? Number(expiresAt) : expiresAt
  return { endpointId, key: { id: keyId, hash: hash as string, isActive: isActive as boolean, expiresAt: expires, limits, bytesToday: bytesToday ?? 0 } }
}

interface KeyRow {
  id: string
  organization: string
  project: string
  prefix: string
  purpose: string
  is_active: boolean
  created_at: Date
  updated_at: Date | null
  expires_at: Date | null
  requests_per_minute: string | null
  concurrent_downloads: string | null
  bytes_per_day: string | null
}

/** A bigint column (text, from pg) as a number; every value here stays below 2^53. */
function integerOrNull (value: string | null): number | null {
  return value === null ? null : Number(value)
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
    updatedAt: row.updated_at,
    expiresAt: row.expires_at,
    limits: {
      requestsPerMinute: integerOrNull(row.requests_per_minute),
      concurrentDownloads: integerOrNull(row.concurrent_downloads),
      bytesPerDay: integerOrNull(row.bytes_per_day)
    }
  }
}

/** A batch's counts as the columns of one unnest(): the rows of one upsert, in a stable order. */
function countColumns (counts: UsageCount[]): unknown[] {
  const sorted = [...counts].sort((a, b) => a.hour - b.hour || (a.endpointId < b.endpointId ? -1 : a.endpointId > b.endpointId ? 1 : 0))
  return [
    sorted.map((c) => c.endpointId),
    sorted.map((c) => new Date(c.hour).toISOString()),
    sorted.map((c) => c.keyId ?? ''),
    sorted.map((c) => c.outcome),
    sorted.map((c) => c.count),
    sorted.map((c) => c.bytes ?? 0)
  ]
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

/** Tries of claimDownloadSlot when other instances take the free slot it found first. */
const CLAIM_ATTEMPTS = 5

function limitColumns (l: KeyLimits): [number | null, number | null, number | null] {
  return [l.requestsPerMinute, l.concurrentDownloads, l.bytesPerDay]
}

function locatorParams (l: EndpointLocator): [string, string, number, string, number] {
  return [l.organization, l.project, l.modelSequence, l.type, l.resourceSequence]
}

// PostgreSQL text cannot hold NUL (U+0000), and a query that sends one fails.
// No stored id, moniker or prefix has one, so a lookup by such a value finds
// nothing, as it would on SQLite; writes of such a value still fail.
interface LinkUseRow {
  revoked_at: Date | null
  key_prefix: string
  key_id: string
  prefix: string
  is_active: boolean
  expires_at: Date | null
  endpoint_id: string | null
  organization: string | null
  project: string | null
  model_sequence: string | null
  type: ResourceType | null
  resource_sequence: string | null
  assigned: boolean
  requests_per_minute: string | null
  concurrent_downloads: string | null
  bytes_per_day: string | null
  bytes_today: string | null
}

function toLink (row: Record<string, unknown>): LinkRecord {
  const { keyPrefix, ...link } = fromRow(LINKS_TABLE, 'pg', row)
  return link as unknown as LinkRecord
}

/** A row of the usage series statement. */
interface SeriesRow { endpoint_id: string, key_id: string, outcome: UsageOutcome, n: number, points: string }

function bucketsIn (series: readonly SeriesRow[]): number {
  return series.reduce((sum, s) => sum + s.n, 0)
}

/**
 * Series as the usage history's columns, read with turns of the event loop.
 * Read as each row came (in pg's 'row' events), the texts died sooner, but
 * their reading ran inside the socket's read, which hands over a megabyte at
 * once: 12-15 ms of CPU without a turn against 7-8 (docs/benchmarks.md).
 */
function mergeUsageSeries (series: readonly SeriesRow[], limit: number): Promise<UsageColumns> {
  return mergeSeriesColumns(series.map((r) => ({ endpointId: r.endpoint_id, keyId: r.key_id, outcome: r.outcome, points: r.points })), limit)
}

function hasNul (...values: string[]): boolean {
  return values.some((v) => v.includes('\u0000'))
}

/**
 * Text PostgreSQL can hold, so that a stored value may equal it: no NUL, and
 * no lone surrogate (which its JSON reading refuses, failing every lookup
 * of a batch).
 */
function isStorableText (...values: string[]): boolean {
  // isWellFormed: Node 20 has it; TypeScript's ES2023 library does not name it.
  return !hasNul(...values) && values.every((v) => (v as string & { isWellFormed: () => boolean }).isWellFormed())
}

/** Whether a usage query names text no stored row holds (a NUL): it matches nothing. */
function matchesNoUsage (project: ProjectRef, query: UsageQuery): boolean {
  return hasNul(project.organization, project.project, query.keyId ?? '', query.endpointId ?? '')
}

function isPrefixTaken (err: unknown): boolean {
  const e = err as { code?: string, constraint?: string }
  return e.code === '23505' && e.constraint === 'api_keys_prefix_key'
}

/** A write that names a row gone meanwhile (a key deleted since its lookup). */
function isForeignKeyViolation (err: unknown): boolean {
  return (err as { code?: string }).code === '23503'
}

/**
 * An error on the way to the server (refused, reset, timed out) becomes
 * "PostgreSQL unavailable: <reason>", whose reason never names the host: the
 * plugin logs it with the 500 it answers (`Internal server error`). An answer
 * from the server (a constraint, a cancelled statement) is passed on as it is.
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
  private readonly t: (table: string) => string
  private readonly endpointSelect: string
  private readonly lookupName: string
  private migrated: Promise<void> | null = null
  /** whether `migrated` has resolved: the per-request lookup then skips a turn of the microtask queue */
  private isMigrated = false
  private readonly lookups = new LookupBatch<Lookup, EndpointKeyLookup | null>((lookups) => this.lookupBatch(lookups), LOOKUP_BATCH)
  /** recent findEndpointKey answers, as of the generation's snapshot */
  private readonly lookupMemo = new LookupMemo()
  private memoGeneration: MemoGeneration | null = null
  private lookupBatches = 0
  /** the connection lookup batches go on, one at a time (one of the pool's); null with a pool of fewer than HELD_LOOKUP_POOL */
  private readonly lookupConnection: HeldConnection | null
  /** the change log's last pruning, and the snapshot it took for the next one */
  private changeLogPruned = Date.now()
  private changeLogSnapshot: string | null = null
  private lastPurge = 0
  /** A usage series read runs beside its count (queryUsageWithinLimit): one at a time. */
  private readingAhead = false
  private closed = false
  private readonly ignoreIdleError = (): void => {}

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
    // the process. (Taken off again by close(), for a pool that stays the caller's.)
    this.pool.on('error', this.ignoreIdleError)
    // A small pool keeps every connection for the other queries: a transaction may need a second one.
    const poolMax = (this.pool as { options?: { max?: number } }).options?.max ?? 10
    this.lookupConnection = poolMax >= HELD_LOOKUP_POOL ? new HeldConnection(this.pool, unavailable) : null

    const t = (table: string): string => `"${this.schema}".${table}`
    const keyColumns = 'id, organization, project, prefix, purpose, is_active, created_at, updated_at, expires_at, ' +
      'requests_per_minute, concurrent_downloads, bytes_per_day'
    // A count for an endpoint deleted since the request is dropped, as its calls are.
    const addUsage = (table: string): string =>
      `INSERT INTO ${t(table)} AS u (endpoint_id, start, key_id, outcome, count, bytes)
       SELECT v.endpoint_id, v.start, v.key_id, v.outcome, v.count, v.bytes
         FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::bigint[], $6::bigint[])
              AS v (endpoint_id, start, key_id, outcome, count, bytes)
         JOIN ${t('endpoints')} e ON e.id = v.endpoint_id
        WHERE v.count > 0 OR v.bytes > 0
       ON CONFLICT (endpoint_id, start, key_id, outcome) DO UPDATE SET count = u.count + EXCLUDED.count, bytes = u.bytes + EXCLUDED.bytes`
    // $1, $2: the project; $3: an endpoint id or null; [$4, $5): the range; $6: a key id or null.
    const usageFrom = (table: string): string =>
      `FROM ${t('endpoints')} e JOIN ${t(table)} u ON u.endpoint_id = e.id
        WHERE e.organization = $1 AND e.project = $2 AND ($3::text IS NULL OR e.id = $3)
          AND u.start >= $4 AND u.start < $5 AND ($6::text IS NULL OR u.key_id = $6)`
    // How many buckets, counted no further than $7.
    const usageCount = (table: string): string => `SELECT count(*)::int AS n FROM (SELECT 1 ${usageFrom(table)} LIMIT $7) x`
    // One row per endpoint, key and outcome, its buckets as text in no order
    // (UsageSeries): no sort on the server; merged by start in JS, with turns
    // of the event loop. Bucket starts are whole hours: seconds hold them.
    // Of the range's first $7 buckets as they come: when they are all of it
    // (the counts add up to less than $7), one read answers the query.
    const usageSeries = (table: string): string =>
      `SELECT endpoint_id, key_id, outcome, count(*)::int AS n,
              string_agg(date_part('epoch', start)::bigint || ':' || count || ':' || bytes, ',') AS points
         FROM (SELECT u.endpoint_id, u.key_id, u.outcome, u.start, u.count, u.bytes ${usageFrom(table)} LIMIT $7) u
        GROUP BY endpoint_id, key_id, outcome`
    // The first $7 buckets in order, for a range that holds more than that.
    const usageOrdered = (table: string): string =>
      // The start as epoch milliseconds: the driver would parse every row's
      // timestamptz text into a Date of its own, the most of a long answer's time.
      `SELECT (extract(epoch FROM u.start) * 1000)::float8 AS start_ms, u.endpoint_id, u.key_id, u.outcome, u.count, u.bytes
         ${usageFrom(table)}
        ORDER BY u.start, u.endpoint_id COLLATE "C", u.key_id COLLATE "C", u.outcome COLLATE "C"
        LIMIT $7`
    const locatorMatch = 'e.organization = $1 AND e.project = $2 AND e.model_sequence = $3 AND e.type = $4 AND e.resource_sequence = $5'
    const endpointSelect = `SELECT e.id, e.organization, e.project, e.model_sequence, e.type, e.resource_sequence, e.calls, e.created_at,
        COALESCE((SELECT json_agg(json_build_object('id', k.id, 'prefix', k.prefix, 'purpose', k.purpose, 'isActive', k.is_active)
                                  ORDER BY k.created_at, k.id)
                    FROM ${t('endpoint_keys')} ek JOIN ${t('api_keys')} k ON k.id = ek.key_id
                   WHERE ek.endpoint_id = e.id), '[]') AS keys
       FROM ${t('endpoints')} e`
    this.t = t
    this.endpointSelect = endpointSelect
    this.sql = {
      // Many requests' key checks in one round trip (LookupBatch), in one
      // row: first, whether any transaction that the memo's snapshot ($3)
      // did not see has since changed what a lookup reads (lookup_changes,
      // written by triggers). If so, or if the memo cannot answer one of the
      // lookups ($2), every lookup of the batch ($1, JSON text) is read. A
      // batch the memo answers costs the database one index probe. The
      // reading is a function (lookup_answers, migrations.ts), set up only
      // when called: inline, its joins were set up on every execution, taken
      // or not. (One reading, not a second for the lookups the memo lacks.)
      // Each lookup whose endpoint exists gets one array: [i, endpoint id,
      // then the key (null when the prefix names no key of the endpoint)...]
      // (LookupAnswer); the key is joined only through its assignment.
      lookup: `WITH c AS (
                 SELECT pg_current_snapshot() AS snapshot,
                        $3::text IS NULL OR EXISTS (SELECT 1 FROM ${t('lookup_changes')}
                          WHERE xid >= pg_snapshot_xmin($3::text::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, $3::text::pg_snapshot)) AS changed)
               SELECT c.changed, CASE WHEN c.changed THEN c.snapshot::text END AS snapshot,
                      CASE WHEN c.changed OR $2::boolean THEN ${t('lookup_answers')}($1::text) END AS answers
                 FROM c`,
      // The change log's rows of transactions that a snapshot at least
      // CHANGE_LOG_PRUNE_MS old saw ($1, null for none yet), and a snapshot for the next time.
      pruneChangeLog: `WITH gone AS (DELETE FROM ${t('lookup_changes')} WHERE xid < pg_snapshot_xmin($1::pg_snapshot))
                       SELECT pg_current_snapshot()::text AS snapshot`,
      // Rows are locked in id order, so that two instances flushing at once cannot deadlock.
      lockEndpoints: `SELECT 1 FROM ${t('endpoints')} WHERE id = ANY ($1::text[]) ORDER BY id FOR NO KEY UPDATE`,
      addCalls: `UPDATE ${t('endpoints')} e SET calls = e.calls + u.n
                   FROM unnest($1::text[], $2::bigint[]) AS u (id, n) WHERE e.id = u.id`,
      lockKeys: `SELECT 1 FROM ${t('api_keys')} WHERE id = ANY ($1::text[]) ORDER BY id FOR NO KEY UPDATE`,
      touchKeys: `UPDATE ${t('api_keys')} k SET updated_at = GREATEST(k.updated_at, u.at)
                    FROM unnest($1::text[], $2::timestamptz[]) AS u (id, at) WHERE k.id = u.id`,
      addHourly: addUsage('usage_hourly'),
      addDaily: addUsage('usage_daily'),
      usageCount: { hour: usageCount('usage_hourly'), day: usageCount('usage_daily') },
      usageSeries: { hour: usageSeries('usage_hourly'), day: usageSeries('usage_daily') },
      usageOrdered: { hour: usageOrdered('usage_hourly'), day: usageOrdered('usage_daily') },
      pruneUsage: `WITH h AS (DELETE FROM ${t('usage_hourly')} WHERE start < $1 RETURNING 1),
                        d AS (DELETE FROM ${t('usage_daily')} WHERE start < $1 RETURNING 1)
                   SELECT (SELECT count(*) FROM h) + (SELECT count(*) FROM d) AS n`,
      listKeys: `SELECT ${keyColumns} FROM ${t('api_keys')} WHERE organization = $1 AND project = $2 ORDER BY created_at, id`,
      getKey: `SELECT ${keyColumns} FROM ${t('api_keys')} WHERE organization = $1 AND project = $2 AND id = $3`,
      insertKey: `INSERT INTO ${t('api_keys')} (id, organization, project, prefix, hash, purpose, is_active, created_at, expires_at,
                                                requests_per_minute, concurrent_downloads, bytes_per_day)
                  VALUES ($1, $2, $3, $4, $5, $6, $7, now(), $8, $9, $10, $11) RETURNING ${keyColumns}`,
      setLimits: `UPDATE ${t('api_keys')} SET requests_per_minute = $4, concurrent_downloads = $5, bytes_per_day = $6
                   WHERE organization = $1 AND project = $2 AND id = $3 RETURNING ${keyColumns}`,
      // One row per key: a later minute starts again at 1; a full one refuses (no row back).
      takeRequest: `INSERT INTO ${t('key_request_windows')} AS w (key_id, window_start, count) VALUES ($1, $2, 1)
                    ON CONFLICT (key_id) DO UPDATE
                      SET count = CASE WHEN w.window_start < EXCLUDED.window_start THEN 1 ELSE w.count + 1 END,
                          window_start = GREATEST(w.window_start, EXCLUDED.window_start)
                    WHERE w.window_start < EXCLUDED.window_start OR w.count < $3
                    RETURNING count`,
      // The lowest slot free in this statement's snapshot, taken unless a
      // live lease took it meanwhile (the conflict's WHERE reads the latest
      // row): \`candidate\` null means all were held; \`slot\` null with a
      // candidate, that another instance was quicker (try again).
      claimSlot: `WITH candidate AS (
                    -- Among the first n + 1 numbers (n: the key's rows) one is free unless n >= limit:
                    -- the series stays short whatever the limit.
                    SELECT s FROM generate_series(0::bigint, LEAST($2::bigint, (SELECT count(*) FROM ${t('download_slots')} c WHERE c.key_id = $1) + 1) - 1) AS s
                     WHERE NOT EXISTS (SELECT 1 FROM ${t('download_slots')} h WHERE h.key_id = $1 AND h.slot = s AND h.expires_at > $4)
                     ORDER BY s LIMIT 1),
                  taken AS (
                    INSERT INTO ${t('download_slots')} AS d (key_id, slot, lease_id, expires_at)
                    SELECT $1, s, $3, $5 FROM candidate
                    ON CONFLICT (key_id, slot) DO UPDATE SET lease_id = EXCLUDED.lease_id, expires_at = EXCLUDED.expires_at
                     WHERE d.expires_at <= $4
                    RETURNING slot)
                  SELECT (SELECT s FROM candidate) AS candidate, (SELECT slot FROM taken) AS slot`,
      renewSlots: `UPDATE ${t('download_slots')} d SET expires_at = $1
                     FROM unnest($2::text[], $3::bigint[], $4::text[]) AS u (key_id, slot, lease_id)
                    WHERE d.key_id = u.key_id AND d.slot = u.slot AND d.lease_id = u.lease_id`,
      releaseSlot: `DELETE FROM ${t('download_slots')} WHERE key_id = $1 AND slot = $2 AND lease_id = $3`,
      // $6: whether the patch sets the expiry ($7, which may be null).
      updateKey: `UPDATE ${t('api_keys')} SET purpose = COALESCE($4, purpose), is_active = COALESCE($5, is_active),
                         expires_at = CASE WHEN $6 THEN $7::timestamptz ELSE expires_at END
                   WHERE organization = $1 AND project = $2 AND id = $3 RETURNING ${keyColumns}`,
      setSecret: `UPDATE ${t('api_keys')} SET prefix = $4, hash = $5
                   WHERE organization = $1 AND project = $2 AND id = $3 RETURNING ${keyColumns}`,
      lockKey: `SELECT ${keyColumns} FROM ${t('api_keys')} WHERE organization = $1 AND project = $2 AND id = $3 FOR UPDATE`,
      deleteKey: `DELETE FROM ${t('api_keys')} WHERE organization = $1 AND project = $2 AND id = $3`,
      insertAudit: `INSERT INTO ${t('audit_log')} (organization, project, at, actor, action, key_id, endpoint_id, target, changes)
                    VALUES ($1, $2, now(), $3, $4, $5, $6, $7, $8::jsonb)`,
      // ORDER BY names the table's column: a bare `id` would be the text alias,
      // and '99' sorts after '100'.
      listAudit: `SELECT a.id::text AS id, a.at, a.actor, a.action, a.key_id, a.endpoint_id, a.target, a.changes FROM ${t('audit_log')} a
                   WHERE a.organization = $1 AND a.project = $2 AND ($3::bigint IS NULL OR a.id < $3::bigint) ORDER BY a.id DESC LIMIT $4`,
      pruneAudit: `DELETE FROM ${t('audit_log')} WHERE at < $1`,
      endpointKeyIds: `SELECT key_id FROM ${t('endpoint_keys')} WHERE endpoint_id = $1`,
      lockKeyEndpoints: `SELECT e.id, e.organization, e.project, e.model_sequence, e.type, e.resource_sequence, e.calls, e.created_at, '[]'::json AS keys
                           FROM ${t('endpoints')} e
                          WHERE e.id IN (SELECT endpoint_id FROM ${t('endpoint_keys')} WHERE key_id = $1) AND e.organization = $2 AND e.project = $3
                          ORDER BY e.id FOR KEY SHARE`,
      listEndpoints: `${endpointSelect} WHERE e.organization = $1 AND e.project = $2
                       ORDER BY e.model_sequence, e.type, e.resource_sequence`,
      getEndpoint: `${endpointSelect} WHERE ${locatorMatch}`,
      // KEY SHARE keeps the keys from being deleted until the assignment is
      // written, without waiting for a usage flush that touches updated_at.
      projectKeys: `SELECT id FROM ${t('api_keys')} WHERE organization = $1 AND project = $2 AND id = ANY ($3::text[])
                    FOR KEY SHARE`,
      unassign: `DELETE FROM ${t('endpoint_keys')} WHERE endpoint_id = $1 AND key_id = $2`,
      lockEndpoint: `SELECT e.id FROM ${t('endpoints')} e WHERE ${locatorMatch} FOR UPDATE`,
      insertEndpoint: `INSERT INTO ${t('endpoints')} (id, organization, project, model_sequence, type, resource_sequence, created_at)
                       VALUES ($6, $1, $2, $3, $4, $5, now()) ON CONFLICT DO NOTHING RETURNING id`,
      clearAssignments: `DELETE FROM ${t('endpoint_keys')} WHERE endpoint_id = $1`,
      assign: `INSERT INTO ${t('endpoint_keys')} (endpoint_id, key_id) SELECT $1, unnest($2::text[])`,
      deleteEndpoint: `DELETE FROM ${t('endpoints')} e WHERE ${locatorMatch}`,
      // A live record wins; an expired one (older than the ttl) is taken over.
      claimIdempotency: `INSERT INTO ${t('idempotency_keys')} AS i (endpoint_id, key_id, idempotency_key, response, created_at, claim_token)
                         VALUES ($1, $2, $3, NULL, now(), $5)
                         ON CONFLICT (endpoint_id, key_id, idempotency_key) DO UPDATE
                         SET response = NULL, created_at = now(), claim_token = EXCLUDED.claim_token
                          WHERE i.created_at < now() - $4::float8 * interval '1 millisecond'
                         RETURNING 1`,
      // $2 '': a record from before records were per key, which holds for its whole endpoint.
      getIdempotency: `SELECT response FROM ${t('idempotency_keys')}
                        WHERE endpoint_id = $1 AND key_id = $2 AND idempotency_key = $3
                          AND created_at >= now() - $4::float8 * interval '1 millisecond'`,
      purgeIdempotency: `DELETE FROM ${t('idempotency_keys')} WHERE created_at < now() - $1::float8 * interval '1 millisecond'`,
      pruneIdempotency: `DELETE FROM ${t('idempotency_keys')} WHERE created_at < $1`,
      completeIdempotency: `UPDATE ${t('idempotency_keys')} SET response = $4 WHERE endpoint_id = $1 AND key_id = $2 AND idempotency_key = $3`,
      insertLink: insertSql(LINKS_TABLE, 'pg', t('links')),
      getLink: `SELECT l.* FROM ${t('links')} l JOIN ${t('api_keys')} k ON k.id = l.key_id
                 WHERE l.id = $1 AND k.organization = $2 AND k.project = $3`,
      // Every use of a link: its state, its key's and its endpoint's, in one read.
      linkUse: `SELECT l.revoked_at, l.key_prefix, k.id AS key_id, k.prefix, k.is_active, k.expires_at,
                       e.id AS endpoint_id, e.organization, e.project, e.model_sequence, e.type, e.resource_sequence,
                       EXISTS (SELECT 1 FROM ${t('endpoint_keys')} ek WHERE ek.endpoint_id = l.endpoint_id AND ek.key_id = l.key_id) AS assigned,
                       k.requests_per_minute, k.concurrent_downloads, k.bytes_per_day, ${lookupBytesToday(t('usage_daily'))}
                  FROM ${t('links')} l JOIN ${t('api_keys')} k ON k.id = l.key_id LEFT JOIN ${t('endpoints')} e ON e.id = l.endpoint_id
                 WHERE l.id = $1`,
      listLinks: `SELECT l.* FROM ${t('links')} l JOIN ${t('api_keys')} k ON k.id = l.key_id
                   WHERE k.organization = $1 AND k.project = $2 AND ($3::text IS NULL OR l.key_id = $3)
                   ORDER BY l.created_at DESC, l.id DESC LIMIT $4`,
      revokeLink: `UPDATE ${t('links')} SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL RETURNING *`,
      pruneLinks: `DELETE FROM ${t('links')} WHERE expires_at < $1`,
      listLinkSecrets: `SELECT * FROM ${t('link_secrets')} ORDER BY created_at, id`,
      addLinkSecret: insertSql(LINK_SECRETS_TABLE, 'pg', t('link_secrets')) + ' ON CONFLICT (id) DO NOTHING',
      deleteLinkSecret: `DELETE FROM ${t('link_secrets')} WHERE id = $1`,
      releaseIdempotency: `DELETE FROM ${t('idempotency_keys')}
                            WHERE endpoint_id = $1 AND key_id = $2 AND idempotency_key = $3 AND claim_token = $4 AND response IS NULL`
    }
    // Named, so each connection parses and plans the per-request lookup once;
    // the schema is in the name because the text differs per schema.
    this.lookupName = 'fde_lookups_' + createHash('sha256').update(this.schema).digest('hex').slice(0, 16)
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
    }).then(() => { this.isMigrated = true }, (err: unknown) => {
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
    let result: { value: T } | undefined
    try {
      return await this.onConnection(async (client) => {
        await this.query(client, 'BEGIN')
        result = { value: await work(client) }
        await this.query(client, 'COMMIT')
        return result.value
      })
    } catch (err) {
      if (result !== undefined && committed !== undefined && await committed(result.value)) return result.value
      throw err
    }
  }

  /** Runs `work` on a connection of the pool's; a failure drops the connection (a transaction's rolls back). */
  private async onConnection<T> (work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect().catch((err: unknown) => { throw unavailable(err) })
    // An error on the socket between two queries must not crash the process;
    // the next query fails instead.
    const ignore = (): void => {}
    client.on('error', ignore)
    try {
      const value = await work(client)
      client.removeListener('error', ignore)
      client.release()
      return value
    } catch (err) {
      client.removeListener('error', ignore)
      client.release(err as Error)
      throw err
    }
  }

  findEndpointKey (locator: EndpointLocator, prefix: string | null): Promise<EndpointKeyLookup | null> {
    if (!isStorableText(locator.organization, locator.project, locator.type)) return Promise.resolve(null)
    // A prefix no stored text can equal is no key's: the endpoint alone, as for an unknown prefix.
    const lookup: Lookup = { locator, prefix: prefix !== null && !isStorableText(prefix) ? null : prefix }
    // Not an async function: on a request's path every promise and turn of the microtask queue counts.
    if (!this.isMigrated || this.closed) return this.migrate().then(() => this.lookups.lookup(lookup))
    return this.lookups.lookup(lookup)
  }

  /**
   * One query for a batch of findEndpointKey lookups (LookupBatch), answered
   * in their order. Lookups the memo answers are sent too, flagged: the
   * query reads them only if something changed since the memo's snapshot,
   * so a disable, delete or regenerate committed anywhere before the query
   * acts on this batch, in this one round trip. On a key's hot path the
   * database then reads one index entry, and the driver parses one row.
   */
  private async lookupBatch (lookups: Lookup[]): Promise<Array<EndpointKeyLookup | null>> {
    const sentAt = Date.now()
    const batch = ++this.lookupBatches
    let generation = this.memoGeneration
    if (generation !== null && sentAt - generation.sentAt >= MEMO_GENERATION_MS) generation = null
    const remembered = lookups.map((l) => generation === null ? undefined : this.lookupMemo.get(l.locator, l.prefix))
    const lookupsJson = JSON.stringify(lookups.map((l, i) => {
      const { organization, project, modelSequence, type, resourceSequence } = l.locator
      return [i, organization, project, modelSequence, type, resourceSequence, l.prefix]
    }))
    const { changed, snapshot, answers: read } = await this.lookupQuery([lookupsJson, String(remembered.includes(undefined)), generation?.snapshot ?? null])
    // In the background: no request waits for it.
    void this.pruneChangeLog()
    // Every lookup read (an empty list: none found its endpoint), or none.
    const answers: Array<EndpointKeyLookup | null> = remembered.map((r) => read === null ? r ?? null : null)
    if (read !== null) for (const answer of read) answers[answer[0]] = toLookup(answer)
    if (changed) {
      // A newer batch's snapshot, if one came back first, stays.
      const current = this.memoGeneration
      if (current !== null && current.batch > batch) return answers
      this.lookupMemo.clear()
      this.memoGeneration = { snapshot: snapshot as string, sentAt, batch }
    } else if (this.memoGeneration !== generation) {
      return answers
    }
    if (read === null) return answers
    // A key's bytes of the day change with every download: such a key is read every time.
    for (let i = 0; i < lookups.length; i++) {
      const found = answers[i]
      if ((changed || remembered[i] === undefined) && found?.key?.limits?.bytesPerDay == null) this.lookupMemo.set(lookups[i].locator, lookups[i].prefix, found)
    }
    return answers
  }

  /**
   * The lookup statement, on the connection held for it; a batch that comes
   * while another runs there (past LOOKUP_BATCH waiting lookups) goes through the pool.
   */
  private lookupQuery (values: Array<string | null>): Promise<LookupBatchRow> {
    const on = (client: pg.PoolClient): Promise<LookupBatchRow> => queryRow(client, this.lookupName, this.sql.lookup, values, this.queryTimeout)
      .then(lookupBatchRow, (err: unknown) => { throw unavailable(err) })
    const held = this.lookupConnection
    return held === null || held.busy || this.closed ? this.onConnection(on) : held.run(on)
  }

  /** Deletes change-log rows no memo can need any more, at most every CHANGE_LOG_PRUNE_MS; never rejects. */
  private async pruneChangeLog (): Promise<void> {
    if (Date.now() - this.changeLogPruned < CHANGE_LOG_PRUNE_MS) return
    this.changeLogPruned = Date.now()
    await this.query<{ snapshot: string }>(this.pool, this.sql.pruneChangeLog, [this.changeLogSnapshot])
      .then(({ rows }) => { this.changeLogSnapshot = rows[0].snapshot }, () => {})
  }

  async applyUsage (batch: UsageBatch): Promise<void> {
    if (batch.calls.size === 0 && batch.lastUsed.size === 0 && batch.counts.size === 0) return
    await this.migrate()
    const calls = [...batch.calls].sort(([a], [b]) => (a < b ? -1 : 1))
    const lastUsed = [...batch.lastUsed].sort(([a], [b]) => (a < b ? -1 : 1))
    const hourly = [...batch.counts.values()]
    // Every endpoint the batch writes to is locked first, in id order: two
    // instances flushing at once then take their turns instead of deadlocking.
    const endpointIds = [...new Set([...batch.calls.keys(), ...hourly.map((c) => c.endpointId)])].sort()
    await this.transaction(async (client) => {
      // Who this transaction is, to learn its fate should the COMMIT go unanswered.
      const session = (await this.query<Session>(client, 'SELECT txid_current()::text AS xid, pg_backend_pid() AS pid')).rows[0]
      if (endpointIds.length > 0) await this.query(client, this.sql.lockEndpoints, [endpointIds])
      if (calls.length > 0) {
        await this.query(client, this.sql.addCalls, [calls.map(([id]) => id), calls.map(([, n]) => n)])
      }
      if (hourly.length > 0) {
        await this.query(client, this.sql.addHourly, countColumns(hourly))
        await this.query(client, this.sql.addDaily, countColumns(dailyCounts(hourly)))
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

  async countUsage (project: ProjectRef, query: UsageQuery): Promise<number> {
    if (matchesNoUsage(project, query)) return 0
    const { rows } = await this.run<{ n: number }>(this.sql.usageCount[query.granularity], [...this.usageParams(project, query), query.limit])
    return rows[0].n
  }

  /**
   * A range within the limit is read in one go as series (reading no more
   * than the limit) and merged in JS (usage-series.ts); one over it is read
   * again, sorted, as far as the limit: only a caller that asks for fewer
   * rows than there are needs that (the usage route counts first).
   */
  async queryUsage (project: ProjectRef, query: UsageQuery): Promise<UsageRow[]> {
    return usageRowsOf(await this.queryUsageColumns(project, query))
  }

  async queryUsageColumns (project: ProjectRef, query: UsageQuery): Promise<UsageColumns> {
    if (matchesNoUsage(project, query)) return usageColumns(0)
    const params = this.usageParams(project, query)
    const series = await this.usageSeries(params, query)
    if (bucketsIn(series) <= query.limit) return mergeUsageSeries(series, query.limit)
    return usageColumnsOf(await this.orderedUsage(params, query))
  }

  /**
   * The count and the series read run at once, on two connections: a range
   * within the limit is answered when its read ends, the count's time
   * hidden behind it (a year of all keys by day: about 40 ms of 175 here,
   * docs/benchmarks.md), and one over it is refused when its count ends,
   * its read left to end unheard. That read stops at `limit + 1` buckets, so
   * it is bounded work, and only one runs at a time: while one does, a query
   * counts first and reads after, so a client that asks for ranges over the
   * cap in a loop cannot pile reads up on the database.
   */
  async queryUsageWithinLimit (project: ProjectRef, query: UsageQuery): Promise<UsageColumns | null> {
    if (matchesNoUsage(project, query)) return usageColumns(0)
    // Counted one further than the limit: more than it is over.
    const count = async (): Promise<number> => this.countUsage(project, { ...query, limit: query.limit + 1 })
    let series: SeriesRow[]
    if (this.readingAhead) {
      if (await count() > query.limit) return null
      series = await this.usageSeries(this.usageParams(project, query), query)
    } else {
      this.readingAhead = true
      const counting = count()
      const reading = this.usageSeriesInHalves(project, query).finally(() => { this.readingAhead = false })
      // Its failure matters only to a query that waits for it.
      reading.catch(() => {})
      if (await counting > query.limit) return null
      series = await reading
    }
    // Buckets written between the count and the read can take it over.
    return bucketsIn(series) <= query.limit ? mergeUsageSeries(series, query.limit) : null
  }

  /**
   * The series of the range's two halves (split at its middle instant), read
   * at once on two connections: PostgreSQL 15 runs one aggregate on one
   * core, so a long range is aggregated on two (a year of all keys by day:
   * 125 → 89 ms beside its count, docs/benchmarks.md). A name comes once per
   * half it has buckets in; the merge joins them. Each half reads at most
   * `limit + 1` buckets, so a range within the limit is read whole, and the
   * halves of one over it add up to more than the limit.
   */
  private async usageSeriesInHalves (project: ProjectRef, query: UsageQuery): Promise<SeriesRow[]> {
    const from = query.from.getTime()
    const middle = new Date(from + Math.floor((query.to.getTime() - from) / 2))
    if (middle.getTime() <= from) return this.usageSeries(this.usageParams(project, query), query)
    const [before, after] = await Promise.all([
      this.usageSeries(this.usageParams(project, { ...query, to: middle }), query),
      this.usageSeries(this.usageParams(project, { ...query, from: middle }), query)
    ])
    return before.concat(after)
  }

  /** The range's first `query.limit + 1` buckets as series (usage-series.ts): enough to tell whether it holds more than the limit. */
  private async usageSeries (params: unknown[], query: UsageQuery): Promise<SeriesRow[]> {
    return (await this.run<SeriesRow>(this.sql.usageSeries[query.granularity], [...params, query.limit + 1])).rows
  }

  /** The first `query.limit` buckets sorted by the database: for a range that holds more. */
  private async orderedUsage (params: unknown[], query: UsageQuery): Promise<UsageRow[]> {
    const { rows } = await this.run<{ start_ms: number, endpoint_id: string, key_id: string, outcome: UsageOutcome, count: string, bytes: string }>(
      this.sql.usageOrdered[query.granularity], [...params, query.limit])
    // Rows come by start: consecutive rows share one Date.
    let start = new Date(NaN)
    const answer: UsageRow[] = []
    for (const r of rows) {
      if (start.getTime() !== r.start_ms) start = new Date(r.start_ms)
      answer.push({ start, endpointId: r.endpoint_id, keyId: r.key_id === '' ? null : r.key_id, outcome: r.outcome, count: Number(r.count), bytes: Number(r.bytes) })
      if (answer.length % 4096 === 0) await setImmediate()
    }
    return answer
  }

  private usageParams (project: ProjectRef, query: UsageQuery): unknown[] {
    return [project.organization, project.project, query.endpointId ?? null, query.from, query.to, query.keyId ?? null]
  }

  async pruneUsage (before: Date): Promise<number> {
    const { rows } = await this.run<{ n: string }>(this.sql.pruneUsage, [before])
    return Number(rows[0].n)
  }

  async listKeys (project: ProjectRef): Promise<ApiKeyRecord[]> {
    if (hasNul(project.organization, project.project)) return []
    return (await this.run<KeyRow>(this.sql.listKeys, [project.organization, project.project])).rows.map(toKey)
  }

  async listKeysPage (project: ProjectRef, query: ListQuery): Promise<ListPage<ApiKeyRecord>> {
    // A cursor holds the creation time to the microsecond, as PostgreSQL keeps it.
    const after = query.after === undefined ? undefined : decodeCursor(query.after, ['string', 'string'])
    if (after !== undefined && !isCursorTime(after[0] as string)) throw new InvalidCursorError()
    if (hasNul(project.organization, project.project, query.search ?? '')) return { items: [], next: null }
    const params: unknown[] = [project.organization, project.project, query.limit + 1]
    const where = ['organization = $1', 'project = $2']
    if (after !== undefined) {
      params.push(after[0], after[1])
      where.push(`(created_at, id) > ($${params.length - 1}::timestamptz, $${params.length}::text)`)
    }
    if (query.search !== undefined) {
      params.push(foldSearch(query.search))
      where.push(`(strpos(lower(prefix COLLATE "C"), $${params.length}) > 0 OR strpos(lower(purpose COLLATE "C"), $${params.length}) > 0)`)
    }
    const { rows } = await this.run<KeyRow & { cursor_at: string }>(
      `SELECT id, organization, project, prefix, purpose, is_active, created_at, updated_at, expires_at, requests_per_minute, concurrent_downloads, bytes_per_day,
              to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS cursor_at
         FROM ${this.t('api_keys')} WHERE ${where.join(' AND ')} ORDER BY created_at, id LIMIT $3`, params)
    const last = rows.length > query.limit ? rows[query.limit - 1] : undefined
    return { items: rows.slice(0, query.limit).map(toKey), next: last === undefined ? null : encodeCursor([last.cursor_at, last.id]) }
  }

  async getKey (project: ProjectRef, keyId: string): Promise<ApiKeyRecord | null> {
    if (hasNul(project.organization, project.project, keyId)) return null
    const { rows } = await this.run<KeyRow>(this.sql.getKey, [project.organization, project.project, keyId])
    return rows.length === 0 ? null : toKey(rows[0])
  }

  /** Writes an audit entry on `client`, inside the transaction of the change. */
  private async audit (client: pg.PoolClient, project: ProjectRef, audit: AuditContext, action: AuditAction, target: string,
    changes: Record<string, AuditChange>, ids: { keyId?: string, endpointId?: string }): Promise<void> {
    await this.query(client, this.sql.insertAudit, [project.organization, project.project, audit.actor, action,
      ids.keyId ?? null, ids.endpointId ?? null, target, JSON.stringify(changes)])
  }

  async createKey (key: NewApiKey, audit: AuditContext, beforeCommit?: BeforeCommit<ApiKeyRecord>): Promise<ApiKeyRecord> {
    await this.migrate()
    try {
      return await this.transaction(async (client) => {
        const { rows } = await this.query<KeyRow>(client, this.sql.insertKey,
          [randomUUID(), key.organization, key.project, key.prefix, key.hash, key.purpose, key.isActive, key.expiresAt,
            ...limitColumns(key.limits ?? NO_LIMITS)])
        const created = toKey(rows[0])
        await this.audit(client, key, audit, 'key.created', created.prefix, keyChanges(null, created), { keyId: created.id })
        beforeCommit?.(created)
        return created
      })
    } catch (err) {
      if (isPrefixTaken(err)) throw new PrefixTakenError()
      throw err
    }
  }

  /**
   * Runs `change` on the key, locked, in a transaction, and audits it when
   * something changed; null when there is no such key.
   */
  private async changeKey (project: ProjectRef, keyId: string, audit: AuditContext, action: AuditAction,
    change: (client: pg.PoolClient, before: ApiKeyRecord) => Promise<{ after: ApiKeyRecord | null, changes: Record<string, AuditChange> }>,
    beforeCommit?: BeforeCommit<ApiKeyRecord>
  ): Promise<{ before: ApiKeyRecord, after: ApiKeyRecord | null } | null> {
    if (hasNul(project.organization, project.project, keyId)) return null
    await this.migrate()
    return this.transaction(async (client) => {
      const { rows } = await this.query<KeyRow>(client, this.sql.lockKey, [project.organization, project.project, keyId])
      if (rows.length === 0) return null
      const before = toKey(rows[0])
      const { after, changes } = await change(client, before)
      if (Object.keys(changes).length > 0) await this.audit(client, project, audit, action, (after ?? before).prefix, changes, { keyId })
      if (after !== null) beforeCommit?.(after)
      return { before, after }
    })
  }

  async updateKey (project: ProjectRef, keyId: string, patch: ApiKeyPatch, audit: AuditContext,
    beforeCommit?: BeforeCommit<ApiKeyRecord>): Promise<ApiKeyRecord | null> {
    const done = await this.changeKey(project, keyId, audit, 'key.updated', async (client, before) => {
      const { rows } = await this.query<KeyRow>(client, this.sql.updateKey,
        [project.organization, project.project, keyId, patch.purpose ?? null, patch.isActive ?? null,
          patch.expiresAt !== undefined, patch.expiresAt ?? null])
      let after = toKey(rows[0])
      if (patch.limits !== undefined) {
        const limits = await this.query<KeyRow>(client, this.sql.setLimits,
          [project.organization, project.project, keyId, ...limitColumns({ ...before.limits, ...patch.limits })])
        after = toKey(limits.rows[0])
      }
      return { after, changes: keyChanges(before, after) }
    }, beforeCommit)
    return done?.after ?? null
  }

  async replaceKeySecret (project: ProjectRef, keyId: string, secret: { prefix: string, hash: string }, audit: AuditContext,
    beforeCommit?: BeforeCommit<ApiKeyRecord>): Promise<ApiKeyRecord | null> {
    try {
      const done = await this.changeKey(project, keyId, audit, 'key.regenerated', async (client, before) => {
        const { rows } = await this.query<KeyRow>(client, this.sql.setSecret,
          [project.organization, project.project, keyId, secret.prefix, secret.hash])
        const after = toKey(rows[0])
        return { after, changes: { prefix: { from: before.prefix, to: after.prefix } } }
      }, beforeCommit)
      return done?.after ?? null
    } catch (err) {
      if (isPrefixTaken(err)) throw new PrefixTakenError()
      throw err
    }
  }

  async deleteKey (project: ProjectRef, keyId: string, audit: AuditContext): Promise<boolean> {
    const done = await this.changeKey(project, keyId, audit, 'key.deleted', async (client, before) => {
      await this.auditKeyLeaving(client, project, audit, keyId)
      await this.query(client, this.sql.deleteKey, [project.organization, project.project, keyId])
      return { after: null, changes: keyChanges(before, null) }
    })
    return done !== null
  }

  /**
   * Writes `endpoint.updated` for each endpoint the key (locked) is about to
   * leave, with its keys before and after. The endpoints are locked FOR KEY
   * SHARE: a PUT or DELETE of one waits, a usage flush does not (it locks
   * endpoints before keys, this the other way round). Deletions of two keys
   * of one endpoint take turns under an advisory lock, so that each entry's
   * "before" is the other's "after".
   */
  private async auditKeyLeaving (client: pg.PoolClient, project: ProjectRef, audit: AuditContext, keyId: string): Promise<void> {
    const { rows } = await this.query<EndpointRow>(client, this.sql.lockKeyEndpoints, [keyId, project.organization, project.project])
    for (const row of rows) {
      await this.query(client, 'SELECT pg_advisory_xact_lock($1, hashtext($2))', [ASSIGNMENTS_LOCK, row.id])
      const keyIds = (await this.query<{ key_id: string }>(client, this.sql.endpointKeyIds, [row.id])).rows.map((r) => r.key_id)
      if (!keyIds.includes(keyId)) continue // a PUT took it off meanwhile
      const e = toEndpoint(row)
      await this.audit(client, project, audit, 'endpoint.updated', endpointPath(e),
        keyIdChanges(keyIds, keyIds.filter((id) => id !== keyId)), { endpointId: e.id })
    }
  }

  async listEndpoints (project: ProjectRef): Promise<EndpointRecord[]> {
    if (hasNul(project.organization, project.project)) return []
    return (await this.run<EndpointRow>(this.sql.listEndpoints, [project.organization, project.project])).rows.map(toEndpoint)
  }

  async listEndpointsPage (project: ProjectRef, query: EndpointListQuery): Promise<ListPage<EndpointRecord>> {
    const after = query.after === undefined ? undefined : decodeCursor(query.after, ['integer', 'string', 'integer'])
    if (hasNul(project.organization, project.project, query.search ?? '', query.keyId ?? '')) return { items: [], next: null }
    const params: unknown[] = [project.organization, project.project, query.limit + 1]
    const where = ['e.organization = $1', 'e.project = $2']
    const next = (value: unknown): string => `$${params.push(value)}`
    if (after !== undefined) {
      where.push(`(e.model_sequence, e.type, e.resource_sequence) > (${next(after[0])}::bigint, ${next(after[1])}::text, ${next(after[2])}::bigint)`)
    }
    if (query.keyId !== undefined) {
      where.push(`e.id IN (SELECT endpoint_id FROM ${this.t('endpoint_keys')} WHERE key_id = ${next(query.keyId)})`)
    }
    if (query.search !== undefined) {
      const path = "'/api/' || e.organization || '/' || e.project || '/model/' || e.model_sequence || '/' || e.type || '/' || e.resource_sequence"
      const places = query.searchPlaces ?? []
      where.push(`(strpos(lower((${path}) COLLATE "C"), ${next(foldSearch(query.search))}) > 0` + (places.length === 0
        ? ')'
        : ` OR (e.type, e.model_sequence, e.resource_sequence) IN (SELECT * FROM unnest(${next(places.map((p) => p.type))}::text[],
              ${next(places.map((p) => p.modelSequence))}::bigint[], ${next(places.map((p) => p.resourceSequence))}::bigint[])))`))
    }
    const { rows } = await this.run<EndpointRow>(`${this.endpointSelect} WHERE ${where.join(' AND ')}
      ORDER BY e.model_sequence, e.type, e.resource_sequence LIMIT $3`, params)
    const items = rows.slice(0, query.limit).map(toEndpoint)
    const last = rows.length > query.limit ? items[items.length - 1] : undefined
    return { items, next: last === undefined ? null : encodeCursor([last.modelSequence, last.type, last.resourceSequence]) }
  }

  async getEndpoint (locator: EndpointLocator): Promise<EndpointRecord | null> {
    if (hasNul(locator.organization, locator.project, locator.type)) return null
    const { rows } = await this.run<EndpointRow>(this.sql.getEndpoint, locatorParams(locator))
    return rows.length === 0 ? null : toEndpoint(rows[0])
  }

  async putEndpoint (locator: EndpointLocator, keyIds: string[], audit: AuditContext,
    beforeCommit?: (endpoint: EndpointRecord, created: boolean) => void): Promise<PutEndpointResult> {
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
      let before: string[] = []
      if (!created) {
        before = (await this.query<{ key_id: string }>(client, this.sql.endpointKeyIds, [endpointId])).rows.map((r) => r.key_id)
        await this.query(client, this.sql.clearAssignments, [endpointId])
      }
      await this.query(client, this.sql.assign, [endpointId, wanted])
      const changes = keyIdChanges(before, wanted)
      if (created || Object.keys(changes).length > 0) {
        await this.audit(client, locator, audit, created ? 'endpoint.created' : 'endpoint.updated', endpointPath(locator), changes, { endpointId })
      }
      const { rows } = await this.query<EndpointRow>(client, this.sql.getEndpoint, where)
      const endpoint = toEndpoint(rows[0])
      beforeCommit?.(endpoint, created)
      return { ok: true, created, endpoint }
    })
  }

  async addEndpointKey (locator: EndpointLocator, keyId: string, audit: AuditContext,
    beforeCommit?: BeforeCommit<EndpointRecord>): Promise<EndpointKeyResult> {
    return this.changeEndpointKey(locator, keyId, audit, 'add', beforeCommit)
  }

  async removeEndpointKey (locator: EndpointLocator, keyId: string, audit: AuditContext,
    beforeCommit?: BeforeCommit<EndpointRecord>): Promise<EndpointKeyResult> {
    return this.changeEndpointKey(locator, keyId, audit, 'remove', beforeCommit)
  }

  /**
   * One key on or off an endpoint: the endpoint locked, the key kept from
   * deletion (KEY SHARE, as putEndpoint), that endpoint's assignments read.
   */
  private async changeEndpointKey (locator: EndpointLocator, keyId: string, audit: AuditContext, change: 'add' | 'remove',
    beforeCommit: BeforeCommit<EndpointRecord> | undefined): Promise<EndpointKeyResult> {
    if (hasNul(locator.organization, locator.project, locator.type)) return { ok: false, problem: 'no_endpoint' }
    await this.migrate()
    const where = locatorParams(locator)
    return this.transaction(async (client): Promise<EndpointKeyResult> => {
      const endpointId = (await this.query<{ id: string }>(client, this.sql.lockEndpoint, where)).rows[0]?.id
      if (endpointId === undefined) return { ok: false, problem: 'no_endpoint' }
      if (hasNul(keyId)) return { ok: false, problem: 'no_key' }
      const known = await this.query(client, this.sql.projectKeys, [locator.organization, locator.project, [keyId]])
      if (known.rowCount === 0) return { ok: false, problem: 'no_key' }
      const before = (await this.query<{ key_id: string }>(client, this.sql.endpointKeyIds, [endpointId])).rows.map((r) => r.key_id)
      const changed = before.includes(keyId) !== (change === 'add')
      if (changed && change === 'add' && before.length >= MAX_ENDPOINT_KEYS) return { ok: false, problem: 'full' }
      if (changed && change === 'remove' && before.length === 1) return { ok: false, problem: 'last_key' }
      if (changed) {
        if (change === 'add') await this.query(client, this.sql.assign, [endpointId, [keyId]])
        else await this.query(client, this.sql.unassign, [endpointId, keyId])
        const after = change === 'add' ? [...before, keyId] : before.filter((id) => id !== keyId)
        await this.audit(client, locator, audit, 'endpoint.updated', endpointPath(locator), keyIdChanges(before, after), { endpointId })
      }
      const record = toEndpoint((await this.query<EndpointRow>(client, this.sql.getEndpoint, where)).rows[0])
      beforeCommit?.(record)
      return { ok: true, changed, endpoint: record }
    })
  }

  async deleteEndpoint (locator: EndpointLocator, audit: AuditContext): Promise<boolean> {
    if (hasNul(locator.organization, locator.project, locator.type)) return false
    await this.migrate()
    return this.transaction(async (client) => {
      const endpointId = (await this.query<{ id: string }>(client, this.sql.lockEndpoint, locatorParams(locator))).rows[0]?.id
      if (endpointId === undefined) return false
      const before = (await this.query<{ key_id: string }>(client, this.sql.endpointKeyIds, [endpointId])).rows.map((r) => r.key_id)
      await this.query(client, this.sql.deleteEndpoint, locatorParams(locator))
      await this.audit(client, locator, audit, 'endpoint.deleted', endpointPath(locator), keyIdChanges(before, []), { endpointId })
      return true
    })
  }

  async listAudit (project: ProjectRef, query: AuditQuery): Promise<AuditEntry[]> {
    if (hasNul(project.organization, project.project)) return []
    const { rows } = await this.run<{ id: string, at: Date, actor: string | null, action: AuditAction, key_id: string | null, endpoint_id: string | null, target: string, changes: Record<string, AuditChange> }>(
      this.sql.listAudit, [project.organization, project.project, query.before ?? null, query.limit])
    return rows.map((r) => ({ id: r.id, at: r.at, actor: r.actor, action: r.action, keyId: r.key_id, endpointId: r.endpoint_id, target: r.target, changes: r.changes }))
  }

  async pruneAudit (before: Date): Promise<number> {
    return (await this.run(this.sql.pruneAudit, [before])).rowCount ?? 0
  }

  async claimIdempotencyKey (scope: IdempotencyScope, key: string, ttlMs: number, token: string): Promise<IdempotencyClaim> {
    await this.migrate()
    if (Date.now() - this.lastPurge >= PURGE_INTERVAL_MS) {
      this.lastPurge = Date.now()
      await this.query(this.pool, this.sql.purgeIdempotency, [ttlMs])
    }
    const { endpointId, keyId } = scope
    // No record for the whole endpoint is made any more, so a live one from
    // before can only go away: it is answered as it stands.
    const legacy = await this.query<{ response: string | null }>(this.pool, this.sql.getIdempotency, [endpointId, '', key, ttlMs])
    if (legacy.rows.length === 1) return { claimed: false, response: legacy.rows[0].response }
    // The insert decides alone, atomically, who owns the key. If the record
    // it met is gone (released or expired) by the time it is read, try again.
    for (;;) {
      const claim = await this.query(this.pool, this.sql.claimIdempotency, [endpointId, keyId, key, ttlMs, token])
      if (claim.rowCount === 1) return { claimed: true }
      const { rows } = await this.query<{ response: string | null }>(this.pool, this.sql.getIdempotency, [endpointId, keyId, key, ttlMs])
      if (rows.length === 1) return { claimed: false, response: rows[0].response }
    }
  }

  async completeIdempotencyKey (scope: IdempotencyScope, key: string, response: string): Promise<void> {
    await this.run(this.sql.completeIdempotency, [scope.endpointId, scope.keyId, key, response])
  }

  async releaseIdempotencyKey (scope: IdempotencyScope, key: string, token: string): Promise<boolean> {
    return (await this.run(this.sql.releaseIdempotency, [scope.endpointId, scope.keyId, key, token])).rowCount === 1
  }

  async pruneIdempotencyKeys (before: Date): Promise<number> {
    return (await this.run(this.sql.pruneIdempotency, [before])).rowCount ?? 0
  }

  async createLink (project: ProjectRef, link: NewLink, audit: AuditContext): Promise<LinkRecord | null> {
    if (hasNul(project.organization, project.project, link.keyId)) return null
    await this.migrate()
    return this.transaction(async (client) => {
      const known = await this.query(client, this.sql.projectKeys, [project.organization, project.project, [link.keyId]])
      if (known.rowCount === 0) return null
      await this.query(client, this.sql.insertLink, toColumns(LINKS_TABLE, 'pg', { ...link, createdAt: new Date(), revokedAt: null }))
      const { rows } = await this.query<Record<string, unknown>>(client, this.sql.getLink, [link.id, project.organization, project.project])
      const created = toLink(rows[0])
      await this.audit(client, project, audit, 'link.created', link.id, linkChanges(created), { keyId: link.keyId, endpointId: link.endpointId })
      return created
    })
  }

  async findLinkUse (linkId: string): Promise<LinkUse | null> {
    if (hasNul(linkId)) return null
    const { rows } = await this.run<LinkUseRow>(this.sql.linkUse, [linkId])
    if (rows.length === 0) return null
    const row = rows[0]
    return {
      revokedAt: row.revoked_at,
      keyPrefix: row.key_prefix,
      key: {
        id: row.key_id,
        prefix: row.prefix,
        isActive: row.is_active,
        expiresAt: row.expires_at?.getTime() ?? null,
        limits: limitsOf(row),
        bytesToday: Number(row.bytes_today ?? 0)
      },
      assigned: row.assigned,
      endpoint: row.endpoint_id === null
        ? null
        : {
            id: row.endpoint_id,
            organization: row.organization as string,
            project: row.project as string,
            modelSequence: Number(row.model_sequence),
            type: row.type as ResourceType,
            resourceSequence: Number(row.resource_sequence)
          }
    }
  }

  async listLinks (project: ProjectRef, query: LinkListQuery): Promise<LinkRecord[]> {
    if (hasNul(project.organization, project.project, query.keyId ?? '')) return []
    const { rows } = await this.run<Record<string, unknown>>(this.sql.listLinks,
      [project.organization, project.project, query.keyId ?? null, query.limit])
    return rows.map(toLink)
  }

  async revokeLink (project: ProjectRef, linkId: string, audit: AuditContext): Promise<LinkRecord | null> {
    if (hasNul(project.organization, project.project, linkId)) return null
    await this.migrate()
    return this.transaction(async (client) => {
      const found = await this.query<Record<string, unknown>>(client, this.sql.getLink + ' FOR UPDATE OF l', [linkId, project.organization, project.project])
      if (found.rows.length === 0) return null
      const { rows } = await this.query<Record<string, unknown>>(client, this.sql.revokeLink, [linkId])
      if (rows.length === 0) return toLink(found.rows[0])
      const after = toLink(rows[0])
      await this.audit(client, project, audit, 'link.revoked', linkId, { revokedAt: { from: null, to: after.revokedAt?.toISOString() } },
        { keyId: after.keyId, endpointId: after.endpointId })
      return after
    })
  }

  async pruneLinks (before: Date): Promise<number> {
    return (await this.run(this.sql.pruneLinks, [before])).rowCount ?? 0
  }

  async listLinkSecrets (): Promise<LinkSecret[]> {
    const { rows } = await this.run<Record<string, unknown>>(this.sql.listLinkSecrets)
    return rows.map((r) => fromRow(LINK_SECRETS_TABLE, 'pg', r) as unknown as LinkSecret)
  }

  async addLinkSecret (secret: LinkSecret): Promise<void> {
    await this.run(this.sql.addLinkSecret, toColumns(LINK_SECRETS_TABLE, 'pg', { ...secret }))
  }

  async deleteLinkSecret (id: string): Promise<boolean> {
    if (hasNul(id)) return false
    return (await this.run(this.sql.deleteLinkSecret, [id])).rowCount === 1
  }

  /** Ends the pool PgStorage made (a pool passed in stays open). Safe to call twice. */
  async takeRequest (keyId: string, windowStart: number, limit: number): Promise<number | null> {
    if (hasNul(keyId)) return null
    try {
      const { rows } = await this.run<{ count: string }>(this.sql.takeRequest, [keyId, windowStart, limit])
      return rows.length === 0 ? null : Number(rows[0].count)
    } catch (err) {
      if (isForeignKeyViolation(err)) return 1 // the key was deleted since its lookup (Storage.takeRequest)
      throw err
    }
  }

  async claimDownloadSlot (keyId: string, limit: number, leaseId: string, now: number, expiresAt: number): Promise<number | null> {
    if (hasNul(keyId)) return null
    // A slot lost to another instance's claim is sought again, a few times:
    // each try reads a newer snapshot.
    for (let attempt = 0; attempt < CLAIM_ATTEMPTS; attempt++) {
      let rows: Array<{ candidate: number | null, slot: string | null }>
      try {
        ({ rows } = await this.run<{ candidate: number | null, slot: string | null }>(this.sql.claimSlot, [keyId, limit, leaseId, now, expiresAt]))
      } catch (err) {
        if (isForeignKeyViolation(err)) return 0 // the key was deleted since its lookup (Storage.claimDownloadSlot)
        throw err
      }
      const { candidate, slot } = rows[0]
      if (slot !== null) return Number(slot)
      if (candidate === null) return null
    }
    return null
  }

  async renewDownloadSlots (slots: readonly DownloadSlot[], expiresAt: number): Promise<void> {
    if (slots.length === 0) return
    await this.run(this.sql.renewSlots, [expiresAt, slots.map((s) => s.keyId), slots.map((s) => s.slot), slots.map((s) => s.leaseId)])
  }

  async releaseDownloadSlot (slot: DownloadSlot): Promise<void> {
    await this.run(this.sql.releaseSlot, [slot.keyId, slot.slot, slot.leaseId])
  }

  async close (): Promise<void> {
    if (this.closed) return
    this.closed = true
    this.pool.removeListener('error', this.ignoreIdleError)
    // Back to the pool, so that a caller's pool can end.
    await this.lookupConnection?.close()
    if (this.ownPool) await this.pool.end()
  }
}
