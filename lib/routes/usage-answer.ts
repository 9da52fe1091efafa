import { setImmediate } from 'node:timers/promises'
import type { UsageRow } from '../storage/storage.js'

/** Bytes in one piece of the answer (well under a millisecond's work). */
export const USAGE_PIECE_BYTES = 65_536

const COMMA = 44
const CLOSE = 125 // '}'
const ZERO = 48
const BYTES = Buffer.from(',"bytes":')

/** Pieces written between two turns of the event loop. */
const PIECES_PER_TURN = 4

/**
 * usageAnswerPieces with a turn of the event loop every PIECES_PER_TURN
 * pieces, for the route to stream. Without the turns a stream that writes to
 * a fast socket (loopback, a client that reads as fast) moves from piece to
 * piece in process.nextTick callbacks, never leaving the event loop's turn
 * while the socket takes it all: megabytes, tens of milliseconds.
 */
export async function * usageAnswerWithTurns (granularity: 'hour' | 'day', rows: readonly UsageRow[]): AsyncGenerator<Buffer, void, undefined> {
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
 * of milliseconds on a year of all keys by day.
 */
export function * usageAnswerPieces (granularity: 'hour' | 'day', rows: readonly UsageRow[]): Generator<Buffer, void, undefined> {
  let piece = Buffer.allocUnsafe(USAGE_PIECE_BYTES)
  let at = piece.write('{"granularity":' + JSON.stringify(granularity) + ',"rows":[')
  let startTime = NaN
  let startText = Buffer.alloc(0) // '{"start":"…"'
  // endpoint id -> key id ('\0null' for none: ids never hold NUL) -> outcome -> ',"endpointId":…,"keyId":…,"outcome":…,"count":'
  const seriesTexts = new Map<string, Map<string, Map<string, Buffer>>>()
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]
    const time = row.start.getTime()
    if (time !== startTime) {
      startTime = time
      startText = Buffer.from('{"start":' + JSON.stringify(row.start.toISOString()))
    }
    const series = seriesText(seriesTexts, row)
    const count = numberText(row.count)
    const bytes = numberText(row.bytes ?? 0)
    // comma, start, series, count, ',"bytes":', bytes, '}'
    const size = 1 + startText.length + series.length + (count?.length ?? 16) + BYTES.length + (bytes?.length ?? 16) + 1
    if (at + size > piece.length) {
      yield piece.subarray(0, at)
      piece = Buffer.allocUnsafe(Math.max(USAGE_PIECE_BYTES, size))
      at = 0
    }
    if (i > 0) piece[at++] = COMMA
    at += startText.copy(piece, at)
    at += series.copy(piece, at)
    at = count === null ? writeDigits(piece, at, row.count) : at + count.copy(piece, at)
    at += BYTES.copy(piece, at)
    at = bytes === null ? writeDigits(piece, at, row.bytes ?? 0) : at + bytes.copy(piece, at)
    piece[at++] = CLOSE
  }
  if (at + 2 > piece.length) {
    yield piece.subarray(0, at)
    piece = Buffer.allocUnsafe(2)
    at = 0
  }
  at += piece.write(']}', at)
  yield piece.subarray(0, at)
}

function seriesText (texts: Map<string, Map<string, Map<string, Buffer>>>, row: UsageRow): Buffer {
  let byKey = texts.get(row.endpointId)
  if (byKey === undefined) texts.set(row.endpointId, byKey = new Map())
  const key = row.keyId ?? '\0null'
  let byOutcome = byKey.get(key)
  if (byOutcome === undefined) byKey.set(key, byOutcome = new Map())
  let text = byOutcome.get(row.outcome)
  if (text === undefined) {
    text = Buffer.from(',"endpointId":' + JSON.stringify(row.endpointId) + ',"keyId":' + (row.keyId === null ? 'null' : JSON.stringify(row.keyId)) +
      ',"outcome":' + JSON.stringify(row.outcome) + ',"count":')
    byOutcome.set(row.outcome, text)
  }
  return text
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
