import fc from 'fast-check'
import type { Test } from 'tap'

// Inputs shared by the fuzz tests, each generated together with what the
// rules of DESIGN.md §2 and §4 make of it, so that a property can state the
// exact answer instead of "not a 5xx".

/** A path segment: the text the server decodes and the bytes written for it. */
export interface Segment {
  text: string
  wire: string
}

export const segment = (text: string, wire = encodeURIComponent(text)): Segment => ({ text, wire })

/** Fastify's default maxParamLength: a longer path parameter is answered 414. */
export const MAX_PARAM_LENGTH = 100

/**
 * DESIGN.md §2: a sequence is a positive integer written plainly (ASCII
 * digits, no sign, exponent, point or leading zero) up to 2^53 - 1.
 */
export function sequenceOf (text: string): number | null {
  if (!/^[0-9]+$/.test(text) || text.startsWith('0')) return null
  return BigInt(text) <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(text) : null
}

/** Sequence texts: mostly 1 and 2, then every way a number can be written wrong. */
export const sequenceText: fc.Arbitrary<string> = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('1', '2') },
  {
    weight: 4,
    arbitrary: fc.constantFrom('0', '01', '-1', '+1', '1.5', '1e3', '1E3', '0x10', '0b1', '1_0', ' 1', '1 ', '١', '１',
      'Infinity', 'NaN', '1\0', '', '9007199254740991', '9007199254740992', '1234567890123456789012345')
  },
  { weight: 2, arbitrary: fc.bigInt({ min: -10n, max: 10n ** 25n }).map(String) },
  { weight: 1, arbitrary: fc.string({ maxLength: 4, unit: 'grapheme' }) },
  { weight: 1, arbitrary: fc.constant('9'.repeat(MAX_PARAM_LENGTH + 1)) }
)

/** An organization or project: mostly `usual`, then odd ones, non-ASCII, NUL, slashes, dots, too long. */
export function monikerText (usual: string): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 10, arbitrary: fc.constant(usual) },
    { weight: 4, arbitrary: fc.constantFrom('other', '', 'a b', 'ä', 'ac\0me', 'a/b', '-x', 'x'.repeat(100), '..', '.', '%', '?', '#') },
    { weight: 2, arbitrary: fc.string({ maxLength: 6, unit: 'grapheme' }) },
    { weight: 1, arbitrary: fc.constant('x'.repeat(MAX_PARAM_LENGTH + 1)) }
  )
}

/** `.` and `..` as whole segments: inject resolves them like a browser would; a raw request does not. */
export const isDotSegment = (text: string): boolean => text === '.' || text === '..'

/** Runs a property with a printed seed (FUZZ_SEED to replay one) and records it as one passing assertion. */
export async function checkProperty<T> (t: Test, name: string, property: fc.IAsyncPropertyWithHooks<T>, numRuns: number): Promise<void> {
  const seed = process.env.FUZZ_SEED === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(process.env.FUZZ_SEED)
  t.comment(`${name}: seed ${seed} (FUZZ_SEED=${seed} replays it)`)
  await fc.assert(property, { numRuns, seed, endOnFailure: false })
  t.pass(`${name}: ${numRuns} runs`)
}

// ---- timestamps and integers as users type them (lib/inputs.ts) -------------

/** Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's days_from_civil): no Date involved. */
function daysFromCivil (year: number, month: number, day: number): number {
  const y = year - (month <= 2 ? 1 : 0)
  const era = Math.floor(y / 400)
  const yoe = y - era * 400
  const doy = Math.floor((153 * (month + (month > 2 ? -3 : 9)) + 2) / 5) + day - 1
  return era * 146097 + yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy - 719468
}

const isLeap = (y: number): boolean => y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0)
const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
const DAY_MS = 86_400_000
/** What both stores hold: 0001-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z. */
export const STORABLE = { from: daysFromCivil(1, 1, 1) * DAY_MS, to: daysFromCivil(10000, 1, 1) * DAY_MS - 1 }

/** The parts of a date-time as generated; the text and the expected instant are made from them. */
interface TimestampParts {
  year: number
  yearDigits: number
  month: number
  day: number
  separator: string
  hour: number
  minute: number
  second: number
  fraction: string
  offset: { kind: 'z', text: string } | { kind: 'numeric', sign: '+' | '-', hours: number, minutes: number } | { kind: 'odd', text: string }
}

/** A date-time as a user may type it, and the instant it must be stored as; null: it must be refused (400). */
export interface TimestampCase { text: string, instant: number | null }

const pad = (n: number, width: number): string => String(n).padStart(width, '0')

function timestampCase (p: TimestampParts): TimestampCase {
  const offsetText = p.offset.kind === 'numeric' ? `${p.offset.sign}${pad(p.offset.hours, 2)}:${pad(p.offset.minutes, 2)}` : p.offset.text
  const yearText = pad(p.year, p.yearDigits)
  const text = `${yearText}-${pad(p.month, 2)}-${pad(p.day, 2)}${p.separator}${pad(p.hour, 2)}:${pad(p.minute, 2)}:` +
    `${pad(p.second, 2)}${p.fraction === '' ? '' : '.' + p.fraction}${offsetText}`
  const refused = { text, instant: null }
  // RFC 3339's shape: four-digit year, T (either case), ±hh:mm or Z (either case).
  if (yearText.length !== 4 || !['T', 't'].includes(p.separator) || p.offset.kind === 'odd') return refused
  if (p.month < 1 || p.month > 12) return refused
  const daysInMonth = p.month === 2 && isLeap(p.year) ? 29 : DAYS_IN_MONTH[p.month - 1]
  if (p.day < 1 || p.day > daysInMonth || p.hour > 23 || p.minute > 59 || p.second > 59) return refused // :60 (a leap second) too
  if (/[1-9]/.test(p.fraction.slice(3))) return refused // finer than a millisecond
  let offsetMinutes = 0
  if (p.offset.kind === 'numeric') {
    if (p.offset.hours > 23 || p.offset.minutes > 59) return refused
    offsetMinutes = (p.offset.sign === '-' ? -1 : 1) * (p.offset.hours * 60 + p.offset.minutes)
  }
  const ms = Number(p.fraction.slice(0, 3).padEnd(3, '0'))
  const instant = daysFromCivil(p.year, p.month, p.day) * DAY_MS + ((p.hour * 60 + p.minute) * 60 + p.second) * 1000 + ms - offsetMinutes * 60_000
  return instant < STORABLE.from || instant > STORABLE.to ? refused : { text, instant }
}

/**
 * Edges weighted up: the first and last storable years, 0000 and 10000, leap
 * seconds, offsets of ±23:59 and beyond. `keepYear` leaves out years (those
 * near now, where "in the future" would depend on the moment).
 */
export function timestampCases (keepYear: (year: number) => boolean = () => true): fc.Arbitrary<TimestampCase> {
  const edgeYears = [0, 1, 2, 1969, 1970, 2030, 9998, 9999, 10_000].filter(keepYear)
  const edge = <T>(edges: T[], rest: fc.Arbitrary<T>): fc.Arbitrary<T> =>
    fc.oneof({ weight: 2, arbitrary: fc.constantFrom(...edges) }, { weight: 1, arbitrary: rest })
  const parts: fc.Arbitrary<TimestampParts> = fc.record({
    year: fc.oneof({ weight: 2, arbitrary: fc.constantFrom(...edgeYears) }, { weight: 3, arbitrary: fc.integer({ min: 0, max: 10_000 }).filter(keepYear) }),
    yearDigits: edge([4], fc.constantFrom(2, 3, 5, 6)),
    month: edge([1, 2, 6, 12], fc.integer({ min: 0, max: 13 })),
    day: edge([1, 28, 29, 30, 31], fc.integer({ min: 0, max: 32 })),
    separator: edge(['T'], fc.constantFrom('t', ' ', '_', '')),
    hour: edge([0, 23], fc.integer({ min: 0, max: 25 })),
    minute: edge([0, 59], fc.integer({ min: 0, max: 61 })),
    second: edge([0, 59, 60], fc.integer({ min: 0, max: 61 })),
    fraction: edge(['', '0', '999', '000000', '999000'], fc.stringMatching(/^[0-9]{1,9}$/)),
    offset: fc.oneof(
      { weight: 3, arbitrary: fc.constantFrom({ kind: 'z' as const, text: 'Z' }, { kind: 'z' as const, text: 'z' }) },
      {
        weight: 4,
        arbitrary: fc.record({
          kind: fc.constant('numeric' as const),
          sign: fc.constantFrom('+' as const, '-' as const),
          hours: edge([0, 5, 14, 23], fc.integer({ min: 0, max: 25 })),
          minutes: edge([0, 30, 59], fc.integer({ min: 0, max: 61 }))
        })
      },
      { weight: 1, arbitrary: fc.constantFrom('', '+0500', '+05', '-5:00', 'UTC', '+05:00:00', 'Z+01:00').map((text) => ({ kind: 'odd' as const, text })) }
    )
  })
  return fc.oneof(
    { weight: 6, arbitrary: parts.map(timestampCase) },
    // The reproductions and their neighbours, by hand.
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        { text: '2030-06-30T23:59:60Z', instant: null },
        { text: '9999-12-31T23:59:59-05:00', instant: null },
        { text: '9999-12-31T23:59:59.999Z', instant: STORABLE.to },
        { text: '9999-12-31T23:59:59.999+23:59', instant: STORABLE.to - (23 * 60 + 59) * 60_000 },
        { text: '0000-12-31T23:59:59.999-00:01', instant: STORABLE.from + 59_999 },
        { text: '0001-01-01T00:00:00Z', instant: STORABLE.from },
        { text: '0001-01-01T00:00:00+00:01', instant: null },
        { text: '0000-01-01T00:00:00Z', instant: null },
        { text: '10000-01-01T00:00:00Z', instant: null },
        { text: '+010000-01-01T00:00:00.000Z', instant: null },
        { text: '2030-01-01T00:00:00.0001Z', instant: null },
        { text: '2030-01-01T00:00:00.1000Z', instant: daysFromCivil(2030, 1, 1) * DAY_MS + 100 },
        { text: '2030-02-29T00:00:00Z', instant: null },
        { text: '2032-02-29T00:00:00Z', instant: daysFromCivil(2032, 2, 29) * DAY_MS }
      )
    }
  )
}

/** Integer texts in every spelling: plain digits, and every way JavaScript or a database might read a number. */
export const integerText: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.integer({ min: 0, max: 600 }).map(String) },
  {
    weight: 6,
    arbitrary: fc.constantFrom('0', '1', '2', '50', '500', '501', '010', '007', '0000000000000000000000001', '2.5', '2.0', '2.', '.5', '1e1', '1E1',
      '0x10', '0X1f', '0b1', '0o7', '+3', '-1', '-0', ' 1', '1 ', '\t1', '1\n', 'true', 'false', 'null', '', 'Infinity', 'NaN', '١', '５', '1_0', '1,0',
      '9007199254740991', '9007199254740992', '99999999999999999999', '[1]', '{}')
  },
  { weight: 2, arbitrary: fc.bigInt({ min: -10n, max: 10n ** 20n }).map(String) },
  { weight: 1, arbitrary: fc.string({ maxLength: 4 }) }
)

/** What a plain-digit integer in [min, max] reads as, else null (refused). */
export function plainIntegerOf (text: string, min: number, max: number): number | null {
  if (!/^[0-9]+$/.test(text)) return null
  const value = BigInt(text)
  return value >= BigInt(min) && value <= BigInt(max) ? Number(value) : null
}
