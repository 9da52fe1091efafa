import { Worker } from 'node:worker_threads'
import { ParquetEncodersBusyError, withDetails } from '../errors.js'
import type { EncodedRowGroup, RowGroupJob } from './parquet-row-group.js'

// Encoding a Parquet row group is synchronous CPU work (about 0.4 s for 80k
// rows of five columns), so it runs in a bounded pool of worker threads and
// never on the event loop. Any worker takes any download's next group, first
// come, first served, so concurrent downloads advance in turn.
//
// A download holds a slot from before it reads a row group's rows until the
// group is encoded: the slots (two per thread, so that rows are read for one
// group while another is encoded) bound the row groups in memory whatever the
// number of downloads. A download waits for a slot in arrival order; one that
// has not sent its first byte is refused with 503 when `maxWaiting` others
// already wait.

export interface ParquetEncodersOptions {
  /** worker threads */
  threads: number
  /** downloads that may wait for a slot before one that has not started is refused */
  maxWaiting: number
  /** the row groups' size (columnarBatchBytes), which sets the threads' heap limit */
  batchBytes: number
}

interface Waiter {
  grant: () => void
  fail: (err: Error) => void
}

interface Job {
  message: RowGroupJob
  resolve: (result: EncodedRowGroup) => void
  reject: (err: Error) => void
  /** called once the batch has been copied to the thread */
  copied?: () => void
}

/** The module of the worker, next to this one. */
const FROM_SOURCE = import.meta.url.endsWith('.ts')
const WORKER_URL = new URL(FROM_SOURCE ? './parquet-worker.ts' : './parquet-worker.js', import.meta.url)

/**
 * A worker's heap limits: encoding a row group takes about ten times its
 * bytes of heap (hyparquet-writer makes a value object per row and column,
 * then pages, dictionaries and statistics). Without limits V8 lets an idle
 * worker keep the heap of its largest group, and a young generation of
 * 16 MiB (instead of 48) cost 10-15% more time for some 40 MiB less memory
 * per thread. A group past the limit fails its download ("A Parquet encoding
 * thread stopped"), not the process.
 */
function workerLimits (batchBytes: number): { maxOldGenerationSizeMb: number, maxYoungGenerationSizeMb: number } {
  return { maxOldGenerationSizeMb: 64 + Math.ceil(batchBytes / 2 ** 20) * 16, maxYoungGenerationSizeMb: 16 }
}

function startWorker (batchBytes: number): Worker {
  const resourceLimits = workerLimits(batchBytes)
  // Run from the TypeScript source (tests, through tsx): a worker does not
  // inherit the loader registered by `--import tsx`, so it registers it first.
  if (FROM_SOURCE) {
    return new Worker(`import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(WORKER_URL.href)}) })`, { eval: true, resourceLimits })
  }
  return new Worker(WORKER_URL, { resourceLimits })
}

/** Seconds a refused download is told to wait. */
const RETRY_AFTER_SECONDS = 5

class EncoderThread {
  readonly worker: Worker
  job: Job | null = null

  constructor (batchBytes: number, onIdle: (thread: EncoderThread) => void, onExit: (thread: EncoderThread, err: Error) => void) {
    this.worker = startWorker(batchBytes)
    this.worker.on('message', (message: EncodedRowGroup | { error: string }) => {
      const job = this.job
      this.job = null
      this.worker.unref()
      if (job !== null) {
        if ('error' in message) job.reject(new Error(message.error))
        else job.resolve(message)
      }
      onIdle(this)
    })
    this.worker.on('error', (err) => { onExit(this, err) })
    this.worker.on('exit', (code) => { onExit(this, new Error(`A Parquet encoding thread stopped (exit code ${code})`)) })
    // An idle thread never keeps the host's process alive (after the
    // listeners: a 'message' listener refs the worker again).
    this.worker.unref()
  }

  run (job: Job): void {
    this.job = job
    // Busy, it keeps the process alive until its group is done.
    this.worker.ref()
    // Copied, not transferred: the download packs its next group into the
    // same buffers (entity-batches.ts), and a buffer transferred away stayed
    // counted on this thread until a full GC (2-3 MiB of garbage a group).
    this.worker.postMessage(job.message)
    job.copied?.()
  }
}

export class ParquetEncoders {
  private readonly idle: EncoderThread[] = []
  private readonly threads = new Set<EncoderThread>()
  private readonly jobs: Job[] = []
  private readonly waiters: Waiter[] = []
  private slotsInUse = 0
  private closed = false

  constructor (readonly options: ParquetEncodersOptions) {}

  get slots (): number {
    return this.options.threads * 2
  }

  usage (): { slotsInUse: number, waiting: number, queuedJobs: number, threads: number } {
    return { slotsInUse: this.slotsInUse, waiting: this.waiters.length, queuedJobs: this.jobs.length, threads: this.threads.size }
  }

  /**
   * Takes a slot, waiting in arrival order; resolves to what gives it back
   * (once). `started`: whether the download has sent bytes, in which case it
   * always waits; one that has not is refused with a 503 when the wait line
   * is full. The wait ends with the signal.
   */
  async acquire (started: boolean, signal: AbortSignal): Promise<() => void> {
    if (this.closed) throw new Error('The Parquet encoders are closed')
    if (this.waiters.length === 0 && this.slotsInUse < this.slots) {
      this.slotsInUse++
      return this.releaser()
    }
    if (!started && this.waiters.length >= this.options.maxWaiting) {
      throw withDetails(new ParquetEncodersBusyError(), { headers: { 'retry-after': String(RETRY_AFTER_SECONDS) } })
    }
    if (signal.aborted) throw new Error('Download stopped')
    await new Promise<void>((resolve, reject) => {
      const onAbort = (): void => { waiter.fail(new Error('Download stopped')) }
      const waiter: Waiter = {
        grant: () => { signal.removeEventListener('abort', onAbort); resolve() },
        fail: (err) => {
          signal.removeEventListener('abort', onAbort)
          const at = this.waiters.indexOf(waiter)
          if (at >= 0) this.waiters.splice(at, 1)
          reject(err)
        }
      }
      signal.addEventListener('abort', onAbort)
      this.waiters.push(waiter)
    })
    return this.releaser()
  }

  private releaser (): () => void {
    let released = false
    return () => {
      if (released) return
      released = true
      const next = this.waiters.shift()
      // The slot passes straight to the next in line.
      if (next !== undefined) next.grant()
      else this.slotsInUse--
    }
  }

  /**
   * Encodes a row group in a worker thread; the batch is copied to it when the
   * job starts, and `copied` is called then: from that moment the batch's
   * buffers may be packed again.
   */
  encode (message: RowGroupJob, copied?: () => void): Promise<EncodedRowGroup> {
    if (this.closed) return Promise.reject(new Error('The Parquet encoders are closed'))
    return new Promise((resolve, reject) => {
      this.jobs.push({ message, resolve, reject, copied })
      this.dispatch()
    })
  }

  private dispatch (): void {
    while (this.jobs.length > 0) {
      let thread = this.idle.pop()
      if (thread === undefined) {
        if (this.threads.size >= this.options.threads) return
        thread = new EncoderThread(this.options.batchBytes, (t) => this.onIdle(t), (t, err) => this.onExit(t, err))
        this.threads.add(thread)
      }
      const job = this.jobs.shift() as Job
      try {
        thread.run(job)
      } catch (err) {
        thread.job = null
        thread.worker.unref()
        this.idle.push(thread)
        job.reject(err as Error)
      }
    }
  }

  private onIdle (thread: EncoderThread): void {
    if (!this.threads.has(thread)) return
    this.idle.push(thread)
    this.dispatch()
  }

  /** A thread that failed or stopped is dropped, its job failed; the next job starts a new one. */
  private onExit (thread: EncoderThread, err: Error): void {
    if (!this.threads.delete(thread)) return
    const at = this.idle.indexOf(thread)
    if (at >= 0) this.idle.splice(at, 1)
    thread.job?.reject(err)
    thread.job = null
    void thread.worker.terminate()
    if (!this.closed) this.dispatch()
  }

  /** Stops the threads; jobs and waits still pending fail. */
  async close (): Promise<void> {
    this.closed = true
    const stopped = new Error('The server is closing')
    for (const waiter of [...this.waiters]) waiter.fail(stopped)
    for (const job of this.jobs.splice(0)) job.reject(stopped)
    const threads = [...this.threads]
    this.threads.clear()
    this.idle.length = 0
    for (const thread of threads) {
      thread.job?.reject(stopped)
      thread.job = null
    }
    await Promise.all(threads.map((t) => t.worker.terminate()))
  }
}
