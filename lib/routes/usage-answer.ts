import type { UsageRow } from '../storage/storage.js'

/** Rows written into one piece of the answer (a few milliseconds' work). */
const ROWS_PER_PIECE = 4096

/**
 * The usage route's answer as JSON text, in pieces of ROWS_PER_PIECE rows:
 * together the bytes of `JSON.stringify({ granularity, rows })` with each
 * start as ISO 8601 text. The route streams the pieces, so the event loop
 * turns between them, and a year of a busy project's history (tens of
 * thousands of rows, megabytes of JSON) never holds it for long. Written
 * here rather than by the response schema's serializer, which wanted a
 * second object per row (the start as text) and a date format per row:
 * garbage collection took a third of the answer's time. Here a start's text
 * and an endpoint's are written once for all their rows.
 */
export function * usageAnswerPieces (granularity: 'hour' | 'day', rows: readonly UsageRow[]): Generator<string, void, undefined> {
  let out = '{"granularity":' + JSON.stringify(granularity) + ',"rows":['
  let startTime = NaN
  let startText = ''
  let endpointId = ''
  let head = '' // '{"start":…,"endpointId":…,"keyId":'
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]
    const time = row.start.getTime()
    if (time !== startTime || row.endpointId !== endpointId || i === 0) {
      if (time !== startTime) {
        startTime = time
        startText = JSON.stringify(row.start.toISOString())
      }
      endpointId = row.endpointId
      head = '{"start":' + startText + ',"endpointId":' + JSON.stringify(endpointId) + ',"keyId":'
    }
    out += (i === 0 ? head : ',' + head) + (row.keyId === null ? 'null' : JSON.stringify(row.keyId)) +
      ',"outcome":' + JSON.stringify(row.outcome) + ',"count":' + String(row.count) + ',"bytes":' + String(row.bytes ?? 0) + '}'
    if ((i + 1) % ROWS_PER_PIECE === 0) yield out + (out = '')
  }
  yield out + ']}'
}
