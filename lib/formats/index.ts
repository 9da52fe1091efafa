import { arrowFormat } from './arrow.js'
import { csvFormat, csvZipFormat } from './csv.js'
import { jsonFormat, jsonZipFormat } from './json.js'
import { oracleLoaderFormat } from './oracle.js'
import { parquetFormat, parquetZipFormat } from './parquet.js'
import { sqlFormat } from './sql.js'
import { FORMAT_NAMES, type DownloadFormat, type FormatName } from './types.js'

// The download formats of SPEC.md §4.1, and those DESIGN.md §2 adds. Each turns a dataset into a byte
// stream that pulls rows only as fast as the client reads them.

export * from './types.js'

export const FORMATS: Record<FormatName, DownloadFormat> = {
  sql: sqlFormat,
  json: jsonFormat,
  'csv-zip': csvZipFormat,
  'json-zip': jsonZipFormat,
  'oracle-loader': oracleLoaderFormat,
  csv: csvFormat,
  parquet: parquetFormat,
  'parquet-zip': parquetZipFormat,
  arrow: arrowFormat
}

export function isFormatName (value: unknown): value is FormatName {
  return typeof value === 'string' && (FORMAT_NAMES as readonly string[]).includes(value)
}
