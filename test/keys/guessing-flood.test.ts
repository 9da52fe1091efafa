import http from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { bcryptHasher, type KeyHasher } from '../../lib/index.js'
import { assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'

// A guessing flood on one key, spread over many addresses so the per-address
// failure throttle cannot see it, must not lock out other keys' first
// requests (issue "9 ·"): real sockets from several 127.x addresses.

interface Answer { status: number, retryAfter: string | undefined, message: string | undefined }

/** A GET from `localAddress` on a connection of its own. */
async function get (port: number, apiKey: string, localAddress: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const path = `${DATASET_URL}?meta=entities&api_key=${apiKey}`
    http.get({ host: '127.0.0.1', port, path, localAddress, agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { body += chunk })
      res.on('end', () => {
        const retryAfter = res.headers['retry-after']
        resolve({ status: res.statusCode ?? 0, retryAfter, message: res.statusCode === 200 ? undefined : JSON.parse(body).message })
      })
    }).on('error', reject)
  })
}

/**
 * bcrypt at cost 4 whose comparisons, once `gate()` is called, each wait
 * until the test releases them one by one, in the order they began;
 * `entered` lists the values of all comparisons in that order.
 */
function steppedHasher (): KeyHasher & { entered: string[], gate: () => void, releaseNext: () => Promise<string>, open: () => void } {
  const real = bcryptHasher(4)
  let gated = false
  const waiting: Array<{ value: string, release: () => void }> = []
  const entered: string[] = []
  let released = 0
  return {
    entered,
    hash: real.hash,
    async compare (value: string, hash: string) {
      entered.push(value)
      if (gated) await new Promise<void>((resolve) => waiting.push({ value, release: resolve }))
      return real.compare(value, hash)
    },
    gate: () => { gated = true },
    /** lets the next comparison to begin run; returns its value */
    async releaseNext () {
      while (waiting.length <= released) await new Promise((resolve) => setImmediate(resolve))
      const next = waiting[released++]
      next.release()
      return next.value
    },
    open: () => {
      gated = false
      for (const { release } of waiting) release()
    }
  }
}

/** Until the server has dispatched `n` requests and settled them into the key hook. */
async function dispatched (count: () => number, n: number): Promise<void> {
  while (count() < n) await new Promise((resolve) => setImmediate(resolve))
  // microtasks drained: each request has been queued or refused
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve))
}

t.test('a flood on one key from many addresses fills only its share: a fresh key is queued, served in turn, answered 200', async (t) => {
  const hasher = steppedHasher()
  let requests = 0
  // One comparison at a time, four waiting in all, two of them for one key;
  // the default failure throttle (50 failures per address per minute).
  const { app } = await buildApp(t, { hasher, maxConcurrentHashes: 1, maxQueuedHashes: 4, maxQueuedHashesPerKey: 2 },
    { genReqId: () => String(++requests) })
  const attacked = await createKey(app, 'attacked')
  const fresh = await createKey(app, 'fresh')
  const verified = await createKey(app, 'verified')
  await assignKeys(app, 'dataset', [attacked.id, fresh.id, verified.id])
  await app.listen({ host: '127.0.0.1', port: 0 })
  const { port } = app.server.address() as AddressInfo
  t.equal((await get(port, verified.key, '127.0.0.1')).status, 200, 'a key verified before the flood')
  const before = requests
  hasher.gate()

  // Guesses at the attacked key, each from its own address 127.0.0.2 ...
  const guess = (i: number): string => attacked.key.slice(0, 11) + String(i).padStart(21, 'g')
  // Sent one after another, so the server sees them in this order.
  let sent = 0
  // (the answer in an object: an async function's result is never a promise)
  const send = async (apiKey: string, localAddress: string): Promise<{ answer: Promise<Answer> }> => {
    const answer = get(port, apiKey, localAddress)
    await dispatched(() => requests - before, ++sent)
    return { answer }
  }
  const flood: Array<Promise<Answer>> = []
  for (let i = 0; i < 6; i++) flood.push((await send(guess(i), `127.0.0.${i + 2}`)).answer)
  // One comparison runs and two wait: the attacked key's share is full.
  const { answer: first } = await send(fresh.key, '127.0.1.1')
  for (let i = 6; i < 8; i++) flood.push((await send(guess(i), `127.0.0.${i + 2}`)).answer)
  const memoHit = await get(port, verified.key, '127.0.2.1')
  t.equal(memoHit.status, 200, 'a key verified before is never queued: answered while every comparison waits')

  // Comparisons in the order they get their slot: the fresh key's line is
  // served after one comparison of the flood's line, not after all of it.
  const order = []
  for (let i = 0; i < 4; i++) order.push(await hasher.releaseNext())
  hasher.open()
  t.same(order, [guess(0), guess(1), fresh.key, guess(2)], 'after the running guess: one more guess, the fresh key, then the flood again')

  t.same(await first, { status: 200, retryAfter: undefined, message: undefined }, 'the fresh key is admitted and served')
  const answers = await Promise.all(flood)
  t.same(answers.map((a) => a.status), [403, 403, 403, 429, 429, 429, 429, 429],
    'three guesses compared (one running, the share of two waiting), the rest refused')
  for (const refused of answers.filter((a) => a.status === 429)) {
    t.same(refused, { status: 429, retryAfter: '1', message: 'Too many key verifications in progress' }, 'a guess beyond the share: 429 with Retry-After')
  }
  t.equal(hasher.entered.length, 5, 'the verified key before the flood, three guesses and the fresh key')
})

t.test('guesses at a few keys hold a share each; the queue as a whole still has a bound', async (t) => {
  const hasher = steppedHasher()
  let requests = 0
  const { app } = await buildApp(t, { hasher, maxConcurrentHashes: 1, maxQueuedHashes: 5, maxQueuedHashesPerKey: 2 },
    { genReqId: () => String(++requests) })
  const attacked = [await createKey(app, 'a'), await createKey(app, 'b')]
  const fresh = [await createKey(app, 'c'), await createKey(app, 'd')]
  await assignKeys(app, 'dataset', [...attacked, ...fresh].map((k) => k.id))
  await app.listen({ host: '127.0.0.1', port: 0 })
  const { port } = app.server.address() as AddressInfo
  hasher.gate()

  const guess = (k: { key: string }, i: number): string => k.key.slice(0, 11) + String(i).padStart(21, 'g')
  const flood: Array<Promise<Answer>> = []
  let address = 2
  // 1 runs; each attacked key holds its share of 2: 4 of 5 places
  for (let i = 0; i < 4; i++) {
    for (const k of attacked) flood.push(get(port, guess(k, i), `127.0.0.${address++}`))
  }
  await dispatched(() => requests, 8)
  const admitted = get(port, fresh[0].key, '127.0.1.1')
  await dispatched(() => requests, 9)
  const refused = await get(port, fresh[1].key, '127.0.1.2')
  t.same(refused, { status: 429, retryAfter: '1', message: 'Too many key verifications in progress' },
    'the fifth place taken, the next key is refused: the total bound holds')
  hasher.open()
  t.equal((await admitted).status, 200, 'the key that found the last place is served')
  const statuses = (await Promise.all(flood)).map((a) => a.status).sort()
  t.same(statuses, [403, 403, 403, 403, 403, 429, 429, 429], 'one running and two waiting for each attacked key')
  t.equal((await get(port, fresh[1].key, '127.0.1.2')).status, 200, 'its retry, once there is room, is served')
})
