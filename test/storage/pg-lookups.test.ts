import pg from 'pg'
import t, { type Test } from 'tap'
import { PgStorage } from '../../lib/storage/pg-storage.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, type TestApp } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'
import { eventually, limitedKey } from '../limit-fixtures.js'

// PostgreSQL mode's key check: one round trip per request at most, shared by
// the requests that arrive together (LookupBatch), and revocation still on
// the very next request, on every instance, under a crowd.

const url = await pgAvailable(t)
const P = '/api-keys/acme/shop'

interface Counted { app: TestApp['app'], storage: PgStorage, queries: string[], transactions: () => number }

/**
 * An app on a PgStorage whose pool is ours, every `pool.query` recorded (by
 * statement name, else its first words) and every transaction counted; the
 * flush of usage counters waits for the app's close.
 */
async function countedApp (t: Test, schema: string, hold?: (name: string) => Promise<void>): Promise<Counted> {
  const pool = new pg.Pool({ connectionString: url as string, max: 5 })
  t.teardown(() => pool.end())
  const queries: string[] = []
  let transactions = 0
  const query = pool.query.bind(pool) as (config: pg.QueryConfig) => Promise<pg.QueryResult>
  const connect = pool.connect.bind(pool) as (...args: unknown[]) => Promise<pg.PoolClient>
  Object.assign(pool, {
    query: async (config: pg.QueryConfig) => {
      const name = config.name ?? config.text.trim().split(/\s+/).slice(0, 2).join(' ')
      queries.push(name)
      await hold?.(name)
      return query(config)
    },
    // pool.query connects too, with a callback: only the calls without one are transactions.
    connect: (...args: unknown[]) => {
      if (args.length === 0) transactions++
      return connect(...args)
    }
  })
  const storage = new PgStorage({ pool, schema })
  // No failure throttle: a burst of unverified values from one client would be held before its lookups.
  const { app } = await buildApp(t, { storage, usageFlushInterval: 3_600_000, failureThrottle: false })
  return { app, storage, queries, transactions: () => transactions }
}

const get = async (app: TestApp['app'], key: string): Promise<[number, string?]> => {
  const res = await app.inject({ url: DATASET_URL, query: { api_key: key, format: 'json' } })
  return res.statusCode === 200 ? [200] : [res.statusCode, res.json().message]
}

if (url !== null) {
  t.test('one round trip per data request, a named statement; concurrent requests share it', async (t) => {
    const { schema } = await freshSchema(t, url)
    let gate: (() => void) | null = null
    let opened: Promise<void> = Promise.resolve()
    const c = await countedApp(t, schema, async (name) => {
      if (name.startsWith('fde_lookups_')) await opened
    })
    const k = await createKey(c.app, 'client')
    await assignKeys(c.app, 'dataset', [k.id])

    c.queries.length = 0
    const transactions = c.transactions()
    for (let i = 0; i < 5; i++) t.same(await get(c.app, k.key), [200])
    t.equal(c.queries.length, 5, 'five requests one after the other: five queries')
    t.ok(c.queries.every((q) => /^fde_lookups_[0-9a-f]{16}$/.test(q)), 'each the named lookup statement')
    t.equal(c.transactions(), transactions, 'and no transaction')

    // Hold the first lookup's query until all 100 requests have asked for
    // theirs: the first goes alone, 64 go at once in a full batch, the 35
    // left wait for both and go together.
    c.queries.length = 0
    opened = new Promise((resolve) => { gate = resolve })
    const calls: number[] = []
    const find = c.storage.findEndpointKey.bind(c.storage)
    c.storage.findEndpointKey = async (locator, prefix) => {
      calls.push(1)
      if (calls.length === 100) gate?.()
      return find(locator, prefix)
    }
    // One in ten with a wrong secret on the key's prefix: looked up, then refused.
    const wrong = k.key.slice(0, -1) + (k.key.endsWith('a') ? 'b' : 'a')
    const statuses = await Promise.all(Array.from({ length: 100 }, async (_, i) => get(c.app, i % 10 === 0 ? wrong : k.key)))
    t.same(statuses.filter(([s]) => s === 200).length, 90, 'every right key served')
    t.same(statuses.filter(([s]) => s === 403).length, 10, 'every wrong key refused')
    t.equal(calls.length, 100)
    t.same(c.queries.length, 3, '100 concurrent requests: 3 round trips')
  })

  t.test('a key\'s limits on PostgreSQL: a request limit costs one round trip more a call, a download slot two, the day\'s bytes none', async (t) => {
    const { schema } = await freshSchema(t, url)
    const c = await countedApp(t, schema)
    const keys = {
      none: await createKey(c.app, 'none'),
      requests: await limitedKey(c.app, { requestsPerMinute: 100_000 }, 'requests'),
      slots: await limitedKey(c.app, { concurrentDownloads: 5 }, 'slots'),
      bytes: await limitedKey(c.app, { bytesPerDay: 1_000_000_000_000 }, 'bytes')
    }
    await assignKeys(c.app, 'dataset', Object.values(keys).map((k) => k.id))
    const expected: Array<[keyof typeof keys, number]> = [['none', 1], ['requests', 2], ['slots', 3], ['bytes', 1]]
    for (const [name, perRequest] of expected) {
      c.queries.length = 0
      const transactions = c.transactions()
      for (let i = 0; i < 3; i++) t.same(await get(c.app, keys[name].key), [200])
      // A slot is released once its answer has gone out: wait for the count, then check it is exact.
      await eventually(async () => c.queries.length >= 3 * perRequest)
      await new Promise((resolve) => setImmediate(resolve))
      t.equal(c.queries.length, 3 * perRequest, `${name}: ${perRequest} round trip(s) a request (${c.queries.join(', ')})`)
      t.equal(c.transactions(), transactions, `${name}: no transaction`)
    }
  })

  t.test('under a crowd on instance B, a disable or regenerate on instance A is refused by every request B starts after it', async (t) => {
    const { schema } = await freshSchema(t, url)
    const a = await countedApp(t, schema)
    const b = await countedApp(t, schema)
    const k = await createKey(a.app, 'client')
    await assignKeys(a.app, 'dataset', [k.id])
    t.same(await get(b.app, k.key), [200])

    // 20 request loops on B, each answer tagged with the phase at its start:
    // even phases are settled, odd ones a change on A under way (a request
    // begun then may see the change or not).
    let phase = 0
    const seen: Array<{ phase: number, answer: [number, string?] }> = []
    let stop = false
    const crowd = Promise.all(Array.from({ length: 20 }, async () => {
      while (!stop) {
        const at = phase
        seen.push({ phase: at, answer: await get(b.app, k.key) })
      }
    }))
    const after = async (n: number): Promise<void> => {
      const from = seen.length
      while (seen.length < from + n) await new Promise((resolve) => setImmediate(resolve))
    }
    const change = async (method: 'PATCH' | 'POST', url: string, payload?: object): Promise<void> => {
      phase++
      t.equal((await a.app.inject({ method, url, headers: ADMIN, payload })).statusCode, 200)
      phase++
      await after(100)
    }
    await after(50)
    await change('PATCH', `${P}/keys/${k.id}`, { isActive: false })
    await change('PATCH', `${P}/keys/${k.id}`, { isActive: true })
    await change('POST', `${P}/keys/${k.id}/regenerate`)
    stop = true
    await crowd

    const answers = (p: number): string[] => [...new Set(seen.filter((r) => r.phase === p).map((r) => r.answer.join(' ')))]
        t.same(answers(2), ['403 Disabled API key'], 'every request started after the disable is refused')
    t.same(answers(4), ['200'], 'every one after the enable is served')
    t.same(answers(6), ['403 Unknown API key'], 'every one after the regenerate is refused')
  })
}
