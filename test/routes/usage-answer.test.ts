import { test } from 'tap'
import { usageAnswerPieces } from '../../lib/routes/usage-answer.js'
import type { UsageRow } from '../../lib/storage/storage.js'

// The usage route writes its answer by hand (lib/routes/usage-answer.ts); it
// must be exactly what JSON.stringify makes of the documented object.
function usageAnswerJson (granularity: 'hour' | 'day', rows: UsageRow[]): string {
  return [...usageAnswerPieces(granularity, rows)].join('')
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

test('a long answer comes in pieces of 4,096 rows, together the same bytes', async (t) => {
  const rows: UsageRow[] = Array.from({ length: 10_000 }, (_, i) => ({
    start: new Date(Date.UTC(2030, 0, 1) + Math.floor(i / 3) * 3_600_000),
    endpointId: `e${i % 2}`,
    keyId: i % 5 === 0 ? null : `k${i % 7}`,
    outcome: i % 11 === 0 ? 'unknown_key' : 'ok',
    count: i + 1,
    bytes: i % 3
  }))
  const pieces = [...usageAnswerPieces('hour', rows)]
  t.equal(pieces.length, 3, 'rows 1-4096, 4097-8192, then the rest with the end')
  t.equal(pieces.join(''), reference('hour', rows), 'the same bytes as JSON.stringify')
  // Exactly 4,096 rows: the last piece is the end alone.
  t.equal([...usageAnswerPieces('day', rows.slice(0, 4096))].join(''), reference('day', rows.slice(0, 4096)))
})
