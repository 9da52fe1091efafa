import type { Entity, Row, RowsOptions } from '../dataset-source.js'
import type { DownloadSpec } from './index.js'
import { columnError } from './values.js'

/** Text chunks are gathered up to this size before they are handed to the stream. */
export const CHUNK_SIZE = 64 * 1024

/** Writes one value of a column as the format's text (NULL included). */
export type CellWriter = (value: unknown) => string

/**
 * Joins per-column writers into a row writer: `before[i]` and cell i for
 * each column, then `after`. A refused value becomes an error that names the
 * entity and column.
 */
export function rowWriter (entity: Entity, cells: readonly CellWriter[], before: readonly string[], after: string): (row: Row) => string {
  const n = cells.length
  return (row) => {
    let i = 0
    try {
      let out = before[0] + cells[0](row[0])
      for (i = 1; i < n; i++) out += before[i] + cells[i](row[i])
      return out + after
    } catch (err) {
      throw columnError(entity.name, entity.columns[i].name, err)
    }
  }
}

/** `first` before the first cell, `separator` before the others. */
export function separated (count: number, separator: string, first = ''): string[] {
  return Array.from({ length: count }, (_, i) => (i === 0 ? first : separator))
}

export interface EntityText {
  /** text before the first row */
  head: string
  /** the text of one row (`index` counts from 0), separators included */
  row: (row: Row, index: number) => string
  /** text after the last row, asked for once the rows are done */
  tail: () => string
}

function isSyncIterable (value: object): value is Iterable<Row> {
  return typeof (value as Iterable<Row>)[Symbol.iterator] === 'function' &&
    typeof (value as AsyncIterable<Row>)[Symbol.asyncIterator] !== 'function'
}

// %AsyncGeneratorPrototype%, which every `async function *` object inherits.
const AsyncGeneratorPrototype = Object.getPrototypeOf(async function * () {}).prototype as AsyncGenerator<Row>

/**
 * Whether `value` is an async generator object, told by its prototype chain
 * rather than by its symbol methods. A host typically writes `rows` as an
 * `async *rows()` in the dataset object it makes per request, and each new
 * such function gives its generators a new hidden class, so looking up
 * `Symbol.iterator` or `Symbol.asyncIterator` on them misses V8's inline
 * caches every time: a few microseconds per entity on a small download.
 */
function isAsyncGenerator (value: object): value is AsyncGenerator<Row> {
  return Object.getPrototypeOf(Object.getPrototypeOf(value)) === AsyncGeneratorPrototype
}

/**
 * The options of one `rows()` call. Its `signal` is made only when the
 * source reads it (see DownloadAbort), through a getter that is an own,
 * enumerable property as in an object literal, so a source may spread the
 * options. The getter is one function for all calls: a literal's
 * `get signal ()` is a new closure and a new hidden class each time, which
 * cost more per entity than writing a few rows.
 */
class LazySignalOptions implements RowsOptions {
  static readonly #signal: PropertyDescriptor = {
    get (this: LazySignalOptions) { return this.#abort.signal },
    enumerable: true,
    configurable: true
  }

  readonly limit: number | undefined
  declare readonly signal: AbortSignal
  readonly #abort: Pick<DownloadSpec['abort'], 'signal'>

  constructor (limit: number | undefined, abort: Pick<DownloadSpec['abort'], 'signal'>) {
    this.limit = limit
    this.#abort = abort
    Object.defineProperty(this, 'signal', LazySignalOptions.#signal)
  }
}

/**
 * One entity as text chunks of about CHUNK_SIZE: head, each row, tail. Reads
 * at most `spec.limit` rows even if the source ignores the limit. A source
 * that returns a plain (sync) iterable is read a chunk at a time with no
 * await per row. Stopping early (limit, consumer gone, error) returns the
 * source's iterator, so it stops reading.
 */
export async function * entityChunks (spec: DownloadSpec, entity: Entity, text: EntityText): AsyncGenerator<string> {
  const { limit, abort } = spec
  let chunk = text.head
  let n = 0
  if (limit !== 0) {
    const rows = spec.dataset.rows(entity.name, new LazySignalOptions(limit, abort))
    const generator = isAsyncGenerator(rows)
    if (!generator && isSyncIterable(rows)) {
      const iterator = rows[Symbol.iterator]()
      let exhausted = false
      try {
        for (;;) {
          while (chunk.length < CHUNK_SIZE) {
            const next = iterator.next()
            if (next.done === true) { exhausted = true; break }
            chunk += text.row(next.value, n)
            if (++n === limit) break
          }
          if (exhausted || n === limit || abort.aborted) break
          yield chunk
          chunk = ''
        }
      } finally {
        if (!exhausted) iterator.return?.()
      }
    } else {
      // An async generator is driven through its prototype's own methods,
      // which needs no lookup on it (see isAsyncGenerator); any other async
      // iterable through its iterator, as `for await` does.
      const iterator = generator ? rows : (rows as AsyncIterable<Row>)[Symbol.asyncIterator]()
      const next = generator ? AsyncGeneratorPrototype.next : iterator.next
      let exhausted = false
      try {
        for (;;) {
          const step = await next.call(iterator)
          if (step.done === true) { exhausted = true; break }
          chunk += text.row(step.value, n)
          if (++n === limit) break
          if (chunk.length >= CHUNK_SIZE) {
            yield chunk
            chunk = ''
          }
        }
      } finally {
        if (!exhausted) await (generator ? AsyncGeneratorPrototype.return.call(iterator, undefined) : iterator.return?.())
      }
    }
  }
  // A source that stopped because the client left must not end like a whole file.
  if (abort.aborted) throw new Error('Download aborted')
  yield chunk + text.tail()
}

/** Rows joined by `between`, inside `head` and `tail`. */
export function delimitedRows (write: (row: Row) => string, head: string, tail: string, between = ''): EntityText {
  return between === ''
    ? { head, row: write, tail: () => tail }
    : { head, row: (row, i) => (i === 0 ? '' : between) + write(row), tail: () => tail }
}
