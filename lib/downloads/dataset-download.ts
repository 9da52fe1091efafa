import { Readable } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { redactKeys } from '../keys/api-key.js'
import { datasetEtag, ifNoneMatchHits } from './dataset-etag.js'
import type { ChangeValue, Column, Dataset, Entity, ResourceRef } from '../host/dataset-source.js'
import { DownloadAbort } from '../formats/download-abort.js'
import { InvalidParameterError, UnknownFormatError } from '../errors.js'
import { isPlainInteger } from '../inputs.js'
import { checkEntities } from '../formats/entity-model.js'
import {
  ARCHIVE_TYPES, FORMATS, ONE_ENTITY_FORMATS, isFormatName, type ArchiveType, type ColumnarSettings, type Download, type DownloadSpec,
  type FormatName
} from '../formats/index.js'
import { oracleDdl } from '../formats/oracle.js'
import { DEFAULT_CHUNK_SIZE, Pace } from '../formats/pace.js'
import { ddlFor } from '../formats/sql.js'
import type { TarSpool } from '../formats/tar-spool.js'
import type { PluginMetrics } from '../metrics.js'
import type { RenderedBodies } from './rendered-bodies.js'
import { contentDisposition } from './content-disposition.js'
import { changeColumnOf, changeValueText, checkChangeValue, parseRowSelection, selectionKey, type RowSelection } from './consumer-query.js'
import { sendFile } from './file-reply.js'
import { utf8Bytes } from '../formats/text-bytes.js'
import type { RenderedFiles } from './rendered-files.js'

export { contentDisposition }

export interface DownloadQuery {
  format: FormatName
  entities: readonly Entity[]
  meta: 'entities' | 'ddl' | undefined
  archiveType: ArchiveType
  limit: number | undefined
  /** `columns`, `where`, `since`, typed; `entities` is then the one entity, cut to the columns */
  selection: RowSelection | undefined
  /** the change column of the one entity the download holds, if it declares one */
  changeColumn: Column | undefined
}

function oneOf<T extends string> (name: string, value: unknown, allowed: readonly T[]): T | undefined {
  if (value === undefined) return undefined
  if (typeof value === 'string' && (allowed as readonly string[]).includes(value)) return value as T
  throw new InvalidParameterError(`Invalid ${name}: must be one of ${allowed.join(', ')}`)
}

/** Reads the dataset query (DESIGN.md §2 step 8): format first (500), then the others (400). */
export function parseDownloadQuery (query: Record<string, unknown>, dataset: Dataset): DownloadQuery {
  const format = query.format ?? 'sql'
  if (!isFormatName(format)) throw new UnknownFormatError(String(format))
  const archiveType = oneOf('archiveType', query.archiveType, ARCHIVE_TYPES) ?? 'zip'
  const meta = oneOf('meta', query.meta, ['entities', 'ddl'] as const)

  let limit: number | undefined
  if (query.limit !== undefined) {
    const text = query.limit
    if (!isPlainInteger(text)) {
      throw new InvalidParameterError('Invalid limit: must be a non-negative integer')
    }
    limit = Number(text)
  }

  let entities = dataset.entities
  if (query.entity !== undefined) {
    const chosen = typeof query.entity === 'string' ? entities.find((e) => e.name === query.entity) : undefined
    if (chosen === undefined) throw new InvalidParameterError('Invalid entity: the dataset has no entity of that name')
    entities = [chosen]
  }
  if (meta === undefined && ONE_ENTITY_FORMATS.includes(format) && entities.length !== 1) {
    throw new InvalidParameterError(`Invalid entity: ${format} holds one entity; name one with entity=`)
  }
  const one = entities.length === 1 ? entities[0] : undefined
  const selection = parseRowSelection(query, one)
  const changeColumn = one === undefined ? undefined : changeColumnOf(one)
  if (selection?.columns !== undefined) entities = [projection(entities[0], selection.columns)]
  return { format, entities, meta, archiveType, limit, selection, changeColumn }
}

/** Projections kept per entity, so that the formats' per-entity writers are made once per choice of columns. */
const PROJECTIONS_PER_ENTITY = 32
const projections = new WeakMap<Entity, Map<string, Entity>>()

/** The entity cut to `columns`, in their order: what every format and `meta=ddl` then describe. */
function projection (entity: Entity, columns: readonly Column[]): Entity {
  let made = projections.get(entity)
  if (made === undefined) projections.set(entity, made = new Map())
  const key = JSON.stringify(columns.map((c) => c.name))
  let cut = made.get(key)
  if (cut === undefined) {
    if (made.size >= PROJECTIONS_PER_ENTITY) made.delete(made.keys().next().value as string)
    cut = { name: entity.name, columns }
    made.set(key, cut)
  }
  return cut
}

/** What a download needs from the plugin besides the request and the dataset. */
export interface DownloadContext {
  tarSpool: TarSpool
  /** characters gathered into one write; a body within it is sent whole */
  chunkSize: number
  /** small rendered bodies by ETag; null when turned off */
  renderedBodies: RenderedBodies | null
  /** rendered Parquet and Arrow files by ETag, served with Range; null when turned off */
  renderedFiles: RenderedFiles | null
  /** Parquet's and Arrow's batch size, encoders and compression */
  columnar: ColumnarSettings
  metrics: PluginMetrics | null
  /** whether answers may be compressed (then they vary by Accept-Encoding) */
  compression: boolean
  /** hears why a download was cut short after its headers, for the request's log line */
  noteFailure?: (request: FastifyRequest, message: string) => void
}

/** A download with an ETag may be stored by the client, revalidated each time; without one, not at all. */
const REVALIDATE = 'private, no-cache'

/** How a download was asked for: by a keyed GET (its query), or through a link (the link's params). */
export interface DownloadRequest {
  /** the GET's query parameters; default the request's query */
  query?: Record<string, unknown>
  /** a link's answer: `Cache-Control` says `private` even without an ETag */
  viaLink?: boolean
}

/**
 * The name of the file a download answers (`Content-Disposition`), without
 * reading a row: what a link's URL ends in. `meta` answers are named after
 * the dataset.
 */
export function downloadFileName (dataset: Dataset, q: DownloadQuery, context: DownloadContext): string {
  if (q.meta === 'entities') return `${dataset.name}-entities.json`
  if (q.meta === 'ddl') return `${dataset.name}-ddl.sql`
  const download = FORMATS[q.format](downloadSpec(dataset, { ...q, limit: 0 }, context, new DownloadAbort()))
  disposeBody(download)
  return download.fileName
}

/**
 * Answers a dataset GET whose key is verified and whose dataset exists.
 * Everything that can fail before the first byte (query, model, Oracle
 * names, the first chunk) fails here, as a JSON error. Once the body streams, a failure
 * destroys the connection (Fastify does so for a stream that errors after
 * its headers), so the client sees an incomplete response, never a file that
 * looks whole.
 */
export async function sendDataset (request: FastifyRequest, reply: FastifyReply, dataset: Dataset, ref: ResourceRef, context: DownloadContext,
  asked: DownloadRequest = {}): Promise<FastifyReply> {
  let q = parseDownloadQuery(asked.query ?? request.query as Record<string, unknown>, dataset)
  checkEntities(dataset.entities)
  // Taken before anything is read (the 304 and cached answers carry it too):
  // this download holds no row past it, the next one (since=it) every row after it.
  const changesUntil = q.meta === undefined && q.changeColumn !== undefined ? await changesUntilOf(dataset, q) : undefined
  // Not with `limit`: a download cut short holds only some of the changes up
  // to the bound, and a next download from it would skip the others.
  const tellsBound = q.limit === undefined
  if (changesUntil !== undefined && changesUntil !== null) {
    if (tellsBound) reply.header('data-changes-until', changeValueText(changesUntil))
  } else if (changesUntil === null) {
    // No rows yet: none is read, since one written meanwhile would have no
    // bound; the next download (since= as before, or none) gets it.
    if (tellsBound && q.selection?.since !== undefined) reply.header('data-changes-until', changeValueText(q.selection.since))
    q = { ...q, limit: 0 }
  }
  const etag = dataset.revision === undefined
    ? undefined
    : datasetEtag(ref, dataset, dataset.revision, {
      format: q.format,
      meta: q.meta,
      archiveType: q.archiveType,
      limit: q.limit,
      entities: q.entities,
      selection: selectionKey(q.selection, changesUntil)
    })
  // The body may come compressed or not, by the request's Accept-Encoding
  // (lowercase, as @fastify/compress writes it, so it is not added twice).
  if (context.compression) reply.header('vary', 'accept-encoding')
  if (etag !== undefined) {
    reply.header('etag', etag).header('cache-control', REVALIDATE)
    // A 304 is a successful call: the key hook has counted it already.
    if (ifNoneMatchHits(request.headers['if-none-match'], etag)) return reply.code(304).send()
  } else {
    reply.header('cache-control', asked.viaLink === true ? 'private, no-store' : 'no-store')
  }

  if (q.meta === 'entities') {
    return reply.type('application/json; charset=utf-8').send(q.entities.map((e) => e.name))
  }
  if (q.meta === 'ddl') {
    // The dialect follows the format: Oracle for oracle-loader, else the portable SQL.
    const ddl = q.format === 'oracle-loader' ? oracleDdl(q.entities) : ddlFor(q.entities)
    return reply.type('text/plain; charset=utf-8').send(ddl)
  }

  const { metrics } = context
  // Parquet and Arrow of a dataset with a revision: rendered once, read in place.
  if (etag !== undefined && context.renderedFiles !== null && RENDERED_FORMATS.has(q.format)) {
    const lease = await context.renderedFiles.lease(etag, (stop) => {
      const abort = new DownloadAbort()
      stop.addEventListener('abort', () => { abort.abort() }, { once: true })
      return FORMATS[q.format](downloadSpec(dataset, q, context, abort, changesUntil))
    })
    if (lease !== null) {
      const { file } = lease
      const answer = sendFile(request, reply, file, lease.release)
      if (request.method !== 'HEAD') metrics?.downloadSent(q.format, Number(reply.getHeader('content-length') ?? 0))
      return answer
    }
    // Larger than the cache's budget, or no room in it now: streamed as without a revision.
  }

  if (request.method === 'HEAD') {
    // The headers the GET would send, without reading a row (limit 0).
    const download = FORMATS[q.format](downloadSpec(dataset, { ...q, limit: 0 }, context, new DownloadAbort()))
    disposeBody(download)
    return sendBody(reply, download.contentType, download.fileName, undefined)
  }

  const cached = etag === undefined ? undefined : context.renderedBodies?.get(etag)
  if (cached !== undefined) {
    metrics?.downloadSent(q.format, byteLength(cached.body))
    return sendBody(reply, cached.contentType, cached.fileName, cached.body)
  }

  const abort = new DownloadAbort()
  const spec = downloadSpec(dataset, q, context, abort, changesUntil)
  const download = FORMATS[q.format](spec)
  const sent = metrics === null ? undefined : (bytes: number): void => { metrics.downloadSent(q.format, bytes) }
  let body: Buffer | Readable
  try {
    // A document made whole in this turn has nothing left to stop.
    const whole = download.whole?.()
    if (whole !== undefined) {
      body = whole
    } else {
      // Stop reading at the source as soon as the client goes away.
      reply.raw.once('close', () => {
        if (!reply.raw.writableFinished) abort.abort()
      })
      body = await wholeIfSmall(download.body, abort, context.chunkSize, sent)
    }
  } catch (err) {
    // The client left before anything was sent: there is no one to answer
    // (the close is logged by the data routes).
    if (abort.aborted) return reply.hijack()
    throw err
  }
  if (body instanceof Readable) {
    spec.responseStarted = true
    // Runs before Fastify's own listener, which logs the error with its message
    // and stack, and a host's message may quote a key.
    body.prependListener('error', (err: unknown) => {
      if (!(err instanceof Error)) return
      err.message = redactKeys(err.message)
      if (typeof err.stack === 'string') err.stack = redactKeys(err.stack)
      context.noteFailure?.(request, `Download failed after it started: ${err.message}`)
    })
    if (metrics !== null) {
      metrics.downloadStarted(q.format)
      body.once('close', () => { metrics.downloadEnded(q.format) })
    }
  } else {
    sent?.(byteLength(body))
    if (etag !== undefined) context.renderedBodies?.rendered(etag, { body, contentType: download.contentType, fileName: download.fileName })
  }
  return sendBody(reply, download.contentType, download.fileName, body)
}

/** The formats served from rendered files when the dataset has a revision. */
const RENDERED_FORMATS = new Set<FormatName>(['parquet', 'arrow'])

/** The host's changesUntil() for the one entity of the download, when it declares a change column. */
async function changesUntilOf (dataset: Dataset, q: DownloadQuery): Promise<ChangeValue | null | undefined> {
  if (q.changeColumn === undefined) return undefined
  const entity = q.entities[0].name
  if (typeof dataset.changesUntil !== 'function') {
    throw new Error(`Invalid dataset: entity "${entity}" declares a change column, so the dataset needs changesUntil()`)
  }
  return checkChangeValue(await dataset.changesUntil(entity), q.changeColumn, entity)
}

function downloadSpec (dataset: Dataset, q: DownloadQuery, context: DownloadContext, abort: DownloadAbort, changesUntil?: ChangeValue | null): DownloadSpec {
  const { selection } = q
  return {
    selection: selection === undefined && (changesUntil === undefined || changesUntil === null)
      ? undefined
      : {
          columns: selection?.columns?.map((c) => c.name),
          filters: selection?.filters,
          since: selection?.since,
          changesUntil: changesUntil ?? undefined
        },
    dataset,
    entities: q.entities,
    limit: q.limit,
    archiveType: q.archiveType,
    tarSpool: context.tarSpool,
    responseStarted: false,
    abort,
    pace: new Pace(context.chunkSize),
    columnar: context.columnar
  }
}

/** Stops a body that will not be read (a HEAD). */
function disposeBody (download: Download): void {
  const { body } = download
  if (body instanceof Readable) body.destroy()
  else void (body as AsyncGenerator<unknown>).return?.(undefined)
}

function sendBody (reply: FastifyReply, contentType: string, fileName: string, body: Buffer | string | Readable | undefined): FastifyReply {
  return reply
    .type(contentType)
    .header('content-disposition', contentDisposition(fileName))
    .header('x-content-type-options', 'nosniff')
    .send(body)
}

type Chunk = string | Uint8Array

function byteLength (chunk: Chunk): number {
  return typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.byteLength
}

/**
 * Reads the start of a download. A body that ends within `limit` bytes (the
 * chunk size: one chunk) comes back whole, as bytes: one write instead of a
 * chunked stream, which makes small downloads nearly as cheap as a plain
 * route, and a failure this early still becomes a JSON error. A longer body
 * comes back as a stream that replays what was read and then carries on,
 * with the source's backpressure (see PulledChunks).
 *
 * Text is encoded as it is read, once: its byte count then costs nothing.
 * Left a string, the same text was measured three times (here, for the
 * metrics, for Content-Length) and encoded a fourth, and a writer's text
 * made of many concatenations was flattened on the first of them: 11 µs of
 * the example's 2.6 KB json, against 5 for one encoding (utf8Bytes: one
 * pass, where Buffer.from measures the text before it encodes it).
 */
export async function wholeIfSmall (
  body: AsyncIterable<Chunk>, abort: Pick<DownloadAbort, 'onAbort'>, limit = DEFAULT_CHUNK_SIZE, sent?: (bytes: number) => void
): Promise<Buffer | Readable> {
  const iterator = body[Symbol.asyncIterator]()
  const head: Uint8Array[] = []
  let size = 0
  // Nothing is piped to the client yet, so nothing else would stop the read.
  // A stream is destroyed at once; a generator ends at its next step (and
  // its source sees the aborted signal).
  const stop = (): void => {
    if (body instanceof Readable) body.destroy()
    else iterator.return?.().catch(() => {})
  }
  const removeStop = abort.onAbort(stop)
  try {
    while (size < limit) {
      const next = await iterator.next()
      if (next.done === true) {
        return head.length === 1 && Buffer.isBuffer(head[0]) ? head[0] : Buffer.concat(head, size)
      }
      const chunk = typeof next.value === 'string' ? utf8Bytes(next.value) : next.value
      head.push(chunk)
      size += chunk.byteLength
    }
  } catch (err) {
    await iterator.return?.().catch(() => {})
    throw err
  } finally {
    removeStop()
  }
  return new PulledChunks(head, iterator, sent)
}

/**
 * The rest of a download, after the chunks already read (`head`), as a
 * stream that reads one chunk each time the response asks for one. It reads
 * nothing ahead: Readable.from, even with highWaterMark 0, reads on while its
 * buffer is empty, so for a client that stopped reading it would hold another
 * chunk besides the one the response is sending. `sent` hears the bytes of
 * each chunk handed on (for the metrics).
 */
class PulledChunks extends Readable {
  readonly #head: Chunk[]
  readonly #rest: AsyncIterator<Chunk>
  readonly #sent: ((bytes: number) => void) | undefined

  constructor (head: Chunk[], rest: AsyncIterator<Chunk>, sent?: (bytes: number) => void) {
    super({ highWaterMark: 0 })
    this.#head = head
    this.#rest = rest
    this.#sent = sent
  }

  #hand (chunk: Chunk): void {
    this.#sent?.(byteLength(chunk))
    this.push(chunk)
  }

  override _read (): void {
    const held = this.#head.shift()
    if (held !== undefined) {
      this.#hand(held)
      return
    }
    this.#rest.next().then(
      (next) => {
        if (next.done === true) this.push(null)
        else this.#hand(next.value)
      },
      (err: Error) => { this.destroy(err) }
    )
  }

  override _destroy (err: Error | null, callback: (err?: Error | null) => void): void {
    this.#head.length = 0
    // Destroyed early (the client left): end the source too.
    Promise.resolve(this.#rest.return?.()).then(() => callback(err), (returnError: Error) => callback(err ?? returnError))
  }
}
