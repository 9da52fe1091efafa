import { ByteWriter, ParquetWriter } from 'hyparquet-writer'
import type { Column, Entity } from '../host/dataset-source.js'
import { archiveBody, archiveDownload, archiveFileNames } from './archive.js'
import { MAX_DECIMAL128_PRECISION, isNullable, type PackedBatch } from './column-batch.js'
import { entityBatches } from './entity-batches.js'
import type { SchemaElement } from './parquet-row-group.js'
import { perEntity } from './rows.js'
import type { Download, DownloadFormat, DownloadSpec } from './types.js'

// parquet: one entity as a Parquet file; parquet-zip: one per entity in an
// archive. Written with hyparquet-writer: the main thread reads the rows into
// packed row groups (column-batch.ts), worker threads encode each group
// (parquet-encoders.ts), and the main thread keeps the file's metadata and
// writes the footer. A file cut off midway has no footer, so no reader opens
// it.

export const PARQUET_CONTENT_TYPE = 'application/vnd.apache.parquet'

const CREATED_BY = 'fastify-data-endpoints (hyparquet-writer)'

/** Bytes of a two's complement integer that holds every value of `precision` decimal digits. */
function decimalBytes (precision: number): number {
  const max = 10n ** BigInt(precision) - 1n
  let bytes = 1
  while ((1n << BigInt(8 * bytes - 1)) - 1n < max) bytes++
  return bytes
}

/** The Parquet schema element of a column (docs/formats.md has the table). */
export function parquetElement (column: Column): SchemaElement {
  const base = { name: column.name, repetition_type: isNullable(column) ? 'OPTIONAL' as const : 'REQUIRED' as const }
  switch (column.type) {
    case 'integer': return { ...base, type: 'INT32' }
    case 'bigint': return { ...base, type: 'INT64' }
    case 'float': return { ...base, type: 'DOUBLE' }
    case 'boolean': return { ...base, type: 'BOOLEAN' }
    case 'text': return { ...base, type: 'BYTE_ARRAY', converted_type: 'UTF8', logical_type: { type: 'STRING' } }
    case 'json': return { ...base, type: 'BYTE_ARRAY', converted_type: 'JSON', logical_type: { type: 'JSON' } }
    case 'binary': return { ...base, type: 'BYTE_ARRAY' }
    case 'date': return { ...base, type: 'INT32', converted_type: 'DATE', logical_type: { type: 'DATE' } }
    case 'timestamp': {
      const utc = column.withTimeZone === true
      // The legacy TIMESTAMP_MICROS means UTC-adjusted, so only a zoned column carries it.
      return {
        ...base,
        type: 'INT64',
        ...(utc ? { converted_type: 'TIMESTAMP_MICROS' as const } : {}),
        logical_type: { type: 'TIMESTAMP', isAdjustedToUTC: utc, unit: 'MICROS' }
      }
    }
    case 'decimal': {
      const { precision, scale } = column
      // Wider than DuckDB, Spark and polars hold (they read it as a double):
      // its exact text instead, as in Arrow.
      if (precision > MAX_DECIMAL128_PRECISION) return { ...base, type: 'BYTE_ARRAY', converted_type: 'UTF8', logical_type: { type: 'STRING' } }
      const decimal = { converted_type: 'DECIMAL' as const, precision, scale, logical_type: { type: 'DECIMAL' as const, precision, scale } }
      if (precision <= 9) return { ...base, type: 'INT32', ...decimal }
      if (precision <= 18) return { ...base, type: 'INT64', ...decimal }
      return { ...base, type: 'FIXED_LEN_BYTE_ARRAY', type_length: decimalBytes(precision), ...decimal }
    }
  }
}

export interface ParquetSchemas {
  /** the file's schema, as the footer states it */
  file: SchemaElement[]
  /**
   * The schema the row groups are encoded with: the same but for json
   * columns, which lose their legacy converted type there, since
   * hyparquet-writer would otherwise turn the JSON text it is given into
   * JSON text again.
   */
  encoding: SchemaElement[]
}

export const parquetSchemas = perEntity((entity: Entity): ParquetSchemas => {
  const root: SchemaElement = { name: 'schema', num_children: entity.columns.length }
  const file = [root, ...entity.columns.map(parquetElement)]
  const encoding = file.map((e) => (e.converted_type === 'JSON' ? { ...e, converted_type: undefined } : e))
  return { file, encoding }
})

/** What the writer wrote since last asked, as a Buffer of its own. */
function takeBytes (writer: ByteWriter): Buffer {
  const bytes = Buffer.from(writer.getBuffer())
  writer.index = 0
  return bytes
}

/** One entity as a Parquet file, a row group at a time. */
export async function * parquetFile (spec: DownloadSpec, entity: Entity): AsyncGenerator<Buffer> {
  const { file: fileSchema, encoding } = parquetSchemas(entity)
  const { encoders, batchBytes, codec } = spec.columnar
  // Writes the magic at the start, then only the footer: the groups' bytes
  // come from the workers, and only its offset counts them.
  const writer = new ByteWriter()
  const file = new ParquetWriter({ writer, schema: fileSchema, codec, createdBy: CREATED_BY })
  yield takeBytes(writer)
  // Each batch is copied to a worker thread, so the next is packed into the
  // same buffers: while a group is encoded there, the next one's rows are
  // read and packed here, so that one download keeps both threads busy. A
  // client that stops reading holds the group it was sent and the packed
  // buffers, which the download holds anyway.
  const batches = entityBatches(spec, entity, batchBytes, true)
  let packing: Promise<IteratorResult<PackedBatch>> | null = null
  let release: (() => void) | null = null
  try {
    // A slot before the first rows are read: slots bound the groups in memory.
    release = await encoders.acquire(spec.responseStarted, spec.abort.signal)
    let next = await batches.next()
    while (next.done !== true) {
      release ??= await encoders.acquire(spec.responseStarted, spec.abort.signal)
      let copied!: () => void
      const sent = new Promise<void>((resolve) => { copied = resolve })
      const encoded = encoders.encode({ schema: encoding, batch: next.value, offset: writer.offset, codec }, copied)
      await Promise.race([sent, encoded])
      packing = batches.next()
      packing.catch(() => {}) // awaited below, or in finally: never an unhandled rejection
      const group = await encoded
      release()
      release = null
      writer.offset += group.bytes.length
      file.row_groups.push(group.rowGroup)
      file.num_rows += group.rowGroup.num_rows
      file.pendingIndexes.push(...group.indexes)
      yield Buffer.from(group.bytes.buffer, group.bytes.byteOffset, group.bytes.byteLength)
      next = await packing
      packing = null
    }
  } finally {
    release?.()
    await packing?.catch(() => {})
    await batches.return(undefined)
  }
  void file.finish()
  yield takeBytes(writer)
}

/** `parquet`: one entity (the query has checked there is one). */
export const parquetFormat: DownloadFormat = (spec): Download => {
  const entity = oneEntity(spec, 'parquet')
  return {
    contentType: PARQUET_CONTENT_TYPE,
    fileName: `${archiveFileNames([entity])[0]}.parquet`,
    body: parquetFile(spec, entity)
  }
}

/** `parquet-zip`: `<entity>.parquet` per entity; stored, not compressed again, in a zip. */
export const parquetZipFormat: DownloadFormat = (spec) => {
  const names = archiveFileNames(spec.entities)
  const entries = spec.entities.map((entity, i) => ({
    name: `${names[i]}.parquet`,
    stored: true,
    content: () => parquetFile(spec, entity)
  }))
  return archiveDownload(spec, 'parquet', archiveBody(entries, spec))
}

/** The one entity of a one-entity format. */
export function oneEntity (spec: DownloadSpec, format: string): Entity {
  if (spec.entities.length !== 1) throw new Error(`${format} holds one entity, and the download has ${spec.entities.length}`)
  return spec.entities[0]
}
