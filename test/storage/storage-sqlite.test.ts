import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { isDeepStrictEqual } from 'node:util'
import fc from 'fast-check'
import t, { type Test } from 'tap'
import Database from 'better-sqlite3'
import { MIGRATIONS, SqliteStorage } from '../../lib/storage/sqlite-storage.js'
import type { EndpointLocator } from '../../lib/storage/storage.js'
import { storageContract } from '../storage-contract.js'
import { sqliteCliAvailable } from '../format-readers.js'

// SqliteStorage against the shared storage contract, in memory and on a file,
// plus what only SQLite has: its migrations and two handles on one file.

const dir = t.testdir({})
const AUDIT = { actor: 'test' }

await storageContract(t, 'SqliteStorage in memory', async () => new SqliteStorage({ filename: ':memory:' }))
const shared = join(dir, 'contract.db')
let freshFiles = 0
await storageContract(t, 'SqliteStorage on a file', async () => new SqliteStorage({ filename: shared }), {
  shared: true,
  fresh: async () => new SqliteStorage({ filename: join(dir, `contract-fresh-${++freshFiles}.db`) })
})

let exclusiveFiles = 0
await storageContract(t, 'SqliteStorage on a file of its own (exclusive)',
  async () => new SqliteStorage({ filename: join(dir, `contract-exclusive-${++exclusiveFiles}.db`), exclusive: true }))

interface MigrationRow { version: number, applied_at: number }

t.test('migrations are versioned; re-opening a file does not apply them again', async (t) => {
  const file = join(dir, 'migrations.db')
  const first = new SqliteStorage({ filename: file })
  const applied = first.db.prepare('SELECT version, applied_at FROM schema_migrations ORDER BY version').all() as MigrationRow[]
  t.ok(applied.length >= 1, 'at least one migration recorded')
  t.same(applied.map((m) => m.version), applied.map((_, i) => i + 1), 'versions 1..n, each once')
  const key = await first.createKey({ organization: 'o', project: 'p', prefix: 'AAAAAAAAAA', hash: 'h', purpose: 'kept', isActive: true, expiresAt: null }, AUDIT)
  await first.close()

  const again = new SqliteStorage({ filename: file })
  t.teardown(() => again.close())
  t.same(again.db.prepare('SELECT version, applied_at FROM schema_migrations ORDER BY version').all(), applied,
    'the same rows: nothing re-applied')
  t.same(await again.getKey({ organization: 'o', project: 'p' }, key.id), key, 'data survives the re-open')
})

/** A file as the version with the first `version` migrations left it. */
function fileAtVersion (file: string, version: number): Database.Database {
  const db = new Database(file)
  db.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)')
  MIGRATIONS.slice(0, version).forEach((sql, i) => {
    db.exec(sql)
    db.prepare('INSERT INTO schema_migrations VALUES (?, ?)').run(i + 1, Date.now())
  })
  return db
}

t.test('a file from before claim tokens is migrated: its claims stay held, new ones carry tokens', async (t) => {
  const file = join(dir, 'before-tokens.db')
  const old = fileAtVersion(file, 1)
  old.prepare('INSERT INTO idempotency_keys (endpoint_id, idempotency_key, response, created_at) VALUES (?, ?, NULL, ?)').run('e', 'held', Date.now())
  old.close()

  const s = new SqliteStorage({ filename: file })
  t.teardown(() => s.close())
  t.same(s.db.prepare('SELECT version FROM schema_migrations').all(), MIGRATIONS.map((_, i) => ({ version: i + 1 })), 'every migration applied')
  const scope = { endpointId: 'e', keyId: 'k' }
  t.same(await s.claimIdempotencyKey(scope, 'held', 60_000, 'new'), { claimed: false, response: null }, 'the old claim is still held')
  t.equal(await s.releaseIdempotencyKey(scope, 'held', 'new'), false, 'and no token releases it')
  t.same(await s.claimIdempotencyKey(scope, 'fresh', 60_000, 'new'), { claimed: true })
  t.equal(await s.releaseIdempotencyKey(scope, 'fresh', 'new'), true, 'a new claim is released by its token')
})

t.test('a file from before records were per key: its records hold for the whole endpoint until they expire', async (t) => {
  const file = join(dir, 'before-key-scope.db')
  const old = fileAtVersion(file, 3)
  const insert = old.prepare('INSERT INTO idempotency_keys (endpoint_id, idempotency_key, response, created_at, claim_token) VALUES (?, ?, ?, ?, ?)')
  insert.run('e', 'answered', '{"job_id":"1"}', Date.now(), 't1')
  insert.run('e', 'running', null, Date.now(), 't2')
  insert.run('e', 'stale', '{"job_id":"0"}', Date.now() - 120_000, 't3')
  old.close()

  const s = new SqliteStorage({ filename: file })
  t.teardown(() => s.close())
  for (const keyId of ['k1', 'k2']) {
    const scope = { endpointId: 'e', keyId }
    t.same(await s.claimIdempotencyKey(scope, 'answered', 60_000, 'x'), { claimed: false, response: '{"job_id":"1"}' }, `${keyId}: the answer is replayed`)
    t.same(await s.claimIdempotencyKey(scope, 'running', 60_000, 'x'), { claimed: false, response: null }, `${keyId}: the claim is still held`)
  }
  t.same(await s.claimIdempotencyKey({ endpointId: 'e', keyId: 'k1' }, 'stale', 60_000, 'x'), { claimed: true }, 'an expired one is gone')
  t.same(await s.claimIdempotencyKey({ endpointId: 'e', keyId: 'k2' }, 'stale', 60_000, 'y'), { claimed: true }, 'and the new records are per key')
  t.same(await s.claimIdempotencyKey({ endpointId: 'other', keyId: 'k1' }, 'answered', 60_000, 'z'), { claimed: true }, 'on its own endpoint only')
})

/** Two handles on one new file, closed after the test (`b` with its own options). */
function twoHandles (t: Test, name: string, bOptions: { busyTimeout?: number } = {}): [SqliteStorage, SqliteStorage] {
  const file = join(dir, name)
  const a = new SqliteStorage({ filename: file })
  const b = new SqliteStorage({ filename: file, ...bOptions })
  t.teardown(async () => { await a.close(); await b.close() })
  return [a, b]
}

/** A project and its dataset endpoint 1/1, for the two-handle tests. */
const PROJECT = { organization: 'o', project: 'p' }
const LOCATOR = { ...PROJECT, modelSequence: 1, type: 'dataset' as const, resourceSequence: 1 }

t.test('two SqliteStorage handles on one file share keys, endpoints, counters and claims', async (t) => {
  const [a, b] = twoHandles(t, 'two.db')
  const key = await a.createKey({ ...PROJECT, prefix: 'BBBBBBBBBB', hash: 'h', purpose: 'x', isActive: true, expiresAt: null }, AUDIT)
  const put = await b.putEndpoint(LOCATOR, [key.id], AUDIT)
  t.ok(put.ok, 'b assigns a key a created')
  const endpointId = put.ok ? put.endpoint.id : ''
  await a.applyUsage({ calls: new Map([[endpointId, 2]]), lastUsed: new Map(), counts: new Map() })
  await b.applyUsage({ calls: new Map([[endpointId, 3]]), lastUsed: new Map(), counts: new Map() })
  t.equal((await a.getEndpoint(LOCATOR))?.calls, 5)
  await b.updateKey(PROJECT, key.id, { isActive: false }, AUDIT)
  t.equal((await a.findEndpointKey(LOCATOR, 'BBBBBBBBBB'))?.key?.isActive, false, 'a disable through b is seen by a')
  t.same(await a.claimIdempotencyKey({ endpointId, keyId: key.id }, 'k', 60_000, 'token-a'), { claimed: true })
  t.same(await b.claimIdempotencyKey({ endpointId, keyId: key.id }, 'k', 60_000, 'token-b'), { claimed: false, response: null })
})

t.test('a remembered lookup gives way to any write: this handle\'s, or another handle\'s on the file', async (t) => {
  const [a, b] = twoHandles(t, 'memo.db')
  const key = await a.createKey({ ...PROJECT, prefix: 'CCCCCCCCCC', hash: 'h1', purpose: 'x', isActive: true, expiresAt: null }, AUDIT)
  await a.putEndpoint(LOCATOR, [key.id], AUDIT)
  const seen = async (): Promise<unknown> => {
    const found = await a.findEndpointKey(LOCATOR, 'CCCCCCCCCC')
    return found?.key === null || found === null ? found : { active: found.key.isActive, hash: found.key.hash, limits: found.key.limits }
  }
  t.same(await seen(), { active: true, hash: 'h1', limits: null })
  t.same(await seen(), { active: true, hash: 'h1', limits: null }, 'asked again, the same')

  await b.updateKey(PROJECT, key.id, { isActive: false }, AUDIT)
  t.same(await seen(), { active: false, hash: 'h1', limits: null }, 'another handle\'s disable: seen on the next lookup')
  await a.updateKey(PROJECT, key.id, { isActive: true, limits: { requestsPerMinute: 5, concurrentDownloads: null, bytesPerDay: null } }, AUDIT)
  t.same(await seen(), { active: true, hash: 'h1', limits: { requestsPerMinute: 5, concurrentDownloads: null, bytesPerDay: null } }, 'this handle\'s own write: seen too')
  await b.replaceKeySecret(PROJECT, key.id, { prefix: 'DDDDDDDDDD', hash: 'h2' }, AUDIT)
  t.equal((await a.findEndpointKey(LOCATOR, 'CCCCCCCCCC'))?.key, null, 'the old prefix: no key on the next lookup')
  t.equal((await a.findEndpointKey(LOCATOR, 'DDDDDDDDDD'))?.key?.hash, 'h2')
  await b.deleteEndpoint(LOCATOR, AUDIT)
  t.equal(await a.findEndpointKey(LOCATOR, 'DDDDDDDDDD'), null, 'the endpoint deleted through b: none')
})

t.test('a remembered lookup answers what the database says, for any mix of prefixes and endpoints', async (t) => {
  // The memo keeps answers by prefix, then by locator, 32 a prefix: a key on
  // 40 endpoints, asked in any order, must get each endpoint's own answer.
  const s = new SqliteStorage({ filename: ':memory:' })
  t.teardown(() => s.close())
  const prefixes = ['FFFFFFFFFF', 'GGGGGGGGGG', 'HHHHHHHHHH']
  const ids = []
  for (const [i, prefix] of prefixes.entries()) {
    ids.push((await s.createKey({ ...PROJECT, prefix, hash: `h${i}`, purpose: 'x', isActive: i !== 2, expiresAt: null }, AUDIT)).id)
  }
  for (let r = 1; r <= 40; r++) {
    await s.putEndpoint({ ...LOCATOR, resourceSequence: r }, ids.filter((_, i) => (r + i) % 3 !== 0), AUDIT)
  }
  await s.putEndpoint({ ...LOCATOR, type: 'pipeline' }, [ids[0]], AUDIT)
  const read = (l: EndpointLocator, prefix: string | null): unknown =>
    (s as unknown as { readEndpointKey: (l: unknown, p: string | null) => unknown }).readEndpointKey(l, prefix)
  const locator = fc.record({
    organization: fc.constantFrom('o', 'O', 'o2'),
    project: fc.constantFrom('p', 'q'),
    modelSequence: fc.constantFrom(1, 2),
    type: fc.constantFrom('dataset' as const, 'pipeline' as const),
    resourceSequence: fc.integer({ min: 1, max: 45 })
  }, { requiredKeys: [] }).map((parts): EndpointLocator => ({ ...LOCATOR, ...parts }))
  const prefix = fc.constantFrom<string | null>(...prefixes, null, 'ZZZZZZZZZZ')
  fc.assert(fc.property(fc.array(fc.tuple(locator, prefix), { minLength: 1, maxLength: 120 }), (lookups) =>
    lookups.every(([l, p]) => isDeepStrictEqual(s.findEndpointKey(l, p), read(l, p)))), { numRuns: 200 })
  t.pass('200 runs of up to 120 lookups: each answer the database\'s')
})

t.test('a write blocked by another handle\'s lock fails after busyTimeout instead of hanging', async (t) => {
  const [a, b] = twoHandles(t, 'busy.db', { busyTimeout: 50 })
  a.db.exec('BEGIN IMMEDIATE')
  const started = Date.now()
  await t.rejects(b.claimIdempotencyKey({ endpointId: 'e', keyId: 'k' }, 'k', 60_000, 'token'), { code: 'SQLITE_BUSY' }, 'refused after the busy timeout, not hung')
  t.ok(Date.now() - started < 2000)
  a.db.exec('COMMIT')
  t.same(await b.claimIdempotencyKey({ endpointId: 'e', keyId: 'k' }, 'k', 60_000, 'token'), { claimed: true }, 'works once the lock is gone')
})

t.test('writes and pages read only their rows: no statement they run scans a project\'s keys, endpoints or assignments', async (t) => {
  // SQLite's plan says whether a statement searches an index or scans a
  // table. A project of 10,000 keys made every PUT read all of them
  // (issue 18): each statement a write or a page runs must search.
  const s = new SqliteStorage({ filename: ':memory:' })
  t.teardown(() => s.close())
  const statements = (s as unknown as { statements: Record<string, { source: string }> }).statements
  const planOf = (sql: string, params: unknown): string[] =>
    (s.db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(params as never) as Array<{ detail: string }>).map((row) => row.detail)
  const used = ['getKey', 'insertKey', 'setPurpose', 'setActive', 'setExpiry', 'setLimits', 'setSecret', 'deleteKey', 'getEndpoint', 'insertEndpoint',
    'clearAssignments', 'assign', 'unassign', 'deleteEndpoint', 'keysOfEndpoints', 'projectKeyIdsIn', 'isProjectKey', 'endpointKeyIds', 'insertAudit']
  // A whole table, or a whole project through its index (organization and project, nothing narrower).
  const wholeProject = (plan: string[]): boolean => plan.some((step) =>
    /^SCAN (api_keys|endpoints|endpoint_keys|e|k|ek)\b/.test(step) || /\(organization=\? AND project=\?\)$/.test(step))
  t.ok(wholeProject(planOf('SELECT id FROM api_keys WHERE organization = ? AND project = ?', ['o', 'p'])),
    'the check sees what every PUT did before: read the project\'s key ids')
  for (const name of used) {
    const source = statements[name]?.source
    t.type(source, 'string', `${name} exists`)
    const params = source.includes('@') ? Object.fromEntries([...source.matchAll(/@(\w+)/g)].map(([, p]) => [p, null])) : Array((source.match(/\?/g) ?? []).length).fill(null)
    const plan = planOf(source, params)
    t.notOk(wholeProject(plan), `${name}: ${plan.join('; ')}`)
  }
  // The pages, with every filter: searched from where the last page ended, in index order (no sort).
  const list = await import('../../lib/storage/sqlite-storage.js')
  t.ok(list.MIGRATIONS.some((m) => m.includes('CREATE INDEX api_keys_project_order')), 'the index of the keys\' order')
  const keysPage = planOf(`SELECT id FROM api_keys INDEXED BY api_keys_project_order WHERE organization = 'o' AND project = 'p'
    AND (created_at, id) > (1, 'x') ORDER BY created_at, id LIMIT 5`, [])
  t.notOk(keysPage.some((step) => /TEMP B-TREE/.test(step)), `keys page: ${keysPage.join('; ')}`)
  t.ok(keysPage.some((step) => /SEARCH api_keys USING (COVERING )?INDEX api_keys_project_order \(organization=\? AND project=\? AND \(created_at,id\)>\(\?,\?\)\)/.test(step)), 'from the cursor on')
  const endpointsPage = planOf(`SELECT id FROM endpoints WHERE organization = 'o' AND project = 'p'
    AND (model_sequence, type, resource_sequence) > (1, 'dataset', 1) ORDER BY model_sequence, type, resource_sequence LIMIT 5`, [])
  t.notOk(endpointsPage.some((step) => /TEMP B-TREE|^SCAN/.test(step)), `endpoints page: ${endpointsPage.join('; ')}`)
})

t.test('exclusive: the file is this handle\'s alone until it closes', async (t) => {
  const file = join(dir, 'alone.db')
  const alone = new SqliteStorage({ filename: file, exclusive: true, busyTimeout: 50 })
  const key = await alone.createKey({ ...PROJECT, prefix: 'EEEEEEEEEE', hash: 'h', purpose: 'x', isActive: true, expiresAt: null }, AUDIT)
  for (const exclusive of [false, true]) {
    t.throws(() => new SqliteStorage({ filename: file, exclusive, busyTimeout: 50 }),
      { message: exclusive ? /alone\.db is in use by another connection or process, and exclusive: true takes it for this one alone/ : /database is locked/ },
      `another handle (exclusive: ${String(exclusive)}) in this process is refused`)
  }
  if (sqliteCliAvailable(t)) {
    // Another process: the sqlite3 shell can neither read nor write the file.
    for (const sql of ['SELECT count(*) FROM api_keys;', "UPDATE api_keys SET is_active = 0;"]) {
      const run = spawnSync('sqlite3', ['-bail', '-cmd', '.timeout 50', file, sql], { encoding: 'utf8' })
      t.not(run.status, 0, `another process: ${sql.split(' ')[0]} fails`)
      t.match(run.stderr, /database is locked/)
    }
  }
  t.equal((await alone.findEndpointKey(LOCATOR, 'EEEEEEEEEE')), null, 'no endpoint yet')
  await alone.putEndpoint(LOCATOR, [key.id], AUDIT)
  t.equal((await alone.findEndpointKey(LOCATOR, 'EEEEEEEEEE'))?.key?.isActive, true, 'this handle\'s own writes are seen')
  await alone.updateKey(PROJECT, key.id, { isActive: false }, AUDIT)
  t.equal((await alone.findEndpointKey(LOCATOR, 'EEEEEEEEEE'))?.key?.isActive, false, 'a disable: seen on the next lookup')
  await alone.close()

  const after = new SqliteStorage({ filename: file })
  t.teardown(() => after.close())
  t.equal(after.db.pragma('journal_mode', { simple: true }), 'wal', 'closed, the file opens again, still in WAL mode')
  t.equal((await after.findEndpointKey(LOCATOR, 'EEEEEEEEEE'))?.key?.isActive, false, 'with what the exclusive handle wrote')
})

t.test('exclusive: a file another handle has open is refused at the open, and left as it was', async (t) => {
  const file = join(dir, 'taken.db')
  const first = new SqliteStorage({ filename: file })
  t.teardown(() => first.close())
  const key = await first.createKey({ ...PROJECT, prefix: 'FFFFFFFFFF', hash: 'h', purpose: 'x', isActive: true, expiresAt: null }, AUDIT)
  t.throws(() => new SqliteStorage({ filename: file, exclusive: true, busyTimeout: 50 }), { message: /taken\.db is in use by another connection or process/ })
  await first.updateKey(PROJECT, key.id, { purpose: 'still writable' }, AUDIT)
  t.equal((await first.getKey(PROJECT, key.id))?.purpose, 'still writable', 'the handle that had it goes on writing')
})
