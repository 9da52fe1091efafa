import type { Dataset, Entity, RowsOptions } from '../host/dataset-source.js'
import type { DownloadAbort } from './download-abort.js'
import type { Pace } from './pace.js'
import type { ParquetEncoders } from './parquet-encoders.js'
import type { ParquetCodec } from './parquet-row-group.js'
import type { TarSpool } from './tar-spool.js'

// What every download format shares: the names, what a format is given, and
// what it gives back. It imports no format, so the formats import it, and the
// registry (index.ts) imports both, with no circle between them.

export const FORMAT_NAMES = ['sql', 'json', 'csv-zip', 'json-zip', 'oracle-loader', 'csv', 'parquet', 'parquet-zip', 'arrow'] as const
/** Formats that hold one entity: a dataset with several needs `entity`. */
export const ONE_ENTITY_FORMATS: readonly FormatName[] = ['csv', 'parquet', 'arrow']
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
  /** where tar entries wait until their size is known (the plugin's one spool, with its disk budget) */
  tarSpool: TarSpool
  /** set once the response's headers went out: until then a failure can still be answered as an error */
  responseStarted: boolean
  /** aborted when the client goes away; its `signal` is made on first read */
  abort: Pick<DownloadAbort, 'aborted' | 'signal'>
  /** its chunk size and its share of the event loop */
  pace: Pace
  /** Parquet and Arrow */
  columnar: ColumnarSettings
  /**
   * The consumer's columns, filters and change window, passed to `rows()`
   * (the download then holds one entity, already cut to those columns).
   */
  selection?: RowSelectionOptions
}

/** The part of RowsOptions the consumer parameters fill in. */
export type RowSelectionOptions = Pick<RowsOptions, 'columns' | 'filters' | 'since' | 'changesUntil'>

export interface ColumnarSettings {
  /** bytes of values in one Parquet row group or Arrow record batch */
  batchBytes: number
  /** the worker threads that encode Parquet row groups */
  encoders: ParquetEncoders
  /** Parquet's compression of its pages */
  codec: ParquetCodec
}

export interface Download {
  contentType: string
  /** file name for Content-Disposition, extension included */
  fileName: string
  /**
   * The bytes, pulled as the client reads: a generator of text chunks (sql,
   * json) or an archive's Readable. Returning its iterator stops the read.
   */
  body: AsyncIterable<string | Uint8Array>
  /**
   * The whole body in UTF-8, synchronously, when the format can make it
   * at once (a small document of rows the source gave as arrays); else
   * undefined, and `body` goes on from where it stopped, asking the source
   * for no rows twice. Asked at most once, before `body` is read. A small
   * download then skips the generator's awaits.
   */
  whole?: () => Buffer | undefined
}

/** Builds the download; throws (before anything is sent) when the model cannot be written. */
export type DownloadFormat = (spec: DownloadSpec) => Download
