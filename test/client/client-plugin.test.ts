import { text } from 'node:stream/consumers'
import t from 'tap'
import { DataEndpointsClient, type ClientLogEntry } from '../../lib/client/index.js'
import type { Pipeline } from '../../lib/index.js'
import { DATASET_URL, PIPELINE_URL, assignKeys, buildApp, createKey, type TestApp } from '../helper.js'

// The client against the real plugin, over real HTTP on loopback.

async function listening (t: Parameters<typeof buildApp>[0]): Promise<TestApp & { base: string, key: string }> {
  const built = await buildApp(t)
  const { id, key } = await createKey(built.app)
  await assignKeys(built.app, 'dataset', [id])
  await assignKeys(built.app, 'pipeline', [id])
  const base = await built.app.listen({ port: 0, host: '127.0.0.1' })
  return { ...built, base, key }
}

t.test('downloads a dataset as JSON, with entity and limit', async (t) => {
  const { base, key } = await listening(t)
  const c = new DataEndpointsClient({ apiKey: key, baseUrl: base })
  const download = await c.downloadDataset(DATASET_URL, { format: 'json', entity: 'customers', limit: 2 })
  t.match(download.contentType, /^application\/json/)
  t.match(download.fileName, /^sales.*\.json$/)
  const body = JSON.parse(await text(download.body)) as Record<string, unknown[]>
  t.same(Object.keys(body), ['customers'])
  t.equal(body.customers.length, 2)
})

t.test('a large download comes gzip-compressed and reads back as the plugin\'s identity body', async (t) => {
  const { ProbeDatasets } = await import('../format-fixtures.js')
  const built = await buildApp(t, { datasets: new ProbeDatasets(5000) })
  const { id, key } = await createKey(built.app)
  await assignKeys(built.app, 'dataset', [id])
  const base = await built.app.listen({ port: 0, host: '127.0.0.1' })
  const identity = await built.app.inject({ url: DATASET_URL, query: { api_key: key, format: 'json' } })
  const download = await new DataEndpointsClient({ apiKey: key, baseUrl: base }).downloadDataset(DATASET_URL, { format: 'json' })
  t.equal(download.headers.get('content-encoding'), 'gzip', 'sent compressed')
  t.equal(download.contentLength, undefined, 'no length for the decompressed bytes')
  t.equal(await text(download.body), identity.body, 'the same data')
})

t.test('meta=entities lists the entities', async (t) => {
  const { base, key } = await listening(t)
  const c = new DataEndpointsClient({ apiKey: key, baseUrl: base })
  const download = await c.downloadDataset(DATASET_URL, { meta: 'entities' })
  t.same(JSON.parse(await text(download.body)), ['customers', 'orders'])
})

t.test('the server\'s 403 and 405 arrive as typed errors, once', async (t) => {
  const { base, key } = await listening(t)
  const log: ClientLogEntry[] = []
  const wrongKey = `${key.slice(0, 10)}-${'x'.repeat(21)}`
  const c = new DataEndpointsClient({ apiKey: wrongKey, baseUrl: base, logger: (e) => log.push(e) })
  await t.rejects(c.downloadDataset(DATASET_URL, { format: 'json' }), { name: 'HttpError', status: 403, message: 'Unknown API key' })
  const right = new DataEndpointsClient({ apiKey: key, baseUrl: base, logger: (e) => log.push(e) })
  await t.rejects(right.runPipeline(DATASET_URL), { name: 'HttpError', status: 405, message: 'Endpoint or method not allowed' })
  t.equal(log.length, 2, 'no retries')
  t.same(log.map((e) => e.keyPrefix), [key.slice(0, 10), key.slice(0, 10)])
})

t.test('runs a pipeline and waits for its job', async (t) => {
  const { base, key, jobs } = await listening(t)
  const c = new DataEndpointsClient({ apiKey: key, baseUrl: base })
  const ref = await c.runPipeline(PIPELINE_URL)
  t.equal(ref.job_url, `${base}/api/job/${ref.job_id}`)
  t.equal((await c.getJob(ref)).status, 'queued')

  const final = await c.waitForJob(ref, {
    interval: 20,
    onStatus: (job) => {
      // the host's job moves on while the client polls
      const record = jobs.jobs.get(job.job_id)
      if (record !== undefined) record.status = job.status === 'queued' ? 'running' : 'succeeded'
    }
  })
  t.equal(final.status, 'succeeded')
  t.equal(jobs.starts, 1)
})

t.test('a retry after a time-out does not start a second run', async (t) => {
  const { base, key, jobs } = await listening(t)
  // The first attempt times out while the run is still being started; the
  // retries carry the same Idempotency-Key and get that run's job back.
  const original = jobs.getPipeline.bind(jobs)
  jobs.getPipeline = async (ref): Promise<Pipeline | null> => {
    const pipeline = await original(ref)
    if (pipeline === null) return null
    return {
      ...pipeline,
      start: async (jobId) => {
        await new Promise((resolve) => setTimeout(resolve, 400))
        await pipeline.start(jobId)
      }
    }
  }
  const log: ClientLogEntry[] = []
  const c = new DataEndpointsClient({ apiKey: key, baseUrl: base, timeout: 150, retryDelays: [100, 100, 100, 100, 100], logger: (e) => log.push(e) })
  const ref = await c.runPipeline(PIPELINE_URL)

  t.ok(log.filter((e) => e.message === 'No answer within 150 ms').length >= 1, 'at least one attempt timed out')
  t.equal(jobs.starts, 1, 'one run only')
  t.ok(jobs.jobs.has(ref.job_id), 'the job returned is the run that started')
})

t.test('the job route\'s 404 carries its message', async (t) => {
  const { base } = await listening(t)
  const c = new DataEndpointsClient({ baseUrl: base })
  await t.rejects(c.getJob('/api/job/not-a-uuid'), { name: 'HttpError', status: 404, message: 'Invalid job id' })
  await t.rejects(c.getJob('/api/job/0b6f3a52-3f3e-4c55-9a66-1f0d7c1e2a10'),
    { name: 'HttpError', status: 404, message: 'Job is not available or has been deleted' })
})
