import { isDeepStrictEqual } from 'node:util'
import fc from 'fast-check'
import pg from 'pg'
import t, { type Test } from 'tap'
import { PgStorage } from '../../lib/storage/pg-storage.js'
import type { EndpointLocator } from '../../lib/storage/storage.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, type TestApp } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'
import { eventually, limitedKey } from '../limit-fixtures.js'

// PostgreSQL mode's key check: one round trip per request at most, shared by
// the requests that arrive together (LookupBatch), answered from a memo that
// the same round trip confirms (lookup_changes), and revocation still on the
// very next request, on every instance, under a crowd.

const url = await pgAvailable(t)
const P = '/api-keys/acme/shop'

interface Counted {
  app: TestApp['app']
  storage: PgStorage
  queries: string[]
  transactions: () => number
  /** each lookup statement's `answers` as the driver read them: null when the memo answered */
  lookupAnswers: unknown[]
}

/**
 * An app on a PgStorage whose pool is ours, every query recorded, through
 * the pool or on a connection taken from it (by statement name, else its
 * first words), and every transaction counted; the flush of usage counters
 * waits for the app's close.
 */
async function countedApp (t: Test, schema: string, hold?: (name: string) => Promise<void>): Promise<Counted> {
  const pool = new pg.Pool({ connectionString: url as string, max: 5 })
  t.teardown(() => pool.end())
  const queries: string[] = []
  let transactions = 0
  const lookupAnswers: unknown[] = []
  // A connection's query, recorded: the store passes a text alone, a config,
  // or (the lookup statement) a pg Submittable with a callback, answered
  // through the callback with the row's columns as text.
  const recorded = (query: (...args: unknown[]) => unknown) => (...args: unknown[]): unknown => {
    const [config, callback] = args as [pg.QueryConfig | string, unknown]
    const text = typeof config === 'string' ? config : config.text
    const name = (typeof config === 'string' ? undefined : config.name) ?? text.trim().split(/\s+/).slice(0, 2).join(' ')
    if (name === 'BEGIN') transactions++
    queries.push(name)
    const held = hold?.(name) ?? Promise.resolve()
    if (typeof callback !== 'function') return held.then(() => query(...args))
    const answer = callback as (err: Error | null, row?: Array<string | null>) => void
    const recording = (err: Error | null, row?: Array<string | null>): void => {
      if (name.startsWith('fde_lookups_') && err === null) lookupAnswers.push(row?.[2] == null ? null : JSON.parse(row[2]))
      answer(err, row)
    }
    void held.then(() => query(config, recording))
    return config
  }
  const wrapped = new WeakSet<pg.PoolClient>()
  const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>
  const wrap = (client: pg.PoolClient): pg.PoolClient => {
    if (!wrapped.has(client)) {
      wrapped.add(client)
      client.query = recorded(client.query.bind(client) as (...args: unknown[]) => unknown) as typeof client.query
    }
    return client
  }
  Object.assign(pool, {
    // Through a taken connection, whose query records it.
    query: async (config: pg.QueryConfig) => {
      const client = wrap(await connect())
      try {
        const result = await client.query(config)
        client.release()
        return result
      } catch (err) {
        client.release(err as Error)
        throw err
      }
    },
    connect: async () => wrap(await connect())
  })
  const storage = new PgStorage({ pool, schema })
  // No failure throttle: a burst of unverified values from one client would be held before its lookups.
  const { app } = await buildApp(t, { storage, usageFlushInterval: 3_600_000, failureThrottle: false })
  return { app, storage, queries, transactions: () => transactions, lookupAnswers }
}

const get = async (app: TestApp['app'], key: string): Promise<[number, string?]> => {
  const res = await app.inject({ url: DATASET_URL, query: { api_key: key, format: 'json' } })
  return res.statusCode === 200 ? [200] : [res.statusCode, res.json().message]
}

/** A migrated PgStorage on a pool of its own (`config` added to the pool's), in a fresh schema, with that schema's client. */
async function migratedStorage (t: Test, max: number, config: pg.PoolConfig = {}): Promise<{ client: pg.Client, schema: string, pool: pg.Pool, storage: PgStorage }> {
  const { client, schema } = await freshSchema(t, url as string)
  const pool = new pg.Pool({ ...config, connectionString: url as string, max })
  t.teardown(() => pool.end())
  const storage = new PgStorage({ pool, schema })
  await storage.migrate()
  return { client, schema, pool, storage }
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
    // theirs, all in one turn of the event loop: 64 go at once in a full
    // batch, the 36 left wait for it and go together.
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
    t.same(c.queries.length, 2, '100 concurrent requests: 2 round trips')
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

  t.test('a remembered lookup answers what the database says after any change, made by any instance or by hand in SQL', async (t) => {
    // The memo is confirmed by the change log, which triggers write for every
    // statement that changes a key, an assignment or an endpoint's place. Each
    // step below changes the database by hand, as a DBA or another version
    // might, or asks something that must not count as a change; then a crowd
    // of lookups on the remembering instance must equal a fresh instance's.
    const { client, schema, pool, storage: remembering } = await migratedStorage(t, 4)
    const PREFIXES = ['AAAAAAAAAA', 'BBBBBBBBBB', 'CCCCCCCCCC', 'DDDDDDDDDD']
    const KEYS = ['k0', 'k1', 'k2']
    const ENDPOINTS = ['e1', 'e2', 'e3']
    const locatorOf = (r: number, organization = 'acme'): EndpointLocator =>
      ({ organization, project: 'shop', modelSequence: 1, type: 'dataset', resourceSequence: r })
    const reset = async (): Promise<void> => {
      await client.query('TRUNCATE endpoint_keys, endpoints, api_keys CASCADE')
      for (const [i, id] of KEYS.entries()) {
        await client.query(`INSERT INTO api_keys (id, organization, project, prefix, hash, purpose, is_active, created_at)
          VALUES ($1, 'acme', 'shop', $2, 'hash-' || $1, 'p', true, now())`, [id, PREFIXES[i]])
      }
      for (const [i, id] of ENDPOINTS.entries()) {
        await client.query(`INSERT INTO endpoints (id, organization, project, model_sequence, type, resource_sequence, calls, created_at)
          VALUES ($1, 'acme', 'shop', 1, 'dataset', $2, 0, now())`, [id, i + 1])
      }
      await client.query("INSERT INTO endpoint_keys (endpoint_id, key_id) VALUES ('e1', 'k0'), ('e1', 'k1'), ('e2', 'k0')")
    }
    const key = fc.constantFrom(...KEYS)
    const endpoint = fc.constantFrom(...ENDPOINTS)
    type Step = [string, unknown[]]
    const step: fc.Arbitrary<Step> = fc.oneof(
      fc.tuple(key, fc.boolean()).map(([k, on]): Step => ['UPDATE api_keys SET is_active = $2 WHERE id = $1', [k, on]]),
      fc.tuple(key, fc.nat(9)).map(([k, n]): Step => ['UPDATE api_keys SET hash = $2 WHERE id = $1', [k, `hash-${n}`]]),
      fc.tuple(key, fc.constantFrom(...PREFIXES)).map(([k, p]): Step =>
        ['UPDATE api_keys SET prefix = $2 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM api_keys WHERE prefix = $2)', [k, p]]),
      fc.tuple(key, fc.option(fc.integer({ min: 1, max: 1000 }))).map(([k, n]): Step => ['UPDATE api_keys SET requests_per_minute = $2 WHERE id = $1', [k, n]]),
      fc.tuple(key, fc.option(fc.integer({ min: 1, max: 1000 }))).map(([k, n]): Step => ['UPDATE api_keys SET concurrent_downloads = $2 WHERE id = $1', [k, n]]),
      fc.tuple(key, fc.option(fc.integer({ min: 1, max: 1000 }))).map(([k, n]): Step => ['UPDATE api_keys SET bytes_per_day = $2 WHERE id = $1', [k, n]]),
      fc.tuple(key, fc.option(fc.oneof(fc.integer({ min: 0, max: 4_000_000_000_000 }).map((ms) => new Date(ms).toISOString()), fc.constantFrom('infinity', '-infinity'))))
        .map(([k, at]): Step => ['UPDATE api_keys SET expires_at = $2::timestamptz WHERE id = $1', [k, at]]),
      fc.tuple(key, endpoint).map(([k, e]): Step => ['INSERT INTO endpoint_keys (endpoint_id, key_id) SELECT $2, $1 WHERE EXISTS (SELECT 1 FROM api_keys WHERE id = $1) AND EXISTS (SELECT 1 FROM endpoints WHERE id = $2) ON CONFLICT DO NOTHING', [k, e]]),
      fc.tuple(key, endpoint).map(([k, e]): Step => ['DELETE FROM endpoint_keys WHERE key_id = $1 AND endpoint_id = $2', [k, e]]),
      key.map((k): Step => ['DELETE FROM api_keys WHERE id = $1', [k]]),
      fc.tuple(key, fc.constantFrom(...PREFIXES)).map(([k, p]): Step => [`INSERT INTO api_keys (id, organization, project, prefix, hash, purpose, is_active, created_at)
        VALUES ($1, 'acme', 'shop', $2, 'hash-new', 'p', true, now()) ON CONFLICT DO NOTHING`, [k, p]]),
      endpoint.map((e): Step => ['DELETE FROM endpoints WHERE id = $1', [e]]),
      fc.tuple(endpoint, fc.integer({ min: 1, max: 4 })).map(([e, r]): Step => [`INSERT INTO endpoints (id, organization, project, model_sequence, type, resource_sequence, calls, created_at)
        VALUES ($1, 'acme', 'shop', 1, 'dataset', $2, 0, now()) ON CONFLICT DO NOTHING`, [e, r]]),
      fc.tuple(endpoint, fc.integer({ min: 1, max: 4 })).map(([e, r]): Step => ['UPDATE endpoints SET resource_sequence = $2 WHERE id = $1', [e, r]]),
      // What is not a change to a lookup: a key used, an endpoint's calls counted.
      key.map((k): Step => ['UPDATE api_keys SET updated_at = now() WHERE id = $1', [k]]),
      endpoint.map((e): Step => ['UPDATE endpoints SET calls = calls + 1 WHERE id = $1', [e]])
    )
    // Every prefix (and none) on every place an endpoint can be, and one
    // elsewhere: asked together, as a crowd's requests are.
    const LOOKUPS: Array<[EndpointLocator, string | null]> = [1, 2, 3, 4].flatMap((r) => [...PREFIXES, null].map((p): [EndpointLocator, string | null] => [locatorOf(r), p]))
    LOOKUPS.push([locatorOf(1, 'other'), PREFIXES[0]])
    const ask = async (storage: PgStorage): Promise<unknown[]> => await Promise.all(LOOKUPS.map(async ([l, p]) => await storage.findEndpointKey(l, p)))
    let runs = 0
    await fc.assert(fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 12 }), async (steps) => {
      await reset()
      runs++
      // Asked before each change too, so that the memo holds the answers the change makes stale.
      await ask(remembering)
      for (const [sql, params] of steps) {
        // (A statement that fails, say on a unique prefix, changes nothing.)
        await client.query(sql, params).catch(() => {})
        const answers = await ask(remembering)
        // A new instance remembers nothing: the database's answers.
        const reference = new PgStorage({ pool, schema })
        const expected = await ask(reference)
        await reference.close()
        for (const [i, [l, p]] of LOOKUPS.entries()) {
          const expires = (answers[i] as { key?: { expiresAt?: unknown } } | null)?.key?.expiresAt
          if (expires !== undefined && expires !== null && typeof expires !== 'number') throw new Error(`an expiry read as ${typeof expires}`)
          if (!isDeepStrictEqual(answers[i], expected[i])) {
            throw new Error(`after ${sql} ${JSON.stringify(params)}: ${JSON.stringify([l.organization, l.resourceSequence, p])} answered ${JSON.stringify(answers[i])}, the database ${JSON.stringify(expected[i])}`)
          }
        }
      }
    }), { numRuns: 40 })
    t.equal(runs, 40, '40 runs of up to 12 changes, each between two crowds of lookups: every answer the database\'s')
  })

  t.test('a remembered lookup costs the database no read of the key; a change costs the next batch a read of every lookup in it', async (t) => {
    const { client, schema } = await freshSchema(t, url)
    const c = await countedApp(t, schema)
    const k = await createKey(c.app, 'client')
    await assignKeys(c.app, 'dataset', [k.id])
    t.same(await get(c.app, k.key), [200])
    c.lookupAnswers.length = 0
    const seen = c.lookupAnswers
    t.same(await get(c.app, k.key), [200])
    t.same(seen, [null], 'asked again: answered from the memo, confirmed in the same round trip')
    await client.query('UPDATE api_keys SET is_active = false WHERE id = $1', [k.id])
    t.same(await get(c.app, k.key), [403, 'Disabled API key'], 'a disable by hand in SQL: refused on the next request')
    t.equal((seen[1] as unknown[]).length, 1, 'that request\'s batch read its lookup')
    t.same(await get(c.app, k.key), [403, 'Disabled API key'])
    t.same(seen[2], null, 'and the one after is remembered again')
    const logged = await client.query('SELECT count(*)::int AS n FROM lookup_changes')
    t.ok(logged.rows[0].n >= 1, 'the change is in the log')
  })

  t.test('the lookups are read by a function of the schema, in the lookup statement\'s snapshot, whatever the caller\'s search_path', async (t) => {
    // A decoy schema first on the pool's search_path, with empty tables of the same names.
    const decoy = `fde_decoy_${process.pid}_${Math.random().toString(36).slice(2, 8)}`
    const { client, schema, storage } = await migratedStorage(t, 4, { options: `-c search_path="${decoy}"` })
    await client.query(`CREATE SCHEMA "${decoy}"`)
    t.teardown(async () => { await client.query(`DROP SCHEMA "${decoy}" CASCADE`) })
    for (const table of ['endpoints', 'endpoint_keys', 'api_keys', 'usage_daily']) {
      await client.query(`CREATE TABLE "${decoy}".${table} (LIKE "${schema}".${table})`)
    }
    const { app } = await buildApp(t, { storage, usageFlushInterval: 3_600_000, failureThrottle: false })
    const k = await createKey(app, 'client')
    await assignKeys(app, 'dataset', [k.id])
    t.same(await get(app, k.key), [200], 'the schema\'s tables are read, not the decoy\'s')
    const { rows } = await client.query(`SELECT p.provolatile, p.proconfig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = $1 AND p.proname = 'lookup_answers'`, [schema])
    t.equal(rows.length, 1)
    t.equal(rows[0].provolatile, 's', 'STABLE: it reads in the snapshot of the statement that calls it, the one the memo is stamped with')
    t.match(rows[0].proconfig, [new RegExp(`^search_path="?${schema}"?$`)], 'its search_path fixed when it was made')
  })

  t.test('a role allowed to change a key need not be allowed to write the change log: the note is written as the schema\'s owner', async (t) => {
    const { client, schema } = await freshSchema(t, url)
    const storage = new PgStorage({ connectionString: url, schema })
    t.teardown(() => storage.close())
    await storage.migrate()
    const role = `fde_editor_${process.pid}_${Math.random().toString(36).slice(2, 8)}`
    try {
      await client.query(`CREATE ROLE ${role} NOLOGIN`)
    } catch (err) {
      t.pass(`cannot create a role here (${(err as Error).message}): needs CREATEROLE`, { skip: true })
      return
    }
    t.teardown(async () => {
      await client.query('RESET ROLE')
      await client.query(`DROP OWNED BY ${role}`)
      await client.query(`DROP ROLE ${role}`)
    })
    await client.query(`INSERT INTO api_keys (id, organization, project, prefix, hash, purpose, is_active, created_at)
      VALUES ('k', 'acme', 'shop', 'AAAAAAAAAA', 'h', 'p', true, now())`)
    await client.query(`GRANT USAGE ON SCHEMA "${schema}" TO ${role}`)
    await client.query(`GRANT SELECT, UPDATE ON api_keys TO ${role}`)
    await client.query(`SET ROLE ${role}`)
    await client.query("UPDATE api_keys SET is_active = false WHERE id = 'k'")
    await t.rejects(client.query('INSERT INTO lookup_changes (xid) VALUES (pg_current_xact_id())'), { code: '42501' }, 'the role itself cannot write the log')
    await client.query('RESET ROLE')
    t.equal((await client.query('SELECT count(*)::int AS n FROM lookup_changes')).rows[0].n, 2, 'the insert and the disable are noted')
  })

  t.test('an instance on the caller\'s pool takes its error listener off the pool when it closes', async (t) => {
    const pool = new pg.Pool({ connectionString: url, max: 1 })
    t.teardown(() => pool.end())
    const before = pool.listenerCount('error')
    const storages = Array.from({ length: 3 }, () => new PgStorage({ pool, schema: 'unused' }))
    t.equal(pool.listenerCount('error'), before + 3)
    for (const storage of storages) await storage.close()
    t.equal(pool.listenerCount('error'), before, 'none left behind')
  })

  t.test('lookups no stored text can equal (a NUL, a lone surrogate) find nothing, and do not fail the others of their batch', async (t) => {
    const { schema } = await freshSchema(t, url)
    const c = await countedApp(t, schema)
    const k = await createKey(c.app, 'client')
    await assignKeys(c.app, 'dataset', [k.id])
    const locator: EndpointLocator = { organization: 'acme', project: 'shop', modelSequence: 1, type: 'dataset', resourceSequence: 1 }
    const prefix = k.key.slice(0, 10)
    const answers = await Promise.all([
      c.storage.findEndpointKey(locator, prefix),
      c.storage.findEndpointKey({ ...locator, organization: 'acme\ud800' }, prefix),
      c.storage.findEndpointKey({ ...locator, project: 'shop\u0000' }, prefix),
      c.storage.findEndpointKey(locator, 'AAAA\udc00AAAAA'),
      c.storage.findEndpointKey(locator, prefix)
    ])
    t.equal(answers[0]?.key?.id, k.id)
    t.same(answers.slice(1, 3), [null, null], 'no such endpoint')
    t.equal(answers[3]?.key, null, 'the endpoint, and no key of that prefix')
    t.equal(answers[4]?.key?.id, k.id)
  })

  t.test('the change log is pruned of what no memo can need: the transactions a snapshot at least ten minutes old saw', async (t) => {
    const { client, storage } = await migratedStorage(t, 2)
    const locator: EndpointLocator = { organization: 'acme', project: 'shop', modelSequence: 1, type: 'dataset', resourceSequence: 1 }
    // What a lookup does in the background once ten minutes have gone by, done here and waited for.
    const internals = storage as unknown as { changeLogPruned: number, pruneChangeLog: () => Promise<void> }
    const prune = async (): Promise<void> => {
      internals.changeLogPruned = 0
      await internals.pruneChangeLog()
    }
    const xids = async (): Promise<string[]> => (await client.query('SELECT xid::text FROM lookup_changes ORDER BY xid')).rows.map((r) => r.xid)
    await client.query("INSERT INTO endpoints (id, organization, project, model_sequence, type, resource_sequence, calls, created_at) VALUES ('e1', 'acme', 'shop', 1, 'dataset', 1, 0, now())")
    const [inserted] = await xids()
    await prune()
    t.same(await xids(), [inserted], 'the first pruning has no older snapshot: it deletes nothing, and takes one')
    await client.query("UPDATE endpoints SET resource_sequence = 2 WHERE id = 'e1'")
    const moved = (await xids()).find((x) => x !== inserted)
    await prune()
    t.ok((await xids()).includes(moved as string), 'a change after the snapshot it prunes by stays')
    t.equal(await storage.findEndpointKey(locator, null), null, 'and the lookups see the change')
    // Other sessions' open transactions hold a snapshot's horizon back: in time, every row goes.
    t.ok(await eventually(async () => {
      await prune()
      return (await xids()).length === 0
    }), 'then each is pruned')
    internals.changeLogPruned = 0
    await storage.findEndpointKey(locator, null)
    t.ok(internals.changeLogPruned > 0, 'a lookup starts the pruning once its time has come')
  })
}
