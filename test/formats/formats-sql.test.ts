import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import pg from 'pg'
import t, { type Test } from 'tap'
import type { Column, Row } from '../../lib/index.js'
import { FORMATS } from '../../lib/formats/index.js'
import { ddlFor, sqlString } from '../../lib/formats/sql.js'
import { openExampleDatabase, SAMPLE_MODEL, SampleDatasets, seedSampleData } from '../../examples/sample-datasets.js'
import { MemoryDatasets, SALES_REF } from '../fixtures.js'
import { ALL_TYPES, datasetOf, specOf } from '../format-fixtures.js'
import { collect, loadSqlite, loadSqliteCli, sqliteCliAvailable } from '../format-readers.js'
import { assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'

// The sql format's choices, one by one: DDL per type, INSERT batches, one
// transaction, identifiers, binary, exact decimals, refused values, CR LF
// and bare-number json through the sqlite3 shell, names SQLite reserves.

async function tempFile (t: Test, name: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'fde-sql-test-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return join(dir, name)
}

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
    '  "doc" JSON /* SQLite: TEXT, exact */ COMPRESSION "default",',
    '  PRIMARY KEY ("id")',
    ');',
    ''
  ].join('\n'))
  const db = loadSqlite(ddlFor([{ name: 'all', columns: ALL_TYPES }]))
  const affinity = db.prepare("SELECT name, type FROM pragma_table_info('all')").raw().all() as string[][]
  t.same(affinity.find(([name]) => name === 'long decimal'), ['long decimal', 'NUMERIC /* SQLite: TEXT, exact */ (40,10)'])
  t.same(affinity.find(([name]) => name === 'doc'), ['doc', 'JSON /* SQLite: TEXT, exact */ COMPRESSION "default"'], 'the comment is part of the type')
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
  const file = await tempFile(t, 'cut.db')
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

// Regression: the sqlite3 shell drops a CR that ends an input line, so a raw
// CR LF inside a literal loaded as LF alone.
const CR_TEXTS = [
  'a\r\nb', 'lone\rCR', 'CR at the end\r', 'CR CR LF\r\r\n', '\r\n', '\r\n\r\n', "it's\r\n'quoted'\r\n", 'LF CR\n\r',
  // more CR LFs than SQLite's expression depth limit (1000), had they been a flat chain of ||
  'many\r\n'.repeat(3000)
]
// Regression: with JSON (NUMERIC affinity) SQLite turned these into numbers
// ('0.3', '1.23456789012346e+19', '1.0e+21'). 12345678901234567890 is written 12345678901234567000.
const JSON_VALUES = [0.30000000000000004, 12345678901234567890, 1e21, 100, -1.5e-7, 'a\r\nb', [1, 2.5], { a: 1e300 }, true]
const EDGE: Column[] = [
  { name: 'id', type: 'integer', primaryKey: true },
  { name: 'text', type: 'text' },
  { name: 'short', type: 'text', maxLength: 20 },
  { name: 'doc', type: 'json' }
]
const EDGE_ROWS: Row[] = Array.from({ length: Math.max(CR_TEXTS.length, JSON_VALUES.length) }, (_, i) => {
  const text = CR_TEXTS[i] ?? null
  return [i + 1, text, text !== null && text.length <= 20 ? text : null, JSON_VALUES[i] ?? null]
})
const EDGE_EXPECTED = EDGE_ROWS.map(([id, text, short, doc]) => [id, text, short, doc === null ? null : JSON.stringify(doc)])

const hex = (s: unknown): string | null => typeof s === 'string' ? Buffer.from(s, 'utf8').toString('hex').toUpperCase() : null

t.test('a CR LF is split into two literals; no raw CR comes right before a raw LF', async (t) => {
  t.equal(sqlString("it's\r\nfine"), "('it''s\r' || '\nfine')")
  t.equal(sqlString('a\r\r\nb\rc\n'), "('a\r\r' || '\nb\rc\n')")
  t.equal(sqlString('\r\n\r\n'), "('\r' || ('\n\r' || '\n'))", 'a balanced tree of ||')
  const sql = await script([{ name: 'edge', columns: EDGE, rows: EDGE_ROWS }])
  t.notOk(sql.includes('\r\n'))
  t.ok(sql.includes('\r'), 'the CRs are still there')
})

t.test('CR, LF and bare-number json load exactly with better-sqlite3 and PostgreSQL', async (t) => {
  const sql = await script([{ name: 'edge', columns: EDGE, rows: EDGE_ROWS }])
  const db = loadSqlite(sql)
  t.strictSame(db.prepare('SELECT id, text, short, doc FROM edge ORDER BY id').raw().all().map((r) => [Number((r as unknown[])[0]), ...(r as unknown[]).slice(1)]), EDGE_EXPECTED)
  t.same(db.prepare('SELECT DISTINCT typeof(doc) FROM edge WHERE doc IS NOT NULL').raw().all(), [['text']], 'json stays text in SQLite')
  db.close()
  const url = await pgAvailable(t)
  if (url === null) return
  const { client } = await freshSchema(t, url)
  await client.query(sql)
  const rows = await client.query({ text: 'SELECT id, text, short, doc::text, pg_typeof(doc)::text FROM edge ORDER BY id', rowMode: 'array' })
  t.strictSame(rows.rows.map((r: unknown[]) => r.slice(0, 4)), EDGE_EXPECTED)
  t.same([...new Set(rows.rows.map((r: unknown[]) => r[4]))], ['json'], 'still json in PostgreSQL')
})

t.test('the sqlite3 shell loads CR, LF and bare-number json exactly', async (t) => {
  if (!sqliteCliAvailable(t)) return
  const sql = await script([{ name: 'edge', columns: EDGE, rows: EDGE_ROWS }])
  const db = loadSqliteCli(sql, await tempFile(t, 'edge.db'))
  t.teardown(() => db.close())
  const rows = db.prepare('SELECT id, hex(text), hex(short), hex(doc), typeof(doc) FROM edge ORDER BY id').raw().all() as unknown[][]
  t.strictSame(rows.map((r) => r.slice(0, 4)), EDGE_EXPECTED.map(([id, text, short, doc]) => [BigInt(id as number), hex(text) ?? '', hex(short) ?? '', hex(doc) ?? '']))
  t.strictSame(db.prepare('SELECT id, doc FROM edge WHERE id <= 3 ORDER BY id').raw().all(),
    [[1n, '0.30000000000000004'], [2n, '12345678901234567000'], [3n, '1e+21']], 'bare numbers keep their JSON text')
})

t.test("the example's sample dataset loads through the sqlite3 shell as through better-sqlite3", async (t) => {
  if (!sqliteCliAvailable(t)) return
  const source = await tempFile(t, 'example.db')
  const seed = openExampleDatabase(source)
  seedSampleData(seed, 20)
  seed.close()
  const datasets = new SampleDatasets(source)
  t.teardown(() => datasets.close())
  const sales = await datasets.getDataset({ ...SAMPLE_MODEL, resourceSequence: 1 })
  if (sales === null) throw new Error('no sales dataset')
  const sql = (await collect(FORMATS.sql(specOf(sales)).body)).toString('utf8')
  const cli = loadSqliteCli(sql, await tempFile(t, 'sales.db'))
  t.teardown(() => cli.close())
  const reference = loadSqlite(sql)
  t.teardown(() => reference.close())
  for (const entity of sales.entities) {
    // Storage class and bytes of every value.
    const query = `SELECT ${entity.columns.map((c) => `typeof("${c.name}") || ':' || hex("${c.name}")`).join(', ')} FROM "${entity.name}" ORDER BY id`
    t.same(cli.prepare(query).raw().all(), reference.prepare(query).raw().all(), entity.name)
  }
  t.equal((cli.prepare('SELECT notes FROM customers WHERE id = 4').raw().get() as string[])[0], 'Comma, "quotes" and a CRLF\r\nin one note')
})

t.test('names SQLite cannot take are refused before anything is sent', async (t) => {
  const columns: Column[] = [{ name: 'id', type: 'integer' }]
  t.throws(() => ddlFor([{ name: 'cr\r\nlf', columns }]), { message: 'The name "cr\r\nlf" contains CR LF, which the sql format cannot carry (the sqlite3 shell drops the CR)' })
  t.throws(() => ddlFor([{ name: 't', columns: [{ name: 'a\r\nb', type: 'text' }] }]), /contains CR LF/)
  t.throws(() => ddlFor([{ name: 'sqlite_sequence', columns }]), /cannot be a SQLite table name/)
  t.doesNotThrow(() => ddlFor([{ name: 'sqlite', columns }, { name: 'my_sqlite_t', columns }, { name: 'cr\r', columns }]))

  const datasets = new MemoryDatasets().add(SALES_REF, { name: 'reserved', entities: [{ name: 'SQLite_Stat1', columns, rows: [[1]] }] })
  const app = (await buildApp(t, { datasets })).app
  const { id, key } = await createKey(app)
  await assignKeys(app, 'dataset', [id])
  const message = 'The entity name "SQLite_Stat1" cannot be a SQLite table name (names beginning with sqlite_ are reserved by SQLite)'
  for (const query of ['', '&format=sql', '&meta=ddl', '&meta=ddl&format=json']) {
    const res = await app.inject({ url: `${DATASET_URL}?api_key=${key}${query}` })
    t.equal(res.statusCode, 500, query || 'the default format')
    t.same(res.json(), { message }, query || 'the default format')
  }
  const oracle = await app.inject({ url: `${DATASET_URL}?api_key=${key}&meta=ddl&format=oracle-loader` })
  t.equal(oracle.statusCode, 200, 'Oracle takes the name')
  t.same((await app.inject({ url: `${DATASET_URL}?api_key=${key}&format=json` })).json(), { SQLite_Stat1: [{ id: 1 }] })
})
