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
}

/** One row: the values in the order of the entity's columns. */
export type Row = readonly unknown[]

export interface RowsOptions {
  /** at most this many rows; undefined for all */
  limit?: number
  /** aborted when the client goes away: stop reading at the source */
  signal: AbortSignal
}

export interface Dataset {
  /** used for download file names */
  name: string
  entities: readonly Entity[]
  /**
   * Streams one entity's rows, pulled one at a time, so memory stays bounded.
   * An async iterable (an async generator over a driver's cursor), or a plain
   * iterable such as better-sqlite3's `statement.iterate()`: that one is read
   * a chunk (about 64 KB of output) at a time without an await per row, so
   * each of its rows must come without blocking for long.
   */
  rows (entity: string, options: RowsOptions): AsyncIterable<Row> | Iterable<Row>
}

export interface DatasetSource {
  /** The dataset at `ref`, or null when it does not exist (404 `Dataset not found`). */
  getDataset (ref: ResourceRef): Promise<Dataset | null>
}
