import { randomUUID } from 'node:crypto'
import { PgStorage, SqliteStorage, type ResourceType, type Storage } from '../lib/index.js'
import { randomAlphanumeric } from '../lib/keys/api-key.js'

// A project built to the size of issue 18 (10,000 keys, 2,000 endpoints) in
// a second or two: rows written straight into the adapter's tables in one
// transaction, with hashes that are never verified (the page and the
// management routes read keys, they do not authenticate with them). Shared
// by the browser test and the benchmarks.

export interface ScaleOptions {
  organization?: string
  project?: string
  keys: number
  endpoints: number
  /** keys assigned to each endpoint; default 3 */
  keysPerEndpoint?: number
  /** endpoints whose keys get a request in every hour of the last 7 days; default 100 */
  busyEndpoints?: number
}

export interface ScaleKey { id: string, prefix: string, purpose: string }
export interface ScaleEndpoint { id: string, modelSequence: number, type: ResourceType, resourceSequence: number, keyIds: string[] }

export interface ScaleProject {
  /** oldest first, as the list is ordered */
  keys: ScaleKey[]
  /** in the list's order */
  endpoints: ScaleEndpoint[]
}

const HOUR = 3_600_000
const DAY = 24 * HOUR

/** The purpose of key `i`: `client 00042`, so a search can name one key or ten. */
export const scalePurpose = (i: number): string => `client ${String(i).padStart(5, '0')}`

/**
 * Endpoint `i`'s place: model 1 + i / 500, then dataset and pipeline in
 * turn; endpoint 0 is model 1, dataset 1 (the test host's sales).
 */
export function scalePlace (i: number): { modelSequence: number, type: ResourceType, resourceSequence: number } {
  return { modelSequence: 1 + Math.floor(i / 500), type: i % 2 === 0 ? 'dataset' : 'pipeline', resourceSequence: 1 + Math.floor((i % 500) / 2) }
}

/** The rows of a project: keys a millisecond apart in creation, endpoints with keys in turn, a week of usage. */
function rowsOf (options: ScaleOptions): ScaleProject & { usage: Array<[string, number, string, number]> } {
  const prefixes = new Set<string>()
  const keys: ScaleKey[] = Array.from({ length: options.keys }, (_, i) => {
    let prefix = randomAlphanumeric(10)
    while (prefixes.has(prefix)) prefix = randomAlphanumeric(10)
    prefixes.add(prefix)
    return { id: randomUUID(), prefix, purpose: scalePurpose(i) }
  })
  const perEndpoint = Math.min(options.keysPerEndpoint ?? 3, options.keys)
  const endpoints: ScaleEndpoint[] = Array.from({ length: options.endpoints }, (_, i) => ({
    id: randomUUID(),
    ...scalePlace(i),
    keyIds: Array.from({ length: perEndpoint }, (_, j) => keys[(i * perEndpoint + j) % keys.length].id)
  }))
  endpoints.sort((a, b) => a.modelSequence - b.modelSequence || (a.type < b.type ? -1 : a.type > b.type ? 1 : 0) || a.resourceSequence - b.resourceSequence)
  const now = Math.floor(Date.now() / HOUR) * HOUR
  const usage: Array<[string, number, string, number]> = []
  for (const endpoint of endpoints.slice(0, options.busyEndpoints ?? 100)) {
    for (let hour = now - 7 * DAY; hour <= now; hour += HOUR) {
      for (const [j, keyId] of endpoint.keyIds.entries()) usage.push([endpoint.id, hour, keyId, 1 + ((hour / HOUR + j) % 5)])
    }
  }
  return { keys, endpoints, usage }
}

/** Fills an empty project of a SqliteStorage or PgStorage; resolves with what it made. */
export async function buildScaleProject (storage: Storage, options: ScaleOptions): Promise<ScaleProject> {
  const organization = options.organization ?? 'acme'
  const project = options.project ?? 'shop'
  const { keys, endpoints, usage } = rowsOf(options)
  const created = Date.now() - keys.length - 1000
  const days = new Map<string, [string, number, string, number]>()
  for (const [endpointId, hour, keyId, count] of usage) {
    const day = Math.floor(hour / DAY) * DAY
    const id = `${endpointId}|${day}|${keyId}`
    const row = days.get(id) ?? [endpointId, day, keyId, 0]
    row[3] += count
    days.set(id, row)
  }
  if (storage instanceof SqliteStorage) {
    const db = storage.db
    const key = db.prepare(`INSERT INTO api_keys (id, organization, project, prefix, hash, purpose, is_active, created_at)
                            VALUES (?, ?, ?, ?, 'not a hash', ?, 1, ?)`)
    const endpoint = db.prepare(`INSERT INTO endpoints (id, organization, project, model_sequence, type, resource_sequence, created_at)
                                 VALUES (?, ?, ?, ?, ?, ?, ?)`)
    const assign = db.prepare('INSERT INTO endpoint_keys (endpoint_id, key_id) VALUES (?, ?)')
    const hourly = db.prepare("INSERT INTO usage_hourly (endpoint_id, start, key_id, outcome, count) VALUES (?, ?, ?, 'ok', ?)")
    const daily = db.prepare("INSERT INTO usage_daily (endpoint_id, start, key_id, outcome, count) VALUES (?, ?, ?, 'ok', ?)")
    db.transaction(() => {
      keys.forEach((k, i) => key.run(k.id, organization, project, k.prefix, k.purpose, created + i))
      for (const e of endpoints) {
        endpoint.run(e.id, organization, project, e.modelSequence, e.type, e.resourceSequence, created)
        for (const keyId of new Set(e.keyIds)) assign.run(e.id, keyId)
      }
      for (const row of usage) hourly.run(...row)
      for (const row of days.values()) daily.run(...row)
    })()
  } else if (storage instanceof PgStorage) {
    await storage.migrate()
    const t = (table: string): string => `"${storage.schema}".${table}`
    const client = await storage.pool.connect()
    try {
      await client.query('BEGIN')
      await client.query(`INSERT INTO ${t('api_keys')} (id, organization, project, prefix, hash, purpose, is_active, created_at)
        SELECT id, $1, $2, prefix, 'not a hash', purpose, true, to_timestamp(ms / 1000.0)
          FROM unnest($3::text[], $4::text[], $5::text[], $6::bigint[]) AS k (id, prefix, purpose, ms)`,
      [organization, project, keys.map((k) => k.id), keys.map((k) => k.prefix), keys.map((k) => k.purpose), keys.map((_, i) => created + i)])
      await client.query(`INSERT INTO ${t('endpoints')} (id, organization, project, model_sequence, type, resource_sequence, created_at)
        SELECT id, $1, $2, m, type, r, now() FROM unnest($3::text[], $4::bigint[], $5::text[], $6::bigint[]) AS e (id, m, type, r)`,
      [organization, project, endpoints.map((e) => e.id), endpoints.map((e) => e.modelSequence), endpoints.map((e) => e.type), endpoints.map((e) => e.resourceSequence)])
      const pairs = endpoints.flatMap((e) => [...new Set(e.keyIds)].map((keyId) => [e.id, keyId]))
      await client.query(`INSERT INTO ${t('endpoint_keys')} (endpoint_id, key_id) SELECT * FROM unnest($1::text[], $2::text[])`,
        [pairs.map(([e]) => e), pairs.map(([, k]) => k)])
      for (const [table, rows] of [['usage_hourly', usage], ['usage_daily', [...days.values()]]] as const) {
        await client.query(`INSERT INTO ${t(table)} (endpoint_id, start, key_id, outcome, count)
          SELECT e, to_timestamp(s / 1000.0), k, 'ok', c FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[]) AS u (e, s, k, c)`,
        [rows.map((r) => r[0]), rows.map((r) => r[1]), rows.map((r) => r[2]), rows.map((r) => r[3])])
      }
      await client.query('COMMIT')
      // As autovacuum does after a bulk load: without statistics the planner takes the tables
      // for empty and scans them (the whole endpoint list of 2,000 took 1.6 s instead of 76 ms).
      await client.query(`ANALYZE ${['api_keys', 'endpoints', 'endpoint_keys', 'usage_hourly', 'usage_daily'].map(t).join(', ')}`)
    } catch (err) {
      await client.query('ROLLBACK')
      throw err
    } finally {
      client.release()
    }
  } else {
    throw new TypeError('buildScaleProject: a SqliteStorage or a PgStorage')
  }
  return { keys, endpoints }
}
