import { randomUUID } from 'node:crypto'
import { setImmediate } from 'node:timers/promises'
import Database from 'better-sqlite3'
import {
  PrefixTakenError, USAGE_OUTCOMES,
  type ApiKeyPatch, type ApiKeyRecord, type EndpointKeyLookup, type EndpointKeySummary, type EndpointLocator,
  type EndpointRecord, type IdempotencyClaim, type NewApiKey, type ProjectRef, type PutEndpointResult,
  type ResourceType, type Storage, type UsageBatch, type UsageCount, type UsageOutcome, type UsageQuery, type UsageRow,
  type AuditAction, type AuditChange, type AuditContext, type AuditEntry, type AuditQuery, type IdempotencyScope, type BeforeCommit,
  MAX_ENDPOINT_KEYS, type EndpointKeyResult, type EndpointListQuery, type ListPage, type ListQuery,
  NO_LIMITS, limitsOrNull, type DownloadSlot,
  type LinkListQuery, type LinkRecord, type LinkSecret, type LinkUse, type NewLink
} from './storage.js'
import { LINK_SECRETS_TABLE, LINKS_TABLE } from './link-tables.js'
import { fromRow, insertSql, toColumns } from './table-list.js'
import { decodeCursor, encodeCursor, foldSearch } from './list-cursor.js'
import { endpointPath } from './endpoint-path.js'
import { keyChanges, keyIdChanges, linkChanges } from './audit-changes.js'
import { DAY_MS, dailyCounts } from './usage-buckets.js'
import { migrationsFor } from './migrations.js'
import { LookupMemo } from './lookup-memo.js'

export interface SqliteStorageOptions {
  /** a file path, or ':memory:' for a private in-memory database */
  filename: string
  /** milliseconds to wait for a lock held by another process; default 5000 */
  busyTimeout?: number
  /**
   * This handle alone uses the file (SQLite's exclusive locking mode): the
   * file is locked from the open until close, so another process or handle
   * that opens it is refused (SQLITE_BUSY, after busyTimeout). Nothing else
   * can then commit to it, so a request's key lookup no longer asks whether
   * another connection did (`PRAGMA data_version`: two file locks, about
   * 2.5 µs a request here). Default false: several processes may share the
   * file. For a host that runs one process on its file, as the example does.
   */
  exclusive?: boolean
}

// Versioned migrations, applied in order at open; each runs once, in its own
// transaction, and is recorded in schema_migrations. Never edit a shipped one.
//
// Migrations 1 to 5 below were written by hand for this dialect and have
// shipped. From 6 on, a migration is added once, for both adapters, to
// SHARED_MIGRATIONS (migrations.ts): tables are described in a table list
// (table-list.ts) and this dialect's DDL is generated from it.
export const MIGRATIONS: readonly string[] = [
  `CREATE TABLE api_keys (
     id TEXT PRIMARY KEY,
     organization TEXT NOT NULL,
     project TEXT NOT NULL,
     prefix TEXT NOT NULL UNIQUE,
     hash TEXT NOT NULL,
     purpose TEXT NOT NULL,
     is_active INTEGER NOT NULL,
     created_at INTEGER NOT NULL,
     updated_at INTEGER
   );
   CREATE INDEX api_keys_project ON api_keys (organization, project);
   CREATE TABLE endpoints (
     id TEXT PRIMARY KEY,
     organization TEXT NOT NULL,
     project TEXT NOT NULL,
     model_sequence INTEGER NOT NULL,
     type TEXT NOT NULL CHECK (type IN ('dataset', 'pipeline')),
     resource_sequence INTEGER NOT NULL,
     calls INTEGER NOT NULL DEFAULT 0,
     created_at INTEGER NOT NULL,
     UNIQUE (organization, project, model_sequence, type, resource_sequence)
   );
   CREATE TABLE endpoint_keys (
     endpoint_id TEXT NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
     key_id TEXT NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
     PRIMARY KEY (endpoint_id, key_id)
   );
   CREATE INDEX endpoint_keys_key ON endpoint_keys (key_id);
   CREATE TABLE idempotency_keys (
     endpoint_id TEXT NOT NULL,
     idempotency_key TEXT NOT NULL,
     response TEXT,
     created_at INTEGER NOT NULL,
     PRIMARY KEY (endpoint_id, idempotency_key)
   );
   CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);`,
  // The random token of the call that claimed the key: only it may release
  // the claim. Records claimed before this migration have none.
  'ALTER TABLE idempotency_keys ADD COLUMN claim_token TEXT',
  // Key expiry, and the usage history (DESIGN.md §4.1): requests by hour and
  // by UTC day, per endpoint, key ('' for none) and outcome. A day's rows are
  // kept beside the hours' so that a year by day reads 365 rows per series,
  // not 8,760. An endpoint's history goes with it; a deleted key's stays.
  `ALTER TABLE api_keys ADD COLUMN expires_at INTEGER;
   CREATE TABLE usage_hourly (
     endpoint_id TEXT NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
     start INTEGER NOT NULL,
     key_id TEXT NOT NULL,
     outcome TEXT NOT NULL,
     count INTEGER NOT NULL,
     PRIMARY KEY (endpoint_id, start, key_id, outcome)
   ) WITHOUT ROWID;
   CREATE INDEX usage_hourly_start ON usage_hourly (start);
   CREATE TABLE usage_daily (
     endpoint_id TEXT NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
     start INTEGER NOT NULL,
     key_id TEXT NOT NULL,
     outcome TEXT NOT NULL,
     count INTEGER NOT NULL,
     PRIMARY KEY (endpoint_id, start, key_id, outcome)
   ) WITHOUT ROWID;
   CREATE INDEX usage_daily_start ON usage_daily (start);`,
  // The audit log of management changes (DESIGN.md §4.1), and Idempotency-Key
  // records per API key: the table is made again with key_id in its primary
  // key. Records from before hold for their whole endpoint (key_id '') until
  // they expire, so a retry across the upgrade is still answered.
  `CREATE TABLE audit_log (
     id INTEGER PRIMARY KEY AUTOINCREMENT,
     organization TEXT NOT NULL,
     project TEXT NOT NULL,
     at INTEGER NOT NULL,
     actor TEXT,
     action TEXT NOT NULL,
     key_id TEXT,
     endpoint_id TEXT,
     target TEXT NOT NULL,
     changes TEXT NOT NULL
   );
   CREATE INDEX audit_log_project ON audit_log (organization, project, id);
   CREATE INDEX audit_log_at ON audit_log (at);
   CREATE TABLE idempotency_records (
     endpoint_id TEXT NOT NULL,
     key_id TEXT NOT NULL,
     idempotency_key TEXT NOT NULL,
     response TEXT,
     created_at INTEGER NOT NULL,
     claim_token TEXT,
     PRIMARY KEY (endpoint_id, key_id, idempotency_key)
   );
   INSERT INTO idempotency_records (endpoint_id, key_id, idempotency_key, response, created_at, claim_token)
     SELECT endpoint_id, '', idempotency_key, response, created_at, claim_token FROM idempotency_keys;
   DROP TABLE idempotency_keys;
   ALTER TABLE idempotency_records RENAME TO idempotency_keys;
   CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);`,
  // One key's history without reading every key's: a year by hour for one of
  // 100 keys read all 900,000 buckets of the year (test/bench/usage-query.ts).
  `CREATE INDEX usage_hourly_key ON usage_hourly (key_id, endpoint_id, start);
   CREATE INDEX usage_daily_key ON usage_daily (key_id, endpoint_id, start);`,
  ...migrationsFor('sqlite')
]


interface KeyRow {
  id: string
  organization: string
  project: string
  prefix: string
  purpose: string
  is_active: number
  created_at: number
  updated_at: number | null
  expires_at: number | null
  requests_per_minute: number | null
  concurrent_downloads: number | null
  bytes_per_day: number | null
}

/** What the per-request lookup reads: the endpoint, and the key with its limits (nulls without one). */
type LookupTuple = [endpointId: string, keyId: string | null, hash: string | null, isActive: number | null, expiresAt: number | null,
  requestsPerMinute: number | null, concurrentDownloads: number | null, bytesPerDay: number | null, bytesToday: number | null]

interface UsageRowData {
  start: number
  endpoint_id: string
  key_id: string
  outcome: UsageOutcome
  count: number
  bytes: number
}

interface AuditRow {
  id: number
  at: number
  actor: string | null
  action: AuditAction
  key_id: string | null
  endpoint_id: string | null
  target: string
  changes: string
}

type EndpointKeyRow = EndpointKeySummary & { endpoint_id: string, is_active: number }

interface EndpointRow {
  id: string
  organization: string
  project: string
  model_sequence: number
  type: ResourceType
  resource_sequence: number
  calls: number
  created_at: number
}

const KEY_COLUMNS = 'id, organization, project, prefix, purpose, is_active, created_at, updated_at, expires_at, ' +
  'requests_per_minute, concurrent_downloads, bytes_per_day'
const ENDPOINT_COLUMNS = 'id, organization, project, model_sequence, type, resource_sequence, calls, created_at'
// An endpoint's path (endpointPath) in SQL, to search it.
const ENDPOINT_PATH = "'/api/' || organization || '/' || project || '/model/' || model_sequence || '/' || type || '/' || resource_sequence"
const LOCATOR_MATCH = 'organization = ? AND project = ? AND model_sequence = ? AND type = ? AND resource_sequence = ?'

function toKey (row: KeyRow): ApiKeyRecord {
  return {
    id: row.id,
    organization: row.organization,
    project: row.project,
    prefix: row.prefix,
    purpose: row.purpose,
    isActive: row.is_active === 1,
    createdAt: new Date(row.created_at),
    updatedAt: row.updated_at === null ? null : new Date(row.updated_at),
    expiresAt: row.expires_at === null ? null : new Date(row.expires_at),
    limits: { requestsPerMinute: row.requests_per_minute, concurrentDownloads: row.concurrent_downloads, bytesPerDay: row.bytes_per_day }
  }
}

interface EndpointUsageSelect {
  organization: string
  project: string
  endpoint_id: string
  key_id?: string
  from: number
  to: number
  limit: number
}

/**
 * One endpoint's buckets of a range (start, key, outcome, count), by start:
 * all keys' in the primary key's order, one key's through the key index
 * (named: with the key and the range as parameters SQLite guesses the
 * primary key's range cheaper, and reads every key's buckets of the range).
 * Neither sorts the range. The project's buckets are read an endpoint at a
 * time and merged by start (mergeByStart): one query over all of them sorted
 * every row of the answer in a temporary B-tree, which was half its time.
 */
/** The project's endpoints (or the one asked for) that have buckets of a key in a range, by id. */
function keyUsageEndpoints (table: 'usage_hourly' | 'usage_daily'): string {
  return `SELECT id FROM endpoints e WHERE organization = @organization AND project = @project
            AND (@endpoint_id IS NULL OR id = @endpoint_id)
            AND EXISTS (SELECT 1 FROM ${table} u INDEXED BY ${table}_key
                         WHERE u.key_id = @key_id AND u.endpoint_id = e.id AND u.start >= @from AND u.start < @to)
          ORDER BY id`
}

function endpointUsageSelect (table: 'usage_hourly' | 'usage_daily', byKey: boolean): string {
  // The key as the rowid of its api_keys row and the outcome as its index in
  // USAGE_OUTCOMES, both numbers: texts would be made anew for every row,
  // and their garbage was a good part of a long answer's time. A deleted
  // key's buckets (no api_keys row in the project) keep their key id as text.
  const outcomeIndex = USAGE_OUTCOMES.map((o, i) => `WHEN '${o}' THEN ${i}`).join(' ')
  return `SELECT u.start, k.rowid, CASE WHEN k.rowid IS NULL AND u.key_id <> '' THEN u.key_id END,
                 CASE u.outcome ${outcomeIndex} END, u.count, u.bytes
            FROM ${table} u ${byKey ? `INDEXED BY ${table}_key` : ''}
            LEFT JOIN api_keys k ON k.id = u.key_id AND k.organization = @organization AND k.project = @project
           WHERE u.endpoint_id = @endpoint_id ${byKey ? 'AND u.key_id = @key_id' : ''}
             AND u.start >= @from AND u.start < @to
           ORDER BY u.start, u.key_id, u.outcome
           LIMIT @limit`
}

/** start, the key's api_keys rowid, a deleted key's id, the outcome's index in USAGE_OUTCOMES, count, bytes */
type EndpointUsageTuple = [number, number | null, string | null, number, number, number]

/**
 * Rows of usage read at a time before the event loop gets a turn. Through
 * the key index each row costs a lookup of its count: a page of 4,096 held
 * the loop 11 ms there, one of 1,024 about 3 ms.
 */
const USAGE_PAGE_ROWS = 1024

/** Reads one endpoint's rows of [from, to) by start, at most `limit`. */
type PageRead = (from: number, to: number, limit: number) => EndpointUsageTuple[]

/**
 * One endpoint's buckets, read a page at a time from `from` on. A page ends
 * where its last start begins (the next page reads that start again), so a
 * page always holds whole starts; a start with more rows than a page is
 * read whole. Pages are separate reads, so buckets counted meanwhile may
 * show in the later pages; none is read twice.
 */
class EndpointPages {
  rows: EndpointUsageTuple[] = []
  at = 0
  #from: number
  #done = false

  constructor (readonly endpointId: string, private readonly read: PageRead, from: number, private readonly to: number) {
    this.#from = from
  }

  /** The start of the next row, reading a page first if it needs one (then `read` is set); Infinity at the end. */
  head (): { start: number, read: boolean } {
    if (this.at < this.rows.length) return { start: this.rows[this.at][0], read: false }
    if (this.#done) return { start: Infinity, read: false }
    const page = this.read(this.#from, this.to, USAGE_PAGE_ROWS)
    this.at = 0
    if (page.length < USAGE_PAGE_ROWS) {
      this.rows = page
      this.#done = true
    } else {
      const last = page[page.length - 1][0]
      let end = page.length
      while (end > 0 && page[end - 1][0] === last) end--
      this.rows = end > 0 ? page.slice(0, end) : this.read(last, last + 1, Number.MAX_SAFE_INTEGER)
      this.#from = end > 0 ? last : last + 1
    }
    return { start: this.rows.length > 0 ? this.rows[0][0] : Infinity, read: true }
  }
}

/**
 * Endpoints' buckets as one list by start, then endpoint in the order given,
 * at most `limit` rows: each endpoint read a page at a time, only as far as
 * the list needs, with a turn of the event loop after each page and every
 * USAGE_PAGE_ROWS rows: a year of a busy project is tens of thousands of
 * rows, and one read held the loop for tens of milliseconds, the whole
 * server waiting. Rows of one start share one Date.
 */
async function mergeByStart (
  endpoints: readonly EndpointPages[], keyIdOf: (rowid: number) => string | null, limit: number
): Promise<UsageRow[]> {
  const rows: UsageRow[] = []
  let turnAt = USAGE_PAGE_ROWS
  while (rows.length < limit) {
    let start = Infinity
    let read = false
    for (const endpoint of endpoints) {
      const head = endpoint.head()
      read ||= head.read
      if (head.start < start) start = head.start
    }
    if (read) await setImmediate() // the heads stand as read: the turn changes none of them
    if (start === Infinity) break
    const at = new Date(start)
    for (const endpoint of endpoints) {
      const { rows: part, endpointId } = endpoint
      let j = endpoint.at
      for (; j < part.length && part[j][0] === start && rows.length < limit; j++) {
        const [, keyRowid, deletedKeyId, outcome, count, bytes] = part[j]
        rows.push({ start: at, endpointId, keyId: keyRowid === null ? deletedKeyId : keyIdOf(keyRowid), outcome: USAGE_OUTCOMES[outcome], count, bytes })
      }
      endpoint.at = j
      if (rows.length >= limit) break
    }
    if (rows.length >= turnAt) {
      turnAt += USAGE_PAGE_ROWS
      await setImmediate()
    }
  }
  return rows
}

/** The SQL and parameters of one page of a list: only the conditions the query uses, so each variant is planned for itself. */
interface PageSelect {
  sql: string
  params: Record<string, string | number>
}

/** The SQL of a page of keys (the filters it uses) and its parameters. */
function keysPageSelect (project: ProjectRef, query: ListQuery): PageSelect {
  const where = ['organization = @organization', 'project = @project']
  const params: Record<string, string | number> = { organization: project.organization, project: project.project, limit: query.limit + 1 }
  if (query.after !== undefined) {
    const [createdAt, id] = decodeCursor(query.after, ['integer', 'string'])
    where.push('(created_at, id) > (@after_created, @after_id)')
    Object.assign(params, { after_created: createdAt, after_id: id })
  }
  if (query.search !== undefined) {
    where.push('(instr(lower(prefix), @search) > 0 OR instr(lower(purpose), @search) > 0)')
    params.search = foldSearch(query.search)
  }
  return {
    sql: `SELECT ${KEY_COLUMNS} FROM api_keys INDEXED BY api_keys_project_order
           WHERE ${where.join(' AND ')} ORDER BY created_at, id LIMIT @limit`,
    params
  }
}

/** The SQL of a page of endpoints (the filters it uses) and its parameters. */
function endpointsPageSelect (project: ProjectRef, query: EndpointListQuery): PageSelect {
  const where = ['organization = @organization', 'project = @project']
  const params: Record<string, string | number> = { organization: project.organization, project: project.project, limit: query.limit + 1 }
  if (query.after !== undefined) {
    const [modelSequence, type, resourceSequence] = decodeCursor(query.after, ['integer', 'string', 'integer'])
    where.push('(model_sequence, type, resource_sequence) > (@after_model, @after_type, @after_resource)')
    Object.assign(params, { after_model: modelSequence, after_type: type, after_resource: resourceSequence })
  }
  if (query.keyId !== undefined) {
    where.push('id IN (SELECT endpoint_id FROM endpoint_keys WHERE key_id = @key_id)')
    params.key_id = query.keyId
  }
  if (query.search !== undefined) {
    const places = query.searchPlaces ?? []
    where.push(`(instr(lower(${ENDPOINT_PATH}), @search) > 0` + (places.length === 0
      ? ')'
      : ` OR (type, model_sequence, resource_sequence) IN
            (SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(@places)))`))
    params.search = foldSearch(query.search)
    if (places.length > 0) params.places = JSON.stringify(places.map((p) => [p.type, p.modelSequence, p.resourceSequence]))
  }
  return {
    sql: `SELECT ${ENDPOINT_COLUMNS} FROM endpoints WHERE ${where.join(' AND ')}
           ORDER BY model_sequence, type, resource_sequence LIMIT @limit`,
    params
  }
}

function endpointLocator (row: EndpointRow): EndpointLocator {
  return { organization: row.organization, project: row.project, modelSequence: row.model_sequence, type: row.type, resourceSequence: row.resource_sequence }
}

function locatorParams (l: EndpointLocator): [string, string, number, string, number] {
  return [l.organization, l.project, l.modelSequence, l.type, l.resourceSequence]
}

/** A key's bytes of the UTC day, when it has a bytesPerDay limit (a column of the key lookups). */
const BYTES_TODAY = `CASE WHEN k.bytes_per_day IS NOT NULL THEN
  (SELECT COALESCE(SUM(bytes), 0) FROM usage_daily u
    WHERE u.key_id = k.id AND u.start = (CAST(strftime('%s', 'now') AS INTEGER) / 86400) * 86400000) END`

// linkUse's row as an array (raw): better-sqlite3 hands these back faster than objects.
type LinkUseTuple = [revokedAt: number | null, keyPrefix: string, keyId: string, prefix: string, isActive: number, expiresAt: number | null,
  endpointId: string | null, organization: string | null, project: string | null, modelSequence: number | null, type: ResourceType | null,
  resourceSequence: number | null, assigned: number,
  requestsPerMinute: number | null, concurrentDownloads: number | null, bytesPerDay: number | null, bytesToday: number | null]

function toLink (row: Record<string, unknown>): LinkRecord {
  const { keyPrefix, ...link } = fromRow(LINKS_TABLE, 'sqlite', row)
  return link as unknown as LinkRecord
}

function isUniqueViolation (err: unknown): boolean {
  return (err as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE'
}

/** A write that names a row gone meanwhile (a key deleted since its lookup). */
function isForeignKeyError (err: unknown): boolean {
  return (err as { code?: string }).code === 'SQLITE_CONSTRAINT_FOREIGNKEY'
}

/** The embedded store: one SQLite file (WAL mode) or an in-memory database. */
export class SqliteStorage implements Storage {
  readonly db: Database.Database
  private readonly statements
  private readonly pageStatements = new Map<string, Database.Statement<Record<string, string | number>, unknown>>()
  /** recent findEndpointKey answers, valid while the stamp holds (see there) */
  private readonly lookupMemo = new LookupMemo()
  private lookupStamp = { changes: -1, version: -1, day: -1 }
  /** the file is this handle's alone (options.exclusive): no other connection commits */
  private readonly exclusive: boolean
  /** takeRequest calls of this turn of the event loop, written together (takeRequests) */
  private pendingTakes: Array<{
    params: { key_id: string, window_start: number, limit: number }
    resolve: (count: number | null) => void
    reject: (error: unknown) => void
  }> = []

  constructor (options: SqliteStorageOptions) {
    this.db = new Database(options.filename)
    this.db.pragma(`busy_timeout = ${options.busyTimeout ?? 5000}`)
    // Before WAL is entered: the WAL index then lives in this process's
    // memory, and no other process can read or write the file.
    this.exclusive = options.exclusive === true
    if (this.exclusive) this.takeFileAlone(options.filename)
    this.db.pragma('journal_mode = WAL')
    this.db.pragma('synchronous = NORMAL')
    this.db.pragma('foreign_keys = ON')
    this.migrate()
    const db = this.db
    this.statements = {
      // Runs on every data request: rows as arrays (raw), which better-sqlite3
      // hands back faster than objects.
      // The limits ride on it (DESIGN.md §4.3), and a key with a bytesPerDay
      // limit reads its bytes of the UTC day; a key without one reads nothing more.
      lookup: db.prepare<[string | null, string, string, number, string, number], LookupTuple>(
        `SELECT e.id AS endpoint_id, k.id AS key_id, k.hash, k.is_active, k.expires_at,
                k.requests_per_minute, k.concurrent_downloads, k.bytes_per_day, ${BYTES_TODAY}
           FROM endpoints e
           LEFT JOIN endpoint_keys ek ON ek.endpoint_id = e.id
                 AND ek.key_id = (SELECT id FROM api_keys WHERE prefix = ?)
           LEFT JOIN api_keys k ON k.id = ek.key_id
          WHERE e.organization = ? AND e.project = ? AND e.model_sequence = ? AND e.type = ? AND e.resource_sequence = ?`).raw(),
      // What tells whether a remembered lookup still holds (findEndpointKey):
      // two statements, since pragma_data_version in a SELECT prepares its
      // PRAGMA again on every run (four times the cost here).
      ownChanges: db.prepare<[], number>('SELECT total_changes()').pluck(),
      dataVersion: db.prepare<[], number>('PRAGMA data_version').pluck(),
      addCalls: db.prepare<[number, string]>('UPDATE endpoints SET calls = calls + ? WHERE id = ?'),
      touchKey: db.prepare<[number, string]>(
        'UPDATE api_keys SET updated_at = MAX(COALESCE(updated_at, 0), ?) WHERE id = ?'),
      // A count for an endpoint deleted since the request is dropped, as its calls are.
      addHourly: db.prepare<UsageRowData>(
        `INSERT INTO usage_hourly (endpoint_id, start, key_id, outcome, count, bytes)
         SELECT @endpoint_id, @start, @key_id, @outcome, @count, @bytes
          WHERE (@count > 0 OR @bytes > 0) AND EXISTS (SELECT 1 FROM endpoints WHERE id = @endpoint_id)
         ON CONFLICT (endpoint_id, start, key_id, outcome) DO UPDATE SET count = count + excluded.count, bytes = bytes + excluded.bytes`),
      addDaily: db.prepare<UsageRowData>(
        `INSERT INTO usage_daily (endpoint_id, start, key_id, outcome, count, bytes)
         SELECT @endpoint_id, @start, @key_id, @outcome, @count, @bytes
          WHERE (@count > 0 OR @bytes > 0) AND EXISTS (SELECT 1 FROM endpoints WHERE id = @endpoint_id)
         ON CONFLICT (endpoint_id, start, key_id, outcome) DO UPDATE SET count = count + excluded.count, bytes = bytes + excluded.bytes`),
      usageEndpoints: db.prepare<{ organization: string, project: string, endpoint_id: string | null }, string>(
        `SELECT id FROM endpoints WHERE organization = @organization AND project = @project
           AND (@endpoint_id IS NULL OR id = @endpoint_id) ORDER BY id`).pluck(),
      projectKeyRowids: db.prepare<[string, string], [number, string]>('SELECT rowid, id FROM api_keys WHERE organization = ? AND project = ?').raw(),
      keyIdByRowid: db.prepare<[number], string>('SELECT id FROM api_keys WHERE rowid = ?').pluck(),
      endpointUsageByHour: db.prepare<EndpointUsageSelect, EndpointUsageTuple>(endpointUsageSelect('usage_hourly', false)).raw(),
      endpointUsageByDay: db.prepare<EndpointUsageSelect, EndpointUsageTuple>(endpointUsageSelect('usage_daily', false)).raw(),
      keyUsageByHour: db.prepare<EndpointUsageSelect, EndpointUsageTuple>(endpointUsageSelect('usage_hourly', true)).raw(),
      keyUsageByDay: db.prepare<EndpointUsageSelect, EndpointUsageTuple>(endpointUsageSelect('usage_daily', true)).raw(),
      pruneHourly: db.prepare<[number]>('DELETE FROM usage_hourly WHERE start < ?'),
      pruneDaily: db.prepare<[number]>('DELETE FROM usage_daily WHERE start < ?'),
      listKeys: db.prepare<[string, string], KeyRow>(
        `SELECT ${KEY_COLUMNS} FROM api_keys WHERE organization = ? AND project = ? ORDER BY created_at, id`),
      getKey: db.prepare<[string, string, string], KeyRow>(
        `SELECT ${KEY_COLUMNS} FROM api_keys WHERE organization = ? AND project = ? AND id = ?`),
      insertKey: db.prepare<[string, string, string, string, string, string, number, number, number | null, number | null, number | null, number | null]>(
        `INSERT INTO api_keys (id, organization, project, prefix, hash, purpose, is_active, created_at, expires_at,
                               requests_per_minute, concurrent_downloads, bytes_per_day)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
      setLimits: db.prepare<[number | null, number | null, number | null, string, string, string]>(
        `UPDATE api_keys SET requests_per_minute = ?, concurrent_downloads = ?, bytes_per_day = ?
          WHERE organization = ? AND project = ? AND id = ?`),
      // One row per key: a later minute starts again at 1; a full one refuses (no row back).
      takeRequest: db.prepare<{ key_id: string, window_start: number, limit: number }, number>(
        `INSERT INTO key_request_windows (key_id, window_start, count) VALUES (@key_id, @window_start, 1)
         ON CONFLICT (key_id) DO UPDATE
           SET count = CASE WHEN window_start < excluded.window_start THEN 1 ELSE count + 1 END,
               window_start = MAX(window_start, excluded.window_start)
         WHERE window_start < excluded.window_start OR count < @limit
         RETURNING count`).pluck(),
      liveSlots: db.prepare<[string, number], number>(
        'SELECT slot FROM download_slots WHERE key_id = ? AND expires_at > ?').pluck(),
      holdSlot: db.prepare<[string, number, string, number]>(
        'INSERT OR REPLACE INTO download_slots (key_id, slot, lease_id, expires_at) VALUES (?, ?, ?, ?)'),
      renewSlot: db.prepare<[number, string, number, string]>(
        'UPDATE download_slots SET expires_at = ? WHERE key_id = ? AND slot = ? AND lease_id = ?'),
      releaseSlot: db.prepare<[string, number, string]>(
        'DELETE FROM download_slots WHERE key_id = ? AND slot = ? AND lease_id = ?'),
      setPurpose: db.prepare<[string, string, string, string]>(
        'UPDATE api_keys SET purpose = ? WHERE organization = ? AND project = ? AND id = ?'),
      setActive: db.prepare<[number, string, string, string]>(
        'UPDATE api_keys SET is_active = ? WHERE organization = ? AND project = ? AND id = ?'),
      setExpiry: db.prepare<[number | null, string, string, string]>(
        'UPDATE api_keys SET expires_at = ? WHERE organization = ? AND project = ? AND id = ?'),
      setSecret: db.prepare<[string, string, string, string, string]>(
        'UPDATE api_keys SET prefix = ?, hash = ? WHERE organization = ? AND project = ? AND id = ?'),
      deleteKey: db.prepare<[string, string, string]>(
        'DELETE FROM api_keys WHERE organization = ? AND project = ? AND id = ?'),
      listEndpoints: db.prepare<[string, string], EndpointRow>(
        `SELECT ${ENDPOINT_COLUMNS} FROM endpoints WHERE organization = ? AND project = ?
          ORDER BY model_sequence, type, resource_sequence`),
      getEndpoint: db.prepare<[string, string, number, string, number], EndpointRow>(
        `SELECT ${ENDPOINT_COLUMNS} FROM endpoints WHERE ${LOCATOR_MATCH}`),
      endpointKeys: db.prepare<[string, string], EndpointKeyRow>(
        `SELECT ek.endpoint_id, k.id, k.prefix, k.purpose, k.is_active
           FROM endpoint_keys ek JOIN api_keys k ON k.id = ek.key_id
          WHERE k.organization = ? AND k.project = ? ORDER BY k.created_at, k.id`),
      // The keys of some endpoints (a JSON array of ids) only: a page's, or one's.
      keysOfEndpoints: db.prepare<[string], EndpointKeyRow>(
        `SELECT ek.endpoint_id, k.id, k.prefix, k.purpose, k.is_active
           FROM endpoint_keys ek JOIN api_keys k ON k.id = ek.key_id
          WHERE ek.endpoint_id IN (SELECT value FROM json_each(?)) ORDER BY k.created_at, k.id`),
      // Which of some key ids (a JSON array) are the project's: those only are
      // read, each by its id (CROSS JOIN keeps that order; SQLite would
      // otherwise guess the project's index cheaper and read every key of it).
      projectKeyIdsIn: db.prepare<[string, string, string], { id: string }>(
        `SELECT k.id FROM json_each(?) j CROSS JOIN api_keys k ON k.id = j.value
          WHERE k.organization = ? AND k.project = ?`),
      isProjectKey: db.prepare<[string, string, string], 1>(
        'SELECT 1 FROM api_keys WHERE id = ? AND organization = ? AND project = ?').pluck(),
      unassign: db.prepare<[string, string]>('DELETE FROM endpoint_keys WHERE endpoint_id = ? AND key_id = ?'),
      insertEndpoint: db.prepare<[string, string, string, number, string, number, number]>(
        `INSERT INTO endpoints (id, organization, project, model_sequence, type, resource_sequence, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?)`),
      clearAssignments: db.prepare<[string]>('DELETE FROM endpoint_keys WHERE endpoint_id = ?'),
      assign: db.prepare<[string, string]>('INSERT INTO endpoint_keys (endpoint_id, key_id) VALUES (?, ?)'),
      deleteEndpoint: db.prepare<[string, string, number, string, number]>(`DELETE FROM endpoints WHERE ${LOCATOR_MATCH}`),
      // The key's own record, else one from before records were per key ('').
      getIdempotency: db.prepare<[string, string, string], { response: string | null, created_at: number }>(
        `SELECT response, created_at FROM idempotency_keys
          WHERE endpoint_id = ? AND key_id IN (?, '') AND idempotency_key = ? ORDER BY key_id DESC LIMIT 1`),
      expireIdempotency: db.prepare<[number]>('DELETE FROM idempotency_keys WHERE created_at < ?'),
      claimIdempotency: db.prepare<[string, string, string, number, string]>(
        `INSERT OR REPLACE INTO idempotency_keys (endpoint_id, key_id, idempotency_key, response, created_at, claim_token)
         VALUES (?, ?, ?, NULL, ?, ?)`),
      completeIdempotency: db.prepare<[string, string, string, string]>(
        'UPDATE idempotency_keys SET response = ? WHERE endpoint_id = ? AND key_id = ? AND idempotency_key = ?'),
      releaseIdempotency: db.prepare<[string, string, string, string]>(
        `DELETE FROM idempotency_keys
          WHERE endpoint_id = ? AND key_id = ? AND idempotency_key = ? AND claim_token = ? AND response IS NULL`),
      insertAudit: db.prepare<[string, string, number, string | null, AuditAction, string | null, string | null, string, string]>(
        `INSERT INTO audit_log (organization, project, at, actor, action, key_id, endpoint_id, target, changes)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
      listAudit: db.prepare<[string, string, bigint | null, bigint | null, number], AuditRow>(
        `SELECT id, at, actor, action, key_id, endpoint_id, target, changes FROM audit_log
          WHERE organization = ? AND project = ? AND (? IS NULL OR id < ?) ORDER BY id DESC LIMIT ?`),
      pruneAudit: db.prepare<[number]>('DELETE FROM audit_log WHERE at < ?'),
      endpointKeyIds: db.prepare<[string], { key_id: string }>('SELECT key_id FROM endpoint_keys WHERE endpoint_id = ? ORDER BY key_id'),
      // With a key: only the endpoints that have its buckets in the range, each
      // found through the key index, instead of a page read per endpoint.
      keyUsageEndpointsByHour: db.prepare<{ organization: string, project: string, endpoint_id: string | null, key_id: string, from: number, to: number }, string>(
        keyUsageEndpoints('usage_hourly')).pluck(),
      keyUsageEndpointsByDay: db.prepare<{ organization: string, project: string, endpoint_id: string | null, key_id: string, from: number, to: number }, string>(
        keyUsageEndpoints('usage_daily')).pluck(),
      insertLink: db.prepare<unknown[]>(insertSql(LINKS_TABLE, 'sqlite')),
      getLink: db.prepare<[string, string, string], Record<string, unknown>>(
        `SELECT l.* FROM links l JOIN api_keys k ON k.id = l.key_id WHERE l.id = ? AND k.organization = ? AND k.project = ?`),
      // Every use of a link: its state, its key's and its endpoint's, in one read.
      linkUse: db.prepare<[string], LinkUseTuple>(
        `SELECT l.revoked_at, l.key_prefix, k.id AS key_id, k.prefix, k.is_active, k.expires_at,
                e.id AS endpoint_id, e.organization, e.project, e.model_sequence, e.type, e.resource_sequence,
                EXISTS (SELECT 1 FROM endpoint_keys ek WHERE ek.endpoint_id = l.endpoint_id AND ek.key_id = l.key_id) AS assigned,
                k.requests_per_minute, k.concurrent_downloads, k.bytes_per_day, ${BYTES_TODAY}
           FROM links l JOIN api_keys k ON k.id = l.key_id LEFT JOIN endpoints e ON e.id = l.endpoint_id
          WHERE l.id = ?`).raw(),
      listLinks: db.prepare<{ organization: string, project: string, key_id: string | null, limit: number }, Record<string, unknown>>(
        `SELECT l.* FROM links l JOIN api_keys k ON k.id = l.key_id
          WHERE k.organization = @organization AND k.project = @project AND (@key_id IS NULL OR l.key_id = @key_id)
          ORDER BY l.created_at DESC, l.id DESC LIMIT @limit`),
      pruneLinks: db.prepare<[number]>('DELETE FROM links WHERE expires_at < ?'),
      revokeLink: db.prepare<[number, string]>('UPDATE links SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL'),
      listLinkSecrets: db.prepare<[], Record<string, unknown>>('SELECT * FROM link_secrets ORDER BY created_at, id'),
      addLinkSecret: db.prepare<unknown[]>(insertSql(LINK_SECRETS_TABLE, 'sqlite') + ' ON CONFLICT (id) DO NOTHING'),
      deleteLinkSecret: db.prepare<[string]>('DELETE FROM link_secrets WHERE id = ?'),
      keyEndpoints: db.prepare<[string, string, string], EndpointRow>(
        `SELECT ${ENDPOINT_COLUMNS} FROM endpoints
          WHERE id IN (SELECT endpoint_id FROM endpoint_keys WHERE key_id = ?) AND organization = ? AND project = ? ORDER BY id`)
    }
  }

  /** The prepared statement of a page's SQL, made once per variant. */
  private pageStatement (sql: string): Database.Statement<Record<string, string | number>, unknown> {
    let statement = this.pageStatements.get(sql)
    if (statement === undefined) {
      statement = this.db.prepare<Record<string, string | number>, unknown>(sql)
      this.pageStatements.set(sql, statement)
    }
    return statement
  }

  /** Locks the file for this handle until close, or says who holds it. */
  private takeFileAlone (filename: string): void {
    this.db.pragma('locking_mode = EXCLUSIVE')
    try {
      // The lock is taken at the first access; a write takes it whole at once.
      this.db.exec('BEGIN EXCLUSIVE; COMMIT')
    } catch (err) {
      this.db.close()
      if ((err as { code?: string }).code !== 'SQLITE_BUSY') throw err
      throw new Error(`SqliteStorage: ${filename} is in use by another connection or process, and exclusive: true takes it for this one alone`, { cause: err })
    }
  }

  private migrate (): void {
    this.db.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)')
    const apply = this.db.transaction((version: number, sql: string) => {
      // Checked again inside the write lock: another process may have just applied it.
      const done = this.db.prepare('SELECT 1 FROM schema_migrations WHERE version = ?').get(version)
      if (done !== undefined) return
      this.db.exec(sql)
      this.db.prepare('INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)').run(version, Date.now())
    })
    MIGRATIONS.forEach((sql, index) => apply.immediate(index + 1, sql))
  }

  /**
   * A lookup is a function of the database's contents and of the UTC day (a
   * key's bytes of the day), so the last ones are remembered until this
   * connection writes anything (total_changes), another connection commits
   * (data_version: other processes on the file too; none can with
   * `exclusive`), or the day turns.
   * Reading the two counters costs a fraction of the lookup's four index
   * searches, and a disable, delete or regenerate from anywhere still acts on
   * the next request. The memo holds no key: only prefixes and stored rows.
   * Answered at once, not as a promise: the key hook then needs none.
   */
  findEndpointKey (locator: EndpointLocator, prefix: string | null): EndpointKeyLookup | null {
    const changes = this.statements.ownChanges.get() as number
    const version = this.exclusive ? 0 : this.statements.dataVersion.get() as number
    const day = Math.floor(Date.now() / DAY_MS)
    const stamp = this.lookupStamp
    if (changes !== stamp.changes || version !== stamp.version || day !== stamp.day) {
      this.lookupMemo.clear()
      this.lookupStamp = { changes, version, day }
    }
    const remembered = this.lookupMemo.get(locator, prefix)
    if (remembered !== undefined) return remembered
    const found = this.readEndpointKey(locator, prefix)
    this.lookupMemo.set(locator, prefix, found)
    return found
  }

  private readEndpointKey (l: EndpointLocator, prefix: string | null): EndpointKeyLookup | null {
    const row = this.statements.lookup.get(prefix, l.organization, l.project, l.modelSequence, l.type, l.resourceSequence)
    if (row === undefined) return null
    const [endpointId, keyId, hash, isActive, expiresAt, requestsPerMinute, concurrentDownloads, bytesPerDay, bytesToday] = row
    if (keyId === null) return { endpointId, key: null }
    const limits = limitsOrNull(requestsPerMinute, concurrentDownloads, bytesPerDay)
    return { endpointId, key: { id: keyId, hash: hash as string, isActive: isActive === 1, expiresAt, limits, bytesToday: bytesToday ?? 0 } }
  }

  async applyUsage (batch: UsageBatch): Promise<void> {
    const { addCalls, touchKey, addHourly, addDaily } = this.statements
    const row = (c: UsageCount): UsageRowData =>
      ({ endpoint_id: c.endpointId, start: c.hour, key_id: c.keyId ?? '', outcome: c.outcome, count: c.count, bytes: c.bytes ?? 0 })
    this.db.transaction(() => {
      for (const [endpointId, n] of batch.calls) addCalls.run(n, endpointId)
      for (const [keyId, at] of batch.lastUsed) touchKey.run(at.getTime(), keyId)
      for (const c of batch.counts.values()) addHourly.run(row(c))
      for (const c of dailyCounts(batch.counts.values())) addDaily.run(row(c))
    }).immediate()
  }

  async queryUsage (project: ProjectRef, query: UsageQuery): Promise<UsageRow[]> {
    const s = this.statements
    const { organization } = project
    const { keyId, limit } = query
    const day = query.granularity === 'day'
    const select = keyId === undefined ? (day ? s.endpointUsageByDay : s.endpointUsageByHour) : (day ? s.keyUsageByDay : s.keyUsageByHour)
    const from = query.from.getTime()
    const to = query.to.getTime()
    const endpointIds = keyId === undefined
      ? s.usageEndpoints.all({ organization, project: project.project, endpoint_id: query.endpointId ?? null })
      : (day ? s.keyUsageEndpointsByDay : s.keyUsageEndpointsByHour)
          .all({ organization, project: project.project, endpoint_id: query.endpointId ?? null, key_id: keyId, from, to })
    if (endpointIds.length === 0) return []
    // The whole project's keys are read for a whole project's history only:
    // one key's or one endpoint's names a few keys, looked up as they come.
    const wholeProject = keyId === undefined && query.endpointId === undefined
    const keyIds = wholeProject ? new Map(s.projectKeyRowids.all(organization, project.project)) : new Map<number, string>()
    const endpoints = endpointIds.map((endpointId) => {
      const params = { organization, project: project.project, endpoint_id: endpointId, ...(keyId === undefined ? {} : { key_id: keyId }) }
      return new EndpointPages(endpointId, (from, to, limit) => select.all({ ...params, from, to, limit }), from, to)
    })
    // A key made while the pages were read is not in the map yet.
    const keyIdOf = (rowid: number): string | null => {
      const id = keyIds.get(rowid) ?? s.keyIdByRowid.get(rowid)
      if (id !== undefined) keyIds.set(rowid, id)
      return id ?? null
    }
    return await mergeByStart(endpoints, keyIdOf, limit)
  }

  async pruneUsage (before: Date): Promise<number> {
    const { pruneHourly, pruneDaily } = this.statements
    return this.db.transaction(() =>
      pruneHourly.run(before.getTime()).changes + pruneDaily.run(before.getTime()).changes).immediate()
  }

  async listKeys (project: ProjectRef): Promise<ApiKeyRecord[]> {
    return this.statements.listKeys.all(project.organization, project.project).map(toKey)
  }

  async listKeysPage (project: ProjectRef, query: ListQuery): Promise<ListPage<ApiKeyRecord>> {
    const { sql, params } = keysPageSelect(project, query)
    const rows = this.pageStatement(sql).all(params) as KeyRow[]
    const items = rows.slice(0, query.limit).map(toKey)
    const last = rows.length > query.limit ? rows[query.limit - 1] : undefined
    return { items, next: last === undefined ? null : encodeCursor([last.created_at, last.id]) }
  }

  async getKey (project: ProjectRef, keyId: string): Promise<ApiKeyRecord | null> {
    const row = this.statements.getKey.get(project.organization, project.project, keyId)
    return row === undefined ? null : toKey(row)
  }

  /** Writes an audit entry; called inside the transaction of the change, and only when something changed. */
  private audit (project: ProjectRef, audit: AuditContext, action: AuditAction, target: string,
    changes: Record<string, AuditChange>, ids: { keyId?: string, endpointId?: string }): void {
    this.statements.insertAudit.run(project.organization, project.project, Date.now(), audit.actor, action,
      ids.keyId ?? null, ids.endpointId ?? null, target, JSON.stringify(changes))
  }

  private keyRecord (project: ProjectRef, keyId: string): ApiKeyRecord | null {
    const row = this.statements.getKey.get(project.organization, project.project, keyId)
    return row === undefined ? null : toKey(row)
  }

  async createKey (key: NewApiKey, audit: AuditContext, beforeCommit?: BeforeCommit<ApiKeyRecord>): Promise<ApiKeyRecord> {
    const id = randomUUID()
    try {
      return this.db.transaction(() => {
        const limits = key.limits ?? NO_LIMITS
        this.statements.insertKey.run(id, key.organization, key.project, key.prefix, key.hash, key.purpose,
          key.isActive ? 1 : 0, Date.now(), key.expiresAt === null ? null : key.expiresAt.getTime(),
          limits.requestsPerMinute, limits.concurrentDownloads, limits.bytesPerDay)
        const created = this.keyRecord(key, id) as ApiKeyRecord
        this.audit(key, audit, 'key.created', created.prefix, keyChanges(null, created), { keyId: id })
        beforeCommit?.(created)
        return created
      }).immediate()
    } catch (err) {
      if (isUniqueViolation(err)) throw new PrefixTakenError()
      throw err
    }
  }

  async updateKey (project: ProjectRef, keyId: string, patch: ApiKeyPatch, audit: AuditContext,
    beforeCommit?: BeforeCommit<ApiKeyRecord>): Promise<ApiKeyRecord | null> {
    const where = [project.organization, project.project, keyId] as const
    return this.db.transaction(() => {
      const before = this.keyRecord(project, keyId)
      if (before === null) return null
      if (patch.purpose !== undefined) this.statements.setPurpose.run(patch.purpose, ...where)
      if (patch.isActive !== undefined) this.statements.setActive.run(patch.isActive ? 1 : 0, ...where)
      if (patch.expiresAt !== undefined) this.statements.setExpiry.run(patch.expiresAt === null ? null : patch.expiresAt.getTime(), ...where)
      if (patch.limits !== undefined) {
        const l = { ...before.limits, ...patch.limits }
        this.statements.setLimits.run(l.requestsPerMinute, l.concurrentDownloads, l.bytesPerDay, ...where)
      }
      const after = this.keyRecord(project, keyId) as ApiKeyRecord
      const changes = keyChanges(before, after)
      if (Object.keys(changes).length > 0) this.audit(project, audit, 'key.updated', after.prefix, changes, { keyId })
      beforeCommit?.(after)
      return after
    }).immediate()
  }

  async replaceKeySecret (project: ProjectRef, keyId: string, secret: { prefix: string, hash: string }, audit: AuditContext,
    beforeCommit?: BeforeCommit<ApiKeyRecord>): Promise<ApiKeyRecord | null> {
    try {
      return this.db.transaction(() => {
        const before = this.keyRecord(project, keyId)
        if (before === null) return null
        this.statements.setSecret.run(secret.prefix, secret.hash, project.organization, project.project, keyId)
        const after = this.keyRecord(project, keyId) as ApiKeyRecord
        this.audit(project, audit, 'key.regenerated', after.prefix, { prefix: { from: before.prefix, to: after.prefix } }, { keyId })
        beforeCommit?.(after)
        return after
      }).immediate()
    } catch (err) {
      if (isUniqueViolation(err)) throw new PrefixTakenError()
      throw err
    }
  }

  async deleteKey (project: ProjectRef, keyId: string, audit: AuditContext): Promise<boolean> {
    return this.db.transaction(() => {
      const before = this.keyRecord(project, keyId)
      if (before === null) return false
      // The endpoints it leaves, first: the page names the key in these entries by the prefix the next one gives.
      for (const e of this.statements.keyEndpoints.all(keyId, project.organization, project.project)) {
        const keyIds = this.statements.endpointKeyIds.all(e.id).map((r) => r.key_id)
        this.audit(project, audit, 'endpoint.updated', endpointPath(endpointLocator(e)),
          keyIdChanges(keyIds, keyIds.filter((id) => id !== keyId)), { endpointId: e.id })
      }
      this.statements.deleteKey.run(project.organization, project.project, keyId)
      this.audit(project, audit, 'key.deleted', before.prefix, keyChanges(before, null), { keyId })
      return true
    }).immediate()
  }

  /**
   * Endpoint records with their keys: `keyRows` are the assignments of those
   * endpoints (or more), in key order; by default read for these endpoints only.
   */
  private endpointsWithKeys (rows: EndpointRow[], keyRows?: EndpointKeyRow[]): EndpointRecord[] {
    const keysByEndpoint = new Map<string, EndpointKeySummary[]>()
    const assigned = keyRows ?? (rows.length === 0 ? [] : this.statements.keysOfEndpoints.all(JSON.stringify(rows.map((r) => r.id))))
    for (const k of assigned) {
      const list = keysByEndpoint.get(k.endpoint_id) ?? []
      list.push({ id: k.id, prefix: k.prefix, purpose: k.purpose, isActive: k.is_active === 1 })
      keysByEndpoint.set(k.endpoint_id, list)
    }
    return rows.map((row) => ({
      id: row.id,
      organization: row.organization,
      project: row.project,
      modelSequence: row.model_sequence,
      type: row.type,
      resourceSequence: row.resource_sequence,
      calls: row.calls,
      keys: keysByEndpoint.get(row.id) ?? [],
      createdAt: new Date(row.created_at)
    }))
  }

  async listEndpoints (project: ProjectRef): Promise<EndpointRecord[]> {
    const { listEndpoints, endpointKeys } = this.statements
    return this.endpointsWithKeys(listEndpoints.all(project.organization, project.project), endpointKeys.all(project.organization, project.project))
  }

  async listEndpointsPage (project: ProjectRef, query: EndpointListQuery): Promise<ListPage<EndpointRecord>> {
    const { sql, params } = endpointsPageSelect(project, query)
    const rows = this.pageStatement(sql).all(params) as EndpointRow[]
    const page = rows.slice(0, query.limit)
    const last = rows.length > query.limit ? page[page.length - 1] : undefined
    return {
      items: this.endpointsWithKeys(page),
      next: last === undefined ? null : encodeCursor([last.model_sequence, last.type, last.resource_sequence])
    }
  }

  async getEndpoint (locator: EndpointLocator): Promise<EndpointRecord | null> {
    const row = this.statements.getEndpoint.get(...locatorParams(locator))
    return row === undefined ? null : this.endpointsWithKeys([row])[0]
  }

  async putEndpoint (locator: EndpointLocator, keyIds: string[], audit: AuditContext,
    beforeCommit?: (endpoint: EndpointRecord, created: boolean) => void): Promise<PutEndpointResult> {
    const s = this.statements
    const result = this.db.transaction((): PutEndpointResult => {
      const projectKeys = new Set(s.projectKeyIdsIn.all(JSON.stringify([...new Set(keyIds)]), locator.organization, locator.project).map((r) => r.id))
      const unknownKeyIds = keyIds.filter((id) => !projectKeys.has(id))
      if (unknownKeyIds.length > 0) return { ok: false, unknownKeyIds }
      let endpoint = s.getEndpoint.get(...locatorParams(locator))
      const created = endpoint === undefined
      const endpointId = endpoint?.id ?? randomUUID()
      let before: string[] = []
      if (created) {
        s.insertEndpoint.run(endpointId, ...locatorParams(locator), Date.now())
      } else {
        before = s.endpointKeyIds.all(endpointId).map((r) => r.key_id)
        s.clearAssignments.run(endpointId)
      }
      for (const keyId of new Set(keyIds)) s.assign.run(endpointId, keyId)
      const changes = keyIdChanges(before, keyIds)
      if (created || Object.keys(changes).length > 0) {
        this.audit(locator, audit, created ? 'endpoint.created' : 'endpoint.updated', endpointPath(locator), changes, { endpointId })
      }
      endpoint = s.getEndpoint.get(...locatorParams(locator)) as EndpointRow
      const record = this.endpointsWithKeys([endpoint])[0]
      beforeCommit?.(record, created)
      return { ok: true, created, endpoint: record }
    }).immediate()
    return result
  }

  async addEndpointKey (locator: EndpointLocator, keyId: string, audit: AuditContext,
    beforeCommit?: BeforeCommit<EndpointRecord>): Promise<EndpointKeyResult> {
    return this.changeEndpointKey(locator, keyId, audit, 'add', beforeCommit)
  }

  async removeEndpointKey (locator: EndpointLocator, keyId: string, audit: AuditContext,
    beforeCommit?: BeforeCommit<EndpointRecord>): Promise<EndpointKeyResult> {
    return this.changeEndpointKey(locator, keyId, audit, 'remove', beforeCommit)
  }

  /** One key on or off an endpoint, in one transaction that reads that endpoint's assignments and the key only. */
  private changeEndpointKey (locator: EndpointLocator, keyId: string, audit: AuditContext, change: 'add' | 'remove',
    beforeCommit: BeforeCommit<EndpointRecord> | undefined): EndpointKeyResult {
    const s = this.statements
    return this.db.transaction((): EndpointKeyResult => {
      const endpoint = s.getEndpoint.get(...locatorParams(locator))
      if (endpoint === undefined) return { ok: false, problem: 'no_endpoint' }
      if (s.isProjectKey.get(keyId, locator.organization, locator.project) === undefined) return { ok: false, problem: 'no_key' }
      const before = s.endpointKeyIds.all(endpoint.id).map((r) => r.key_id)
      const changed = before.includes(keyId) !== (change === 'add')
      if (changed && change === 'add' && before.length >= MAX_ENDPOINT_KEYS) return { ok: false, problem: 'full' }
      if (changed && change === 'remove' && before.length === 1) return { ok: false, problem: 'last_key' }
      if (changed) {
        if (change === 'add') s.assign.run(endpoint.id, keyId)
        else s.unassign.run(endpoint.id, keyId)
        const after = change === 'add' ? [...before, keyId] : before.filter((id) => id !== keyId)
        this.audit(locator, audit, 'endpoint.updated', endpointPath(locator), keyIdChanges(before, after), { endpointId: endpoint.id })
      }
      // The endpoint as the change leaves it, read again.
      const record = this.endpointsWithKeys([s.getEndpoint.get(...locatorParams(locator)) as EndpointRow])[0]
      beforeCommit?.(record)
      return { ok: true, changed, endpoint: record }
    }).immediate()
  }

  async deleteEndpoint (locator: EndpointLocator, audit: AuditContext): Promise<boolean> {
    const s = this.statements
    return this.db.transaction(() => {
      const endpoint = s.getEndpoint.get(...locatorParams(locator))
      if (endpoint === undefined) return false
      const before = s.endpointKeyIds.all(endpoint.id).map((r) => r.key_id)
      s.deleteEndpoint.run(...locatorParams(locator))
      this.audit(locator, audit, 'endpoint.deleted', endpointPath(locator), keyIdChanges(before, []), { endpointId: endpoint.id })
      return true
    }).immediate()
  }

  async listAudit (project: ProjectRef, query: AuditQuery): Promise<AuditEntry[]> {
    // A BigInt, as PostgreSQL's bigint: exact past 2^53 too, so both stores read every cursor alike.
    const before = query.before === undefined ? null : BigInt(query.before)
    return this.statements.listAudit.all(project.organization, project.project, before, before, query.limit).map((r) => ({
      id: String(r.id),
      at: new Date(r.at),
      actor: r.actor,
      action: r.action,
      keyId: r.key_id,
      endpointId: r.endpoint_id,
      target: r.target,
      changes: JSON.parse(r.changes) as Record<string, AuditChange>
    }))
  }

  async pruneAudit (before: Date): Promise<number> {
    return this.statements.pruneAudit.run(before.getTime()).changes
  }

  async claimIdempotencyKey (scope: IdempotencyScope, key: string, ttlMs: number, token: string): Promise<IdempotencyClaim> {
    const s = this.statements
    return this.db.transaction((): IdempotencyClaim => {
      const now = Date.now()
      s.expireIdempotency.run(now - ttlMs)
      const existing = s.getIdempotency.get(scope.endpointId, scope.keyId, key)
      if (existing !== undefined) return { claimed: false, response: existing.response }
      s.claimIdempotency.run(scope.endpointId, scope.keyId, key, now, token)
      return { claimed: true }
    }).immediate()
  }

  async completeIdempotencyKey (scope: IdempotencyScope, key: string, response: string): Promise<void> {
    this.statements.completeIdempotency.run(response, scope.endpointId, scope.keyId, key)
  }

  async releaseIdempotencyKey (scope: IdempotencyScope, key: string, token: string): Promise<boolean> {
    return this.statements.releaseIdempotency.run(scope.endpointId, scope.keyId, key, token).changes === 1
  }

  async pruneIdempotencyKeys (before: Date): Promise<number> {
    return this.statements.expireIdempotency.run(before.getTime()).changes
  }

  /**
   * One upsert per call, but the calls of one turn of the event loop share
   * one transaction (a group commit): a commit per call was most of a
   * limited key's cost (docs/benchmarks.md). Each upsert still runs alone,
   * in order, under the write lock, so the count stays exact.
   */
  async takeRequest (keyId: string, windowStart: number, limit: number): Promise<number | null> {
    return await new Promise((resolve, reject) => {
      if (this.pendingTakes.push({ params: { key_id: keyId, window_start: windowStart, limit }, resolve, reject }) === 1) {
        globalThis.setImmediate(() => { this.takeRequests() })
      }
    })
  }

  private takeRequests (): void {
    const batch = this.pendingTakes
    this.pendingTakes = []
    const { takeRequest } = this.statements
    const answers: Array<{ count: number | null } | { error: unknown }> = []
    try {
      this.db.transaction(() => {
        // A failed upsert (its key deleted meanwhile) fails alone: SQLite undoes that statement only.
        for (const take of batch) {
          try {
            answers.push({ count: takeRequest.get(take.params) ?? null })
          } catch (error) {
            answers.push(isForeignKeyError(error) ? { count: 1 } : { error })
          }
        }
      }).immediate()
    } catch (error) {
      for (const take of batch) take.reject(error)
      return
    }
    batch.forEach((take, i) => {
      const answer = answers[i]
      if ('error' in answer) take.reject(answer.error)
      else take.resolve(answer.count)
    })
  }

  async claimDownloadSlot (keyId: string, limit: number, leaseId: string, now: number, expiresAt: number): Promise<number | null> {
    const { liveSlots, holdSlot } = this.statements
    // Read and written under the write lock: exact across processes on one file.
    try {
      return this.db.transaction((): number | null => {
        const held = new Set(liveSlots.all(keyId, now))
        for (let slot = 0; slot < limit; slot++) {
          if (held.has(slot)) continue
          holdSlot.run(keyId, slot, leaseId, expiresAt)
          return slot
        }
        return null
      }).immediate()
    } catch (error) {
      if (isForeignKeyError(error)) return 0 // the key was deleted since its lookup
      throw error
    }
  }

  async renewDownloadSlots (slots: readonly DownloadSlot[], expiresAt: number): Promise<void> {
    const { renewSlot } = this.statements
    this.db.transaction(() => {
      for (const s of slots) renewSlot.run(expiresAt, s.keyId, s.slot, s.leaseId)
    }).immediate()
  }

  async releaseDownloadSlot (slot: DownloadSlot): Promise<void> {
    this.statements.releaseSlot.run(slot.keyId, slot.slot, slot.leaseId)
  }

  async createLink (project: ProjectRef, link: NewLink, audit: AuditContext): Promise<LinkRecord | null> {
    const s = this.statements
    return this.db.transaction(() => {
      if (s.isProjectKey.get(link.keyId, project.organization, project.project) === undefined) return null
      s.insertLink.run(...toColumns(LINKS_TABLE, 'sqlite', { ...link, createdAt: new Date(), revokedAt: null }))
      const created = toLink(s.getLink.get(link.id, project.organization, project.project) as Record<string, unknown>)
      this.audit(project, audit, 'link.created', link.id, linkChanges(created), { keyId: link.keyId, endpointId: link.endpointId })
      return created
    }).immediate()
  }

  async findLinkUse (linkId: string): Promise<LinkUse | null> {
    const row = this.statements.linkUse.get(linkId)
    if (row === undefined) return null
    const [revokedAt, keyPrefix, keyId, prefix, isActive, expiresAt, endpointId, organization, project, modelSequence, type, resourceSequence, assigned,
      requestsPerMinute, concurrentDownloads, bytesPerDay, bytesToday] = row
    return {
      revokedAt: revokedAt === null ? null : new Date(revokedAt),
      keyPrefix,
      key: { id: keyId, prefix, isActive: isActive === 1, expiresAt, limits: limitsOrNull(requestsPerMinute, concurrentDownloads, bytesPerDay), bytesToday: bytesToday ?? 0 },
      assigned: assigned === 1,
      endpoint: endpointId === null
        ? null
        : {
            id: endpointId,
            organization: organization as string,
            project: project as string,
            modelSequence: modelSequence as number,
            type: type as ResourceType,
            resourceSequence: resourceSequence as number
          }
    }
  }

  async listLinks (project: ProjectRef, query: LinkListQuery): Promise<LinkRecord[]> {
    return this.statements.listLinks.all({ organization: project.organization, project: project.project, key_id: query.keyId ?? null, limit: query.limit })
      .map(toLink)
  }

  async revokeLink (project: ProjectRef, linkId: string, audit: AuditContext): Promise<LinkRecord | null> {
    const s = this.statements
    return this.db.transaction(() => {
      const row = s.getLink.get(linkId, project.organization, project.project)
      if (row === undefined) return null
      if (s.revokeLink.run(Date.now(), linkId).changes === 0) return toLink(row)
      const after = toLink(s.getLink.get(linkId, project.organization, project.project) as Record<string, unknown>)
      this.audit(project, audit, 'link.revoked', linkId, { revokedAt: { from: null, to: after.revokedAt?.toISOString() } },
        { keyId: after.keyId, endpointId: after.endpointId })
      return after
    }).immediate()
  }

  async pruneLinks (before: Date): Promise<number> {
    return this.statements.pruneLinks.run(before.getTime()).changes
  }

  async listLinkSecrets (): Promise<LinkSecret[]> {
    return this.statements.listLinkSecrets.all().map((r) => fromRow(LINK_SECRETS_TABLE, 'sqlite', r) as unknown as LinkSecret)
  }

  async addLinkSecret (secret: LinkSecret): Promise<void> {
    this.statements.addLinkSecret.run(...toColumns(LINK_SECRETS_TABLE, 'sqlite', { ...secret }))
  }

  async deleteLinkSecret (id: string): Promise<boolean> {
    return this.statements.deleteLinkSecret.run(id).changes === 1
  }

  async close (): Promise<void> {
    if (this.pendingTakes.length > 0 && this.db.open) this.takeRequests()
    if (this.db.open) this.db.close()
  }
}
