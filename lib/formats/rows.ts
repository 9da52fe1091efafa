import type { Dataset, Row } from '../dataset-source.js'

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
