import { randomUUID } from 'node:crypto'
import { Writable } from 'node:stream'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'
import { logLines, startServer, tempDir } from '../example-process.js'
import { rawRequest, type RawRequestParts, type RawResponse } from '../raw-http.js'
import { leaks } from '../secret-scan.js'

// No secret reaches a log line at any level (issue 6, DESIGN.md §2): the
// example server runs at trace, its most verbose level, through requests
// that put keys everywhere a client could put them, in every encoding; then
// its whole output is searched for every secret used. Data-route lines carry
// URL, status, message, time and key prefix (SPEC.md §7.4), and no error body
// echoes a key.

const DATASET = '/api/acme/shop/model/1/dataset/1'
const PIPELINE = '/api/acme/shop/model/1/pipeline/1'

/** Every character percent-encoded. */
function encodeAll (text: string): string {
  return [...Buffer.from(text)].map((b) => '%' + b.toString(16).toUpperCase().padStart(2, '0')).join('')
}

/** The dash and the last prefix character encoded: no plain run of the key is left. */
function encodeDash (key: string): string {
  return `${key.slice(0, 9)}%${key.charCodeAt(9).toString(16).toUpperCase()}%2D${key.slice(11)}`
}

interface Case {
  name: string
  request: RawRequestParts
  status: number
  /** the body's message, for bodies the plugin or the example writes */
  message?: string | RegExp
  /** a data-route call: its log line must carry this status and prefix */
  dataCall?: { keyPrefix?: string }
}

t.test('the example server at trace level: no secret in any log line or error body', async (t) => {
  const adminToken = `admin-${randomUUID()}`
  const server = await startServer(t, { DATA_DIR: tempDir(t), LOG_LEVEL: 'trace', ADMIN_TOKEN: adminToken, EVENTS_ROWS: '50' })
  const port = Number(new URL(server.baseUrl).port)
  const key = server.demoKey as string
  t.match(key, /^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/, 'the demo key was printed')

  // More keys: one inactive and assigned, one regenerated (its old value is dead).
  const management = async (method: string, path: string, body?: unknown): Promise<any> => {
    const res = await fetch(`${server.baseUrl}/api-keys/acme/shop${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body)
    })
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`)
    return res.json()
  }
  const [demo] = await management('GET', '/keys')
  const inactive = await management('POST', '/keys', { purpose: 'inactive', isActive: false })
  const rotated = await management('POST', '/keys', { purpose: 'rotated' })
  await management('PUT', '/endpoints/1/dataset/1', { keyIds: [demo.id, inactive.id, rotated.id] })
  const renewed = await management('POST', `/keys/${rotated.id}/regenerate`)
  const secrets = [key, inactive.key, rotated.key, renewed.key, adminToken]
  const wrong = `${key.slice(0, 11)}${'W'.repeat(21)}`
  // Another system's secret sent as a key by mistake: shorter than a key, so
  // no part of it may be logged as a prefix.
  const password = `pw${randomUUID().slice(0, 8)}`
  secrets.push(password)
  /** The dash percent-encoded twice: one decoding (Fastify's) still leaves no key. */
  const encodeDashTwice = (k: string): string => `${k.slice(0, 10)}%252D${k.slice(11)}`

  let n = 0
  // Each data request carries n=<i>, so that its log line can be found.
  const data = (path: string, query: string): string => `${path}?n=${++n}${query === '' ? '' : '&' + query}`
  const get = (target: string, headers: Array<[string, string]> = []): RawRequestParts => ({ target, headers })
  const bearer = (value: string): [string, string] => ['Authorization', `Bearer ${value}`]
  const prefix = key.slice(0, 10)

  const cases: Case[] = [
    { name: 'key in the query', request: get(data(DATASET, `api_key=${key}&format=json`)), status: 200, dataCall: { keyPrefix: prefix } },
    { name: 'key in the header', request: get(data(DATASET, 'meta=entities'), [bearer(key)]), status: 200, dataCall: { keyPrefix: prefix } },
    { name: 'key in both', request: get(data(DATASET, `api_key=${key}&meta=ddl`), [bearer(key)]), status: 200, dataCall: { keyPrefix: prefix } },
    { name: 'parameter name percent-encoded', request: get(data(DATASET, `api%5Fkey=${key}&meta=entities`)), status: 200, dataCall: { keyPrefix: prefix } },
    { name: 'dash percent-encoded', request: get(data(DATASET, `api_key=${encodeDash(key)}&meta=entities`)), status: 200, dataCall: { keyPrefix: prefix } },
    { name: 'name and value encoded', request: get(data(DATASET, `api%5Fkey=${encodeDash(key)}&meta=entities`)), status: 200, dataCall: { keyPrefix: prefix } },
    { name: 'every character encoded', request: get(data(DATASET, `${encodeAll('api_key')}=${encodeAll(key)}&meta=entities`)), status: 200, dataCall: { keyPrefix: prefix } },
    { name: 'upper-case parameter name', request: get(data(DATASET, `API_KEY=${key}`)), status: 403, message: 'Not authorized', dataCall: {} },
    { name: 'repeated api_key', request: get(data(DATASET, `api_key=${key}&api_key=${key}`)), status: 403, message: 'Unknown API key', dataCall: {} },
    { name: 'inactive key', request: get(data(DATASET, `api_key=${inactive.key}`)), status: 403, message: 'Disabled API key', dataCall: { keyPrefix: inactive.key.slice(0, 10) } },
    { name: 'regenerated key, old value', request: get(data(DATASET, ''), [bearer(rotated.key)]), status: 403, message: 'Unknown API key', dataCall: { keyPrefix: rotated.key.slice(0, 10) } },
    { name: 'wrong secret', request: get(data(DATASET, `api_key=${wrong}`)), status: 403, message: 'Unknown API key', dataCall: { keyPrefix: prefix } },
    { name: 'key as the format', request: get(data(DATASET, `format=${key}`), [bearer(key)]), status: 500, message: /^Unknown download format /, dataCall: { keyPrefix: prefix } },
    { name: 'encoded key as the format', request: get(data(DATASET, `format=${encodeDash(key)}`), [bearer(key)]), status: 500, message: /^Unknown download format /, dataCall: { keyPrefix: prefix } },
    { name: 'key and a letter as the format', request: get(data(DATASET, `format=${key}x`), [bearer(key)]), status: 500, message: /^Unknown download format /, dataCall: { keyPrefix: prefix } },
    { name: 'key with its dash encoded twice as the format', request: get(data(DATASET, `format=${encodeDashTwice(key)}`), [bearer(key)]), status: 500, message: /^Unknown download format /, dataCall: { keyPrefix: prefix } },
    { name: 'another secret as the key', request: get(data(DATASET, `api_key=${password}`)), status: 403, message: 'Unknown API key', dataCall: {} },
    { name: 'key as the entity', request: get(data(DATASET, `entity=${key}&format=json`), [bearer(key)]), status: 400, message: /entity/, dataCall: { keyPrefix: prefix } },
    { name: 'key as the limit', request: get(data(DATASET, `limit=${key}`), [bearer(key)]), status: 400, message: /limit/, dataCall: { keyPrefix: prefix } },
    { name: 'wrong method', request: { method: 'POST', target: data(DATASET, `api_key=${key}`) }, status: 405, message: 'Endpoint or method not allowed', dataCall: {} },
    { name: 'pipeline, key in the Idempotency-Key', request: { method: 'POST', target: data(PIPELINE, `api_key=${key}`), headers: [['Idempotency-Key', `${key} x`]] }, status: 400, message: /Idempotency-Key/, dataCall: { keyPrefix: prefix } },
    { name: 'unknown endpoint', request: get(data('/api/acme/shop/model/1/dataset/9', `api_key=${key}`)), status: 403, message: 'Unknown API Endpoint', dataCall: { keyPrefix: prefix } },
    { name: 'key in a path segment', request: get(data(`/api/acme/${key}/model/1/dataset/1`, `api_key=${key}`)), status: 403, message: 'Unknown API Endpoint', dataCall: { keyPrefix: prefix } },
    { name: 'encoded key in a path segment', request: get(data(`/api/acme/${encodeDash(key)}/model/1/dataset/1`, '')), status: 403, message: 'Not authorized', dataCall: {} },
    { name: 'key and a letter in a path segment', request: get(data(`/api/acme/${inactive.key}x/model/1/dataset/1`, `api_key=${key}`)), status: 403, message: 'Unknown API Endpoint', dataCall: { keyPrefix: prefix } },
    { name: 'keys back to back in a path segment', request: get(data(`/api/acme/${inactive.key}${renewed.key}/model/1/dataset/1`, `api_key=${key}`)), status: 403, message: 'Unknown API Endpoint', dataCall: { keyPrefix: prefix } },
    { name: 'not a sequence', request: get(data('/api/acme/shop/model/1e3/dataset/1', `api_key=${key}`)), status: 404, message: 'Not found', dataCall: {} },
    { name: 'dot segments', request: get(`${DATASET}/../1?api_key=${key}`), status: 404, message: 'Not found' },
    { name: 'key as a job id', request: get(`/api/job/${key}?api_key=${key}`), status: 404, message: 'Invalid job id' },
    { name: 'key and a letter as a job id', request: get(`/api/job/${key}x`), status: 404, message: 'Invalid job id' },
    { name: 'key with its dash encoded twice as a job id', request: get(`/api/job/${encodeDashTwice(key)}`), status: 404, message: 'Invalid job id' },
    { name: 'encoded key as a job id', request: get(`/api/job/${encodeDash(key)}`), status: 404, message: 'Invalid job id' },
    { name: 'no route under /api', request: get(`/api/acme/shop?api_key=${key}`), status: 404, message: 'Not found' },
    { name: 'no route under the management prefix', request: get(`/api-keys/nothing?api_key=${encodeDash(key)}`), status: 404, message: 'Not found' },
    { name: 'wrong method under the management prefix', request: { method: 'PUT', target: `/api-keys/acme/shop/keys?api_key=${key}`, headers: [['Authorization', `Bearer ${adminToken}`]] }, status: 404, message: 'Not found' },
    { name: 'no route at all', request: get(`/nothing/here?api_key=${encodeDash(key)}`), status: 404, message: 'Not found' },
    { name: 'double slash', request: get(`/${DATASET}?api_key=${key}`), status: 404, message: 'Not found' },
    { name: 'absolute-form target', request: get(`http://127.0.0.1:${port}${DATASET}?api_key=${encodeDash(key)}&meta=entities`), status: 200 },
    { name: 'fragment (Node refuses it)', request: get(`${DATASET}?meta=entities#api_key=${encodeDash(key)}`, [bearer(key)]), status: 400 },
    { name: 'malformed percent-encoding', request: get(`${DATASET}/%ZZ?api_key=${key}`), status: 400, message: 'Malformed URL' },
    { name: 'path parameter over maxParamLength', request: get(`/api/acme/${'s'.repeat(150)}/model/1/dataset/1?api_key=${key}`), status: 414, message: 'URI Too Long' },
    { name: 'NUL byte in the URL', request: get(`${DATASET}?api_key=${key}\0`), status: 400 },
    { name: 'NUL byte in the header', request: get(`${DATASET}?meta=entities`, [['Authorization', `Bearer ${key}\0`]]), status: 400 },
    { name: 'raw non-ASCII bytes in the URL', request: get(`${DATASET}?api_key=${key}&x=\xe4`), status: 400 },
    { name: 'header over 16 KB', request: get(`${DATASET}?api_key=${key}`, [['X-Padding', 'p'.repeat(20_000)]]), status: 431 },
    { name: 'URL over 16 KB', request: get(`${DATASET}?api_key=${key}&pad=${'p'.repeat(20_000)}`), status: 431 },
    { name: 'key in the Host header', request: get(`${DATASET}?meta=entities`, [['Host', key], bearer(key)]), status: 200 },
    { name: 'key and a letter in the Host header', request: get(`${DATASET}?meta=entities`, [['Host', `${inactive.key}x`], bearer(key)]), status: 200 },
    { name: 'key in the Host header of a pipeline call', request: { method: 'POST', target: data(PIPELINE, `api_key=${key}`), headers: [['Host', `${renewed.key}x`]] }, status: 200, dataCall: { keyPrefix: prefix } },
    { name: 'key in X-Forwarded-For', request: get(`${DATASET}?meta=entities`, [['X-Forwarded-For', key], bearer(key)]), status: 200 },
    { name: 'key as Basic credentials', request: get(`${DATASET}?meta=entities`, [['Authorization', `Basic ${Buffer.from(`x:${key}`).toString('base64')}`]]), status: 403, message: 'Not authorized' },
    { name: 'data key on management', request: get('/api-keys/acme/shop/keys', [bearer(key)]), status: 403, message: 'Not authorized' },
    { name: 'admin token misspelt', request: get('/api-keys/acme/shop/keys', [bearer(adminToken + 'x')]), status: 403, message: 'Not authorized' },
    { name: 'key in a broken JSON body', request: { method: 'POST', target: '/api-keys/acme/shop/keys', headers: [['Authorization', `Bearer ${adminToken}`], ['Content-Type', 'application/json']], body: `{"purpose":${key}` }, status: 400 },
    { name: 'key in a body without permission', request: { method: 'POST', target: '/api-keys/acme/shop/keys', headers: [['Content-Type', 'application/json']], body: `{"purpose":"${key}"}` }, status: 403, message: 'Not authorized' }
  ]

  const answers: RawResponse[] = []
  for (const c of cases) {
    const res = await rawRequest(port, c.request)
    answers.push(res)
    t.equal(res.status, c.status, `${c.name}: ${c.status}`)
    if (c.message !== undefined) {
      t.match(JSON.parse(res.body), { message: c.message }, `${c.name}: message`)
    }
  }
  t.same(leaks(answers.map((a) => a.body), secrets), [], 'no response body carries a secret')
  t.same(answers.filter((a) => /\n\s+at /.test(a.body)).map((a) => a.body), [], 'no response body carries a stack trace')

  const { code, stdout, stderr } = await server.stop('SIGTERM')
  t.equal(code, 0)
  const lines = logLines(stdout)
  t.ok(lines.some((l) => l.level === 10), 'trace lines were written')
  const texts = [...stdout.split('\n'), ...stderr.split('\n')].filter((l) => l !== '')
  const banner = texts.filter((l) => !l.startsWith('{'))
  t.same(leaks(texts.filter((l) => !banner.includes(l)), secrets), [], 'no log line carries a secret, in any encoding')
  t.same(leaks(stderr.split('\n'), secrets), [], 'nor does stderr')

  // SPEC.md §7.4: each data call is logged with URL, status, message, time and key prefix.
  const calls = lines.filter((l) => l.msg === 'data endpoint call')
  cases.forEach((c, i) => {
    if (c.dataCall === undefined) return
    const tag = /[?&]n=(\d+)/.exec(c.request.target)?.[1]
    const line = calls.find((l) => new URLSearchParams(String(l.url).split('?')[1]).get('n') === tag)
    if (line === undefined) {
      t.fail(`${c.name}: no data endpoint call line`)
      return
    }
    t.match(line, { statusCode: answers[i].status, time: Number, url: String }, `${c.name}: status and time logged`)
    t.equal(line.keyPrefix, c.dataCall.keyPrefix, `${c.name}: key prefix ${c.dataCall.keyPrefix ?? 'absent'}`)
    if (answers[i].status !== 200) t.equal(line.message, JSON.parse(answers[i].body).message, `${c.name}: message logged`)
  })
})

t.test('in a host with default logger settings, the plugin\'s own prefixes log no key', async (t) => {
  const lines: string[] = []
  const stream = new Writable({ write (chunk, _encoding, done) { lines.push(...String(chunk).split('\n').filter(Boolean)); done() } })
  const { app } = await buildApp(t, {}, { logger: { level: 'trace', stream } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as AddressInfo).port
  const targets = [
    `${DATASET_URL}?api%5Fkey=${encodeDash(k.key)}&meta=entities`,
    `${DATASET_URL}?api_key=${encodeAll(k.key)}&meta=entities`,
    `/api/acme/${encodeDash(k.key)}/model/1/dataset/1`,
    `/api/job/${encodeDash(k.key)}`,
    `/api/nothing?api_key=${encodeDash(k.key)}`,
    `/api-keys/nothing?api_key=${k.key}`,
    `/api-keys/acme/shop/nothing?x=${encodeDash(k.key)}`
  ]
  const statuses = []
  for (const target of targets) statuses.push((await rawRequest(port, { target, headers: [['x-permissions', ADMIN['x-permissions']]] })).status)
  t.same(statuses, [200, 200, 403, 404, 404, 404, 404])
  t.same(leaks(lines, [k.key]), [], 'no line under /api or /api-keys carries the key')
})
