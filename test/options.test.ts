import Fastify from 'fastify'
import t from 'tap'
import { zstdAvailable } from '../lib/formats/parquet-row-group.js'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import dataEndpoints, { SqliteStorage, type DataEndpointsOptions } from '../lib/index.js'
import { resolveOptions } from '../lib/options.js'
import { MemoryDatasets, MemoryJobs } from './fixtures.js'

function validOptions (): DataEndpointsOptions {
  const jobs = new MemoryJobs()
  return {
    storage: new SqliteStorage({ filename: ':memory:' }),
    datasets: new MemoryDatasets(),
    pipelines: jobs,
    jobs,
    getPermissions: () => []
  }
}

const BAD: Array<[string, Partial<Record<keyof DataEndpointsOptions, unknown>>, RegExp]> = [
  ['storage missing', { storage: undefined }, /"storage" is required/],
  ['storage without methods', { storage: {} }, /"storage" must have a method "findEndpointKey"/],
  ['datasets missing', { datasets: undefined }, /"datasets" is required/],
  ['pipelines wrong', { pipelines: { start: () => {} } }, /"pipelines" must have a method "getPipeline"/],
  ['jobs missing', { jobs: null }, /"jobs" is required/],
  ['getPermissions missing', { getPermissions: undefined }, /"getPermissions" is required/],
  ['getPermissions not a function', { getPermissions: ['ManageAPIKeys'] }, /"getPermissions"/],
  ['baseUrl relative', { baseUrl: 'example/data' }, /"baseUrl"/],
  ['baseUrl ftp', { baseUrl: 'ftp://example.org' }, /"baseUrl"/],
  ['baseUrl with query', { baseUrl: 'https://example.org/?a=1' }, /"baseUrl"/],
  ['managementPrefix without slash', { managementPrefix: 'keys' }, /"managementPrefix"/],
  ['managementPrefix with trailing slash', { managementPrefix: '/keys/' }, /"managementPrefix"/],
  ['managementPrefix under /api', { managementPrefix: '/api/keys' }, /must not lie under "\/api"/],
  ['requireHttps not boolean', { requireHttps: 'no' }, /"requireHttps" must be a boolean/],
  ['bcryptCost too low', { bcryptCost: 3 }, /"bcryptCost" must be an integer from 4 to 31/],
  ['bcryptCost fractional', { bcryptCost: 10.5 }, /"bcryptCost"/],
  ['usageFlushInterval zero', { usageFlushInterval: 0 }, /"usageFlushInterval"/],
  ['verificationCacheSize negative', { verificationCacheSize: -1 }, /"verificationCacheSize"/],
  ['maxConcurrentHashes zero', { maxConcurrentHashes: 0 }, /"maxConcurrentHashes"/],
  ['maxQueuedHashes string', { maxQueuedHashes: '5' }, /"maxQueuedHashes"/],
  ['maxQueuedHashesPerKey zero', { maxQueuedHashesPerKey: 0 }, /"maxQueuedHashesPerKey" must be an integer from 1/],
  ['maxQueuedHashesPerKey fractional', { maxQueuedHashesPerKey: 1.5 }, /"maxQueuedHashesPerKey"/],
  ['failureThrottle wrong shape', { failureThrottle: true }, /"failureThrottle"/],
  ['failureThrottle bad window', { failureThrottle: { maxFailures: 5, windowMs: 0 } }, /"failureThrottle.windowMs"/],
  ['failureThrottle bad delay', { failureThrottle: { maxFailures: 5, windowMs: 1000, delayMs: -1 } }, /"failureThrottle.delayMs"/],
  ['idempotencyTtl zero', { idempotencyTtl: 0 }, /"idempotencyTtl"/],
  ['hasher without compare', { hasher: { hash: async () => 'x' } }, /"hasher" must have a method "compare"/],
  ['tarSpool not an object', { tarSpool: '/tmp' }, /"tarSpool" must be an object/],
  ['tarSpool with a misspelt field', { tarSpool: { maxByte: 1024 } }, /"tarSpool" has no field "maxByte"/],
  ['tarSpool.directory empty', { tarSpool: { directory: '' } }, /"tarSpool.directory" must be a path/],
  ['tarSpool.directory not a string', { tarSpool: { directory: 42 } }, /"tarSpool.directory" must be a path/],
  ['tarSpool.directory missing', { tarSpool: { directory: join(tmpdir(), 'fde-no-such-folder') } }, /"tarSpool.directory" must be an existing folder this process can write to/],
  ['tarSpool.directory a file', { tarSpool: { directory: new URL(import.meta.url).pathname } }, /"tarSpool.directory" must be an existing folder/],
  ['tarSpool.maxBytes negative', { tarSpool: { maxBytes: -1 } }, /"tarSpool.maxBytes" must be an integer from 0/],
  ['tarSpool.maxBytes fractional', { tarSpool: { maxBytes: 1.5 } }, /"tarSpool.maxBytes"/],
  ['tarSpool.maxWaitMs past setTimeout\'s limit', { tarSpool: { maxWaitMs: 2 ** 31 } }, /"tarSpool.maxWaitMs" must be an integer from 0 to 2147483647/],
  ['tarSpool.memoryPerEntry a string', { tarSpool: { memoryPerEntry: '256k' } }, /"tarSpool.memoryPerEntry"/],
  ['downloadChunkSize too small', { downloadChunkSize: 512 }, /"downloadChunkSize" must be an integer from 1024 to 16777216/],
  ['downloadChunkSize fractional', { downloadChunkSize: 65536.5 }, /"downloadChunkSize"/],
  ['compression not a boolean', { compression: 'yes' }, /"compression" must be a boolean/],
  ['renderedBodyCacheBytes negative', { renderedBodyCacheBytes: -1 }, /"renderedBodyCacheBytes" must be an integer from 0 to/],
  ['columnarBatchBytes too small', { columnarBatchBytes: 1024 }, /"columnarBatchBytes" must be an integer from 65536 to 1073741824/],
  ['parquetThreads zero', { parquetThreads: 0 }, /"parquetThreads" must be an integer from 1 to 64/],
  ['parquetMaxWaiting fractional', { parquetMaxWaiting: 1.5 }, /"parquetMaxWaiting"/],
  ['parquetCompression unknown', { parquetCompression: 'lz4' }, /"parquetCompression" must be "snappy", "zstd" or "none"/],
  ['renderedFiles not an object', { renderedFiles: '/tmp' }, /"renderedFiles" must be an object/],
  ['renderedFiles with a misspelt field', { renderedFiles: { maxByte: 1 } }, /"renderedFiles" has no field "maxByte"/],
  ['renderedFiles.maxBytes negative', { renderedFiles: { maxBytes: -1 } }, /"renderedFiles.maxBytes" must be an integer from 0/],
  ['renderedFiles.directory missing', { renderedFiles: { directory: join(tmpdir(), 'fde-no-such-folder') } }, /"renderedFiles.directory" must be an existing folder this process can write to/]
]

for (const [name, override, message] of BAD) {
  t.test(`ready() rejects a bad option: ${name}`, async (t) => {
    const app = Fastify()
    t.teardown(() => app.close())
    app.register(dataEndpoints, { ...validOptions(), ...override } as DataEndpointsOptions)
    await t.rejects(async () => { await app.ready() }, { code: 'FDE_INVALID_OPTION', message })
  })
}

t.test('valid options register and the defaults apply', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(dataEndpoints, { ...validOptions(), baseUrl: 'https://data.example.org/' })
  await app.ready()
  t.ok(app.hasRoute({ method: 'GET', url: '/api-keys/:organization/:project/keys' }), 'management under /api-keys')
  t.ok(app.hasRoute({ method: 'GET', url: '/api/job/:jobId' }))
})

t.test('parquetCompression zstd: taken where Node has Zstandard, refused with a clear message where not', async (t) => {
  if (zstdAvailable()) {
    t.equal(resolveOptions({ ...validOptions(), parquetCompression: 'zstd' }).parquetCompression, 'zstd')
  } else {
    t.throws(() => resolveOptions({ ...validOptions(), parquetCompression: 'zstd' }), /"parquetCompression" "zstd" needs Node.js 22.15 or later/)
  }
  t.same(resolveOptions(validOptions()).renderedFiles, { directory: tmpdir(), maxBytes: 1024 ** 3 })
})

t.test('tarSpool: the defaults, and a partial object keeps the other defaults', async (t) => {
  t.same(resolveOptions(validOptions()).tarSpool,
    { directory: tmpdir(), maxBytes: 512 * 1024 * 1024, maxWaitMs: 10_000, memoryPerEntry: 256 * 1024 })
  t.same(resolveOptions({ ...validOptions(), tarSpool: { maxBytes: 1024, directory: 'relative/spool' } }).tarSpool,
    { directory: resolve('relative/spool'), maxBytes: 1024, maxWaitMs: 10_000, memoryPerEntry: 256 * 1024 },
    'a relative directory is taken from the working directory once, at registration')
})

t.test('the data routes, their hook and error handler stay out of the host\'s other routes', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(dataEndpoints, validOptions())
  app.get('/host/thing', async () => { throw new Error('host failure') })
  app.get('/host/ok', async () => ({ ok: true }))
  const ok = await app.inject('/host/ok')
  t.equal(ok.statusCode, 200)
  t.equal(ok.headers['cache-control'], undefined, 'no data-route header on host routes')
  const failed = await app.inject('/host/thing')
  t.equal(failed.statusCode, 500)
  t.equal(failed.json().error, 'Internal Server Error', 'the host keeps Fastify\'s own error format')
})
