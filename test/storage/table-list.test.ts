import { createHash } from 'node:crypto'
import Database from 'better-sqlite3'
import pg from 'pg'
import t from 'tap'
import { MIGRATIONS as PG_MIGRATIONS, PgStorage } from '../../lib/storage/pg-storage.js'
import { MIGRATIONS as SQLITE_MIGRATIONS, SqliteStorage } from '../../lib/storage/sqlite-storage.js'
import { migrationsFor, SHARED_MIGRATIONS } from '../../lib/storage/migrations.js'
import { fromRow, insertSql, migrationSql, stepSql, toColumns, type Dialect, type Table } from '../../lib/storage/table-list.js'
import { ADMIN, buildApp } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'

// The table list (lib/storage/table-list.ts): one description of a table
// gives both adapters' DDL and row mapping. A table with every column type
// is made from it on SQLite and on PostgreSQL; the same record goes in and
// comes out the same on both, and both enforce the same constraints. The
// shipped migrations stay as they shipped; the shared ones come after them.

const url = await pgAvailable(t)

const PARENT: Table = { name: 'parents', columns: [{ name: 'id', type: 'text' }], primaryKey: ['id'] }
const SAMPLE: Table = {
  name: 'samples',
  columns: [
    { name: 'seq', type: 'serial' },
    { name: 'parent_id', type: 'text', references: { table: 'parents', column: 'id', onDelete: 'cascade' } },
    { name: 'kind', type: 'text' },
    { name: 'amount', type: 'integer' },
    { name: 'is_open', type: 'boolean' },
    { name: 'made_at', type: 'timestamp' },
    { name: 'ends_at', type: 'timestamp', nullable: true },
    { name: 'params', type: 'json' }
  ],
  unique: [['parent_id', 'kind']],
  checks: ["kind IN ('a', 'b')"],
  indexes: [{ name: 'samples_made', columns: ['made_at'] }]
}

const record = {
  parentId: 'p1',
  kind: 'a',
  amount: Number.MAX_SAFE_INTEGER,
  isOpen: true,
  madeAt: new Date('0001-01-01T00:00:00.000Z'),
  endsAt: new Date('9999-12-31T23:59:59.999Z'),
  params: { format: 'csv', limit: 5, columns: ['a', 'b'], nested: { ok: null } }
}

t.test('the DDL of each dialect, as generated', async (t) => {
  t.equal(stepSql({ createTable: SAMPLE }, 'sqlite'), `CREATE TABLE samples (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  parent_id TEXT NOT NULL REFERENCES parents (id) ON DELETE CASCADE,
  kind TEXT NOT NULL,
  amount INTEGER NOT NULL,
  is_open INTEGER NOT NULL CHECK (is_open IN (0, 1)),
  made_at INTEGER NOT NULL,
  ends_at INTEGER,
  params TEXT NOT NULL,
  UNIQUE (parent_id, kind),
  CHECK (kind IN ('a', 'b'))
);
CREATE INDEX samples_made ON samples (made_at);`)
  t.equal(stepSql({ createTable: SAMPLE }, 'pg'), `CREATE TABLE samples (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  parent_id text NOT NULL REFERENCES parents (id) ON DELETE CASCADE,
  kind text NOT NULL,
  amount bigint NOT NULL,
  is_open boolean NOT NULL,
  made_at timestamptz NOT NULL,
  ends_at timestamptz,
  params jsonb NOT NULL,
  UNIQUE (parent_id, kind),
  CHECK (kind IN ('a', 'b'))
);
CREATE INDEX samples_made ON samples (made_at);`)
  t.equal(stepSql({ addColumn: { table: 'api_keys', column: { name: 'requests_per_minute', type: 'integer', nullable: true } } }, 'pg'),
    'ALTER TABLE api_keys ADD COLUMN requests_per_minute bigint;')
  t.equal(insertSql(SAMPLE, 'pg', '"s".samples'), 'INSERT INTO "s".samples (parent_id, kind, amount, is_open, made_at, ends_at, params) VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)')
  t.throws(() => stepSql({ createTable: { ...SAMPLE, name: 'Samples; DROP' } }, 'sqlite'), /not a lower-case SQL name/)
  t.throws(() => toColumns(SAMPLE, 'sqlite', { ...record, kind: null }), /samples.kind may not be null/)
})

interface Store {
  exec (sql: string): Promise<void>
  insert (values: unknown[]): Promise<void>
  rows (): Promise<Array<Record<string, unknown>>>
  columns (): Promise<Array<[string, boolean]>>
}

function sqliteStore (): Store {
  const db = new Database(':memory:')
  db.pragma('foreign_keys = ON')
  t.teardown(() => db.close())
  return {
    exec: async (sql) => { db.exec(sql) },
    insert: async (values) => { db.prepare(insertSql(SAMPLE, 'sqlite')).run(...values) },
    rows: async () => db.prepare(`SELECT ${SAMPLE.columns.map((c) => c.name).join(', ')} FROM samples ORDER BY seq`).all() as Array<Record<string, unknown>>,
    columns: async () => (db.prepare('PRAGMA table_info(samples)').all() as Array<{ name: string, notnull: number, pk: number }>)
      .map((c) => [c.name, c.notnull === 0 && c.pk === 0])
  }
}

async function pgStore (client: pg.Client, schema: string): Promise<Store> {
  return {
    exec: async (sql) => { await client.query(sql) },
    insert: async (values) => { await client.query(insertSql(SAMPLE, 'pg', `"${schema}".samples`), values) },
    rows: async () => (await client.query(`SELECT ${SAMPLE.columns.map((c) => c.name).join(', ')} FROM "${schema}".samples ORDER BY seq`)).rows,
    columns: async () => (await client.query<{ column_name: string, is_nullable: string }>(
      'SELECT column_name, is_nullable FROM information_schema.columns WHERE table_schema = $1 AND table_name = \'samples\' ORDER BY ordinal_position', [schema]))
      .rows.map((c) => [c.column_name, c.is_nullable === 'YES'])
  }
}

const stores: Array<[Dialect, () => Promise<Store>]> = [['sqlite', async () => sqliteStore()]]
if (url !== null) {
  stores.push(['pg', async () => {
    const { client, schema } = await freshSchema(t, url)
    return pgStore(client, schema)
  }])
}

const results = new Map<Dialect, unknown>()
for (const [dialect, open] of stores) {
  t.test(`${dialect}: the table made from the list holds a record exactly and enforces its constraints`, async (t) => {
    const store = await open()
    await store.exec(stepSql({ createTable: PARENT }, dialect))
    await store.exec(stepSql({ createTable: SAMPLE }, dialect))
    await store.exec(`INSERT INTO parents (id) VALUES ('p1'), ('p2')`)
    await store.insert(toColumns(SAMPLE, dialect, record))
    await store.insert(toColumns(SAMPLE, dialect, { ...record, kind: 'b', amount: 0, isOpen: false, endsAt: null, params: [] }))
    const read = (await store.rows()).map((row) => fromRow(SAMPLE, dialect, row))
    t.same(read, [
      { seq: read[0].seq, ...record },
      { seq: read[1].seq, ...record, kind: 'b', amount: 0, isOpen: false, endsAt: null, params: [] }
    ], 'each field as it went in')
    t.ok(typeof read[0].seq === 'string' && BigInt(read[1].seq as string) > BigInt(read[0].seq as string), 'serial: increasing ids, as text')
    results.set(dialect, read.map(({ seq, ...rest }) => rest))
    t.same(await store.columns(), SAMPLE.columns.map((c) => [c.name, c.nullable === true]), 'the columns, nullable where described')

    await t.rejects(store.insert(toColumns(SAMPLE, dialect, { ...record, kind: 'c', parentId: 'p2' })), 'the check holds')
    await t.rejects(store.insert(toColumns(SAMPLE, dialect, record)), 'the unique constraint holds')
    await t.rejects(store.insert(toColumns(SAMPLE, dialect, { ...record, parentId: 'nobody' })), 'the foreign key holds')
    await store.exec("DELETE FROM parents WHERE id = 'p1'")
    t.same(await store.rows(), [], 'and cascades')
  })
}

t.test('both stores give the same records', async (t) => {
  if (results.size < 2) return t.pass('PostgreSQL not reached: compared on SQLite alone', { skip: url === null })
  t.same(results.get('pg'), results.get('sqlite'))
})

// Checksums of migrations 1 to 5 as they shipped: editing one would change a
// database that already ran it, or fail on one that did not.
const SHIPPED: Record<Dialect, string[]> = {
  sqlite: ['cb599ce72173bc45', 'd5be8dac0ff7c467', '1d16f469819d3106', 'a161483a8256405f', 'b2df138ad06860bf'],
  pg: ['ba5141fc7dc6d06d', 'eb0be339c06e0272', 'b811760ae4568484', '30c9aa197d053cfa', 'b2df138ad06860bf']
}
const checksum = (sql: string): string => createHash('sha256').update(sql).digest('hex').slice(0, 16)

t.test('shipped migrations are as they shipped; the shared ones follow in both adapters, generated', async (t) => {
  for (const [dialect, list] of [['sqlite', SQLITE_MIGRATIONS], ['pg', PG_MIGRATIONS]] as const) {
    t.same(list.slice(0, SHIPPED[dialect].length).map(checksum), SHIPPED[dialect], `${dialect}: 1 to ${SHIPPED[dialect].length} unchanged`)
    t.same(list.slice(SHIPPED[dialect].length), migrationsFor(dialect), `${dialect}: then the shared list`)
  }
  t.equal(SHARED_MIGRATIONS.length, SQLITE_MIGRATIONS.length - 5)
  t.same(SHARED_MIGRATIONS.map((m) => migrationSql(m, 'sqlite')), migrationsFor('sqlite'))
})

// Migration 6: an expiry written past 9999 before timestamps were read once
// (issue 12) made every listing of its project fail.
const LATE = Date.UTC(9999, 11, 31, 23, 59, 59, 999) + 5 * 3_600_000
const P = '/api-keys/acme/shop'

t.test('SQLite: an expiry past 9999 from before is brought back to the last storable instant, and listings work again', async (t) => {
  const dir = t.testdir({})
  const file = `${dir}/old.db`
  const db = new Database(file)
  db.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)')
  SQLITE_MIGRATIONS.slice(0, 5).forEach((sql, i) => {
    db.exec(sql)
    db.prepare('INSERT INTO schema_migrations VALUES (?, ?)').run(i + 1, Date.now())
  })
  const insert = db.prepare(`INSERT INTO api_keys (id, organization, project, prefix, hash, purpose, is_active, created_at, expires_at)
    VALUES (?, 'acme', 'shop', ?, 'h', 'p', 1, ?, ?)`)
  insert.run('late', 'AAAAAAAAAA', Date.now(), LATE)
  insert.run('fine', 'BBBBBBBBBB', Date.now(), Date.UTC(2031, 0, 1))
  db.close()

  const { app } = await buildApp(t, { storage: new SqliteStorage({ filename: file }) })
  const res = await app.inject({ url: `${P}/keys`, headers: ADMIN })
  t.equal(res.statusCode, 200)
  t.same(res.json().map((k: { id: string, expiresAt: string }) => [k.id, k.expiresAt]).sort(),
    [['fine', '2031-01-01T00:00:00.000Z'], ['late', '9999-12-31T23:59:59.999Z']])
})

t.test('PostgreSQL: the same', async (t) => {
  if (url === null) return
  const { client, schema } = await freshSchema(t, url)
  await client.query(`SET search_path TO "${schema}"`)
  await client.query('CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())')
  for (const [i, sql] of PG_MIGRATIONS.slice(0, 5).entries()) {
    await client.query(sql)
    await client.query('INSERT INTO schema_migrations (version) VALUES ($1)', [i + 1])
  }
  await client.query(`INSERT INTO api_keys (id, organization, project, prefix, hash, purpose, is_active, created_at, expires_at)
    VALUES ('late', 'acme', 'shop', 'AAAAAAAAAA', 'h', 'p', true, now(), $1), ('fine', 'acme', 'shop', 'BBBBBBBBBB', 'h', 'p', true, now(), $2)`,
  ['10000-01-01T04:59:59.999Z', new Date(Date.UTC(2031, 0, 1))])

  const { app } = await buildApp(t, { storage: new PgStorage({ connectionString: url, schema }) })
  const res = await app.inject({ url: `${P}/keys`, headers: ADMIN })
  t.equal(res.statusCode, 200)
  t.same(res.json().map((k: { id: string, expiresAt: string }) => [k.id, k.expiresAt]).sort(),
    [['fine', '2031-01-01T00:00:00.000Z'], ['late', '9999-12-31T23:59:59.999Z']])
})
