// What users type, read once. A timestamp becomes an instant that both
// stores hold exactly, an integer is read only from plain digits; anything
// else is a problem the caller answers with 400, naming its field, before it
// reads or writes anything. (JavaScript's Date reads a leap second as
// Invalid Date and writes a year past 9999 as `+010000-…`, which neither
// store takes back; Number() reads `0x10`, `1e3`, ` 1` and `true`.)

/** The first instant both stores hold: 0001-01-01T00:00:00.000Z. */
export const EARLIEST_TIMESTAMP = -62135596800000
/** The last instant both stores hold, and the answers' date-time format writes: 9999-12-31T23:59:59.999Z. */
export const LATEST_TIMESTAMP = 253402300799999

export type Reading<T> = { ok: true, value: T } | { ok: false, problem: string }

// RFC 3339 §5.6 date-time: `T` and `Z` in either case; the offset as ±hh:mm.
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:[Zz]|([+-])(\d{2}):(\d{2}))$/

const EXAMPLE = 'e.g. 2030-01-01T00:00:00Z'

function daysIn (year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28
  return [4, 6, 9, 11].includes(month) ? 30 : 31
}

/**
 * The instant an RFC 3339 date-time names, when both stores hold it exactly:
 * in UTC between the years 1 and 9999, to the millisecond (further digits
 * must be zeros), with an offset within ±23:59. A leap second (`:60`) is
 * refused rather than moved, since neither store can hold it.
 */
export function readTimestamp (text: unknown): Reading<Date> {
  const m = typeof text === 'string' ? RFC3339.exec(text) : null
  if (m === null) return { ok: false, problem: `must be an RFC 3339 date-time with a time zone, ${EXAMPLE}` }
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number)
  const fraction = m[7] ?? ''
  if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month)) return { ok: false, problem: `must be a date that exists, ${EXAMPLE}` }
  if (second === 60) return { ok: false, problem: 'must not be a leap second (:60), which cannot be stored; use :59.999' }
  if (hour > 23 || minute > 59 || second > 59) return { ok: false, problem: `must be a time of day from 00:00:00 to 23:59:59, ${EXAMPLE}` }
  if (/[1-9]/.test(fraction.slice(3))) return { ok: false, problem: 'must be to the millisecond at most (three decimals)' }
  let offset = 0
  if (m[8] !== undefined) {
    const [offsetHours, offsetMinutes] = [Number(m[9]), Number(m[10])]
    if (offsetHours > 23 || offsetMinutes > 59) return { ok: false, problem: 'must have a time zone offset within ±23:59' }
    offset = (m[8] === '-' ? -1 : 1) * (offsetHours * 60 + offsetMinutes) * 60_000
  }
  // Not Date.UTC, which reads the years 0 to 99 as 1900 to 1999.
  const at = new Date(0)
  at.setUTCFullYear(year, month - 1, day)
  at.setUTCHours(hour, minute, second, Number(fraction.slice(0, 3).padEnd(3, '0')))
  const instant = at.getTime() - offset
  if (instant < EARLIEST_TIMESTAMP || instant > LATEST_TIMESTAMP) {
    return { ok: false, problem: 'must fall in the years 0001 to 9999 in UTC' }
  }
  return { ok: true, value: new Date(instant) }
}

// Plain decimal digits: no sign, point, exponent, prefix, space or other script's digits.
const PLAIN_DIGITS = /^[0-9]+$/

/** Whether `text` is an integer written in plain digits that is exact as a number (at most 2^53 - 1). */
export function isPlainInteger (text: unknown): text is string {
  return typeof text === 'string' && PLAIN_DIGITS.test(text) && Number.isSafeInteger(Number(text))
}

// A JSON text's tokens, enough to tell each number from the key it is the value
// of: strings (escapes included), numbers as JSON writes them, and the rest.
const JSON_TOKEN = /\s+|"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[{}[\],:]|true|false|null/y

/**
 * The first number of a JSON text that is not an integer in plain digits
 * (`2.0`, `1e2`, `-0.5`), with the key it is the value of (null inside an
 * array at the top, or before any key): our bodies hold integers only, and
 * JSON.parse reads `1e2` as 100 and `2.0` as 2, which would pass a schema that
 * says integer. Null when every number is plain, or where the text stops being
 * JSON (the parser then answers for it).
 */
export function numberNotInPlainDigits (json: string): { key: string | null, number: string } | null {
  let lastString: string | null = null
  let key: string | null = null
  JSON_TOKEN.lastIndex = 0
  while (JSON_TOKEN.lastIndex < json.length) {
    const at = JSON_TOKEN.lastIndex
    const m = JSON_TOKEN.exec(json)
    if (m === null) return null
    const token = m[0]
    const first = token.charCodeAt(0)
    if (first === 34 /* " */) lastString = token
    else if (token === ':') key = lastString === null ? null : JSON.parse(lastString) as string
    else if ((first === 45 /* - */ || (first >= 48 && first <= 57)) && !PLAIN_DIGITS.test(token.startsWith('-') ? token.slice(1) : token)) {
      return { key, number: token }
    }
    if (JSON_TOKEN.lastIndex === at) return null
  }
  return null
}
