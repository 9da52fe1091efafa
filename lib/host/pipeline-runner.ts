import type { ResourceRef, ResourceSummary } from './dataset-source.js'

// What the host implements to run pipelines from their endpoints.

export interface Pipeline {
  name: string
  /**
   * Starts a run whose job has id `jobId` (a UUID the plugin chose) and
   * resolves once the job is recorded, so that `/api/job/:jobId` finds it.
   * Reject to make the call fail with 500; then no job may be left behind.
   */
  start (jobId: string): Promise<void>
}

export interface PipelineRunner {
  /** The pipeline at `ref`, or null when it does not exist (404 `Pipeline not found`). */
  getPipeline (ref: ResourceRef): Promise<Pipeline | null>
  /** Optional: the project's pipelines, by name (as `DatasetSource.listResources`). */
  listResources? (project: { organization: string, project: string }): Promise<ResourceSummary[]>
}
