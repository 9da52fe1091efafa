// What the host implements to serve datasets. The plugin asks for a dataset by
// its location, then streams each entity's rows through the chosen format.

/** Where a dataset or pipeline sits in the host's product. */
export interface ResourceRef {
  organization: string
  project: string
  modelSequence: number
  resourceSequence: number
}

/**
 * Logical column types. Each format maps them to its own representation
 * (README, "Formats"). The values a row may hold for each type; a value the
 * column cannot hold fails the download with a message naming the column:
 * - integer: a 32-bit integer (number, bigint or digit text); larger: bigint
 * - bigint: a 64-bit integer: bigint, safe-integer number or digit text
 * - decimal(p,s): decimal text (exact) or a number; at most s fraction and
 *   p - s integer digits (refused, never rounded); written with s digits
 * - float: number (NaN and ±Infinity are written as NULL)
 * - text (maxLength: varchar(n), n in characters): string
 * - boolean: boolean, 0/1, or 't'/'f'/'true'/'false'/'1'/'0'
 * - date: 'YYYY-MM-DD' text or a Date (its UTC date)
 * - timestamp: a Date or ISO 8601 text, to the microsecond; written in UTC
 *   (text without an offset is taken as it stands)
 * - binary: Uint8Array (Buffer) or ArrayBuffer; json: any JSON value
 * - dates and timestamps: years 1 to 9999
 * - any type: null or undefined for NULL
 */
export type ColumnType =
  | { type: 'integer' }
  | { type: 'bigint' }
  | { type: 'decimal', precision: number, scale: number }
  | { type: 'float' }
  | { type: 'text', maxLength?: number }
  | { type: 'boolean' }
  | { type: 'date' }
  | { type: 'timestamp', withTimeZone?: boolean }
  | { type: 'binary' }
  | { type: 'json' }

export type Column = ColumnType & {
  /** unique in its entity, case-insensitively; not empty */
  name: string
  /** defaults to true (primary-key columns are NOT NULL regardless) */
  nullable?: boolean
  primaryKey?: boolean
}

export interface Entity {
  name: string
  columns: readonly Column[]
  /**
   * Optional: which consumer parameters (`columns`, `where`, `since`) this
   * entity's `rows()` honours. Without it each of them answers 400
   * `Invalid <name>: not supported by this dataset`: never ignored.
   */
  consumer?: ConsumerSupport
}

/** What an entity's `rows()` does with the options the consumer parameters fill in. */
export interface ConsumerSupport {
  /** `rows()` honours `options.columns`: `columns=` is accepted */
  columns?: boolean
  /**
   * The columns a `where` may name (those you can filter fast: indexed, or a
   * small table); `rows()` honours `options.filters`. Not binary nor json.
   */
  filters?: readonly string[]
  /**
   * The change column: `since=` is accepted, `rows()` honours
   * `options.since` and `options.changesUntil`, and the dataset has
   * `changesUntil()`. `version`: an integer or bigint column whose values only
   * grow with each write (a sequence, an append-only id); `timestamp`: a
   * timestamp column set at each write (see docs/host-interfaces.md for what
   * makes it safe).
   */
  changes?: { column: string, kind: 'version' | 'timestamp' }
}

/** A value of a condition or of `since`, as the plugin typed it from the column's model type. */
export type FilterValue =
  /** integer and float columns */
  | number
  /** bigint columns */
  | bigint
  /** text; decimal as exact canonical text ('-12.30', scale digits); date as 'YYYY-MM-DD' */
  | string
  | boolean
  /** timestamp columns (to the millisecond) */
  | Date

export type ComparisonOperator = '=' | '!=' | '<' | '<=' | '>' | '>='

/**
 * One condition of `where`, parsed by the plugin. `column` is the name from
 * the model (never the request's text); values are typed by the column.
 * A row matches when every condition holds (SQL's semantics: a NULL value
 * matches no comparison and no `in`).
 */
export type Condition =
  | { column: string, op: ComparisonOperator, value: FilterValue }
  | { column: string, op: 'in', value: readonly FilterValue[] }
  | { column: string, op: 'is null' | 'is not null', value: null }

/** A value of a change column: a number or bigint for `version`, a Date for `timestamp`. */
export type ChangeValue = number | bigint | Date

/** One row: the values in the order of the entity's columns. */
export type Row = readonly unknown[]

export interface RowsOptions {
  /** at most this many rows; undefined for all */
  limit?: number
  /**
   * Aborted when the client goes away: stop reading at the source. An async
   * iterable needs it to stop a read that is waiting on its driver. A plain
   * iterable can leave it unread: the plugin stops pulling and calls its
   * iterator's `return()` (and makes no signal that is never read).
   */
  signal: AbortSignal
  /**
   * Set only for an entity whose `consumer.columns` is true, when the
   * consumer chose columns: their names (from the model), in the order the
   * rows must hold their values. The primary key is not added.
   */
  columns?: readonly string[]
  /** Set only for an entity with `consumer.filters`: every row must meet all of them. */
  filters?: readonly Condition[]
  /** Set only for an entity with `consumer.changes`: only rows whose change column is greater. */
  since?: ChangeValue
  /**
   * Set on every read of an entity with `consumer.changes` (when its
   * `changesUntil()` gave a value): only rows whose change column is at most
   * this. It is the `Data-Changes-Until` the consumer passes as the next
   * `since`, so rows written during this download come in the next one.
   */
  changesUntil?: ChangeValue
}

export interface Dataset {
  /** used for download file names */
  name: string
  /**
   * Taken as unchanging once seen: the plugin checks a list once and builds
   * each entity's row writers once per Entity object. A model that changes
   * comes as new objects (as a Dataset made anew has them).
   */
  entities: readonly Entity[]
  /**
   * Streams one entity's rows, pulled one at a time, so memory stays bounded.
   *
   * Recommended, for a driver that reads synchronously (better-sqlite3):
   * return a plain iterable over a prepared statement that is reused, as
   * examples/sample-datasets.ts does. Make the `Dataset` once, not per
   * request, prepare each entity's SELECT once, with `LIMIT ?` bound to
   * `limit`, and keep the statements in a small pool per entity. A statement
   * that is still iterating cannot serve a second download ("This statement is
   * busy executing a query"), so take one from the pool when the iteration
   * starts and give it back in a `finally` when it ends, completed or returned
   * early; bound the pool's idle size. A plain iterable is read a chunk (about
   * 64 KB of output) at a time with no await per row, so each of its rows must
   * come without blocking for long; when the client leaves or `limit` is
   * reached the plugin calls the iterator's `return()`. An array is a plain
   * iterable too: an entity of a few rows costs least read whole in one call
   * (`statement.all()`), since each step of a driver's iterator costs more
   * than a row; stream the larger ones.
   *
   * An async iterable (an async generator over a driver's cursor, as with
   * pg) also works, at the cost of a promise and a microtask turn per row.
   * For a small download that cost, with a statement prepared per call, can
   * outweigh all of the plugin's own work (69% of the CPU of an
   * authenticated 2.6 KB json download went to such a source), so use it
   * only for a driver that must wait, and keep the per-call work out of it.
   */
  rows (entity: string, options: RowsOptions): AsyncIterable<Row> | Iterable<Row>
  /**
   * Set when `rows()` gives the same rows, in the same order, every time it
   * is called for the same entity and limit during a download (a snapshot,
   * or data that does not change meanwhile). A tar download then reads each
   * entity twice, once to measure it (a tar header carries the size) and
   * once to send it, instead of holding it in the tar spool: no disk, no
   * spool budget, no 503 for a large entity, at twice the reading. If the
   * second read is longer or shorter than the first, the download fails as
   * an incomplete response, never a tar whose header lies.
   */
  repeatable?: true
  /**
   * Optional: a string that changes whenever the dataset's data or model
   * changes (a version number, a last-modified time, a content hash). With
   * it, downloads carry a weak `ETag` made of the revision, the endpoint and
   * the query parameters that shape the body, so a client that sends it back
   * in `If-None-Match` gets 304 with no body until the revision changes, and
   * small downloads are kept rendered in memory (`renderedBodyCacheBytes`).
   * A revision that stays the same while the rows change serves stale data:
   * leave it unset when you cannot say.
   */
  revision?: string
  /**
   * Needed when an entity declares `consumer.changes`: the greatest value of
   * its change column now (null when it has no rows), read before its rows
   * are. The plugin calls it once per download of that entity, before
   * reading, sends it as `Data-Changes-Until` and passes it to `rows()` as
   * `changesUntil`.
   */
  changesUntil? (entity: string): ChangeValue | null | Promise<ChangeValue | null>
}

/** A dataset or pipeline of a project, by its place and its name, for pickers and listings. */
export interface ResourceSummary {
  modelSequence: number
  resourceSequence: number
  name: string
}

export interface DatasetSource {
  /**
   * The dataset at `ref`, or null when it does not exist (404 `Dataset not
   * found`). A source that has it at hand answers without a promise: the
   * download then starts at once.
   */
  getDataset (ref: ResourceRef): Dataset | null | Promise<Dataset | null>
  /**
   * Optional: the project's datasets, so that the management page offers
   * them by name and endpoints carry `resourceName`. Without it the page
   * asks for the sequence numbers.
   */
  listResources? (project: { organization: string, project: string }): Promise<ResourceSummary[]>
}
