import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { PgStorage, SqliteStorage, type Storage } from '../../lib/index.js'
import { PIPELINE_REF } from '../fixtures.js'
import { ADMIN, assignKeys, buildApp, createKey, PIPELINE_URL } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'

// The audit log (DESIGN.md §4.1) through the management API: who changed
// what and when, never a key value or hash; and the records storage keeps
// only for a while (audit entries, Idempotency-Key records), pruned.

const P = '/api-keys/acme/shop'
const url = await pgAvailable(t)

const adapters: Array<[string, (t: Test) => Promise<Storage>]> = [
  ['SqliteStorage', async () => new SqliteStorage({ filename: ':memory:' })]
]
if (url !== null) {
  adapters.push(['PgStorage', async (t) => new PgStorage({ connectionString: url, schema: (await freshSchema(t, url)).schema })])
}

/** Makes every deletion of a key fail inside its transaction (a trigger), until the function it answers is called. */
async function failKeyDeletions (storage: Storage): Promise<() => Promise<void>> {
  if (storage instanceof SqliteStorage) {
    storage.db.exec("CREATE TRIGGER fail_key_delete BEFORE DELETE ON api_keys BEGIN SELECT RAISE(ABORT, 'simulated failure'); END")
    return async () => { storage.db.exec('DROP TRIGGER fail_key_delete') }
  }
  const pg = storage as PgStorage
  await pg.migrate()
  await pg.pool.query(`CREATE FUNCTION "${pg.schema}".fail_key_delete () RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'simulated failure'; END $$;
    CREATE TRIGGER fail_key_delete BEFORE DELETE ON "${pg.schema}".api_keys FOR EACH ROW EXECUTE FUNCTION "${pg.schema}".fail_key_delete ()`)
  return async () => { await pg.pool.query(`DROP TRIGGER fail_key_delete ON "${pg.schema}".api_keys`) }
}

interface Item { id: string, at: string, actor: string | null, action: string, keyId: string | null, endpointId: string | null, target: string, changes: Record<string, { from: unknown, to: unknown }> }

for (const [name, open] of adapters) {
  t.test(`${name}: every management change is in the log, with its actor, and no key value or hash`, async (t) => {
    const storage = await open(t)
    const actors = ['alice', 'bob']
    let turn = 0
    const { app } = await buildApp(t, { storage, getActor: async () => actors[turn++ % 2] })
    const a = await createKey(app, 'first')
    const b = await createKey(app, 'second')
    await app.inject({ method: 'PATCH', url: `${P}/keys/${a.id}`, headers: ADMIN, payload: { isActive: false, purpose: 'renamed' } })
    await app.inject({ method: 'PATCH', url: `${P}/keys/${a.id}`, headers: ADMIN, payload: { purpose: 'renamed' } })
    const regenerated = (await app.inject({ method: 'POST', url: `${P}/keys/${a.id}/regenerate`, headers: ADMIN })).json()
    await assignKeys(app, 'dataset', [a.id])
    await assignKeys(app, 'dataset', [a.id, b.id])
    await app.inject({ method: 'DELETE', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN })
    await app.inject({ method: 'DELETE', url: `${P}/keys/${b.id}`, headers: ADMIN })

    const res = await app.inject({ url: `${P}/audit`, headers: ADMIN })
    t.equal(res.statusCode, 200)
    const { items, next } = res.json() as { items: Item[], next: string | null }
    t.equal(next, null, 'one page')
    t.same(items.map((i) => [i.action, i.actor]).reverse(), [
      ['key.created', 'alice'],
      ['key.created', 'bob'],
      ['key.updated', 'alice'],
      // (the PATCH that changed nothing asked for an actor, 'bob', and wrote nothing)
      ['key.regenerated', 'alice'],
      ['endpoint.created', 'bob'],
      ['endpoint.updated', 'alice'],
      ['endpoint.deleted', 'bob'],
      ['key.deleted', 'alice']
    ], 'each change once, newest first, with the actor getActor named')
    const updated = items.find((i) => i.action === 'key.updated')
    t.same(updated?.changes, { purpose: { from: 'first', to: 'renamed' }, isActive: { from: true, to: false } }, 'old and new of each changed field')
    t.equal(items.find((i) => i.action === 'key.regenerated')?.target, regenerated.prefix, 'target: the prefix as it reads now')
    t.same(items.find((i) => i.action === 'endpoint.updated')?.changes, { keyIds: { from: [a.id], to: [a.id, b.id].sort() } })
    t.equal(items.find((i) => i.action === 'endpoint.created')?.target, '/api/acme/shop/model/1/dataset/1')
    t.ok(items.every((i) => !Number.isNaN(Date.parse(i.at))), 'each has its time')

    const text = res.body
    for (const value of [a.key, b.key, regenerated.key]) {
      t.notOk(text.includes(value), 'no key value')
      t.notOk(text.includes(value.slice(11)), 'nor its secret part')
    }
    t.notOk(/\$2[aby]\$/.test(text), 'no bcrypt hash')
  })

  t.test(`${name}: deleting a key writes endpoint.updated for each endpoint it leaves, in the deletion's transaction`, async (t) => {
    const storage = await open(t)
    const { app, jobs } = await buildApp(t, { storage, getActor: () => 'carol' })
    jobs.addPipeline({ ...PIPELINE_REF, resourceSequence: 2 }, 'other')
    const leaving = await createKey(app, 'leaving')
    const staying = await createKey(app, 'staying')
    const elsewhere = await createKey(app, 'elsewhere')
    await assignKeys(app, 'dataset', [leaving.id, staying.id])
    await assignKeys(app, 'pipeline', [leaving.id])
    await assignKeys(app, 'pipeline', [elsewhere.id], 2)
    const endpoints = (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json() as Array<{ id: string, path: string }>
    const idOf = (path: string): string | undefined => endpoints.find((e) => e.path === path)?.id
    const newest = (await app.inject({ url: `${P}/audit?limit=1`, headers: ADMIN })).json().items[0].id

    // The deletion fails after the endpoints' entries are written: none of them stays.
    const restore = await failKeyDeletions(storage)
    t.equal((await app.inject({ method: 'DELETE', url: `${P}/keys/${leaving.id}`, headers: ADMIN })).statusCode, 500)
    t.equal((await app.inject({ url: `${P}/audit?limit=1`, headers: ADMIN })).json().items[0].id, newest, 'a deletion that failed left no entry')
    await restore()

    t.equal((await app.inject({ method: 'DELETE', url: `${P}/keys/${leaving.id}`, headers: ADMIN })).statusCode, 204)
    const items = ((await app.inject({ url: `${P}/audit`, headers: ADMIN })).json().items as Item[])
      .filter((i) => BigInt(i.id) > BigInt(newest)).reverse()
    const dataset = { action: 'endpoint.updated', actor: 'carol', keyId: null, endpointId: idOf('/api/acme/shop/model/1/dataset/1'), target: '/api/acme/shop/model/1/dataset/1', changes: { keyIds: { from: [leaving.id, staying.id].sort(), to: [staying.id] } } }
    const pipeline = { action: 'endpoint.updated', actor: 'carol', keyId: null, endpointId: idOf('/api/acme/shop/model/1/pipeline/1'), target: '/api/acme/shop/model/1/pipeline/1', changes: { keyIds: { from: [leaving.id], to: [] } } }
    t.same(items.map(({ id, at, ...rest }) => rest), [
      ...[dataset, pipeline].sort((a, b) => String(a.endpointId) < String(b.endpointId) ? -1 : 1),
      { action: 'key.deleted', actor: 'carol', keyId: leaving.id, endpointId: null, target: leaving.prefix, changes: { purpose: { from: 'leaving', to: null }, isActive: { from: true, to: null } } }
    ], 'one entry per endpoint the key left, with its keys before and after, then the deletion; the endpoint it was not on has none')
    const after = (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json() as Array<{ path: string, keys: Array<{ id: string }> }>
    t.same(after.map((e) => [e.path, e.keys.map((k) => k.id)]), [
      ['/api/acme/shop/model/1/dataset/1', [staying.id]],
      ['/api/acme/shop/model/1/pipeline/1', []],
      ['/api/acme/shop/model/1/pipeline/2', [elsewhere.id]]
    ], 'and the endpoints read as the entries say')
  })
}

t.test('without getActor the actor is null; getActor failing refuses the change and writes nothing', async (t) => {
  const { app } = await buildApp(t)
  await createKey(app)
  t.same((await app.inject({ url: `${P}/audit`, headers: ADMIN })).json().items.map((i: Item) => i.actor), [null])

  const { app: failing } = await buildApp(t, { getActor: () => { throw new Error('directory unavailable') } })
  const res = await failing.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: 'x' } })
  t.same([res.statusCode, res.json()], [500, { message: 'directory unavailable' }])
  t.same((await failing.inject({ url: `${P}/keys`, headers: ADMIN })).json(), [], 'no key made')
  t.same((await failing.inject({ url: `${P}/audit`, headers: ADMIN })).json().items, [], 'no entry written')

  const { app: odd } = await buildApp(t, { getActor: () => 42 as unknown as string })
  t.equal((await odd.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: 'x' } })).statusCode, 500,
    'an actor that is not a string or null is a host error')
})

t.test('the audit route pages back with next; bad parameters 400 naming them; 403 without permission', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  for (let i = 0; i < 11; i++) await app.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { purpose: `p${i}` } })
  const seen: string[] = []
  let before: string | null = null
  const sizes: number[] = []
  do {
    const query: Record<string, string> = before === null ? { limit: '5' } : { limit: '5', before }
    const page = (await app.inject({ url: `${P}/audit`, query, headers: ADMIN })).json() as { items: Item[], next: string | null }
    sizes.push(page.items.length)
    seen.push(...page.items.map((i) => i.id))
    before = page.next
  } while (before !== null)
  t.same(sizes, [5, 5, 2], 'three pages; the last says next: null')
  t.equal(new Set(seen).size, 12, 'every entry once')
  t.equal((await app.inject({ url: `${P}/audit`, headers: ADMIN })).json().items.length, 12, 'the default page holds 50')

  for (const [query, param] of [[{ before: 'abc' }, 'before'], [{ before: '0' }, 'before'], [{ limit: '0' }, 'limit'],
    [{ limit: '501' }, 'limit'], [{ limit: 'ten' }, 'limit'], [{ since: '1' }, 'since']] as const) {
    const res = await app.inject({ url: `${P}/audit`, query, headers: ADMIN })
    t.equal(res.statusCode, 400, JSON.stringify(query))
    t.match(res.json().message, new RegExp(`\\b${param}\\b`), res.json().message)
  }
  t.same((await app.inject({ url: `${P}/audit` })).json(), { message: 'Not authorized' })
})

t.test('another API key sending the same Idempotency-Key starts its own run; each replays its own', async (t) => {
  const { app, jobs } = await buildApp(t)
  const a = await createKey(app, 'a')
  const b = await createKey(app, 'b')
  await assignKeys(app, 'pipeline', [a.id, b.id])
  const run = async (key: string) => {
    const res = await app.inject({ method: 'POST', url: PIPELINE_URL, headers: { authorization: `Bearer ${key}`, 'idempotency-key': 'nightly' } })
    return { body: res.body, replayed: res.headers['idempotent-replayed'] ?? null }
  }
  const first = await run(a.key)
  const other = await run(b.key)
  t.equal(jobs.starts, 2, 'two runs')
  t.not(first.body, other.body, 'two jobs')
  t.same(await run(a.key), { body: first.body, replayed: 'true' }, 'a replays its own')
  t.same(await run(b.key), { body: other.body, replayed: 'true' }, 'b replays its own')
  t.equal(jobs.starts, 2)
})

t.test('housekeeping deletes audit entries past auditRetention and Idempotency-Key records past their ttl', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'fde-housekeeping-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const filename = join(dir, 'store.db')
  const first = await buildApp(t, { storage: new SqliteStorage({ filename }) })
  const k = await createKey(first.app)
  await assignKeys(first.app, 'pipeline', [k.id])
  for (const key of ['old', 'new']) {
    await first.app.inject({ method: 'POST', url: PIPELINE_URL, headers: { authorization: `Bearer ${k.key}`, 'idempotency-key': key } })
  }
  await first.app.close()
  // Three days back: the key's creation and the 'old' run's record.
  const db = new SqliteStorage({ filename })
  const threeDays = Date.now() - 3 * 86_400_000
  db.db.prepare("UPDATE audit_log SET at = ? WHERE action = 'key.created'").run(threeDays)
  db.db.prepare("UPDATE idempotency_keys SET created_at = ? WHERE idempotency_key = 'old'").run(threeDays)
  await db.close()

  const storage = new SqliteStorage({ filename })
  const { app } = await buildApp(t, { storage, auditRetention: 2 * 86_400_000, idempotencyTtl: 2 * 86_400_000 })
  const left = (): { audit: string[], idempotency: string[] } => ({
    audit: (storage.db.prepare('SELECT action FROM audit_log ORDER BY id').all() as Array<{ action: string }>).map((r) => r.action),
    idempotency: (storage.db.prepare('SELECT idempotency_key FROM idempotency_keys').all() as Array<{ idempotency_key: string }>).map((r) => r.idempotency_key)
  })
  for (let i = 0; i < 200 && left().audit.length > 1; i++) await new Promise((resolve) => setTimeout(resolve, 10))
  t.same(left(), { audit: ['endpoint.created'], idempotency: ['new'] }, 'the three-day-old entry and record are gone; the recent ones stay')
  t.equal((await app.inject({ url: `${P}/audit`, headers: ADMIN })).json().items.length, 1)
})
