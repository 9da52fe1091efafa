import { randomUUID } from 'node:crypto'
import type {
  Column, Dataset, DatasetSource, Job, JobSource, Pipeline, PipelineRunner, ResourceRef, Row
} from '../lib/index.js'

// Small in-memory host parts for tests: a dataset source, a pipeline runner
// and the job source that reads its jobs.

export interface FixtureEntity {
  name: string
  columns: Column[]
  rows: Row[]
}

export interface FixtureDataset {
  name: string
  entities: FixtureEntity[]
}

function refKey (ref: ResourceRef): string {
  return `${ref.organization}/${ref.project}/${ref.modelSequence}/${ref.resourceSequence}`
}

export class MemoryDatasets implements DatasetSource {
  readonly datasets = new Map<string, FixtureDataset>()
  /** rows handed out, per entity, to tell how far a stream read */
  readonly rowsPulled = new Map<string, number>()

  add (ref: ResourceRef, dataset: FixtureDataset): this {
    this.datasets.set(refKey(ref), dataset)
    return this
  }

  async getDataset (ref: ResourceRef): Promise<Dataset | null> {
    const fixture = this.datasets.get(refKey(ref))
    if (fixture === undefined) return null
    const pulled = this.rowsPulled
    return {
      name: fixture.name,
      entities: fixture.entities.map(({ name, columns }) => ({ name, columns })),
      async * rows (entity, { limit }) {
        const e = fixture.entities.find((x) => x.name === entity)
        if (e === undefined) throw new Error(`no entity ${entity}`)
        const rows = limit === undefined ? e.rows : e.rows.slice(0, limit)
        for (const row of rows) {
          pulled.set(entity, (pulled.get(entity) ?? 0) + 1)
          yield row
        }
      }
    }
  }
}

export class MemoryJobs implements PipelineRunner, JobSource {
  readonly pipelines = new Map<string, string>()
  readonly jobs = new Map<string, Job>()
  starts = 0

  addPipeline (ref: ResourceRef, name: string): this {
    this.pipelines.set(refKey(ref), name)
    return this
  }

  async getPipeline (ref: ResourceRef): Promise<Pipeline | null> {
    const name = this.pipelines.get(refKey(ref))
    if (name === undefined) return null
    return {
      name,
      start: async (jobId) => {
        this.starts++
        const now = new Date()
        this.jobs.set(jobId, { id: jobId, type: 'pipeline', status: 'queued', createdAt: now, updatedAt: now })
      }
    }
  }

  async getJob (jobId: string): Promise<Job | null> {
    return this.jobs.get(jobId) ?? null
  }

  addJob (job: Partial<Job> & Pick<Job, 'type' | 'status'>): Job {
    const now = new Date()
    const full: Job = { id: randomUUID(), createdAt: now, updatedAt: now, ...job }
    this.jobs.set(full.id, full)
    return full
  }
}

export const SALES_REF = { organization: 'acme', project: 'shop', modelSequence: 1, resourceSequence: 1 }
export const PIPELINE_REF = { organization: 'acme', project: 'shop', modelSequence: 1, resourceSequence: 1 }

export function salesDataset (): FixtureDataset {
  return {
    name: 'sales',
    entities: [
      {
        name: 'customers',
        columns: [
          { name: 'id', type: 'integer', primaryKey: true, nullable: false },
          { name: 'name', type: 'text' },
          { name: 'vip', type: 'boolean' }
        ],
        rows: [[1, 'Ann "the" Buyer, Esq.', true], [2, 'Björn\nNewline', false], [3, null, null]]
      },
      {
        name: 'orders',
        columns: [
          { name: 'id', type: 'integer', primaryKey: true, nullable: false },
          { name: 'amount', type: 'decimal', precision: 12, scale: 2 },
          { name: 'placed_at', type: 'timestamp', withTimeZone: true }
        ],
        rows: [[10, '19.99', new Date('2024-01-02T03:04:05.678Z')], [11, '0.10', new Date('1999-12-31T23:59:59Z')]]
      }
    ]
  }
}
