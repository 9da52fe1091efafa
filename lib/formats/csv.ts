import type { Column, Entity, Row } from '../host/dataset-source.js'
import { archiveBody, archiveDownload, archiveFileNames } from './archive.js'
import type { DownloadFormat, DownloadSpec } from './types.js'
import { delimitedRows, entityChunks, rowWriter, separated, type CellWriter } from './rows.js'
import { canonicalText } from './values.js'

// csv-zip: `<entity>.csv` per entity, RFC 4180: a header row, CRLF after
// every record, fields with a comma, quote, CR or LF quoted and their quotes
// doubled, UTF-8 without BOM. NULL is an empty unquoted field and the empty
// string is "" (so the two stay apart). Values are their canonical text
// (values.ts): booleans true/false, binary base64, ISO 8601 dates and times.

const NEEDS_QUOTES = /[",\r\n]/

/** One CSV field: quoted when it must be, "" for the empty string. */
export function csvField (s: string): string {
  if (s === '') return '""'
  return NEEDS_QUOTES.test(s) ? '"' + s.replaceAll('"', '""') + '"' : s
}

function csvCell (column: Column): CellWriter {
  const text = canonicalText(column)
  switch (column.type) {
    case 'text': case 'json': case 'binary':
      return (v) => { const s = text(v); return s === null ? '' : csvField(s) }
    default: // numbers, booleans, dates, times: never empty, no character to quote
      return (v) => text(v) ?? ''
  }
}

export function csvRowWriter (entity: Entity): (row: Row) => string {
  return rowWriter(entity, entity.columns.map(csvCell), separated(entity.columns.length, ','), '\r\n')
}

/** One entity as a CSV file, header row first, in chunks. */
export function csvChunks (spec: DownloadSpec, entity: Entity): AsyncGenerator<string | Buffer> {
  const header = entity.columns.map((c) => csvField(c.name)).join(',') + '\r\n'
  return entityChunks(spec, entity, delimitedRows(csvRowWriter(entity), header, ''))
}

/** `csv-zip`: `<entity>.csv` per entity. */
export const csvZipFormat: DownloadFormat = (spec) => {
  const names = archiveFileNames(spec.entities)
  const entries = spec.entities.map((entity, i) => ({
    name: `${names[i]}.csv`,
    content: () => csvChunks(spec, entity)
  }))
  return archiveDownload(spec, 'csv', archiveBody(entries, spec))
}

/** `csv`: one entity as `<entity>.csv` (the query has checked there is one). */
export const csvFormat: DownloadFormat = (spec) => {
  if (spec.entities.length !== 1) throw new Error(`csv holds one entity, and the download has ${spec.entities.length}`)
  const entity = spec.entities[0]
  return {
    contentType: 'text/csv; charset=utf-8',
    fileName: `${archiveFileNames([entity])[0]}.csv`,
    body: csvChunks(spec, entity)
  }
}
