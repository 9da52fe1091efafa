import type { Column, Entity, Row } from '../dataset-source.js'
import { archiveBody, archiveFileNames, archiveDownload } from './archive.js'
import type { DownloadFormat, DownloadSpec } from './index.js'
import { delimitedRows, entityChunks, rowWriter, type CellWriter } from './rows.js'
import { binaryValue, booleanValue, canonicalText, floatText, floatValue, integerValue, jsonText } from './values.js'

// json and json-zip. bigint and decimal are strings (no precision lost),
// binary is base64, dates and timestamps ISO 8601 strings, NULL is null.

/** A column's value as a JSON literal. */
function jsonCell (column: Column): CellWriter {
  switch (column.type) {
    case 'integer': return (v) => { const n = integerValue(v); return n === null ? 'null' : String(n) }
    case 'float': return (v) => { const n = floatValue(v); return n === null ? 'null' : floatText(n) }
    case 'boolean': return (v) => { const b = booleanValue(v); return b === null ? 'null' : b ? 'true' : 'false' }
    case 'text': {
      const text = canonicalText(column)
      return (v) => { const s = text(v); return s === null ? 'null' : JSON.stringify(s) }
    }
    case 'json': return (v) => jsonText(v) ?? 'null'
    case 'binary': return (v) => { const b = binaryValue(v); return b === null ? 'null' : '"' + b.toString('base64') + '"' }
    default: {
      // bigint, decimal, date, timestamp: canonical text holds no character JSON escapes
      const text = canonicalText(column)
      return (v) => { const s = text(v); return s === null ? 'null' : '"' + s + '"' }
    }
  }
}

/** Serialises one row as a JSON object, keys in column order. */
export function jsonRowWriter (entity: Entity): (row: Row) => string {
  const keys = entity.columns.map((c, i) => (i === 0 ? '{' : ',') + JSON.stringify(c.name) + ':')
  return rowWriter(entity, entity.columns.map(jsonCell), keys, '}')
}

/**
 * One entity as a JSON array of row objects, one row per line, in chunks,
 * with `before` and `after` around it.
 */
export function jsonArrayChunks (spec: DownloadSpec, entity: Entity, before = '', after = '\n'): AsyncGenerator<string> {
  return entityChunks(spec, entity, delimitedRows(jsonRowWriter(entity), before + '[\n', '\n]' + after, ',\n'))
}

async function * jsonDocument (spec: DownloadSpec): AsyncGenerator<string> {
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
