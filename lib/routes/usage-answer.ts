import { setImmediate } from 'node:timers/promises'
import type { UsageColumns, UsageSeriesName } from '../storage/storage.js'

/** Bytes in one piece of the answer (well under a millisecond's work), at most. */
export const USAGE_PIECE_BYTES = 65_536

const COMMA = 44
const CLOSE = 125 // '}'
const ZERO = 48
const COLON = 58
const DOT = 46
const Z = 90
const QUOTE = 34
const BYTES = Buffer.from(',"bytes":')
const START = Buffer.from('{"start":"')
/** toISOString()'s length for a year 0 to 9999, written here without a Date; other years are longer and take a Date's. */
const ISO_LENGTH = 24
const DAY_MS = 86_400_000

/** Pieces written between two turns of the event loop. */
const PIECES_PER_TURN = 4

/**
 * usageAnswerPieces with a turn of the event loop every PIECES_PER_TURN
 * pieces, for the route to stream. Without the turns a stream that writes to
 * a fast socket (loopback, a client that reads as fast) moves from piece to
 * piece in process.nextTick callbacks, never leaving the event loop's turn
 * while the socket takes it all: megabytes, tens of milliseconds.
 */
export async function * usageAnswerWithTurns (granularity: 'hour' | 'day', rows: UsageColumns): AsyncGenerator<string, void, undefined> {
  let pieces = 0
  for (const piece of usageAnswerPieces(granularity, rows)) {
    if (pieces++ > 0 && pieces % PIECES_PER_TURN === 1) await setImmediate()
    yield piece
  }
}

/**
 * The usage route's answer as JSON bytes, in pieces of about
 * USAGE_PIECE_BYTES: together the bytes of `JSON.stringify({ granularity,
 * rows })` with each start as ISO 8601 text. The route streams the pieces, so
 * the event loop turns between them, and a year of a busy project's history
 * (tens of thousands of rows, megabytes of JSON) never holds it for long.
 * Written here rather than by the response schema's serializer, which wanted
 * a second object per row and a date format per row. Each row's bytes are
 * copied from texts made once: a start's, and a series' (endpoint, key and
 * outcome), so a row makes no garbage; strings built a row at a time made so
 * much that the young generation's collections held the event loop for tens
 * of milliseconds on a year of all keys by day. The rows come as columns
 * (UsageColumns) for the same reason.
 *
 * The bytes are written into one buffer, reused, and each piece is handed on
 * as its text (UTF-8; a piece ends between rows, so never inside a
 * character). A fresh Buffer per piece was 12 MB of external memory per
 * answer of a year of all keys by day: V8 answered that growth with a major
 * collection every query or two, whose marking threads took the two cores
 * from the event loop for 10-20 ms at a time. A text lives in the young
 * generation and dies there.
 */
export function * usageAnswerPieces (granularity: 'hour' | 'day', rows: UsageColumns): Generator<string, void, undefined> {
  let piece = Buffer.allocUnsafe(USAGE_PIECE_BYTES)
  let at = piece.write('{"granularity":' + JSON.stringify(granularity) + ',"rows":[')
  let startTime = NaN
  // The start's ISO text, written into `startText` once per start: a
  // year of one key by hour has a new start every row.
  let startText = Buffer.alloc(0)
  let day = NaN
  // per series: ',"endpointId":…,"keyId":…,"outcome":…,"count":'
  const seriesTexts: Array<Buffer | undefined> = []
  const { starts, seriesOf, counts, bytes: byteCounts } = rows
  for (let i = 0; i < rows.length; i++) {
    const time = starts[i]
    if (time !== startTime) {
      startTime = time
      const startDay = Math.floor(time / DAY_MS)
      if (startDay !== day) {
        // The day's text ("2030-01-01T"), from a Date once a day.
        day = startDay
        const iso = new Date(day * DAY_MS).toISOString()
        // '{"start":"', the ISO text (as long for every time of the day), '"'
        startText = Buffer.alloc(START.length + iso.length + 1)
        START.copy(startText)
        startText.write(iso, START.length, 'latin1')
        startText[startText.length - 1] = QUOTE
      }
      writeStart(startText, time, day)
    }
    const s = seriesOf[i]
    const series = seriesTexts[s] ??= seriesText(rows.series[s])
    const count = numberText(counts[i])
    const bytes = numberText(byteCounts[i])
    // comma, start, series, count, ',"bytes":', bytes, '}'
    const size = 1 + startText.length + series.length + (count?.length ?? 16) + BYTES.length + (bytes?.length ?? 16) + 1
    if (at + size > piece.length) {
      yield piece.toString('utf8', 0, at)
      // Only a row longer than a piece needs a larger buffer.
      if (size > piece.length) piece = Buffer.allocUnsafe(size)
      at = 0
    }
    if (i > 0) piece[at++] = COMMA
    // Uint8Array's set, not Buffer's copy, which checks its arguments first: a
    // year of all keys by day (73,275 rows) took 44 ms to write here, now 31.
    at = put(piece, at, startText)
    at = put(piece, at, series)
    at = count === null ? writeDigits(piece, at, counts[i]) : put(piece, at, count)
    at = put(piece, at, BYTES)
    at = bytes === null ? writeDigits(piece, at, byteCounts[i]) : put(piece, at, bytes)
    piece[at++] = CLOSE
  }
  if (at + 2 > piece.length) {
    yield piece.toString('utf8', 0, at)
    at = 0
  }
  at += piece.write(']}', at)
  yield piece.toString('utf8', 0, at)
}

/**
 * Writes `time`'s ISO 8601 text and its closing quote after '{"start":"' in
 * `start`, which holds that day's toISOString() (its 'YYYY-MM-DDT' stays).
 * The time of day is written by hand; a year outside 0 to 9999, whose text
 * is longer, takes toISOString() whole.
 */
function writeStart (start: Buffer, time: number, day: number): void {
  const dayText = START.length + 11 // '{"start":"' and 'YYYY-MM-DDT'
  if (start.length !== START.length + ISO_LENGTH + 1) {
    start.write(new Date(time).toISOString(), START.length, 'latin1')
    return
  }
  let ms = time - day * DAY_MS
  const hours = Math.floor(ms / 3_600_000)
  ms -= hours * 3_600_000
  const minutes = Math.floor(ms / 60_000)
  ms -= minutes * 60_000
  const seconds = Math.floor(ms / 1000)
  ms -= seconds * 1000
  twoDigits(start, dayText, hours)
  start[dayText + 2] = COLON
  twoDigits(start, dayText + 3, minutes)
  start[dayText + 5] = COLON
  twoDigits(start, dayText + 6, seconds)
  start[dayText + 8] = DOT
  start[dayText + 9] = ZERO + Math.floor(ms / 100)
  twoDigits(start, dayText + 10, ms % 100)
  start[dayText + 12] = Z
}

/** `bytes` into `piece` at `at`; the offset after them. */
function put (piece: Buffer, at: number, bytes: Buffer): number {
  piece.set(bytes, at)
  return at + bytes.length
}

function twoDigits (buffer: Buffer, at: number, n: number): void {
  buffer[at] = ZERO + Math.floor(n / 10)
  buffer[at + 1] = ZERO + (n % 10)
}

function seriesText (series: UsageSeriesName): Buffer {
  return Buffer.from(',"endpointId":' + JSON.stringify(series.endpointId) + ',"keyId":' + (series.keyId === null ? 'null' : JSON.stringify(series.keyId)) +
    ',"outcome":' + JSON.stringify(series.outcome) + ',"count":')
}

/** null for a safe non-negative integer (writeDigits writes it), else its JSON text. */
function numberText (n: number): Buffer | null {
  return Number.isSafeInteger(n) && n >= 0 ? null : Buffer.from(JSON.stringify(n))
}

/** A safe non-negative integer's decimal digits at `at`; the offset after them. */
function writeDigits (piece: Buffer, at: number, n: number): number {
  let digits = 1
  for (let rest = n; rest >= 10; rest = Math.floor(rest / 10)) digits++
  let end = at + digits
  for (let rest = n; end > at; rest = Math.floor(rest / 10)) piece[--end] = ZERO + (rest % 10)
  return at + digits
}
