import zlib from 'node:zlib'
import { ByteWriter, ParquetWriter } from 'hyparquet-writer'
import type { ColumnSource } from 'hyparquet-writer'
import { isValid, type PackedBatch, type PackedColumn } from './column-batch.js'

// Encodes one Parquet row group: the CPU-heavy part of a Parquet download,
// run in a worker thread (parquet-encoders.ts). It needs no state of the
// file besides the offset the group starts at, so any worker can take any
// download's next group; the main thread keeps the file's metadata and
// writes the footer (parquet.ts).

export type ParquetCodec = 'SNAPPY' | 'ZSTD' | 'UNCOMPRESSED'
/** The `parquetCompression` option's values, as Parquet names the codecs. */
export const PARQUET_CODECS = { snappy: 'SNAPPY', zstd: 'ZSTD', none: 'UNCOMPRESSED' } as const satisfies Record<string, ParquetCodec>
export type SchemaElement = ParquetWriter['schema'][number]
export type RowGroup = ParquetWriter['row_groups'][number]

export interface RowGroupJob {
  /** the schema as the columns are encoded (see encodingSchema in parquet.ts) */
  schema: SchemaElement[]
  batch: PackedBatch
  /** where the group starts in the file */
  offset: number
  codec: ParquetCodec
}

/** Page locations and statistics of a column chunk, written at the end of the file. */
export type PageIndexes = ParquetWriter['pendingIndexes'][number]

export interface EncodedRowGroup {
  bytes: Uint8Array
  rowGroup: RowGroup
  indexes: PageIndexes[]
}

/** Whether this runtime compresses Zstandard (Node 22.15 and later). */
export function zstdAvailable (): boolean {
  return typeof (zlib as { zstdCompressSync?: unknown }).zstdCompressSync === 'function'
}

function zstdCompress (input: Uint8Array): Uint8Array {
  const compress = (zlib as unknown as { zstdCompressSync: (input: Uint8Array) => Buffer }).zstdCompressSync
  const out = compress(input)
  return new Uint8Array(out.buffer, out.byteOffset, out.byteLength)
}

/** A column's values as hyparquet-writer takes them: a typed array when it has no NULL, else an array with nulls. */
function columnValues (column: PackedColumn, element: SchemaElement, rows: number): ColumnSource['data'] {
  const { values, offsets } = column
  switch (column.kind) {
    case 'int32': case 'date32': case 'float64': case 'int64': case 'timestamp': {
      const fixed = values as Int32Array | Float64Array | BigInt64Array
      if (column.validity === null) return fixed
      return Array.from({ length: rows }, (_, i) => (isValid(column, i) ? fixed[i] : null))
    }
    case 'bool': {
      const bits = values as Uint8Array
      return Array.from({ length: rows }, (_, i) => (isValid(column, i) ? (bits[i >> 3] & (1 << (i & 7))) !== 0 : null))
    }
    case 'utf8': case 'binary': case 'decimal-text': {
      const data = values as Uint8Array
      const ends = offsets as Int32Array
      return Array.from({ length: rows }, (_, i) => (isValid(column, i) ? data.subarray(ends[i], ends[i + 1]) : null))
    }
    case 'decimal128': {
      const words = values as Uint32Array
      // INT32 for precision up to 9, INT64 up to 18, else a fixed-length byte array (up to 38).
      const physical = element.type
      return Array.from({ length: rows }, (_, i) => {
        if (!isValid(column, i)) return null
        const at = i * 4
        // Always a bigint: hyparquet-writer scales a number by 10^scale itself.
        if (physical === 'INT32') return BigInt(words[at] | 0)
        const low = (BigInt(words[at + 1]) << 32n) | BigInt(words[at])
        if (physical === 'INT64') return BigInt.asIntN(64, low)
        return BigInt.asIntN(128, (((BigInt(words[at + 3]) << 32n) | BigInt(words[at + 2])) << 64n) | low)
      })
    }
  }
}

/**
 * Integers, dates and timestamps (not decimals) are written DELTA_BINARY_PACKED:
 * ids and times that grow row by row then take a few bytes a page instead of
 * 4 or 8 a value (measured: 1M events rows 42% smaller, and encoded faster).
 * DuckDB, pyarrow, polars and Spark 3.3+ read it.
 */
function isDeltaEncoded (element: SchemaElement): boolean {
  return (element.type === 'INT32' || element.type === 'INT64') && element.converted_type !== 'DECIMAL'
}

export function encodeRowGroup (job: RowGroupJob): EncodedRowGroup {
  const { schema, batch, offset, codec } = job
  const writer = new ByteWriter(1024 * 1024)
  const parquet = new ParquetWriter({
    writer,
    schema,
    codec,
    compressors: codec === 'ZSTD' ? { ZSTD: zstdCompress } : undefined
  })
  // The writer wrote the file's magic; the group is written as if the file
  // so far had `offset` bytes, so its offsets are the file's.
  writer.index = 0
  writer.offset = offset
  const leaves = schema.slice(1)
  const columnData: ColumnSource[] = batch.columns.map((column, i) => ({
    name: leaves[i].name,
    data: columnValues(column, leaves[i], batch.rows),
    ...(isDeltaEncoded(leaves[i]) ? { encoding: 'DELTA_BINARY_PACKED' as const } : {})
  }))
  void parquet.write({ columnData, rowGroupSize: batch.rows })
  const rowGroup = parquet.row_groups[0]
  const indexes = parquet.pendingIndexes
  trimViews([rowGroup, indexes], new Set())
  // A copy of the exact length: the writer's buffer has room to spare.
  return { bytes: new Uint8Array(writer.getBuffer()), rowGroup, indexes }
}

/**
 * Replaces every byte view in the metadata that shares a larger buffer
 * (statistics' min and max point into the page being written) with a copy
 * of its own. Sending a view to another thread sends its whole buffer: a
 * 40-byte maximum carried 4 MiB along with every row group.
 */
function trimViews (value: unknown, seen: Set<object>): void {
  if (typeof value !== 'object' || value === null || seen.has(value)) return
  seen.add(value)
  const object = value as Record<string, unknown>
  for (const key of Object.keys(object)) {
    const item = object[key]
    if (item instanceof Uint8Array) {
      if (item.byteLength !== item.buffer.byteLength) object[key] = item.slice()
    } else {
      trimViews(item, seen)
    }
  }
}
