import fc from 'fast-check'
import t from 'tap'
import {
  bigintText, binaryValue, booleanValue, canonicalText, dateText, decimalText, floatText, floatValue, integerText, integerValue, jsonText,
  textValue, timestampText
} from '../../lib/formats/values.js'

const REFUSED = { name: 'ValueError' }

// The canonical value forms every format writes, and the values refused
// because no format could load them back.

t.test('integer: 32-bit integers from numbers, bigints and digit text', async (t) => {
  t.equal(integerValue(42), 42)
  t.equal(integerValue(-2147483648), -2147483648)
  t.equal(integerValue(2147483647n), 2147483647)
  t.equal(integerValue('-17'), -17)
  t.equal(Object.is(integerValue(-0), 0), true, 'no negative zero')
  t.equal(integerValue(null), null)
  t.equal(integerValue(undefined), null)
  for (const bad of [2147483648, -2147483649, 1.5, NaN, '1e3', '12a', true, {}]) {
    t.throws(() => integerValue(bad), REFUSED, `refuses ${String(bad)}`)
  }
})

t.test('bigint: 64-bit integers as exact text', async (t) => {
  t.equal(bigintText(9223372036854775807n), '9223372036854775807')
  t.equal(bigintText(-9223372036854775808n), '-9223372036854775808')
  t.equal(bigintText('+0012'), '12')
  t.equal(bigintText(Number.MAX_SAFE_INTEGER), '9007199254740991')
  t.throws(() => bigintText(9223372036854775808n), REFUSED)
  t.throws(() => bigintText(2 ** 60), REFUSED, 'an unsafe number may already be rounded')
  t.throws(() => bigintText('1.0'), REFUSED)
})

t.test('decimal(p,s): exact text with exactly s fraction digits', async (t) => {
  const d = decimalText(12, 2)
  t.equal(d('19.99'), '19.99')
  t.equal(d('0.1'), '0.10')
  t.equal(d('-0.10'), '-0.10')
  t.equal(d('-0'), '0.00', 'no negative zero')
  t.equal(d('007.5'), '7.50')
  t.equal(d('.5'), '0.50')
  t.equal(d('5.'), '5.00')
  t.equal(d('1.5e3'), '1500.00')
  t.equal(d('12e-2'), '0.12')
  t.equal(d(19.99), '19.99')
  t.equal(d(1e9), '1000000000.00')
  t.equal(d(12n), '12.00')
  t.equal(d(' 3.10 '), '3.10')
  t.equal(d('9999999999.99'), '9999999999.99')
  t.equal(decimalText(5, 0)('12345'), '12345')
  t.equal(decimalText(40, 10)('123456789012345678901234567890.1234567891'), '123456789012345678901234567890.1234567891')
  for (const bad of ['1.234', '10000000000', '1e400', '1e-400', 'abc', '', '.', '1,5', NaN, Infinity, true]) {
    t.throws(() => d(bad), REFUSED, `refuses ${JSON.stringify(bad)}`)
  }
})

t.test('decimal: an exact value written with any exponent reads back as one text', async (t) => {
  fc.assert(fc.property(fc.bigInt(-(10n ** 12n) + 1n, 10n ** 12n - 1n), fc.integer({ min: 0, max: 6 }), (n, shift) => {
    const digits = (n < 0n ? -n : n).toString().padStart(3, '0')
    const expected = (n < 0n ? '-' : '') + digits.slice(0, -2) + '.' + digits.slice(-2)
    return decimalText(12, 2)(`${n}${'0'.repeat(shift)}e-${2 + shift}`) === expected
  }))
  t.pass('exponent forms agree')
})

/** decimal(p,s) by plain string arithmetic: the oracle for the writer's own paths. */
function decimalOracle (text: string, precision: number, scale: number): string | 'refused' {
  const m = /^([+-]?)([0-9]*)(?:\.([0-9]*))?$/.exec(text)
  if (m === null || (m[2] === '' && (m[3] ?? '') === '')) return 'refused'
  const integer = m[2].replace(/^0+/, '')
  const fraction = (m[3] ?? '').replace(/0+$/, '')
  if (fraction.length > scale || integer.length > precision - scale) return 'refused'
  const zero = integer === '' && fraction === ''
  return (m[1] === '-' && !zero ? '-' : '') + (integer === '' ? '0' : integer) + (scale > 0 ? '.' + fraction.padEnd(scale, '0') : '')
}

t.test('decimal: text in every arrangement of sign, zeros, digits and point reads as plain arithmetic says', async (t) => {
  const digits = fc.string({ unit: fc.constantFrom('0', '0', '1', '9'), maxLength: 6 })
  const text = fc.tuple(fc.constantFrom('', '-', '+'), digits, fc.constantFrom('', '.', '.'), digits, fc.constantFrom('', '', 'x', ' '))
    .map(([sign, integer, point, fraction, tail]) => sign + integer + point + fraction + tail)
  fc.assert(fc.property(text, fc.integer({ min: 1, max: 6 }), fc.integer({ min: 0, max: 3 }), (value, precision, extra) => {
    const scale = Math.min(extra, precision)
    let got: string
    try {
      got = decimalText(precision, scale)(value) as string
    } catch {
      got = 'refused'
    }
    return got === decimalOracle(value.trim(), precision, scale)
  }), { numRuns: 20000 })
  t.pass('every generated text agrees with the oracle')
})

t.test('float: finite doubles; NaN and infinities are NULL', async (t) => {
  t.equal(floatValue(0.1), 0.1)
  t.equal(floatValue('2.5'), 2.5)
  t.equal(floatValue(5e-324), 5e-324)
  t.equal(Object.is(floatValue(-0), 0), true)
  t.equal(floatValue(NaN), null)
  t.equal(floatValue(Infinity), null)
  t.equal(floatValue('NaN'), null)
  t.throws(() => floatValue('abc'), REFUSED)
  t.throws(() => floatValue(''), REFUSED)
  t.equal(canonicalText({ name: 'f', type: 'float' })(1e21), '1e+21')
})

t.test('float text: what String(n) writes, for every finite double', async (t) => {
  fc.assert(fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (n) => floatText(n) === String(n)))
  t.equal(floatText(5e-324), '5e-324')
  t.equal(floatText(-0), '0')
  t.equal(floatText(0.1 + 0.2), '0.30000000000000004')
})

t.test('integer text: what String(n) writes, for every safe integer, and through canonicalText', async (t) => {
  fc.assert(fc.property(fc.integer(), (n) => integerText(n) === String(n)))
  fc.assert(fc.property(fc.maxSafeInteger(), (n) => integerText(n) === String(n)))
  for (const n of [0, -1, 1, 999, 1000, -999, -1000, 1001, 1000000, 1000999, -2147483648, 2147483647, Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER]) {
    t.equal(integerText(n), String(n))
  }
  t.equal(integerText(-0), '0')
  // Near 2^53 a quotient's .999 lies within one step of a double of the next integer: each group is divided out exactly.
  fc.assert(fc.property(fc.integer({ min: 0, max: Math.floor(Number.MAX_SAFE_INTEGER / 1000) - 1 }), fc.boolean(), (m, negative) => {
    const n = (m * 1000 + 999) * (negative ? -1 : 1)
    return integerText(n) === String(n)
  }))
  t.equal(integerText(9007199254739999), '9007199254739999')
  t.equal(integerText(integerValue(-0) as number), '0')
  const text = canonicalText({ name: 'i', type: 'integer' })
  fc.assert(fc.property(fc.integer(), (n) => text(n) === String(n) && text(String(n)) === String(n)))
})

t.test('text and varchar(n): n counts characters, not UTF-16 units', async (t) => {
  const v = textValue(3)
  t.equal(v('😀😀😀'), '😀😀😀', 'three emoji are three characters')
  t.throws(() => v('abcd'), REFUSED)
  t.equal(textValue(undefined)(12), '12')
  t.throws(() => textValue(undefined)({}), REFUSED)
})

t.test('boolean: true/false, 1/0 and their usual text', async (t) => {
  for (const yes of [true, 1, 1n, '1', 't', 'true']) t.equal(booleanValue(yes), true)
  for (const no of [false, 0, 0n, '0', 'f', 'false']) t.equal(booleanValue(no), false)
  for (const bad of [2, 'yes', 'TRUE ', {}]) t.throws(() => booleanValue(bad), REFUSED)
})

t.test("date: 'YYYY-MM-DD', calendar-checked, years 1 to 9999", async (t) => {
  t.equal(dateText('2024-02-29'), '2024-02-29')
  t.equal(dateText('0001-01-01'), '0001-01-01')
  t.equal(dateText(new Date('9999-12-31T23:59:59.999Z')), '9999-12-31')
  t.equal(dateText(new Date('2024-03-01T00:30:00+02:00')), '2024-02-29', 'a Date gives its UTC date')
  for (const bad of ['2023-02-29', '2024-13-01', '0000-01-01', '24-01-01', '2024-1-1', new Date(NaN), new Date('+010000-01-01T00:00:00Z')]) {
    t.throws(() => dateText(bad), REFUSED, `refuses ${String(bad)}`)
  }
})

t.test('date: every YYYY-MM-DD of two-digit fields is kept exactly when it is a real day of years 1 to 9999', async (t) => {
  const two = fc.integer({ min: 0, max: 99 }).map((n) => String(n).padStart(2, '0'))
  fc.assert(fc.property(two, two, two, two, (century, yearOfCentury, month, day) => {
    const text = `${century}${yearOfCentury}-${month}-${day}`
    const at = new Date(0)
    at.setUTCFullYear(Number(century + yearOfCentury), Number(month) - 1, Number(day))
    const real = Number(century + yearOfCentury) >= 1 && at.toISOString().slice(0, 10) === text
    let got: string | null | 'refused'
    try {
      got = dateText(text)
    } catch {
      got = 'refused'
    }
    return got === (real ? text : 'refused')
  }), { numRuns: 5000 })
  t.pass('every generated date agrees with the calendar')
})

t.test('timestamp: ISO 8601 in UTC, milliseconds to microseconds', async (t) => {
  const zoned = timestampText(true)
  const local = timestampText(false)
  t.equal(zoned(new Date('2024-01-02T03:04:05.678Z')), '2024-01-02T03:04:05.678Z')
  t.equal(local(new Date('2024-01-02T03:04:05.678Z')), '2024-01-02T03:04:05.678', 'no zone: the UTC wall clock')
  t.equal(zoned('2024-01-02 03:04:05+02'), '2024-01-02T01:04:05.000Z', 'an offset is converted to UTC')
  t.equal(zoned('2024-01-01T00:30:00-01:30'), '2024-01-01T02:00:00.000Z')
  t.equal(zoned('0001-01-01T01:30:00+01:00'), '0001-01-01T00:30:00.000Z', 'years below 100 are not read as 19xx')
  t.equal(zoned('2024-01-02T03:04:05.123456Z'), '2024-01-02T03:04:05.123456Z', 'microseconds kept')
  t.equal(zoned('2024-01-02T03:04:05.120000Z'), '2024-01-02T03:04:05.120Z', 'trailing zeros trimmed to milliseconds')
  t.equal(zoned('2024-01-02T03:04:05.5'), '2024-01-02T03:04:05.500Z', 'no offset in a zoned column: UTC')
  t.equal(local('2024-01-02T03:04:05.5'), '2024-01-02T03:04:05.500', 'no offset: taken as it stands')
  t.equal(local('2024-01-02'), '2024-01-02T00:00:00.000')
  t.equal(zoned('2024-01-02T03:04:05+00:00'), '2024-01-02T03:04:05.000Z')
  for (const bad of ['2024-01-02T24:00:00Z', '2024-01-02T03:04:05.1234567Z', '2024-02-30T00:00:00Z', 'yesterday',
    new Date(NaN), new Date(-62135596800001), '9999-12-31T23:30:00-01:00', '0001-01-01T00:30:00+01:00']) {
    t.throws(() => zoned(bad), REFUSED, `refuses ${String(bad)}`)
  }
})

t.test('timestamp: canonical UTC text is taken as it is exactly when it names a real instant', async (t) => {
  // The fast path for 'YYYY-MM-DDTHH:MM:SS.sssZ' against Date's own reading
  // of the text, on fields around their limits and with stray characters.
  const zoned = timestampText(true)
  const local = timestampText(false)
  const field = (max: number, width = 2): fc.Arbitrary<string> => fc.integer({ min: 0, max }).map((n) => String(n).padStart(width, '0'))
  const canonical = fc.tuple(fc.oneof(field(9999, 4), fc.constantFrom('0000', '0001', '1900', '2000', '2023', '2024', '9999')),
    field(13), field(32), field(24), field(60), field(60), field(999, 3))
    .map(([y, mo, d, h, mi, s, ms]) => `${y}-${mo}-${d}T${h}:${mi}:${s}.${ms}Z`)
  const mutated = fc.tuple(canonical, fc.nat(23), fc.constantFrom('0', '9', ':', '-', '.', 'T', 'Z', ' ', '/', 'a', '٣'))
    .map(([text, i, c]) => text.slice(0, i) + c + text.slice(i + 1))
  const shape = /^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$/
  fc.assert(fc.property(fc.oneof(canonical, mutated), (text) => {
    const out = valueOrRefused(() => zoned(text))
    if (!shape.test(text)) return out !== text // other text is rewritten or refused, never passed through
    const real = !text.startsWith('0000') && !Number.isNaN(Date.parse(text)) && new Date(text).toISOString() === text
    return real ? out === text && local(text) === text.slice(0, 23) : out === REFUSED_VALUE
  }), { numRuns: 5000 })
  t.pass('the fast path agrees with Date')
})

const REFUSED_VALUE = Symbol('refused')

function valueOrRefused (f: () => unknown): unknown {
  try {
    return f()
  } catch (err) {
    if (err instanceof Error && err.name === 'ValueError') return REFUSED_VALUE
    throw err
  }
}

t.test('binary and json', async (t) => {
  t.same(binaryValue(new Uint8Array([1, 2, 255])), Buffer.from([1, 2, 255]))
  t.same(binaryValue(new Uint8Array([9, 1, 2, 3]).subarray(1, 3)), Buffer.from([1, 2]), 'a view keeps its offset')
  t.same(binaryValue(new Uint8Array([7]).buffer), Buffer.from([7]))
  t.same(binaryValue('é'), Buffer.from('é'))
  t.throws(() => binaryValue(12), REFUSED)
  t.equal(jsonText({ a: [1, 'x'] }), '{"a":[1,"x"]}')
  t.equal(jsonText('text'), '"text"', 'a string is a JSON string')
  t.equal(jsonText(undefined), null)
  t.throws(() => jsonText(() => 1), REFUSED)
  t.throws(() => jsonText({ n: 1n }), TypeError)
})
