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

/** The points of all series as they are read, in growing typed columns: nothing for the collector to copy. */
class Points {
  length = 0
  starts = new Float64Array(1024)
  series = new Uint32Array(1024)
  counts = new Float64Array(1024)
  bytes = new Float64Array(1024)

  add (start: number, series: number, count: number, bytes: number): void {
    if (this.length === this.starts.length) this.grow()
    const i = this.length++
    this.starts[i] = start
    this.series[i] = series
    this.counts[i] = count
    this.bytes[i] = bytes
  }

  private grow (): void {
    const size = this.length * 2
    this.starts = grown(this.starts, new Float64Array(size))
    this.series = grown(this.series, new Uint32Array(size))
    this.counts = grown(this.counts, new Float64Array(size))
    this.bytes = grown(this.bytes, new Float64Array(size))
  }
}

function grown<T extends Float64Array | Uint32Array> (from: T, to: T): T {
  to.set(from)
  return to
}

/**
 * Reads one series' text into `points`; digits read in place, no substring
 * per number. A loop per number rather than one loop with a branch on every
 * character: the texts of a year of all keys are some two million characters
 * (docs/benchmarks.md). Stops at the end of the text, whatever it holds.
 */
function readSeries (text: string, index: number, points: Points): void {
  const n = text.length
  let at = 0
  while (at < n) {
    let sign = 1 // a start before 1970 is negative
    if (text.charCodeAt(at) === MINUS) {
      sign = -1
      at++
    }
    let start = 0
    let c = 0
    for (; at < n && (c = text.charCodeAt(at)) !== COLON; at++) start = start * 10 + c - ZERO
    at++
    let count = 0
    for (; at < n && (c = text.charCodeAt(at)) !== COLON && c !== COMMA; at++) count = count * 10 + c - ZERO
    let bytes = 0
    if (at < n && c === COLON) {
      for (at++; at < n && (c = text.charCodeAt(at)) !== COMMA; at++) bytes = bytes * 10 + c - ZERO
    }
    points.add(sign * start, index, count, bytes)
    at++ // the comma
  }
}

/**
 * The series' points as the usage history's rows: by start, endpoint id,
 * key id (none first) and outcome, ids compared by code unit (as COLLATE "C"
 * and SQLite do), at most `limit`. The series are read in that order, then
 * the points are placed by start with a counting sort over the distinct
 * starts (a year by hour has 8,760), which keeps each start's points in
 * series order. No long work in one go: the event loop gets a turn every
 * TURN points. Everything a query holds while it runs is in typed arrays:
 * with a bucket array per start and a boxed number per start, a year of all
 * keys by day left the young generation's collections some 5 MB to copy
 * each time, pauses of 5-15 ms.
 */
export async function mergeSeriesColumns (series: readonly UsageSeries[], limit: number): Promise<UsageColumns> {
  const byName = (a: UsageSeries, b: UsageSeries): number => byCode(a.endpointId, b.endpointId) || byCode(a.keyId, b.keyId) || byCode(a.outcome, b.outcome)
  const ordered = [...series].sort(byName)
  // One name may come in several series (a range read in parts): their points are one series.
  const names: UsageSeries[] = []
  const points = new Points()
  let read = 0
  for (const s of ordered) {
    if (names.length === 0 || byName(names[names.length - 1], s) !== 0) names.push(s)
    if (s.points === '') continue
    readSeries(s.points, names.length - 1, points)
    if (points.length - read >= TURN) {
      read = points.length
      await setImmediate()
    }
  }
  // Each point's start's rank among the distinct starts, and how many points each start has.
  const rankOf = new Map<number, number>()
  for (let i = 0; i < points.length; i++) {
    if (!rankOf.has(points.starts[i])) rankOf.set(points.starts[i], 0)
    if ((i + 1) % TURN === 0) await setImmediate()
  }
  const starts = [...rankOf.keys()].sort((a, b) => a - b)
  for (let r = 0; r < starts.length; r++) rankOf.set(starts[r], r)
  const ranks = new Uint32Array(points.length)
  const next = new Uint32Array(starts.length + 1)
  for (let i = 0; i < points.length; i++) {
    const rank = rankOf.get(points.starts[i]) as number
    ranks[i] = rank
    next[rank + 1]++
    if ((i + 1) % TURN === 0) await setImmediate()
  }
  for (let r = 1; r <= starts.length; r++) next[r] += next[r - 1]
  const length = Math.min(points.length, limit)
  const columns = usageColumns(length)
  columns.series = names.map((s) => ({ endpointId: s.endpointId, keyId: s.keyId === '' ? null : s.keyId, outcome: s.outcome }))
  for (let i = 0; i < points.length; i++) {
    const at = next[ranks[i]]++
    if (at < length) {
      columns.starts[at] = points.starts[i] * 1000
      columns.seriesOf[at] = points.series[i]
      columns.counts[at] = points.counts[i]
      columns.bytes[at] = points.bytes[i]
    }
    if ((i + 1) % TURN === 0) await setImmediate()
  }
  columns.length = length
  return columns
}

/** mergeSeriesColumns as rows (what queryUsage answers). */
export async function mergeSeries (series: readonly UsageSeries[], limit: number): Promise<UsageRow[]> {
  return usageRowsOf(await mergeSeriesColumns(series, limit))
}
