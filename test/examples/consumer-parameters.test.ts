import { once } from 'node:events'
import { get as httpGet } from 'node:http'
import type { AddressInfo } from 'node:net'
import Database from 'better-sqlite3'
import t, { type Test } from 'tap'
import { buildExampleApp } from '../../examples/app.js'
import { createDemoKey } from '../../examples/demo-key.js'
import { SAMPLE_ENTITIES, exampleDatabaseFile, openExampleDatabase } from '../../examples/sample-datasets.js'
import { SqliteEntityReader } from '../../examples/sqlite-entity-reader.js'
import type { Column, Condition, Entity } from '../../lib/index.js'
import { loadSqlite, parseCsv, readArchive } from '../format-readers.js'
import { duckdbQuery, parquetFolder, readArrowStream } from '../columnar-readers.js'
import { tempDir } from '../example-process.js'

// columns=, where= and since= on the example (DESIGN.md §2, issue 27):
// every operator against every column type, each format cut to the chosen
// columns, limit, ETag and 304, the 400s, and since= with rows written
// during a download, checked across consecutive downloads.

const EVENTS_ROWS = 3000
const SALES = '/api/acme/shop/model/1/dataset/1'
const EVENTS = '/api/acme/shop/model/1/dataset/2'

async function exampleApp (t: Test, eventsRows = EVENTS_ROWS) {
  const dataDir = tempDir(t)
  const app = await buildExampleApp({ dataDir, adminToken: 'admin', eventsRows, logLevel: 'silent' })
  t.teardown(() => app.close())
  const demo = await createDemoKey(app, 'admin')
  if (demo === null) throw new Error('no demo key')
  const assigned = await app.inject({
    method: 'PUT', url: '/api-keys/acme/shop/endpoints/1/dataset/2', headers: { authorization: 'Bearer admin' }, payload: { keyIds: [demo.id] }
  })
  if (assigned.statusCode !== 201) throw new Error(`assign: ${assigned.statusCode}`)
  const get = async (url: string, query: Record<string, string>, headers: Record<string, string> = {}) =>
    app.inject({ method: 'GET', url: `${url}?${new URLSearchParams(query).toString()}`, headers: { authorization: `Bearer ${demo.key}`, ...headers } })
  return { app, demo, get, dataDir }
}

type Json = Record<string, unknown>

/** A value of the json download as the literal that names it in where=. */
function literalOf (column: Column, value: unknown): string {
  switch (column.type) {
    case 'text': case 'date': case 'timestamp': return `'${String(value).replaceAll("'", "''")}'`
    default: return String(value)
  }
}

/** The order SQLite gives the example's stored values (text: UTF-8 bytes; decimals: as numbers). */
function compare (column: Column, a: unknown, b: unknown): number {
  switch (column.type) {
    case 'text': case 'date': return Buffer.compare(Buffer.from(String(a)), Buffer.from(String(b)))
    case 'timestamp': return Date.parse(String(a)) - Date.parse(String(b))
    case 'boolean': return Number(a) - Number(b)
    default: return Number(a) - Number(b)
  }
}

const OPS: Record<string, (c: number) => boolean> = {
  '=': (c) => c === 0, '!=': (c) => c !== 0, '<': (c) => c < 0, '<=': (c) => c <= 0, '>': (c) => c > 0, '>=': (c) => c >= 0
}

t.test('every operator against every column type of the example, as the rows say', async (t) => {
  const { get } = await exampleApp(t)
  let checked = 0
  for (const [url, entities] of [[SALES, ['customers', 'products', 'orders']], [EVENTS, ['events']]] as const) {
    for (const entity of entities) {
      const all = (await get(url, { format: 'json', entity })).json<Record<string, Json[]>>()[entity]
      const model = SAMPLE_ENTITIES.find((e) => e.name === entity) as Entity
      for (const column of model.columns.filter((c) => model.consumer?.filters?.includes(c.name))) {
        const values = all.map((row) => row[column.name]).filter((v) => v !== null)
        const pick = values[Math.min(1, values.length - 1)]
        const other = values[values.length - 1]
        const expectIds = async (where: string, keep: (row: Json) => boolean): Promise<void> => {
          const res = await get(url, { format: 'json', entity, where })
          t.equal(res.statusCode, 200, `${entity}: ${where}`)
          const ids = res.json<Record<string, Json[]>>()[entity].map((r) => r.id)
          t.same(ids, all.filter(keep).map((r) => r.id), `${entity}: ${where}`)
          checked++
        }
        for (const [op, holds] of Object.entries(OPS)) {
          await expectIds(`${column.name} ${op} ${literalOf(column, pick)}`, (row) => row[column.name] !== null && holds(compare(column, row[column.name], pick)))
        }
        await expectIds(`${column.name} in (${literalOf(column, pick)}, ${literalOf(column, other)})`,
          (row) => row[column.name] !== null && (compare(column, row[column.name], pick) === 0 || compare(column, row[column.name], other) === 0))
        await expectIds(`${column.name} is null`, (row) => row[column.name] === null)
        await expectIds(`"${column.name}" IS NOT NULL`, (row) => row[column.name] !== null)
      }
    }
  }
  // The conditions join with and.
  const res = await get(SALES, { format: 'json', entity: 'orders', where: "paid = true and placed_at >= '2024-01-01T00:00:00Z' and unit_price < 1000" })
  t.same(res.json<Record<string, Json[]>>().orders.map((r) => r.id), [1, 6])
  t.ok(checked > 200, `${checked} filtered downloads compared`)
})

t.test('bigint, and the reader on its own: one statement per shape, bounded; lists of any length share one', async (t) => {
  const db = new Database(':memory:')
  t.teardown(() => db.close())
  db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, big INTEGER, at TEXT)')
  const bigs = [-(2n ** 63n), -1n, 0n, 2n ** 53n + 1n, 2n ** 63n - 1n]
  const insert = db.prepare('INSERT INTO t VALUES (?, ?, ?)')
  bigs.forEach((b, i) => insert.run(i + 1, b, new Date(Date.UTC(2024, 0, 1 + i)).toISOString()))
  insert.run(6, null, new Date(Date.UTC(2024, 0, 6)).toISOString())
  db.defaultSafeIntegers(false)
  const entity: Entity = {
    name: 't',
    columns: [{ name: 'id', type: 'integer', primaryKey: true }, { name: 'big', type: 'bigint' }, { name: 'at', type: 'timestamp' }],
    consumer: { columns: true, filters: ['id', 'big', 'at'], changes: { column: 'at', kind: 'timestamp' } }
  }
  const reader = new SqliteEntityReader(db, entity)
  const ids = (filters: Condition[], extra: object = {}): unknown[] =>
    [...reader.rows({ signal: new AbortController().signal, filters, ...extra })].map((r) => r[0])
  const pivot = 2n ** 53n + 1n
  t.same(ids([{ column: 'big', op: '=', value: pivot }]), [4], '= keeps every digit past 2^53')
  t.same(ids([{ column: 'big', op: '!=', value: pivot }]), [1, 2, 3, 5])
  t.same(ids([{ column: 'big', op: '<', value: pivot }]), [1, 2, 3])
  t.same(ids([{ column: 'big', op: '<=', value: pivot }]), [1, 2, 3, 4])
  t.same(ids([{ column: 'big', op: '>', value: pivot }]), [5])
  t.same(ids([{ column: 'big', op: '>=', value: -1n }]), [2, 3, 4, 5])
  t.same(ids([{ column: 'big', op: 'in', value: [2n ** 63n - 1n, -(2n ** 63n)] }]), [1, 5])
  t.same(ids([{ column: 'big', op: 'in', value: [0n] }]), [3], 'a shorter list, the same statement')
  t.same(ids([{ column: 'big', op: 'is null', value: null }]), [6])
  t.same(ids([{ column: 'big', op: 'is not null', value: null }]), [1, 2, 3, 4, 5])
  t.same(ids([], { since: new Date(Date.UTC(2024, 0, 2)), changesUntil: new Date(Date.UTC(2024, 0, 4)) }), [3, 4], 'a timestamp change column: after since, up to until')
  t.same(reader.changesUntil(), new Date(Date.UTC(2024, 0, 6)))
  t.same([...reader.rows({ signal: new AbortController().signal, columns: ['at', 'id'], limit: 1 })], [['2024-01-01T00:00:00.000Z', 1]], 'columns in the order asked')
  t.equal(reader.shapeCount, 11, 'one statement per shape: in lists of 2 and 1 shared one')
  for (let i = 0; i < 100; i++) ids([{ column: 'id', op: '>', value: i }, ...Array.from({ length: i % 70 }, () => ({ column: 'id', op: '>', value: 0 } as Condition))])
  t.equal(reader.shapeCount, 64, 'the shapes kept are bounded')
  t.throws(() => reader.rows({ signal: new AbortController().signal, columns: ['id"; DROP TABLE t; --'] }), /no column/, 'a name not in the model never reaches SQL')
  t.throws(() => reader.rows({ signal: new AbortController().signal, filters: [{ column: 'id', op: 'like' as '=', value: 1 }] }), /Unknown operator/)
})

t.test('columns: every format holds those columns, in that order; meta=ddl follows; the key is not added', async (t) => {
  const { get } = await exampleApp(t)
  const q = { entity: 'orders', columns: 'note,paid,unit_price', where: 'id <= 3' }
  const json = (await get(SALES, { ...q, format: 'json' })).json<Record<string, Json[]>>()
  t.same(json.orders.map((r) => Object.keys(r)), [['note', 'paid', 'unit_price'], ['note', 'paid', 'unit_price'], ['note', 'paid', 'unit_price']])
  t.same(json.orders[1], { note: 'Gift wrap, please: "Happy birthday!"', paid: true, unit_price: '1234.00' })

  const csv = parseCsv((await get(SALES, { ...q, format: 'csv' })).body)
  t.same(csv[0], ['note', 'paid', 'unit_price'], 'csv header')
  t.equal(csv.length, 4)

  const sql = await get(SALES, { ...q, format: 'sql' })
  const loaded = loadSqlite(sql.body)
  t.same((loaded.prepare('SELECT * FROM orders').raw().all() as unknown[][]).map((r) => r.length), [3, 3, 3], 'sql: a table of three columns')
  t.same(loaded.prepare('SELECT name FROM pragma_table_info(\'orders\')').raw().all().flat(), ['note', 'paid', 'unit_price'])
  loaded.close()

  const ddl = await get(SALES, { ...q, format: 'sql', meta: 'ddl' })
  t.match(ddl.body, /"note"[\s\S]*"paid"[\s\S]*"unit_price"/)
  t.notMatch(ddl.body, /"placed_at"|"id"/, 'meta=ddl: the chosen columns, no primary key added')
  const oracleDdl = await get(SALES, { ...q, format: 'oracle-loader', meta: 'ddl' })
  t.notMatch(oracleDdl.body, /PLACED_AT|placed_at/)

  for (const format of ['csv-zip', 'json-zip', 'oracle-loader', 'parquet-zip'] as const) {
    const res = await get(SALES, { ...q, format })
    t.equal(res.statusCode, 200, format)
    const files = await readArchive('zip', res.rawPayload)
    const name = format === 'csv-zip' ? 'orders.csv' : format === 'json-zip' ? 'orders.json' : format === 'oracle-loader' ? 'orders.ctl' : 'orders.parquet'
    const file = files.get(name)?.toString('latin1') ?? ''
    if (format === 'csv-zip') t.equal(file.split('\r\n')[0], 'note,paid,unit_price', format)
    else if (format === 'json-zip') t.same(Object.keys(JSON.parse(file)[0]), ['note', 'paid', 'unit_price'], format)
    else if (format === 'oracle-loader') {
      t.match(file, /"NOTE"[\s\S]*"PAID"[\s\S]*"UNIT_PRICE"/i, format)
      t.notMatch(file, /PLACED_AT/i, format)
    } else t.ok(file.startsWith('PAR1'), format)
  }
  const tar = await get(SALES, { ...q, format: 'csv-zip', archiveType: 'tar' })
  t.equal((await readArchive('tar', tar.rawPayload)).get('orders.csv')?.toString().split('\r\n')[0], 'note,paid,unit_price', 'tar')

  const folder = await parquetFolder(t)
  const parquet = await get(SALES, { ...q, format: 'parquet' })
  const file = await folder('orders.parquet', parquet.rawPayload)
  t.same(await duckdbQuery(`SELECT note, paid, CAST(unit_price AS VARCHAR) FROM '${file}'`),
    [[null, true, '9.99'], ['Gift wrap, please: "Happy birthday!"', true, '1234.00'], ['Deliver to:\nBackdoor, 2nd floor', false, '19.50']],
    'parquet: three columns, as DuckDB reads them')
  t.same((await duckdbQuery(`SELECT column_name FROM (DESCRIBE SELECT * FROM '${file}')`)).flat(), ['note', 'paid', 'unit_price'])
  const arrow = readArrowStream((await get(SALES, { ...q, format: 'arrow' })).rawPayload)
  t.same(arrow.schema.fields.map((f) => f.name), ['note', 'paid', 'unit_price'], 'arrow')
  t.equal(arrow.numRows, 3)
})

t.test('with limit, entity, ETag and 304; refusals', async (t) => {
  const { get } = await exampleApp(t)
  const first = await get(EVENTS, { format: 'json', where: "kind = 'purchase'", limit: '2', columns: 'id,kind' })
  t.equal(first.statusCode, 200)
  const rows = first.json<Record<string, Json[]>>().events
  t.equal(rows.length, 2, 'limit: the first two that match')
  t.ok(rows.every((r) => r.kind === 'purchase'))
  const etag = first.headers.etag as string
  t.match(etag, /^W\//)
  t.equal(first.headers['data-changes-until'], undefined, 'with limit: no bound, the download may hold only some of the changes')
  const whole = await get(EVENTS, { format: 'json', where: "kind = 'purchase'", columns: 'id,kind' })
  t.equal(whole.headers['data-changes-until'], String(EVENTS_ROWS), 'without: the change bound')
  const bound = await get(EVENTS, { format: 'json', where: "kind = 'purchase'", columns: 'id,kind' }, { 'if-none-match': whole.headers.etag as string })
  t.equal(bound.statusCode, 304)
  t.equal(bound.headers['data-changes-until'], String(EVENTS_ROWS), 'a 304 says the bound too')
  const respelled = await get(EVENTS, { format: 'json', where: "kind='purchase'", limit: '2', columns: 'id,kind' })
  t.equal(respelled.headers.etag, etag, 'the same typed selection spelled otherwise: the same ETag')
  const again = await get(EVENTS, { format: 'json', where: "kind = 'purchase'", limit: '2', columns: 'id,kind' }, { 'if-none-match': etag })
  t.equal(again.statusCode, 304)
  const etags = new Set([etag])
  for (const query of [
    { format: 'json', where: "kind = 'click'", limit: '2', columns: 'id,kind' },
    { format: 'json', where: "kind = 'purchase'", limit: '3', columns: 'id,kind' },
    { format: 'json', where: "kind = 'purchase'", limit: '2', columns: 'kind,id' },
    { format: 'json', where: "kind = 'purchase'", limit: '2', columns: 'id,kind', since: '5' },
    { format: 'json' }
  ] as Array<Record<string, string>>) {
    const res = await get(EVENTS, query, { 'if-none-match': etag })
    t.equal(res.statusCode, 200, JSON.stringify(query))
    etags.add(res.headers.etag as string)
  }
  t.equal(etags.size, 6, 'each selection its own ETag')
  t.not(whole.headers.etag, etag)

  // Every format, filtered and limited (parquet and arrow served from rendered files under the ETag).
  for (const format of ['json', 'sql', 'csv', 'csv-zip', 'json-zip', 'oracle-loader', 'parquet', 'parquet-zip', 'arrow']) {
    const res = await get(EVENTS, { format, where: 'id > 10 and id <= 20', columns: 'ts,id', limit: '5' })
    t.equal(res.statusCode, 200, format)
    if (format === 'csv') t.same(parseCsv(res.body).map((r) => r[1]), ['id', '11', '12', '13', '14', '15'], 'csv: rows 11 to 15')
    if (format === 'arrow') t.same([...readArrowStream(res.rawPayload).getChild('id') ?? []], [11, 12, 13, 14, 15], 'arrow: rows 11 to 15')
    const cached = await get(EVENTS, { format, where: 'id > 10 and id <= 20', columns: 'ts,id', limit: '5' }, { 'if-none-match': res.headers.etag as string })
    t.equal(cached.statusCode, 304, `${format}: 304`)
  }

  const refusals: Array<[string, Record<string, string>, string]> = [
    [SALES, { format: 'json', columns: 'id' }, 'Invalid columns: it applies to one entity; name one with entity='],
    [SALES, { format: 'json', entity: 'orders', since: '1' }, 'Invalid since: not supported by this dataset'],
    [SALES, { format: 'json', entity: 'orders', columns: 'id,nope' }, 'Invalid columns: no column "nope" in entity "orders"'],
    [EVENTS, { where: "payload = 'x'" }, 'Invalid where: column "payload" cannot be filtered by this dataset'],
    [EVENTS, { where: "kind = 'x' or 1=1" }, 'Invalid where: expected and at position 12; or, functions and expressions are not supported'],
    [EVENTS, { where: "kind = 'x'; DROP TABLE events" }, 'Invalid where: unexpected character at position 11; the grammar is <column> <op> <literal> joined by and'],
    [EVENTS, { where: 'id = 1.5' }, 'Invalid where: column "id" needs an integer, written bare (42)'],
    [EVENTS, { since: 'yesterday' }, 'Invalid since: must be an integer (pass the last Data-Changes-Until)'],
    [EVENTS, { format: 'nope', where: 'id = 1.5' }, 'Unknown download format nope, supported formats = json|sql|csv-zip|json-zip|oracle-loader|csv|parquet|parquet-zip|arrow']
  ]
  for (const [url, query, message] of refusals) {
    const res = await get(url, query)
    t.equal(res.statusCode, message.startsWith('Unknown') ? 500 : 400, message)
    t.same(res.json(), { message })
  }
})

t.test('since: rows written during downloads are neither lost nor returned twice across consecutive downloads', async (t) => {
  const { app, demo, dataDir } = await exampleApp(t, 20_000)
  await app.listen({ host: '127.0.0.1', port: 0 })
  const { port } = app.server.address() as AddressInfo
  const writer = openExampleDatabase(exampleDatabaseFile(dataDir))
  t.teardown(() => writer.close())
  let next = 20_001
  const write = (n: number): void => {
    const insert = writer.prepare("INSERT INTO events (id, ts, kind, value, payload) VALUES (?, '2025-01-01T00:00:00.000Z', 'click', 1, NULL)")
    writer.transaction(() => { for (let i = 0; i < n; i++) insert.run(next++) })()
  }

  /** A csv download of the ids, with writes made after its first bytes came and before the rest is read. */
  const download = async (since: string | undefined, during: () => void): Promise<{ ids: number[], until: string }> => {
    const query = new URLSearchParams({ format: 'csv', columns: 'id', ...(since === undefined ? {} : { since }) })
    const request = httpGet({ host: '127.0.0.1', port, path: `${EVENTS}?${query.toString()}`, headers: { authorization: `Bearer ${demo.key}` }, agent: false })
    const [response] = await once(request, 'response')
    t.equal(response.statusCode, 200)
    const chunks: Buffer[] = []
    const ended = once(response, 'end')
    let wrote = false
    response.on('data', (chunk: Buffer) => {
      chunks.push(chunk)
      if (!wrote) { wrote = true; during() }
    })
    await ended
    const ids = Buffer.concat(chunks).toString().split('\r\n').slice(1).filter((l) => l !== '').map(Number)
    return { ids, until: response.headers['data-changes-until'] as string }
  }

  // A write that lands after the bound is taken and before the rows are read:
  // the read must leave it for the next download.
  const events = await app.sampleDatasets.getDataset({ organization: 'acme', project: 'shop', modelSequence: 1, resourceSequence: 2 })
  if (events?.changesUntil === undefined) throw new Error('no changesUntil')
  const changesUntil = events.changesUntil.bind(events)
  let writeAfterBound = 0
  events.changesUntil = async (entity) => {
    const bound = await changesUntil(entity)
    write(writeAfterBound)
    return bound
  }
  t.teardown(() => { events.changesUntil = changesUntil })

  const seen: number[] = []
  let since: string | undefined
  for (let round = 0; round < 6; round++) {
    write(round * 7) // between downloads
    writeAfterBound = round % 2 === 0 ? 0 : 25
    const { ids, until } = await download(since, () => { write(50 + round) }) // and during one
    t.match(until, /^[0-9]+$/, `round ${round}: Data-Changes-Until`)
    t.ok(ids.every((id) => id <= Number(until)), `round ${round}: no row past the bound`)
    if (since !== undefined) t.ok(ids.every((id) => id > Number(since)), `round ${round}: no row at or before since`)
    seen.push(...ids)
    since = until
  }
  writeAfterBound = 0
  const last = await download(since, () => {})
  seen.push(...last.ids)
  const all = (writer.prepare('SELECT id FROM events ORDER BY id').raw().all() as number[][]).map((r) => r[0])
  t.equal(new Set(seen).size, seen.length, 'no row twice')
  t.same([...seen].sort((a, b) => a - b), all, 'every row once, those written during downloads included')
  t.ok(all.length > 20_000 + 300, 'rows were written during the downloads')
  const empty = await download(last.until, () => {})
  t.same(empty, { ids: [], until: last.until }, 'nothing new: no rows, the same bound')
})
