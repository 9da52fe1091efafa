import type Database from 'better-sqlite3'
import type { Statement } from 'better-sqlite3'
import type { ChangeValue, Column, Condition, Entity, FilterValue, Row, RowsOptions } from '../lib/index.js'

// How a host turns the plugin's typed `columns`, `filters`, `since` and
// `changesUntil` into SQL, on better-sqlite3: the fast, safe way.
// - Safe: every name in the SQL comes from the entity's model (the plugin
//   hands over names it took from the model, and we look them up there
//   again), every value is a bound parameter. No request text is pasted.
// - Fast: one prepared statement per distinct shape (the chosen columns, each
//   condition's column and operator, whether since/until are bound), kept in
//   a bounded least-recently-used map, and reused, as the example's plain
//   downloads are. `in (...)` binds its list as one JSON array read with
//   json_each, so lists of any length share one statement.

/** Idle prepared statements kept per shape; a download beyond them prepares its own. */
export const IDLE_STATEMENTS_PER_SHAPE = 8
/** Distinct shapes (statements) kept per entity; the least recently used goes first. */
export const SHAPES_PER_ENTITY = 64
/** An entity of at most this many rows is read in one call (see StatementPool.rows). */
export const SMALL_ENTITY_ROWS = 100

export function quote (name: string): string {
  return `"${name.replaceAll('"', '""')}"`
}

/**
 * Prepared statements of one SQL text, reused across downloads. better-sqlite3
 * refuses to run a statement that is still iterating ("This statement is busy
 * executing a query"), and a download iterates for as long as its client
 * reads, so each iteration takes a statement no other one holds and gives it
 * back when it ends. At most `maxIdle` wait for the next download.
 */
export class StatementPool {
  private readonly idle: Array<Statement<unknown[], unknown[]>> = []
  prepared = 0

  /**
   * The same SELECT with the small read's limit written into its text. A
   * bound `LIMIT ?` cost about 5 µs more per call here than a written one
   * (a third of reading a 6-row table; a bound value in WHERE costs nothing
   * measurable), and a small download reads each of its entities this way. `.all()` is done when it
   * returns, so this one statement is never busy and needs no pool.
   */
  private probe: Statement<unknown[], unknown[]> | undefined

  /** `sql` ends in `LIMIT ?`, the last parameter. */
  constructor (private readonly db: Database.Database, readonly sql: string, private readonly maxIdle: number) {}

  get idleCount (): number {
    return this.idle.length
  }

  /**
   * The rows, up to `limit` (-1 for all), as a plain iterable: read without a
   * promise per row. A small result comes whole from one call: a step of an
   * iterator into the driver costs more than a row, and a small download is
   * mostly such steps. A larger one is streamed, read again from its start so
   * that its rows come from one read.
   */
  rows (params: readonly unknown[], limit: number): Iterable<Row> {
    if (limit >= 0 && limit <= SMALL_ENTITY_ROWS) {
      const statement = this.take()
      try {
        return statement.all(...params, limit)
      } finally {
        this.give(statement)
      }
    }
    this.probe ??= this.db.prepare<unknown[], unknown[]>(this.sql.replace(/ LIMIT \?$/, ` LIMIT ${SMALL_ENTITY_ROWS + 1}`)).raw()
    const first = this.probe.all(...params)
    if (first.length <= SMALL_ENTITY_ROWS) return first
    return this.stream(params, limit)
  }

  /**
   * The rows one at a time. Its statement is taken at the first row and
   * given back when the rows end, or when the reader leaves early (return(),
   * as `for...of` and the plugin call it).
   */
  private * stream (params: readonly unknown[], limit: number): Generator<Row, void, undefined> {
    const statement = this.take()
    try {
      yield * statement.iterate(...params, limit)
    } finally {
      this.give(statement)
    }
  }

  private take (): Statement<unknown[], unknown[]> {
    const statement = this.idle.pop()
    if (statement !== undefined) return statement
    this.prepared++
    return this.db.prepare<unknown[], unknown[]>(this.sql).raw()
  }

  private give (statement: Statement<unknown[], unknown[]>): void {
    if (this.idle.length < this.maxIdle) this.idle.push(statement)
  }
}

/** A typed value as SQLite holds it in the example's tables (see sqliteType in sample-datasets.ts). */
function bound (column: Column, value: FilterValue): unknown {
  if (typeof value === 'boolean') return value ? 1 : 0
  if (value instanceof Date) return value.toISOString() // timestamps are stored as this ISO text
  if (column.type === 'decimal') return Number(value) // stored as exact text, compared as REAL (below)
  return value
}

/** An `in` list as one JSON array, for json_each; bigints keep every digit. */
function jsonList (column: Column, values: readonly FilterValue[]): string {
  return `[${values.map((v) => {
    const b = bound(column, v)
    return typeof b === 'bigint' ? b.toString() : JSON.stringify(b)
  }).join(',')}]`
}

const OPERATORS = new Set(['=', '!=', '<', '<=', '>', '>='])

/**
 * One entity's reads: its plain SELECT (the fast path of every download), and
 * one statement per shape of the consumer's choices, made on first use.
 */
export class SqliteEntityReader {
  private readonly plain: StatementPool
  private readonly shapes = new Map<string, StatementPool>()
  private readonly byName: Map<string, Column>
  private readonly changesUntilStatement: Statement<[], unknown[]> | undefined

  constructor (private readonly db: Database.Database, readonly entity: Entity) {
    this.byName = new Map(entity.columns.map((c) => [c.name, c]))
    this.plain = new StatementPool(db, this.selectSql(entity.columns, [], false, false), IDLE_STATEMENTS_PER_SHAPE)
    const change = entity.consumer?.changes
    if (change !== undefined) {
      this.changesUntilStatement = db.prepare<[], unknown[]>(`SELECT max(${quote(change.column)}) FROM ${quote(entity.name)}`).raw()
    }
  }

  /** Pooled statements (those that stream, or read with a limit) prepared so far and waiting idle, over every shape: for tests that watch them. */
  statementCounts (): { prepared: number, idle: number } {
    let prepared = this.plain.prepared
    let idle = this.plain.idleCount
    for (const pool of this.shapes.values()) {
      prepared += pool.prepared
      idle += pool.idleCount
    }
    return { prepared, idle }
  }

  get shapeCount (): number { return this.shapes.size }

  rows (options: RowsOptions): Iterable<Row> {
    const limit = options.limit ?? -1
    const { columns, filters, since, changesUntil } = options
    if (columns === undefined && filters === undefined && since === undefined && changesUntil === undefined) {
      return this.plain.rows([], limit)
    }
    const chosen = columns === undefined ? this.entity.columns : columns.map((name) => this.column(name))
    const conditions = filters ?? []
    // The statement's shape: everything in its SQL, nothing of the values.
    const shape = JSON.stringify([columns ?? null, conditions.map((c) => [c.column, c.op]), since !== undefined, changesUntil !== undefined])
    let pool = this.shapes.get(shape)
    if (pool === undefined) {
      pool = new StatementPool(this.db, this.selectSql(chosen, conditions, since !== undefined, changesUntil !== undefined), IDLE_STATEMENTS_PER_SHAPE)
      if (this.shapes.size >= SHAPES_PER_ENTITY) this.shapes.delete(this.shapes.keys().next().value as string)
    } else {
      this.shapes.delete(shape) // moved to the end: most recently used
    }
    this.shapes.set(shape, pool)
    return pool.rows(this.params(conditions, since, changesUntil), limit)
  }

  /** The greatest value of the change column now: `Dataset.changesUntil`. */
  changesUntil (): ChangeValue | null {
    const statement = this.changesUntilStatement
    if (statement === undefined) throw new Error(`Entity ${this.entity.name} has no change column`)
    const value = statement.get()?.[0]
    if (value === null || value === undefined) return null
    // Timestamps are ISO text in this database; versions integers.
    return typeof value === 'string' ? new Date(value) : value as number | bigint
  }

  private column (name: string): Column {
    // The plugin passes names from the model; looking them up again keeps
    // this code safe even if it were handed something else.
    const column = this.byName.get(name)
    if (column === undefined) throw new Error(`Entity ${this.entity.name} has no column ${JSON.stringify(name)}`)
    return column
  }

  private selectSql (columns: readonly Column[], conditions: readonly Condition[], since: boolean, until: boolean): string {
    const where = conditions.map((c) => this.conditionSql(c))
    const change = this.entity.consumer?.changes?.column
    if ((since || until) && change === undefined) throw new Error(`Entity ${this.entity.name} has no change column`)
    if (since) where.push(`${quote(change as string)} > ?`)
    if (until) where.push(`${quote(change as string)} <= ?`)
    return `SELECT ${columns.map((c) => quote(c.name)).join(', ')} FROM ${quote(this.entity.name)}` +
      (where.length === 0 ? '' : ` WHERE ${where.join(' AND ')}`) +
      ` ORDER BY ${quote(this.entity.columns[0].name)} LIMIT ?`
  }

  private conditionSql (condition: Condition): string {
    const column = this.column(condition.column)
    // Decimals are exact text in this database: compared as numbers.
    const target = column.type === 'decimal' ? `CAST(${quote(column.name)} AS REAL)` : quote(column.name)
    switch (condition.op) {
      case 'is null': return `${target} IS NULL`
      case 'is not null': return `${target} IS NOT NULL`
      case 'in': return `${target} IN (SELECT value FROM json_each(?))`
      default:
        if (!OPERATORS.has(condition.op)) throw new Error(`Unknown operator ${JSON.stringify(condition.op)}`)
        return `${target} ${condition.op} ?`
    }
  }

  private params (conditions: readonly Condition[], since: ChangeValue | undefined, until: ChangeValue | undefined): unknown[] {
    const params: unknown[] = []
    for (const c of conditions) {
      const column = this.column(c.column)
      if (c.op === 'in') params.push(jsonList(column, c.value))
      else if (c.value !== null) params.push(bound(column, c.value as FilterValue))
    }
    const change = this.entity.consumer?.changes?.column
    if (since !== undefined) params.push(bound(this.column(change as string), since))
    if (until !== undefined) params.push(bound(this.column(change as string), until))
    return params
  }
}
