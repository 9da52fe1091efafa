import { text } from 'node:stream/consumers'
import t from 'tap'
import {
  DataEndpointsClient, DownloadCutOffError, HttpError, NetworkError, type ClientLogEntry, type DataEndpointsClientOptions
} from '../../lib/client/index.js'
import {
  API_KEY, DATASET_PATH, PIPELINE_PATH, closedPort, recordingSleep, sendJson, startServer
} from '../client-server.js'

// The retry policy of SPEC.md §7.4 against a server that fails on purpose:
// 500 and network time-outs are retried after 1, 2, 4, 8, 16 s (five retries
// at most), nothing else is, and a pipeline call keeps its Idempotency-Key.

const SCHEDULE = [1000, 2000, 4000, 8000, 16_000]
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

function client (base: string, options: DataEndpointsClientOptions = {}): { client: DataEndpointsClient, waits: number[], log: ClientLogEntry[] } {
  const { sleep, waits } = recordingSleep()
  const log: ClientLogEntry[] = []
  return {
    client: new DataEndpointsClient({ apiKey: API_KEY, baseUrl: base, sleep, logger: (e) => log.push(e), ...options }),
    waits,
    log
  }
}

const jobReference = (base: string): { job_id: string, job_url: string } =>
  ({ job_id: 'j1', job_url: `${base}/api/job/j1` })

t.test('500 is retried after 1, 2, 4, 8 and 16 s, then the call succeeds', async (t) => {
  const server = await startServer(t, (_req, res, n) => {
    if (n <= 5) return sendJson(res, 500, { message: `boom ${n}` })
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}')
  })
  const { client: c, waits, log } = client(server.base)
  const download = await c.downloadDataset(DATASET_PATH, { format: 'json' })
  t.equal(await text(download.body), '{"ok":true}')
  t.same(waits, SCHEDULE, 'the exact delay sequence')
  t.equal(server.seen.length, 6)
  t.same(log.map((e) => [e.attempt, e.status, e.retryInMs]), [
    [1, 500, 1000], [2, 500, 2000], [3, 500, 4000], [4, 500, 8000], [5, 500, 16_000], [6, 200, undefined]
  ])
  t.equal(log[0].message, 'boom 1', 'the server message is logged')
})

t.test('after five retries the last 500 is thrown with its status and message', async (t) => {
  const server = await startServer(t, (_req, res, n) => sendJson(res, 500, { message: `still broken ${n}` }))
  const { client: c, waits } = client(server.base)
  const err = await c.runPipeline(PIPELINE_PATH).catch((e: unknown) => e)
  t.type(err, HttpError)
  t.equal((err as HttpError).status, 500)
  t.equal((err as HttpError).message, 'still broken 6')
  t.same(waits, SCHEDULE)
  t.equal(server.seen.length, 6, 'one try and five retries')
})

for (const [status, message] of [[403, 'Unknown API key'], [404, 'Not found'], [405, 'Endpoint or method not allowed']] as const) {
  t.test(`${status} is never retried`, async (t) => {
    const server = await startServer(t, (_req, res) => sendJson(res, status, { message }))
    const { client: c, waits, log } = client(server.base)
    for (const call of [() => c.downloadDataset(DATASET_PATH), () => c.runPipeline(PIPELINE_PATH), () => c.getJob('/api/job/x')]) {
      const err = await call().catch((e: unknown) => e)
      t.type(err, HttpError)
      t.equal((err as HttpError).status, status)
      t.equal((err as HttpError).message, message)
    }
    t.equal(server.seen.length, 3, 'one request per call')
    t.same(waits, [])
    t.notOk(log.some((e) => 'retryInMs' in e))
  })
}

t.test('other statuses (400, 409, 502, 503) are not retried either', async (t) => {
  const statuses = [400, 409, 502, 503]
  const server = await startServer(t, (_req, res, n) => sendJson(res, statuses[n - 1], { message: `status ${statuses[n - 1]}` }))
  const { client: c, waits } = client(server.base)
  for (const status of statuses) {
    const err = await c.runPipeline(PIPELINE_PATH).catch((e: unknown) => e) as HttpError
    t.equal(err.status, status)
    t.equal(err.message, `status ${status}`)
  }
  t.equal(server.seen.length, statuses.length)
  t.same(waits, [])
})

t.test('an attempt that gets no answer within the time-out is retried', async (t) => {
  const server = await startServer(t, (_req, res, n) => {
    if (n <= 2) return // hang: never answer
    sendJson(res, 200, { job_id: 'j1', job_url: 'x' })
  })
  const { client: c, waits, log } = client(server.base, { timeout: 100 })
  const ref = await c.runPipeline(PIPELINE_PATH)
  t.equal(ref.job_id, 'j1')
  t.same(waits, [1000, 2000])
  t.same(log.slice(0, 2).map((e) => [e.status, e.message]), [[null, 'No answer within 100 ms'], [null, 'No answer within 100 ms']])
})

t.test('a refused connection is retried five times, then thrown as a NetworkError', async (t) => {
  const port = await closedPort()
  const { client: c, waits, log } = client(`http://127.0.0.1:${port}`)
  const err = await c.downloadDataset(DATASET_PATH).catch((e: unknown) => e)
  t.type(err, NetworkError)
  t.equal((err as NetworkError).code, 'ECONNREFUSED')
  t.equal((err as NetworkError).status, undefined)
  t.same(waits, SCHEDULE)
  t.equal(log.length, 6)
})

t.test('a connection reset before the answer is retried', async (t) => {
  const server = await startServer(t, (req, res, n) => {
    if (n === 1) return req.socket.destroy()
    sendJson(res, 200, { job_id: 'j1', job_url: 'x' })
  })
  const { client: c, waits } = client(server.base)
  t.equal((await c.runPipeline(PIPELINE_PATH)).job_id, 'j1')
  t.same(waits, [1000])
  t.equal(server.seen.length, 2)
})

t.test('a pipeline call sends one Idempotency-Key, the same on every retry', async (t) => {
  const server = await startServer(t, (_req, res, n) => {
    if (n === 1 || n === 2) return sendJson(res, 500, { message: 'boom' })
    if (n === 3) return // time-out
    if (n === 4) return res.socket?.destroy()
    sendJson(res, 200, jobReference(server.base))
  })
  const { client: c, waits } = client(server.base, { timeout: 100 })
  await c.runPipeline(PIPELINE_PATH)
  t.same(waits, [1000, 2000, 4000, 8000])
  const keys = server.seen.map((r) => r.headers['idempotency-key'])
  t.equal(keys.length, 5)
  t.match(keys[0], UUID)
  t.same(new Set(keys).size, 1, 'every attempt carried the same key')

  await c.runPipeline(PIPELINE_PATH)
  t.not(server.seen[5].headers['idempotency-key'], keys[0], 'a new call gets a new key')
  t.notOk(server.seen.some((r) => r.method === 'GET'))
})

t.test('a caller-chosen Idempotency-Key is sent as given', async (t) => {
  const server = await startServer(t, (_req, res, n) => n === 1 ? sendJson(res, 500, { message: 'x' }) : sendJson(res, 200, jobReference(server.base)))
  const { client: c } = client(server.base)
  await c.runPipeline(PIPELINE_PATH, { idempotencyKey: 'nightly-2024-05-01' })
  t.same(server.seen.map((r) => r.headers['idempotency-key']), ['nightly-2024-05-01', 'nightly-2024-05-01'])
})

t.test('real timing: a shortened schedule is waited for between attempts', async (t) => {
  const delays = [100, 200, 400]
  const server = await startServer(t, (_req, res, n) => n <= 3 ? sendJson(res, 500, { message: 'x' }) : sendJson(res, 200, jobReference(server.base)))
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base, retryDelays: delays })
  await c.runPipeline(PIPELINE_PATH)
  const gaps = server.seen.slice(1).map((r, i) => r.at - server.seen[i].at)
  t.equal(gaps.length, 3)
  gaps.forEach((gap, i) => {
    t.ok(gap >= delays[i] - 5, `gap ${i + 1} (${gap} ms) is at least ${delays[i]} ms`)
    t.ok(gap < delays[i] + 400, `gap ${i + 1} (${gap} ms) is not much longer`)
  })
})

t.test('the default schedule is 1, 2, 4, 8, 16 s', async (t) => {
  const { DEFAULT_RETRY_DELAYS } = await import('../../lib/client/index.js')
  t.same(DEFAULT_RETRY_DELAYS, SCHEDULE)
})

t.test('a 429 is retried after its Retry-After, and given up when that is too long', async (t) => {
  const server = await startServer(t, (_req, res, n) => {
    if (n === 1) return sendJson(res, 429, { message: 'Too many failed authentication attempts' }, { 'retry-after': '3' })
    if (n === 2) return sendJson(res, 200, jobReference(server.base))
    sendJson(res, 429, { message: 'Too many failed authentication attempts' }, { 'retry-after': '120' })
  })
  const { client: c, waits } = client(server.base)
  await c.runPipeline(PIPELINE_PATH)
  t.same(waits, [3000], 'waited what Retry-After asked, not the schedule')
  const err = await c.runPipeline(PIPELINE_PATH).catch((e: unknown) => e) as HttpError
  t.equal(err.status, 429)
  t.equal(err.retryAfterMs, 120_000)
  t.same(waits, [3000], 'a Retry-After above maxRetryAfter is not waited for')
  t.equal(server.seen.length, 3)
})

t.test('a key\'s limits: a short Retry-After is waited out, a daily quota\'s is thrown at once with its time', async (t) => {
  const server = await startServer(t, (_req, res, n) => {
    if (n === 1) return sendJson(res, 429, { message: 'Rate limit exceeded' }, { 'retry-after': '17', ratelimit: '"minute";r=0;t=17' })
    if (n === 2) return sendJson(res, 429, { message: 'Too many concurrent downloads' }, { 'retry-after': '1' })
    if (n === 3) return res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}')
    sendJson(res, 429, { message: 'Daily download quota exceeded' }, { 'retry-after': '36000' })
  })
  const { client: c, waits } = client(server.base)
  const download = await c.downloadDataset(DATASET_PATH, { format: 'json' })
  t.equal(await text(download.body), '{"ok":true}')
  t.same(waits, [17_000, 1000], 'each Retry-After waited, as asked')
  const before = Date.now()
  const err = await c.downloadDataset(DATASET_PATH, { format: 'json' }).catch((e: unknown) => e) as HttpError
  t.equal(err.message, 'Daily download quota exceeded')
  t.equal(err.status, 429)
  t.same(waits, [17_000, 1000], 'ten hours are not waited for')
  t.ok(err.retryAt !== undefined && err.retryAt.getTime() >= before + 36_000_000 && err.retryAt.getTime() <= Date.now() + 36_000_000,
    'retryAt: when the server takes calls again')
  t.equal(server.seen.length, 4)
})

t.test('retryDelays: [] turns retries off', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 500, { message: 'x' }))
  const { client: c, waits } = client(server.base, { retryDelays: [] })
  await t.rejects(c.runPipeline(PIPELINE_PATH), { name: 'HttpError', status: 500 })
  t.equal(server.seen.length, 1)
  t.same(waits, [])
})

t.test('aborting the call stops the retries', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 500, { message: 'x' }))
  const controller = new AbortController()
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base })
  const call = c.runPipeline(PIPELINE_PATH, { signal: controller.signal })
  setTimeout(() => controller.abort(), 100) // inside the first 1 s wait
  await t.rejects(call, { name: 'AbortError' })
  await new Promise((resolve) => setTimeout(resolve, 1100))
  t.equal(server.seen.length, 1, 'no retry after the abort')
})

t.test('a download that fails mid-body is not retried: the stream errors with DownloadCutOffError', async (t) => {
  const server = await startServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/sql' })
    res.write('BEGIN;\n', () => res.socket?.destroy()) // chunked, never its last chunk
  })
  const { client: c, waits } = client(server.base)
  const download = await c.downloadDataset(DATASET_PATH)
  const chunks: Buffer[] = []
  const err = await (async () => {
    for await (const chunk of download.body) chunks.push(chunk as Buffer)
  })().catch((e: unknown) => e) as DownloadCutOffError
  t.type(err, DownloadCutOffError)
  t.equal(err.message, 'Download cut off after 7 bytes: other side closed')
  t.equal(err.bytes, 7)
  t.equal(err.status, 200)
  t.equal(err.url, `${server.base}${DATASET_PATH}`)
  t.match(err.cause, { name: 'TypeError', message: 'terminated' }, 'fetch\'s own error is the cause')
  t.equal(Buffer.concat(chunks).toString(), 'BEGIN;\n', 'the bytes before the failure reached the caller')
  t.equal(server.seen.length, 1)
  t.same(waits, [])
})

t.test('a download closed before its Content-Length says how much of it came', async (t) => {
  const server = await startServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/sql', 'content-length': '100' })
    res.write('BEGIN;\n', () => res.socket?.end())
  })
  const { client: c } = client(server.base)
  const download = await c.downloadDataset(DATASET_PATH)
  t.equal(download.contentLength, 100)
  await t.rejects(text(download.body), { name: 'DownloadCutOffError', message: /^Download cut off after 7 of 100 bytes/, bytes: 7 })
})

t.test('the body streams: the first bytes reach the caller before the server sends the rest', async (t) => {
  let sendRest = (): void => {}
  const server = await startServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/sql' })
    res.write('BEGIN;\n')
    sendRest = () => res.end('COMMIT;\n')
  })
  const { client: c } = client(server.base)
  const download = await c.downloadDataset(DATASET_PATH)
  const chunks: string[] = []
  for await (const chunk of download.body) {
    chunks.push(String(chunk))
    sendRest() // a buffering client would wait for the end and never get here
  }
  t.same(chunks, ['BEGIN;\n', 'COMMIT;\n'])
})

t.test('destroying the body ends the download on the server', async (t) => {
  let closed = (): void => {}
  const serverSawClose = new Promise<void>((resolve) => { closed = resolve })
  const server = await startServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/sql' })
    const timer = setInterval(() => res.write('INSERT INTO t VALUES (1);\n'), 10)
    res.on('close', () => { clearInterval(timer); closed() })
  })
  const { client: c } = client(server.base)
  const download = await c.downloadDataset(DATASET_PATH)
  for await (const _chunk of download.body) break // destroys the stream
  await serverSawClose
  t.ok(download.body.destroyed)
})

t.test('the caller\'s abort errors the body with the signal\'s reason, as it is', async (t) => {
  const server = await startServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/sql' })
    res.write('BEGIN;\n')
  })
  const controller = new AbortController()
  const { client: c } = client(server.base)
  const download = await c.downloadDataset(DATASET_PATH, {}, { signal: controller.signal })
  const reason = new Error('the user gave up')
  const err = await (async () => {
    for await (const _chunk of download.body) controller.abort(reason)
  })().catch((e: unknown) => e)
  t.equal(err, reason)
})

t.test('an abort during a retry wait rejects with the signal\'s reason, as it is', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 500, { message: 'x' }))
  const controller = new AbortController()
  const reason = new Error('shutting down')
  // The real sleep; aborted as the first failure is logged, just before the wait.
  const c = new DataEndpointsClient({ apiKey: API_KEY, baseUrl: server.base, logger: () => controller.abort(reason) })
  const err = await c.runPipeline(PIPELINE_PATH, { signal: controller.signal }).catch((e: unknown) => e)
  t.equal(err, reason)
  t.equal(server.seen.length, 1)
})

t.test('a long download is not cut off by the per-attempt time-out', async (t) => {
  const server = await startServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/sql' })
    let parts = 0
    const timer = setInterval(() => {
      res.write(`part ${++parts};\n`)
      if (parts === 5) {
        clearInterval(timer)
        res.end()
      }
    }, 60)
  })
  const { client: c } = client(server.base, { timeout: 100 })
  const download = await c.downloadDataset(DATASET_PATH)
  t.equal((await text(download.body)).split('\n').length, 6, 'all 300 ms of body arrived')
})
