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
 * (README, "Formats"). The value a row may hold for each type:
 * - integer: number (safe integer); bigint: bigint, number or decimal string
 * - decimal: string (exact) or number; float: number (NaN and ±Infinity are written as NULL)
 * - text: string; boolean: boolean, or 0/1
 * - date: 'YYYY-MM-DD' string or Date (its UTC date)
 * - timestamp: Date or ISO 8601 string
 * - binary: Uint8Array (Buffer); json: any JSON value
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
  name: string
  /** defaults to true */
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
  /** Streams one entity's rows. Pulled one at a time, so memory stays bounded. */
  rows (entity: string, options: RowsOptions): AsyncIterable<Row>
}

export interface DatasetSource {
  /** The dataset at `ref`, or null when it does not exist (404 `Dataset not found`). */
  getDataset (ref: ResourceRef): Promise<Dataset | null>
}
