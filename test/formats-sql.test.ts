import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import pg from 'pg'
import t from 'tap'
import type { Column, Row } from '../lib/index.js'
import { FORMATS } from '../lib/formats/index.js'
import { ddlFor } from '../lib/formats/sql.js'
import { ALL_TYPES, datasetOf, specOf } from './format-fixtures.js'
import { collect, loadSqlite } from './format-readers.js'
import { freshSchema, pgAvailable } from './pg.js'

// The sql format's choices, one by one: DDL per type, INSERT batches, one
// transaction, identifiers, binary, exact decimals, refused values.

async function script (entities: Array<{ name: string, columns: Column[], rows: Row[] }>): Promise<string> {
  return (await collect(FORMATS.sql(specOf(datasetOf('d', entities))).body)).toString('utf8')
}

t.test('DDL: one portable type per logical type', async (t) => {
  t.equal(ddlFor([{ name: 'all', columns: ALL_TYPES }]), [
    'CREATE TABLE "all" (',
    '  "id" INTEGER NOT NULL,',
    '  "big" BIGINT,',
    '  "amount" NUMERIC /* SQLite: TEXT, exact */ (12,2),',
    '  "long decimal" NUMERIC /* SQLite: TEXT, exact */ (40,10),',
    '  "ratio" DOUBLE PRECISION,',
    '  "note" TEXT,',
    '  "code \'v\'" VARCHAR(20),',
    '  "Flag" BOOLEAN,',
    '  "day" DATE,',
    '  "local time" TIMESTAMP,',
    '  "at" TIMESTAMP WITH TIME ZONE,',
    '  "bytes" BYTEA,',
    '  "doc" JSON,',
    '  PRIMARY KEY ("id")',
    ');',
    ''
  ].join('\n'))
  const db = loadSqlite(ddlFor([{ name: 'all', columns: ALL_TYPES }]))
  const affinity = db.prepare("SELECT name, type FROM pragma_table_info('all')").raw().all() as string[][]
  t.same(affinity.find(([name]) => name === 'long decimal'), ['long decimal', 'NUMERIC /* SQLite: TEXT, exact */ (40,10)'])
  db.close()
})

const WIDE: Column[] = [{ name: 'id', type: 'integer', primaryKey: true }, { name: 'text', type: 'text' }]

t.test('rows go in multi-row INSERTs of at most 500 rows, streamed in chunks', async (t) => {
  const rows: Row[] = Array.from({ length: 1201 }, (_, i) => [i + 1, `row ${i + 1}: ${'x'.repeat(100)}`])
  const body = FORMATS.sql(specOf(datasetOf('d', [{ name: 'wide', columns: WIDE, rows }]))).body
  let chunks = 0
  const parts: string[] = []
  for await (const chunk of body) { chunks++; parts.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8')) }
  const sql = parts.join('')
  t.ok(chunks > 1, `${chunks} chunks, not one string`)
  t.equal(sql.match(/^INSERT INTO "wide" \("id", "text"\) VALUES$/gm)?.length, 3)
  t.match(sql, /^BEGIN;\n/m)
  t.match(sql, /\nCOMMIT;\n$/)
  const db = loadSqlite(sql)
  t.same(db.prepare('SELECT count(*), sum(id) FROM wide').raw().get(), [1201n, 1201n * 1202n / 2n])
  db.close()
})

t.test('a script cut short loads nothing: everything is in one transaction', async (t) => {
  const full = await script([{ name: 'wide', columns: WIDE, rows: [[1, 'a'], [2, 'b']] }])
  const cut = full.slice(0, full.lastIndexOf('COMMIT;'))
  const dir = await mkdtemp(join(tmpdir(), 'fde-sql-test-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const file = join(dir, 'cut.db')
  const first = new Database(file)
  first.exec(cut)
  t.ok(first.inTransaction, 'the transaction is still open at the end of the file')
  first.close()
  const again = new Database(file)
  t.same(again.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all(), [], 'SQLite rolled it back')
  again.close()

  const url = await pgAvailable(t)
  if (url === null) return
  const { schema } = await freshSchema(t, url)
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  await client.query(`SET search_path TO "${schema}"`)
  await client.query(cut)
  await client.end() // a session that ends inside a transaction rolls it back
  const check = new pg.Client({ connectionString: url })
  await check.connect()
  t.teardown(() => check.end())
  const tables = await check.query('SELECT table_name FROM information_schema.tables WHERE table_schema = $1', [schema])
  t.same(tables.rows, [], 'PostgreSQL rolled it back')
})

const ODD_NAMES = { name: 'say "hi"; DROP TABLE x; --', columns: [{ name: 'a "b"', type: 'integer' } as Column, { name: "c'd", type: 'text' } as Column] }

t.test('identifiers with quotes, semicolons and comments are double-quoted, not escaped away', async (t) => {
  const sql = await script([{ ...ODD_NAMES, rows: [[1, "it's"]] }])
  const db = loadSqlite(sql)
  t.same(db.prepare('SELECT "a ""b""", "c\'d" FROM "say ""hi""; DROP TABLE x; --"').raw().all(), [[1n, "it's"]])
  db.close()
  const url = await pgAvailable(t)
  if (url === null) return
  const { client } = await freshSchema(t, url)
  await client.query(sql)
  const rows = await client.query({ text: 'SELECT * FROM "say ""hi""; DROP TABLE x; --"', rowMode: 'array' })
  t.same(rows.rows, [[1, "it's"]])
})

const BYTES = Buffer.from([0, 1, 0x27, 0x5c, 0xff, 0x0a])
const TYPED: Column[] = [
  { name: 'id', type: 'integer' },
  { name: 'bytes', type: 'binary' },
  { name: 'exact', type: 'decimal', precision: 38, scale: 18 },
  { name: 'text', type: 'text' }
]
const TYPED_ROW: Row = [1, BYTES, '12345678901234567890.123456789012345678', 'C:\\path\\n\'quoted\'']

t.test("binary is '\\x<hex>': bytea in PostgreSQL, the same text in SQLite", async (t) => {
  const sql = await script([{ name: 'typed', columns: TYPED, rows: [TYPED_ROW, [2, new Uint8Array(0), null, '']] }])
  t.match(sql, /\(1, '\\x0001275cff0a', '12345678901234567890\.123456789012345678', 'C:\\path\\n''quoted'''\)/)
  const db = loadSqlite(sql)
  t.same(db.prepare('SELECT bytes, unhex(substr(bytes, 3)), exact, typeof(exact), text FROM typed ORDER BY id').raw().all(), [
    ['\\x0001275cff0a', BYTES, '12345678901234567890.123456789012345678', 'text', 'C:\\path\\n\'quoted\''],
    ['\\x', Buffer.alloc(0), null, 'null', '']
  ])
  db.close()
  const url = await pgAvailable(t)
  if (url === null) return
  const { client } = await freshSchema(t, url)
  await client.query(sql)
  const rows = await client.query('SELECT bytes, exact::text AS exact, text FROM typed ORDER BY id')
  t.same(rows.rows, [
    { bytes: BYTES, exact: '12345678901234567890.123456789012345678', text: 'C:\\path\\n\'quoted\'' },
    { bytes: Buffer.alloc(0), exact: null, text: '' }
  ])
})

t.test('a value the column cannot hold fails the stream, naming entity and column', async (t) => {
  await t.rejects(script([{ name: 'wide', columns: WIDE, rows: [[1, 'fine'], [2, 'nul \0 inside']] }]),
    { message: 'Entity "wide", column "text": text contains U+0000, which the sql format cannot carry' })
  await t.rejects(script([{ name: 'typed', columns: TYPED, rows: [[1, null, '1.5e400', null]] }]),
    { message: /^Entity "typed", column "exact": decimal does not fit/ })
  await t.rejects(script([{ name: 'typed', columns: TYPED, rows: [['1; DROP TABLE typed', null, null, null]] }]),
    { message: 'Entity "typed", column "id": an integer column needs an integer' }, 'never written into the script as is')
})
