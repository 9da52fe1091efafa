import { text } from 'node:stream/consumers'
import { inspect } from 'node:util'
import t from 'tap'
import {
  DataEndpointsClient, HttpError, JobWaitTimeoutError, NetworkError, UsageError, type ClientLogEntry, type JobInfo
} from '../../lib/client/index.js'
import {
  API_KEY, DATASET_PATH, JOB_ID, KEY_PREFIX, PIPELINE_PATH, recordingSleep, sendGzipped, sendJson, startServer
} from '../client-server.js'

// What a user of fastify-data-endpoints/client sees: the query and the key go
// where they belong, answers come back typed, errors carry status and message,
// and log entries carry the key prefix, never the key.

function job (status: JobInfo['status'], extra: Partial<JobInfo> = {}): JobInfo {
  return { job_id: JOB_ID, type: 'pipeline', status, created_at: '2024-05-01T10:00:00.000Z', updated_at: '2024-05-01T10:00:01.000Z', ...extra }
}

t.test('downloadDataset sends every query option and the key in the Authorization header only', async (t) => {
  const server = await startServer(t, (_req, res) => {
    res.writeHead(200, {
      'content-type': 'application/zip',
      'content-disposition': 'attachment; filename="sales_.zip"; filename*=UTF-8\'\'sales%C3%A9.zip',
      'content-length': '5'
    })
    res.end('PK..!')
  })
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base })
  const download = await c.downloadDataset(DATASET_PATH, { format: 'csv-zip', entity: 'orders', archiveType: 'tar', limit: 0 })
  t.equal(await text(download.body), 'PK..!')
  t.equal(download.contentType, 'application/zip')
  t.equal(download.fileName, 'salesé.zip', 'the UTF-8 file name of Content-Disposition')
  t.equal(download.contentLength, 5)

  const [req] = server.seen
  const url = new URL(req.url, server.base)
  t.equal(url.pathname, DATASET_PATH)
  t.same(Object.fromEntries(url.searchParams), { format: 'csv-zip', entity: 'orders', archiveType: 'tar', limit: '0' })
  t.equal(req.headers.authorization, `Bearer ${API_KEY}`)
  t.equal(req.headers['accept-encoding'], 'gzip', 'asks for gzip')
  t.notMatch(req.url, API_KEY)
})

t.test('meta is sent, and an absolute URL works without baseUrl', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 200, ['customers', 'orders']))
  const c = new DataEndpointsClient({ apiKey: API_KEY })
  const download = await c.downloadDataset(`${server.base}${DATASET_PATH}`, { meta: 'entities' })
  t.same(JSON.parse(await text(download.body)), ['customers', 'orders'])
  t.equal(new URL(server.seen[0].url, server.base).searchParams.get('meta'), 'entities')
})

t.test('a key in the URL is refused before anything is sent', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 200, {}))
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base })
  for (const call of [
    () => c.downloadDataset(`${DATASET_PATH}?api_key=${API_KEY}`),
    () => c.runPipeline(`${PIPELINE_PATH}?format=json&API_KEY=${API_KEY}`),
    () => c.getJob(`/api/job/${JOB_ID}?api_key=${API_KEY}`)
  ]) {
    const err = await call().catch((e: unknown) => e) as UsageError
    t.type(err, UsageError)
    t.match(err.message, /must not be in the URL \(api_key=\)/)
    t.match(err.message, /DATA_ENDPOINTS_API_KEY/)
    t.notMatch(err.message, API_KEY)
  }
  t.equal(server.seen.length, 0)
})

t.test('the key is not sent over plain HTTP to a host that is not loopback', async (t) => {
  const c = new DataEndpointsClient({ apiKey: API_KEY })
  await t.rejects(c.downloadDataset('http://data.example.test/api/a/b/model/1/dataset/1'),
    { name: 'UsageError', message: /Refusing to send the API key over plain HTTP to data\.example\.test/ })
  await t.rejects(c.runPipeline('ftp://data.example.test/x'), { name: 'UsageError', message: /Unsupported URL scheme/ })
})

t.test('values the server would refuse are refused before sending', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 200, {}))
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base })
  const bad: Array<[Record<string, unknown>, RegExp]> = [
    [{ format: 'xml' }, /format must be one of sql, json, csv-zip, json-zip, oracle-loader/],
    [{ archiveType: 'rar' }, /archiveType must be one of zip, tar/],
    [{ meta: 'rows' }, /meta must be one of entities, ddl/],
    [{ limit: -1 }, /limit must be a non-negative integer/],
    [{ limit: 1.5 }, /limit must be a non-negative integer/],
    [{ entity: '' }, /entity must not be empty/]
  ]
  for (const [query, message] of bad) {
    await t.rejects(c.downloadDataset(DATASET_PATH, query), { name: 'UsageError', message }, JSON.stringify(query))
  }
  await t.rejects(c.runPipeline(PIPELINE_PATH, { idempotencyKey: 'has space' }), { name: 'UsageError' })
  t.equal(server.seen.length, 0)
})

t.test('datasets and pipelines need a key; a bad key value is refused without showing it', async (t) => {
  const c = new DataEndpointsClient({ baseUrl: 'https://data.example.test' })
  await t.rejects(c.downloadDataset(DATASET_PATH), { name: 'UsageError', message: /No API key/ })
  await t.rejects(c.runPipeline(PIPELINE_PATH), { name: 'UsageError', message: /No API key/ })
  t.throws(() => new DataEndpointsClient({ apiKey: 'abc\ndef' }), { name: 'UsageError' })
  t.throws(() => new DataEndpointsClient({ apiKey: '  ' }), { name: 'UsageError' })
  const err = t.throws(() => new DataEndpointsClient({ apiKey: `${API_KEY}\u00e9` })) as Error
  t.notMatch(err.message, API_KEY)
})

t.test('runPipeline returns the job reference', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 200, { job_id: JOB_ID, job_url: `${server.base}/api/job/${JOB_ID}` }))
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base })
  t.same(await c.runPipeline(PIPELINE_PATH), { job_id: JOB_ID, job_url: `${server.base}/api/job/${JOB_ID}` })
  t.equal(server.seen[0].method, 'POST')
  t.equal(server.seen[0].headers.authorization, `Bearer ${API_KEY}`)
})

t.test('an answer that is not what the contract says is an error', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 200, { id: 'x' }))
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base, retryDelays: [] })
  await t.rejects(c.runPipeline(PIPELINE_PATH), { name: 'DataEndpointsError', status: 200, message: /without job_id and job_url/ })
  await t.rejects(c.getJob(`/api/job/${JOB_ID}`), { name: 'DataEndpointsError', message: /not a job/ })
})

t.test('getJob reads the public job route without sending the key', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 200, job('running')))
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base })
  t.same(await c.getJob(`/api/job/${JOB_ID}`), job('running'))
  t.same(await c.getJob({ job_id: JOB_ID, job_url: `${server.base}/api/job/${JOB_ID}` }), job('running'), 'a job reference works too')
  t.equal(server.seen[0].headers.authorization, undefined)
  t.equal(server.seen[1].headers.authorization, undefined)
})

t.test('job errors carry status, message and the extra body field', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 404, { job: JOB_ID, message: 'Job is not available or has been deleted' }))
  const c = new DataEndpointsClient({ baseUrl: server.base })
  const err = await c.getJob(`/api/job/${JOB_ID}`).catch((e: unknown) => e) as HttpError
  t.type(err, HttpError)
  t.equal(err.status, 404)
  t.equal(err.message, 'Job is not available or has been deleted')
  t.same(err.body, { job: JOB_ID, message: 'Job is not available or has been deleted' })
  t.equal(err.url, `${server.base}/api/job/${JOB_ID}`)
})

t.test('an error body that is not JSON still gives status and a message', async (t) => {
  const server = await startServer(t, (_req, res) => res.writeHead(502, { 'content-type': 'text/html' }).end('<h1>Bad gateway</h1>'))
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base })
  await t.rejects(c.downloadDataset(DATASET_PATH), { status: 502, message: 'HTTP 502 Bad Gateway' })
})

t.test('a key echoed in a server message is masked', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 403, { message: `Unknown API key ${API_KEY}` }))
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base })
  const err = await c.downloadDataset(DATASET_PATH).catch((e: unknown) => e) as HttpError
  t.equal(err.message, `Unknown API key ${KEY_PREFIX}-[redacted]`)
})

t.test('a key echoed anywhere in an error body is masked in every field of the error', async (t) => {
  // A proxy's 403 that echoes the key, once plain and once with its dash JSON-escaped.
  const escaped = API_KEY.replace('-', '\\u002d')
  const server = await startServer(t, (_req, res) => res.writeHead(403, { 'content-type': 'application/json' })
    .end(`{"message":"bad key ${API_KEY}","echo":{"keys":["${escaped}"],"${API_KEY}":true}}`))
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base })
  const err = await c.downloadDataset(DATASET_PATH).catch((e: unknown) => e) as HttpError
  t.type(err, HttpError)
  t.equal(err.message, `bad key ${KEY_PREFIX}-[redacted]`)
  t.same(err.body, {
    message: `bad key ${KEY_PREFIX}-[redacted]`,
    echo: { keys: [`${KEY_PREFIX}-[redacted]`], [`${KEY_PREFIX}-[redacted]`]: true }
  })
  for (const shown of [JSON.stringify(err), inspect(err, { depth: null }), err.stack ?? '']) {
    t.notMatch(shown, API_KEY.slice(10))
  }
})

t.test('a key placed in the host shows in no field of the error', async (t) => {
  const host = `${API_KEY}.example.invalid`
  const c = new DataEndpointsClient({ apiKey: API_KEY, retryDelays: [] })
  const secret = new RegExp(API_KEY.slice(10), 'i') // the URL parser lower-cases the host
  const refused = await c.downloadDataset(`http://${host}${DATASET_PATH}`).catch((e: unknown) => e) as UsageError
  t.type(refused, UsageError)
  t.match(refused.message, /Refusing to send the API key over plain HTTP/)
  const unknown = await c.downloadDataset(`https://${host}${DATASET_PATH}`).catch((e: unknown) => e) as NetworkError
  t.type(unknown, NetworkError)
  t.equal(unknown.code, 'ENOTFOUND')
  for (const err of [refused, unknown]) {
    t.notMatch(inspect(err, { depth: null }), secret)
    t.notMatch(JSON.stringify(err), secret)
  }
})

t.test('a compressed answer reports no content length: fetch hands on the decompressed bytes', async (t) => {
  const data = 'INSERT INTO t VALUES (1);\n'.repeat(4000)
  const server = await startServer(t, sendGzipped(data))
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base })
  const download = await c.downloadDataset(DATASET_PATH)
  t.equal(download.contentLength, undefined)
  t.equal(await text(download.body), data)
})

t.test('a redirect is not followed with the key', async (t) => {
  const other = await startServer(t, (_req, res) => sendJson(res, 200, {}))
  const server = await startServer(t, (_req, res) => res.writeHead(302, { location: `${other.base}${DATASET_PATH}` }).end())
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base })
  await t.rejects(c.downloadDataset(DATASET_PATH), { name: 'HttpError', status: 302, message: /not followed/ })
  t.equal(other.seen.length, 0)
})

t.test('waitForJob polls at the interval until the job ends', async (t) => {
  const statuses: Array<JobInfo['status']> = ['queued', 'running', 'running', 'succeeded']
  const server = await startServer(t, (_req, res, n) => sendJson(res, 200, job(statuses[n - 1])))
  const { sleep, waits } = recordingSleep()
  const seen: string[] = []
  const c = new DataEndpointsClient({ baseUrl: server.base, sleep })
  const final = await c.waitForJob(`/api/job/${JOB_ID}`, { interval: 500, onStatus: (j) => seen.push(j.status) })
  t.equal(final.status, 'succeeded')
  t.same(seen, statuses)
  t.same(waits, [500, 500, 500])
  t.equal(server.seen.length, 4)
})

t.test('waitForJob resolves with a failed job and its error', async (t) => {
  const server = await startServer(t, (_req, res, n) => sendJson(res, 200, n === 1 ? job('running') : job('failed', { error: 'disk full' })))
  const { sleep } = recordingSleep()
  const c = new DataEndpointsClient({ baseUrl: server.base, sleep })
  const final = await c.waitForJob(`/api/job/${JOB_ID}`)
  t.equal(final.status, 'failed')
  t.equal(final.error, 'disk full')
})

t.test('waitForJob gives up after its time-out with the last status', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 200, job('running')))
  let clock = 0
  const waits: number[] = []
  const c = new DataEndpointsClient({
    baseUrl: server.base,
    now: () => clock,
    sleep: async (ms) => { waits.push(ms); clock += ms }
  })
  const err = await c.waitForJob(`/api/job/${JOB_ID}`, { interval: 400, timeout: 1000 }).catch((e: unknown) => e) as JobWaitTimeoutError
  t.type(err, JobWaitTimeoutError)
  t.match(err.message, `Job ${JOB_ID} is still running after 1000 ms`)
  t.same(err.job, job('running'))
  t.same(waits, [400, 400, 200], 'the last wait stops at the deadline')
  t.equal(server.seen.length, 4)
})

t.test('waitForJob passes on a poll that failed after its retries', async (t) => {
  const server = await startServer(t, (_req, res, n) => n === 1 ? sendJson(res, 200, job('running')) : sendJson(res, 404, { job: JOB_ID, message: 'Job is not available or has been deleted' }))
  const { sleep, waits } = recordingSleep()
  const c = new DataEndpointsClient({ baseUrl: server.base, sleep })
  await t.rejects(c.waitForJob(`/api/job/${JOB_ID}`, { interval: 100 }), { status: 404, message: 'Job is not available or has been deleted' })
  t.same(waits, [100])
})

t.test('log entries follow SPEC §7.4: URL, status, message, time and key prefix, never the key', async (t) => {
  const server = await startServer(t, (req, res, n) => {
    if (req.url?.startsWith('/api/job/') === true) return sendJson(res, 200, job('succeeded'))
    if (n === 1) return sendJson(res, 500, { message: 'database is down' })
    sendJson(res, 200, { job_id: JOB_ID, job_url: `${server.base}/api/job/${JOB_ID}` })
  })
  const log: ClientLogEntry[] = []
  const { sleep } = recordingSleep()
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base, sleep, logger: (e) => log.push(e) })
  const ref = await c.runPipeline(`${PIPELINE_PATH}?trace=1`)
  await c.getJob(ref)

  t.equal(log.length, 3)
  const [failed, succeeded, jobRead] = log
  t.same(Object.keys(failed).sort(), ['attempt', 'keyPrefix', 'message', 'method', 'retryInMs', 'status', 'time', 'url'])
  t.match(failed, { method: 'POST', url: `${server.base}${PIPELINE_PATH}?trace=1`, status: 500, message: 'database is down', keyPrefix: KEY_PREFIX, attempt: 1, retryInMs: 1000 })
  t.ok(!Number.isNaN(Date.parse(failed.time)), 'an ISO timestamp')
  t.match(succeeded, { status: 200, message: 'OK', keyPrefix: KEY_PREFIX, attempt: 2 })
  t.notOk('retryInMs' in succeeded)
  t.match(jobRead, { method: 'GET', status: 200 })
  t.notOk('keyPrefix' in jobRead, 'no key was sent to the job route')
  t.notMatch(JSON.stringify(log), API_KEY.slice(10), 'no part of the secret is logged')
})

t.test('the default logger is silent', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 500, { message: 'x' }))
  const writes: string[] = []
  const original = process.stderr.write.bind(process.stderr)
  process.stderr.write = ((chunk: string) => { writes.push(String(chunk)); return true }) as typeof process.stderr.write
  try {
    const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base, retryDelays: [0] })
    await c.runPipeline(PIPELINE_PATH).catch(() => {})
  } finally {
    process.stderr.write = original
  }
  t.same(writes, [])
})

t.test('jsonLinesLogger writes one JSON line per entry', async (t) => {
  const { jsonLinesLogger } = await import('../../lib/client/index.js')
  const lines: string[] = []
  const logger = jsonLinesLogger({ write: (s: string) => lines.push(s) } as unknown as NodeJS.WritableStream)
  const entry: ClientLogEntry = { time: '2024-01-01T00:00:00.000Z', method: 'GET', url: 'https://x/api', status: 403, message: 'Unknown API key', keyPrefix: KEY_PREFIX, attempt: 1 }
  logger(entry)
  t.same(lines, [JSON.stringify(entry) + '\n'])
})

t.test('options are checked', async (t) => {
  t.throws(() => new DataEndpointsClient({ timeout: 0 }), { name: 'UsageError', message: /timeout/ })
  t.throws(() => new DataEndpointsClient({ retryDelays: [1000, -1] }), { name: 'UsageError', message: /retryDelays/ })
  for (const maxRetryAfter of [-1, NaN, Infinity]) {
    t.throws(() => new DataEndpointsClient({ maxRetryAfter }), { name: 'UsageError', message: /maxRetryAfter/ }, String(maxRetryAfter))
  }
  t.doesNotThrow(() => new DataEndpointsClient({ maxRetryAfter: 0 }), '0: never wait for a Retry-After')
  t.throws(() => new DataEndpointsClient({ baseUrl: 'not a url' }), { name: 'UsageError', message: /baseUrl/ })
  const c = new DataEndpointsClient({ baseUrl: 'https://data.example.test' })
  await t.rejects(c.waitForJob('/api/job/x', { interval: 0 }), { name: 'UsageError', message: /interval/ })
})
