import { setImmediate } from 'node:timers/promises'
import type { UsageOutcome, UsageRow } from './storage.js'

/**
 * One series of the usage history: the buckets of one endpoint, key and
 * outcome in a range, as PostgreSQL's `string_agg` writes them ("start:count"
 * by start, comma-separated, start in epoch milliseconds). A year of one
 * key by hour is one row of some 150 KB instead of 9,000 rows: the driver
 * parsed each row into an object of its own, most of a long answer's time.
 */
export interface UsageSeries {
  endpointId: string
  /** '' for requests with no key */
  keyId: string
  outcome: UsageOutcome
  points: string
}

/** Rows merged before the event loop gets a turn. */
const TURN_ROWS = 1024

/** A series read a point at a time, so that no long text is split at once. */
class SeriesCursor {
  start = 0
  count = 0
  #at = 0

  constructor (readonly series: UsageSeries, readonly rank: number) {}

  /** Reads the next point into start and count; false at the end. */
  next (): boolean {
    const text = this.series.points
    if (this.#at >= text.length) return false
    const colon = text.indexOf(':', this.#at)
    let comma = text.indexOf(',', colon)
    if (comma === -1) comma = text.length
    this.start = Number(text.slice(this.#at, colon))
    this.count = Number(text.slice(colon + 1, comma))
    this.#at = comma + 1
    return true
  }
}

const byCode = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0)

/** Whether cursor a's point comes before b's: by start, then by the series' order. */
const before = (a: SeriesCursor, b: SeriesCursor): boolean => a.start < b.start || (a.start === b.start && a.rank < b.rank)

/**
 * The series' points as the usage history's rows: by start, endpoint id,
 * key id (none first) and outcome, ids compared by code unit (as COLLATE "C"
 * and SQLite do), at most `limit`. A heap over the series; the event loop
 * gets a turn every TURN_ROWS rows. Rows of one start share one Date.
 */
export async function mergeSeries (series: readonly UsageSeries[], limit: number): Promise<UsageRow[]> {
  const ordered = [...series].sort((a, b) => byCode(a.endpointId, b.endpointId) || byCode(a.keyId, b.keyId) || byCode(a.outcome, b.outcome))
  const heap: SeriesCursor[] = []
  for (const [rank, s] of ordered.entries()) {
    const cursor = new SeriesCursor(s, rank)
    if (cursor.next()) push(heap, cursor)
  }
  const rows: UsageRow[] = []
  let at = new Date(NaN)
  let turnAt = TURN_ROWS
  while (heap.length > 0 && rows.length < limit) {
    const top = heap[0]
    if (at.getTime() !== top.start) at = new Date(top.start)
    const { endpointId, keyId, outcome } = top.series
    rows.push({ start: at, endpointId, keyId: keyId === '' ? null : keyId, outcome, count: top.count })
    if (top.next()) siftDown(heap, 0)
    else {
      const last = heap.pop() as SeriesCursor
      if (heap.length > 0) {
        heap[0] = last
        siftDown(heap, 0)
      }
    }
    if (rows.length >= turnAt) {
      turnAt += TURN_ROWS
      await setImmediate()
    }
  }
  return rows
}

function push (heap: SeriesCursor[], cursor: SeriesCursor): void {
  heap.push(cursor)
  let i = heap.length - 1
  while (i > 0) {
    const parent = (i - 1) >> 1
    if (!before(heap[i], heap[parent])) break
    ;[heap[i], heap[parent]] = [heap[parent], heap[i]]
    i = parent
  }
}

function siftDown (heap: SeriesCursor[], i: number): void {
  for (;;) {
    const left = 2 * i + 1
    const right = left + 1
    let first = i
    if (left < heap.length && before(heap[left], heap[first])) first = left
    if (right < heap.length && before(heap[right], heap[first])) first = right
    if (first === i) return
    ;[heap[i], heap[first]] = [heap[first], heap[i]]
    i = first
  }
}
