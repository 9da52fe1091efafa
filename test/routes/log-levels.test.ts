import { Writable } from 'node:stream'
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyServerOptions } from 'fastify'
import t, { type Test } from 'tap'
import * as apiKey from '../../lib/keys/api-key.js'
import dataEndpoints, { redactingRequestSerializer, SqliteStorage, type DataEndpointsOptions } from '../../lib/index.js'
import { MemoryDatasets, MemoryJobs, PIPELINE_REF, SALES_REF, salesDataset } from '../fixtures.js'
import { ADMIN, assignKeys, createKey, DATASET_URL, PIPELINE_URL } from '../helper.js'
import { leaks } from '../secret-scan.js'

// Logging costs nothing when nothing is logged: the data-route call line (its
// redacted URL) is made only when the logger's level writes info lines, asked
// at each request, so a level changed at run time is obeyed; and the request
// loggers' redacting `req` serializer is set once, not per request, yet
// applies to every line that is written, at any level.

interface Logged {
  app: FastifyInstance
  lines: Array<Record<string, any>>
  raw: string[]
  /** calls of redactKeys on a URL: the work that redacting a logged URL costs */
  urlRedactions: () => number
  /** children of the host's logger made with serializers of their own */
  childrenWithSerializers: () => number
}

/** A log stream that keeps each line written. */
function lineCollector (): { raw: string[], stream: Writable } {
  const raw: string[] = []
  return { raw, stream: new Writable({ write (chunk, _encoding, done) { raw.push(...String(chunk).split('\n').filter(Boolean)); done() } }) }
}

/** The plugin's options in these tests: the sales dataset and one pipeline, storage in memory. */
function pluginOptions (): DataEndpointsOptions {
  return {
    storage: new SqliteStorage({ filename: ':memory:' }),
    datasets: new MemoryDatasets().add(SALES_REF, salesDataset()),
    pipelines: new MemoryJobs().addPipeline(PIPELINE_REF, 'refresh'),
    jobs: new MemoryJobs(),
    bcryptCost: 4,
    getPermissions: (request) => String(request.headers['x-permissions'] ?? '').split(',').filter(Boolean)
  }
}

/** `hostRedacts`: the host's logger gets the plugin's redacting `req` serializer (of the same module copy the app loads). */
async function loggedApp (t: Test, logger: FastifyServerOptions['logger'], host?: (app: FastifyInstance) => void, hostRedacts = false): Promise<Logged> {
  let urlRedactions = 0
  // The plugin with redactKeys watched: redactUrl (the call line's URL) and
  // the redacting serializer both end in it. (The mock is named by the
  // source file tsx loads.)
  const { default: dataEndpoints, redactingRequestSerializer } = await t.mockImport<typeof import('../../lib/index.js')>('../../lib/index.js', {
    '../../lib/keys/api-key.ts': {
      ...apiKey,
      redactKeys: (text: string) => {
        if (text.startsWith('/api/')) urlRedactions++
        return apiKey.redactKeys(text)
      }
    }
  })
  const { raw, stream } = lineCollector()
  const serializers = hostRedacts ? { req: redactingRequestSerializer as unknown as (req: unknown) => Record<string, unknown> } : undefined
  const app = Fastify({ logger: typeof logger === 'object' ? { ...logger, ...(serializers && { serializers }), stream } : logger })
  let childrenWithSerializers = 0
  const root = app.log
  const child = root.child
  root.child = function (this: FastifyBaseLogger, bindings, options) {
    if (this === root && options?.serializers !== undefined) childrenWithSerializers++
    return child.call(this, bindings, options)
  }
  host?.(app)
  await app.register(dataEndpoints, pluginOptions())
  await app.ready()
  t.teardown(() => app.close())
  return {
    app,
    raw,
    get lines () { return raw.map((l) => JSON.parse(l)) },
    urlRedactions: () => urlRedactions,
    childrenWithSerializers: () => childrenWithSerializers
  }
}

/** The requests a data route mostly sees: downloads, meta, a refusal, a pipeline run. */
async function traffic (app: FastifyInstance, key: string): Promise<number[]> {
  const statuses = []
  for (const url of [`${DATASET_URL}?format=json&api_key=${key}`, `${DATASET_URL}?meta=entities&api_key=${key}`,
    `${DATASET_URL}?format=csv-zip&api_key=${key}`, `${DATASET_URL}?api_key=${key.slice(0, 11)}${'z'.repeat(21)}`]) {
    statuses.push((await app.inject({ url })).statusCode)
  }
  statuses.push((await app.inject({ method: 'POST', url: PIPELINE_URL, headers: { authorization: `Bearer ${key}` } })).statusCode)
  return statuses
}

t.test('at info, each call line is written with its fields', async (t) => {
  const log = await loggedApp(t, { level: 'info' })
  const k = await createKey(log.app)
  await assignKeys(log.app, 'dataset', [k.id])
  await assignKeys(log.app, 'pipeline', [k.id])
  t.same(await traffic(log.app, k.key), [200, 200, 200, 403, 200])
  const calls = log.lines.filter((l) => l.msg === 'data endpoint call')
  t.equal(calls.length, 5, 'one line per call')
  t.match(calls[0], { level: 30, url: `${DATASET_URL}?format=json&api_key=[redacted]`, statusCode: 200, keyPrefix: k.prefix, time: Number })
  t.match(calls[1], { url: `${DATASET_URL}?meta=entities&api_key=[redacted]`, statusCode: 200 })
  t.match(calls[3], { statusCode: 403, message: 'Unknown API key', keyPrefix: k.prefix })
  t.match(calls[4], { url: PIPELINE_URL, statusCode: 200, keyPrefix: k.prefix })
  t.ok(log.urlRedactions() >= 5, 'the URLs were redacted')
  t.ok(log.lines.some((l) => l.msg === 'incoming request' && l.req.url === `${DATASET_URL}?format=json&api_key=[redacted]`),
    'Fastify\'s request line has the URL redacted')
  t.same(leaks(log.raw, [k.key]), [])
})

t.test('at warn, no call line and no redaction work; a level changed at run time is obeyed at once', async (t) => {
  const log = await loggedApp(t, { level: 'warn' })
  const k = await createKey(log.app)
  await assignKeys(log.app, 'dataset', [k.id])
  await assignKeys(log.app, 'pipeline', [k.id])
  t.same(await traffic(log.app, k.key), [200, 200, 200, 403, 200])
  t.same(log.raw, [], 'nothing is written')
  t.equal(log.urlRedactions(), 0, 'no URL was redacted')
  t.equal(log.childrenWithSerializers(), 1, 'the redacting serializer was set once, not per request')

  log.app.log.level = 'info'
  await log.app.inject({ url: `${DATASET_URL}?format=json&api_key=${k.key}` })
  t.match(log.lines.filter((l) => l.msg === 'data endpoint call'), [{ url: `${DATASET_URL}?format=json&api_key=[redacted]`, statusCode: 200, keyPrefix: k.prefix }],
    'raised to info: the call line is written')
  t.ok(log.lines.some((l) => l.msg === 'incoming request' && l.req.url === `${DATASET_URL}?format=json&api_key=[redacted]`),
    'and Fastify\'s request line, redacted')

  log.app.log.level = 'warn'
  const written = log.raw.length
  const redactions = log.urlRedactions()
  t.same(await traffic(log.app, k.key), [200, 200, 200, 403, 200])
  t.equal(log.raw.length, written, 'back at warn: nothing more is written')
  t.equal(log.urlRedactions(), redactions, 'and no URL is redacted')
  t.equal(log.childrenWithSerializers(), 1, 'and still once: the level change needed no new one')
  t.same(leaks(log.raw, [k.key]), [])
})

t.test('at warn, a line that carries the request at error level is still redacted', async (t) => {
  // Fastify itself logs `req` at error level when a 5xx reaches its default
  // error handler; a host's hook may do the same on any route.
  const log = await loggedApp(t, { level: 'warn' }, (app) => {
    app.addHook('onResponse', async (request) => { request.log.error({ req: request }, 'host audit') })
  })
  const k = await createKey(log.app)
  await assignKeys(log.app, 'dataset', [k.id])
  const res = await log.app.inject({ url: `${DATASET_URL}?format=json&api_key=${k.key}` })
  t.equal(res.statusCode, 200)
  const audit = log.lines.filter((l) => l.msg === 'host audit' && l.req.url.startsWith(DATASET_URL))
  t.match(audit, [{ level: 50, req: { method: 'GET', url: `${DATASET_URL}?format=json&api_key=[redacted]` } }], 'the request is logged, redacted')
  t.notOk('headers' in audit[0].req, 'by the redacting serializer: no headers')
  t.equal(log.lines.filter((l) => l.msg === 'data endpoint call').length, 0, 'and no info line')
  t.same(leaks(log.raw, [k.key]), [])
})

t.test('a logger that starts silent and is raised at run time logs redacted lines', async (t) => {
  const log = await loggedApp(t, { level: 'silent' })
  const k = await createKey(log.app)
  await assignKeys(log.app, 'dataset', [k.id])
  t.equal((await log.app.inject({ url: `${DATASET_URL}?format=json&api_key=${k.key}` })).statusCode, 200)
  t.same(log.raw, [], 'silent: nothing')
  t.equal(log.urlRedactions(), 0)
  log.app.log.level = 'trace'
  t.equal((await log.app.inject({ url: `${DATASET_URL}?format=json&api_key=${k.key}` })).statusCode, 200)
  t.match(log.lines.find((l) => l.msg === 'incoming request'), { req: { url: `${DATASET_URL}?format=json&api_key=[redacted]` } })
  t.match(log.lines.find((l) => l.msg === 'data endpoint call'), { url: `${DATASET_URL}?format=json&api_key=[redacted]`, keyPrefix: k.prefix })
  t.same(leaks(log.raw, [k.key]), [], 'no line carries the key')
})

t.test('management routes too: one redacting parent, redacted lines', async (t) => {
  const log = await loggedApp(t, { level: 'info' })
  const k = await createKey(log.app)
  for (let i = 0; i < 5; i++) await log.app.inject({ url: `/api-keys/acme/shop/keys?api_key=${k.key}`, headers: ADMIN })
  t.equal(log.childrenWithSerializers(), 1, 'one redacting parent for both scopes, not one per request')
  t.ok(log.lines.some((l) => l.msg === 'incoming request' && l.req.url === '/api-keys/acme/shop/keys?api_key=[redacted]'))
  t.same(leaks(log.raw, [k.key]), [])
})

// A host whose logger has the redacting serializer already (docs/security.md,
// "Logger"; the example's has) needs no factory of ours: every request
// logger inherits the serializer, and the plugin makes no child of its own.

t.test('a host logger with the redacting serializer: no factory of ours, every line redacted', async (t) => {
  const log = await loggedApp(t, { level: 'info' }, (app) => {
    app.addHook('onResponse', async (request) => { request.log.error({ req: request }, 'host audit') })
  }, true)
  const k = await createKey(log.app)
  await assignKeys(log.app, 'dataset', [k.id])
  await assignKeys(log.app, 'pipeline', [k.id])
  t.same(await traffic(log.app, k.key), [200, 200, 200, 403, 200])
  await log.app.inject({ url: `/api-keys/acme/shop/keys?api_key=${k.key}`, headers: ADMIN })
  await log.app.inject({ url: `/api/nowhere?api_key=${k.key}` })
  t.equal(log.childrenWithSerializers(), 0, 'no redacting parent was made: the host\'s logger redacts')
  const incoming = log.lines.filter((l) => l.msg === 'incoming request')
  t.ok(incoming.some((l) => l.req.url === `${DATASET_URL}?format=json&api_key=[redacted]`), 'Fastify\'s request line, redacted')
  t.ok(incoming.some((l) => l.req.url === '/api-keys/acme/shop/keys?api_key=[redacted]'), 'on a management route too')
  t.ok(incoming.some((l) => l.req.url === '/api/nowhere?api_key=[redacted]'), 'and on a miss under /api')
  t.match(log.lines.filter((l) => l.msg === 'host audit' && l.req.url.startsWith(DATASET_URL))[0],
    { level: 50, req: { url: `${DATASET_URL}?format=json&api_key=[redacted]` } }, 'a host\'s line at error level, redacted')
  t.ok(log.lines.some((l) => l.msg === 'data endpoint call' && l.keyPrefix === k.prefix))
  t.same(leaks(log.raw, [k.key]), [], 'no line carries the key')
})

t.test('the host\'s serializer in its logger, and a plugin around ours that logs req its own way: our routes still redact', async (t) => {
  const { raw, stream } = lineCollector()
  const app = Fastify({ logger: { level: 'info', stream, serializers: { req: redactingRequestSerializer as unknown as (req: unknown) => Record<string, unknown> } } })
  const leaky = (request: { url: string }): Record<string, unknown> => ({ url: request.url })
  await app.register(async (scope) => {
    await scope.register(dataEndpoints, pluginOptions())
    scope.get('/host-route', async () => 'ok')
  }, { logSerializers: { req: leaky } } as never)
  await app.ready()
  t.teardown(() => app.close())
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  t.equal((await app.inject({ url: `${DATASET_URL}?format=json&api_key=${k.key}` })).statusCode, 200)
  await app.inject({ url: `/api-keys/acme/shop/keys?api_key=${k.key}`, headers: ADMIN })
  t.equal((await app.inject({ url: '/host-route?note=1' })).statusCode, 200)
  const lines = raw.map((l) => JSON.parse(l))
  const urls = lines.filter((l) => l.msg === 'incoming request').map((l) => l.req.url)
  t.ok(urls.includes(`${DATASET_URL}?format=json&api_key=[redacted]`), 'the data route\'s line, redacted')
  t.ok(urls.includes('/api-keys/acme/shop/keys?api_key=[redacted]'), 'the management route\'s line, redacted')
  t.ok(urls.includes('/host-route?note=1'), 'the host\'s own route keeps the host\'s serializer')
  t.same(leaks(raw, [k.key]), [], 'no line carries the key')
})

t.test('the host\'s serializer in its logger, but a child logger factory of the host\'s: ours takes its place under the plugin', async (t) => {
  // A host's factory may give children serializers of its own; the plugin cannot tell, so it sets its own.
  const leakyFactory = (logger: FastifyBaseLogger, bindings: Record<string, unknown>, options: Record<string, unknown>): FastifyBaseLogger =>
    logger.child(bindings, { ...options, serializers: { req: (request: { url: string }) => ({ url: request.url }) } })
  const log = await loggedApp(t, { level: 'info' }, (app) => { app.setChildLoggerFactory(leakyFactory as never) }, true)
  const k = await createKey(log.app)
  await assignKeys(log.app, 'dataset', [k.id])
  t.equal((await log.app.inject({ url: `${DATASET_URL}?format=json&api_key=${k.key}` })).statusCode, 200)
  t.equal(log.childrenWithSerializers(), 1, 'the plugin made its redacting parent')
  t.ok(log.lines.some((l) => l.msg === 'incoming request' && l.req.url === `${DATASET_URL}?format=json&api_key=[redacted]`))
  t.same(leaks(log.raw, [k.key]), [], 'no line carries the key')
})
