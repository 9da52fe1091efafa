// One description of a table, from which both adapters' DDL and row mapping
// are made. The first migrations were written twice by hand, once per
// dialect, with a row mapper in each adapter that had to agree with the
// other; a migration added since is a list of steps over `Table`s
// (migrations.ts), and both dialects' SQL comes from it, so the two stores
// cannot drift apart.
//
// Column types, and what each store makes of them:
//
//   type        SQLite                              PostgreSQL                          JavaScript
//   text        TEXT                                text                                string
//   integer     INTEGER                             bigint                              number (exact to 2^53 - 1)
//   boolean     INTEGER (0 or 1)                    boolean                             boolean
//   timestamp   INTEGER (ms since the epoch, UTC)   timestamptz                         Date (years 1 to 9999, lib/inputs.ts)
//   json        TEXT                                jsonb                               any JSON value
//   serial      INTEGER PRIMARY KEY AUTOINCREMENT   bigint GENERATED ALWAYS AS IDENTITY string (an increasing id, made at insert)
//
// A record's field is its column's name in camelCase (`key_id` -> `keyId`).

export type Dialect = 'sqlite' | 'pg'
export type ColumnType = 'text' | 'integer' | 'boolean' | 'timestamp' | 'json' | 'serial'

export interface Column {
  name: string
  type: ColumnType
  /** may hold NULL (JavaScript null); default: not */
  nullable?: boolean
  /** a foreign key: the row goes (or the column empties) with the row it names */
  references?: { table: string, column: string, onDelete: 'cascade' | 'set null' }
}

export interface Table {
  name: string
  columns: readonly Column[]
  /** omitted for a table whose `serial` column is its key */
  primaryKey?: readonly string[]
  unique?: ReadonlyArray<readonly string[]>
  /** conditions written in SQL both dialects read alike, e.g. `kind IN ('a', 'b')` */
  checks?: readonly string[]
  indexes?: ReadonlyArray<{ name: string, columns: readonly string[] }>
}

/** One step of a migration; `sql` is for what is no table's shape (a data fix), written once per dialect. */
export type MigrationStep =
  | { createTable: Table }
  | { addColumn: { table: string, column: Column } }
  | { createIndex: { table: string, name: string, columns: readonly string[] } }
  | { sql: Record<Dialect, string> }

export interface Migration {
  /** why it exists, for the reader of the list */
  why: string
  steps: readonly MigrationStep[]
}

const SQL_TYPES: Record<Dialect, Record<Exclude<ColumnType, 'serial'>, string>> = {
  sqlite: { text: 'TEXT', integer: 'INTEGER', boolean: 'INTEGER', timestamp: 'INTEGER', json: 'TEXT' },
  pg: { text: 'text', integer: 'bigint', boolean: 'boolean', timestamp: 'timestamptz', json: 'jsonb' }
}

const NAME = /^[a-z_][a-z0-9_]{0,62}$/

function checkName (name: string): string {
  if (!NAME.test(name)) throw new TypeError(`table-list: "${name}" is not a lower-case SQL name`)
  return name
}

function columnDdl (column: Column, dialect: Dialect): string {
  checkName(column.name)
  if (column.type === 'serial') {
    return `${column.name} ${dialect === 'sqlite' ? 'INTEGER PRIMARY KEY AUTOINCREMENT' : 'bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY'}`
  }
  const parts = [column.name, SQL_TYPES[dialect][column.type]]
  if (column.nullable !== true) parts.push('NOT NULL')
  if (column.type === 'boolean' && dialect === 'sqlite') parts.push(`CHECK (${column.name} IN (0, 1))`)
  const ref = column.references
  if (ref !== undefined) parts.push(`REFERENCES ${checkName(ref.table)} (${checkName(ref.column)}) ON DELETE ${ref.onDelete.toUpperCase()}`)
  return parts.join(' ')
}

const list = (names: readonly string[]): string => names.map(checkName).join(', ')

/** The SQL of one step in one dialect, names unqualified (the PostgreSQL migration sets its search_path). */
export function stepSql (step: MigrationStep, dialect: Dialect): string {
  if ('sql' in step) return step.sql[dialect]
  if ('addColumn' in step) return `ALTER TABLE ${checkName(step.addColumn.table)} ADD COLUMN ${columnDdl(step.addColumn.column, dialect)};`
  if ('createIndex' in step) {
    const { table, name, columns } = step.createIndex
    return `CREATE INDEX ${checkName(name)} ON ${checkName(table)} (${list(columns)});`
  }
  const table = step.createTable
  const lines = table.columns.map((c) => columnDdl(c, dialect))
  if (table.primaryKey !== undefined) lines.push(`PRIMARY KEY (${list(table.primaryKey)})`)
  for (const unique of table.unique ?? []) lines.push(`UNIQUE (${list(unique)})`)
  for (const check of table.checks ?? []) lines.push(`CHECK (${check})`)
  const create = `CREATE TABLE ${checkName(table.name)} (\n  ${lines.join(',\n  ')}\n);`
  const indexes = (table.indexes ?? []).map((i) => stepSql({ createIndex: { table: table.name, ...i } }, dialect))
  return [create, ...indexes].join('\n')
}

/** A migration's SQL in one dialect: its steps, in order, as one script. */
export function migrationSql (migration: Migration, dialect: Dialect): string {
  return migration.steps.map((step) => stepSql(step, dialect)).join('\n')
}

/** `key_id` -> `keyId` */
export function fieldOf (column: string): string {
  return column.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase())
}

/**
 * The INSERT of a row of `table`, its columns in the table's order less the
 * `serial` one; `qualified` is the table's name as the adapter writes it
 * (PgStorage: with its schema). Values come from `toColumns`.
 */
export function insertSql (table: Table, dialect: Dialect, qualified = table.name): string {
  const columns = table.columns.filter((c) => c.type !== 'serial')
  const values = columns.map((c, i) => dialect === 'sqlite' ? '?' : `$${i + 1}${c.type === 'json' ? '::jsonb' : ''}`)
  return `INSERT INTO ${qualified} (${list(columns.map((c) => c.name))}) VALUES (${values.join(', ')})`
}

/** A record's values for `insertSql`, as the store takes them. */
export function toColumns (table: Table, dialect: Dialect, record: Record<string, unknown>): unknown[] {
  return table.columns.filter((c) => c.type !== 'serial').map((c) => {
    const value = record[fieldOf(c.name)]
    if (value === null || value === undefined) {
      if (c.nullable !== true) throw new TypeError(`table-list: ${table.name}.${c.name} may not be null`)
      return null
    }
    if (c.type === 'json') return JSON.stringify(value)
    if (dialect === 'pg') return value
    if (c.type === 'boolean') return value === true ? 1 : 0
    if (c.type === 'timestamp') return (value as Date).getTime()
    return value
  })
}

/** A row as the store answered it (`SELECT` of the table's columns by name), as a record. */
export function fromRow (table: Table, dialect: Dialect, row: Record<string, unknown>): Record<string, unknown> {
  const record: Record<string, unknown> = {}
  for (const c of table.columns) {
    const value = row[c.name]
    record[fieldOf(c.name)] = value === null || value === undefined
      ? null
      : c.type === 'serial' ? String(value)
        : c.type === 'integer' ? Number(value)
          : c.type === 'boolean' ? (dialect === 'sqlite' ? value === 1 : value)
            : c.type === 'timestamp' ? (dialect === 'sqlite' ? new Date(value as number) : value)
              : c.type === 'json' && dialect === 'sqlite' ? JSON.parse(value as string) : value
  }
  return record
}
