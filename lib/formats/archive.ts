import { Readable } from 'node:stream'
import tar from 'tar-stream'
import yazl from 'yazl'
import type { Entity } from '../host/dataset-source.js'
import type { ArchiveType, Download, DownloadSpec } from './types.js'
import { SpooledEntry, type TarSpool } from './tar-spool.js'

// The archives of csv-zip, json-zip and oracle-loader. Each entry's content is
// produced only when the archive reaches it, and read only as fast as the
// client takes the archive, so one entity at a time is in flight.
//
// zip: yazl. It pumps one entry at a time through a pipe (backpressure from
// the response down to the row source) and switches to ZIP64 by itself past
// 4 GiB or 65,535 entries. (fflate has no ZIP64; archiver's append() queues
// without backpressure.)
// tar: tar-stream. A tar header carries the entry's size, so each entry is
// spooled first (tar-spool.ts: memory, then a file within a disk budget); the
// file is removed when the entry is written, or when the download fails or
// stops. A dataset marked repeatable is read twice instead: once to measure
// each entry, once to send it.

export interface ArchiveEntry {
  name: string
  /** zip: stored as it is, for content that is compressed already (Parquet) */
  stored?: boolean
  /** the entry's content, started when the archive reaches the entry */
  content: () => AsyncIterable<string | Buffer>
}

/** The zip archive of `entries`, streamed. Destroying it stops the entry being read. */
export function zipArchive (entries: readonly ArchiveEntry[], mtime = new Date()): Readable {
  const zip = new yazl.ZipFile()
  const out = zip.outputStream as Readable
  let current: Readable | null = null
  const fail = (err: Error): void => { out.destroy(err) }
  zip.on('error', fail)
  out.once('close', () => current?.destroy())
  for (const entry of entries) {
    zip.addReadStreamLazy(entry.name, { mtime, mode: 0o100644, compress: entry.stored !== true }, (callback) => {
      current = Readable.from(entry.content(), { objectMode: false })
      current.once('error', fail)
      callback(null, current)
    })
  }
  zip.end()
  return out
}

interface Closable {
  once (event: string, listener: (...args: unknown[]) => void): unknown
  off (event: string, listener: (...args: unknown[]) => void): unknown
}

/** Resolves on `event`; rejects if the stream closes (is destroyed) first. */
function eventOrClose (stream: Closable, event: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onEvent = (): void => { stream.off('close', onClose); resolve() }
    const onClose = (): void => { stream.off(event, onEvent); reject(new Error('archive closed')) }
    stream.once(event, onEvent)
    stream.once('close', onClose)
  })
}

export interface TarOptions {
  /** where entries wait until their size is known */
  spool: TarSpool
  /** whether the response has sent its first byte: until then a full spool fails at once (a 503), after it waits a bounded time */
  responseStarted: () => boolean
  /** read each entry twice, to measure it and then to send it, with no spool (a repeatable dataset) */
  readTwice?: boolean
  mtime?: Date
}

function byteLength (chunk: string | Buffer): number {
  return typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length
}

/**
 * The entry's second read, which must be as long as the first: a longer
 * one is cut before the surplus and fails, as does a shorter one, so the
 * archive ends incomplete rather than with a header that lies.
 */
async function * readAgain (entry: ArchiveEntry, size: number): AsyncGenerator<Buffer> {
  let read = 0
  for await (const chunk of entry.content()) {
    read += byteLength(chunk)
    if (read > size) break
    yield typeof chunk === 'string' ? Buffer.from(chunk) : chunk
  }
  if (read !== size) {
    throw new Error(`${entry.name} changed between the two reads of a repeatable dataset (${size} bytes, then ${read > size ? 'more' : read})`)
  }
}

/**
 * The tar archive of `entries`, streamed. A tar header carries the entry's
 * size, so each entry is first held in the spool until its end, or, with
 * `readTwice`, read once to measure it.
 */
export function tarArchive (entries: readonly ArchiveEntry[], options: TarOptions): Readable {
  const { spool, responseStarted, readTwice = false, mtime = new Date() } = options
  const pack = tar.pack()
  // Ends a wait for budget when the client leaves or the download fails.
  const stopped = new AbortController()
  pack.once('close', () => stopped.abort())
  const download = spool.open(responseStarted, stopped.signal, () => pack.destroy(new Error('The server closed during the download')))

  /** Writes an entry of `size` bytes, taken from `bytes` as fast as the archive is read. */
  async function writeSized (name: string, size: number, bytes: AsyncIterable<Buffer>): Promise<void> {
    const sink = pack.entry({ name, size, mtime, mode: 0o644 })
    // Destroying the archive (the client left) errors the entry being
    // written; unheard, that error would crash the process. Its close, which
    // follows, rejects `finished`, and that ends this entry.
    sink.on('error', () => {})
    const finished = eventOrClose(sink, 'finish')
    finished.catch(() => {}) // awaited below; not unhandled if a write fails first
    for await (const buf of bytes) {
      if (sink.destroyed) break
      if (!sink.write(buf)) await eventOrClose(sink, 'drain')
    }
    if (!sink.destroyed) sink.end(null)
    await finished
  }

  async function writeMeasured (entry: ArchiveEntry): Promise<void> {
    let size = 0
    for await (const chunk of entry.content()) {
      if (pack.destroyed) return
      size += byteLength(chunk)
    }
    await writeSized(entry.name, size, readAgain(entry, size))
  }

  async function writeSpooled (entry: ArchiveEntry): Promise<void> {
    const spooled = new SpooledEntry(spool, download)
    try {
      for await (const chunk of entry.content()) {
        if (pack.destroyed) return
        await spooled.write(chunk)
      }
      await writeSized(entry.name, spooled.size, spooled.read())
    } finally {
      // The file goes, and its budget with it, before the next entry is read.
      await spooled.dispose()
    }
  }

  async function run (): Promise<void> {
    let failure: Error | null = null
    try {
      for (const entry of entries) {
        if (pack.destroyed) break
        await (readTwice ? writeMeasured(entry) : writeSpooled(entry))
      }
    } catch (err) {
      failure = err as Error
    }
    if (failure !== null) pack.destroy(failure)
    else if (!pack.destroyed) pack.finalize()
  }

  void run().finally(() => spool.forget(download))
  return Readable.from(pack, { objectMode: false })
}

/** The archive of `entries` in the requested type. */
export function archiveBody (entries: readonly ArchiveEntry[], spec: Pick<DownloadSpec, 'archiveType' | 'dataset' | 'tarSpool' | 'responseStarted'>): Readable {
  if (spec.archiveType === 'zip') return zipArchive(entries)
  return tarArchive(entries, { spool: spec.tarSpool, responseStarted: () => spec.responseStarted, readTwice: spec.dataset.repeatable === true })
}

const CONTENT_TYPES: Record<ArchiveType, string> = { zip: 'application/zip', tar: 'application/x-tar' }

/** The download of an archive format: `<dataset>-<kind>.zip` or `.tar`. */
export function archiveDownload (spec: DownloadSpec, kind: string, body: Readable): Download {
  return {
    contentType: CONTENT_TYPES[spec.archiveType],
    fileName: `${spec.dataset.name}-${kind}.${spec.archiveType}`,
    body
  }
}

// Characters a file name in an archive must not carry: path separators,
// control characters, what Windows refuses, and the quote SQL*Loader's
// INFILE '...' would end at.
// eslint-disable-next-line no-control-regex
const UNSAFE_FILE_CHARACTERS = /[/\\\x00-\x1f\x7f<>:"|?*']/g

/**
 * File names (without extension) for the entities, in order: the entity name
 * with unsafe characters replaced by '_', made unique regardless of case
 * (a suffix '~2', '~3', ... when two names collide).
 */
export function archiveFileNames (entities: readonly Entity[]): string[] {
  const taken = new Set<string>()
  return entities.map((entity) => {
    const base = entity.name.replace(UNSAFE_FILE_CHARACTERS, '_')
    let name = base
    for (let n = 2; taken.has(name.toLowerCase()); n++) name = `${base}~${n}`
    taken.add(name.toLowerCase())
    return name
  })
}
