import { Readable } from 'node:stream'
import type { Entity } from '../dataset-source.js'
import type { DownloadFormat, DownloadSpec } from './index.js'
import { CHUNK_SIZE, entityRows } from './rows.js'
import { jsonValueOf } from './values.js'

/** Serialises one row as a JSON object, keys in column order. */
export function jsonRowWriter (entity: Entity): (row: readonly unknown[]) => string {
  const keys = entity.columns.map((c) => JSON.stringify(c.name) + ':')
  const values = entity.columns.map(jsonValueOf)
  return (row) => {
    let out = '{'
    for (let i = 0; i < keys.length; i++) {
      const v = values[i](row[i])
      out += (i === 0 ? '' : ',') + keys[i] + (v === null ? 'null' : JSON.stringify(v))
    }
    return out + '}'
  }
}

/** One entity as a JSON array of row objects, in chunks. */
export async function * jsonArrayChunks (spec: DownloadSpec, entity: Entity): AsyncGenerator<string> {
  const write = jsonRowWriter(entity)
  let chunk = '['
  let first = true
  for await (const row of entityRows(spec.dataset, entity.name, spec.limit, spec.signal)) {
    chunk += (first ? '' : ',') + write(row)
    first = false
    if (chunk.length >= CHUNK_SIZE) {
      yield chunk
      chunk = ''
    }
  }
  yield chunk + ']'
}

async function * jsonDocument (spec: DownloadSpec): AsyncGenerator<string> {
  let separator = '{'
  for (const entity of spec.entities) {
    yield separator + JSON.stringify(entity.name) + ':'
    yield * jsonArrayChunks(spec, entity)
    separator = ','
  }
  yield separator === '{' ? '{}' : '}'
}

/** `json`: one object keyed by entity name, each an array of row objects. */
export const jsonFormat: DownloadFormat = (spec) => ({
  contentType: 'application/json; charset=utf-8',
  fileName: `${spec.dataset.name}.json`,
  body: Readable.from(jsonDocument(spec), { objectMode: false })
})
