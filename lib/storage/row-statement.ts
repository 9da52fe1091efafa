import type pg from 'pg'

/** A row as PostgreSQL sent it: each column's text, or null. */
export type TextRow = Array<string | null>

/** The part of pg's connection a statement writes to (pg-protocol's messages). */
interface Connection {
  parsedStatements: Record<string, string>
  submittedNamedStatements: Record<string, string>
  stream: { cork?: () => void, uncork?: () => void }
  parse: (config: { name: string, text: string }) => void
  bind: (config: { statement: string, values: Array<string | null>, binary: boolean }) => void
  execute: (config?: object) => void
  sync: () => void
}

type Answer = (err: Error | null, row?: TextRow) => void

/**
 * One execution of a named statement that answers one row, read as text:
 * PostgreSQL mode's key check, run for every batch of requests. pg's own
 * Query describes the portal at every execution, builds a result of
 * parsed rows and turns every column through a type parser; this sends
 * Bind, Execute and Sync corked (Parse first, once per connection) and
 * answers the row's columns as PostgreSQL wrote them. Measured: 44-46 µs of
 * the client's CPU an execution against 55-58 (docs/benchmarks.md).
 *
 * It is a pg Submittable: `client.query(statement, callback)`, or a pool's,
 * calls `callback` once, with the first row (undefined if none) or the error.
 */
class RowStatement {
  readonly name: string
  readonly text: string
  readonly query_timeout: number
  callback: Answer | undefined
  #values: Array<string | null>
  #row: TextRow | undefined

  constructor (name: string, text: string, values: Array<string | null>, timeout: number) {
    this.name = name
    this.text = text
    this.#values = values
    this.query_timeout = timeout
  }

  submit (connection: Connection): Error | null {
    const parsed = connection.parsedStatements[this.name] ?? connection.submittedNamedStatements[this.name]
    if (parsed !== undefined && parsed !== this.text) return new Error(`Prepared statements must be unique - '${this.name}' was used for a different statement`)
    connection.stream.cork?.()
    try {
      if (parsed === undefined) {
        connection.parse({ name: this.name, text: this.text })
        // pg notes the statement parsed on its ParseComplete, or forgets it on an error.
        connection.submittedNamedStatements[this.name] = this.text
      }
      connection.bind({ statement: this.name, values: this.#values, binary: false })
      connection.execute()
      connection.sync()
    } finally {
      connection.stream.uncork?.()
    }
    return null
  }

  handleDataRow (msg: { fields: TextRow }): void {
    this.#row ??= msg.fields
  }

  handleReadyForQuery (): void {
    this.callback?.(null, this.#row)
  }

  handleError (err: Error): void {
    this.callback?.(err)
  }

  // Messages a one-row SELECT does not bring, answered as pg's Query would.
  handleRowDescription (): void {}
  handleCommandComplete (): void {}
  handleEmptyQuery (): void {}
  handlePortalSuspended (): void {}
  handleCopyInResponse (connection: { sendCopyFail: (message: string) => void }): void {
    connection.sendCopyFail('No source stream defined')
  }

  handleCopyData (): void {}
}

// Every column as the text PostgreSQL sent: what RowStatement answers, through pg's Query.
const AS_TEXT = { getTypeParser: () => (value: string) => value }

/**
 * Whether `client` runs RowStatement: pg's JavaScript client (its connection
 * keeps the statements it parsed and sent, as pg 8's does), not in its
 * pipeline mode, which refuses Submittables of their own kind. pg's native
 * client has no such connection; a pg that kept those records otherwise
 * would get the fallback rather than fail.
 */
function runsRowStatement (client: pg.ClientBase): boolean {
  const c = client as { pipeline?: boolean, connection?: { parsedStatements?: unknown, submittedNamedStatements?: unknown } }
  return c.pipeline !== true && typeof c.connection?.parsedStatements === 'object' && typeof c.connection.submittedNamedStatements === 'object'
}

/**
 * Runs the named statement `text` with `values` on a connection and answers
 * its first row as text (undefined when it returns none). A connection that
 * cannot run RowStatement (pg's pipeline mode, its native client) gets the
 * same statement through pg's Query, with every column left as text.
 */
export function queryRow (client: pg.ClientBase, name: string, text: string, values: Array<string | null>, timeout: number): Promise<TextRow | undefined> {
  if (!runsRowStatement(client)) {
    const config = { name, text, values, rowMode: 'array' as const, types: AS_TEXT, query_timeout: timeout }
    return client.query<TextRow>(config).then((result) => result.rows[0])
  }
  return new Promise((resolve, reject) => {
    const statement = new RowStatement(name, text, values, timeout)
    // pg's typings know a Submittable without a callback only.
    ;(client as unknown as { query: (statement: RowStatement, callback: Answer) => void }).query(statement, (err, row) => {
      if (err !== null) reject(err)
      else resolve(row)
    })
  })
}
