import { createHash } from 'node:crypto'
import { mkdir, open, rm, type FileHandle } from 'node:fs/promises'
import { join } from 'node:path'
import { newSpoolFolderName } from '../formats/spool-folder.js'
import type { Download } from '../formats/types.js'
import type { ServedFile } from './file-reply.js'

// Parquet and Arrow downloads of datasets with a `revision`, rendered once
// into files and served from there, so that a reader can ask for the footer
// first and then only the columns it needs (Content-Length, Range). Files are
// kept under the download's ETag in the plugin's own folder (named as the tar
// spool's, so a later start removes it after a kill -9), within a byte budget,
// the least recently used going first. Concurrent requests for the same ETag
// share one render. A file being read is never removed; a render that cannot
// get room (the rest of the budget is being read or rendered) is given up and
// its requests stream instead, as a dataset without a revision does.

export interface RenderedFilesOptions {
  /** the folder the plugin makes its own folder in */
  directory: string
  /** bytes of rendered files on disk at most */
  maxBytes: number
}

/** A rendered file kept by the cache, in use until released. */
export interface FileLease {
  file: ServedFile
  /** gives the file back (it may then be removed); once */
  release: () => void
}

interface Entry {
  key: string
  path: string
  /** bytes written so far, all of them once ready */
  size: number
  /** requests reading the file */
  readers: number
  ready: ServedFile | null
  /** settles when the render ends: the file, or null when it did not fit */
  rendering: Promise<ServedFile | null> | null
  /** stops the render (the cache closes) */
  stop: AbortController | null
}

/** Thrown inside a render that gets no room: its requests stream instead. */
class NoRoom extends Error {}

/** Keys of files that outgrew the whole budget, remembered so that they are not rendered again each time. */
const TOO_LARGE_MEMORY = 1000

export class RenderedFiles {
  /** this instance's folder */
  readonly folder: string
  private readonly entries = new Map<string, Entry>()
  private readonly tooLarge = new Set<string>()
  private usedBytes = 0
  private made: Promise<void> | null = null
  private files = 0
  private closed = false

  constructor (readonly options: RenderedFilesOptions) {
    this.folder = join(options.directory, newSpoolFolderName())
  }

  /** Bytes of files on disk, finished or being rendered. */
  get bytes (): number {
    return this.usedBytes
  }

  /**
   * The file rendered under `key` (a download's ETag), rendered now by
   * `render` if it is not there yet: one render for every concurrent caller.
   * `render` is given a signal that aborts when the cache closes.
   * Null when it does not fit the budget (the caller streams instead). A
   * render that fails rejects every caller waiting for it.
   */
  async lease (key: string, render: (stop: AbortSignal) => Download): Promise<FileLease | null> {
    if (this.closed || this.options.maxBytes === 0 || this.tooLarge.has(key)) return null
    let entry = this.entries.get(key)
    if (entry === undefined) {
      entry = { key, path: join(this.folder, `file-${++this.files}`), size: 0, readers: 0, ready: null, rendering: null, stop: new AbortController() }
      this.entries.set(key, entry)
      const started = entry
      started.rendering = this.renderInto(started, render).finally(() => {
        started.rendering = null
        started.stop = null
      })
    } else {
      // Most recently used last.
      this.entries.delete(key)
      this.entries.set(key, entry)
    }
    // Counted before the wait, so that the file cannot go once rendered.
    entry.readers++
    let file: ServedFile | null
    try {
      file = entry.ready ?? await entry.rendering
    } catch (err) {
      entry.readers--
      throw err
    }
    if (file === null) {
      entry.readers--
      return null
    }
    const held = entry
    let released = false
    return {
      file,
      release: () => {
        if (released) return
        released = true
        held.readers--
      }
    }
  }

  private async renderInto (entry: Entry, render: (stop: AbortSignal) => Download): Promise<ServedFile | null> {
    let handle: FileHandle | null = null
    try {
      const download = render((entry.stop as AbortController).signal)
      await this.makeFolder()
      handle = await open(entry.path, 'wx', 0o600)
      const hash = createHash('sha256')
      for await (const chunk of download.body) {
        const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
        await this.reserve(entry, bytes.byteLength)
        hash.update(bytes)
        await handle.write(bytes)
      }
      await handle.close()
      handle = null
      if (this.closed) throw new Error('The server is closing')
      const file: ServedFile = {
        path: entry.path,
        size: entry.size,
        // Strong: the hash of these very bytes, after the download's own ETag
        // (whose digest never holds a '.'), so If-Range compares the bytes
        // and If-None-Match can still tell the download.
        etag: entry.key.replace(/^W\//, '').replace(/"$/, '.' + hash.digest('base64url').slice(0, 22) + '"'),
        contentType: download.contentType,
        fileName: download.fileName
      }
      entry.ready = file
      return file
    } catch (err) {
      await handle?.close().catch(() => {})
      await this.remove(entry).catch(() => {})
      if (err instanceof NoRoom) return null
      throw err
    }
  }

  /**
   * Takes `bytes` more of the budget for `entry`, removing unread files,
   * least recently used first. A file's bytes stay counted until it is gone
   * from the disk, so the disk never holds more than the budget.
   */
  private async reserve (entry: Entry, bytes: number): Promise<void> {
    const { maxBytes } = this.options
    if (this.closed) throw new Error('The server is closing')
    if (entry.size + bytes > maxBytes) {
      this.tooLarge.add(entry.key)
      if (this.tooLarge.size > TOO_LARGE_MEMORY) this.tooLarge.delete(this.tooLarge.values().next().value as string)
      throw new NoRoom()
    }
    while (this.usedBytes + bytes > maxBytes) {
      let victim: Entry | undefined
      for (const other of this.entries.values()) {
        if (other.ready !== null && other.readers === 0) { victim = other; break }
      }
      if (victim === undefined) throw new NoRoom()
      await this.remove(victim)
    }
    this.usedBytes += bytes
    entry.size += bytes
  }

  /** Forgets an entry and removes its file; its bytes leave the budget once the file is gone. */
  private async remove (entry: Entry): Promise<void> {
    if (this.entries.get(entry.key) === entry) this.entries.delete(entry.key)
    entry.ready = null
    const size = entry.size
    entry.size = 0
    try {
      await rm(entry.path, { force: true })
    } finally {
      this.usedBytes -= size
    }
  }

  private async makeFolder (): Promise<void> {
    // One mkdir shared by every render; a folder of this name that we did not make is not ours.
    const made = this.made ??= mkdir(this.folder, { mode: 0o700 }).then(() => {}, (err: Error) => {
      this.made = null
      throw err
    })
    await made
  }

  /** Stops renders and removes the folder with every file. */
  async close (): Promise<void> {
    this.closed = true
    for (const entry of this.entries.values()) entry.stop?.abort()
    await Promise.all([...this.entries.values()].map(async (e) => await e.rendering?.catch(() => null)))
    await rm(this.folder, { recursive: true, force: true })
  }
}
