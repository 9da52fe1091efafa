import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import t, { type Test } from 'tap'
import { MIGRATIONS, PgStorage } from '../../lib/storage/pg-storage.js'
import { buildApp } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'
import { storageContract } from '../storage-contract.js'

// PgStorage against the shared storage contract, plus what only PostgreSQL
// has: migrations shared by several instances, the pool, statement timeouts.

const url = await pgAvailable(t)
const AUDIT = { actor: 'test' }

async function adminClient (t: Test, connectionString: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString })
  await client.connect()
  t.teardown(() => client.end())
  return client
}

if (url !== null) {
  const schema = (await freshSchema(t, url)).schema
  await storageContract(t, 'PgStorage', async () => new PgStorage({ connectionString: url, schema, poolSize: 4 }), {
    shared: true,
    fresh: async (t) => new PgStorage({ connectionString: url, schema: (await freshSchema(t, url)).schema, poolSize: 2 })
  })

  const project = { organization: 'acme', project: 'shop' }
  const locator = { ...project, modelSequence: 1, type: 'dataset' as const, resourceSequence: 1 }

  t.test('keys of one endpoint deleted at once on two instances, while counters are flushed: entries that chain, no deadlock', async (t) => {
    const own = (await freshSchema(t, url)).schema
    const [a, b] = [new PgStorage({ connectionString: url, schema: own }), new PgStorage({ connectionString: url, schema: own })]
    t.teardown(async () => { await a.close(); await b.close() })
    for (let round = 0; round < 10; round++) {
      const p = { organization: `o${round}`, project: 'shop' }
      const keys = await Promise.all([1, 2, 3].map(async (i) => a.createKey({ ...p, prefix: `R${round}K${i}`.padEnd(10, 'x'), hash: 'h', purpose: 'p', isActive: true, expiresAt: null }, AUDIT)))
      const put = await a.putEndpoint({ ...p, modelSequence: 1, type: 'dataset', resourceSequence: 1 }, keys.map((k) => k.id), AUDIT)
      if (!put.ok) throw new Error('putEndpoint refused')
      const endpointId = put.endpoint.id
      const flush = (keyId: string): Promise<void> => b.applyUsage({
        calls: new Map([[endpointId, 1]]), lastUsed: new Map([[keyId, new Date()]]), counts: new Map()
      })
      await Promise.all([a.deleteKey(p, keys[0].id, AUDIT), b.deleteKey(p, keys[1].id, AUDIT), flush(keys[0].id), flush(keys[1].id), flush(keys[2].id)])
      const entries = (await a.listAudit(p, { limit: 100 })).filter((e) => e.action === 'endpoint.updated').reverse()
      const [first, second] = entries.map((e) => e.changes.keyIds as { from: string[], to: string[] })
      t.equal(entries.length, 2, `round ${round}: one entry per deletion`)
      t.same(second?.from, first?.to, `round ${round}: the second starts where the first ended`)
      t.same(second?.to, [keys[2].id], `round ${round}: and ends on the key left`)
    }
  })

  t.test('a usage transaction this server never had (a failover to a replica behind) counts as not written', async (t) => {
    const { schema: own, client } = await freshSchema(t, url)
    const storage = new PgStorage({ connectionString: url, schema: own })
    t.teardown(() => storage.close())
    await storage.migrate()
    const { rows } = await client.query<{ xid: string }>('SELECT (txid_current() + 1000000)::text AS xid')
    // The question PgStorage asks after a COMMIT went unanswered.
    const fate = await (storage as unknown as { usageFate: (s: { xid: string, pid: number }) => Promise<string> })
      .usageFate({ xid: rows[0].xid, pid: 0 })
    t.equal(fate, 'not written')
  })

  t.test('audit entries stay newest first, and their pages whole, when ids gain a digit', async (t) => {
    const { schema: own, client } = await freshSchema(t, url)
    const storage = new PgStorage({ connectionString: url, schema: own })
    t.teardown(() => storage.close())
    await storage.migrate()
    await client.query(`SELECT setval(pg_get_serial_sequence('"${own}".audit_log', 'id'), 994)`)
    const key = await storage.createKey({ ...project, prefix: 'DDDDDDDDDD', hash: 'h', purpose: 'p', isActive: true, expiresAt: null }, AUDIT)
    for (let i = 0; i < 9; i++) await storage.updateKey(project, key.id, { purpose: `p${i}` }, AUDIT)
    const all = (await storage.listAudit(project, { limit: 100 })).map((e) => e.id)
    t.same(all, ['1004', '1003', '1002', '1001', '1000', '999', '998', '997', '996', '995'], 'newest first, by number')
    const pages: string[] = []
    for (let before: string | undefined; ;) {
      const page = await storage.listAudit(project, { before, limit: 4 })
      if (page.length === 0) break
      pages.push(...page.map((e) => e.id))
      before = page[page.length - 1].id
    }
    t.same(pages, all, 'pages of 4 walk them all once')
  })

  t.test('migrations are versioned; a new instance on the same schema applies nothing again', async (t) => {
    const { schema: own, client: admin } = await freshSchema(t, url)
    const first = new PgStorage({ connectionString: url, schema: own })
    t.teardown(() => first.close())
    await first.migrate()
    const query = `SELECT version, applied_at FROM "${own}".schema_migrations ORDER BY version`
    const applied = (await admin.query(query)).rows
    t.ok(applied.length >= 1)
    t.same(applied.map((r) => r.version), applied.map((_, i) => i + 1), 'versions 1..n, each once')
    await first.createKey({ ...project, prefix: 'CCCCCCCCCC', hash: 'h', purpose: 'kept', isActive: true, expiresAt: null }, AUDIT)

    const second = new PgStorage({ connectionString: url, schema: own })
    t.teardown(() => second.close())
    await second.migrate()
    t.same((await admin.query(query)).rows, applied, 'same rows, same times: nothing re-applied')
    t.same((await second.listKeys(project)).map((k) => k.purpose), ['kept'], 'data kept')
  })

  /** The schema as the version with the first `version` migrations left it. */
  async function schemaAtVersion (admin: pg.Client, own: string, version: number): Promise<void> {
    await admin.query(`SET search_path TO "${own}"`)
    await admin.query('CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())')
    for (const [i, sql] of MIGRATIONS.slice(0, version).entries()) {
      await admin.query(sql)
      await admin.query('INSERT INTO schema_migrations (version) VALUES ($1)', [i + 1])
    }
    await admin.query('RESET search_path')
  }

  t.test('a schema from before claim tokens is migrated: its claims stay held, new ones carry tokens', async (t) => {
    const { schema: own, client: admin } = await freshSchema(t, url)
    await schemaAtVersion(admin, own, 1)
    await admin.query(`INSERT INTO "${own}".idempotency_keys VALUES ('e', 'held', NULL, now())`)

    const s = new PgStorage({ connectionString: url, schema: own })
    t.teardown(() => s.close())
    const scope = { endpointId: 'e', keyId: 'k' }
    t.same(await s.claimIdempotencyKey(scope, 'held', 60_000, 'new'), { claimed: false, response: null }, 'the old claim is still held')
    t.same((await admin.query(`SELECT version FROM "${own}".schema_migrations ORDER BY version`)).rows,
      MIGRATIONS.map((_, i) => ({ version: i + 1 })), 'every migration applied')
    t.equal(await s.releaseIdempotencyKey(scope, 'held', 'new'), false, 'and no token releases it')
    t.same(await s.claimIdempotencyKey(scope, 'fresh', 60_000, 'new'), { claimed: true })
    t.equal(await s.releaseIdempotencyKey(scope, 'fresh', 'new'), true, 'a new claim is released by its token')
  })

  t.test('a schema from before records were per key: its records hold for the whole endpoint until they expire', async (t) => {
    const { schema: own, client: admin } = await freshSchema(t, url)
    await schemaAtVersion(admin, own, 3)
    await admin.query(`INSERT INTO "${own}".idempotency_keys (endpoint_id, idempotency_key, response, created_at, claim_token) VALUES
      ('e', 'answered', '{"job_id":"1"}', now(), 't1'), ('e', 'running', NULL, now(), 't2'),
      ('e', 'stale', '{"job_id":"0"}', now() - interval '2 minutes', 't3')`)

    const s = new PgStorage({ connectionString: url, schema: own })
    t.teardown(() => s.close())
    for (const keyId of ['k1', 'k2']) {
      const scope = { endpointId: 'e', keyId }
      t.same(await s.claimIdempotencyKey(scope, 'answered', 60_000, 'x'), { claimed: false, response: '{"job_id":"1"}' }, `${keyId}: the answer is replayed`)
      t.same(await s.claimIdempotencyKey(scope, 'running', 60_000, 'x'), { claimed: false, response: null }, `${keyId}: the claim is still held`)
    }
    t.same(await s.claimIdempotencyKey({ endpointId: 'e', keyId: 'k1' }, 'stale', 60_000, 'x'), { claimed: true }, 'an expired one is not answered')
    t.same(await s.claimIdempotencyKey({ endpointId: 'e', keyId: 'k2' }, 'stale', 60_000, 'y'), { claimed: true }, 'and the new records are per key')
    t.same(await s.claimIdempotencyKey({ endpointId: 'other', keyId: 'k1' }, 'answered', 60_000, 'z'), { claimed: true }, 'on its own endpoint only')
  })

  t.test('instances starting at once on a missing schema create it and apply each migration exactly once', async (t) => {
    const { schema: own, client: admin } = await freshSchema(t, url)
    await admin.query(`DROP SCHEMA "${own}"`)
    const storages = Array.from({ length: 6 }, () => new PgStorage({ connectionString: url, schema: own, poolSize: 1 }))
    t.teardown(() => Promise.all(storages.map((s) => s.close())))
    const results = await Promise.allSettled(storages.map((s) => s.migrate()))
    t.same(results.map((r) => r.status), Array(6).fill('fulfilled'), 'no instance fails to start')
    const versions = (await admin.query(`SELECT version FROM "${own}".schema_migrations ORDER BY version`)).rows
    t.same(versions.map((r) => r.version), versions.map((_, i) => i + 1))
    t.same(await storages[5].listKeys(project), [], 'usable by every instance')
  })

  t.test('a role that owns its schema but may not create schemas can migrate and work', async (t) => {
    const { schema: own, client: admin } = await freshSchema(t, url)
    const role = `fde_${own}`.slice(0, 63)
    await admin.query(`CREATE ROLE "${role}" LOGIN`)
    t.teardown(async () => {
      await admin.query(`ALTER SCHEMA "${own}" OWNER TO CURRENT_USER`)
      await admin.query(`DROP OWNED BY "${role}"`)
      await admin.query(`DROP ROLE "${role}"`)
    })
    await admin.query(`ALTER SCHEMA "${own}" OWNER TO "${role}"`)
    const asRole = new URL(url)
    asRole.username = role
    asRole.password = ''
    const s = new PgStorage({ connectionString: asRole.toString(), schema: own })
    t.teardown(() => s.close())
    await s.migrate()
    t.same(await s.listKeys(project), [])
  })

  t.test('findEndpointKey is one named prepared statement, parsed once per connection', async (t) => {
    const pool = new pg.Pool({ connectionString: url, max: 1 })
    t.teardown(() => pool.end())
    const s = new PgStorage({ pool, schema })
    t.teardown(() => s.close())
    const key = await s.createKey({ ...project, prefix: 'DDDDDDDDDD', hash: 'h', purpose: 'p', isActive: true, expiresAt: null }, AUDIT)
    await s.putEndpoint(locator, [key.id], AUDIT)
    t.equal((await s.findEndpointKey(locator, 'DDDDDDDDDD'))?.key?.id, key.id)
    t.equal((await s.findEndpointKey(locator, 'EEEEEEEEEE'))?.key, null)
    // One connection in the pool: this sees that session's statements.
    const { rows } = await pool.query("SELECT name, statement FROM pg_prepared_statements WHERE name LIKE 'fde_lookup_%'")
    t.equal(rows.length, 1, 'one prepared lookup')
    t.match(rows[0].statement, `"${schema}".lookup_changes`, 'on this storage\'s schema: its change log')
    t.match(rows[0].statement, `"${schema}".lookup_answers(`, 'and its function that reads the lookups')
  })

  t.test('a pool passed in stays the caller\'s: close() leaves it open', async (t) => {
    const pool = new pg.Pool({ connectionString: url, max: 2 })
    t.teardown(() => pool.end())
    const s = new PgStorage({ pool, schema })
    t.same(await s.listKeys({ organization: 'nobody', project: 'x' }), [])
    await s.close()
    await t.rejects(s.listKeys(project), { message: 'PgStorage is closed' })
    t.same((await pool.query('SELECT 1 AS one')).rows, [{ one: 1 }], 'the pool still works')
  })

  t.test('close ends the pool PgStorage made; its sessions leave the server', async (t) => {
    const admin = await adminClient(t, url)
    const s = new PgStorage({ connectionString: url, schema, poolSize: 3 })
    await s.migrate()
    const pids = (await Promise.all([1, 2, 3].map(() =>
      s.pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid, pg_sleep(0.05)')))).map((r) => r.rows[0].pid)
    const live = async (): Promise<number> =>
      Number((await admin.query('SELECT count(*) AS n FROM pg_stat_activity WHERE pid = ANY ($1)', [pids])).rows[0].n)
    t.equal(await live(), 3, 'three sessions open')
    await s.close()
    for (let i = 0; i < 40 && await live() > 0; i++) await sleep(50)
    t.equal(await live(), 0, 'all gone after close')
  })

  t.test('the plugin closes PgStorage in onClose', async (t) => {
    const storage = new PgStorage({ connectionString: url, schema })
    const { app } = await buildApp(t, { storage })
    t.same((await app.inject({ url: '/api-keys/acme/shop/keys', headers: { 'x-permissions': 'ManageAPIKeys' } })).statusCode, 200)
    await app.close()
    await t.rejects(storage.listKeys(project), { message: 'PgStorage is closed' })
    t.equal(storage.pool.totalCount, 0, 'no connection left in the pool')
  })

  // Regression: on PostgreSQL a NUL in a purpose, key id or moniker was a 500
  // quoting the database ("invalid byte sequence for encoding UTF8: 0x00").
  t.test('a NUL character in a request is answered as on SQLite, never with a 500', async (t) => {
    const own = (await freshSchema(t, url)).schema
    const apps = [
      ['SQLite', (await buildApp(t)).app],
      ['PostgreSQL', (await buildApp(t, { storage: new PgStorage({ connectionString: url, schema: own }) })).app]
    ] as const
    const P = '/api-keys/acme/shop'
    const headers = { 'x-permissions': 'ManageAPIKeys' }
    const purposeRefused = { message: 'body.purpose: must have a non-space character and no control characters' }
    const keyNotFound = { message: 'API key not found' }
    for (const [name, app] of apps) {
      const key = (await app.inject({ method: 'POST', url: `${P}/keys`, headers, payload: { purpose: 'kept' } })).json()
      const answers: Array<[string, { statusCode: number, json: () => unknown }, number, unknown]> = [
        ['POST purpose', await app.inject({ method: 'POST', url: `${P}/keys`, headers, payload: { purpose: 'a\u0000b' } }), 400, purposeRefused],
        ['PATCH purpose', await app.inject({ method: 'PATCH', url: `${P}/keys/${key.id}`, headers, payload: { purpose: 'a\u0000b' } }), 400, purposeRefused],
        ['PATCH id', await app.inject({ method: 'PATCH', url: `${P}/keys/a%00b`, headers, payload: { isActive: false } }), 404, keyNotFound],
        ['DELETE id', await app.inject({ method: 'DELETE', url: `${P}/keys/a%00b`, headers }), 404, keyNotFound],
        ['regenerate id', await app.inject({ method: 'POST', url: `${P}/keys/a%00b/regenerate`, headers }), 404, keyNotFound],
        ['PUT keyIds', await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers, payload: { keyIds: ['a\u0000b'] } }),
          400, { message: 'keyIds: not keys of this project: a\u0000b' }],
        ['data route organization', await app.inject({ url: '/api/a%00b/shop/model/1/dataset/1', query: { api_key: key.key } }),
          403, { message: 'Unknown API Endpoint' }],
        ['data route project', await app.inject({ url: '/api/acme/a%00b/model/1/pipeline/1', method: 'POST', headers: { authorization: `Bearer ${key.key}` } }),
          403, { message: 'Unknown API Endpoint' }]
      ]
      for (const [what, res, status, body] of answers) t.same([res.statusCode, res.json()], [status, body], `${name}: ${what}`)
      const keys = (await app.inject({ url: `${P}/keys`, headers })).json()
      t.same(keys.map((k: { purpose: string }) => k.purpose), ['kept'], `${name}: nothing written`)
    }
  })

  t.test('counters are bigint: past 2^31 they stay exact numbers', async (t) => {
    const s = new PgStorage({ connectionString: url, schema })
    t.teardown(() => s.close())
    const p = { organization: 'big', project: 'counts' }
    const key = await s.createKey({ ...p, prefix: 'FFFFFFFFFF', hash: 'h', purpose: 'p', isActive: true, expiresAt: null }, AUDIT)
    const put = await s.putEndpoint({ ...p, modelSequence: 1, type: 'dataset', resourceSequence: 1 }, [key.id], AUDIT)
    const id = put.ok ? put.endpoint.id : ''
    await s.applyUsage({ calls: new Map([[id, 2 ** 40]]), lastUsed: new Map(), counts: new Map() })
    await s.applyUsage({ calls: new Map([[id, 2 ** 40 + 1]]), lastUsed: new Map(), counts: new Map() })
    const calls = (await s.listEndpoints(p))[0].calls
    t.equal(typeof calls, 'number')
    t.equal(calls, 2 ** 41 + 1)
  })

  t.test('a statement that cannot finish in queryTimeout fails instead of waiting; later ones succeed', async (t) => {
    const s = new PgStorage({ connectionString: url, schema, queryTimeout: 300 })
    t.teardown(() => s.close())
    const p = { organization: 'locked', project: 'rows' }
    const key = await s.createKey({ ...p, prefix: 'GGGGGGGGGG', hash: 'h', purpose: 'p', isActive: true, expiresAt: null }, AUDIT)
    const put = await s.putEndpoint({ ...p, modelSequence: 1, type: 'dataset', resourceSequence: 1 }, [key.id], AUDIT)
    const id = put.ok ? put.endpoint.id : ''
    t.same((await s.pool.query('SHOW statement_timeout')).rows, [{ statement_timeout: '300ms' }],
      'the server cancels a statement at queryTimeout too')

    // Another session holds the rows, as a stuck transaction would.
    const admin = await adminClient(t, url)
    await admin.query('BEGIN')
    await admin.query(`SELECT 1 FROM "${schema}".endpoints WHERE id = $1 FOR UPDATE`, [id])
    await admin.query(`SELECT 1 FROM "${schema}".api_keys WHERE id = $1 FOR UPDATE`, [key.id])
    const blocked: Array<[string, () => Promise<unknown>]> = [
      ['applyUsage', () => s.applyUsage({ calls: new Map([[id, 1]]), lastUsed: new Map(), counts: new Map() })],
      ['updateKey', () => s.updateKey(p, key.id, { isActive: false }, AUDIT)],
      ['deleteKey', () => s.deleteKey(p, key.id, AUDIT)]
    ]
    for (const [what, call] of blocked) {
      const started = Date.now()
      await t.rejects(call(), `${what} rejects`)
      const took = Date.now() - started
      t.ok(took < 2000, `${what} gave up after ${took} ms`)
    }
    await admin.query('ROLLBACK')
    await s.applyUsage({ calls: new Map([[id, 1]]), lastUsed: new Map(), counts: new Map() })
    t.equal((await s.listEndpoints(p))[0].calls, 1, 'the pool works again once the lock is gone')
  })

  t.test('options are checked when PgStorage is made', async (t) => {
    const plain = new PgStorage({ connectionString: url })
    t.equal(plain.schema, 'data_endpoints', 'by default the tables live apart from the host\'s, in schema data_endpoints')
    await plain.close()
    t.throws(() => new PgStorage({ schema: 'bad-name' }), { message: /option "schema"/ })
    t.throws(() => new PgStorage({ schema: 'x"; DROP TABLE y; --' }), { message: /option "schema"/ })
    // Regression: audit_multi_Mixed made a second, case-sensitive schema beside
    // the audit_multi_mixed a DBA had made unquoted; pg_audit passed, then
    // every request answered 500 "unacceptable schema name".
    for (const schema of ['audit_multi_Mixed', 'Data', 'pg_audit', '1st', 'x'.repeat(64), 'donnée', '']) {
      t.throws(() => new PgStorage({ schema }), { message: /^PgStorage: option "schema" must be/ }, `"${schema}" refused`)
    }
    for (const schema of ['audit_multi_mixed', '_x', 'x1', 'pg', 'x'.repeat(63)]) {
      t.doesNotThrow(() => { new PgStorage({ schema, connectionString: url }).close().catch(() => {}) }, `"${schema}" accepted`)
    }
    t.throws(() => new PgStorage({ queryTimeout: 0 }), { message: /option "queryTimeout"/ })
    t.throws(() => new PgStorage({ poolSize: 1.5 }), { message: /option "poolSize"/ })
    t.throws(() => new PgStorage({ connectionTimeout: -1 }), { message: /option "connectionTimeout"/ })
  })
}
