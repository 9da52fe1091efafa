import type { Column, Entity, Row } from '../host/dataset-source.js'
import { archiveBody, archiveFileNames, archiveDownload } from './archive.js'
import type { DownloadFormat, DownloadSpec } from './types.js'
import { entityChunks, perEntity, rowWriter, separated, type CellWriter } from './rows.js'
import { binaryValue, booleanValue, canonicalText, floatText, floatValue, integerValue, jsonText } from './values.js'

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
    case 'integer': return (v) => { const n = integerValue(v); return n === null ? nullMember : key + String(n) }
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
export function jsonArrayChunks (spec: DownloadSpec, entity: Entity, before = '', after = '\n'): AsyncGenerator<string | Buffer> {
  const [first, next] = arrayRowWriters(entity)
  return entityChunks(spec, entity, {
    head: before + '[\n',
    row: (row, i) => (i === 0 ? first(row) : next(row)),
    tail: () => '\n]' + after
  })
}

async function * jsonDocument (spec: DownloadSpec): AsyncGenerator<string | Buffer> {
  const { entities } = spec
  if (entities.length === 0) yield '{}\n'
  for (let i = 0; i < entities.length; i++) {
    // Nothing is sent before the first rows are read: a source that fails at
    // once still gets a clean 500.
    const before = (i === 0 ? '{' : ',') + JSON.stringify(entities[i].name) + ':'
    yield * jsonArrayChunks(spec, entities[i], before, i === entities.length - 1 ? '}\n' : '')
  }
}

/** `json`: one object keyed by entity name, each an array of row objects. */
export const jsonFormat: DownloadFormat = (spec) => ({
  contentType: 'application/json; charset=utf-8',
  fileName: `${spec.dataset.name}.json`,
  body: jsonDocument(spec)
})

/** `json-zip`: `<entity>.json` per entity, each an array of row objects. */
export const jsonZipFormat: DownloadFormat = (spec) => {
  const names = archiveFileNames(spec.entities)
  const entries = spec.entities.map((entity, i) => ({
    name: `${names[i]}.json`,
    content: () => jsonArrayChunks(spec, entity)
  }))
  return archiveDownload(spec, 'json', archiveBody(entries, spec))
}
