import type { ArchiveType, FormatName } from '../formats/types.js'
import { UsageError } from './errors.js'

// The query of a dataset download (SPEC.md §4.1), checked before sending.
// Checked locally because the server answers an unknown format with 500,
// which the retry policy would retry five times for nothing.

export const DATASET_FORMATS = ['sql', 'json', 'csv-zip', 'json-zip', 'oracle-loader', 'csv', 'parquet', 'parquet-zip', 'arrow'] as const satisfies readonly FormatName[]
export const ARCHIVE_TYPES = ['zip', 'tar'] as const satisfies readonly ArchiveType[]
export const META_VALUES = ['entities', 'ddl'] as const
// Fails to compile if the server gains a format the client does not list.
const allFormatsListed: Exclude<FormatName, typeof DATASET_FORMATS[number]> extends never ? true : never = true
void allFormatsListed

export interface DatasetQuery {
  /** default on the server: sql */
  format?: FormatName
  /** only this entity */
  entity?: string
  /** `entities`: the entity names as JSON; `ddl`: the schema as SQL text */
  meta?: typeof META_VALUES[number]
  /** for the archive formats; default on the server: zip */
  archiveType?: ArchiveType
  /** at most this many records per entity */
  limit?: number
  /** only these columns, in this order (one entity; the primary key is not added) */
  columns?: readonly string[]
  /** a filter in the server's grammar, e.g. `kind = 'click' and ts >= '2024-01-01T00:00:00Z'` (one entity) */
  where?: string
  /** only the rows changed after this value: the `changesUntil` (Data-Changes-Until) of the previous download */
  since?: string
}

function oneOf<T extends string> (name: string, value: T | undefined, allowed: readonly T[]): T | undefined {
  if (value !== undefined && !allowed.includes(value)) throw new UsageError(`${name} must be one of ${allowed.join(', ')}`)
  return value
}

/** The query parameters of a download; throws UsageError on a value the server would refuse. */
export function datasetParams (query: DatasetQuery): Record<string, string> {
  const params: Record<string, string> = {}
  const format = oneOf('format', query.format, DATASET_FORMATS)
  const meta = oneOf('meta', query.meta, META_VALUES)
  const archiveType = oneOf('archiveType', query.archiveType, ARCHIVE_TYPES)
  if (format !== undefined) params.format = format
  if (query.entity !== undefined) {
    if (query.entity === '') throw new UsageError('entity must not be empty')
    params.entity = query.entity
  }
  if (meta !== undefined) params.meta = meta
  if (archiveType !== undefined) params.archiveType = archiveType
  if (query.limit !== undefined) {
    if (!Number.isSafeInteger(query.limit) || query.limit < 0) throw new UsageError('limit must be a non-negative integer')
    params.limit = String(query.limit)
  }
  if (query.columns !== undefined) {
    if (query.columns.length === 0 || query.columns.some((c) => c === '' || c.includes(','))) {
      throw new UsageError('columns must be a non-empty list of column names, none empty or holding a comma')
    }
    params.columns = query.columns.join(',')
  }
  if (query.where !== undefined) {
    if (query.where.trim() === '') throw new UsageError('where must not be empty')
    params.where = query.where
  }
  if (query.since !== undefined) {
    if (query.since === '') throw new UsageError('since must not be empty')
    params.since = query.since
  }
  return params
}
