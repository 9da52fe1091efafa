import { randomUUID } from 'node:crypto'
import type { Job, JobSource, JobStatus, Pipeline, PipelineRunner, ResourceRef, ResourceSummary } from '../lib/index.js'
import type { JobStore } from './job-store.js'
import { SAMPLE_MODEL } from './sample-datasets.js'

// The example's pipelines and their jobs. A run is a pair of timers that move
// its job queued -> running -> succeeded|failed; jobs are rows of a JobStore
// (the example's SQLite file, or PostgreSQL shared by several instances), so
// their status survives a restart and any instance can answer for them.

interface SamplePipeline {
  name: string
  /** how long the job stays `running` */
  runMs: number
  /** set for a pipeline whose runs fail */
  error?: string
}

const PIPELINES = new Map<number, SamplePipeline>([
  [1, { name: 'refresh-sales', runMs: 1000 }],
  [2, { name: 'broken', runMs: 300, error: 'Step "load" failed: source table acme.legacy_orders does not exist' }]
])

/** How long a job waits in `queued` before it runs. */
const QUEUED_MS = 100

export const INTERRUPTED = 'Interrupted: the server stopped before the job finished'

/** Unfinished jobs not updated for this long belong to an instance that stopped without closing. */
export const ABANDONED_AFTER_MS = 60_000
export const ABANDONED = 'Interrupted: the server running the job stopped'

export class SampleJobs implements PipelineRunner, JobSource {
  private readonly timers = new Set<NodeJS.Timeout>()
  /** writes of steps under way, awaited at close */
  private readonly writes = new Set<Promise<void>>()
  private readonly sweeper: NodeJS.Timeout
  private closed = false
  /** this instance, in the jobs it starts: at close it fails its own unfinished jobs, no other's */
  readonly owner = randomUUID()

  /**
   * `onError` hears a step whose write failed (the job then stays at its last
   * status until the abandoned-job sweep fails it).
   */
  constructor (private readonly store: JobStore, private readonly onError: (err: unknown, jobId: string) => void = () => {}) {
    // Jobs of an instance that crashed (no close ran) stay unfinished; any
    // instance fails them once they have not moved for a minute.
    this.sweeper = setInterval(() => { void this.failAbandoned().catch(() => {}) }, ABANDONED_AFTER_MS).unref()
  }

  /** Fails the jobs a stopped instance left behind. Call once at start, after the store is ready. */
  async failAbandoned (staleMs = ABANDONED_AFTER_MS): Promise<number> {
    return this.store.failUnfinished(ABANDONED, { staleMs })
  }

  async getPipeline (ref: ResourceRef): Promise<Pipeline | null> {
    if (ref.organization !== SAMPLE_MODEL.organization || ref.project !== SAMPLE_MODEL.project ||
      ref.modelSequence !== SAMPLE_MODEL.modelSequence) return null
    const pipeline = PIPELINES.get(ref.resourceSequence)
    if (pipeline === undefined) return null
    return { name: pipeline.name, start: async (jobId) => this.start(jobId, ref.resourceSequence, pipeline) }
  }

  /** The pipelines by name, for the management page's picker. */
  async listResources (project: { organization: string, project: string }): Promise<ResourceSummary[]> {
    if (project.organization !== SAMPLE_MODEL.organization || project.project !== SAMPLE_MODEL.project) return []
    return [...PIPELINES].map(([resourceSequence, p]) => ({ modelSequence: SAMPLE_MODEL.modelSequence, resourceSequence, name: p.name }))
  }

  async getJob (jobId: string): Promise<Job | null> {
    const row = await this.store.get(jobId)
    if (row === null) return null
    return {
      id: row.id,
      type: 'pipeline',
      status: row.status,
      createdAt: row.createdAt,
      updatedAt: row.updatedAt,
      ...(row.error === null ? {} : { error: row.error })
    }
  }

  /** Resolves once the job is recorded (the plugin then answers its job_url). */
  private async start (jobId: string, sequence: number, pipeline: SamplePipeline): Promise<void> {
    if (this.closed) throw new Error('The server is shutting down; no new pipeline runs')
    await this.store.insert(jobId, sequence, this.owner)
    this.after(QUEUED_MS, jobId, 'running', null, () => {
      this.after(pipeline.runMs, jobId, pipeline.error === undefined ? 'succeeded' : 'failed', pipeline.error ?? null)
    })
  }

  /** In `ms`, moves the job to `status`, then runs `next`. */
  private after (ms: number, jobId: string, status: JobStatus, error: string | null, next?: () => void): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer)
      const write = this.store.setStatus(jobId, status, error).then(
        () => { if (!this.closed) next?.() },
        (err: unknown) => { this.onError(err, jobId) }
      )
      this.writes.add(write)
      void write.finally(() => this.writes.delete(write))
    }, ms)
    this.timers.add(timer)
  }

  /**
   * Stops every pending step and fails this instance's runs that it cut
   * short, and only those: other instances' runs go on. Call before closing
   * the store.
   */
  async close (): Promise<void> {
    if (this.closed) return
    this.closed = true
    clearInterval(this.sweeper)
    for (const timer of this.timers) clearTimeout(timer)
    this.timers.clear()
    await Promise.all(this.writes)
    await this.store.failUnfinished(INTERRUPTED, { owner: this.owner })
  }

  /** Steps still scheduled (0 after close). */
  get pendingSteps (): number {
    return this.timers.size
  }
}
