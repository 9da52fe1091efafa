import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { bcryptHasher, SqliteStorage, type KeyHasher, type Storage, type UsageBatch } from '../../lib/index.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'

// Verification costs one bcrypt at most and usually none (DESIGN.md §3,
// issue "3 ·"), revocation stays immediate, and no counter increment is lost.

const P = '/api-keys/acme/shop'

/** bcrypt at cost 4, counting comparisons; `delayMs` makes each one slow. */
function spyHasher (delayMs = 0): KeyHasher & { compares: number } {
  const real = bcryptHasher(4)
  const spy = {
    compares: 0,
    hash: real.hash,
    async compare (value: string, hash: string) {
      spy.compares++
      if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs))
      return real.compare(value, hash)
    }
  }
  return spy
}

/**
 * bcrypt at cost 4 whose comparisons wait until the test calls `release()`,
 * however long that is: a bcrypt slower than any hold, without a sleep.
 * `entered` resolves once the first comparison has begun.
 */
function gatedHasher (): KeyHasher & { compares: number, entered: Promise<void>, release: () => void } {
  const real = bcryptHasher(4)
  let release = (): void => {}
  const released = new Promise<void>((resolve) => { release = resolve })
  let enter = (): void => {}
  const entered = new Promise<void>((resolve) => { enter = resolve })
  const gated = {
    compares: 0,
    entered,
    release,
    hash: real.hash,
    async compare (value: string, hash: string) {
      gated.compares++
      enter()
      await released
      return real.compare(value, hash)
    }
  }
  return gated
}

const LOCATOR = { organization: 'acme', project: 'shop', modelSequence: 1, type: 'dataset', resourceSequence: 1 } as const

t.test('one bcrypt for a first request, none for a repeat, whatever the number of keys', async (t) => {
  for (const keyCount of [1, 10, 100]) {
    const hasher = spyHasher()
    const { app } = await buildApp(t, { hasher })
    const keys = []
    for (let i = 0; i < keyCount; i++) keys.push(await createKey(app, `k${i}`))
    await assignKeys(app, 'dataset', keys.map((k) => k.id))
    const last = keys[keys.length - 1]
    const first = await app.inject({ url: DATASET_URL, query: { api_key: last.key, format: 'json' } })
    t.equal(first.statusCode, 200)
    t.equal(hasher.compares, 1, `${keyCount} keys assigned: one comparison for the first request`)
    for (let i = 0; i < 5; i++) await app.inject({ url: DATASET_URL, query: { api_key: last.key, format: 'json' } })
    t.equal(hasher.compares, 1, `${keyCount} keys assigned: none for repeats`)
  }
})

t.test('a wrong secret costs one bcrypt once, then none', async (t) => {
  const hasher = spyHasher()
  const { app } = await buildApp(t, { hasher })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const wrong = k.key.slice(0, 11) + 'w'.repeat(21)
  for (let i = 0; i < 3; i++) {
    const res = await app.inject({ url: DATASET_URL, query: { api_key: wrong } })
    t.same(res.json(), { message: 'Unknown API key' })
  }
  t.equal(hasher.compares, 1)
  const unknownPrefix = await app.inject({ url: DATASET_URL, query: { api_key: 'Q'.repeat(10) + '-' + 'w'.repeat(21) } })
  t.same(unknownPrefix.json(), { message: 'Unknown API key' })
  t.equal(hasher.compares, 1, 'an unknown prefix costs no bcrypt at all')
})

t.test('concurrent first requests with one key share one comparison', async (t) => {
  const hasher = spyHasher(20)
  const { app } = await buildApp(t, { hasher })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const results = await Promise.all(Array.from({ length: 20 }, async () =>
    app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })))
  t.same(results.map((r) => r.statusCode), Array(20).fill(200))
  t.equal(hasher.compares, 1)
})

t.test('revocation is immediate with the memo warm', async (t) => {
  const hasher = spyHasher()
  const { app } = await buildApp(t, { hasher })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const get = async (key: string) => {
    const res = await app.inject({ url: DATASET_URL, query: { api_key: key, format: 'json' } })
    return res.statusCode === 200 ? 200 : res.json().message
  }
  t.equal(await get(k.key), 200)
  t.equal(await get(k.key), 200, 'memo warm')
  await app.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { isActive: false } })
  t.equal(await get(k.key), 'Disabled API key')
  await app.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { isActive: true } })
  t.equal(await get(k.key), 200)
  const renewed = (await app.inject({ method: 'POST', url: `${P}/keys/${k.id}/regenerate`, headers: ADMIN })).json()
  t.equal(await get(k.key), 'Unknown API key', 'regenerated: the old value is refused at once')
  t.equal(await get(renewed.key), 200)
  await app.inject({ method: 'DELETE', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN })
  t.equal(await get(renewed.key), 'Unknown API Endpoint', 'endpoint deleted: refused at once')
  await assignKeys(app, 'dataset', [k.id])
  t.equal(await get(renewed.key), 200)
  await app.inject({ method: 'DELETE', url: `${P}/keys/${k.id}`, headers: ADMIN })
  t.equal(await get(renewed.key), 'Unknown API key', 'deleted: refused at once')
})

t.test('10,000 concurrent requests, then close: calls is exact', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'fde-usage-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const filename = join(dir, 'store.db')
  const { app } = await buildApp(t, { storage: new SqliteStorage({ filename }), usageFlushInterval: 5 })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  // Verified once first, so the burst is about counting only: every request
  // is a memo hit and none waits on a bcrypt (a burst of first requests has
  // its own test below).
  t.equal((await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })).statusCode, 200)
  const total = 10_000
  const results = await Promise.all(Array.from({ length: total }, async () =>
    app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })))
  t.equal(results.filter((r) => r.statusCode === 200).length, total)
  await app.close()

  const reopened = new SqliteStorage({ filename })
  t.teardown(() => reopened.close())
  const endpoint = await reopened.getEndpoint(LOCATOR)
  t.equal(endpoint?.calls, total + 1)
  const key = await reopened.getKey({ organization: 'acme', project: 'shop' }, k.id)
  t.ok(key?.updatedAt instanceof Date, 'updatedAt was written')
})

/**
 * Sends `size` requests at once with `apiKey` from one address, through a
 * throttle with a bound of 50 held `delayMs`, while the hasher's first
 * comparison waits. It is released only once every request has been through
 * the key hook and every hold has ended (a timer as long as the holds, set
 * after theirs, fires after them), so the comparison outlasts the hold.
 */
async function burstOnSlowHasher (t: Test, apiKey: (k: { key: string }) => string, delayMs: number, size = 200) {
  const hasher = gatedHasher()
  let dispatched = 0
  const { app, storage } = await buildApp(t, { hasher, failureThrottle: { maxFailures: 50, windowMs: 60_000, delayMs } }, { genReqId: () => String(++dispatched) })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const before = dispatched
  const burst = Array.from({ length: size }, async () =>
    app.inject({ url: DATASET_URL, query: { api_key: apiKey(k), meta: 'entities' } }))
  await hasher.entered
  // microtasks drained: each request has reached its hold or its comparison
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(dispatched - before, size, 'every request is in the key hook')
  await sleep(delayMs)
  hasher.release()
  const answers = await Promise.all(burst)
  await app.dataEndpoints.flushUsage()
  const statuses: Record<number, number> = {}
  for (const a of answers) statuses[a.statusCode] = (statuses[a.statusCode] ?? 0) + 1
  return { statuses, answers, hasher, calls: (await storage.getEndpoint(LOCATOR))?.calls }
}

t.test('a burst of first requests with a good key on a slow hasher is served whole: calls is exact', async (t) => {
  for (const delayMs of [1, 50]) {
    const { statuses, hasher, calls } = await burstOnSlowHasher(t, (k) => k.key, delayMs)
    t.same(statuses, { 200: 200 }, `held ${delayMs} ms: all served, none refused for the slow comparison`)
    t.equal(hasher.compares, 1, 'one comparison for the whole burst')
    t.equal(calls, 200)
  }
})

t.test('the same burst with a wrong secret on a slow hasher: exactly the bound gets through', async (t) => {
  for (const delayMs of [1, 50]) {
    const { statuses, answers, hasher, calls } = await burstOnSlowHasher(t, (k) => k.key.slice(0, 11) + 'w'.repeat(21), delayMs)
    t.same(statuses, { 403: 50, 429: 150 }, `held ${delayMs} ms`)
    const limited = answers.find((a) => a.statusCode === 429)
    t.same(limited?.json(), { message: 'Too many failed authentication attempts' })
    t.match(limited?.headers['retry-after'], /^[1-9][0-9]*$/)
    t.equal(hasher.compares, 1)
    t.equal(calls, 0)
  }
})

t.test('a held request whose value is being compared goes through when the comparison matches, not when the hold ends', async (t) => {
  const hasher = gatedHasher()
  // a hold far longer than the test may run: waiting it out would time out
  const { app } = await buildApp(t, { hasher, failureThrottle: { maxFailures: 1, windowMs: 60_000, delayMs: 60_000 } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const get = async () => app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })
  const first = get()
  await hasher.entered
  const held = get()
  hasher.release()
  t.same([(await first).statusCode, (await held).statusCode], [200, 200])
  t.equal(hasher.compares, 1)
})

t.test('a held request whose value did not match still waits out the hold', async (t) => {
  const hasher = gatedHasher()
  const { app } = await buildApp(t, { hasher, failureThrottle: { maxFailures: 1, windowMs: 60_000, delayMs: 300 } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const get = async () => app.inject({ url: DATASET_URL, query: { api_key: k.key.slice(0, 11) + 'w'.repeat(21) } })
  const first = get()
  await hasher.entered
  const start = Date.now()
  const held = get()
  hasher.release()
  t.equal((await first).statusCode, 403)
  t.equal((await held).statusCode, 429)
  t.ok(Date.now() - start >= 290, 'answered after the hold, not when the comparison ended')
})

t.test('a failed counter write is retried, not dropped', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'fde-usage-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const filename = join(dir, 'store.db')
  const real = new SqliteStorage({ filename })
  let failures = 3
  const flaky: Storage = Object.assign(Object.create(real) as Storage, {
    async applyUsage (batch: UsageBatch) {
      if (failures > 0) {
        failures--
        throw new Error('database is locked')
      }
      return real.applyUsage(batch)
    }
  })
  const { app } = await buildApp(t, { storage: flaky, usageFlushInterval: 10 })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  for (let i = 0; i < 50; i++) {
    await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })
    if (i % 10 === 0) await new Promise((resolve) => setTimeout(resolve, 15))
  }
  await app.close()
  t.equal(failures, 0, 'the store failed three times')
  const reopened = new SqliteStorage({ filename })
  t.teardown(() => reopened.close())
  const endpoint = await reopened.getEndpoint(LOCATOR)
  t.equal(endpoint?.calls, 50)
})

t.test('repeated failures from one address get 429 with Retry-After, then recover', async (t) => {
  const { app } = await buildApp(t, { failureThrottle: { maxFailures: 5, windowMs: 300, delayMs: 0 } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const wrong = (i: number): string => k.key.slice(0, 11) + String(i).padStart(21, 'x')
  for (let i = 0; i < 5; i++) {
    const res = await app.inject({ url: DATASET_URL, query: { api_key: wrong(i) } })
    t.equal(res.statusCode, 403)
  }
  const limited = await app.inject({ url: DATASET_URL, query: { api_key: wrong(99) } })
  t.equal(limited.statusCode, 429)
  t.same(limited.json(), { message: 'Too many failed authentication attempts' })
  t.match(limited.headers['retry-after'], /^[1-9][0-9]*$/)
  const other = await app.inject({ url: DATASET_URL, query: { api_key: wrong(1) }, remoteAddress: '127.0.0.2' })
  t.equal(other.statusCode, 403, 'another address is not limited')

  await new Promise((resolve) => setTimeout(resolve, 350))
  const recovered = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })
  t.equal(recovered.statusCode, 200, 'the window ends and the client recovers')
})

t.test('a limited address may still use a key already verified; nothing new costs bcrypt', async (t) => {
  const hasher = spyHasher()
  const { app } = await buildApp(t, { hasher, failureThrottle: { maxFailures: 3, windowMs: 60_000, delayMs: 0 } })
  const good = await createKey(app, 'good')
  const fresh = await createKey(app, 'fresh')
  await assignKeys(app, 'dataset', [good.id, fresh.id])
  t.equal((await app.inject({ url: DATASET_URL, query: { api_key: good.key, format: 'json' } })).statusCode, 200)
  for (let i = 0; i < 3; i++) await app.inject({ url: DATASET_URL, query: { api_key: 'nonsense' } })
  const compares = hasher.compares
  t.equal((await app.inject({ url: DATASET_URL, query: { api_key: good.key, format: 'json' } })).statusCode, 200)
  const unverified = await app.inject({ url: DATASET_URL, query: { api_key: fresh.key, format: 'json' } })
  t.equal(unverified.statusCode, 429, 'a key not yet verified waits for the window')
  t.equal(hasher.compares, compares, 'no bcrypt spent for a limited address')
})

t.test('a limited client\'s 429 is held delayMs, so a flood waits instead of taking the event loop', async (t) => {
  const { app } = await buildApp(t, { failureThrottle: { maxFailures: 1, windowMs: 60_000, delayMs: 300 } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  t.equal((await app.inject({ url: DATASET_URL, query: { api_key: 'bad' } })).statusCode, 403)
  const start = Date.now()
  const limited = await app.inject({ url: DATASET_URL, query: { api_key: 'bad' } })
  t.equal(limited.statusCode, 429)
  t.ok(Date.now() - start >= 290, 'answered after the delay')
  t.match(limited.headers['retry-after'], /^[1-9][0-9]*$/)
  const elsewhere = Date.now()
  t.equal((await app.inject({ url: DATASET_URL, query: { api_key: 'bad' }, remoteAddress: '127.0.0.9' })).statusCode, 403)
  t.ok(Date.now() - elsewhere < 290, 'other clients are not held')
})

t.test('IPv6 clients are throttled by their /64: rotating addresses does not dodge the bound', async (t) => {
  const hasher = spyHasher()
  const { app } = await buildApp(t, { hasher, requireHttps: false, failureThrottle: { maxFailures: 5, windowMs: 60_000, delayMs: 0 } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const wrong = (i: number): string => k.key.slice(0, 11) + String(i).padStart(21, 'x')
  const get = async (i: number, remoteAddress: string): Promise<number> =>
    (await app.inject({ url: DATASET_URL, query: { api_key: wrong(i) }, remoteAddress })).statusCode
  const codes = []
  for (let i = 1; i <= 40; i++) codes.push(await get(i, `2001:db8:1:2::${i.toString(16)}`))
  t.same(codes, [...Array(5).fill(403), ...Array(35).fill(429)])
  t.equal(hasher.compares, 5, 'five comparisons, not forty')
  t.equal(await get(41, '2001:DB8:1:2:ffff:0:0:1'), 429, 'upper case, other host bits')
  t.equal(await get(42, '2001:0db8:0001:0002::abcd'), 429, 'leading zeros')
  t.equal(await get(43, '2001:db8:1:3::1'), 403, 'the next /64 is another client')
})

t.test('an IPv4-mapped IPv6 address is throttled as its IPv4 address', async (t) => {
  const { app } = await buildApp(t, { requireHttps: false, failureThrottle: { maxFailures: 2, windowMs: 60_000, delayMs: 0 } })
  const get = async (remoteAddress: string): Promise<number> =>
    (await app.inject({ url: DATASET_URL, query: { api_key: 'bad' }, remoteAddress })).statusCode
  t.equal(await get('::ffff:192.0.2.7'), 403)
  t.equal(await get('::FFFF:c000:207'), 403)
  t.equal(await get('192.0.2.7'), 429)
  t.equal(await get('192.0.2.8'), 403, 'another IPv4 address is not limited')
})

t.test('concurrent wrong secrets from one address: at most maxFailures get through', async (t) => {
  const hasher = spyHasher(20)
  // the guesses all wait in one key's line: room for them all, so only the throttle bounds them
  const { app } = await buildApp(t, { hasher, maxConcurrentHashes: 2, maxQueuedHashesPerKey: 100, failureThrottle: { maxFailures: 5, windowMs: 60_000, delayMs: 0 } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const answers = await Promise.all(Array.from({ length: 60 }, async (_, i) =>
    app.inject({ url: DATASET_URL, query: { api_key: k.key.slice(0, 11) + String(i).padStart(21, 'c') } })))
  t.equal(answers.filter((r) => r.statusCode === 403).length, 5)
  const limited = answers.filter((r) => r.statusCode === 429)
  t.equal(limited.length, 55)
  t.same(limited[0].json(), { message: 'Too many failed authentication attempts' })
  t.match(limited[0].headers['retry-after'], /^[1-9][0-9]*$/)
  t.equal(hasher.compares, 5)
  t.equal((await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })).statusCode, 429, 'the bound is reached')
})

t.test('a verification in flight is released on success and on error', async (t) => {
  const real = new SqliteStorage({ filename: ':memory:' })
  let broken = false
  const flaky: Storage = Object.assign(Object.create(real) as Storage, {
    async findEndpointKey (...args: Parameters<Storage['findEndpointKey']>) {
      if (broken) throw new Error('connection lost')
      return real.findEndpointKey(...args)
    }
  })
  const { app } = await buildApp(t, { storage: flaky, failureThrottle: { maxFailures: 2, windowMs: 60_000, delayMs: 0 } })
  const keys = []
  for (let i = 0; i < 5; i++) keys.push(await createKey(app, `k${i}`))
  await assignKeys(app, 'dataset', keys.map((k) => k.id))
  const get = async (key: string): Promise<number> =>
    (await app.inject({ url: DATASET_URL, query: { api_key: key, format: 'json' } })).statusCode
  for (const k of keys.slice(0, 3)) t.equal(await get(k.key), 200)
  t.same(await Promise.all(keys.slice(3).map(async (k) => get(k.key))), [200, 200], 'two at once')
  broken = true
  for (let i = 0; i < 3; i++) t.equal(await get(keys[0].key), 500)
  broken = false
  t.equal(await get(keys[0].key), 200)
  t.equal(await get('bad'), 403, 'no failure so far, nothing left in flight')
})

t.test('a store may answer a lookup at once, with a promise or with another thenable: the key hook reads each the same', async (t) => {
  for (const answer of ['value', 'promise', 'thenable'] as const) {
    const real = new SqliteStorage({ filename: ':memory:' })
    let lookups = 0
    const store: Storage = Object.assign(Object.create(real) as Storage, {
      findEndpointKey (...args: Parameters<Storage['findEndpointKey']>) {
        lookups++
        const found = real.findEndpointKey(...args) as Awaited<ReturnType<Storage['findEndpointKey']>>
        if (answer === 'value') return found
        if (answer === 'promise') return Promise.resolve(found)
        // a promise library's own kind: then() only
        return { then: (resolve: (v: typeof found) => unknown) => { setImmediate(() => resolve(found)) } } as unknown as Promise<typeof found>
      }
    })
    const { app } = await buildApp(t, { storage: store })
    const k = await createKey(app, answer)
    const other = await createKey(app, `${answer} unassigned`)
    await assignKeys(app, 'dataset', [k.id])
    const get = async (key: string): Promise<[number, unknown]> => {
      const res = await app.inject({ url: DATASET_URL, query: { api_key: key, format: 'json' } })
      return [res.statusCode, res.statusCode === 200 ? null : res.json().message]
    }
    t.same(await get(k.key), [200, null], `${answer}: the assigned key`)
    t.same(await get(k.key), [200, null], `${answer}: again (remembered)`)
    t.same(await get(other.key), [403, 'Unknown API key'], `${answer}: a key not assigned`)
    t.same((await app.inject({ url: '/api/acme/shop/model/9/dataset/9', query: { api_key: k.key } })).json(), { message: 'Unknown API Endpoint' }, `${answer}: no endpoint`)
    t.ok(lookups >= 4, `${answer}: every request looked up`)
    await app.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { isActive: false } })
    t.same(await get(k.key), [403, 'Disabled API key'], `${answer}: disabled on the next request`)
  }
})

t.test('failureThrottle: false never answers 429', async (t) => {
  const { app } = await buildApp(t, { failureThrottle: false })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  for (let i = 0; i < 120; i++) {
    const res = await app.inject({ url: DATASET_URL, query: { api_key: 'bad' } })
    if (res.statusCode !== 403) t.fail(`request ${i} answered ${res.statusCode}`)
  }
  t.pass('120 failures, all 403')
})

t.test('bcrypt work is capped: beyond the queue, 429; verified keys keep working', async (t) => {
  const hasher = spyHasher(100)
  // one key's line could hold them all: the queue's total bounds them
  const { app } = await buildApp(t, { hasher, maxConcurrentHashes: 1, maxQueuedHashes: 2, maxQueuedHashesPerKey: 100, failureThrottle: false })
  const good = await createKey(app, 'good')
  await assignKeys(app, 'dataset', [good.id])
  t.equal((await app.inject({ url: DATASET_URL, query: { api_key: good.key, format: 'json' } })).statusCode, 200)
  const before = hasher.compares

  const flood = Array.from({ length: 10 }, async (_, i) =>
    app.inject({ url: DATASET_URL, query: { api_key: good.key.slice(0, 11) + String(i).padStart(21, 'f') } }))
  const legit = await app.inject({ url: DATASET_URL, query: { api_key: good.key, format: 'json' } })
  t.equal(legit.statusCode, 200, 'a verified key is served during the flood')
  const answers = await Promise.all(flood)
  const busy = answers.filter((r) => r.statusCode === 429)
  t.equal(answers.filter((r) => r.statusCode === 403).length, 3, 'one running and two queued comparisons complete')
  t.equal(busy.length, 7, 'the rest are refused at once')
  t.same(busy[0].json(), { message: 'Too many key verifications in progress' })
  t.equal(busy[0].headers['retry-after'], '1')
  t.equal(hasher.compares - before, 3)
})

t.test('a 429 for a full comparison queue is held delayMs, like the throttle\'s', async (t) => {
  const hasher = gatedHasher()
  const { app } = await buildApp(t, { hasher, maxConcurrentHashes: 1, maxQueuedHashes: 0, failureThrottle: { maxFailures: 50, windowMs: 60_000, delayMs: 300 } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const running = app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })
  await hasher.entered
  const start = Date.now()
  const busy = await app.inject({ url: DATASET_URL, query: { api_key: k.key.slice(0, 11) + 'b'.repeat(21) } })
  t.equal(busy.statusCode, 429)
  t.same(busy.json(), { message: 'Too many key verifications in progress' })
  t.equal(busy.headers['retry-after'], '1')
  t.ok(Date.now() - start >= 290, 'answered after the hold')
  hasher.release()
  t.equal((await running).statusCode, 200)
})
