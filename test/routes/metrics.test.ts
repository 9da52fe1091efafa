import { randomUUID } from 'node:crypto'
import { Registry } from 'prom-client'
import t from 'tap'
import fc from 'fast-check'
import { PluginMetrics } from '../../lib/metrics.js'
import { bcryptHasher, SqliteStorage, type KeyHasher, type Storage, type UsageBatch } from '../../lib/index.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, PIPELINE_URL } from '../helper.js'

// Prometheus metrics (issue "9 ·"): registered in the host's registry, one
// counter per answer by route, status and reason, the verification time by
// memo hit or miss, the bcrypt queue, flush failures; label values from fixed
// sets only, never a path or a key.

const P = '/api-keys/acme/shop'

/** The samples of `name` in the registry's text exposition, by their label text. */
async function samples (registry: Registry, name: string): Promise<Map<string, number>> {
  const text = await registry.metrics()
  const found = new Map<string, number>()
  for (const line of text.split('\n')) {
    const m = new RegExp(`^${name}(\\{[^}]*\\})? (\\S+)$`).exec(line)
    if (m !== null) found.set(m[1] ?? '', Number(m[2]))
  }
  return found
}

/** A hasher whose comparisons wait until the test lets them go. */
function gatedHasher (): KeyHasher & { release: () => void, waiting: () => number } {
  const inner = bcryptHasher(4)
  let gates: Array<() => void> = []
  let open = false
  return {
    hash: (value) => inner.hash(value),
    compare: async (value, hash) => {
      if (!open) await new Promise<void>((resolve) => gates.push(resolve))
      return inner.compare(value, hash)
    },
    release: () => { open = true; for (const g of gates) g(); gates = [] },
    waiting: () => gates.length
  }
}

t.test('every reason of the catalogue is counted by route and status, with fixed label values only', async (t) => {
  const registry = new Registry()
  const { app, storage, datasets, jobs } = await buildApp(t, {
    metrics: { registry },
    failureThrottle: { maxFailures: 3, windowMs: 60_000, delayMs: 0 },
    tarSpool: { maxBytes: 0, memoryPerEntry: 0 }
  })
  const k = await createKey(app, 'good')
  const off = await createKey(app, 'off', false)
  const expired = await createKey(app, 'expired')
  await assignKeys(app, 'dataset', [k.id, off.id, expired.id])
  await assignKeys(app, 'pipeline', [k.id])
  await storage.updateKey({ organization: 'acme', project: 'shop' }, expired.id, { expiresAt: new Date(Date.now() - 1000) }, { actor: null })
  await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/2`, headers: ADMIN, payload: { keyIds: [k.id] } }).catch(() => {})
  const get = (query: Record<string, string>, url = DATASET_URL, remoteAddress?: string) =>
    app.inject({ url, query, ...(remoteAddress === undefined ? {} : { remoteAddress }) })

  await get({ api_key: k.key, format: 'json' })
  await get({ api_key: k.key }, '/api/acme/shop/model/x/dataset/1')
  await get({ api_key: k.key }, '/api/acme/shop/model/1/table/1')
  await app.inject({ method: 'POST', url: DATASET_URL, query: { api_key: k.key } })
  await get({})
  await get({ api_key: k.key }, '/api/acme/shop/model/1/dataset/7')
  await get({ api_key: off.key })
  await get({ api_key: expired.key })
  await get({ api_key: k.key, format: 'xml' })
  await get({ api_key: k.key, limit: '-1' })
  await get({ api_key: k.key, format: 'csv-zip', archiveType: 'tar' })
  for (let i = 0; i < 5; i++) await get({ api_key: `${k.prefix}-${'x'.repeat(21)}` }, DATASET_URL, '127.0.0.7')
  datasets.datasets.clear()
  await get({ api_key: k.key })
  const pipeline = await app.inject({ method: 'POST', url: PIPELINE_URL, query: { api_key: k.key } })
  jobs.pipelines.clear()
  await app.inject({ method: 'POST', url: PIPELINE_URL, query: { api_key: k.key } })
  await app.inject({ url: `/api/job/${pipeline.json().job_id}` })
  await app.inject({ url: '/api/job/not-a-uuid' })
  await app.inject({ url: `/api/job/${randomUUID()}` })
  jobs.addJob({ type: 'dump', status: 'succeeded', datasetAvailable: false, id: '00000000-0000-4000-8000-000000000001' } as never)
  await app.inject({ url: '/api/job/00000000-0000-4000-8000-000000000001' })
  jobs.getJob = async () => { throw new Error('job store down') }
  await app.inject({ url: `/api/job/${randomUUID()}` })

  const counted = await samples(registry, 'data_endpoints_requests_total')
  const expected = [
    ['dataset', 200, 'ok'],
    ['dataset', 404, 'not_found'],
    ['other', 404, 'not_found'],
    ['dataset', 405, 'method_not_allowed'],
    ['dataset', 403, 'not_authorized'],
    ['dataset', 403, 'unknown_endpoint'],
    ['dataset', 403, 'disabled_key'],
    ['dataset', 403, 'expired_key'],
    ['dataset', 500, 'unknown_format'],
    ['dataset', 400, 'invalid_parameter'],
    ['dataset', 503, 'tar_spool_full'],
    ['dataset', 403, 'unknown_key'],
    ['dataset', 429, 'too_many_failures'],
    ['dataset', 404, 'dataset_not_found'],
    ['pipeline', 200, 'ok'],
    ['pipeline', 404, 'pipeline_not_found'],
    ['job', 200, 'ok'],
    ['job', 404, 'invalid_job_id'],
    ['job', 404, 'job_not_available'],
    ['job', 404, 'job_dataset_gone'],
    ['job', 500, 'error']
  ] as const
  for (const [route, status, reason] of expected) {
    const value = counted.get(`{route="${route}",status="${status}",reason="${reason}"}`)
    t.ok(value !== undefined && value >= 1, `${route} ${status} ${reason}: ${value}`)
  }
  t.equal(counted.get('{route="dataset",status="403",reason="unknown_key"}'), 3, 'the throttle\'s bound of wrong secrets, each counted once')
  t.equal(counted.get('{route="dataset",status="429",reason="too_many_failures"}'), 2)
  const labels = [...counted.keys()].join(' ')
  t.notOk(labels.includes(k.key) || labels.includes(k.prefix), 'no key or prefix in a label')
  t.notOk(labels.includes('/api'), 'no path in a label')
  const reasons = new Set([...counted.keys()].map((l) => /reason="([^"]+)"/.exec(l)?.[1]))
  t.ok([...reasons].every((r) => /^[a-z_]+$/.test(String(r))), `reasons are catalogue codes: ${[...reasons].join(', ')}`)
})

t.test('verification time by memo hit and miss, and the bcrypt queue depth', async (t) => {
  const registry = new Registry()
  const hasher = gatedHasher()
  const { app } = await buildApp(t, { metrics: { registry }, hasher, maxConcurrentHashes: 1, maxQueuedHashes: 10 })
  const keys = [await createKey(app, 'a'), await createKey(app, 'b'), await createKey(app, 'c')]
  await assignKeys(app, 'dataset', keys.map((k) => k.id))
  const pending = keys.map(async (k) => app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } }))
  // One comparison holds the slot; the other two keys wait in the queue.
  for (let i = 0; i < 1000 && hasher.waiting() < 1; i++) await new Promise((resolve) => setImmediate(resolve))
  for (let i = 0; i < 1000 && (await samples(registry, 'data_endpoints_bcrypt_queue_depth')).get('') !== 2; i++) {
    await new Promise((resolve) => setImmediate(resolve))
  }
  t.equal((await samples(registry, 'data_endpoints_bcrypt_queue_depth')).get(''), 2, 'two comparisons waiting')
  hasher.release()
  t.same((await Promise.all(pending)).map((r) => r.statusCode), [200, 200, 200])
  t.equal((await samples(registry, 'data_endpoints_bcrypt_queue_depth')).get(''), 0)
  await app.inject({ url: DATASET_URL, query: { api_key: keys[0].key, meta: 'entities' } })
  await app.inject({ url: DATASET_URL, query: { api_key: keys[0].key, meta: 'entities' } })
  const histogram = await samples(registry, 'data_endpoints_verification_seconds_count')
  t.equal(histogram.get('{memo="miss"}'), 3, 'three first verifications')
  t.equal(histogram.get('{memo="hit"}'), 2, 'two memo hits')
  const sums = await samples(registry, 'data_endpoints_verification_seconds_sum')
  t.ok((sums.get('{memo="miss"}') ?? 0) > 0, 'the misses took time')
})

t.test('memo hits are each observed once, across the runs they are observed in and across reads', async (t) => {
  const registry = new Registry()
  const { app } = await buildApp(t, { metrics: { registry } })
  const key = await createKey(app, 'a')
  await assignKeys(app, 'dataset', [key.id])
  const hits = async (): Promise<number | undefined> => (await samples(registry, 'data_endpoints_verification_seconds_count')).get('{memo="hit"}')
  const call = async (): Promise<void> => {
    t.equal((await app.inject({ url: DATASET_URL, query: { api_key: key.key, meta: 'entities' } })).statusCode, 200)
  }
  await call() // a miss, unless the key's creation left its match in the memo
  const before = await hits() ?? 0
  t.ok(before <= 1)
  // More than one run of them (256) before the next read, then a few more.
  for (let i = 0; i < 600; i++) await call()
  t.equal(await hits(), before + 600)
  t.equal(await hits(), before + 600, 'a second read adds nothing')
  await call()
  await call()
  t.equal(await hits(), before + 602, 'what came since the last read, once')
  const buckets = await samples(registry, 'data_endpoints_verification_seconds_bucket')
  t.equal(buckets.get('{le="+Inf",memo="hit"}'), before + 602, 'every hit in the buckets')
  const sum = (await samples(registry, 'data_endpoints_verification_seconds_sum')).get('{memo="hit"}')
  t.ok(sum !== undefined && sum >= 0 && sum < 600, `the hits' time: ${sum} s`)
})

t.test('failed usage flushes are counted', async (t) => {
  const registry = new Registry()
  const real = new SqliteStorage({ filename: ':memory:' })
  let failures = 2
  const flaky: Storage = Object.assign(Object.create(real) as Storage, {
    async applyUsage (batch: UsageBatch) {
      if (failures > 0) { failures--; throw new Error('database is locked') }
      return real.applyUsage(batch)
    }
  })
  const { app } = await buildApp(t, { storage: flaky, metrics: { registry }, usageFlushInterval: 3_600_000 })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })
  await app.dataEndpoints.flushUsage().catch(() => {})
  await app.dataEndpoints.flushUsage().catch(() => {})
  await app.dataEndpoints.flushUsage()
  t.equal((await samples(registry, 'data_endpoints_usage_flush_failures_total')).get(''), 2)
})

t.test('counts and bytes are exact across scrapes: each read adds what came since the last, once', async (t) => {
  const registry = new Registry()
  const { app } = await buildApp(t, { metrics: { registry } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const ok = '{route="dataset",status="200",reason="ok"}'
  const download = async (): Promise<number> => {
    const res = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })
    t.equal(res.statusCode, 200)
    return res.rawPayload.length
  }
  let size = await download()
  size += await download()
  t.equal((await samples(registry, 'data_endpoints_requests_total')).get(ok), 2)
  t.equal((await samples(registry, 'data_endpoints_requests_total')).get(ok), 2, 'a second read adds nothing')
  for (let i = 0; i < 3; i++) size += await download()
  await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'xml' } })
  const counted = await samples(registry, 'data_endpoints_requests_total')
  t.equal(counted.get(ok), 5)
  t.equal(counted.get('{route="dataset",status="500",reason="unknown_format"}'), 1)
  t.equal((await samples(registry, 'data_endpoints_download_bytes_total')).get('{format="json"}'), size)
})

t.test('the metrics leave the registry at close; a bad metrics option is refused at registration', async (t) => {
  const registry = new Registry()
  const first = await buildApp(t, { metrics: { registry } })
  t.ok((await registry.metrics()).includes('data_endpoints_requests_total'))
  await first.app.close()
  t.notOk((await registry.metrics()).includes('data_endpoints_'), 'none left')
  const again = await buildApp(t, { metrics: { registry } })
  t.ok((await registry.metrics()).includes('data_endpoints_requests_total'), 'registered again after a restart')
  await again.app.close()

  for (const metrics of [{}, { registry: {} }, null, 'registry']) {
    await t.rejects(buildApp(t, { metrics: metrics as never }), /option "metrics" must be \{ registry \}/, JSON.stringify(metrics))
  }
})

t.test('downloads in progress and bytes handed on, by format, for whole and streamed bodies', async (t) => {
  const { ProbeDatasets } = await import('../format-fixtures.js')
  const registry = new Registry()
  const { app } = await buildApp(t, { metrics: { registry }, datasets: new ProbeDatasets(5000) })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const sizes = new Map<string, number>()
  for (const [format, limit] of [['json', '10'], ['json', '5000'], ['sql', '5000'], ['csv-zip', '10']]) {
    const res = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format, limit } })
    t.equal(res.statusCode, 200)
    sizes.set(format, (sizes.get(format) ?? 0) + res.rawPayload.length)
  }
  const bytes = await samples(registry, 'data_endpoints_download_bytes_total')
  for (const [format, size] of sizes) {
    t.equal(bytes.get(`{format="${format}"}`), size, `${format}: every byte of the bodies sent`)
  }
  const inProgress = await samples(registry, 'data_endpoints_downloads_in_progress')
  t.ok([...inProgress.values()].every((v) => v === 0), 'none in progress once all have ended')
  t.ok(inProgress.has('{format="json"}'), 'a streamed json download was counted in progress')
})

t.test('requests are counted by label set whatever their order, between reads of the registry', async (t) => {
  const registry = new Registry()
  const metrics = new PluginMetrics(registry, { queuedComparisons: () => 0, tarSpoolBytes: () => 0 })
  const labels = fc.constantFrom(['dataset', 200, 'ok'], ['dataset', 403, 'unknown_key'], ['pipeline', 200, 'ok'], ['dataset', 404, 'ok'], ['other', 200, 'ok']) as fc.Arbitrary<[string, number, string]>
  const step = fc.oneof(labels.map((l) => ({ count: l })), fc.constant({ read: true }))
  await fc.assert(fc.asyncProperty(fc.array(step, { maxLength: 60 }), async (steps) => {
    const before = await samples(registry, 'data_endpoints_requests_total')
    const expected = new Map<string, number>()
    for (const s of steps) {
      if ('read' in s) await samples(registry, 'data_endpoints_requests_total')
      else {
        const [route, status, reason] = s.count
        metrics.request(route, status, reason)
        const key = `{route="${route}",status="${status}",reason="${reason}"}`
        expected.set(key, (expected.get(key) ?? 0) + 1)
      }
    }
    const after = await samples(registry, 'data_endpoints_requests_total')
    for (const [key, n] of expected) if ((after.get(key) ?? 0) - (before.get(key) ?? 0) !== n) return false
    return true
  }), { numRuns: 300 })
  metrics.unregister()
  t.pass('300 sequences: every label set counted exactly')
})
