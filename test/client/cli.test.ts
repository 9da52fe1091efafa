import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test as T } from 'tap'
import type { JobInfo } from '../../lib/client/index.js'
import { DATASET_URL, PIPELINE_URL, assignKeys, buildApp, createKey } from '../helper.js'
import { duckdbQuery, readArrowStream } from '../columnar-readers.js'
import { API_KEY, DATASET_PATH, JOB_ID, KEY_PREFIX, PIPELINE_PATH, sendGzipped, sendJson, startServer } from '../client-server.js'

// The `data-endpoints` command, run as a process from its TypeScript source
// against a local server; every run checks that the key shows nowhere.

interface Run {
  code: number | null
  stdout: string
  stderr: string
}


async function cli (t: T, args: string[], env: Record<string, string | undefined> = { DATA_ENDPOINTS_API_KEY: API_KEY }): Promise<Run> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'lib/cli.ts', ...args], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve))
  const key = env.DATA_ENDPOINTS_API_KEY
  if (key !== undefined && key.length > 10) {
    t.notMatch(stdout + stderr, key.slice(10), 'no part of the key secret in the output')
  }
  return { code, stdout, stderr }
}

async function plugin (t: T): Promise<{ base: string, key: string, jobs: Awaited<ReturnType<typeof buildApp>>['jobs'] }> {
  const { app, jobs } = await buildApp(t)
  const { id, key } = await createKey(app)
  await assignKeys(app, 'dataset', [id])
  await assignKeys(app, 'pipeline', [id])
  return { base: await app.listen({ port: 0, host: '127.0.0.1' }), key, jobs }
}

function job (status: JobInfo['status'], extra: Partial<JobInfo> = {}): JobInfo {
  return { job_id: JOB_ID, type: 'pipeline', status, created_at: '2024-05-01T10:00:00.000Z', updated_at: '2024-05-01T10:00:01.000Z', ...extra }
}

t.test('--help prints the usage and exits 0', async (t) => {
  const run = await cli(t, ['--help'])
  t.equal(run.code, 0)
  t.match(run.stdout, /Usage: data-endpoints <command>/)
  t.match(run.stdout, /get <endpoint-url>/)
  t.match(run.stdout, /DATA_ENDPOINTS_API_KEY/)
  const none = await cli(t, [])
  t.equal(none.code, 2, 'no command is a usage error')
})

t.test('get over a key\'s daily quota: reported at once, with when to try again', async (t) => {
  const { app } = await buildApp(t)
  const created = await app.inject({ method: 'POST', url: '/api-keys/acme/shop/keys', headers: { 'x-permissions': 'ManageAPIKeys' }, payload: { purpose: 'quota', limits: { bytesPerDay: 1 } } })
  const { id, key } = created.json() as { id: string, key: string }
  await assignKeys(app, 'dataset', [id])
  const base = await app.listen({ port: 0, host: '127.0.0.1' })
  const env = { DATA_ENDPOINTS_API_KEY: key }
  t.equal((await cli(t, ['get', `${base}${DATASET_URL}`, '--format', 'json'], env)).code, 0, 'the first download starts below the quota')
  const started = Date.now()
  const run = await cli(t, ['get', `${base}${DATASET_URL}`, '--format', 'json'], env)
  t.equal(run.code, 1)
  const match = /Daily download quota exceeded \(HTTP 429\); retry after (\S+) \(in (\d+) s\)/.exec(run.stderr)
  t.ok(match, run.stderr)
  const midnight = Math.ceil(started / 86_400_000) * 86_400_000
  t.ok(Math.abs(Date.parse(match?.[1] ?? '') - midnight) <= 2000, 'the time: the next UTC day')
})

t.test('get downloads to stdout with the key from DATA_ENDPOINTS_API_KEY', async (t) => {
  const { base, key } = await plugin(t)
  const run = await cli(t, ['get', `${base}${DATASET_URL}`, '--format', 'json', '--entity', 'customers', '--limit', '1'], { DATA_ENDPOINTS_API_KEY: key })
  t.equal(run.code, 0, run.stderr)
  const body = JSON.parse(run.stdout) as Record<string, unknown[]>
  t.same(Object.keys(body), ['customers'])
  t.equal(body.customers.length, 1)
  t.equal(run.stderr, '', 'nothing on stderr when all went well and stderr is no terminal')
})

t.test('get --output writes the file, --progress shows the progress line', async (t) => {
  const { base, key } = await plugin(t)
  const dir = mkdtempSync(join(tmpdir(), 'fde-cli-'))
  const file = join(dir, 'sales.json')
  const run = await cli(t, ['get', `${base}${DATASET_URL}`, '--format', 'json', '--output', file, '--progress'], { DATA_ENDPOINTS_API_KEY: key })
  t.equal(run.code, 0, run.stderr)
  t.equal(run.stdout, '')
  t.same(Object.keys(JSON.parse(readFileSync(file, 'utf8')) as object), ['customers', 'orders'])
  t.same(readdirSync(dir), ['sales.json'], 'no .part file left')
  // A small download comes with its Content-Length: the line shows the whole.
  t.match(run.stderr, /^received (\d+) B of \1 B \(100%\) at \d+(\.\d)? (B|KiB|MiB)\/s\n$/m)
})

t.test('get --format parquet and arrow: the files DuckDB and flechette read, the progress in bytes', async (t) => {
  const { base, key } = await plugin(t)
  const dir = mkdtempSync(join(tmpdir(), 'fde-cli-'))
  const file = join(dir, 'orders.parquet')
  const run = await cli(t, ['get', `${base}${DATASET_URL}`, '--format', 'parquet', '--entity', 'orders', '--output', file, '--progress'], { DATA_ENDPOINTS_API_KEY: key })
  t.equal(run.code, 0, run.stderr)
  t.match(run.stderr, /^received \d+(\.\d)? (B|KiB) (of \d+(\.\d)? (B|KiB) \(100%\) )?at /m, 'the progress line counts bytes')
  t.same(await duckdbQuery(`SELECT id, CAST(amount AS VARCHAR) FROM '${file}' ORDER BY id`), [[10, '19.99'], [11, '0.10']])
  const arrow = join(dir, 'orders.arrows')
  const arrowRun = await cli(t, ['get', `${base}${DATASET_URL}`, '--format', 'arrow', '--entity', 'orders', '--output', arrow], { DATA_ENDPOINTS_API_KEY: key })
  t.equal(arrowRun.code, 0, arrowRun.stderr)
  t.equal(readArrowStream(readFileSync(arrow)).numRows, 2)
  const missing = await cli(t, ['get', `${base}${DATASET_URL}`, '--format', 'csv'], { DATA_ENDPOINTS_API_KEY: key })
  t.equal(missing.code, 1)
  t.match(missing.stderr, /csv holds one entity; name one with entity=/)
})

t.test('--progress on a streamed download of unknown length shows the bytes so far', async (t) => {
  const server = await startServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/zip' }) // chunked: no Content-Length
    res.write('a'.repeat(1000))
    res.end('b'.repeat(24))
  })
  const run = await cli(t, ['get', `${server.base}${DATASET_PATH}`, '--format', 'csv-zip', '--progress'])
  t.equal(run.code, 0, run.stderr)
  t.equal(run.stdout.length, 1024)
  t.match(run.stderr, /^received 1.0 KiB at \d+(\.\d)? (B|KiB|MiB)\/s\n$/m)
})

t.test('the query options reach the server', async (t) => {
  const server = await startServer(t, (_req, res) => res.writeHead(200, { 'content-type': 'application/zip' }).end('zip'))
  const run = await cli(t, ['get', `${server.base}${DATASET_PATH}`, '--format', 'csv-zip', '--entity', 'orders', '--limit', '10', '--archive-type', 'tar', '--meta', 'ddl'])
  t.equal(run.code, 0, run.stderr)
  t.equal(run.stdout, 'zip')
  const url = new URL(server.seen[0].url, server.base)
  t.same(Object.fromEntries(url.searchParams), { format: 'csv-zip', entity: 'orders', meta: 'ddl', archiveType: 'tar', limit: '10' })
  t.equal(server.seen[0].headers.authorization, `Bearer ${API_KEY}`)
})

t.test('a server error prints the server\'s message and exits 1, without retrying a 403', async (t) => {
  const { base, key } = await plugin(t)
  const wrong = `${key.slice(0, 10)}-${'z'.repeat(21)}`
  const run = await cli(t, ['get', `${base}${DATASET_URL}`], { DATA_ENDPOINTS_API_KEY: wrong })
  t.equal(run.code, 1)
  t.equal(run.stdout, '')
  t.equal(run.stderr, 'data-endpoints: Unknown API key (HTTP 403)\n')

  const notFound = await cli(t, ['get', `${base}/api/acme/shop/model/1/dataset/0`], { DATA_ENDPOINTS_API_KEY: key })
  t.equal(notFound.code, 1)
  t.equal(notFound.stderr, 'data-endpoints: Not found (HTTP 404)\n')
})

t.test('a 500 is retried after 1 s and logged with the key prefix, never the key', async (t) => {
  const server = await startServer(t, (_req, res, n) => n === 1
    ? sendJson(res, 500, { message: 'database is down' })
    : res.writeHead(200, { 'content-type': 'application/sql' }).end('BEGIN;COMMIT;'))
  const run = await cli(t, ['get', `${server.base}${DATASET_PATH}`])
  t.equal(run.code, 0, run.stderr)
  t.equal(run.stdout, 'BEGIN;COMMIT;')
  t.equal(server.seen.length, 2)
  const gap = server.seen[1].at - server.seen[0].at
  t.ok(gap >= 990 && gap < 2000, `the retry came after 1 s (${gap} ms)`)
  const lines = run.stderr.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>)
  t.equal(lines.length, 1, 'only the retried attempt is logged without --verbose')
  t.match(lines[0], { url: `${server.base}${DATASET_PATH}`, status: 500, message: 'database is down', keyPrefix: KEY_PREFIX, retryInMs: 1000 })
  t.match(lines[0].time, /^\d{4}-\d\d-\d\dT/)
})

t.test('--verbose logs every attempt', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 200, { job_id: JOB_ID, job_url: `${server.base}/api/job/${JOB_ID}` }))
  const run = await cli(t, ['run', `${server.base}${PIPELINE_PATH}`, '--verbose'])
  t.equal(run.code, 0, run.stderr)
  t.match(JSON.parse(run.stderr), { method: 'POST', status: 200, keyPrefix: KEY_PREFIX, attempt: 1 })
})

t.test('the key is never taken from an argument or the URL', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 200, {}))
  for (const args of [
    ['get', `${server.base}${DATASET_PATH}`, `--api-key=${API_KEY}`],
    ['get', `${server.base}${DATASET_PATH}`, '--key', API_KEY]
  ]) {
    const run = await cli(t, args)
    t.equal(run.code, 2)
    t.match(run.stderr, /Unknown option/)
    t.notMatch(run.stderr, API_KEY.slice(10))
  }
  const inUrl = await cli(t, ['get', `${server.base}${DATASET_PATH}?api_key=${API_KEY}`])
  t.equal(inUrl.code, 2)
  t.match(inUrl.stderr, /The API key must not be in the URL \(api_key=\)/)
  t.match(inUrl.stderr, /DATA_ENDPOINTS_API_KEY/)
  t.notMatch(inUrl.stderr, API_KEY.slice(10))

  const extra = await cli(t, ['get', `${server.base}${DATASET_PATH}`, API_KEY])
  t.equal(extra.code, 2)
  t.notMatch(extra.stderr, API_KEY.slice(10), 'a stray argument is not echoed')
  t.equal(server.seen.length, 0, 'nothing was sent')
})

t.test('without DATA_ENDPOINTS_API_KEY, get and run stop before sending', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 200, {}))
  for (const command of ['get', 'run']) {
    const run = await cli(t, [command, `${server.base}${DATASET_PATH}`], {})
    t.equal(run.code, 2)
    t.match(run.stderr, 'set DATA_ENDPOINTS_API_KEY to the API key')
  }
  t.equal(server.seen.length, 0)
})

t.test('bad options are usage errors', async (t) => {
  const cases: Array<[string[], RegExp]> = [
    [['get', 'http://127.0.0.1:1/x', '--limit', 'ten'], /--limit must be a non-negative integer/],
    [['get', 'http://127.0.0.1:1/x', '--format', 'xml'], /format must be one of/],
    [['get', 'http://127.0.0.1:1/x', '--wait'], /Unknown option '--wait'/],
    [['get'], /missing <endpoint-url>/],
    [['run', 'http://127.0.0.1:1/x', '--interval', '1'], /--interval and --wait-timeout go with --wait/],
    [['run', 'http://127.0.0.1:1/x', '--wait', '--interval=-1'], /--interval must be a positive number of seconds/],
    [['fetch', 'http://127.0.0.1:1/x'], /unknown command "fetch"/],
    [['get', 'https://data.example.test/x', '--timeout', '0'], /--timeout must be a positive number of seconds/]
  ]
  const runs = await Promise.all(cases.map(([args]) => cli(t, args)))
  cases.forEach(([args, message], i) => {
    t.equal(runs[i].code, 2, args.join(' '))
    t.match(runs[i].stderr, message)
  })
})

t.test('the key is not sent over plain HTTP to a remote host unless --allow-http', async (t) => {
  const run = await cli(t, ['get', 'http://data.example.test/api/a/b/model/1/dataset/1'])
  t.equal(run.code, 2)
  t.match(run.stderr, /Refusing to send the API key over plain HTTP to data\.example\.test/)
})

t.test('a download that breaks mid-body exits 1 and leaves no file', async (t) => {
  const server = await startServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/sql' })
    res.write('BEGIN;\n')
    setTimeout(() => res.socket?.destroy(), 50)
  })
  const dir = mkdtempSync(join(tmpdir(), 'fde-cli-'))
  const file = join(dir, 'out.sql')
  const run = await cli(t, ['get', `${server.base}${DATASET_PATH}`, '--output', file])
  t.equal(run.code, 1)
  t.equal(run.stderr, 'data-endpoints: Download cut off after 7 bytes: other side closed\n')
  t.notOk(existsSync(file))
  t.same(readdirSync(dir), [], 'the partial file is removed')
  t.equal(server.seen.length, 1, 'not retried once bytes have come')
})

t.test('a key placed in --output or in the host is masked in the messages', async (t) => {
  const secret = new RegExp(API_KEY.slice(10), 'i') // the URL parser lower-cases the host
  const server = await startServer(t, (_req, res) => res.writeHead(200, { 'content-type': 'application/sql' }).end('BEGIN;'))
  const badPath = await cli(t, ['get', `${server.base}${DATASET_PATH}`, '--output', `/nonexistent/${API_KEY}`])
  t.equal(badPath.code, 1)
  t.equal(badPath.stderr, `data-endpoints: ENOENT: no such file or directory, open '/nonexistent/${KEY_PREFIX}-[redacted].part' (ENOENT)\n`)

  const inHost = await cli(t, ['get', `http://${API_KEY}.example.invalid${DATASET_PATH}`])
  t.equal(inHost.code, 2)
  t.match(inHost.stderr, /Refusing to send the API key over plain HTTP to [a-z]{10}-\[redacted\]\.example\.invalid/)
  for (const run of [badPath, inHost]) t.notMatch(run.stderr, secret)
})

t.test('--progress on a compressed download shows the bytes received, not a percentage of the compressed size', async (t) => {
  const data = 'INSERT INTO t VALUES (1);\n'.repeat(4000)
  const server = await startServer(t, sendGzipped(data))
  const run = await cli(t, ['get', `${server.base}${DATASET_PATH}`, '--progress'])
  t.equal(run.code, 0, run.stderr)
  t.equal(run.stdout, data)
  t.match(run.stderr, /^received 101\.6 KiB at \d+(\.\d)? (B|KiB|MiB)\/s\n$/m)
  t.notMatch(run.stderr, /%/)
})

t.test('--no-retry sends a request once', async (t) => {
  const server = await startServer(t, (_req, res) => sendJson(res, 500, { message: 'database is down' }))
  const run = await cli(t, ['run', `${server.base}${PIPELINE_PATH}`, '--no-retry'])
  t.equal(run.code, 1)
  t.equal(run.stderr, 'data-endpoints: database is down (HTTP 500)\n', 'no retry logged')
  t.equal(server.seen.length, 1)
  const help = await cli(t, ['--help'])
  t.match(help.stdout, /--no-retry +/)
})

t.test('run prints the job reference', async (t) => {
  const { base, key, jobs } = await plugin(t)
  const run = await cli(t, ['run', `${base}${PIPELINE_URL}`], { DATA_ENDPOINTS_API_KEY: key })
  t.equal(run.code, 0, run.stderr)
  const ref = JSON.parse(run.stdout) as { job_id: string, job_url: string }
  t.equal(ref.job_url, `${base}/api/job/${ref.job_id}`)
  t.ok(jobs.jobs.has(ref.job_id))
  t.equal(jobs.starts, 1)
})

t.test('run --wait polls until the job ends and prints it', async (t) => {
  const server = await startServer(t, (req, res) => {
    if (req.method === 'POST') return sendJson(res, 200, { job_id: JOB_ID, job_url: `${server.base}/api/job/${JOB_ID}` })
    const polls = server.seen.filter((r) => r.method === 'GET').length
    sendJson(res, 200, polls < 3 ? job('running') : job('succeeded'))
  })
  const run = await cli(t, ['run', `${server.base}${PIPELINE_PATH}`, '--wait', '--interval', '0.05'])
  t.equal(run.code, 0, run.stderr)
  t.same(JSON.parse(run.stdout), job('succeeded'))
  t.match(run.stderr, `job ${JOB_ID} started; waiting for it to end`)
  t.equal(server.seen.filter((r) => r.method === 'GET').length, 3)
  t.notOk(server.seen.some((r) => r.method === 'GET' && r.headers.authorization !== undefined), 'the key is not sent to the job URL')
})

t.test('run --wait exits 1 when the job failed, with the job printed', async (t) => {
  const server = await startServer(t, (req, res) => req.method === 'POST'
    ? sendJson(res, 200, { job_id: JOB_ID, job_url: `${server.base}/api/job/${JOB_ID}` })
    : sendJson(res, 200, job('failed', { error: 'source table missing' })))
  const run = await cli(t, ['run', `${server.base}${PIPELINE_PATH}`, '--wait'])
  t.equal(run.code, 1)
  t.same(JSON.parse(run.stdout), job('failed', { error: 'source table missing' }))
})

t.test('run --wait gives up after --wait-timeout', async (t) => {
  const server = await startServer(t, (req, res) => req.method === 'POST'
    ? sendJson(res, 200, { job_id: JOB_ID, job_url: `${server.base}/api/job/${JOB_ID}` })
    : sendJson(res, 200, job('running')))
  const run = await cli(t, ['run', `${server.base}${PIPELINE_PATH}`, '--wait', '--interval', '0.05', '--wait-timeout', '0.2'])
  t.equal(run.code, 1)
  t.same(JSON.parse(run.stdout), job('running'), 'the last status is printed')
  t.match(run.stderr, `Job ${JOB_ID} is still running after 200 ms`)
})

t.test('job prints the job; a missing job prints the server\'s message', async (t) => {
  const { base, jobs } = await plugin(t)
  const record = jobs.addJob({ type: 'pipeline', status: 'failed', error: 'boom' })
  const run = await cli(t, ['job', `${base}/api/job/${record.id}`], {})
  t.equal(run.code, 0, run.stderr)
  t.match(JSON.parse(run.stdout), { job_id: record.id, type: 'pipeline', status: 'failed', error: 'boom' })

  const missing = await cli(t, ['job', `${base}/api/job/${JOB_ID}`], {})
  t.equal(missing.code, 1)
  t.equal(missing.stderr, 'data-endpoints: Job is not available or has been deleted (HTTP 404)\n')
})

t.test('Ctrl-C during a download exits 130 and removes the partial file', async (t) => {
  const server = await startServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/sql' })
    const timer = setInterval(() => res.write('INSERT INTO t VALUES (1);\n'), 20)
    res.on('close', () => clearInterval(timer))
  })
  const dir = mkdtempSync(join(tmpdir(), 'fde-cli-'))
  const child = spawn(process.execPath, ['--import', 'tsx', 'lib/cli.ts', 'get', `${server.base}${DATASET_PATH}`, '--output', join(dir, 'out.sql')], {
    env: { PATH: process.env.PATH, DATA_ENDPOINTS_API_KEY: API_KEY },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  // Interrupt once the partial file exists, so the cleanup is what removes it.
  while (!existsSync(join(dir, 'out.sql.part'))) await new Promise((resolve) => setTimeout(resolve, 20))
  child.kill('SIGINT')
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve))
  t.equal(code, 130)
  t.equal(stderr, 'data-endpoints: interrupted\n')
  t.same(readdirSync(dir), [])
})
