import type { Column } from '../dataset-source.js'

// Normalises the values a dataset source may hand us (see ColumnType) into the
// canonical forms the formats write. Each returns null for NULL.

function pad (n: number, width = 2): string {
  return String(n).padStart(width, '0')
}

/** 'YYYY-MM-DD' (years beyond 9999 or before 0 keep their sign and digits). */
export function isoDate (value: unknown): string | null {
  if (value === null || value === undefined) return null
  if (value instanceof Date) {
    const y = value.getUTCFullYear()
    const year = y < 0 ? '-' + pad(-y, 6) : y > 9999 ? '+' + pad(y, 6) : pad(y, 4)
    return `${year}-${pad(value.getUTCMonth() + 1)}-${pad(value.getUTCDate())}`
  }
  return String(value)
}

/** ISO 8601 in UTC with milliseconds, as Date#toISOString writes it. */
export function isoTimestamp (value: unknown): string | null {
  if (value === null || value === undefined) return null
  if (value instanceof Date) return value.toISOString()
  const parsed = new Date(String(value))
  return Number.isNaN(parsed.getTime()) ? String(value) : parsed.toISOString()
}

/** Exact decimal text for bigint and decimal columns. */
export function exactNumber (value: unknown): string | null {
  if (value === null || value === undefined) return null
  if (typeof value === 'number' && !Number.isFinite(value)) return null
  return String(value)
}

export function finiteFloat (value: unknown): number | null {
  if (value === null || value === undefined) return null
  const n = Number(value)
  return Number.isFinite(n) ? n : null
}

export function booleanValue (value: unknown): boolean | null {
  if (value === null || value === undefined) return null
  return value === true || value === 1 || value === '1' || value === 't' || value === 'true'
}

export function binaryValue (value: unknown): Buffer | null {
  if (value === null || value === undefined) return null
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength)
  return Buffer.from(String(value), 'utf8')
}

export function textValue (value: unknown): string | null {
  if (value === null || value === undefined) return null
  return typeof value === 'string' ? value : String(value)
}

/** The JSON value a column's value becomes in the `json` and `json-zip` formats. */
export function jsonValueOf (column: Column): (value: unknown) => unknown {
  switch (column.type) {
    case 'integer': return (v) => (v === null || v === undefined ? null : Number(v))
    case 'bigint':
    case 'decimal': return exactNumber
    case 'float': return finiteFloat
    case 'boolean': return booleanValue
    case 'date': return isoDate
    case 'timestamp': return isoTimestamp
    case 'binary': return (v) => binaryValue(v)?.toString('base64') ?? null
    case 'json': return (v) => (v === undefined ? null : v)
    case 'text': return textValue
  }
}
