import type { Column } from '../host/dataset-source.js'

// Turns the values a dataset source may hand over (see ColumnType) into one
// canonical form per logical type, which every format then writes. Each
// function returns null for NULL and throws a ValueError for a value that the
// column cannot hold, so no format ever writes a value it cannot load back.
// Messages never quote the value: it may be confidential.

export class ValueError extends Error {
  override name = 'ValueError'
}

const INT32_MIN = -2147483648
const INT32_MAX = 2147483647
const INT64_MIN = -(2n ** 63n)
const INT64_MAX = 2n ** 63n - 1n
// 0001-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z: the years every
// target (PostgreSQL, SQLite text, Oracle, ISO 8601 without expansion) shares.
const MIN_TIME = -62135596800000
const MAX_TIME = 253402300799999

const INTEGER_TEXT = /^[+-]?[0-9]+$/

/** integer: a 32-bit signed integer, as a number. */
export function integerValue (value: unknown): number | null {
  if (value === null || value === undefined) return null
  let n: number
  if (typeof value === 'number') n = value
  else if (typeof value === 'bigint') n = Number(value)
  else if (typeof value === 'string' && INTEGER_TEXT.test(value)) n = Number(value)
  else throw new ValueError('an integer column needs an integer')
  if (!Number.isInteger(n)) throw new ValueError('an integer column needs an integer')
  if (n < INT32_MIN || n > INT32_MAX) throw new ValueError('integer out of range (32-bit); use a bigint column')
  return n === 0 ? 0 : n // no -0
}

/** bigint: a 64-bit signed integer, as canonical decimal text. */
export function bigintText (value: unknown): string | null {
  const n = toBigint(value)
  return n === null ? null : n.toString()
}

/** bigint: a 64-bit signed integer, as a bigint. */
export function toBigint (value: unknown): bigint | null {
  if (value === null || value === undefined) return null
  let n: bigint
  if (typeof value === 'bigint') n = value
  else if (typeof value === 'number' && Number.isSafeInteger(value)) n = BigInt(value)
  else if (typeof value === 'string' && INTEGER_TEXT.test(value)) n = BigInt(value)
  else throw new ValueError('a bigint column needs an integer (bigint, safe-integer number or decimal text)')
  if (n < INT64_MIN || n > INT64_MAX) throw new ValueError('bigint out of range (64-bit)')
  return n
}

const DECIMAL_TEXT = /^([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?$/

/**
 * decimal(p,s): exact text with exactly `scale` fraction digits, as
 * PostgreSQL's numeric(p,s) writes it ('-12.30', '0.00'). A value with more
 * fraction digits than the scale, or more integer digits than p - s, is
 * refused rather than rounded.
 */
export function decimalText (precision: number, scale: number): (value: unknown) => string | null {
  const maxIntegerDigits = precision - scale
  return (value) => {
    if (typeof value === 'string' && isCanonicalDecimal(value, maxIntegerDigits, scale)) return value
    if (value === null || value === undefined) return null
    let text: string
    if (typeof value === 'string') text = value.trim()
    else if (typeof value === 'bigint') text = value.toString()
    else if (typeof value === 'number' && Number.isFinite(value)) text = String(value)
    else throw new ValueError('a decimal column needs decimal text or a finite number')
    const m = DECIMAL_TEXT.exec(text)
    if (m === null || (m[2] === '' && (m[3] ?? '') === '')) throw new ValueError('a decimal column needs decimal text or a finite number')
    const exponent = m[4] === undefined ? 0 : Number(m[4])
    if (Math.abs(exponent) > 1000) throw new ValueError(`decimal does not fit precision ${precision}, scale ${scale}`)
    let digits = m[2] + (m[3] ?? '')
    let point = m[2].length + exponent
    // digits[0, point) is the integer part, the rest the fraction.
    if (point < 0) { digits = '0'.repeat(-point) + digits; point = 0 }
    if (point > digits.length) digits += '0'.repeat(point - digits.length)
    const integer = digits.slice(0, point).replace(/^0+/, '')
    const fraction = digits.slice(point).replace(/0+$/, '')
    if (fraction.length > scale) throw new ValueError(`decimal has more than ${scale} fraction digits`)
    if (integer.length > maxIntegerDigits) throw new ValueError(`decimal does not fit precision ${precision}, scale ${scale}`)
    const zero = integer === '' && fraction === ''
    const sign = m[1] === '-' && !zero ? '-' : ''
    return sign + (integer === '' ? '0' : integer) + (scale > 0 ? '.' + fraction.padEnd(scale, '0') : '')
  }
}

/**
 * The fast path: text already in the form decimalText gives ('-12.30',
 * '0.00', '7' at scale 0), checked by character codes. Exact text in a
 * database's numeric column is nearly always so, and the general path's
 * regular expression and slices cost several times this scan per cell.
 */
function isCanonicalDecimal (s: string, maxIntegerDigits: number, scale: number): boolean {
  const negative = s.charCodeAt(0) === DASH
  const start = negative ? 1 : 0
  const point = scale === 0 ? s.length : s.length - scale - 1
  const integerDigits = point - start
  if (integerDigits < 1 || integerDigits > maxIntegerDigits) return false
  if (scale > 0 && s.charCodeAt(point) !== POINT) return false
  let nonZero = false
  for (let i = start; i < s.length; i++) {
    if (i === point) continue
    const d = s.charCodeAt(i) - 48
    if (d < 0 || d > 9) return false
    if (d !== 0) nonZero = true
  }
  // No leading zero ('007'), and no '-0.00': the canonical zero has no sign.
  if (integerDigits > 1 && s.charCodeAt(start) === 48) return false
  return !negative || nonZero
}

/** float: a finite double; NaN and ±Infinity are NULL (they have no portable form). */
export function floatValue (value: unknown): number | null {
  if (value === null || value === undefined) return null
  let n: number
  if (typeof value === 'number') n = value
  else if (typeof value === 'bigint') n = Number(value)
  else if (typeof value === 'string' && value.trim() !== '') n = Number(value)
  else throw new ValueError('a float column needs a number')
  if (Number.isNaN(n) && typeof value === 'string' && value.trim() !== 'NaN') throw new ValueError('a float column needs a number')
  if (!Number.isFinite(n)) return null
  return n === 0 ? 0 : n // -0 has no portable text form
}

/**
 * Shortest text that reads back as the same finite double ('1e+21',
 * '5e-324'): the text String(n) gives. JSON.stringify writes a finite
 * number exactly so, but goes straight to the conversion, where String(n)
 * first probes V8's number-to-string cache: in a download nearly every value
 * is new, and that probe (two cache misses when the CPU caches are full of
 * the stream) cost more than the conversion.
 */
export function floatText (n: number): string {
  return JSON.stringify(n)
}

/** '0' to '999', and '000' to '999': an integer's digits three at a time (integerText). */
const DIGITS = Array.from({ length: 1000 }, (_, i) => String(i))
const PADDED_DIGITS = DIGITS.map((d) => d.padStart(3, '0'))

/**
 * A safe integer's decimal text, what String(n) gives, put together from
 * the tables above. String(n) keeps each text it makes in V8's
 * number-to-string cache, which lives in the old generation: in a download,
 * where nearly every id is new, the cache held thousands of young texts at
 * each collection, and every scavenge copied and promoted them (1M rows of
 * json: 24 MB promoted and 300 ms of scavenges, against 15 MB and 115 ms
 * without it). JSON.stringify(n) avoids the cache but costs a small
 * document more than the cache saves it (docs/benchmarks.md). From 0 to 999 no
 * text is made at all.
 */
export function integerText (n: number): string {
  if (n >= 0 && n < 1000) return DIGITS[n]
  let rest = n < 0 ? -n : n
  let text = ''
  while (rest >= 1000) {
    const low = rest % 1000
    text = PADDED_DIGITS[low] + text
    rest = (rest - low) / 1000 // exact: a multiple of 1000 divided by it
  }
  text = DIGITS[rest] + text
  return n < 0 ? '-' + text : text
}

/** text / varchar(n): a string of at most `maxLength` characters (code points). */
export function textValue (maxLength: number | undefined): (value: unknown) => string | null {
  return (value) => {
    if (value === null || value === undefined) return null
    let s: string
    if (typeof value === 'string') s = value
    else if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') s = String(value)
    else throw new ValueError('a text column needs a string')
    // UTF-16 length bounds the code point count from above: count only when it matters.
    if (maxLength !== undefined && s.length > maxLength && [...s].length > maxLength) {
      throw new ValueError(`text longer than ${maxLength} characters`)
    }
    return s
  }
}

/** boolean: true/false, 1/0, or the text 't', 'f', 'true', 'false', '1', '0'. */
export function booleanValue (value: unknown): boolean | null {
  if (value === null || value === undefined) return null
  switch (value) {
    case true: case 1: case 1n: case '1': case 't': case 'true': return true
    case false: case 0: case 0n: case '0': case 'f': case 'false': return false
  }
  throw new ValueError('a boolean column needs true/false or 1/0')
}

function pad2 (n: number): string {
  return n < 10 ? '0' + n : String(n)
}

function daysInMonth (year: number, month: number): number {
  if (month === 2) return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31
}

function checkDate (year: number, month: number, day: number): void {
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) {
    throw new ValueError('not a calendar date between years 1 and 9999')
  }
}

function timeOf (value: Date): number {
  const ms = value.getTime()
  if (Number.isNaN(ms)) throw new ValueError('invalid Date')
  if (ms < MIN_TIME || ms > MAX_TIME) throw new ValueError('date outside years 1 to 9999')
  return ms
}

const DATE_TEXT = /^([0-9]{4})-([0-9]{2})-([0-9]{2})$/

/** date: 'YYYY-MM-DD' (a Date gives its UTC date), years 1 to 9999. */
export function dateText (value: unknown): string | null {
  if (typeof value === 'string' && value.length === 10 && value.charCodeAt(4) === DASH && value.charCodeAt(7) === DASH &&
    isCalendarDate(value, 0)) return value
  if (value === null || value === undefined) return null
  if (value instanceof Date) {
    timeOf(value)
    return value.toISOString().slice(0, 10)
  }
  const m = typeof value === 'string' ? DATE_TEXT.exec(value) : null
  if (m === null) throw new ValueError("a date column needs a Date or 'YYYY-MM-DD' text")
  checkDate(Number(m[1]), Number(m[2]), Number(m[3]))
  return value as string
}

/** The two decimal digits at s[i] and s[i + 1] as a number, or -1. */
function twoDigits (s: string, i: number): number {
  const tens = s.charCodeAt(i) - 48
  const ones = s.charCodeAt(i + 1) - 48
  return tens >= 0 && tens <= 9 && ones >= 0 && ones <= 9 ? tens * 10 + ones : -1
}

const [DASH, COLON, POINT, LETTER_T, LETTER_Z] = ['-', ':', '.', 'T', 'Z'].map((c) => c.charCodeAt(0))

/**
 * The fast path: exactly 'YYYY-MM-DDTHH:MM:SS.sssZ' (what toISOString and
 * most drivers write) with valid fields, checked without a regular
 * expression. It runs once per timestamp cell, so it reads character codes
 * (no one-character strings) and each field once.
 */
function isCanonicalUtc (s: string): boolean {
  if (s.length !== 24 || s.charCodeAt(4) !== DASH || s.charCodeAt(7) !== DASH || s.charCodeAt(10) !== LETTER_T ||
    s.charCodeAt(13) !== COLON || s.charCodeAt(16) !== COLON || s.charCodeAt(19) !== POINT || s.charCodeAt(23) !== LETTER_Z) return false
  const hour = twoDigits(s, 11)
  const minute = twoDigits(s, 14)
  const second = twoDigits(s, 17)
  return isCalendarDate(s, 0) && hour >= 0 && hour <= 23 && minute >= 0 && minute <= 59 && second >= 0 && second <= 59 &&
    twoDigits(s, 20) >= 0 && twoDigits(s, 21) >= 0 // the milliseconds: three digits
}

/** Whether s[at..at+10) is 'YYYY-MM-DD' of a real day in years 1 to 9999, given its dashes are checked. */
function isCalendarDate (s: string, at: number): boolean {
  const century = twoDigits(s, at)
  const yearOfCentury = twoDigits(s, at + 2)
  const month = twoDigits(s, at + 5)
  const day = twoDigits(s, at + 8)
  const year = century * 100 + yearOfCentury
  return century >= 0 && yearOfCentury >= 0 && year >= 1 && month >= 1 && month <= 12 &&
    day >= 1 && (day <= 28 || day <= daysInMonth(year, month))
}

const TIMESTAMP_TEXT = /^([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[T ]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:[.,]([0-9]+))?)?)? ?(Z|z|[+-][0-9]{2}(?::?[0-9]{2})?)?$/

/**
 * timestamp: ISO 8601 'YYYY-MM-DDTHH:MM:SS.fff' with at least millisecond
 * and at most microsecond digits (PostgreSQL's precision), and a 'Z' when the
 * column has a time zone. Instants (a Date, or text with an offset) are
 * written in UTC; text without an offset is taken as it stands (UTC for a
 * zoned column). Years 1 to 9999.
 */
export function timestampText (withTimeZone: boolean): (value: unknown) => string | null {
  const zone = withTimeZone ? 'Z' : ''
  return (value) => {
    if (typeof value === 'string' && isCanonicalUtc(value)) return withTimeZone ? value : value.slice(0, 23)
    if (value === null || value === undefined) return null
    if (value instanceof Date) {
      timeOf(value)
      const iso = value.toISOString()
      return withTimeZone ? iso : iso.slice(0, -1)
    }
    const m = typeof value === 'string' ? TIMESTAMP_TEXT.exec(value) : null
    if (m === null) throw new ValueError('a timestamp column needs a Date or ISO 8601 text')
    const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])]
    const [hour, minute, second] = [Number(m[4] ?? 0), Number(m[5] ?? 0), Number(m[6] ?? 0)]
    checkDate(year, month, day)
    if (hour > 23 || minute > 59 || second > 59) throw new ValueError('not a valid time of day')
    const fraction = (m[7] ?? '').replace(/0+$/, '')
    if (fraction.length > 6) throw new ValueError('timestamp finer than microseconds')
    const fractionText = '.' + fraction.padEnd(3, '0')
    const offset = m[8]
    if (offset === undefined || offset === 'Z' || offset === 'z' || /^[+-]00:?(00)?$/.test(offset)) {
      return `${m[1]}-${m[2]}-${m[3]}T${pad2(hour)}:${pad2(minute)}:${pad2(second)}${fractionText}${zone}`
    }
    const sign = offset[0] === '-' ? -1 : 1
    const digits = offset.slice(1).replace(':', '')
    const offsetMinutes = sign * (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2) || 0))
    const at = new Date(0)
    at.setUTCFullYear(year, month - 1, day)
    at.setUTCHours(hour, minute - offsetMinutes, second, 0)
    timeOf(at)
    return at.toISOString().slice(0, 19) + fractionText + zone
  }
}

/** binary: the bytes of a Uint8Array/Buffer or ArrayBuffer; a string stands for its UTF-8 bytes. */
export function binaryValue (value: unknown): Buffer | null {
  if (value === null || value === undefined) return null
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength)
  if (value instanceof ArrayBuffer) return Buffer.from(value)
  if (typeof value === 'string') return Buffer.from(value, 'utf8')
  throw new ValueError('a binary column needs a Uint8Array')
}

/** json: any JSON value, as JSON text; undefined and null are NULL. */
export function jsonText (value: unknown): string | null {
  if (value === null || value === undefined) return null
  const text = JSON.stringify(value)
  if (text === undefined) throw new ValueError('a json column needs a JSON value')
  return text
}

/**
 * Every column's value as canonical text (booleans 'true'/'false', binary
 * base64), or null. CSV writes exactly this; other formats pick from it.
 */
export function canonicalText (column: Column): (value: unknown) => string | null {
  switch (column.type) {
    case 'integer': return (v) => { const n = integerValue(v); return n === null ? null : integerText(n) }
    case 'bigint': return bigintText
    case 'decimal': return decimalText(column.precision, column.scale)
    case 'float': return (v) => { const n = floatValue(v); return n === null ? null : floatText(n) }
    case 'text': return textValue(column.maxLength)
    case 'boolean': return (v) => { const b = booleanValue(v); return b === null ? null : String(b) }
    case 'date': return dateText
    case 'timestamp': return timestampText(column.withTimeZone === true)
    case 'binary': return (v) => binaryValue(v)?.toString('base64') ?? null
    case 'json': return jsonText
  }
}

/** The error a format raises for a refused value: it names the entity and column. */
export function columnError (entity: string, column: string, err: unknown): Error {
  const reason = err instanceof Error ? err.message : String(err)
  return new ValueError(`Entity "${entity}", column "${column}": ${reason}`)
}
