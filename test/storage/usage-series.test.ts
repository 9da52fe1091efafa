import { deepStrictEqual } from 'node:assert/strict'
import fc from 'fast-check'
import t from 'tap'
import { USAGE_OUTCOMES, type UsageOutcome } from '../../lib/storage/storage.js'
import { mergeSeries, mergeSeriesColumns, type UsageSeries } from '../../lib/storage/usage-series.js'
import { usageRowsOf } from '../../lib/storage/usage-columns.js'

// PostgreSQL's usage history comes as one text per endpoint, key and outcome,
// its points in no order (usage-series.ts): merged, it must be the documented
// order (start, endpoint id, key id with none first, outcome; ids by code
// unit), cut at the limit.

const HOUR = 3600
const ids = ['', '0a', '0b', 'A', 'a', 'a-1', 'a_1', 'b', 'ü']

interface Point { endpointId: string, keyId: string, outcome: UsageOutcome, start: number, count: number, bytes: number | null }

const points = fc.uniqueArray(
  fc.record({
    endpointId: fc.constantFrom(...ids.slice(1)),
    keyId: fc.constantFrom(...ids),
    outcome: fc.constantFrom(...USAGE_OUTCOMES),
    // now and then, and before 1970 (negative epoch seconds) down to the year 1
    start: fc.oneof(
      fc.integer({ min: 0, max: 60 }).map((h) => 1_900_000_000 + h * HOUR),
      fc.integer({ min: -30, max: 30 }).map((h) => h * HOUR),
      fc.constant(-62_135_596_800)
    ),
    count: fc.integer({ min: 1, max: 2 ** 40 }),
    // "start:count:bytes", or "start:count" (no bytes: 0)
    bytes: fc.option(fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 2 ** 50 })))
  }),
  { selector: (p) => `${p.endpointId}|${p.keyId}|${p.outcome}|${p.start}`, maxLength: 200 }
)

/** The points as series, each series' points in the order given (no order). */
function asSeries (all: readonly Point[]): UsageSeries[] {
  const series = new Map<string, UsageSeries>()
  for (const p of all) {
    const name = `${p.endpointId}|${p.keyId}|${p.outcome}`
    const s = series.get(name) ?? { endpointId: p.endpointId, keyId: p.keyId, outcome: p.outcome, points: '' }
    s.points += (s.points === '' ? '' : ',') + `${p.start}:${p.count}` + (p.bytes === null ? '' : `:${p.bytes}`)
    series.set(name, s)
  }
  return [...series.values()].reverse()
}

const code = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0)

t.test('series merge into the documented order, cut at the limit', async (t) => {
  await fc.assert(fc.asyncProperty(points, fc.integer({ min: 0, max: 250 }), async (all, limit) => {
    const expected = [...all]
      .sort((a, b) => a.start - b.start || code(a.endpointId, b.endpointId) || code(a.keyId, b.keyId) || code(a.outcome, b.outcome))
      .slice(0, limit)
      .map((p) => [p.start * 1000, p.endpointId, p.keyId === '' ? null : p.keyId, p.outcome, p.count, p.bytes ?? 0])
    const rows = await mergeSeries(asSeries(all), limit)
    deepStrictEqual(rows.map((r) => [r.start.getTime(), r.endpointId, r.keyId, r.outcome, r.count, r.bytes]), expected)
  }), { numRuns: 200 })
  t.pass('200 random histories merged as sorted')
})

t.test('a range read in parts (its series split at an instant) merges as read whole, each name once', async (t) => {
  const starts = [1_900_000_000, 0, -62_135_596_800, 1_900_000_000 + 30 * HOUR]
  await fc.assert(fc.asyncProperty(points, fc.constantFrom(...starts), fc.integer({ min: 0, max: 250 }), async (all, middle, limit) => {
    const whole = await mergeSeriesColumns(asSeries(all), limit)
    // As PgStorage reads a long range: the buckets before the middle, then from it on.
    const parts = await mergeSeriesColumns([...asSeries(all.filter((p) => p.start < middle)), ...asSeries(all.filter((p) => p.start >= middle))], limit)
    deepStrictEqual(usageRowsOf(parts), usageRowsOf(whole))
    deepStrictEqual(parts.series, whole.series)
  }), { numRuns: 200 })
  t.pass('200 random histories, split at an instant, merged as whole')
})

t.test('rows of one start share one Date; a long series is merged with turns of the event loop', async (t) => {
  const long: UsageSeries = { endpointId: 'e', keyId: 'k', outcome: 'ok', points: Array.from({ length: 20_000 }, (_, i) => `${(20_000 - i) * HOUR}:1`).join(',') }
  const other: UsageSeries = { endpointId: 'e', keyId: '', outcome: 'no_key', points: `${HOUR}:5` }
  let turns = 0
  const counting = setInterval(() => { turns++ }, 0)
  const rows = await mergeSeries([long, other], 30_000)
  clearInterval(counting)
  t.equal(rows.length, 20_001)
  t.same(rows.slice(0, 2).map((r) => [r.start.getTime(), r.keyId]), [[HOUR * 1000, null], [HOUR * 1000, 'k']])
  t.equal(rows[0].start, rows[1].start, 'one Date per start')
  t.ok(rows.every((r, i) => i === 0 || r.start.getTime() >= rows[i - 1].start.getTime()), 'by start')
  t.ok(turns > 0, 'timers ran while it merged')
})
