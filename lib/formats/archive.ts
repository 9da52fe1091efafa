import { mkdtemp, open, rm, type FileHandle } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import tar from 'tar-stream'
import yazl from 'yazl'
import type { Entity } from '../dataset-source.js'
import type { ArchiveType, Download, DownloadSpec } from './index.js'

// The archives of csv-zip, json-zip and oracle-loader. Each entry's content is
// produced only when the archive reaches it, and read only as fast as the
// client takes the archive, so one entity at a time is in flight.
//
// zip: yazl. It pumps one entry at a time through a pipe (backpressure from
// the response down to the row source) and switches to ZIP64 by itself past
// 4 GiB or 65,535 entries. (fflate has no ZIP64; archiver's append() queues
// without backpressure.)
// tar: tar-stream. A tar header carries the entry's size, so each entry is
// spooled first: in memory up to `spoolLimit`, then to a temporary file that
// is removed when the entry is written, or when the download fails or stops.

export interface ArchiveEntry {
  name: string
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
    zip.addReadStreamLazy(entry.name, { mtime, mode: 0o100644 }, (callback) => {
      current = Readable.from(entry.content(), { objectMode: false })
      current.once('error', fail)
      callback(null, current)
    })
  }
  zip.end()
  return out
}

export interface TarOptions {
  /** bytes of one entry kept in memory before it goes to a temporary file; default 256 KiB */
  spoolLimit?: number
  /** where temporary files go; default the OS temporary directory */
  tmpDir?: string
  mtime?: Date
}

/** Writes a chunk at the file's position; text is encoded by fs itself, with no Buffer to collect. */
async function writeAll (file: FileHandle, chunk: string | Buffer): Promise<void> {
  const expected = typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length
  const { bytesWritten } = typeof chunk === 'string' ? await file.write(chunk) : await file.write(chunk)
  if (bytesWritten !== expected) throw new Error(`Short write to a tar spool file (${bytesWritten} of ${expected} bytes)`)
}

/** Bytes read back from a spool file at a time. */
const READ_SIZE = 64 * 1024

/**
 * Holds one entry until its size is known: memory first, then a file. Text
 * stays text until it is written out (fs encodes it without a Buffer of ours),
 * so spooling adds little garbage.
 */
class Spool {
  size = 0
  private chunks: Array<string | Buffer> = []
  private file: FileHandle | null = null
  private path: string | null = null

  constructor (private readonly limit: number, private readonly directory: () => Promise<string>) {}

  async write (chunk: string | Buffer): Promise<void> {
    this.size += typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length
    if (this.file === null && this.size <= this.limit) {
      this.chunks.push(chunk)
      return
    }
    if (this.file === null) {
      this.path = join(await this.directory(), `entry-${Date.now()}-${Math.random().toString(36).slice(2)}`)
      this.file = await open(this.path, 'w')
      for (const held of this.chunks) await writeAll(this.file, held)
      this.chunks = []
    }
    await writeAll(this.file, chunk)
  }

  /**
   * The spooled bytes, in order. From the file, each chunk is read into one
   * reused buffer and handed on as a fresh copy made through a one-byte
   * string. A Buffer's memory is freed only by a GC, and reading a file
   * allocates next to nothing else, so V8 let dead chunks pile up (tens of
   * MB in the formats benchmark). The string, on the V8 heap, makes the
   * young-generation GCs keep pace, and they free the dead chunks with it;
   * latin1 maps each byte to one character and back, so any bytes pass.
   */
  async * read (): AsyncGenerator<Buffer> {
    if (this.path === null) {
      for (const chunk of this.chunks) yield typeof chunk === 'string' ? Buffer.from(chunk) : chunk
      return
    }
    await this.file?.close()
    this.file = await open(this.path, 'r')
    const buffer = Buffer.allocUnsafe(READ_SIZE)
    for (;;) {
      const { bytesRead } = await this.file.read(buffer, 0, READ_SIZE, null)
      if (bytesRead === 0) return
      yield Buffer.from(buffer.toString('latin1', 0, bytesRead), 'latin1')
    }
  }

  async dispose (): Promise<void> {
    this.chunks = []
    await this.file?.close().catch(() => {})
    this.file = null
    if (this.path !== null) await rm(this.path, { force: true })
    this.path = null
  }
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

/** The tar archive of `entries`, streamed (each entry spooled first). */
export function tarArchive (entries: readonly ArchiveEntry[], options: TarOptions = {}): Readable {
  const { spoolLimit = 256 * 1024, tmpDir = tmpdir(), mtime = new Date() } = options
  const pack = tar.pack()
  let directory: Promise<string> | null = null
  const makeDirectory = (): Promise<string> => (directory ??= mkdtemp(join(tmpDir, 'fastify-data-endpoints-')))

  async function writeEntry (entry: ArchiveEntry): Promise<void> {
    const spool = new Spool(spoolLimit, makeDirectory)
    try {
      for await (const chunk of entry.content()) {
        if (pack.destroyed) return
        await spool.write(chunk)
      }
      const sink = pack.entry({ name: entry.name, size: spool.size, mtime, mode: 0o644 })
      // Destroying the archive (the client left) errors the entry being
      // written; unheard, that error would crash the process. Its close, which
      // follows, rejects `finished`, and that ends this entry.
      sink.on('error', () => {})
      const finished = eventOrClose(sink, 'finish')
      finished.catch(() => {}) // awaited below; not unhandled if a write fails first
      for await (const buf of spool.read()) {
        if (sink.destroyed) break
        if (!sink.write(buf)) await eventOrClose(sink, 'drain')
      }
      if (!sink.destroyed) sink.end(null)
      await finished
    } finally {
      await spool.dispose()
    }
  }

  async function run (): Promise<void> {
    let failure: Error | null = null
    try {
      for (const entry of entries) {
        if (pack.destroyed) break
        await writeEntry(entry)
      }
    } catch (err) {
      failure = err as Error
    }
    // Clean up before the reader sees the end, so nothing outlives the download.
    if (directory !== null) await rm(await directory, { recursive: true, force: true }).catch(() => {})
    if (failure !== null) pack.destroy(failure)
    else if (!pack.destroyed) pack.finalize()
  }

  void run()
  return Readable.from(pack, { objectMode: false })
}

/** The archive of `entries` in the requested type. */
export function archiveBody (entries: readonly ArchiveEntry[], spec: Pick<DownloadSpec, 'archiveType'>): Readable {
  return spec.archiveType === 'tar' ? tarArchive(entries) : zipArchive(entries)
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
