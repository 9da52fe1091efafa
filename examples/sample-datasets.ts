import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import type { Column, Dataset, DatasetSource, Entity, ResourceRef, ResourceSummary, Row } from '../lib/index.js'
import { IDLE_STATEMENTS_PER_SHAPE, SMALL_ENTITY_ROWS, SqliteEntityReader, quote } from './sqlite-entity-reader.js'

// The example's datasets, kept in SQLite tables of the example database and
// streamed from there: acme/shop model 1, dataset 1 `sales` (hand-written rows
// full of values that formats get wrong) and dataset 2 `events` (generated).

export const SAMPLE_MODEL = { organization: 'acme', project: 'shop', modelSequence: 1 } as const

const id: Column = { name: 'id', type: 'integer', primaryKey: true, nullable: false }

// The consumer parameters (columns=, where=, since=) each entity's rows()
// honours (lib/host/dataset-source.ts, ConsumerSupport): the sales tables are
// small, so any column may be filtered.
const filterAll = (columns: readonly Column[]): Entity['consumer'] => ({ columns: true, filters: columns.map((c) => c.name) })

const SALES_MODEL: Entity[] = [
  {
    name: 'customers',
    columns: [
      id,
      { name: 'name', type: 'text', nullable: false },
      { name: 'email', type: 'text' },
      { name: 'city', type: 'text' },
      { name: 'vip', type: 'boolean' },
      { name: 'notes', type: 'text' },
      { name: 'signed_up', type: 'date' }
    ]
  },
  {
    name: 'products',
    columns: [
      id,
      { name: 'sku', type: 'text', maxLength: 20, nullable: false },
      { name: 'name', type: 'text', nullable: false },
      { name: 'price', type: 'decimal', precision: 10, scale: 2, nullable: false },
      { name: 'in_stock', type: 'boolean' },
      { name: 'description', type: 'text' }
    ]
  },
  {
    name: 'orders',
    columns: [
      id,
      { name: 'customer_id', type: 'integer', nullable: false },
      { name: 'product_id', type: 'integer', nullable: false },
      { name: 'quantity', type: 'integer', nullable: false },
      { name: 'unit_price', type: 'decimal', precision: 10, scale: 2, nullable: false },
      { name: 'paid', type: 'boolean', nullable: false },
      { name: 'placed_at', type: 'timestamp', withTimeZone: true, nullable: false },
      { name: 'shipped_at', type: 'timestamp', withTimeZone: true },
      { name: 'note', type: 'text' }
    ]
  }
]
const SALES_ENTITIES: Entity[] = SALES_MODEL.map((entity) => ({ ...entity, consumer: filterAll(entity.columns) }))

// Stored as SQLite keeps them, and handed out as the DatasetSource contract
// allows: decimals as exact text, booleans as 0/1, timestamps as ISO 8601
// text, dates as 'YYYY-MM-DD'.
const SALES_ROWS: Record<string, Row[]> = {
  customers: [
    [1, 'Ann "The Buyer" O\'Neil', 'ann@example.com', 'Zürich', 1, 'Prefers e-mail, not phone', '2021-03-04'],
    [2, 'Björn Ångström', 'bjorn@example.se', 'Malmö', 0, 'Line one\nLine two', '2022-11-30'],
    [3, '山田 太郎', null, '東京', null, null, null],
    [4, 'Zoë, Ltd.', 'zoe@example.com.br', 'São Paulo', 1, 'Comma, "quotes" and a CRLF\r\nin one note', '2020-02-29'],
    [5, 'Backslash \\ Bob', 'bob@example.org', 'Kraków', 0, 'C:\\orders\\2024\\; -- not SQL', '1999-12-31'],
    [6, 'Émilie 🚀 Rocket', 'emilie@example.fr', '', 0, '', '2024-01-01']
  ],
  products: [
    [1, 'MUG-001', 'Mug "Classic"', '9.99', 1, 'Ceramic, 350 ml'],
    [2, 'TEE-XL', 'T-shirt, size XL', '19.50', 0, 'Cotton\n100%'],
    [3, 'BOOK-42', 'Café guide – Ñandú edition', '1234.00', 1, null],
    [4, 'STICKER', 'Sticker \'n\' stuff', '0.00', null, 'Free with any order'],
    [5, 'ESPRESSO', 'Espresso machine', '99999999.99', 1, 'Tab\tseparated; ends with a backslash \\']
  ],
  orders: [
    [1, 1, 1, 2, '9.99', 1, '2024-01-02T03:04:05.678Z', '2024-01-03T10:00:00.000Z', null],
    [2, 1, 3, 1, '1234.00', 1, '2024-02-29T23:59:59.999Z', null, 'Gift wrap, please: "Happy birthday!"'],
    [3, 2, 2, 3, '19.50', 0, '2023-12-31T23:00:00.000Z', null, 'Deliver to:\nBackdoor, 2nd floor'],
    [4, 3, 4, 10, '0.00', 1, '1999-12-31T23:59:59.000Z', '2000-01-01T00:00:00.000Z', 'ご注文ありがとうございます'],
    [5, 4, 5, 1, '99999999.99', 0, '2024-06-15T12:30:00.000Z', null, null],
    [6, 5, 1, 1, '8.50', 1, '2024-07-01T00:00:00.001Z', '2024-07-02T08:15:30.000Z', 'Discounted; was 9.99']
  ]
}

const EVENTS_ENTITY: Entity = {
  name: 'events',
  columns: [
    id,
    { name: 'ts', type: 'timestamp', nullable: false },
    { name: 'kind', type: 'text', nullable: false },
    { name: 'value', type: 'float' },
    { name: 'payload', type: 'text' }
  ],
  // Filters on the columns an index serves (id, ts) and on two more, of a
  // table of 100,000 rows; `id` only grows (rows are appended, never
  // changed), so it is the change column: since=<id> gives the rows after it.
  consumer: { columns: true, filters: ['id', 'ts', 'kind', 'value'], changes: { column: 'id', kind: 'version' } }
}

/** Every entity of the sample datasets, as declared to the plugin. */
export const SAMPLE_ENTITIES: readonly Entity[] = [...SALES_ENTITIES, EVENTS_ENTITY]

interface SampleDataset {
  name: string
  entities: readonly Entity[]
}

const DATASETS = new Map<number, SampleDataset>([
  [1, { name: 'sales', entities: SALES_ENTITIES }],
  [2, { name: 'events', entities: [EVENTS_ENTITY] }]
])

function sqliteType (column: Column): string {
  switch (column.type) {
    case 'integer': case 'bigint': case 'boolean': return 'INTEGER'
    case 'float': return 'REAL'
    case 'binary': return 'BLOB'
    default: return 'TEXT' // decimals stay exact as text
  }
}

function createTable (db: Database.Database, entity: Entity): void {
  const columns = entity.columns.map((c) =>
    `${quote(c.name)} ${sqliteType(c)}${c.primaryKey === true ? ' PRIMARY KEY' : ''}${c.nullable === false && c.primaryKey !== true ? ' NOT NULL' : ''}`)
  db.exec(`CREATE TABLE IF NOT EXISTS ${quote(entity.name)} (${columns.join(', ')})`)
}

function insertSql (entity: Entity, rows: number): string {
  const one = `(${entity.columns.map(() => '?').join(', ')})`
  return `INSERT INTO ${quote(entity.name)} VALUES ${Array(rows).fill(one).join(', ')}`
}

/** A small deterministic generator, so every fresh start has the same events. */
function mulberry32 (seed: number): () => number {
  let a = seed
  return () => {
    a = (a + 0x6D2B79F5) | 0
    let t = Math.imul(a ^ (a >>> 15), 1 | a)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const KINDS = ['page_view', 'click', 'add_to_cart', 'purchase', 'error']
const EVENTS_START = Date.UTC(2024, 0, 1)

function * generateEvents (count: number): Generator<unknown[]> {
  const random = mulberry32(42)
  let at = EVENTS_START
  for (let i = 1; i <= count; i++) {
    at += Math.floor(random() * 5000)
    const kind = KINDS[Math.floor(random() * KINDS.length)]
    const value = kind === 'purchase' ? Math.round(random() * 50_000) / 100 : random()
    const payload = kind === 'error'
      ? null
      : JSON.stringify({ path: `/products/${1 + Math.floor(random() * 5)}`, session: Math.floor(random() * 1e9).toString(36) })
    yield [i, new Date(at).toISOString(), kind, value, payload]
  }
}

const EVENTS_BATCH = 500

/** The example database (sample data, jobs) in the data folder. */
export function exampleDatabaseFile (dataDir: string): string {
  return join(dataDir, 'example.db')
}

/**
 * The writable connection to the example database (sample data and jobs).
 * WAL mode lets its writes go on while downloads read through another connection.
 */
export function openExampleDatabase (filename: string): Database.Database {
  const db = new Database(filename)
  try {
    db.pragma('journal_mode = WAL')
    db.pragma('busy_timeout = 5000')
  } catch (err) {
    db.close()
    throw err
  }
  return db
}

/**
 * Creates the sample tables and fills them: `sales` once, `events` whenever
 * its row count differs from `eventsRows` (the generation is all or nothing,
 * in one transaction of multi-row inserts).
 */
export function seedSampleData (db: Database.Database, eventsRows: number): void {
  db.exec('CREATE TABLE IF NOT EXISTS sample_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)')
  for (const entity of [...SALES_ENTITIES, EVENTS_ENTITY]) createTable(db, entity)
  // Serves where= on ts (a range of time) without reading the table.
  db.exec(`CREATE INDEX IF NOT EXISTS events_ts ON ${quote(EVENTS_ENTITY.name)} (ts)`)

  const getMeta = db.prepare<[string], { value: string }>('SELECT value FROM sample_meta WHERE name = ?')
  const setMeta = db.prepare<[string, string]>('INSERT OR REPLACE INTO sample_meta (name, value) VALUES (?, ?)')

  db.transaction(() => {
    if (getMeta.get('sales') !== undefined) return
    for (const entity of SALES_ENTITIES) {
      const insert = db.prepare(insertSql(entity, 1))
      for (const row of SALES_ROWS[entity.name]) insert.run(...row)
    }
    setMeta.run('sales', 'seeded')
    // Made with the data, so that a start on older data is never taken for a first one.
    setMeta.run('first_start', 'pending')
  }).immediate()
  // Data made by a version of the example that kept no revision gets one now.
  db.prepare('INSERT OR IGNORE INTO sample_meta (name, value) VALUES (?, ?)').run('revision:sales', newRevision())

  if (getMeta.get('events_rows')?.value === String(eventsRows)) return
  const batchInsert = db.prepare(insertSql(EVENTS_ENTITY, EVENTS_BATCH))
  db.transaction(() => {
    db.exec(`DELETE FROM ${quote(EVENTS_ENTITY.name)}`)
    let batch: unknown[] = []
    for (const row of generateEvents(eventsRows)) {
      batch.push(...row)
      if (batch.length === EVENTS_BATCH * row.length) {
        batchInsert.run(batch)
        batch = []
      }
    }
    if (batch.length > 0) db.prepare(insertSql(EVENTS_ENTITY, batch.length / EVENTS_ENTITY.columns.length)).run(batch)
    setMeta.run('events_rows', String(eventsRows))
    setMeta.run('revision:events', newRevision())
  }).immediate()
}

/**
 * A dataset's revision (Dataset.revision): new whenever its rows are
 * written. The sample data changes only here, at start, so it is read once;
 * a host whose data changes while it runs keeps a version per dataset (a
 * counter its writes bump, a last-modified time) and reads it in getDataset.
 */
function newRevision (): string {
  return `${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`
}

/**
 * True from the creation of the sample data until `endFirstStart`: no start on
 * this data has yet got as far as its first-start step (the demo key).
 */
export function isFirstStart (db: Database.Database): boolean {
  return db.prepare('SELECT 1 FROM sample_meta WHERE name = ?').get('first_start') !== undefined
}

export function endFirstStart (db: Database.Database): void {
  db.prepare('DELETE FROM sample_meta WHERE name = ?').run('first_start')
}

/** Idle prepared statements kept per entity (per shape of a consumer's choices, see sqlite-entity-reader.ts). */
export const IDLE_STATEMENTS_PER_ENTITY = IDLE_STATEMENTS_PER_SHAPE
export { SMALL_ENTITY_ROWS }

/**
 * The example's DatasetSource, and the way we advise a host to write one
 * (lib/host/dataset-source.ts, `Dataset.rows`): rows are read with prepared statements
 * that are reused, returned as plain iterables (no await per row), through a
 * read-only connection of their own: better-sqlite3 refuses writes on a
 * connection while one of its statements is iterating, and a download keeps
 * a statement open for as long as the client reads. Downloads of the same
 * entity run side by side, each on its own statement, one row in memory at a
 * time.
 */
export class SampleDatasets implements DatasetSource {
  private readonly db: Database.Database
  /** per dataset number, made once: the plugin asks for one per request */
  private readonly datasets = new Map<number, Dataset>()
  /** per dataset number and entity name */
  private readonly readers = new Map<number, Map<string, SqliteEntityReader>>()

  /**
   * `filename`: the example database, already seeded with `seedSampleData`.
   * `revisions: false` serves the datasets without their revision, as a host
   * that cannot tell when its data changed: no ETag, every download rendered.
   */
  constructor (filename: string, { revisions = true }: { revisions?: boolean } = {}) {
    this.db = new Database(filename, { readonly: true, fileMustExist: true })
    for (const [sequence, sample] of DATASETS) {
      // Table and column names come from our own model, never from the request.
      const readers = new Map(sample.entities.map((entity) => [entity.name, new SqliteEntityReader(this.db, entity)]))
      this.readers.set(sequence, readers)
      const readerOf = (entity: string): SqliteEntityReader => {
        const reader = readers.get(entity)
        if (reader === undefined) throw new Error(`Dataset ${sample.name} has no entity ${entity}`)
        return reader
      }
      const revision = revisions
        ? this.db.prepare<[string], { value: string }>('SELECT value FROM sample_meta WHERE name = ?').get(`revision:${sample.name}`)?.value
        : undefined
      this.datasets.set(sequence, {
        name: sample.name,
        entities: sample.entities,
        // Downloads get an ETag, and If-None-Match a 304, until the data is rewritten.
        ...(revision === undefined ? {} : { revision }),
        // No use of options.signal: the plugin reads a plain iterable a chunk
        // at a time, synchronously, and calls return() when the client
        // leaves, which stops the read and frees the statement. (Not reading
        // the signal also spares the plugin making one.)
        rows: (entity, options) => readerOf(entity).rows(options),
        // Read before the rows, on the same connection: the rows' read is
        // bounded by it (changesUntil in the options). SQLite runs one write
        // at a time, so ids are given in commit order, and no row with a
        // smaller id can appear after this read.
        changesUntil: (entity) => readerOf(entity).changesUntil()
      })
    }
  }

  // Not async: the datasets are at hand, and a plain answer lets the plugin
  // start the download at once, without a turn of the microtask queue.
  getDataset (ref: ResourceRef): Dataset | null {
    if (ref.organization !== SAMPLE_MODEL.organization || ref.project !== SAMPLE_MODEL.project ||
      ref.modelSequence !== SAMPLE_MODEL.modelSequence) return null
    return this.datasets.get(ref.resourceSequence) ?? null
  }

  /** How many statements of the consumer's choices (shapes) an entity keeps prepared. */
  shapeCount (resourceSequence: number, entity: string): number {
    const reader = this.readers.get(resourceSequence)?.get(entity)
    if (reader === undefined) throw new Error(`No entity ${entity} in dataset ${resourceSequence}`)
    return reader.shapeCount
  }

  /** How many statements an entity's reads have prepared so far, and how many of them wait idle. */
  statementCounts (resourceSequence: number, entity: string): { prepared: number, idle: number } {
    const reader = this.readers.get(resourceSequence)?.get(entity)
    if (reader === undefined) throw new Error(`No entity ${entity} in dataset ${resourceSequence}`)
    return reader.statementCounts()
  }

  /** The datasets by name, for the management page's picker. */
  async listResources (project: { organization: string, project: string }): Promise<ResourceSummary[]> {
    if (project.organization !== SAMPLE_MODEL.organization || project.project !== SAMPLE_MODEL.project) return []
    return [...DATASETS].map(([resourceSequence, d]) => ({ modelSequence: SAMPLE_MODEL.modelSequence, resourceSequence, name: d.name }))
  }

  close (): void {
    if (this.db.open) this.db.close()
  }
}
