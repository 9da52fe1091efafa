import { randomUUID } from 'node:crypto'
import Database from 'better-sqlite3'
import {
  PrefixTakenError,
  type ApiKeyPatch, type ApiKeyRecord, type EndpointKeyLookup, type EndpointKeySummary, type EndpointLocator,
  type EndpointRecord, type IdempotencyClaim, type NewApiKey, type ProjectRef, type PutEndpointResult,
  type ResourceType, type Storage, type UsageBatch
} from './storage.js'

export interface SqliteStorageOptions {
  /** a file path, or ':memory:' for a private in-memory database */
  filename: string
  /** milliseconds to wait for a lock held by another process; default 5000 */
  busyTimeout?: number
}

// Versioned migrations, applied in order at open; each runs once, in its own
// transaction, and is recorded in schema_migrations. Never edit a shipped one.
const MIGRATIONS: string[] = [
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
  'ALTER TABLE idempotency_keys ADD COLUMN claim_token TEXT'
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
}

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

const KEY_COLUMNS = 'id, organization, project, prefix, purpose, is_active, created_at, updated_at'
const ENDPOINT_COLUMNS = 'id, organization, project, model_sequence, type, resource_sequence, calls, created_at'
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
    updatedAt: row.updated_at === null ? null : new Date(row.updated_at)
  }
}

function locatorParams (l: EndpointLocator): [string, string, number, string, number] {
  return [l.organization, l.project, l.modelSequence, l.type, l.resourceSequence]
}

function isUniqueViolation (err: unknown): boolean {
  return (err as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE'
}

/** The embedded store: one SQLite file (WAL mode) or an in-memory database. */
export class SqliteStorage implements Storage {
  readonly db: Database.Database
  private readonly statements

  constructor (options: SqliteStorageOptions) {
    this.db = new Database(options.filename)
    this.db.pragma(`busy_timeout = ${options.busyTimeout ?? 5000}`)
    this.db.pragma('journal_mode = WAL')
    this.db.pragma('synchronous = NORMAL')
    this.db.pragma('foreign_keys = ON')
    this.migrate()
    const db = this.db
    this.statements = {
      // Runs on every data request: rows as arrays (raw), which better-sqlite3
      // hands back faster than objects.
      lookup: db.prepare<[string | null, string, string, number, string, number],
        [endpointId: string, keyId: string | null, hash: string | null, isActive: number | null]
      >(
        `SELECT e.id AS endpoint_id, k.id AS key_id, k.hash, k.is_active
           FROM endpoints e
           LEFT JOIN endpoint_keys ek ON ek.endpoint_id = e.id
                 AND ek.key_id = (SELECT id FROM api_keys WHERE prefix = ?)
           LEFT JOIN api_keys k ON k.id = ek.key_id
          WHERE e.organization = ? AND e.project = ? AND e.model_sequence = ? AND e.type = ? AND e.resource_sequence = ?`).raw(),
      addCalls: db.prepare<[number, string]>('UPDATE endpoints SET calls = calls + ? WHERE id = ?'),
      touchKey: db.prepare<[number, string]>(
        'UPDATE api_keys SET updated_at = MAX(COALESCE(updated_at, 0), ?) WHERE id = ?'),
      listKeys: db.prepare<[string, string], KeyRow>(
        `SELECT ${KEY_COLUMNS} FROM api_keys WHERE organization = ? AND project = ? ORDER BY created_at, id`),
      getKey: db.prepare<[string, string, string], KeyRow>(
        `SELECT ${KEY_COLUMNS} FROM api_keys WHERE organization = ? AND project = ? AND id = ?`),
      insertKey: db.prepare<[string, string, string, string, string, string, number, number]>(
        `INSERT INTO api_keys (id, organization, project, prefix, hash, purpose, is_active, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
      setPurpose: db.prepare<[string, string, string, string]>(
        'UPDATE api_keys SET purpose = ? WHERE organization = ? AND project = ? AND id = ?'),
      setActive: db.prepare<[number, string, string, string]>(
        'UPDATE api_keys SET is_active = ? WHERE organization = ? AND project = ? AND id = ?'),
      setSecret: db.prepare<[string, string, string, string, string]>(
        'UPDATE api_keys SET prefix = ?, hash = ? WHERE organization = ? AND project = ? AND id = ?'),
      deleteKey: db.prepare<[string, string, string]>(
        'DELETE FROM api_keys WHERE organization = ? AND project = ? AND id = ?'),
      listEndpoints: db.prepare<[string, string], EndpointRow>(
        `SELECT ${ENDPOINT_COLUMNS} FROM endpoints WHERE organization = ? AND project = ?
          ORDER BY model_sequence, type, resource_sequence`),
      getEndpoint: db.prepare<[string, string, number, string, number], EndpointRow>(
        `SELECT ${ENDPOINT_COLUMNS} FROM endpoints WHERE ${LOCATOR_MATCH}`),
      endpointKeys: db.prepare<[string, string], EndpointKeySummary & { endpoint_id: string, is_active: number }>(
        `SELECT ek.endpoint_id, k.id, k.prefix, k.purpose, k.is_active
           FROM endpoint_keys ek JOIN api_keys k ON k.id = ek.key_id
          WHERE k.organization = ? AND k.project = ? ORDER BY k.created_at, k.id`),
      projectKeyIds: db.prepare<[string, string], { id: string }>(
        'SELECT id FROM api_keys WHERE organization = ? AND project = ?'),
      insertEndpoint: db.prepare<[string, string, string, number, string, number, number]>(
        `INSERT INTO endpoints (id, organization, project, model_sequence, type, resource_sequence, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?)`),
      clearAssignments: db.prepare<[string]>('DELETE FROM endpoint_keys WHERE endpoint_id = ?'),
      assign: db.prepare<[string, string]>('INSERT INTO endpoint_keys (endpoint_id, key_id) VALUES (?, ?)'),
      deleteEndpoint: db.prepare<[string, string, number, string, number]>(`DELETE FROM endpoints WHERE ${LOCATOR_MATCH}`),
      getIdempotency: db.prepare<[string, string], { response: string | null, created_at: number }>(
        'SELECT response, created_at FROM idempotency_keys WHERE endpoint_id = ? AND idempotency_key = ?'),
      expireIdempotency: db.prepare<[number]>('DELETE FROM idempotency_keys WHERE created_at < ?'),
      claimIdempotency: db.prepare<[string, string, number, string]>(
        `INSERT OR REPLACE INTO idempotency_keys (endpoint_id, idempotency_key, response, created_at, claim_token)
         VALUES (?, ?, NULL, ?, ?)`),
      completeIdempotency: db.prepare<[string, string, string]>(
        'UPDATE idempotency_keys SET response = ? WHERE endpoint_id = ? AND idempotency_key = ?'),
      releaseIdempotency: db.prepare<[string, string, string]>(
        `DELETE FROM idempotency_keys
          WHERE endpoint_id = ? AND idempotency_key = ? AND claim_token = ? AND response IS NULL`)
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

  async findEndpointKey (locator: EndpointLocator, prefix: string | null): Promise<EndpointKeyLookup | null> {
    const l = locator
    const row = this.statements.lookup.get(prefix, l.organization, l.project, l.modelSequence, l.type, l.resourceSequence)
    if (row === undefined) return null
    const [endpointId, keyId, hash, isActive] = row
    return { endpointId, key: keyId === null ? null : { id: keyId, hash: hash as string, isActive: isActive === 1 } }
  }

  async applyUsage (batch: UsageBatch): Promise<void> {
    const { addCalls, touchKey } = this.statements
    this.db.transaction(() => {
      for (const [endpointId, n] of batch.calls) addCalls.run(n, endpointId)
      for (const [keyId, at] of batch.lastUsed) touchKey.run(at.getTime(), keyId)
    }).immediate()
  }

  async listKeys (project: ProjectRef): Promise<ApiKeyRecord[]> {
    return this.statements.listKeys.all(project.organization, project.project).map(toKey)
  }

  async getKey (project: ProjectRef, keyId: string): Promise<ApiKeyRecord | null> {
    const row = this.statements.getKey.get(project.organization, project.project, keyId)
    return row === undefined ? null : toKey(row)
  }

  async createKey (key: NewApiKey): Promise<ApiKeyRecord> {
    const id = randomUUID()
    try {
      this.statements.insertKey.run(id, key.organization, key.project, key.prefix, key.hash, key.purpose,
        key.isActive ? 1 : 0, Date.now())
    } catch (err) {
      if (isUniqueViolation(err)) throw new PrefixTakenError()
      throw err
    }
    return (await this.getKey(key, id)) as ApiKeyRecord
  }

  async updateKey (project: ProjectRef, keyId: string, patch: ApiKeyPatch): Promise<ApiKeyRecord | null> {
    const where = [project.organization, project.project, keyId] as const
    this.db.transaction(() => {
      if (patch.purpose !== undefined) this.statements.setPurpose.run(patch.purpose, ...where)
      if (patch.isActive !== undefined) this.statements.setActive.run(patch.isActive ? 1 : 0, ...where)
    }).immediate()
    return this.getKey(project, keyId)
  }

  async replaceKeySecret (project: ProjectRef, keyId: string, secret: { prefix: string, hash: string }): Promise<ApiKeyRecord | null> {
    try {
      this.statements.setSecret.run(secret.prefix, secret.hash, project.organization, project.project, keyId)
    } catch (err) {
      if (isUniqueViolation(err)) throw new PrefixTakenError()
      throw err
    }
    return this.getKey(project, keyId)
  }

  async deleteKey (project: ProjectRef, keyId: string): Promise<boolean> {
    return this.statements.deleteKey.run(project.organization, project.project, keyId).changes === 1
  }

  private endpointsWithKeys (project: ProjectRef, rows: EndpointRow[]): EndpointRecord[] {
    const keysByEndpoint = new Map<string, EndpointKeySummary[]>()
    for (const k of this.statements.endpointKeys.all(project.organization, project.project)) {
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
    return this.endpointsWithKeys(project, this.statements.listEndpoints.all(project.organization, project.project))
  }

  async getEndpoint (locator: EndpointLocator): Promise<EndpointRecord | null> {
    const row = this.statements.getEndpoint.get(...locatorParams(locator))
    return row === undefined ? null : this.endpointsWithKeys(locator, [row])[0]
  }

  async putEndpoint (locator: EndpointLocator, keyIds: string[]): Promise<PutEndpointResult> {
    const s = this.statements
    const result = this.db.transaction((): PutEndpointResult => {
      const projectKeys = new Set(s.projectKeyIds.all(locator.organization, locator.project).map((r) => r.id))
      const unknownKeyIds = keyIds.filter((id) => !projectKeys.has(id))
      if (unknownKeyIds.length > 0) return { ok: false, unknownKeyIds }
      let endpoint = s.getEndpoint.get(...locatorParams(locator))
      const created = endpoint === undefined
      const endpointId = endpoint?.id ?? randomUUID()
      if (created) {
        s.insertEndpoint.run(endpointId, ...locatorParams(locator), Date.now())
      } else {
        s.clearAssignments.run(endpointId)
      }
      for (const keyId of new Set(keyIds)) s.assign.run(endpointId, keyId)
      endpoint = s.getEndpoint.get(...locatorParams(locator)) as EndpointRow
      return { ok: true, created, endpoint: this.endpointsWithKeys(locator, [endpoint])[0] }
    }).immediate()
    return result
  }

  async deleteEndpoint (locator: EndpointLocator): Promise<boolean> {
    return this.statements.deleteEndpoint.run(...locatorParams(locator)).changes === 1
  }

  async claimIdempotencyKey (endpointId: string, key: string, ttlMs: number, token: string): Promise<IdempotencyClaim> {
    const s = this.statements
    return this.db.transaction((): IdempotencyClaim => {
      const now = Date.now()
      s.expireIdempotency.run(now - ttlMs)
      const existing = s.getIdempotency.get(endpointId, key)
      if (existing !== undefined) return { claimed: false, response: existing.response }
      s.claimIdempotency.run(endpointId, key, now, token)
      return { claimed: true }
    }).immediate()
  }

  async completeIdempotencyKey (endpointId: string, key: string, response: string): Promise<void> {
    this.statements.completeIdempotency.run(response, endpointId, key)
  }

  async releaseIdempotencyKey (endpointId: string, key: string, token: string): Promise<boolean> {
    return this.statements.releaseIdempotency.run(endpointId, key, token).changes === 1
  }

  async close (): Promise<void> {
    if (this.db.open) this.db.close()
  }
}
