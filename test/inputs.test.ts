import fc from 'fast-check'
import t from 'tap'
import { EARLIEST_TIMESTAMP, isPlainInteger, LATEST_TIMESTAMP, numberNotInPlainDigits, readTimestamp } from '../lib/inputs.js'
import { ADMIN, buildApp } from './helper.js'
import { checkProperty, integerText, plainIntegerOf, STORABLE, timestampCases } from './fuzz-arbitraries.js'

// lib/inputs.ts against an oracle that shares no code with it (its days come
// from H. Hinnant's days_from_civil, not from Date): every generated
// date-time is read as the instant the oracle computes, or refused.

t.test('the storable range is the years 0001 to 9999 in UTC, to the millisecond', async (t) => {
  t.equal(EARLIEST_TIMESTAMP, STORABLE.from)
  t.equal(LATEST_TIMESTAMP, STORABLE.to)
  t.equal(new Date(EARLIEST_TIMESTAMP).toISOString(), '0001-01-01T00:00:00.000Z')
  t.equal(new Date(LATEST_TIMESTAMP).toISOString(), '9999-12-31T23:59:59.999Z')
})

t.test('readTimestamp: the instant an RFC 3339 date-time names, or a reason', async (t) => {
  const cases: Array<[string, string | RegExp]> = [
    ['2030-01-01T00:00:00Z', '2030-01-01T00:00:00.000Z'],
    ['2030-01-01t05:30:00.5+05:30', '2030-01-01T00:00:00.500Z'],
    ['2029-12-31T19:00:00-05:00', '2030-01-01T00:00:00.000Z'],
    ['2030-01-01T00:00:00.123000000z', '2030-01-01T00:00:00.123Z'],
    ['0000-12-31T23:59:59.999-00:01', '0001-01-01T00:00:59.999Z'],
    ['0099-06-01T00:00:00Z', '0099-06-01T00:00:00.000Z'], // not 1999, as Date.UTC would have it
    ['9999-12-31T23:59:59.999Z', '9999-12-31T23:59:59.999Z'],
    ['2030-06-30T23:59:60Z', /leap second/],
    ['9999-12-31T23:59:59-05:00', /years 0001 to 9999 in UTC/],
    ['0000-01-01T00:00:00Z', /years 0001 to 9999 in UTC/],
    ['10000-01-01T00:00:00Z', /RFC 3339/],
    ['2030-01-01T00:00:00+24:00', /offset within ±23:59/],
    ['2030-01-01T00:00:00+05:60', /offset within ±23:59/],
    ['2030-01-01T00:00:00.0001Z', /millisecond/],
    ['2030-02-29T00:00:00Z', /a date that exists/],
    ['2030-01-01T24:00:00Z', /time of day/],
    ['2030-01-01 00:00:00Z', /RFC 3339/],
    ['2030-01-01T00:00:00+0500', /RFC 3339/],
    ['2030-01-01T00:00:00', /RFC 3339/],
    ['２０３０-01-01T00:00:00Z', /RFC 3339/]
  ]
  for (const [text, expected] of cases) {
    const read = readTimestamp(text)
    if (typeof expected === 'string') t.same(read.ok ? read.value.toISOString() : read.problem, expected, text)
    else t.match(read.ok ? read.value.toISOString() : read.problem, expected, text)
  }
  t.same(readTimestamp(20300101), { ok: false, problem: 'must be an RFC 3339 date-time with a time zone, e.g. 2030-01-01T00:00:00Z' }, 'not text')
})

t.test('readTimestamp agrees with the oracle on generated date-times', async (t) => {
  await checkProperty(t, 'timestamps', fc.asyncProperty(timestampCases(), async ({ text, instant }) => {
    const read = readTimestamp(text)
    if (instant === null) {
      if (read.ok) throw new Error(`${text}: read as ${read.value.toISOString()}, the oracle refuses it`)
    } else if (!read.ok || read.value.getTime() !== instant) {
      throw new Error(`${text}: ${read.ok ? read.value.toISOString() : read.problem}, the oracle reads ${new Date(instant).toISOString()}`)
    }
  }), 20_000)
})

t.test('isPlainInteger: decimal digits only, exact as a number', async (t) => {
  await checkProperty(t, 'integers', fc.asyncProperty(integerText, async (text) => {
    const expected = plainIntegerOf(text, 0, Number.MAX_SAFE_INTEGER) !== null
    if (isPlainInteger(text) !== expected) throw new Error(`${JSON.stringify(text)}: ${String(!expected)}, expected ${String(expected)}`)
  }), 5000)
  for (const value of [5, true, null, undefined, ['5']]) t.equal(isPlainInteger(value), false, `${JSON.stringify(value)}: not text`)
})

t.test('numberNotInPlainDigits: the first number of a JSON body that is not an integer in plain digits, with its key', async (t) => {
  const cases: Array<[string, { key: string | null, number: string } | null]> = [
    ['{"a":1,"b":-20,"c":[0,3]}', null],
    ['{"a":"1e2 2.0","b\\"":"x\\" 1.5"}', null], // numbers inside strings, escaped quotes
    ['{"limits":{"requestsPerMinute":1e2}}', { key: 'requestsPerMinute', number: '1e2' }],
    ['{"expiresIn": 2.0}', { key: 'expiresIn', number: '2.0' }],
    ['{"keyIds":["a"],"n":[1,-0.5]}', { key: 'n', number: '-0.5' }],
    ['[1E3]', { key: null, number: '1E3' }],
    ['{"a":1', null], // not JSON: the parser answers for it
    ['{"a":01}', null] // digits, but not JSON: the parser answers
  ]
  for (const [json, expected] of cases) t.same(numberNotInPlainDigits(json), expected, json)

  // Against JSON.stringify, which writes an integer below 1e21 in plain digits and any other number otherwise.
  await checkProperty(t, 'null exactly when every number is written in plain digits', fc.asyncProperty(fc.jsonValue(), async (value) => {
    const numbers: number[] = []
    JSON.parse(JSON.stringify(value), (_k, v: unknown) => { if (typeof v === 'number') numbers.push(v); return v })
    const allPlain = numbers.every((n) => /^-?[0-9]+$/.test(JSON.stringify(n)))
    return (numberNotInPlainDigits(JSON.stringify(value, null, 1)) === null) === allPlain
  }), 2000)
})

t.test('a management body with a number not in plain digits is 400, naming its key, before anything is written', async (t) => {
  const { app } = await buildApp(t)
  for (const body of ['{"purpose":"p","isActive":true,"n":1e2}', '{"purpose":"p","n":2.0}']) {
    const res = await app.inject({ method: 'POST', url: '/api-keys/org/proj/keys', headers: { ...ADMIN, 'content-type': 'application/json' }, payload: body })
    t.equal(res.statusCode, 400, body)
    t.match(res.json(), { message: /^Invalid n: must be an integer in plain digits/ })
  }
  const list = await app.inject({ method: 'GET', url: '/api-keys/org/proj/keys', headers: ADMIN })
  t.same(list.json(), [], 'no key was made')
  const ok = await app.inject({ method: 'POST', url: '/api-keys/org/proj/keys', headers: { ...ADMIN, 'content-type': 'application/json' }, payload: '{"purpose":"1e2 in a string is text"}' })
  t.equal(ok.statusCode, 201)
  const proto = await app.inject({ method: 'POST', url: '/api-keys/org/proj/keys', headers: { ...ADMIN, 'content-type': 'application/json' }, payload: '{"purpose":"p","__proto__":{"x":1}}' })
  t.equal(proto.statusCode, 400, 'prototype poisoning is still refused')
})
