import type { Column, Entity, Row } from '../host/dataset-source.js'
import { archiveBody, archiveFileNames, archiveDownload } from './archive.js'
import type { DownloadFormat, DownloadSpec } from './types.js'
import { utf8Bytes } from './text-bytes.js'
import { entityChunks, perEntity, rowsOptions, rowWriter, separated, type CellWriter } from './rows.js'
import { binaryValue, booleanValue, canonicalText, floatText, floatValue, integerText, integerValue, jsonText } from './values.js'

// json and json-zip. bigint and decimal are strings (no precision lost),
// binary is base64, dates and timestamps ISO 8601 strings, NULL is null.

// Longer strings go to JSON.stringify directly: scanning them costs as much as it does.
const SHORT_STRING = 32

/**
 * Whether JSON.stringify(s) is s in quotes, told by a scan for short
 * strings; a longer one counts as needing JSON.stringify. A download asks
 * this for every text cell, and JSON.stringify, a call into the runtime,
 * costs more than a scan of a few characters.
 */
export function isPlainJsonString (s: string): boolean {
  if (s.length > SHORT_STRING) return false
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    // What JSON.stringify escapes: controls, '"', '\\' and lone surrogates (it is asked about any surrogate).
    if (c < 0x20 || c === 0x22 || c === 0x5c || (c >= 0xd800 && c <= 0xdfff)) return false
  }
  return true
}

/**
 * A column's member of a row object: `key` (the text before the value, such
 * as ',"kind":') and the value as a JSON literal. Each writer writes its own
 * key, so a row costs one string concatenation per column, and NULL costs
 * none.
 */
function jsonMember (column: Column, key: string): CellWriter {
  const nullMember = key + 'null'
  const quoted = key + '"' // before a string value written as it is
  switch (column.type) {
    case 'integer': return (v) => { const n = integerValue(v); return n === null ? nullMember : key + integerText(n) }
    case 'float': return (v) => { const n = floatValue(v); return n === null ? nullMember : key + floatText(n) }
    case 'boolean': {
      const [yes, no] = [key + 'true', key + 'false']
      return (v) => { const b = booleanValue(v); return b === null ? nullMember : b ? yes : no }
    }
    case 'text': {
      const text = canonicalText(column)
      return (v) => {
        const s = text(v)
        return s === null ? nullMember : isPlainJsonString(s) ? quoted + s + '"' : key + JSON.stringify(s)
      }
    }
    case 'json': return (v) => { const s = jsonText(v); return s === null ? nullMember : key + s }
    case 'binary': return (v) => { const b = binaryValue(v); return b === null ? nullMember : quoted + b.toString('base64') + '"' }
    default: {
      // bigint, decimal, date, timestamp: canonical text holds no character JSON escapes
      const text = canonicalText(column)
      return (v) => { const s = text(v); return s === null ? nullMember : quoted + s + '"' }
    }
  }
}

/** Serialises one row as a JSON object, keys in column order, with `start` before it. */
export function jsonRowWriter (entity: Entity, start = ''): (row: Row) => string {
  const members = entity.columns.map((c, i) => jsonMember(c, (i === 0 ? start + '{' : ',') + JSON.stringify(c.name) + ':'))
  return rowWriter(entity, members, separated(members.length, ''), '}')
}

/** The first row's writer, and the others' (the separator written with the first key: no concatenation of its own). */
const arrayRowWriters = perEntity((entity) => [jsonRowWriter(entity), jsonRowWriter(entity, ',\n')] as const)

/**
 * One entity as a JSON array of row objects, one row per line, in chunks,
 * with `before` and `after` around it.
 */
export function jsonArrayChunks (spec: DownloadSpec, entity: Entity, before = '', after = '\n', rows?: Iterable<Row> | AsyncIterable<Row>): AsyncGenerator<string | Buffer> {
  const [first, next] = arrayRowWriters(entity)
  return entityChunks(spec, entity, {
    head: before + '[\n',
    row: (row, i) => (i === 0 ? first(row) : next(row)),
    tail: () => '\n]' + after
  }, rows)
}

/**
 * The whole document, in UTF-8, in one synchronous pass, when every entity's rows come
 * as an array (a source that has read them already, as the example's does
 * for a small table) and the text stays within one chunk. A small download
 * then takes one step of the generator instead of several awaits per entity
 * (about 16 µs of the example's 17-row `sales`). Otherwise undefined, with
 * the rows asked for so far in `taken`, for the streamed path to go on with:
 * no entity's rows are asked for twice. It holds the loop for no more than
 * writing one chunk of text.
 */
function wholeDocument (spec: DownloadSpec, taken: Array<Iterable<Row> | AsyncIterable<Row>>): Buffer | undefined {
  const { entities, limit } = spec
  const { chunkSize } = spec.pace
  if (limit === 0 || entities.length === 0) return undefined
  let out = ''
  for (let i = 0; i < entities.length; i++) {
    const rows = spec.dataset.rows(entities[i].name, rowsOptions(spec, limit))
    taken.push(rows)
    if (!Array.isArray(rows)) return undefined
    const [first, next] = arrayRowWriters(entities[i])
    out += (i === 0 ? '{' : ',') + JSON.stringify(entities[i].name) + ':[\n'
    // The source may ignore the limit.
    const n = limit === undefined ? rows.length : Math.min(limit, rows.length)
    for (let r = 0; r < n; r++) {
      out += r === 0 ? first(rows[r] as Row) : next(rows[r] as Row)
      if (out.length > chunkSize) return undefined
    }
    out += '\n]'
  }
  return utf8Bytes(out + '}\n')
}

/** The rows asked for by Download.whole, and whether it was asked: the body goes on from there. */
interface WholeAttempt {
  tried: boolean
  taken: Array<Iterable<Row> | AsyncIterable<Row>>
}

async function * jsonDocument (spec: DownloadSpec, attempt: WholeAttempt): AsyncGenerator<string | Buffer> {
  const { entities } = spec
  if (entities.length === 0) yield '{}\n'
  // Nothing is sent before the first rows are read: a source that fails at
  // once still gets a clean 500.
  const { taken } = attempt
  const whole = attempt.tried ? undefined : wholeDocument(spec, taken)
  if (whole !== undefined) {
    yield whole
    return
  }
  let i = 0
  try {
    for (; i < entities.length; i++) {
      const before = (i === 0 ? '{' : ',') + JSON.stringify(entities[i].name) + ':'
      yield * jsonArrayChunks(spec, entities[i], before, i === entities.length - 1 ? '}\n' : '', taken[i])
    }
  } finally {
    // Rows asked for but never reached (the download stopped before their entity): let the source free them.
    for (let j = i + 1; j < taken.length; j++) await closeRows(taken[j])
  }
}

async function closeRows (rows: Iterable<Row> | AsyncIterable<Row>): Promise<void> {
  if (Array.isArray(rows)) return
  const iterator = Symbol.asyncIterator in rows ? rows[Symbol.asyncIterator]() : rows[Symbol.iterator]()
  await iterator.return?.()
}

/** `json`: one object keyed by entity name, each an array of row objects. */
export const jsonFormat: DownloadFormat = (spec) => {
  const attempt: WholeAttempt = { tried: false, taken: [] }
  return {
    contentType: 'application/json; charset=utf-8',
    fileName: `${spec.dataset.name}.json`,
    body: jsonDocument(spec, attempt),
    whole: () => {
      attempt.tried = true
      return wholeDocument(spec, attempt.taken)
    }
  }
}

/** `json-zip`: `<entity>.json` per entity, each an array of row objects. */
export const jsonZipFormat: DownloadFormat = (spec) => {
  const names = archiveFileNames(spec.entities)
  const entries = spec.entities.map((entity, i) => ({
    name: `${names[i]}.json`,
    content: () => jsonArrayChunks(spec, entity)
  }))
  return archiveDownload(spec, 'json', archiveBody(entries, spec))
}
