import { once } from 'node:events'
import zlib from 'node:zlib'
import { request as httpRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import fc from 'fast-check'
import t from 'tap'
import yauzl from 'yauzl'
import type { Column, Row } from '../../lib/index.js'
import { FORMATS } from '../../lib/formats/index.js'
import { ALL_TYPES, ODD_ENTITY, allTypesRows, datasetOf, expectedRow, specOf } from '../format-fixtures.js'
import { collect, parseCsv, readArchive } from '../format-readers.js'
import { arrowTextHex, duckdbQuery, parquetFolder, readArrowStream } from '../columnar-readers.js'
import { DATASET_URL, assignKeys, buildApp, createKey } from '../helper.js'
import { MemoryDatasets, SALES_REF } from '../fixtures.js'

// parquet, arrow, parquet-zip and csv: every logical type through random
// rows read back by independent readers, the one-entity rule, failures
// before and after the first byte, the archive, HEAD.

const RUNS = Number(process.env.FORMAT_PROPERTY_RUNS ?? 40)
const quote = (name: string): string => `"${name.replaceAll('"', '""')}"`

/**
 * Text as the hex of its UTF-8 bytes: JS readers' strings come through
 * TextDecoder, which drops a leading U+FEFF, so bytes are compared.
 */
const isText = (c: Column): boolean => c.type === 'text'
const textHex = (v: unknown): unknown => (typeof v === 'string' ? Buffer.from(v).toString('hex') : v)

/** ALL_TYPES as DuckDB gives them back in expectedRow's forms. */
function duckdbProjection (c: Column): string {
  const q = quote(c.name)
  if (isText(c)) return `lower(hex(encode(${q})))`
  switch (c.type) {
    case 'bigint': case 'decimal': case 'date': case 'json': return `CAST(${q} AS VARCHAR)`
    case 'timestamp': return `epoch_ms(${q})`
    case 'binary': return `lower(hex(${q}))`
    default: return q
  }
}

function scaled (n: bigint, scale: number): string {
  const digits = (n < 0n ? -n : n).toString().padStart(scale + 1, '0')
  return (n < 0n ? '-' : '') + digits.slice(0, -scale) + '.' + digits.slice(-scale)
}

/** A value flechette reads (every value exact) in expectedRow's form. */
function fromArrow (c: Column, v: unknown): unknown {
  if (v === null) return null
  switch (c.type) {
    case 'bigint': return String(v)
    case 'decimal': return c.precision <= 38 ? scaled(v as bigint, c.scale) : v
    case 'date': return new Date(v as number).toISOString().slice(0, 10)
    case 'timestamp': return Number((v as bigint) / 1000n)
    case 'binary': return Buffer.from(v as Uint8Array).toString('hex')
    default: return v
  }
}

t.test('every logical type, random rows: parquet read back by DuckDB, arrow by flechette', async (t) => {
  const save = await parquetFolder(t)
  let run = 0
  await fc.assert(fc.asyncProperty(allTypesRows(), fc.constantFrom(1, 300, 64 * 1024), async (rows, batchBytes) => {
    const dataset = datasetOf('types', [{ name: ODD_ENTITY, columns: ALL_TYPES, rows }])
    const expected = rows.map((row) => expectedRow(row).map((v, i) => (isText(ALL_TYPES[i]) ? textHex(v) : v)))

    const file = await save(`run-${++run}.parquet`, await collect(FORMATS.parquet(specOf(dataset, { batchBytes })).body))
    const read = await duckdbQuery(`SELECT ${ALL_TYPES.map(duckdbProjection).join(', ')} FROM read_parquet('${file}') ORDER BY id`)
    t.same(read.map((row) => row.map((v) => (typeof v === 'bigint' ? Number(v) : v))), expected)

    const table = readArrowStream(await collect(FORMATS.arrow(specOf(dataset, { batchBytes })).body))
    t.equal(table.numRows, rows.length)
    const columns = ALL_TYPES.map((c) => (isText(c) ? arrowTextHex(table, c.name) : table.getChild(c.name)?.toArray() ?? []))
    t.same(Array.from({ length: table.numRows }, (_, r) => ALL_TYPES.map((c, i) => fromArrow(c, columns[i][r]))), expected)
  }), { numRuns: RUNS })
})

t.test('the types as readers see them: DuckDB\'s names for each column, Parquet\'s logical types, Arrow\'s', async (t) => {
  const save = await parquetFolder(t)
  const dataset = datasetOf('types', [{ name: 'all', columns: ALL_TYPES, rows: [] }])
  const file = await save('types.parquet', await collect(FORMATS.parquet(specOf(dataset)).body))
  t.same(await duckdbQuery(`SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM '${file}')`), [
    ['id', 'INTEGER'], ['big', 'BIGINT'], ['amount', 'DECIMAL(12,2)'], ['long decimal', 'VARCHAR'], ['ratio', 'DOUBLE'],
    ['note', 'VARCHAR'], ["code 'v'", 'VARCHAR'], ['Flag', 'BOOLEAN'], ['day', 'DATE'], ['local time', 'TIMESTAMP'],
    ['at', 'TIMESTAMP WITH TIME ZONE'], ['bytes', 'BLOB'], ['doc', 'JSON']
  ], 'an empty entity is a valid file with its schema')
  const schema = await duckdbQuery(`SELECT name, type, repetition_type, logical_type FROM parquet_schema('${file}') WHERE name <> 'schema'`)
  t.match(schema, [
    ['id', 'INT32', 'REQUIRED'], ['big', 'INT64', 'OPTIONAL'], ['amount', 'INT64', 'OPTIONAL', /Decimal.*scale=2, precision=12/],
    ['long decimal', 'BYTE_ARRAY', 'OPTIONAL', /String/], ['ratio', 'DOUBLE'], ['note', 'BYTE_ARRAY', 'OPTIONAL', /String/],
    ["code 'v'", 'BYTE_ARRAY'], ['Flag', 'BOOLEAN'], ['day', 'INT32', 'OPTIONAL', /Date/],
    ['local time', 'INT64', 'OPTIONAL', /isAdjustedToUTC=0.*MICROS=MicroSeconds/], ['at', 'INT64', 'OPTIONAL', /isAdjustedToUTC=1.*MICROS=MicroSeconds/],
    ['bytes', 'BYTE_ARRAY', 'OPTIONAL', null], ['doc', 'BYTE_ARRAY', 'OPTIONAL', /Json/]
  ])
  const arrow = readArrowStream(await collect(FORMATS.arrow(specOf(dataset)).body))
  t.equal(arrow.numRows, 0, 'an empty entity is a stream with its schema and no batch')
  t.same(arrow.schema.fields.map((f) => f.name), ALL_TYPES.map((c) => c.name))
})

t.test('decimals exact to 38 digits, never through a float; bigint to 64 bits; microseconds kept', async (t) => {
  const save = await parquetFolder(t)
  const columns: Column[] = [
    { name: 'id', type: 'integer', primaryKey: true },
    { name: 'd9', type: 'decimal', precision: 9, scale: 4 },
    { name: 'd18', type: 'decimal', precision: 18, scale: 0 },
    { name: 'd38', type: 'decimal', precision: 38, scale: 10 },
    { name: 'b', type: 'bigint' },
    { name: 'ts', type: 'timestamp', withTimeZone: true },
    { name: 'local', type: 'timestamp' }
  ]
  const rows: Row[] = [
    [1, '-99999.9999', '999999999999999999', '9999999999999999999999999999.9999999999', 2n ** 63n - 1n, '0001-01-01T00:00:00.000001Z', '9999-12-31T23:59:59.999999'],
    [2, '0.0001', '-999999999999999999', '-0.0000000001', -(2n ** 63n), '2024-02-29T23:59:59.123456+05:30', '1970-01-01T00:00:00'],
    [3, 12.5, 9007199254740993n, '12345678901234567.8900000001', '9007199254740993', new Date(-1), null]
  ]
  const dataset = datasetOf('exact', [{ name: 'e', columns, rows }])
  const file = await save('exact.parquet', await collect(FORMATS.parquet(specOf(dataset)).body))
  const read = await duckdbQuery(`SELECT CAST(d9 AS VARCHAR), CAST(d18 AS VARCHAR), CAST(d38 AS VARCHAR), b, epoch_us(ts), epoch_us("local") FROM '${file}' ORDER BY id`)
  t.same(read, [
    ['-99999.9999', '999999999999999999', '9999999999999999999999999999.9999999999', 2n ** 63n - 1n, -62135596799999999n, 253402300799999999n],
    ['0.0001', '-999999999999999999', '-0.0000000001', -(2n ** 63n), 1709231399123456n, 0n],
    ['12.5000', '9007199254740993', '12345678901234567.8900000001', 9007199254740993n, -1000n, null]
  ])
  const arrow = readArrowStream(await collect(FORMATS.arrow(specOf(dataset)).body))
  const get = (name: string): unknown[] => arrow.getChild(name)?.toArray() as unknown[]
  t.same(get('d38'), [99999999999999999999999999999999999999n, -1n, 123456789012345678900000001n])
  t.same(get('ts'), [-62135596799999999n, 1709231399123456n, -1000n])
})

t.test('one-entity formats need entity= on a dataset of several; parquet-zip holds them all', async (t) => {
  const { app } = await buildApp(t)
  const { id, key } = await createKey(app)
  await assignKeys(app, 'dataset', [id])
  for (const format of ['csv', 'parquet', 'arrow']) {
    const res = await app.inject({ url: `${DATASET_URL}?api_key=${key}&format=${format}` })
    t.same([res.statusCode, res.json()], [400, { message: `Invalid entity: ${format} holds one entity; name one with entity=` }], format)
    const entities = await app.inject({ url: `${DATASET_URL}?api_key=${key}&format=${format}&meta=entities` })
    t.same(entities.json(), ['customers', 'orders'], `${format}: meta=entities still lists them`)
    const ddl = await app.inject({ url: `${DATASET_URL}?api_key=${key}&format=${format}&meta=ddl` })
    t.match(ddl.body, /CREATE TABLE "orders"/, `${format}: meta=ddl gives the portable DDL`)
  }

  const save = await parquetFolder(t)
  for (const archiveType of ['zip', 'tar'] as const) {
    const res = await app.inject({ url: `${DATASET_URL}?api_key=${key}&format=parquet-zip&archiveType=${archiveType}` })
    t.equal(res.statusCode, 200)
    t.match(res.headers['content-disposition'], `filename="sales-parquet.${archiveType}"`)
    const entries = await readArchive(archiveType, res.rawPayload)
    t.same([...entries.keys()], ['customers.parquet', 'orders.parquet'])
    const orders = await save(`orders-${archiveType}.parquet`, entries.get('orders.parquet') as Buffer)
    t.same(await duckdbQuery(`SELECT id, CAST(amount AS VARCHAR), epoch_ms(placed_at) FROM '${orders}' ORDER BY id`),
      [[10, '19.99', 1704164645678n], [11, '0.10', 946684799000n]])
  }
  const zip = (await app.inject({ url: `${DATASET_URL}?api_key=${key}&format=parquet-zip` })).rawPayload
  const methods = await new Promise<number[]>((resolve, reject) => {
    yauzl.fromBuffer(zip, { lazyEntries: false }, (err, file) => {
      if (err !== null || file === undefined) return reject(err)
      const found: number[] = []
      file.on('entry', (entry: yauzl.Entry) => found.push(entry.compressionMethod))
      file.on('end', () => resolve(found))
    })
  })
  t.same(methods, [0, 0], 'Parquet is compressed inside: zip entries are stored')
})

t.test('csv: one entity as text/csv, the csv-zip writer\'s file, compressed when asked', async (t) => {
  const { app, datasets } = await buildApp(t)
  const many = { name: 'many', columns: [{ name: 'id', type: 'integer' } as Column], rows: Array.from({ length: 2000 }, (_, i) => [i]) }
  datasets.add({ ...SALES_REF, resourceSequence: 2 }, { name: 'many', entities: [many] })
  const { id, key } = await createKey(app)
  await assignKeys(app, 'dataset', [id])
  const csv = await app.inject({ url: `${DATASET_URL}?api_key=${key}&format=csv&entity=customers` })
  t.equal(csv.statusCode, 200)
  t.equal(csv.headers['content-type'], 'text/csv; charset=utf-8')
  t.match(csv.headers['content-disposition'], 'filename="customers.csv"')
  const zipped = await readArchive('zip', (await app.inject({ url: `${DATASET_URL}?api_key=${key}&format=csv-zip&entity=customers` })).rawPayload)
  t.equal(csv.body, (zipped.get('customers.csv') as Buffer).toString(), 'the same bytes as csv-zip\'s entry')
  t.same(parseCsv(csv.body), [['id', 'name', 'vip'], ['1', 'Ann "the" Buyer, Esq.', 'true'], ['2', 'Björn\nNewline', 'false'], ['3', null, null]])
  await assignKeys(app, 'dataset', [id], 2)
  const gzipped = await app.inject({ url: `/api/acme/shop/model/1/dataset/2?api_key=${key}&format=csv`, headers: { 'accept-encoding': 'gzip' } })
  t.equal(gzipped.headers['content-encoding'], 'gzip', 'compressed over HTTP when asked')
  t.equal(parseCsv(zlib.gunzipSync(gzipped.rawPayload).toString()).length, 2001, 'a one-entity dataset needs no entity=')
  const parquet = await app.inject({ url: `${DATASET_URL}?api_key=${key}&format=parquet&entity=orders`, headers: { 'accept-encoding': 'gzip, br' } })
  t.equal(parquet.headers['content-encoding'], undefined, 'Parquet is never compressed again')
  const arrow = await app.inject({ url: `${DATASET_URL}?api_key=${key}&format=arrow&entity=orders`, headers: { 'accept-encoding': 'gzip, br' } })
  t.equal(arrow.headers['content-encoding'], undefined, 'nor Arrow')
})

/** A dataset whose `orders` rows are fine for `good` rows, then one the column cannot hold. */
function failingDatasets (good: number, bad: unknown): MemoryDatasets {
  const columns: Column[] = [{ name: 'id', type: 'integer', nullable: false }, { name: 'text', type: 'text' }]
  // Text that does not compress, so that row groups go out before the bad row.
  const rows: Row[] = Array.from({ length: good }, (_, i) => [i, Array.from({ length: 20 }, (_, k) => ((i * 7919 + k * 104729) % 1e9).toString(36)).join('')])
  rows.push([bad, 'y'])
  return new MemoryDatasets().add(SALES_REF, { name: 'failing', entities: [{ name: 'orders', columns, rows }] })
}

t.test('a value the column cannot hold: a 500 naming it before the first byte, an incomplete response after', async (t) => {
  for (const [bad, reason] of [[null, /"orders", column "id": NULL in a column that is NOT NULL/], [2 ** 40, /"orders", column "id": integer out of range/]] as const) {
    for (const format of ['parquet', 'arrow']) {
      const { app } = await buildApp(t, { datasets: failingDatasets(10, bad) })
      const { id, key } = await createKey(app)
      await assignKeys(app, 'dataset', [id])
      const res = await app.inject({ url: `${DATASET_URL}?api_key=${key}&format=${format}` })
      t.equal(res.statusCode, 500, `${format}, ${String(bad)} in the first batch`)
      t.match(res.json().message, reason)
    }
  }

  // After a few row groups have gone out: the connection is cut, and the file has no footer.
  const { app } = await buildApp(t, { datasets: failingDatasets(20_000, 'NaN'), columnarBatchBytes: 64 * 1024 })
  const { id, key } = await createKey(app)
  await assignKeys(app, 'dataset', [id])
  await app.listen({ host: '127.0.0.1', port: 0 })
  const { port } = app.server.address() as AddressInfo
  for (const format of ['parquet', 'arrow']) {
    const req = httpRequest({ port, path: `${DATASET_URL}?api_key=${key}&format=${format}` })
    req.end()
    const [res] = await once(req, 'response')
    t.equal(res.statusCode, 200, `${format}: the download had started`)
    const chunks: Buffer[] = []
    const outcome = await new Promise<string>((resolve) => {
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve('ended'))
      res.on('aborted', () => resolve('aborted'))
      res.on('error', () => resolve('aborted'))
    })
    t.equal(outcome, 'aborted', `${format}: the response is cut off, never ended like a whole file`)
    const body = Buffer.concat(chunks)
    t.ok(body.length > 64 * 1024, `${format}: ${body.length} bytes came before the failure`)
    if (format === 'parquet') {
      t.not(body.subarray(-4).toString(), 'PAR1', 'no footer: no reader opens the file')
      const file = await (await parquetFolder(t))('cut.parquet', body)
      await t.rejects(duckdbQuery(`SELECT count(*) FROM '${file}'`), 'DuckDB refuses it')
    } else {
      // An Arrow stream ends with a marker, but a reader may take the end of
      // the input for the end of the stream: the cut shows in HTTP alone.
      t.notSame([...body.subarray(-8)], [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0], 'no end-of-stream marker')
    }
  }
})

t.test('HEAD on a streamed download: its headers, and not one row read', async (t) => {
  const { app, datasets } = await buildApp(t)
  const { id, key } = await createKey(app)
  await assignKeys(app, 'dataset', [id])
  for (const [query, type] of [['format=json', 'application/json; charset=utf-8'], ['format=parquet&entity=orders', 'application/vnd.apache.parquet'],
    ['format=csv-zip&archiveType=tar', 'application/x-tar'], ['format=csv&entity=orders', 'text/csv; charset=utf-8']]) {
    const res = await app.inject({ method: 'HEAD', url: `${DATASET_URL}?api_key=${key}&${query}` })
    t.equal(res.statusCode, 200, query)
    t.equal(res.headers['content-type'], type, query)
    t.match(res.headers['content-disposition'], /^attachment; filename=/, query)
    t.equal(res.body, '', query)
  }
  t.same([...datasets.rowsPulled.values()], [], 'no rows were read')
  const missing = await app.inject({ method: 'HEAD', url: `${DATASET_URL}?api_key=${key}&format=parquet` })
  t.equal(missing.statusCode, 400, 'HEAD is refused as GET would be')
})
