import pg from 'pg'
import type { Test } from 'tap'

/**
 * PostgreSQL for tests, shared by every test file that needs it.
 *
 *   const url = await pgAvailable(t)      // t: the test (or root `tap`)
 *   if (url === null) return              // skipped, or failed in CI
 *   const { client, schema } = await freshSchema(t, url)   // dropped after t
 *
 * The server is `PGURL`, default postgres://postgres@127.0.0.1:5432/test.
 * When it cannot be reached, `pgAvailable` records one skipped assertion whose
 * line says how to run the tests, and returns null; with
 * DATA_ENDPOINTS_REQUIRE_PG=1 (CI sets it) it calls `t.fail` instead, so a
 * missing database never passes silently there.
 */

export const PG_URL = process.env.PGURL ?? 'postgres://postgres@127.0.0.1:5432/test'

/** The URL without its password, for messages. */
function printable (url: string): string {
  try {
    const u = new URL(url)
    if (u.password !== '') u.password = '***'
    return u.toString()
  } catch {
    return '(unparsable PGURL)'
  }
}

let probe: Promise<string | null> | null = null

/** Connects once per process; resolves to the error message, or null when reachable. */
function reachability (url: string): Promise<string | null> {
  probe ??= (async () => {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 })
    try {
      await client.connect()
      await client.query('SELECT 1')
      return null
    } catch (err) {
      return (err as Error).message
    } finally {
      await client.end().catch(() => {})
    }
  })()
  return probe
}

/** PGURL when PostgreSQL answers; otherwise null, after a skip line (or t.fail in CI). */
export async function pgAvailable (t: Test): Promise<string | null> {
  const error = await reachability(PG_URL)
  if (error === null) return PG_URL
  const message = `PostgreSQL not reachable at ${printable(PG_URL)} (${error}); set PGURL to run these`
  if (process.env.DATA_ENDPOINTS_REQUIRE_PG === '1') t.fail(message + ' (required: DATA_ENDPOINTS_REQUIRE_PG=1)')
  else t.pass(message, { skip: true })
  return null
}

/**
 * A client on a new, uniquely named schema (first on its search_path, time
 * zone UTC); the schema is dropped and the client closed when `t` ends.
 */
export async function freshSchema (t: Test, url: string): Promise<{ client: pg.Client, schema: string }> {
  const schema = `test_${process.pid}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  await client.query(`CREATE SCHEMA "${schema}"`)
  await client.query(`SET search_path TO "${schema}"; SET TIME ZONE 'UTC'`)
  t.teardown(async () => {
    try {
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    } finally {
      await client.end()
    }
  })
  return { client, schema }
}
