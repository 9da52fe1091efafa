import type { Dataset, Entity, Row } from '../dataset-source.js'
import { columnError } from './values.js'

/**
 * One entity's rows, at most `limit` of them even if the source ignores the
 * limit. Stopping early returns the source's iterator, so it stops reading.
 */
export async function * entityRows (dataset: Dataset, entity: string, limit: number | undefined, signal: AbortSignal): AsyncGenerator<Row> {
  if (limit === 0) return
  let n = 0
  for await (const row of dataset.rows(entity, { limit, signal })) {
    yield row
    if (limit !== undefined && ++n >= limit) return
  }
}

/** Text chunks are gathered up to this size before they are handed to the stream. */
export const CHUNK_SIZE = 64 * 1024

/** Writes one value of a column as the format's text (NULL included). */
export type CellWriter = (value: unknown) => string

/**
 * Joins per-column writers into a row writer: `prefix`, the cells separated
 * by `separator`, `suffix`. A refused value becomes an error that names the
 * entity and column.
 */
export function rowWriter (entity: Entity, cells: readonly CellWriter[], separator: string, prefix = '', suffix = ''): (row: Row) => string {
  const n = cells.length
  return (row) => {
    let i = 0
    try {
      let out = prefix + cells[0](row[0])
      for (i = 1; i < n; i++) out += separator + cells[i](row[i])
      return out + suffix
    } catch (err) {
      throw columnError(entity.name, entity.columns[i].name, err)
    }
  }
}

/**
 * One entity's rows as text chunks of about CHUNK_SIZE: `head`, each row
 * through `write`, `tail`. `between` goes between rows (not before the first).
 */
export async function * rowTextChunks (
  rows: AsyncIterable<Row>, write: (row: Row) => string, head: string, tail: string, between = ''
): AsyncGenerator<string> {
  let chunk = head
  let first = true
  for await (const row of rows) {
    chunk += (first ? '' : between) + write(row)
    first = false
    if (chunk.length >= CHUNK_SIZE) {
      yield chunk
      chunk = ''
    }
  }
  yield chunk + tail
}
