import Database from 'better-sqlite3'
import t from 'tap'
import { buildExampleApp } from '../../examples/app.js'
import { createDemoKey } from '../../examples/demo-key.js'
import { exampleDatabaseFile } from '../../examples/sample-datasets.js'
import type { Column, Entity } from '../../lib/index.js'
import { duckdbQuery, duckdbTypes, parquetFolder, readArrowStream } from '../columnar-readers.js'
import { tempDir } from '../example-process.js'

// The example's datasets downloaded as Parquet and Arrow and read back by
// independent readers (DuckDB, flechette), every value compared with the
// example's own SQLite tables, type by type: `sales` (quotes, newlines,
// non-ASCII text, NULLs, decimals, timestamps, booleans) and the 100,000
// rows of `events`.

const EVENTS_ROWS = 100_000

/** The DuckDB type each column must have. */
function duckdbType (c: Column): string {
  switch (c.type) {
    case 'integer': return 'INTEGER'
    case 'bigint': return 'BIGINT'
    case 'decimal': return `DECIMAL(${c.precision},${c.scale})`
    case 'float': return 'DOUBLE'
    case 'text': return 'VARCHAR'
    case 'boolean': return 'BOOLEAN'
    case 'date': return 'DATE'
    case 'timestamp': return c.withTimeZone === true ? 'TIMESTAMP WITH TIME ZONE' : 'TIMESTAMP'
    case 'binary': return 'BLOB'
    case 'json': return 'JSON'
  }
}

const quote = (name: string): string => `"${name.replaceAll('"', '""')}"`

/** Each column as DuckDB gives it back in a form compared exactly. */
function duckdbProjection (c: Column): string {
  switch (c.type) {
    case 'decimal': case 'date': case 'json': return `CAST(${quote(c.name)} AS VARCHAR)`
    case 'timestamp': return `epoch_us(${quote(c.name)})`
    case 'binary': return `hex(${quote(c.name)})`
    default: return quote(c.name)
  }
}

/** A source value (as the example's SQLite holds it) in the form of duckdbProjection. */
function forDuckdb (c: Column, v: unknown): unknown {
  if (v === null) return null
  switch (c.type) {
    case 'boolean': return v === 1
    case 'bigint': return BigInt(v as number)
    case 'timestamp': return BigInt(Date.parse(v as string)) * 1000n
    default: return v
  }
}

/** A source value in the form flechette reads it with every value exact. */
function forArrow (c: Column, v: unknown): unknown {
  if (v === null) return null
  switch (c.type) {
    case 'boolean': return v === 1
    case 'bigint': return BigInt(v as number)
    case 'decimal': return BigInt((v as string).replace('.', ''))
    case 'date': return Date.parse(v as string)
    case 'timestamp': return BigInt(Date.parse(v as string)) * 1000n
    default: return v
  }
}

/** Arrow type ids (Schema.fbs) and what each column must be. */
function arrowTypeOf (c: Column): Record<string, unknown> {
  switch (c.type) {
    case 'integer': return { typeId: 2, bitWidth: 32, signed: true }
    case 'bigint': return { typeId: 2, bitWidth: 64, signed: true }
    case 'decimal': return { typeId: 7, precision: c.precision, scale: c.scale, bitWidth: 128 }
    case 'float': return { typeId: 3, precision: 2 }
    case 'text': case 'json': return { typeId: 5 }
    case 'boolean': return { typeId: 6 }
    case 'date': return { typeId: 8, unit: 0 }
    case 'timestamp': return { typeId: 10, unit: 2, timezone: c.withTimeZone === true ? 'UTC' : null }
    case 'binary': return { typeId: 4 }
  }
}

t.test('the example\'s sales and events as parquet and arrow: every value, type by type', async (t) => {
  const dir = tempDir(t)
  const app = await buildExampleApp({ dataDir: dir, adminToken: 'admin', eventsRows: EVENTS_ROWS, logLevel: 'silent' })
  t.teardown(() => app.close())
  const demo = await createDemoKey(app, 'admin')
  if (demo === null) throw new Error('no demo key')
  const assigned = await app.inject({
    method: 'PUT', url: '/api-keys/acme/shop/endpoints/1/dataset/2', headers: { authorization: 'Bearer admin' }, payload: { keyIds: [demo.id] }
  })
  t.equal(assigned.statusCode, 201)
  const source = new Database(exampleDatabaseFile(dir), { readonly: true })
  t.teardown(() => source.close())
  const save = await parquetFolder(t)

  const datasets = [1, 2]
  for (const sequence of datasets) {
    const dataset = await app.sampleDatasets.getDataset({ organization: 'acme', project: 'shop', modelSequence: 1, resourceSequence: sequence })
    if (dataset === null) throw new Error('no sample dataset')
    for (const entity of dataset.entities as Entity[]) {
      const url = `/api/acme/shop/model/1/dataset/${sequence}?entity=${entity.name}`
      const sourceRows = source.prepare(`SELECT ${entity.columns.map((c) => quote(c.name)).join(', ')} FROM ${quote(entity.name)} ORDER BY id`).raw().all() as unknown[][]
      if (entity.name === 'events') t.equal(sourceRows.length, EVENTS_ROWS)

      const parquet = await app.inject({ url: `${url}&format=parquet`, headers: { authorization: `Bearer ${demo.key}` } })
      t.equal(parquet.statusCode, 200, `${entity.name}.parquet`)
      t.equal(parquet.headers['content-type'], 'application/vnd.apache.parquet')
      t.match(parquet.headers['content-disposition'], `filename="${entity.name}.parquet"`)
      const file = await save(`${entity.name}.parquet`, parquet.rawPayload)
      t.same(await duckdbTypes(file), entity.columns.map((c) => [c.name, duckdbType(c)]), `${entity.name}: DuckDB reads every column with its type`)
      const required = await duckdbQuery(`SELECT name, repetition_type FROM parquet_schema('${file}') WHERE name <> 'schema'`)
      t.same(required, entity.columns.map((c) => [c.name, c.nullable === false || c.primaryKey === true ? 'REQUIRED' : 'OPTIONAL']),
        `${entity.name}: nullability from the model`)
      const read = await duckdbQuery(`SELECT ${entity.columns.map(duckdbProjection).join(', ')} FROM read_parquet('${file}') ORDER BY id`)
      t.same(read, sourceRows.map((row) => entity.columns.map((c, i) => forDuckdb(c, row[i]))), `${entity.name}: every value read back by DuckDB`)

      const arrow = await app.inject({ url: `${url}&format=arrow`, headers: { authorization: `Bearer ${demo.key}` } })
      t.equal(arrow.statusCode, 200, `${entity.name}.arrows`)
      t.equal(arrow.headers['content-type'], 'application/vnd.apache.arrow.stream')
      t.match(arrow.headers['content-disposition'], `filename="${entity.name}.arrows"`)
      const table = readArrowStream(arrow.rawPayload)
      t.same(table.schema.fields.map((f) => f.name), entity.columns.map((c) => c.name))
      entity.columns.forEach((c, i) => {
        const field = table.schema.fields[i]
        t.match(field.type, arrowTypeOf(c), `${entity.name}.${c.name}: Arrow type`)
        t.equal(field.nullable, !(c.nullable === false || c.primaryKey === true), `${entity.name}.${c.name}: nullable as the model says`)
      })
      const columns = entity.columns.map((c) => table.getChild(c.name)?.toArray() ?? [])
      const arrowRows = Array.from({ length: table.numRows }, (_, r) => columns.map((col) => col[r]))
      t.same(arrowRows, sourceRows.map((row) => entity.columns.map((c, i) => forArrow(c, row[i]))), `${entity.name}: every value read back by flechette`)
    }
  }

  // The "done when", on the downloaded file.
  const orders = await save('orders.parquet', (await app.inject({
    url: '/api/acme/shop/model/1/dataset/1?format=parquet&entity=orders', headers: { authorization: `Bearer ${demo.key}` }
  })).rawPayload)
  const [[count, sum]] = await duckdbQuery(`SELECT count(*), CAST(sum(quantity * unit_price) AS VARCHAR) FROM '${orders}'`)
  const expected = source.prepare('SELECT count(*), quantity, unit_price FROM orders').raw().all() as unknown[][]
  const cents = (source.prepare('SELECT quantity, unit_price FROM orders').raw().all() as Array<[number, string]>)
    .reduce((total, [q, price]) => total + BigInt(q) * BigInt(price.replace('.', '')), 0n)
  t.equal(count, BigInt(expected[0][0] as number), 'count(*) as in the source')
  t.equal(sum, `${cents / 100n}.${String(cents % 100n).padStart(2, '0')}`, 'sum(quantity * unit_price) exactly as in the source')
})
