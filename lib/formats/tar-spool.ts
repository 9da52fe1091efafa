import { mkdir, open, rm, type FileHandle } from 'node:fs/promises'
import { join } from 'node:path'

import { TarSpoolFullError, withDetails } from '../errors.js'
import { newSpoolFolderName } from './spool-folder.js'

// A tar header carries its entry's size, so an entry is held whole before it
// is written: in memory up to `memoryPerEntry`, then in a file. The files of
// every tar download of one plugin instance share one disk budget (`maxBytes`)
// and one folder (spool-folder.ts names it), made on first use and removed at
// close. A file goes as soon as its entry is sent, or its download fails or
// stops, and its budget with it.

export interface TarSpoolOptions {
  /** the folder the plugin makes its own spool folder in */
  directory: string
  /** bytes of spool files on disk at most, across all tar downloads */
  maxBytes: number
  /** how long a download waits for budget before it fails (one that has started, or the oldest of a burst) */
  maxWaitMs: number
  /** bytes of one entry held in memory before it goes to a file */
  memoryPerEntry: number
}

export interface TarSpoolUsage {
  /** disk budget held by spool files (a multiple of SPOOL_BLOCK) */
  reservedBytes: number
  /** downloads waiting for budget */
  waitingDownloads: number
}

/** Budget is taken in blocks, so a reservation costs nothing per chunk. */
export const SPOOL_BLOCK = 64 * 1024

interface Waiter {
  bytes: number
  grant: () => void
  fail: (err: Error) => void
}

/** One tar download's account with the spool; it spools one entry at a time. */
export class SpoolDownload {
  /** budget held by its spool file */
  held = 0
  waiting = false
  /** the entry it spools now */
  entry: SpooledEntry | null = null

  constructor (
    /** arrival order */
    readonly order: number,
    /** whether its response has sent its first byte */
    readonly started: () => boolean,
    /** aborted when it ends (the client left, the download failed) */
    readonly signal: AbortSignal,
    /** stops it (the server is closing) */
    readonly stop: () => void
  ) {}
}

export class TarSpool {
  /** the spool folder of this plugin instance */
  readonly folder: string
  private reservedBytes = 0
  // First come, first served: a download that waits is not overtaken by one
  // that arrives later, so a trickle of small reservations cannot starve it.
  private readonly waiters: Waiter[] = []
  private readonly downloads = new Set<SpoolDownload>()
  private opened = 0
  private made: Promise<void> | null = null
  private files = 0
  private closed = false

  constructor (readonly options: TarSpoolOptions) {
    this.folder = join(options.directory, newSpoolFolderName())
  }

  usage (): TarSpoolUsage {
    return { reservedBytes: this.reservedBytes, waitingDownloads: this.waiters.length }
  }

  /** The answer to a download that gets no budget: 503 with Retry-After, the longest a download waits for budget. */
  fullError (): Error {
    const seconds = Math.max(1, Math.ceil(this.options.maxWaitMs / 1000))
    return withDetails(new TarSpoolFullError(), { headers: { 'retry-after': String(seconds) } })
  }

  /** A new tar download, known to the spool (close() stops it) until forget(). */
  open (started: () => boolean, signal: AbortSignal, stop: () => void): SpoolDownload {
    const download = new SpoolDownload(++this.opened, started, signal, stop)
    this.downloads.add(download)
    return download
  }

  /** Forgets `download` once it has ended. */
  forget (download: SpoolDownload): void {
    this.downloads.delete(download)
  }

  /**
   * Takes `bytes` more of the budget for the file of `download`.
   *
   * A file that would outgrow the whole budget fails at once: no wait can
   * help it. When the budget is short, or others already wait for it:
   * - a download that has started waits up to maxWaitMs, as the bytes it
   *   sent would be lost;
   * - one that has not fails at once, so its client gets a 503, except the
   *   oldest of those that hold budget while younger ones hold some too:
   *   it waits for them, as they fail when they run short. Without that
   *   exception, a burst of downloads that together outgrow the budget
   *   could all fail, each holding part of it, again at every retry.
   * Downloads that each hold part of the budget and wait for more end when
   * their wait does, and so free it.
   */
  async reserve (download: SpoolDownload, bytes: number): Promise<void> {
    if (this.closed) throw new Error('The tar spool is closed')
    const { maxBytes, maxWaitMs } = this.options
    if (download.held + bytes > maxBytes) throw this.fullError()
    if (this.waiters.length === 0 && this.reservedBytes + bytes <= maxBytes) {
      this.reservedBytes += bytes
      download.held += bytes
      return
    }
    if (maxWaitMs === 0 || !(download.started() || this.oldestOfContenders(download))) throw this.fullError()
    const { signal } = download
    if (signal.aborted) throw new Error('Download stopped')
    download.waiting = true
    try {
      await new Promise<void>((resolve, reject) => {
        const leave = (): void => {
          clearTimeout(timer)
          signal.removeEventListener('abort', onAbort)
          const at = this.waiters.indexOf(waiter)
          if (at >= 0) this.waiters.splice(at, 1)
          // The head may have been what held the others back.
          this.grantWaiters()
        }
        const waiter: Waiter = {
          bytes,
          grant: () => {
            clearTimeout(timer)
            signal.removeEventListener('abort', onAbort)
            download.held += bytes
            resolve()
          },
          fail: (err) => { leave(); reject(err) }
        }
        const onAbort = (): void => { waiter.fail(new Error('Download stopped')) }
        const timer = setTimeout(() => { waiter.fail(this.fullError()) }, maxWaitMs)
        signal.addEventListener('abort', onAbort)
        this.waiters.push(waiter)
      })
    } finally {
      download.waiting = false
    }
  }

  /** Whether `download` is the oldest of the downloads not started that hold or wait for budget, and not the only one. */
  private oldestOfContenders (download: SpoolDownload): boolean {
    let younger = false
    for (const other of this.downloads) {
      if (other === download || other.started() || (other.held === 0 && !other.waiting)) continue
      if (other.order < download.order) return false
      younger = true
    }
    return younger
  }

  /** Gives back all the budget `download` holds (its file is gone). */
  release (download: SpoolDownload): void {
    this.reservedBytes -= download.held
    download.held = 0
    this.grantWaiters()
  }

  private grantWaiters (): void {
    while (this.waiters.length > 0 && this.reservedBytes + this.waiters[0].bytes <= this.options.maxBytes) {
      const waiter = this.waiters.shift() as Waiter
      this.reservedBytes += waiter.bytes
      waiter.grant()
    }
  }

  /** A new file in the spool folder, made if need be (again, if something removed it). */
  async createFile (): Promise<{ path: string, file: FileHandle }> {
    if (this.closed) throw new Error('The tar spool is closed')
    const path = join(this.folder, `entry-${++this.files}`)
    for (let attempt = 1; ; attempt++) {
      // One mkdir shared by every caller, and never one that finds the folder
      // there: a folder of this name that we did not make is not ours to use.
      const made = this.made ??= mkdir(this.folder, { mode: 0o700 }).then(() => {}, (err: Error) => {
        this.made = null
        throw err
      })
      await made
      let file: FileHandle
      try {
        file = await open(path, 'wx', 0o600)
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || attempt > 1) throw err
        if (this.made === made) this.made = null
        continue
      }
      if (this.closed) {
        // close() ran meanwhile, perhaps before the folder was made.
        await file.close()
        await rm(this.folder, { recursive: true, force: true })
        throw new Error('The tar spool is closed')
      }
      return { path, file }
    }
  }

  /**
   * Stops the downloads still running (the server closed with them in
   * flight, or they were injected), removes their files and the folder. A
   * download may be waiting for its source, which nothing can interrupt, so
   * its file is removed here rather than when it next runs.
   */
  async close (): Promise<void> {
    this.closed = true
    for (const waiter of [...this.waiters]) waiter.fail(new Error('The server is closing'))
    const running = [...this.downloads]
    for (const download of running) download.stop()
    await Promise.all(running.map((d) => d.entry?.dispose()))
    await rm(this.folder, { recursive: true, force: true })
  }
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
 * One entry until its size is known: memory first, then a file, whose disk
 * budget is reserved before its bytes are written. Text stays text until it
 * is written out (fs encodes it without a Buffer of ours), so spooling adds
 * little garbage.
 */
export class SpooledEntry {
  size = 0
  private chunks: Array<string | Buffer> = []
  private file: FileHandle | null = null
  private path: string | null = null

  constructor (private readonly spool: TarSpool, private readonly download: SpoolDownload) {
    download.entry = this
  }

  async write (chunk: string | Buffer): Promise<void> {
    this.size += typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length
    if (this.file === null && this.size <= this.spool.options.memoryPerEntry) {
      this.chunks.push(chunk)
      return
    }
    const { held } = this.download
    if (this.size > held) await this.spool.reserve(this.download, Math.ceil((this.size - held) / SPOOL_BLOCK) * SPOOL_BLOCK)
    let file = this.file
    if (file === null) {
      const created = await this.spool.createFile()
      this.path = created.path
      this.file = file = created.file
      for (const kept of this.chunks) await writeAll(file, kept)
      this.chunks = []
    }
    await writeAll(file, chunk)
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
    const file = this.file = await open(this.path, 'r')
    const buffer = Buffer.allocUnsafe(READ_SIZE)
    for (;;) {
      const { bytesRead } = await file.read(buffer, 0, READ_SIZE, null)
      if (bytesRead === 0) return
      yield Buffer.from(buffer.toString('latin1', 0, bytesRead), 'latin1')
    }
  }

  /** Removes the file and gives its budget back; may be called again. */
  async dispose (): Promise<void> {
    this.chunks = []
    const { file, path } = this
    this.file = null
    this.path = null
    if (this.download.entry === this) this.download.entry = null
    try {
      await file?.close().catch(() => {})
      if (path !== null) await rm(path, { force: true })
    } finally {
      this.spool.release(this.download)
    }
  }
}
