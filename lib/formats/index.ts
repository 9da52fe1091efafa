import type { Readable } from 'node:stream'
import type { Dataset, Entity } from '../dataset-source.js'
import { jsonFormat } from './json.js'

// The download formats of SPEC.md §4.1. Each turns a dataset into a byte
// stream that pulls rows only as fast as the client reads them.

export const FORMAT_NAMES = ['sql', 'json', 'csv-zip', 'json-zip', 'oracle-loader'] as const
export type FormatName = typeof FORMAT_NAMES[number]
export const ARCHIVE_TYPES = ['zip', 'tar'] as const
export type ArchiveType = typeof ARCHIVE_TYPES[number]

export interface DownloadSpec {
  dataset: Dataset
  /** the entities to include, in order (one when `entity` was given) */
  entities: readonly Entity[]
  /** rows per entity; undefined for all */
  limit: number | undefined
  archiveType: ArchiveType
  /** aborted when the client goes away */
  signal: AbortSignal
}

export interface Download {
  contentType: string
  /** file name for Content-Disposition, extension included */
  fileName: string
  body: Readable
}

export type DownloadFormat = (spec: DownloadSpec) => Download

export const FORMATS: Record<FormatName, DownloadFormat | undefined> = {
  sql: undefined,
  json: jsonFormat,
  'csv-zip': undefined,
  'json-zip': undefined,
  'oracle-loader': undefined
}

export function isFormatName (value: unknown): value is FormatName {
  return typeof value === 'string' && (FORMAT_NAMES as readonly string[]).includes(value)
}
