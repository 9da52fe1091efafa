import type Database from 'better-sqlite3'
import type { Job, JobSource, JobStatus, Pipeline, PipelineRunner, ResourceRef, ResourceSummary } from '../lib/index.js'
import { SAMPLE_MODEL } from './sample-datasets.js'

// The example's pipelines and their jobs. A run is a pair of timers that move
// its job queued -> running -> succeeded|failed; jobs are rows of the example
// database, so their status survives a restart.

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

interface JobRow {
  id: string
  status: JobStatus
  error: string | null
  created_at: string
  updated_at: string
}

export class SampleJobs implements PipelineRunner, JobSource {
  private readonly timers = new Set<NodeJS.Timeout>()
  private closed = false
  private readonly statements

  /** `db`: a writable connection to the example database. */
  constructor (private readonly db: Database.Database) {
    db.exec(`CREATE TABLE IF NOT EXISTS jobs (
      id TEXT PRIMARY KEY,
      pipeline INTEGER NOT NULL,
      status TEXT NOT NULL,
      error TEXT,
      created_at TEXT NOT NULL,
      updated_at TEXT NOT NULL
    )`)
    this.statements = {
      insert: db.prepare<[string, number, string, string]>(
        'INSERT INTO jobs (id, pipeline, status, created_at, updated_at) VALUES (?, ?, \'queued\', ?, ?)'),
      setStatus: db.prepare<[JobStatus, string | null, string, string]>(
        'UPDATE jobs SET status = ?, error = ?, updated_at = ? WHERE id = ?'),
      get: db.prepare<[string], JobRow>('SELECT id, status, error, created_at, updated_at FROM jobs WHERE id = ?'),
      failUnfinished: db.prepare<[string, string]>(
        'UPDATE jobs SET status = \'failed\', error = ?, updated_at = ? WHERE status IN (\'queued\', \'running\')')
    }
    // No run outlives its process: jobs left unfinished by a crash are failed now.
    this.failUnfinished()
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
    const row = this.statements.get.get(jobId)
    if (row === undefined) return null
    return {
      id: row.id,
      type: 'pipeline',
      status: row.status,
      createdAt: row.created_at,
      updatedAt: row.updated_at,
      ...(row.error === null ? {} : { error: row.error })
    }
  }

  private start (jobId: string, sequence: number, pipeline: SamplePipeline): void {
    if (this.closed) throw new Error('The server is shutting down; no new pipeline runs')
    const now = new Date().toISOString()
    this.statements.insert.run(jobId, sequence, now, now)
    this.after(QUEUED_MS, () => {
      this.setStatus(jobId, 'running', null)
      this.after(pipeline.runMs, () => {
        if (pipeline.error === undefined) this.setStatus(jobId, 'succeeded', null)
        else this.setStatus(jobId, 'failed', pipeline.error)
      })
    })
  }

  private after (ms: number, step: () => void): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer)
      step()
    }, ms)
    this.timers.add(timer)
  }

  private setStatus (jobId: string, status: JobStatus, error: string | null): void {
    this.statements.setStatus.run(status, error, new Date().toISOString(), jobId)
  }

  private failUnfinished (): void {
    this.statements.failUnfinished.run(INTERRUPTED, new Date().toISOString())
  }

  /** Stops every pending step and fails the runs it cut short. Call before closing the database. */
  close (): void {
    if (this.closed) return
    this.closed = true
    for (const timer of this.timers) clearTimeout(timer)
    this.timers.clear()
    this.failUnfinished()
  }

  /** Steps still scheduled (0 after close). */
  get pendingSteps (): number {
    return this.timers.size
  }
}
