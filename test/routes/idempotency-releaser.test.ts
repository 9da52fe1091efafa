import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyBaseLogger } from 'fastify'
import t from 'tap'
import { IdempotencyReleaser } from '../../lib/routes/idempotency-releaser.js'
import type { IdempotencyScope, Storage } from '../../lib/storage/storage.js'
import { assignKeys, buildApp, createKey, PIPELINE_URL } from '../helper.js'

// The background release of Idempotency-Key claims whose call started no run
// (lib/routes/idempotency-releaser.ts): retried a bounded number of times, bounded
// in memory, stopped at close.

type Outcome = boolean | Error

const SCOPE: IdempotencyScope = { endpointId: 'e', keyId: 'k' }

/** A storage whose releases answer `outcomes` in turn (the last one over and over), and a log. */
function fakes (outcomes: Outcome[]): { storage: Storage, log: FastifyBaseLogger, attempts: () => number, errors: string[] } {
  let attempts = 0
  const errors: string[] = []
  const storage = {
    async releaseIdempotencyKey () {
      const outcome = outcomes[Math.min(attempts++, outcomes.length - 1)]
      if (outcome instanceof Error) throw outcome
      return outcome
    }
  } as unknown as Storage
  const log = { error: (_: unknown, message: string) => { errors.push(message) } } as unknown as FastifyBaseLogger
  return { storage, log, attempts: () => attempts, errors }
}

const away = new Error('database away')

t.test('an answer that fails to store is retried until stored, and given up on with a log line', async (t) => {
  let attempts = 0
  const stored: string[] = []
  const errors: string[] = []
  const storage = {
    async completeIdempotencyKey (_e: IdempotencyScope, _k: string, response: string) {
      if (++attempts < 3) throw away
      stored.push(response)
    }
  } as unknown as Storage
  const log = { error: (_: unknown, message: string) => { errors.push(message) } } as unknown as FastifyBaseLogger
  const releaser = new IdempotencyReleaser(storage, log, [10, 10, 10])
  t.teardown(() => releaser.close())
  await releaser.complete(SCOPE, 'k', 'token', '{"job_id":"1"}')
  await sleep(100)
  t.same(stored, ['{"job_id":"1"}'], 'stored on the third attempt')
  t.equal(releaser.size, 0)
  t.same(errors, [])

  const never = { async completeIdempotencyKey () { throw away } } as unknown as Storage
  const giving = new IdempotencyReleaser(never, log, [10, 10])
  t.teardown(() => giving.close())
  await giving.complete(SCOPE, 'k', 'token', 'body')
  await sleep(100)
  t.equal(giving.size, 0)
  t.match(errors, [/answer not stored; the key stays held until idempotencyTtl/])
})

t.test('a release that fails, or finds nothing yet, is retried until it releases', async (t) => {
  const f = fakes([away, false, true])
  const releaser = new IdempotencyReleaser(f.storage, f.log, [10, 10, 10, 10])
  t.teardown(() => releaser.close())
  await releaser.release(SCOPE, 'k', 'token')
  t.equal(releaser.size, 1, 'kept for the background')
  await sleep(100)
  t.equal(f.attempts(), 3, 'no attempt after the release')
  t.equal(releaser.size, 0)
  t.same(f.errors, [])
})

t.test('a release that succeeds at once keeps nothing', async (t) => {
  const f = fakes([true])
  const releaser = new IdempotencyReleaser(f.storage, f.log, [10])
  t.teardown(() => releaser.close())
  await releaser.release(SCOPE, 'k', 'token')
  t.equal(releaser.size, 0)
  t.equal(f.attempts(), 1)
})

t.test('after the last retry it gives up, and says so when the storage still failed', async (t) => {
  const failing = fakes([away])
  const a = new IdempotencyReleaser(failing.storage, failing.log, [5, 5])
  await a.release(SCOPE, 'k', 'token')
  await sleep(100)
  t.equal(failing.attempts(), 3, 'once, then one per delay')
  t.equal(a.size, 0)
  t.match(failing.errors, [/claim not released; the key stays held until idempotencyTtl/])

  // Finding nothing to the end: the claim was never written; nothing to say.
  const absent = fakes([false])
  const b = new IdempotencyReleaser(absent.storage, absent.log, [5, 5])
  await b.release(SCOPE, 'k', 'token')
  await sleep(100)
  t.equal(absent.attempts(), 3)
  t.equal(b.size, 0)
  t.same(absent.errors, [])
})

t.test('memory is bounded: beyond maxPending a claim is not kept, and that is logged', async (t) => {
  const f = fakes([away])
  const releaser = new IdempotencyReleaser(f.storage, f.log, [60_000], 2)
  t.teardown(() => releaser.close())
  for (const token of ['a', 'b', 'c']) await releaser.release(SCOPE, token, token)
  t.equal(releaser.size, 2)
  t.match(f.errors, [/too many Idempotency-Key claims to release/])
})

t.test('close makes one last attempt at each claim, then nothing more', async (t) => {
  const f = fakes([away])
  const releaser = new IdempotencyReleaser(f.storage, f.log, [50, 50, 50])
  await releaser.release(SCOPE, 'k1', 'a')
  await releaser.release(SCOPE, 'k2', 'b')
  t.equal(f.attempts(), 2)
  await releaser.close()
  t.equal(f.attempts(), 4, 'one more each')
  t.equal(releaser.size, 0)
  t.match(f.errors, [/claims not released, or answers not stored, at close/])
  await releaser.release(SCOPE, 'k3', 'c')
  t.equal(releaser.size, 0, 'a release after close is tried once and not kept')
  await sleep(200)
  t.equal(f.attempts(), 5, 'no retry after close')
})

t.test('the plugin stops its background releases when it closes', async (t) => {
  const { app, jobs, storage } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'pipeline', [k.id])
  jobs.getPipeline = async () => ({ name: 'refresh', start: async () => { throw new Error('scheduler unavailable') } })
  let releases = 0
  storage.releaseIdempotencyKey = async () => {
    releases++
    throw new Error('database away')
  }
  const res = await app.inject({ method: 'POST', url: PIPELINE_URL, headers: { authorization: `Bearer ${k.key}`, 'idempotency-key': 'x' } })
  t.equal(res.statusCode, 500)
  t.equal(releases, 1)
  await app.close()
  t.equal(releases, 2, 'one last attempt at close')
  await sleep(1200)
  t.equal(releases, 2, 'none after, though the first retry was due after 1 s')
})
