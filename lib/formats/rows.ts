import type { Entity, Row, RowsOptions } from '../host/dataset-source.js'
import type { DownloadSpec } from './types.js'
import { columnError } from './values.js'

/** Writes one value of a column as the format's text (NULL included). */
export type CellWriter = (value: unknown) => string

/**
 * Joins per-column writers into a row writer: `before[i]` and cell i for
 * each column, then `after`. A refused value becomes an error that names the
 * entity and column.
 */
export function rowWriter (entity: Entity, cells: readonly CellWriter[], before: readonly string[], after: string): (row: Row) => string {
  const n = cells.length
  // json's members carry their own separators: no empty text added before each.
  const hasSeparators = before.some((b) => b !== '')
  return (row) => {
    let i = 0
    try {
      let out = before[0] + cells[0](row[0])
      if (hasSeparators) for (i = 1; i < n; i++) out += before[i] + cells[i](row[i])
      else for (i = 1; i < n; i++) out += cells[i](row[i])
      return out + after
    } catch (err) {
      throw columnError(entity.name, entity.columns[i].name, err)
    }
  }
}

/**
 * `make` for an entity, made once per Entity object and kept while the
 * object lives: building a download's per-column writers cost more than
 * writing a small entity's rows (a quarter of the plugin's own time for the
 * example's 17-row json). Entities are taken as unchanging once seen (see
 * Dataset.entities), as checkEntities takes them. A `make` that throws keeps
 * nothing, and throws again for the next download.
 */
export function perEntity<T> (make: (entity: Entity) => T): (entity: Entity) => T {
  const made = new WeakMap<Entity, T>()
  return (entity) => {
    let value = made.get(entity)
    if (value === undefined) {
      value = make(entity)
      made.set(entity, value)
    }
    return value
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

export function isSyncIterable (value: object): value is Iterable<Row> {
  return typeof (value as Iterable<Row>)[Symbol.iterator] === 'function' &&
    typeof (value as AsyncIterable<Row>)[Symbol.asyncIterator] !== 'function'
}

// %AsyncGeneratorPrototype%, which every `async function *` object inherits.
export const AsyncGeneratorPrototype = Object.getPrototypeOf(async function * () {}).prototype as AsyncGenerator<Row>

/**
 * Whether `value` is an async generator object, told by its prototype chain
 * rather than by its symbol methods. A host typically writes `rows` as an
 * `async *rows()` in the dataset object it makes per request, and each new
 * such function gives its generators a new hidden class, so looking up
 * `Symbol.iterator` or `Symbol.asyncIterator` on them misses V8's inline
 * caches every time: a few microseconds per entity on a small download.
 */
export function isAsyncGenerator (value: object): value is AsyncGenerator<Row> {
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
export class LazySignalOptions implements RowsOptions {
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
 * The options of a `rows()` call with the consumer's columns, filters or
 * change window: every field set, undefined when not asked for, so that these
 * calls share one shape too, and a plain download keeps the two fields it had.
 */
export class SelectionRowsOptions extends LazySignalOptions {
  readonly columns: RowsOptions['columns']
  readonly filters: RowsOptions['filters']
  readonly since: RowsOptions['since']
  readonly changesUntil: RowsOptions['changesUntil']

  constructor (limit: number | undefined, abort: Pick<DownloadSpec['abort'], 'signal'>, selection: NonNullable<DownloadSpec['selection']>) {
    super(limit, abort)
    this.columns = selection.columns
    this.filters = selection.filters
    this.since = selection.since
    this.changesUntil = selection.changesUntil
  }
}

/** The options of one `rows()` call of a download. */
export function rowsOptions (spec: DownloadSpec, limit: number | undefined): RowsOptions {
  return spec.selection === undefined
    ? new LazySignalOptions(limit, spec.abort)
    : new SelectionRowsOptions(limit, spec.abort, spec.selection)
}

/**
 * A chunk that is not the last, as a Buffer. The response sends a Buffer
 * anyway; made here, it is the only copy of the chunk. Each generator that
 * passes it on keeps what it handed out last until it is asked for more,
 * which for a client that stopped reading lasts as long as the client waits;
 * as text that would be a second copy of the chunk the response is sending.
 *
 * Called as `handOut(chunk + (chunk = ''))`, so that the text is emptied
 * before the generator suspends and the Buffer is held by no variable. V8
 * can keep what a generator's variables held when optimised code took over
 * long past their use: a variable holding the Buffer kept one early chunk of
 * each download alive to its end.
 */
function handOut (chunk: string): Buffer {
  return Buffer.from(chunk)
}

/**
 * Results that are emptied once the next one is asked for. A generator that
 * delegates to entityChunks (`yield*` in jsonDocument and sqlScript) holds
 * the results it got in the same way V8 can hold a generator's variables (see
 * handOut): measured, every json download to a client that stopped reading
 * kept an earlier chunk there besides the one its response was sending.
 */
class EmptiedResults<T> implements AsyncGenerator<T> {
  #last: { value: T | undefined } | null = null

  constructor (private readonly inner: AsyncGenerator<T>) {}

  #forgetLast (): void {
    if (this.#last !== null) this.#last.value = undefined
    this.#last = null
  }

  next (): Promise<IteratorResult<T>> {
    this.#forgetLast()
    return this.inner.next().then((result) => {
      this.#last = result
      return result
    })
  }

  return (value?: unknown): Promise<IteratorResult<T>> {
    this.#forgetLast()
    return this.inner.return(value)
  }

  throw (err: unknown): Promise<IteratorResult<T>> {
    this.#forgetLast()
    return this.inner.throw(err)
  }

  [Symbol.asyncIterator] (): this {
    return this
  }
}

/**
 * One entity in chunks: head, each row, tail. A chunk is handed out when it
 * reaches the download's chunk size or when the download's time slice is
 * spent, and the download gives the event loop a turn before it writes the
 * next (see pace.ts). Every chunk but the last is a Buffer (see handOut); the
 * last stays text, so a download that fits in one chunk goes out as one
 * string. Reads at most `spec.limit` rows even if the source ignores the
 * limit. A source that returns a plain (sync) iterable is read with no await
 * per row. Stopping early (limit, consumer gone, error) returns the source's
 * iterator, so it stops reading.
 */
export function entityChunks (spec: DownloadSpec, entity: Entity, text: EntityText, taken?: Iterable<Row> | AsyncIterable<Row>): AsyncGenerator<string | Buffer> {
  return new EmptiedResults(chunksOf(spec, entity, text, taken))
}

/** `taken`: the entity's rows, when the format has asked the source for them already. */
async function * chunksOf (spec: DownloadSpec, entity: Entity, text: EntityText, taken?: Iterable<Row> | AsyncIterable<Row>): AsyncGenerator<string | Buffer> {
  const { limit, abort, pace } = spec
  const { chunkSize } = pace
  // Many small entities in a row must not add up to a long stretch either.
  if (pace.turnDue) await pace.turn()
  let chunk = text.head
  let n = 0
  if (limit !== 0) {
    const rows = taken ?? spec.dataset.rows(entity.name, rowsOptions(spec, limit))
    const generator = isAsyncGenerator(rows)
    if (!generator && isSyncIterable(rows)) {
      const iterator = rows[Symbol.iterator]()
      let exhausted = false
      try {
        for (;;) {
          while (chunk.length < chunkSize) {
            const next = iterator.next()
            if (next.done === true) { exhausted = true; break }
            chunk += text.row(next.value, n)
            if (++n === limit) break
            if (pace.rowWritten()) break
          }
          if (exhausted || n === limit || abort.aborted) break
          yield handOut(chunk + (chunk = ''))
          await pace.turn()
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
          // A source that resolves its rows at once runs on microtasks alone,
          // so the slice is checked here as well.
          if (pace.rowWritten() || chunk.length >= chunkSize) {
            yield handOut(chunk + (chunk = ''))
            await pace.turn()
          }
        }
      } finally {
        if (!exhausted) await (generator ? AsyncGeneratorPrototype.return.call(iterator, undefined) : iterator.return?.())
      }
    }
  }
  // A source that stopped because the client left must not end like a whole file.
  if (abort.aborted) throw new Error('Download aborted')
  chunk += text.tail()
  pace.wrote(chunk.length)
  yield chunk
}

/** Rows joined by `between`, inside `head` and `tail`. */
export function delimitedRows (write: (row: Row) => string, head: string, tail: string, between = ''): EntityText {
  return between === ''
    ? { head, row: write, tail: () => tail }
    : { head, row: (row, i) => (i === 0 ? '' : between) + write(row), tail: () => tail }
}
