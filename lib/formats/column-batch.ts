import type { Column, Entity, Row } from '../host/dataset-source.js'
import {
  ValueError, binaryValue, booleanValue, columnError, dateText, decimalText, floatValue, integerValue, jsonText,
  textValue, timestampText, toBigint
} from './values.js'

// Rows of one entity packed column by column into typed buffers, as Parquet
// and Arrow store them: the columnar formats' common first step. Each value
// goes through the same checks as in every other format (values.ts), so a
// value a column cannot hold fails with the entity and column named, and a
// NULL in a column the model declares NOT NULL fails too (Parquet's REQUIRED
// and Arrow's non-nullable fields cannot hold one). The buffers are laid out
// as Arrow lays them out (validity bitmaps LSB first, offsets into one data
// buffer), so Arrow takes them as they are, and a worker thread gets them in
// one copy each.

/** How a column's values are held. */
export type PackedKind =
  | 'int32' // integer: Int32Array
  | 'int64' // bigint: BigInt64Array
  | 'float64' // float: Float64Array
  | 'bool' // boolean: a bitmap
  | 'date32' // date: days since 1970-01-01, Int32Array
  | 'timestamp' // timestamp: microseconds since 1970-01-01 (UTC, or the wall clock without a zone), BigInt64Array
  | 'decimal128' // decimal(p,s), p <= 38: the unscaled value, 128-bit two's complement little-endian, 4 words in a Uint32Array
  | 'decimal-text' // decimal(p,s), p > 38: its exact text ('-12.30'), offsets + UTF-8
  | 'utf8' // text and json: offsets + UTF-8
  | 'binary' // binary: offsets + bytes

/** Widest decimal held as a 128-bit integer: 10^38 - 1 < 2^127. */
export const MAX_DECIMAL128_PRECISION = 38

export function packedKind (column: Column): PackedKind {
  switch (column.type) {
    case 'integer': return 'int32'
    case 'bigint': return 'int64'
    case 'float': return 'float64'
    case 'boolean': return 'bool'
    case 'date': return 'date32'
    case 'timestamp': return 'timestamp'
    case 'decimal': return column.precision <= MAX_DECIMAL128_PRECISION ? 'decimal128' : 'decimal-text'
    case 'text': case 'json': return 'utf8'
    case 'binary': return 'binary'
  }
}

/** Whether the model lets the column hold NULL (primary-key columns never do). */
export function isNullable (column: Column): boolean {
  return column.nullable !== false && column.primaryKey !== true
}

export interface PackedColumn {
  kind: PackedKind
  /** a bit per row, LSB first, set where there is a value; null when the column has no NULL in this batch */
  validity: Uint8Array | null
  nullCount: number
  /**
   * Fixed-width values (a slot per row, NULL rows zero): Int32Array,
   * BigInt64Array, Float64Array, Uint32Array (4 words per decimal), or the
   * bitmap of a boolean column; for variable-width kinds, the data bytes.
   */
  values: Int32Array | BigInt64Array | Float64Array | Uint32Array | Uint8Array
  /** variable-width kinds: rows + 1 offsets into `values`; else null */
  offsets: Int32Array | null
}

export interface PackedBatch {
  rows: number
  columns: PackedColumn[]
}

/** Whether row `i` of a column holds a value. */
export function isValid (column: PackedColumn, i: number): boolean {
  return column.validity === null || (column.validity[i >> 3] & (1 << (i & 7))) !== 0
}

const INITIAL_ROWS = 1024
const MS_PER_DAY = 86_400_000

function grownBytes (old: Uint8Array, needed: number): Uint8Array<ArrayBuffer> {
  const next = new Uint8Array(Math.max(old.length * 2, needed))
  next.set(old)
  return next
}

/** Text to UTF-8 at the end of a growing buffer. */
class ByteData {
  bytes: Uint8Array<ArrayBuffer>
  length = 0
  private buffer: Buffer

  constructor (size: number) {
    this.bytes = new Uint8Array(Math.max(1024, size))
    this.buffer = Buffer.from(this.bytes.buffer)
  }

  writeText (s: string): void {
    // At most 3 bytes per UTF-16 unit.
    if (this.length + s.length * 3 > this.bytes.length) this.grow(this.length + s.length * 3)
    this.length += this.buffer.write(s, this.length, 'utf8')
  }

  writeBytes (b: Uint8Array): void {
    if (this.length + b.length > this.bytes.length) this.grow(this.length + b.length)
    this.bytes.set(b, this.length)
    this.length += b.length
  }

  private grow (needed: number): void {
    this.bytes = grownBytes(this.bytes, needed)
    this.buffer = Buffer.from(this.bytes.buffer)
  }
}

/** One column's values as they are packed, row by row. */
abstract class ColumnPacker {
  rows = 0
  nulls = 0
  protected validity: Uint8Array | null = null
  protected capacity: number

  constructor (readonly kind: PackedKind, private readonly nullable: boolean, rows: number) {
    this.capacity = rows
  }

  /** Appends one value; throws a ValueError for one the column cannot hold. */
  push (value: unknown): void {
    if (this.rows === this.capacity) this.growTo(this.capacity * 2)
    if (!this.pushValue(value, this.rows)) {
      if (!this.nullable) throw new ValueError('NULL in a column that is NOT NULL')
      if (this.validity === null) {
        this.validity = new Uint8Array((this.capacity + 7) >> 3).fill(0xff)
      }
      this.validity[this.rows >> 3] &= ~(1 << (this.rows & 7))
      this.nulls++
    }
    this.rows++
  }

  /** Bytes the values take so far (data bytes for variable-width kinds). */
  abstract get bytes (): number

  /** Data bytes of a variable-width column; 0 for the others. */
  get dataBytes (): number {
    return 0
  }

  /** Writes `value` at `row`; false for NULL (the slot stays zero). */
  protected abstract pushValue (value: unknown, row: number): boolean

  protected growTo (capacity: number): void {
    if (this.validity !== null) {
      const next = new Uint8Array((capacity + 7) >> 3).fill(0xff)
      next.set(this.validity)
      this.validity = next
    }
    this.capacity = capacity
  }

  protected packed (values: PackedColumn['values'], offsets: Int32Array | null = null): PackedColumn {
    const validity = this.validity === null ? null : this.validity.subarray(0, (this.rows + 7) >> 3)
    return { kind: this.kind, validity, nullCount: this.nulls, values, offsets }
  }

  abstract finish (): PackedColumn

  /**
   * Empties the column for the next batch, keeping its buffers: the batch
   * finished before must no longer be needed (it was copied elsewhere).
   */
  reset (): void {
    this.rows = 0
    this.nulls = 0
    this.validity = null
  }
}

type FixedArray = Int32Array | BigInt64Array | Float64Array

class FixedPacker<A extends FixedArray> extends ColumnPacker {
  private values: A

  constructor (
    kind: PackedKind, nullable: boolean, rows: number,
    private readonly make: (length: number) => A,
    private readonly convert: (value: unknown) => A[number] | null
  ) {
    super(kind, nullable, rows)
    this.values = make(rows)
  }

  get bytes (): number {
    return this.rows * this.values.BYTES_PER_ELEMENT
  }

  protected pushValue (value: unknown, row: number): boolean {
    const v = this.convert(value)
    if (v === null) return false
    this.values[row] = v
    return true
  }

  protected override growTo (capacity: number): void {
    const next = this.make(capacity)
    next.set(this.values as never)
    this.values = next
    super.growTo(capacity)
  }

  finish (): PackedColumn {
    return this.packed(this.values.subarray(0, this.rows))
  }
}

class BooleanPacker extends ColumnPacker {
  private bits: Uint8Array<ArrayBuffer> = new Uint8Array((this.capacity + 7) >> 3)

  get bytes (): number {
    return this.rows >> 3
  }

  protected pushValue (value: unknown, row: number): boolean {
    const b = booleanValue(value)
    if (b === null) return false
    if (b) this.bits[row >> 3] |= 1 << (row & 7)
    return true
  }

  protected override growTo (capacity: number): void {
    this.bits = grownBytes(this.bits, (capacity + 7) >> 3)
    super.growTo(capacity)
  }

  finish (): PackedColumn {
    return this.packed(this.bits.subarray(0, (this.rows + 7) >> 3))
  }

  override reset (): void {
    // Bits are only ever set: the last batch's must go.
    this.bits.fill(0, 0, (this.rows + 7) >> 3)
    super.reset()
  }
}

/** decimal(p,s), p <= 38: the unscaled integer in four 32-bit words, least significant first. */
class Decimal128Packer extends ColumnPacker {
  private words = new Uint32Array(this.capacity * 4)
  private readonly text: (value: unknown) => string | null

  constructor (nullable: boolean, rows: number, precision: number, scale: number) {
    super('decimal128', nullable, rows)
    this.text = decimalText(precision, scale)
  }

  get bytes (): number {
    return this.rows * 16
  }

  protected pushValue (value: unknown, row: number): boolean {
    const text = this.text(value)
    if (text === null) return false
    const digits = text.replace('.', '')
    const at = row * 4
    if (digits.length <= 15) {
      // Fewer than 16 digits are within 2^53 (a sign counts as one): the
      // words come from the number itself, with no BigInt.
      const n = Number(digits)
      this.words[at] = n >>> 0
      this.words[at + 1] = Math.floor(n / 4294967296) >>> 0
      this.words[at + 2] = this.words[at + 3] = n < 0 ? 0xffffffff : 0
    } else {
      let n = BigInt.asUintN(128, BigInt(digits))
      for (let i = 0; i < 4; i++, n >>= 32n) this.words[at + i] = Number(n & 0xffffffffn)
    }
    return true
  }

  protected override growTo (capacity: number): void {
    const next = new Uint32Array(capacity * 4)
    next.set(this.words)
    this.words = next
    super.growTo(capacity)
  }

  finish (): PackedColumn {
    return this.packed(this.words.subarray(0, this.rows * 4))
  }
}

/** text, json, binary and wide decimals: offsets into one byte buffer. */
class VariablePacker extends ColumnPacker {
  private offsets = new Int32Array(this.capacity + 1)
  private readonly data: ByteData

  constructor (
    kind: PackedKind, nullable: boolean, rows: number, dataBytes: number,
    private readonly write: (value: unknown, data: ByteData) => boolean
  ) {
    super(kind, nullable, rows)
    this.data = new ByteData(dataBytes)
  }

  get bytes (): number {
    return this.data.length + this.rows * 4
  }

  override get dataBytes (): number {
    return this.data.length
  }

  protected pushValue (value: unknown, row: number): boolean {
    const written = this.write(value, this.data)
    if (this.data.length > 0x7fffffff) throw new ValueError('more than 2 GiB of values in one batch')
    this.offsets[row + 1] = this.data.length
    return written
  }

  protected override growTo (capacity: number): void {
    const next = new Int32Array(capacity + 1)
    next.set(this.offsets)
    this.offsets = next
    super.growTo(capacity)
  }

  finish (): PackedColumn {
    return this.packed(this.data.bytes.subarray(0, this.data.length), this.offsets.subarray(0, this.rows + 1))
  }

  override reset (): void {
    this.data.length = 0
    super.reset()
  }
}

function textWriter (text: (value: unknown) => string | null): (value: unknown, data: ByteData) => boolean {
  return (value, data) => {
    const s = text(value)
    if (s === null) return false
    data.writeText(s)
    return true
  }
}

const DATE_PREFIX = /^[0-9]{4}-/

/** Days since 1970-01-01 of a checked 'YYYY-MM-DD' (Date.parse reads a date alone as UTC). */
function dateDays (value: unknown): number | null {
  const text = dateText(value)
  if (text === null) return null
  return Date.parse(text) / MS_PER_DAY
}

/**
 * Microseconds since 1970-01-01 of a checked timestamp: UTC for a zoned
 * column, the wall clock as it stands for one without a zone (Parquet's
 * isAdjustedToUTC=false, Arrow's timestamp without a time zone).
 */
export function timestampMicros (withTimeZone: boolean): (value: unknown) => bigint | null {
  const text = timestampText(withTimeZone)
  return (value) => {
    const s = text(value)
    if (s === null) return null
    // 'YYYY-MM-DDTHH:MM:SS.fff' then up to three more digits, then 'Z' when zoned.
    const ms = Date.parse(s.slice(0, 23) + 'Z')
    if (Number.isNaN(ms) || !DATE_PREFIX.test(s)) throw new ValueError('a timestamp column needs a Date or ISO 8601 text')
    const extra = s.slice(23, withTimeZone ? -1 : undefined)
    return BigInt(ms) * 1000n + (extra === '' ? 0n : BigInt(extra.padEnd(3, '0')))
  }
}

/**
 * How large to make a column's buffers at first: the size of the last
 * batch, when there was one, so that a batch rarely grows its buffers (each
 * growth is a new buffer and a copy, and garbage for the GC).
 */
export interface BatchSizeHint {
  rows: number
  /** data bytes of each column (variable-width kinds) */
  dataBytes: readonly number[]
}

function packerFor (column: Column, rows: number, dataBytes: number): ColumnPacker {
  const nullable = isNullable(column)
  switch (column.type) {
    case 'integer': return new FixedPacker('int32', nullable, rows, (n) => new Int32Array(n), integerValue)
    case 'bigint': return new FixedPacker('int64', nullable, rows, (n) => new BigInt64Array(n), toBigint)
    case 'float': return new FixedPacker('float64', nullable, rows, (n) => new Float64Array(n), floatValue)
    case 'date': return new FixedPacker('date32', nullable, rows, (n) => new Int32Array(n), dateDays)
    case 'timestamp': return new FixedPacker('timestamp', nullable, rows, (n) => new BigInt64Array(n), timestampMicros(column.withTimeZone === true))
    case 'boolean': return new BooleanPacker('bool', nullable, rows)
    case 'decimal':
      return column.precision <= MAX_DECIMAL128_PRECISION
        ? new Decimal128Packer(nullable, rows, column.precision, column.scale)
        : new VariablePacker('decimal-text', nullable, rows, dataBytes, textWriter(decimalText(column.precision, column.scale)))
    case 'text': return new VariablePacker('utf8', nullable, rows, dataBytes, textWriter(textValue(column.maxLength)))
    case 'json': return new VariablePacker('utf8', nullable, rows, dataBytes, textWriter(jsonText))
    case 'binary': return new VariablePacker('binary', nullable, rows, dataBytes, (value, data) => {
      const b = binaryValue(value)
      if (b === null) return false
      data.writeBytes(b)
      return true
    })
  }
}

/** One batch of an entity's rows being packed; `bytes` tells when it is full. */
export class BatchPacker {
  private readonly packers: ColumnPacker[]

  constructor (private readonly entity: Entity, hint?: BatchSizeHint) {
    // A little over the last batch's size: the next one often has a few more rows.
    const rows = hint === undefined ? INITIAL_ROWS : Math.max(INITIAL_ROWS, Math.ceil(hint.rows * 1.1))
    this.packers = entity.columns.map((c, i) => packerFor(c, rows, hint === undefined ? 64 * 1024 : Math.ceil((hint.dataBytes[i] ?? 0) * 1.1)))
  }

  /** The sizes of this batch, for the next. */
  get sizeHint (): BatchSizeHint {
    return { rows: this.rows, dataBytes: this.packers.map((p) => p.dataBytes) }
  }

  get rows (): number {
    return this.packers[0].rows
  }

  /** Bytes of values packed so far, the measure of a row group or record batch. */
  get bytes (): number {
    let sum = 0
    for (const p of this.packers) sum += p.bytes
    return sum
  }

  /** Appends a row; throws an error naming the entity and column for a value its column cannot hold. */
  push (row: Row): void {
    const { packers } = this
    let i = 0
    try {
      for (; i < packers.length; i++) packers[i].push(row[i])
    } catch (err) {
      throw columnError(this.entity.name, this.entity.columns[i].name, err)
    }
  }

  finish (): PackedBatch {
    return { rows: this.rows, columns: this.packers.map((p) => p.finish()) }
  }

  /** Empties the batch for the next, in the same buffers (see ColumnPacker.reset). */
  reset (): void {
    for (const p of this.packers) p.reset()
  }
}
