import t from 'tap'
import { buildApp } from '../helper.js'

t.test('a job\'s status is public and has the documented fields', async (t) => {
  const { app, jobs } = await buildApp(t)
  const job = jobs.addJob({ type: 'pipeline', status: 'running', createdAt: new Date('2026-01-01T00:00:00Z'), updatedAt: '2026-01-01T00:00:05.000Z' })
  const res = await app.inject(`/api/job/${job.id}`)
  t.equal(res.statusCode, 200)
  t.same(res.json(), {
    job_id: job.id, type: 'pipeline', status: 'running', created_at: '2026-01-01T00:00:00.000Z', updated_at: '2026-01-01T00:00:05.000Z'
  })
})

t.test('a failed job carries its error', async (t) => {
  const { app, jobs } = await buildApp(t)
  const job = jobs.addJob({ type: 'dump', status: 'failed', error: 'disk full' })
  const res = await app.inject(`/api/job/${job.id}`)
  t.match(res.json(), { job_id: job.id, type: 'dump', status: 'failed', error: 'disk full' })
})

t.test('an upper-case UUID finds the same job', async (t) => {
  const { app, jobs } = await buildApp(t)
  const job = jobs.addJob({ type: 'pipeline', status: 'succeeded' })
  const res = await app.inject(`/api/job/${job.id.toUpperCase()}`)
  t.equal(res.json().job_id, job.id)
})

t.test('404 Invalid job id echoes the malformed id', async (t) => {
  const { app } = await buildApp(t)
  for (const id of ['42', 'not-a-uuid', '0123456789abcdef0123456789abcdef', '%F0%9F%98%80']) {
    const res = await app.inject(`/api/job/${id}`)
    t.equal(res.statusCode, 404, id)
    t.same(res.json(), { id: decodeURIComponent(id), message: 'Invalid job id' }, id)
  }
})

t.test('404 Job is not available for an unknown or deleted job', async (t) => {
  const { app, jobs } = await buildApp(t)
  const job = jobs.addJob({ type: 'pipeline', status: 'succeeded' })
  jobs.jobs.delete(job.id)
  const res = await app.inject(`/api/job/${job.id}`)
  t.equal(res.statusCode, 404)
  t.same(res.json(), { job: job.id, message: 'Job is not available or has been deleted' })
})

t.test('404 Dataset is not available for a dump job whose dataset is gone', async (t) => {
  const { app, jobs } = await buildApp(t)
  const job = jobs.addJob({ type: 'dump', status: 'succeeded', datasetAvailable: false })
  const res = await app.inject(`/api/job/${job.id}`)
  t.equal(res.statusCode, 404)
  t.same(res.json(), { message: 'Dataset is not available or has been deleted' })
})

t.test('a job source failure is a 500 with its message', async (t) => {
  const { app, jobs } = await buildApp(t)
  jobs.getJob = async () => { throw new Error('job store unreachable') }
  const res = await app.inject('/api/job/3f1c4bd4-7a0e-4f51-9b9c-2f1f0a4b1c2d')
  t.same([res.statusCode, res.json()], [500, { message: 'job store unreachable' }])
})
