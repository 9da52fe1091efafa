import { setImmediate } from 'node:timers/promises'
import type { UsageColumns, UsageOutcome, UsageRow } from './storage.js'
import { usageColumns, usageRowsOf } from './usage-columns.js'

/**
 * One series of the usage history: the buckets of one endpoint, key and
 * outcome in a range, as PostgreSQL's `string_agg` writes them:
 * "start:count" or "start:count:bytes" (the bytes its downloads sent) comma-separated, start in epoch seconds, in no particular order. A year of
 * one key by hour is one row of some 150 KB instead of 9,000 rows (the
 * driver made an object of each row, most of a long answer's time), and the
 * server sorts nothing: its sort of a year's buckets was most of its time.
 */
export interface UsageSeries {
  endpointId: string
  /** '' for requests with no key */
  keyId: string
  outcome: UsageOutcome
  points: string
}

/** Points read, or rows made, before the event loop gets a turn. */
const TURN = 2048

const COLON = 58
const COMMA = 44
const MINUS = 45
const ZERO = 48

const byCode = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0)

/**
 * The series' points as the usage history's rows: by start, endpoint id,
 * key id (none first) and outcome, ids compared by code unit (as COLLATE "C"
 * and SQLite do), at most `limit`. The series are taken in that order and
 * their points put in a bucket per start, so each bucket is in order as it
 * fills; then the starts are sorted. No long work in one go: the event loop
 * gets a turn every TURN points and rows. Written as columns: no object
 * per row.
 */
export async function mergeSeriesColumns (series: readonly UsageSeries[], limit: number): Promise<UsageColumns> {
  const ordered = [...series].sort((a, b) => byCode(a.endpointId, b.endpointId) || byCode(a.keyId, b.keyId) || byCode(a.outcome, b.outcome))
  // start (seconds) -> [series index, count, bytes, series index, count, bytes, ...]
  const byStart = new Map<number, number[]>()
  let work = 0
  let points = 0
  for (const [index, { points: text }] of ordered.entries()) {
    if (text === '') continue
    // Digits read in place: no substring per number (less garbage to collect).
    let start = 0
    let count = 0
    let colons = 0
    let value = 0
    let sign = 1 // a start before 1970 is negative
    for (let at = 0; at <= text.length; at++) {
      const code = at < text.length ? text.charCodeAt(at) : COMMA
      if (code === COLON) {
        if (colons++ === 0) start = sign * value
        else count = value
        value = 0
        sign = 1
      } else if (code === MINUS) {
        sign = -1
      } else if (code === COMMA) {
        const bytes = colons >= 2 ? value : 0
        if (colons < 2) count = value
        const bucket = byStart.get(start)
        if (bucket === undefined) byStart.set(start, [index, count, bytes])
        else bucket.push(index, count, bytes)
        points++
        value = 0
        colons = 0
        if (++work % TURN === 0) await setImmediate()
      } else {
        value = value * 10 + code - ZERO
      }
    }
  }
  const starts = [...byStart.keys()].sort((a, b) => a - b)
  await setImmediate()
  const columns = usageColumns(Math.min(points, limit))
  columns.series = ordered.map((s) => ({ endpointId: s.endpointId, keyId: s.keyId === '' ? null : s.keyId, outcome: s.outcome }))
  let n = 0
  for (const start of starts) {
    const bucket = byStart.get(start) as number[]
    for (let i = 0; i < bucket.length && n < limit; i += 3) {
      columns.starts[n] = start * 1000
      columns.seriesOf[n] = bucket[i]
      columns.counts[n] = bucket[i + 1]
      columns.bytes[n] = bucket[i + 2]
      if (++n % TURN === 0) await setImmediate()
    }
    if (n >= limit) break
  }
  columns.length = n
  return columns
}

/** mergeSeriesColumns as rows (what queryUsage answers). */
export async function mergeSeries (series: readonly UsageSeries[], limit: number): Promise<UsageRow[]> {
  return usageRowsOf(await mergeSeriesColumns(series, limit))
}
