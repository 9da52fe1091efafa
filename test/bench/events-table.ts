// The `events` table the download benchmarks (formats.ts, concurrency.ts)
// stream: id, timestamp, kind, float and JSON text, as the example's events.
import Database from 'better-sqlite3'
import type { Column, Dataset } from '../../lib/index.js'

export const EVENTS_COLUMNS: Column[] = [
  { name: 'id', type: 'integer', primaryKey: true, nullable: false },
  { name: 'ts', type: 'timestamp', withTimeZone: true, nullable: false },
  { name: 'kind', type: 'text', nullable: false },
  { name: 'value', type: 'float' },
  { name: 'payload', type: 'text' }
]

export const EVENTS_SELECT = 'SELECT id, ts, kind, value, payload FROM events ORDER BY id'

/** Writes `rows` deterministic events into a new SQLite file (WAL). */
export function createEventsTable (file: string, rows: number): void {
  const db = new Database(file)
  db.pragma('journal_mode = WAL')
  db.exec('CREATE TABLE events (id INTEGER PRIMARY KEY, ts TEXT NOT NULL, kind TEXT NOT NULL, value REAL, payload TEXT)')
  const insert = db.prepare('INSERT INTO events VALUES (?, ?, ?, ?, ?)')
  const kinds = ['page_view', 'click', 'add_to_cart', 'purchase', 'error']
  const start = Date.UTC(2024, 0, 1)
  db.transaction(() => {
    for (let i = 1; i <= rows; i++) {
      const payload = i % 10 === 0 ? null : `{"path":"/products/${i % 97}","session":"${(i * 7919).toString(36).padStart(8, '0')}"}`
      insert.run(i, new Date(start + i * 1500).toISOString(), kinds[i % 5], i % 13 === 0 ? null : (i * 0.37) % 1000, payload)
    }
  })()
  db.close()
}

/**
 * The table as a dataset: better-sqlite3's cursor as it is, a plain iterator
 * read a chunk at a time. BENCH_SOURCE=async wraps it in an async generator
 * instead, as a host with an asynchronous driver would hand rows over.
 */
export function eventsDataset (db: Database.Database): Dataset {
  return {
    name: 'events',
    entities: [{ name: 'events', columns: EVENTS_COLUMNS }],
    rows: (_entity, { limit }) => {
      const rows = db.prepare(limit === undefined ? EVENTS_SELECT : `${EVENTS_SELECT} LIMIT ${limit}`).raw().iterate() as Iterable<unknown[]>
      return process.env.BENCH_SOURCE === 'async' ? (async function * () { yield * rows })() : rows
    }
  }
}
