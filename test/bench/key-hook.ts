// The key hook alone, and each of its parts, called in a loop: nanoseconds
// per authenticated request when every check is remembered (the usual case).
// Not a test: run it with
//   nice -n -20 npx tsx test/bench/key-hook.ts [calls]
// The parts are the plugin's own (SqliteStorage on a WAL file, the verifier
// with its metrics, the usage recorder, the failure throttle, the limiter),
// made as lib/index.ts makes them; the request and reply are the few fields
// the hook reads. No network, no framework: what is left is the hook's own
// cost, steady to a few per cent from run to run where an HTTP run varies by
// ±15%. Under load the same code costs more (caches are colder), so compare
// versions with this, and confirm with versions.ts.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { Registry } from 'prom-client'
import { SqliteStorage } from '../../lib/index.js'
import { authenticateHook, parseLocator, suppliedKey, type DataRouteParams } from '../../lib/keys/authenticate.js'
import { DownloadSlots } from '../../lib/keys/download-slots.js'
import { FailureThrottle } from '../../lib/keys/failure-throttle.js'
import { bcryptHasher } from '../../lib/keys/key-hasher.js'
import { KeyLimiter } from '../../lib/keys/key-limits.js'
import { KeyVerifier } from '../../lib/keys/key-verifier.js'
import { PluginMetrics } from '../../lib/metrics.js'
import { guardStorage } from '../../lib/storage/guarded-storage.js'
import { UsageRecorder } from '../../lib/storage/usage-recorder.js'
import { ADMIN, managementBenchApp } from './management-app.js'

const CALLS = Number(process.argv[2] ?? 300_000)
const dir = mkdtempSync(join(tmpdir(), 'fde-key-hook-'))
const raw = new SqliteStorage({ filename: join(dir, 'keys.db') })

// A key assigned to the sales endpoint, made through the management routes.
const app = await managementBenchApp(raw)
const created = (await app.inject({ method: 'POST', url: '/api-keys/acme/shop/keys', headers: ADMIN, payload: { purpose: 'bench' } })).json()
await app.inject({ method: 'PUT', url: '/api-keys/acme/shop/endpoints/1/dataset/1', headers: ADMIN, payload: { keyIds: [created.id] } })

const log = app.log
const storage = guardStorage(raw)
const metrics = new PluginMetrics(new Registry(), { queuedComparisons: () => 0, tarSpoolBytes: () => 0 })
const verifier = new KeyVerifier({
  hasher: bcryptHasher(4), cacheSize: 1000, maxConcurrentHashes: 1, maxQueuedHashes: 100, maxQueuedHashesPerKey: 10,
  observe: (memo, seconds) => { metrics.verified(memo, seconds) }
})
const usage = new UsageRecorder(raw, 1000, log)
const slots = new DownloadSlots(storage, 60_000, log)
const throttle = new FailureThrottle({ maxFailures: 50, windowMs: 60_000 })
const limiter = new KeyLimiter({ storage, usage, slots, metrics })
const hook = authenticateHook({ storage, verifier, usage, throttle, limiter, requireHttps: true })

const params: DataRouteParams = { organization: 'acme', project: 'shop', modelSequence: '1', type: 'dataset', resourceSequence: '1' }
const headers = { authorization: `Bearer ${created.key as string}` }
const reply = { header () { return reply } } as unknown as FastifyReply
function request (): FastifyRequest {
  return { params, query: { format: 'json' }, headers, method: 'GET', ip: '127.0.0.1', protocol: 'http', dataEndpointCall: null, dataEndpointKeyPrefix: undefined } as unknown as FastifyRequest
}

// The first call compares with bcrypt; after it every call is remembered.
await new Promise<void>((resolve, reject) => { hook(request(), reply, (err?: Error) => { if (err !== undefined) reject(err); else resolve() }) })

const locator = parseLocator(params)
if (locator === null) throw new Error('no locator')
const prefix = (created.key as string).slice(0, 10)
const found = await raw.findEndpointKey(locator, prefix)
if (found?.key == null) throw new Error('no key')
const hash = found.key.hash

/** ns per call of `fn`, the best of five rounds of `calls`. */
function measure (calls: number, fn: () => void): number {
  let best = Infinity
  for (let round = 0; round < 5; round++) {
    const started = process.hrtime.bigint()
    for (let i = 0; i < calls; i++) fn()
    best = Math.min(best, Number(process.hrtime.bigint() - started) / calls)
  }
  return best
}

let synchronous = 0
const cases: Array<[string, () => void]> = [
  ['the whole key hook (remembered lookup and comparison, no limits)', () => {
    let done = false
    hook(request(), reply, (err?: Error) => { if (err !== undefined) throw err; done = true })
    if (done) synchronous++
  }],
  ['  the request\'s locator and supplied key', () => { parseLocator(params); suppliedKey(request()) }],
  ['  the storage lookup (remembered; its two counter reads)', () => { void raw.findEndpointKey(locator, prefix) }],
  ['  the same through the storage guard', () => { void storage.findEndpointKey(locator, prefix) }],
  ['  the verifier (memo digest, memo, the hit\'s histogram)', () => { verifier.verify(hash, created.key, verifier.digestOf(created.key)) }],
  ['  the failure throttle (admit, settle; a key verified before skips it)', () => { throttle.admit('127.0.0.1'); throttle.settle('127.0.0.1') }],
  ['  the usage count', () => { usage.record(found.endpointId, found.key?.id as string) }]
]
console.log(`| part | ns per call (best of 5 × ${CALLS}) |\n|---|---:|`)
for (const [label, fn] of cases) {
  measure(Math.min(CALLS, 20_000), fn) // warm-up
  console.log(`| ${label} | ${measure(CALLS, fn).toFixed(0)} |`)
}
if (synchronous === 0) throw new Error('the hook never finished at once')

await usage.close()
await slots.close()
await app.close() // closes the storage too
rmSync(dir, { recursive: true, force: true })
process.exit(0)
