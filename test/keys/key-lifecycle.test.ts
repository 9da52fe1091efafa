import t from 'tap'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, PIPELINE_URL } from '../helper.js'
import type { FastifyInstance } from 'fastify'

// Key states and their effects (SPEC.md §3), usage counters (§5.6) and the
// Idempotency-Key of pipeline calls (DESIGN.md §2).

const P = '/api-keys/acme/shop'

async function download (app: FastifyInstance, key: string): Promise<{ statusCode: number, message?: string }> {
  const res = await app.inject({ url: DATASET_URL, query: { api_key: key, format: 'json' } })
  return res.statusCode === 200 ? { statusCode: 200 } : { statusCode: res.statusCode, message: res.json().message }
}

async function datasetEndpoint (app: FastifyInstance): Promise<{ calls: number }> {
  const list = (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json()
  return list.find((e: { type: string }) => e.type === 'dataset')
}

async function keyRecord (app: FastifyInstance, id: string): Promise<{ updatedAt: string | null }> {
  const list = (await app.inject({ url: `${P}/keys`, headers: ADMIN })).json()
  return list.find((k: { id: string }) => k.id === id)
}

t.test('disable, enable and delete act on the very next request', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  t.same(await download(app, k.key), { statusCode: 200 })

  await app.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { isActive: false } })
  t.same(await download(app, k.key), { statusCode: 403, message: 'Disabled API key' })
  await app.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { isActive: true } })
  t.same(await download(app, k.key), { statusCode: 200 })
  await app.inject({ method: 'DELETE', url: `${P}/keys/${k.id}`, headers: ADMIN })
  t.same(await download(app, k.key), { statusCode: 403, message: 'Unknown API key' })
})

t.test('removing a key from an endpoint refuses it there at once', async (t) => {
  const { app } = await buildApp(t)
  const a = await createKey(app, 'a')
  const b = await createKey(app, 'b')
  await assignKeys(app, 'dataset', [a.id, b.id])
  t.same(await download(app, a.key), { statusCode: 200 })
  await assignKeys(app, 'dataset', [b.id])
  t.same(await download(app, a.key), { statusCode: 403, message: 'Unknown API key' })
  t.same(await download(app, b.key), { statusCode: 200 })
})

t.test('calls and updatedAt change only on a successful authentication', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  const idle = await createKey(app, 'idle', false)
  await assignKeys(app, 'dataset', [k.id, idle.id])
  t.equal((await datasetEndpoint(app)).calls, 0)
  t.equal((await keyRecord(app, k.id)).updatedAt, null)

  // Every kind of refusal: none of them counts.
  await app.inject({ url: DATASET_URL })
  await app.inject({ url: DATASET_URL, query: { api_key: 'bad' } })
  await app.inject({ url: DATASET_URL, query: { api_key: k.key.slice(0, 11) + 'x'.repeat(21) } })
  await app.inject({ url: DATASET_URL, query: { api_key: idle.key } })
  await app.inject({ method: 'POST', url: DATASET_URL, query: { api_key: k.key } })
  t.equal((await datasetEndpoint(app)).calls, 0, 'no refusal is counted')
  t.equal((await keyRecord(app, k.id)).updatedAt, null)
  t.equal((await keyRecord(app, idle.id)).updatedAt, null, 'a disabled key is not marked as used')

  const before = Date.now()
  for (let i = 0; i < 3; i++) t.same(await download(app, k.key), { statusCode: 200 })
  // Counted even when a later step fails: the key was good.
  const badFormat = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'xml' } })
  t.equal(badFormat.statusCode, 500)
  t.equal((await datasetEndpoint(app)).calls, 4)
  const used = (await keyRecord(app, k.id)).updatedAt
  t.ok(used !== null && Date.parse(used) >= before - 5 && Date.parse(used) <= Date.now(), 'updatedAt is the time of use')
})

t.test('rotation: new key, both assigned, old removed, and no request fails', async (t) => {
  const { app } = await buildApp(t)
  const old = await createKey(app, 'v1')
  await assignKeys(app, 'dataset', [old.id])
  let client = old.key
  const failures: unknown[] = []
  let requests = 0
  let stop = false
  const traffic = (async () => {
    while (!stop) {
      // inject() on a synchronous store never reaches the timer phase by itself.
      await new Promise((resolve) => setImmediate(resolve))
      const r = await download(app, client)
      requests++
      if (r.statusCode !== 200) failures.push(r)
    }
  })()
  const step = async (): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, 30)) }

  await step()
  const fresh = await createKey(app, 'v2')
  await step()
  await assignKeys(app, 'dataset', [old.id, fresh.id])
  await step()
  client = fresh.key
  await step()
  const endpoint = await datasetEndpoint(app)
  t.ok(endpoint.calls > 0, 'usage can be checked before removing the old key')
  await assignKeys(app, 'dataset', [fresh.id])
  await step()
  stop = true
  await traffic
  t.ok(requests > 10, `traffic ran throughout (${requests} requests)`)
  t.same(failures, [], 'no request failed during the rotation')
  t.same(await download(app, old.key), { statusCode: 403, message: 'Unknown API key' }, 'the old key is out')
})

t.test('Idempotency-Key: the same key on the same endpoint replays the first body and starts nothing', async (t) => {
  const { app, jobs } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'pipeline', [k.id])
  const call = async (idempotencyKey?: string) => app.inject({
    method: 'POST',
    url: PIPELINE_URL,
    headers: { authorization: `Bearer ${k.key}`, ...(idempotencyKey === undefined ? {} : { 'idempotency-key': idempotencyKey }) }
  })
  const first = await call('run-2026-11-22')
  const second = await call('run-2026-11-22')
  t.equal(first.statusCode, 200)
  t.equal(second.statusCode, 200)
  t.same(second.json(), first.json())
  t.equal(second.headers['idempotent-replayed'], 'true')
  t.equal(first.headers['idempotent-replayed'], undefined)
  t.equal(jobs.starts, 1, 'one run for two calls')

  const other = await call('another-key')
  t.not(other.json().job_id, first.json().job_id)
  const plain = await call()
  t.not(plain.json().job_id, first.json().job_id)
  t.equal(jobs.starts, 3)

  const concurrent = await Promise.all(Array.from({ length: 10 }, async () => call('burst')))
  t.equal(new Set(concurrent.map((r) => r.json().job_id)).size, 1, 'ten concurrent calls, one job')
  t.equal(jobs.starts, 4)

  for (const bad of ['', 'x'.repeat(256), 'with space', 'tab\there', 'ümlaut']) {
    const res = await app.inject({ method: 'POST', url: PIPELINE_URL, headers: { authorization: `Bearer ${k.key}`, 'idempotency-key': bad } })
    t.equal(res.statusCode, 400, JSON.stringify(bad))
    t.match(res.json().message, /Idempotency-Key/)
  }
  t.equal(jobs.starts, 4, 'bad idempotency keys start nothing')
})

t.test('Idempotency-Key: a failed start can be retried with the same key', async (t) => {
  const { app, jobs } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'pipeline', [k.id])
  const getPipeline = jobs.getPipeline.bind(jobs)
  let failNext = true
  jobs.getPipeline = async (ref) => {
    const pipeline = await getPipeline(ref)
    if (pipeline === null) return null
    return {
      name: pipeline.name,
      start: async (jobId) => {
        if (failNext) { failNext = false; throw new Error('scheduler unavailable') }
        return pipeline.start(jobId)
      }
    }
  }
  const headers = { authorization: `Bearer ${k.key}`, 'idempotency-key': 'retry-me' }
  const failed = await app.inject({ method: 'POST', url: PIPELINE_URL, headers })
  t.same([failed.statusCode, failed.json()], [500, { message: 'scheduler unavailable' }])
  t.equal(jobs.jobs.size, 0, 'no job record for a failed start')
  const retried = await app.inject({ method: 'POST', url: PIPELINE_URL, headers })
  t.equal(retried.statusCode, 200)
  t.equal(retried.headers['idempotent-replayed'], undefined, 'the retry really ran')
  t.equal(jobs.starts, 1)
})

// Regression: a claim written but whose answer was lost stayed "in progress"
// for idempotencyTtl though nothing ran: every retry waited 10 s for a 409.
t.test('Idempotency-Key: a claim whose answer was lost is released, so a retry runs', async (t) => {
  const { app, jobs, storage } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'pipeline', [k.id])
  const claim = storage.claimIdempotencyKey.bind(storage)
  let loseNext = true
  storage.claimIdempotencyKey = async (...args) => {
    const answer = await claim(...args)
    if (loseNext) { loseNext = false; throw new Error('connection lost') }
    return answer
  }
  const headers = { authorization: `Bearer ${k.key}`, 'idempotency-key': 'order-42' }
  const lost = await app.inject({ method: 'POST', url: PIPELINE_URL, headers })
  t.same([lost.statusCode, lost.json()], [500, { message: 'Internal server error' }])
  t.equal(jobs.starts, 0, 'nothing started')
  // Held, the key would make this wait 10 s and answer 409.
  const retried = await app.inject({ method: 'POST', url: PIPELINE_URL, headers })
  t.equal(retried.statusCode, 200)
  t.equal(retried.headers['idempotent-replayed'], undefined, 'the retry really ran')
  t.equal(jobs.starts, 1)
})

t.test('Idempotency-Key: a failed claim never frees the claim of a call that is starting its run', async (t) => {
  const { app, jobs, storage } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'pipeline', [k.id])
  let openGate = (): void => {}
  const gate = new Promise<void>((resolve) => { openGate = resolve })
  const getPipeline = jobs.getPipeline.bind(jobs)
  jobs.getPipeline = async (ref) => {
    const pipeline = await getPipeline(ref)
    return pipeline && { name: pipeline.name, start: async (jobId) => { await gate; await pipeline.start(jobId) } }
  }
  const claim = storage.claimIdempotencyKey.bind(storage)
  let claims = 0
  let firstClaimed = (): void => {}
  const claimed = new Promise<void>((resolve) => { firstClaimed = resolve })
  storage.claimIdempotencyKey = async (...args) => {
    const n = ++claims
    const answer = await claim(...args)
    if (n === 1) firstClaimed()
    if (n === 2) throw new Error('connection lost')
    return answer
  }
  const headers = { authorization: `Bearer ${k.key}`, 'idempotency-key': 'shared' }
  const first = app.inject({ method: 'POST', url: PIPELINE_URL, headers })
  await claimed
  const failed = await app.inject({ method: 'POST', url: PIPELINE_URL, headers })
  t.same([failed.statusCode, failed.json()], [500, { message: 'Internal server error' }], 'this call\'s claim met the first one\'s and failed')
  const third = app.inject({ method: 'POST', url: PIPELINE_URL, headers })
  await new Promise((resolve) => setTimeout(resolve, 100))
  openGate()
  const [a, c] = await Promise.all([first, third])
  t.equal(a.statusCode, 200)
  t.same([c.statusCode, c.headers['idempotent-replayed'], c.body], [200, 'true', a.body], 'the third call waited and got the first one\'s body')
  t.equal(jobs.starts, 1, 'one run')
})

t.test('Idempotency-Key: a release that fails is retried in the background; the start\'s error is answered', async (t) => {
  const { app, jobs, storage } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'pipeline', [k.id])
  const getPipeline = jobs.getPipeline.bind(jobs)
  let failStart = true
  jobs.getPipeline = async (ref) => {
    const pipeline = await getPipeline(ref)
    return pipeline && {
      name: pipeline.name,
      start: async (jobId) => {
        if (failStart) { failStart = false; throw new Error('scheduler unavailable') }
        await pipeline.start(jobId)
      }
    }
  }
  const release = storage.releaseIdempotencyKey.bind(storage)
  let releaseFails = true
  storage.releaseIdempotencyKey = async (...args) => {
    if (releaseFails) { releaseFails = false; throw new Error('database away') }
    return release(...args)
  }
  const headers = { authorization: `Bearer ${k.key}`, 'idempotency-key': 'retry-me' }
  const failed = await app.inject({ method: 'POST', url: PIPELINE_URL, headers })
  t.same([failed.statusCode, failed.json()], [500, { message: 'scheduler unavailable' }])
  const retried = await app.inject({ method: 'POST', url: PIPELINE_URL, headers })
  t.equal(retried.statusCode, 200, 'the retry waits for the background release, then runs')
  t.equal(retried.headers['idempotent-replayed'], undefined)
  t.equal(jobs.starts, 1)
})

t.test('Idempotency-Key: an answer that failed to store is stored in the background; a retry gets the replay', async (t) => {
  const { app, jobs, storage } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'pipeline', [k.id])
  const complete = storage.completeIdempotencyKey.bind(storage)
  let completeFails = true
  storage.completeIdempotencyKey = async (...args) => {
    if (completeFails) { completeFails = false; throw new Error('database away') }
    return complete(...args)
  }
  const headers = { authorization: `Bearer ${k.key}`, 'idempotency-key': 'store-me' }
  const first = await app.inject({ method: 'POST', url: PIPELINE_URL, headers })
  t.equal(first.statusCode, 200, 'the run started, so the call answers its job')
  // Without the background write this would wait 10 s and answer 409.
  const retried = await app.inject({ method: 'POST', url: PIPELINE_URL, headers })
  t.same([retried.statusCode, retried.headers['idempotent-replayed'], retried.body], [200, 'true', first.body],
    'the retry gets the first call\'s job, replayed')
  t.equal(jobs.starts, 1, 'one run')
})

t.test('Idempotency-Key: records expire after idempotencyTtl', async (t) => {
  const { app, jobs } = await buildApp(t, { idempotencyTtl: 50 })
  const k = await createKey(app)
  await assignKeys(app, 'pipeline', [k.id])
  const headers = { authorization: `Bearer ${k.key}`, 'idempotency-key': 'short-lived' }
  const first = await app.inject({ method: 'POST', url: PIPELINE_URL, headers })
  await new Promise((resolve) => setTimeout(resolve, 80))
  const later = await app.inject({ method: 'POST', url: PIPELINE_URL, headers })
  t.not(later.json().job_id, first.json().job_id)
  t.equal(jobs.starts, 2)
})
