import type { Entity } from '../host/dataset-source.js'
import { archiveFileNames } from './archive.js'
import { oneEntity } from './parquet.js'
import type { DownloadFormat, DownloadSpec } from './types.js'

// arrow: one entity as an Arrow IPC stream (arrow-stream.ts writes it).
// apache-arrow is loaded on the first arrow download, not with the plugin:
// loaded, it holds some 10 MiB of every server's memory, most of which never
// serve this format.

export const ARROW_CONTENT_TYPE = 'application/vnd.apache.arrow.stream'

async function * lazyArrowStream (spec: DownloadSpec, entity: Entity): AsyncGenerator<Buffer> {
  const { arrowStream } = await import('./arrow-stream.js')
  yield * arrowStream(spec, entity)
}

/** `arrow`: one entity (the query has checked there is one). */
export const arrowFormat: DownloadFormat = (spec) => {
  const entity = oneEntity(spec, 'arrow')
  return {
    contentType: ARROW_CONTENT_TYPE,
    fileName: `${archiveFileNames([entity])[0]}.arrows`,
    body: lazyArrowStream(spec, entity)
  }
}
