import fc from 'fast-check'
import { test } from 'tap'
import { USAGE_PIECE_BYTES, usageAnswerPieces, usageAnswerWithTurns } from '../../lib/routes/usage-answer.js'
import type { UsageRow } from '../../lib/storage/storage.js'
import { usageColumnsOf, usageRowsOf } from '../../lib/storage/usage-columns.js'

// The usage route writes its answer by hand (lib/routes/usage-answer.ts); it
// must be exactly what JSON.stringify makes of the documented object.
function usageAnswerJson (granularity: 'hour' | 'day', rows: UsageRow[]): string {
  return [...usageAnswerPieces(granularity, usageColumnsOf(rows))].join('')
}

function reference (granularity: 'hour' | 'day', rows: UsageRow[]): string {
  return JSON.stringify({ granularity, rows: rows.map((r) => ({ ...r, start: r.start.toISOString() })) })
}

test('the usage answer is the JSON of the documented object, byte for byte', async (t) => {
  const hour = new Date(Date.UTC(2030, 0, 1, 10))
  const rows: UsageRow[] = [
    { start: hour, endpointId: 'e1', keyId: 'k1', outcome: 'ok', count: 3, bytes: 12345 },
    { start: hour, endpointId: 'e1', keyId: null, outcome: 'no_key', count: 1, bytes: 0 },
    // the same start as a Date of its own (an adapter need not share them)
    { start: new Date(hour.getTime()), endpointId: 'e2', keyId: 'k1', outcome: 'unknown_key', count: 2, bytes: 0 },
    { start: new Date(Date.UTC(2030, 0, 1, 11)), endpointId: 'e2', keyId: 'k2', outcome: 'expired', count: 9_007_199_254_740_991, bytes: 0 },
    // back to an endpoint seen before, and ids that JSON must escape
    { start: new Date(Date.UTC(2030, 0, 1, 11)), endpointId: 'e1', keyId: 'quote " and \\ and \u2028', outcome: 'disabled', count: 1, bytes: 0 },
    { start: new Date(Date.UTC(2030, 0, 1, 12)), endpointId: 'end"point', keyId: null, outcome: 'unknown_prefix', count: 2, bytes: 0 }
  ]
  for (const granularity of ['hour', 'day'] as const) {
    t.equal(usageAnswerJson(granularity, rows), reference(granularity, rows), `${granularity}: rows`)
    t.equal(usageAnswerJson(granularity, []), reference(granularity, []), `${granularity}: no rows`)
    t.equal(usageAnswerJson(granularity, rows.slice(0, 1)), reference(granularity, rows.slice(0, 1)), `${granularity}: one row`)
  }
  t.same(JSON.parse(usageAnswerJson('hour', rows)).rows[4].keyId, 'quote " and \\ and \u2028', 'an escaped id reads back')
})

test('a long answer comes in pieces of at most 64 KiB, together the same bytes', async (t) => {
  const rows: UsageRow[] = Array.from({ length: 10_000 }, (_, i) => ({
    start: new Date(Date.UTC(2030, 0, 1) + Math.floor(i / 3) * 3_600_000),
    endpointId: `e${i % 2}`,
    keyId: i % 5 === 0 ? null : `k${i % 7}`,
    outcome: i % 11 === 0 ? 'unknown_key' : 'ok',
    count: i % 13 === 0 ? 9_007_199_254_740_991 : i,
    bytes: i % 3 === 0 ? 2 ** 40 + i : 0
  }))
  const pieces = [...usageAnswerPieces('hour', usageColumnsOf(rows))]
  const expected = reference('hour', rows)
  t.ok(pieces.length > Buffer.byteLength(expected) / USAGE_PIECE_BYTES, `${pieces.length} pieces`)
  t.ok(pieces.every((p) => Buffer.byteLength(p) <= USAGE_PIECE_BYTES && p.length > 0), 'none longer than 64 KiB, none empty')
  t.equal(pieces.join(''), expected, 'the same text as JSON.stringify')
  // A row longer than a piece gets a piece of its own size.
  const long = [{ ...rows[1], keyId: 'k'.repeat(USAGE_PIECE_BYTES + 10) }, rows[2]]
  t.equal(usageAnswerJson('day', long), reference('day', long), 'a row longer than a piece')
  // Sizes around the end of the first piece (592 rows start a second): the closing bytes still fit.
  for (let n = 575; n < 610; n++) t.equal(usageAnswerJson('day', rows.slice(0, n)), reference('day', rows.slice(0, n)))
})

test('ids of several bytes a character come whole across the pieces', async (t) => {
  const ids = ['ключ', 'clé-ü', '€uro', 'emoji 😀', '\u2028']
  const rows: UsageRow[] = Array.from({ length: 5_000 }, (_, i) => ({
    start: new Date(Date.UTC(2030, 0, 1) + Math.floor(i / 5) * 3_600_000), endpointId: `é${i % 3}`, keyId: ids[i % 5], outcome: 'ok', count: i, bytes: 0
  }))
  const pieces = [...usageAnswerPieces('hour', usageColumnsOf(rows))]
  t.ok(pieces.length > 5, `${pieces.length} pieces`)
  t.notOk(pieces.some((p) => p.includes('\uFFFD')), 'no piece ends inside a character')
  t.equal(pieces.join(''), reference('hour', rows))
})

test('counts and bytes that are not safe integers are written as JSON writes them', async (t) => {
  const start = new Date(Date.UTC(2030, 0, 1))
  const rows: UsageRow[] = [0, 1, 10, 99, 2 ** 53, 1.5, -3].map((count) => ({ start, endpointId: 'e', keyId: 'k', outcome: 'ok', count, bytes: count }))
  t.equal(usageAnswerJson('day', rows), reference('day', rows))
})

test('every start is written as toISOString writes it, any year and any millisecond', async (t) => {
  // The time of day is written by hand after a day's text (years 0 to 9999);
  // other years take toISOString() whole. Runs of rows share a start, a day, or neither.
  const MAX = 8.64e15
  const time = fc.oneof(
    fc.integer({ min: -MAX, max: MAX }),
    fc.integer({ min: Date.UTC(-1, 0, 1), max: Date.UTC(10001, 0, 1) }),
    fc.integer({ min: -2, max: 2 }).map((d) => Date.UTC(2030, 0, 1) + d),
    fc.constantFrom(-62_167_219_200_001, -62_167_219_200_000, 253_402_300_799_999, 253_402_300_800_000, 0, -1, MAX, -MAX)
  )
  const runs = fc.array(fc.tuple(time, fc.integer({ min: 1, max: 3 }), fc.constantFrom(1, 999, 3_600_000, 86_400_000)), { minLength: 1, maxLength: 20 })
  fc.assert(fc.property(runs, (spec) => {
    const rows: UsageRow[] = []
    for (const [first, n, step] of spec) {
      for (let i = 0; i < n; i++) {
        const at = first + i * step
        if (Math.abs(at) <= MAX) rows.push({ start: new Date(at), endpointId: 'e', keyId: null, outcome: 'ok', count: i, bytes: 0 })
      }
    }
    return usageAnswerJson('hour', rows) === reference('hour', rows)
  }), { numRuns: 3000 })
  t.pass('3,000 runs of rows: the same text as JSON.stringify')
})

test('the streamed answer is the same bytes, with turns of the event loop between its pieces', async (t) => {
  const rows: UsageRow[] = Array.from({ length: 20_000 }, (_, i) => ({
    start: new Date(Date.UTC(2030, 0, 1) + Math.floor(i / 50) * 86_400_000), endpointId: 'e', keyId: `k${i % 50}`, outcome: 'ok', count: i, bytes: i * 1000
  }))
  let turned = -1
  let consumed = 0
  setImmediate(() => { turned = consumed })
  const pieces: string[] = []
  for await (const piece of usageAnswerWithTurns('day', usageColumnsOf(rows))) {
    pieces.push(piece)
    consumed++
  }
  t.ok(pieces.length > 8, `${pieces.length} pieces`)
  t.equal(pieces.join(''), reference('day', rows), 'the same text as JSON.stringify')
  t.ok(turned > 0 && turned < pieces.length, `the event loop turned after ${turned} of ${pieces.length} pieces`)
})

test('usage rows as columns and back: the same rows, each series named once', async (t) => {
  const hour = Date.UTC(2030, 0, 1, 10)
  const rows: UsageRow[] = Array.from({ length: 500 }, (_, i) => ({
    start: new Date(hour + Math.floor(i / 7) * 3_600_000),
    endpointId: `e${i % 3}`,
    keyId: i % 4 === 0 ? null : `k${i % 5}`,
    outcome: i % 6 === 0 ? 'unknown_key' : 'ok',
    count: i,
    bytes: i % 2 === 0 ? 2 ** 40 + i : 0
  }))
  const columns = usageColumnsOf(rows)
  t.equal(columns.length, 500)
  t.equal(columns.series.length, new Set(rows.map((r) => `${r.endpointId} ${r.keyId} ${r.outcome}`)).size, 'one series per endpoint, key and outcome')
  t.same(usageRowsOf(columns), rows)
  t.same(usageRowsOf(usageColumnsOf([])), [])
})
