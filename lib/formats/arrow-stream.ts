import {
  Binary, Bool, DateDay, Decimal, Field, Float64, Int32, Int64, RecordBatch, RecordBatchStreamWriter, Schema, Struct,
  TimeUnit, Timestamp, Utf8, makeData, type DataType
} from 'apache-arrow'
import type { Column, Entity } from '../host/dataset-source.js'
import { MAX_DECIMAL128_PRECISION, isNullable, type PackedBatch, type PackedColumn } from './column-batch.js'
import { entityBatches } from './entity-batches.js'
import { perEntity } from './rows.js'
import type { DownloadSpec } from './types.js'

// The arrow format's writer, written with apache-arrow. Rows are packed on
// the main thread (column-batch.ts), a slice of a few ms at a time; the packed
// buffers are already Arrow's layout, so a record batch is made of them with
// no copy and its message costs about one copy of the batch. apache-arrow's
// writer has no backpressure of its own: a batch is read only when the
// response asks for the next chunk, that is when the socket has drained what
// it had. arrow.ts loads this module on the first arrow download.

/** The Arrow type of a column (docs/formats.md has the table). */
export function arrowType (column: Column): DataType {
  switch (column.type) {
    case 'integer': return new Int32()
    case 'bigint': return new Int64()
    case 'float': return new Float64()
    case 'boolean': return new Bool()
    case 'date': return new DateDay()
    case 'timestamp': return new Timestamp(TimeUnit.MICROSECOND, column.withTimeZone === true ? 'UTC' : null)
    case 'decimal':
      // Wider decimals go as their exact text, as in Parquet: few readers take Decimal256.
      return column.precision <= MAX_DECIMAL128_PRECISION ? new Decimal(column.scale, column.precision, 128) : new Utf8()
    case 'text': case 'json': return new Utf8()
    case 'binary': return new Binary()
  }
}

export const arrowSchema = perEntity((entity: Entity): Schema => new Schema(
  entity.columns.map((c) => new Field(c.name, arrowType(c), isNullable(c)))
))

function columnData (type: DataType, column: PackedColumn, length: number) {
  const common = { type, length, nullCount: column.nullCount, nullBitmap: column.validity ?? undefined }
  if (column.offsets !== null) {
    return makeData({ ...common, valueOffsets: column.offsets, data: column.values as Uint8Array } as never)
  }
  return makeData({ ...common, data: column.values } as never)
}

function recordBatch (schema: Schema, batch: PackedBatch): RecordBatch {
  const children = batch.columns.map((column, i) => columnData(schema.fields[i].type, column, batch.rows))
  return new RecordBatch(schema, makeData({ type: new Struct(schema.fields), length: batch.rows, nullCount: 0, children }))
}

/** Chunks shorter than this are joined to their neighbours, so a batch goes out in a few writes. */
const SMALL_CHUNK = 64 * 1024

/**
 * A stream writer whose bytes are taken as they are written, instead of
 * queued without a bound. A batch's body buffers are handed on as they are,
 * not copied: the response then holds the batch, and nothing else does.
 */
class TakenStreamWriter extends RecordBatchStreamWriter {
  #chunks: Uint8Array[] = []

  protected override _write (chunk: ArrayBufferView): this {
    if (this._started && chunk.byteLength > 0) {
      this.#chunks.push(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength))
      this._position += chunk.byteLength
    }
    return this
  }

  /** What was written since last asked: small pieces joined, large ones as they are. */
  take (): Buffer[] {
    const out: Buffer[] = []
    let small: Uint8Array[] = []
    const joinSmall = (): void => {
      if (small.length > 0) out.push(Buffer.concat(small))
      small = []
    }
    for (const chunk of this.#chunks) {
      if (chunk.byteLength < SMALL_CHUNK) {
        small.push(chunk)
      } else {
        joinSmall()
        out.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength))
      }
    }
    joinSmall()
    this.#chunks = []
    return out
  }
}

/** One entity as an Arrow IPC stream: the schema, a message per record batch, then the end marker. */
export async function * arrowStream (spec: DownloadSpec, entity: Entity): AsyncGenerator<Buffer> {
  const schema = arrowSchema(entity)
  const writer = new TakenStreamWriter({ autoDestroy: true })
  writer.reset(undefined, schema)
  yield * writer.take()
  const batches = entityBatches(spec, entity, spec.columnar.batchBytes)
  // The next batch is read only once every piece of the last one was taken.
  const nextBatch = async (): Promise<Buffer[] | null> => {
    const next = await batches.next()
    if (next.done === true) return null
    writer.write(recordBatch(schema, next.value))
    return writer.take()
  }
  try {
    for (let pieces = await nextBatch(); pieces !== null; pieces = await nextBatch()) {
      while (pieces.length > 0) yield pieces.shift() as Buffer
    }
  } finally {
    await batches.return(undefined)
  }
  writer.close()
  yield * writer.take()
}
