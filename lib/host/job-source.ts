// What the host implements to answer the public `/api/job/:jobId` route.

export type JobType = 'pipeline' | 'dump'
export type JobStatus = 'queued' | 'running' | 'succeeded' | 'failed'

export interface Job {
  id: string
  type: JobType
  status: JobStatus
  createdAt: Date | string
  updatedAt: Date | string
  /** why a failed job failed */
  error?: string
  /** for a dump job: false once the dataset it used is gone */
  datasetAvailable?: boolean
}

export interface JobSource {
  /** The job, or null when it does not exist or was deleted. */
  getJob (jobId: string): Promise<Job | null>
}
