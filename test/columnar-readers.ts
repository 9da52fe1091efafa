import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api'
import { tableFromIPC, type Table } from '@uwdata/flechette'
import type { Test } from 'tap'

// Independent readers of what the columnar formats write: DuckDB (its own
// C++ Parquet reader, from a local file, nothing downloaded at run time) for
// Parquet, and flechette (an Arrow implementation of its own, not
// apache-arrow, which writes our Arrow) for Arrow IPC streams. DuckDB cannot
// read Arrow IPC without an extension it would download.

let connection: Promise<DuckDBConnection> | undefined

function duckdb (): Promise<DuckDBConnection> {
  connection ??= DuckDBInstance.create(':memory:').then(async (db) => await db.connect())
  return connection
}

/** Runs `sql` in DuckDB; every row as an array of JS values. */
export async function duckdbQuery (sql: string): Promise<unknown[][]> {
  const reader = await (await duckdb()).runAndReadAll(sql)
  return reader.getRows() as unknown[][]
}

/** Column names and DuckDB types of `select * from <file>`. */
export async function duckdbTypes (file: string): Promise<Array<[string, string]>> {
  const rows = await duckdbQuery(`DESCRIBE SELECT * FROM read_parquet('${file}')`)
  return rows.map((r) => [String(r[0]), String(r[1])])
}

/** A temporary folder for Parquet files, removed after the test. */
export async function parquetFolder (t: Test): Promise<(name: string, bytes: Uint8Array) => Promise<string>> {
  const dir = await mkdtemp(join(tmpdir(), 'fde-parquet-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return async (name, bytes) => {
    const file = join(dir, name)
    await writeFile(file, bytes)
    return file
  }
}

/**
 * A text column's values as the hex of their UTF-8 bytes, taken from the
 * stream's own buffers: flechette's strings come through TextDecoder, which
 * drops a leading U+FEFF.
 */
export function arrowTextHex (table: Table, name: string): Array<string | null> {
  const column = table.getChild(name)
  if (column === null) throw new Error(`no column ${name}`)
  const out: Array<string | null> = []
  for (const batch of column.data as unknown as Array<{ length: number, validity: Uint8Array | null, values: Uint8Array, offsets: Int32Array }>) {
    for (let i = 0; i < batch.length; i++) {
      const valid = batch.validity === null || batch.validity.length === 0 || (batch.validity[i >> 3] & (1 << (i & 7))) !== 0
      out.push(valid ? Buffer.from(batch.values.subarray(batch.offsets[i], batch.offsets[i + 1])).toString('hex') : null)
    }
  }
  return out
}

/** An Arrow IPC stream read by flechette, every value exact: decimals as scaled bigints, 64-bit integers and timestamps as bigints. */
export function readArrowStream (bytes: Uint8Array): Table {
  return tableFromIPC(bytes, { useDecimalInt: true, useBigInt: true, useBigIntTimestamp: true })
}
