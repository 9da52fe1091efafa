import type { FastifyInstance } from 'fastify'
import { redactKeys } from '../keys/api-key.js'
import type { PluginContext } from './context.js'
import { errorCodeOf, sendError } from './error-reply.js'
import { reasonOf } from '../metrics.js'
import { InvalidJobIdError, JobDatasetGoneError, JobNotAvailableError, withDetails } from '../errors.js'
import { documentationOnly, jobRouteSchema } from './openapi.js'

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

function iso (value: Date | string): string {
  return value instanceof Date ? value.toISOString() : new Date(value).toISOString()
}

/** The public job status route `/api/job/:jobId` (SPEC.md §4.3, §7.3). No key needed. */
export async function jobRoute (app: FastifyInstance, { ctx }: { ctx: PluginContext }): Promise<void> {
  const { jobs } = ctx.options
  app.setErrorHandler(sendError)
  const { metrics } = ctx
  if (metrics !== null) {
    app.addHook('onResponse', async (request, reply) => {
      metrics.request('job', reply.statusCode, reasonOf(reply.statusCode, errorCodeOf(request)))
    })
  }
  // The schema documents the route; the handler answers bad ids itself (§7.3).
  documentationOnly(app)

  app.get<{ Params: { jobId: string } }>('/job/:jobId', { schema: jobRouteSchema }, async (request) => {
    const { jobId } = request.params
    if (!UUID.test(jobId)) throw withDetails(new InvalidJobIdError(), { body: { id: redactKeys(jobId) } })
    const id = jobId.toLowerCase()
    const job = await jobs.getJob(id)
    if (job === null) throw withDetails(new JobNotAvailableError(), { body: { job: id } })
    if (job.type === 'dump' && job.datasetAvailable === false) throw new JobDatasetGoneError()
    return {
      job_id: job.id,
      type: job.type,
      status: job.status,
      created_at: iso(job.createdAt),
      updated_at: iso(job.updatedAt),
      ...(job.status === 'failed' && job.error !== undefined ? { error: job.error } : {})
    }
  })
}
