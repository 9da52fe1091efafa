import type { Column, Entity, Row } from '../host/dataset-source.js'
import type { DownloadFormat, DownloadSpec } from './types.js'
import { entityChunks, perEntity, rowWriter, separated, type CellWriter, type EntityText } from './rows.js'
import {
  bigintText, binaryValue, booleanValue, canonicalText, floatText, floatValue, integerText, integerValue, jsonText, ValueError
} from './values.js'

// sql: one script that loads into PostgreSQL and SQLite alike: CREATE TABLE
// per entity, then multi-row INSERTs, all inside BEGIN ... COMMIT (a file cut
// short has no COMMIT, so loading it changes nothing). Identifiers are
// double-quoted; strings use '' and never a backslash escape; NULL, TRUE/FALSE.
//
// Type choices (README "Formats"):
// - decimal(p,s) is declared `NUMERIC /* SQLite: TEXT, exact */ (p,s)` and
//   its values written as quoted text. PostgreSQL reads numeric(p,s) and
//   ignores the comment; SQLite takes the affinity from the declared type's
//   text, which contains TEXT, so it keeps the exact digits instead of
//   rounding them to a REAL.
// - json is declared `JSON /* SQLite: TEXT, exact */ COMPRESSION "default"`:
//   PostgreSQL (14+) makes json, COMPRESSION "default" being its default.
//   SQLite's type is the text from its first to its last word, comment
//   included, so TEXT affinity keeps a bare number's JSON text ('1e+21')
//   where JSON alone (NUMERIC) would turn it into a number.
// - binary is BYTEA with '\x<hex>' values: bytea in PostgreSQL; in SQLite the
//   same text '\x...' (convert with unhex(substr(col, 3)) when bytes are needed).
// - a CR right before an LF is written as 'CR' || 'LF' (see sqlString).
// - timestamps are ISO 8601 text ('...Z' with a zone), dates 'YYYY-MM-DD'.

export function quoteIdentifier (name: string): string {
  return '"' + name.replaceAll('"', '""') + '"'
}

/** `(a || b)` over the literals as a balanced tree: SQLite refuses an expression deeper than 1000. */
function concatenation (literals: string[]): string {
  if (literals.length === 1) return literals[0]
  const half = literals.length >> 1
  return `(${concatenation(literals.slice(0, half))} || ${concatenation(literals.slice(half))})`
}

/**
 * A string literal: quotes doubled, nothing else escaped. The sqlite3 shell
 * drops a CR that ends an input line, so a CR LF is split into 'CR' || 'LF'
 * (text in both databases) and no raw CR ever comes right before a raw LF.
 */
export function sqlString (s: string): string {
  const quoted = s.replaceAll("'", "''")
  if (!quoted.includes('\r\n')) return "'" + quoted + "'"
  const lines = quoted.split('\r\n')
  return concatenation(lines.map((line, i) => (i === 0 ? "'" : "'\n") + line + (i === lines.length - 1 ? "'" : "\r'")))
}

/**
 * Names the script cannot carry: SQLite reserves table names beginning with
 * sqlite_ (ASCII, any case), and an identifier cannot be split around a CR LF.
 */
function checkSqlNames (entity: Entity): void {
  if (/^sqlite_/i.test(entity.name)) {
    throw new Error(`The entity name "${entity.name.slice(0, 40)}" cannot be a SQLite table name (names beginning with sqlite_ are reserved by SQLite)`)
  }
  for (const name of [entity.name, ...entity.columns.map((c) => c.name)]) {
    if (name.includes('\r\n')) throw new Error(`The name "${name.slice(0, 40)}" contains CR LF, which the sql format cannot carry (the sqlite3 shell drops the CR)`)
  }
}

function sqlType (column: Column): string {
  switch (column.type) {
    case 'integer': return 'INTEGER'
    case 'bigint': return 'BIGINT'
    case 'decimal': return `NUMERIC /* SQLite: TEXT, exact */ (${column.precision},${column.scale})`
    case 'float': return 'DOUBLE PRECISION'
    case 'text': return column.maxLength === undefined ? 'TEXT' : `VARCHAR(${column.maxLength})`
    case 'boolean': return 'BOOLEAN'
    case 'date': return 'DATE'
    case 'timestamp': return column.withTimeZone === true ? 'TIMESTAMP WITH TIME ZONE' : 'TIMESTAMP'
    case 'binary': return 'BYTEA'
    case 'json': return 'JSON /* SQLite: TEXT, exact */ COMPRESSION "default"'
  }
}

/** Primary-key columns are NOT NULL too (PostgreSQL makes them so; SQLite would not). */
export function isNotNull (column: Column): boolean {
  return column.nullable === false || column.primaryKey === true
}

/** CREATE TABLE for the entity; throws when SQLite could not take its names. */
export function createTableSql (entity: Entity): string {
  checkSqlNames(entity)
  const lines = entity.columns.map((c) => `  ${quoteIdentifier(c.name)} ${sqlType(c)}${isNotNull(c) ? ' NOT NULL' : ''}`)
  const key = entity.columns.filter((c) => c.primaryKey === true)
  if (key.length > 0) lines.push(`  PRIMARY KEY (${key.map((c) => quoteIdentifier(c.name)).join(', ')})`)
  return `CREATE TABLE ${quoteIdentifier(entity.name)} (\n${lines.join(',\n')}\n);\n`
}

/** The DDL of `meta=ddl` and of the script: CREATE TABLE per entity. */
export function ddlFor (entities: readonly Entity[]): string {
  return entities.map(createTableSql).join('\n')
}

function sqlCell (column: Column): CellWriter {
  switch (column.type) {
    case 'integer': return (v) => { const n = integerValue(v); return n === null ? 'NULL' : integerText(n) }
    case 'bigint': return (v) => bigintText(v) ?? 'NULL'
    case 'float': return (v) => { const n = floatValue(v); return n === null ? 'NULL' : floatText(n) }
    case 'boolean': return (v) => { const b = booleanValue(v); return b === null ? 'NULL' : b ? 'TRUE' : 'FALSE' }
    case 'binary': return (v) => { const b = binaryValue(v); return b === null ? 'NULL' : "'\\x" + b.toString('hex') + "'" }
    // JSON text escapes every control character, so this stays one plain literal
    // (PostgreSQL would not assign the text of a || to a json column).
    case 'json': return (v) => { const s = jsonText(v); return s === null ? 'NULL' : sqlString(s) }
    case 'text': {
      const text = canonicalText(column)
      return (v) => {
        const s = text(v)
        if (s === null) return 'NULL'
        // Neither engine can read U+0000 inside a literal (PostgreSQL text cannot hold it at all).
        if (s.includes('\0')) throw new ValueError('text contains U+0000, which the sql format cannot carry')
        return sqlString(s)
      }
    }
    default: { // decimal, date, timestamp: canonical text needs no escaping
      const text = canonicalText(column)
      return (v) => { const s = text(v); return s === null ? 'NULL' : "'" + s + "'" }
    }
  }
}

export function sqlRowWriter (entity: Entity): (row: Row) => string {
  return rowWriter(entity, entity.columns.map(sqlCell), separated(entity.columns.length, ', ', '('), ')')
}

// An INSERT ends after this many rows or characters, whichever comes first,
// so no statement grows past what a client or server comfortably parses.
const BATCH_ROWS = 500
const BATCH_CHARS = 1024 * 1024

/** An entity's INSERT head and row writer. */
const insertWriters = perEntity((entity) => ({
  insert: `INSERT INTO ${quoteIdentifier(entity.name)} (${entity.columns.map((c) => quoteIdentifier(c.name)).join(', ')}) VALUES\n`,
  write: sqlRowWriter(entity)
}))

/** CREATE TABLE, then the rows in INSERTs of at most BATCH_ROWS rows or BATCH_CHARS characters. */
function entityScript (entity: Entity, createTable: string, head: string, tail: string): EntityText {
  const { insert, write } = insertWriters(entity)
  let rows = 0
  let chars = 0
  return {
    head: head + '\n' + createTable,
    row: (row) => {
      const tuple = write(row)
      let out = (rows === 0 ? insert : ',\n') + tuple
      chars += tuple.length
      if (++rows === BATCH_ROWS || chars >= BATCH_CHARS) {
        out += ';\n'
        rows = 0
        chars = 0
      }
      return out
    },
    tail: () => (rows > 0 ? ';\n' : '') + tail
  }
}

async function * sqlScript (spec: DownloadSpec, tables: readonly string[]): AsyncGenerator<string | Buffer> {
  const begin = '-- fastify-data-endpoints sql export: loads into PostgreSQL or SQLite in one transaction\nBEGIN;\n'
  const commit = '\nCOMMIT;\n'
  const { entities } = spec
  if (entities.length === 0) yield begin + commit
  for (let i = 0; i < entities.length; i++) {
    yield * entityChunks(spec, entities[i], entityScript(entities[i], tables[i], i === 0 ? begin : '', i === entities.length - 1 ? commit : ''))
  }
}

const createTableOnce = perEntity(createTableSql)

/** `sql` (the default): DDL and INSERTs in one transaction. */
export const sqlFormat: DownloadFormat = (spec) => {
  const tables = spec.entities.map(createTableOnce) // checks every name before anything is sent
  return {
    contentType: 'application/sql; charset=utf-8',
    fileName: `${spec.dataset.name}.sql`,
    body: sqlScript(spec, tables)
  }
}
