import type {
  ChangeValue, Column, ComparisonOperator, Condition, ConsumerSupport, Entity, FilterValue
} from '../host/dataset-source.js'
import { InvalidParameterError } from '../errors.js'
import { readTimestamp } from '../inputs.js'
import { ValueError, decimalText, integerValue, toBigint } from '../formats/values.js'

// The consumer parameters of a dataset GET (DESIGN.md §2): `columns`, `where`
// and `since`, read into typed values before the host sees anything. The host
// gets column names taken from its own model and values of the column's type,
// never a piece of the request's text, so nothing it builds a query from can
// carry SQL (or anything else) the plugin did not make.

/** Bounds, so that a long query string costs little to refuse. */
export const MAX_WHERE_LENGTH = 4096
export const MAX_CONDITIONS = 32
export const MAX_IN_VALUES = 1000

/** What the consumer asked of one entity's rows, typed. */
export interface RowSelection {
  /** the chosen columns, from the model, in the order asked */
  columns?: readonly Column[]
  filters?: readonly Condition[]
  since?: ChangeValue
}

function invalid (name: string, problem: string): InstanceType<typeof InvalidParameterError> {
  return new InvalidParameterError(`Invalid ${name}: ${problem}`)
}

const NOT_SUPPORTED = 'not supported by this dataset'

/** A name the client typed, quoted for a message: JSON-escaped and cut short. */
export function quoted (name: string): string {
  return JSON.stringify(name.length > 64 ? name.slice(0, 64) + '…' : name)
}

function single (name: string, value: unknown): string {
  if (typeof value !== 'string') throw invalid(name, 'give it once')
  return value
}

/**
 * Reads `columns`, `where` and `since` for `entity` (the one entity the
 * download holds, or undefined when it holds several). Returns undefined when
 * none is given.
 */
export function parseRowSelection (query: Record<string, unknown>, entity: Entity | undefined): RowSelection | undefined {
  const given = (['columns', 'where', 'since'] as const).filter((name) => query[name] !== undefined)
  if (given.length === 0) return undefined
  const text: Partial<Record<typeof given[number], string>> = {}
  for (const name of given) {
    text[name] = single(name, query[name])
    if (entity === undefined) throw invalid(name, 'it applies to one entity; name one with entity=')
  }
  const e = entity as Entity
  const support: ConsumerSupport = e.consumer ?? {}
  const selection: RowSelection = {}
  if (text.columns !== undefined) {
    if (support.columns !== true) throw invalid('columns', NOT_SUPPORTED)
    selection.columns = parseColumns(text.columns, e)
  }
  if (text.where !== undefined) {
    if (support.filters === undefined || support.filters.length === 0) throw invalid('where', NOT_SUPPORTED)
    selection.filters = parseWhere(text.where, e, support.filters)
  }
  if (text.since !== undefined) {
    const column = changeColumnOf(e)
    if (column === undefined) throw invalid('since', NOT_SUPPORTED)
    selection.since = parseChangeValue(text.since, column)
  }
  return selection
}

function columnNamed (entity: Entity, name: string): Column | undefined {
  return entity.columns.find((c) => c.name === name)
}

/** `a,b,c`: those columns, in that order, each once. */
export function parseColumns (text: string, entity: Entity): Column[] {
  if (text === '') throw invalid('columns', 'name at least one column')
  const names = text.split(',')
  if (names.length > entity.columns.length) throw invalid('columns', 'a column appears twice')
  const chosen: Column[] = []
  for (const name of names) {
    const column = columnNamed(entity, name)
    if (column === undefined) throw invalid('columns', `no column ${quoted(name)} in entity ${quoted(entity.name)}`)
    if (chosen.includes(column)) throw invalid('columns', `column ${quoted(name)} appears twice`)
    chosen.push(column)
  }
  return chosen
}

/** The change column an entity declares, or undefined. */
export function changeColumnOf (entity: Entity): Column | undefined {
  const changes = entity.consumer?.changes
  if (changes === undefined) return undefined
  const column = columnNamed(entity, changes.column)
  const fits = column !== undefined && (changes.kind === 'timestamp'
    ? column.type === 'timestamp'
    : column.type === 'integer' || column.type === 'bigint')
  if (!fits) {
    throw new Error(`Invalid dataset model: entity "${entity.name}" declares change column "${changes.column}", ` +
      'which must be one of its columns: a timestamp column for kind timestamp, an integer or bigint one for kind version')
  }
  return column
}

// ---- where: a closed grammar, read by a small hand-written scanner --------

type Token =
  | { kind: 'word', text: string, at: number }
  | { kind: 'name', text: string, at: number }
  | { kind: 'number', text: string, at: number }
  | { kind: 'string', text: string, at: number }
  | { kind: 'op', text: ComparisonOperator, at: number }
  | { kind: '(' | ')' | ',', at: number }

const WORD = /[A-Za-z_][A-Za-z0-9_]*/y
const NUMBER = /-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?/y
const OPERATOR = /<=|>=|!=|=|<|>/y
const SPACE = /[ \t\r\n]+/y

/** Scans `where` into tokens; anything outside the grammar's characters is refused by position. */
function scan (text: string): Token[] {
  const tokens: Token[] = []
  let i = 0
  const match = (re: RegExp): string | undefined => {
    re.lastIndex = i
    const m = re.exec(text)
    return m === null ? undefined : m[0]
  }
  while (i < text.length) {
    const c = text[i]
    const space = match(SPACE)
    if (space !== undefined) { i += space.length; continue }
    if (c === '(' || c === ')' || c === ',') { tokens.push({ kind: c, at: i }); i++; continue }
    if (c === "'" || c === '"') {
      // '...' a literal, "..." a column name; the quote doubled inside.
      let value = ''
      let j = i + 1
      for (;;) {
        const end = text.indexOf(c, j)
        if (end < 0) throw invalid('where', `unterminated ${c === "'" ? 'string' : 'quoted name'} at position ${i + 1}`)
        value += text.slice(j, end)
        if (text[end + 1] === c) { value += c; j = end + 2; continue }
        j = end + 1
        break
      }
      tokens.push({ kind: c === "'" ? 'string' : 'name', text: value, at: i })
      i = j
      continue
    }
    const word = match(WORD)
    if (word !== undefined) { tokens.push({ kind: 'word', text: word, at: i }); i += word.length; continue }
    const number = match(NUMBER)
    if (number !== undefined) {
      // `1and` or `1.5.2`: a number runs into something else.
      if (/[A-Za-z0-9_.]/.test(text[i + number.length] ?? '')) throw invalid('where', `malformed number at position ${i + 1}`)
      tokens.push({ kind: 'number', text: number, at: i })
      i += number.length
      continue
    }
    const op = match(OPERATOR)
    if (op !== undefined) { tokens.push({ kind: 'op', text: op as ComparisonOperator, at: i }); i += op.length; continue }
    throw invalid('where', `unexpected character at position ${i + 1}; the grammar is <column> <op> <literal> joined by and`)
  }
  return tokens
}

function isWord (token: Token | undefined, word: string): boolean {
  return token?.kind === 'word' && token.text.toLowerCase() === word
}

const RESERVED = new Set(['and', 'or', 'not', 'in', 'is', 'null', 'true', 'false'])
const UNFILTERABLE = new Set(['binary', 'json'])

/**
 * `where`: `<column> <op> <literal>`, `<column> in (<literal>, ...)`,
 * `<column> is [not] null`, joined by `and`. Columns must be among
 * `filterable` (the host's declaration); literals are typed by the column.
 */
export function parseWhere (text: string, entity: Entity, filterable: readonly string[]): Condition[] {
  if (text.length > MAX_WHERE_LENGTH) throw invalid('where', `longer than ${MAX_WHERE_LENGTH} characters`)
  const tokens = scan(text)
  if (tokens.length === 0) throw invalid('where', 'give at least one condition')
  let i = 0
  const end = (): string => (i < tokens.length ? `at position ${tokens[i].at + 1}` : 'at the end')
  const conditions: Condition[] = []
  for (;;) {
    if (conditions.length === MAX_CONDITIONS) throw invalid('where', `more than ${MAX_CONDITIONS} conditions`)
    const columnToken = tokens[i++]
    if (columnToken === undefined || !(columnToken.kind === 'name' || (columnToken.kind === 'word' && !RESERVED.has(columnToken.text.toLowerCase())))) {
      i--
      throw invalid('where', `expected a column name ${end()}`)
    }
    const name = (columnToken as { text: string }).text
    if (tokens[i]?.kind === '(') throw invalid('where', `functions are not supported (position ${columnToken.at + 1})`)
    const column = columnNamed(entity, name)
    if (column === undefined) throw invalid('where', `no column ${quoted(name)} in entity ${quoted(entity.name)}`)
    if (!filterable.includes(column.name) || UNFILTERABLE.has(column.type)) {
      throw invalid('where', `column ${quoted(column.name)} cannot be filtered by this dataset`)
    }
    const opToken = tokens[i++]
    if (opToken?.kind === 'op') {
      conditions.push({ column: column.name, op: opToken.text, value: literal(tokens[i++], column) })
    } else if (isWord(opToken, 'in')) {
      if (tokens[i++]?.kind !== '(') { i--; throw invalid('where', `expected ( after in ${end()}`) }
      const values: FilterValue[] = []
      for (;;) {
        if (values.length === MAX_IN_VALUES) throw invalid('where', `more than ${MAX_IN_VALUES} values in one in (...)`)
        values.push(literal(tokens[i++], column))
        const next = tokens[i++]
        if (next?.kind === ')') break
        if (next?.kind !== ',') { i--; throw invalid('where', `expected , or ) ${end()}`) }
      }
      conditions.push({ column: column.name, op: 'in', value: values })
    } else if (isWord(opToken, 'is')) {
      const negated = isWord(tokens[i], 'not')
      if (negated) i++
      if (!isWord(tokens[i++], 'null')) { i--; throw invalid('where', `expected null after is ${end()}`) }
      conditions.push({ column: column.name, op: negated ? 'is not null' : 'is null', value: null })
    } else {
      i--
      throw invalid('where', `expected an operator (= != < <= > >= in is) ${end()}`)
    }
    if (i === tokens.length) return conditions
    if (!isWord(tokens[i++], 'and')) { i--; throw invalid('where', `expected and ${end()}; or, functions and expressions are not supported`) }
  }
}

const INTEGER_LITERAL = /^-?[0-9]+$/
const DATE = /^([0-9]{4})-([0-9]{2})-([0-9]{2})$/

/** A literal typed by its column; a literal the column cannot hold names the column. */
function literal (token: Token | undefined, column: Column): FilterValue {
  if (token === undefined || token.kind === '(' || token.kind === ')' || token.kind === ',' || token.kind === 'op' || token.kind === 'name') {
    throw invalid('where', `expected a literal for column ${quoted(column.name)} ${token === undefined ? 'at the end' : `at position ${token.at + 1}`}`)
  }
  const needs = (what: string): InstanceType<typeof InvalidParameterError> =>
    invalid('where', `column ${quoted(column.name)} needs ${what}`)
  const bare = token.kind === 'number' ? token.text : undefined
  const text = token.kind === 'string' ? token.text : undefined
  try {
    switch (column.type) {
      case 'integer': {
        if (bare === undefined || !INTEGER_LITERAL.test(bare)) throw needs('an integer, written bare (42)')
        return integerValue(bare) as number
      }
      case 'bigint': {
        if (bare === undefined || !INTEGER_LITERAL.test(bare)) throw needs('an integer, written bare (42)')
        return toBigint(bare) as bigint
      }
      case 'decimal': {
        if (bare === undefined) throw needs('a number, written bare (12.30)')
        return decimalText(column.precision, column.scale)(bare) as string
      }
      case 'float': {
        const n = bare === undefined ? NaN : Number(bare)
        if (!Number.isFinite(n)) throw needs('a finite number, written bare (1.5e3)')
        return n === 0 ? 0 : n
      }
      case 'boolean': {
        if (token.kind !== 'word' || !['true', 'false'].includes(token.text.toLowerCase())) throw needs('true or false, written bare')
        return token.text.toLowerCase() === 'true'
      }
      case 'text': {
        if (text === undefined) throw needs("text in single quotes ('it''s')")
        if (text.includes('\0')) throw needs('text without NUL')
        return text
      }
      case 'date': {
        const m = text === undefined ? null : DATE.exec(text)
        if (m === null || !dateExists(Number(m[1]), Number(m[2]), Number(m[3]))) throw needs("a date in single quotes ('2024-01-31')")
        return text as string
      }
      case 'timestamp': {
        if (text === undefined) throw needs("a timestamp in single quotes ('2024-01-31T12:00:00Z')")
        return timestampOf(text, (problem) => needs(`a timestamp in single quotes that ${problem}`))
      }
      default:
        throw needs('no filter: binary and json columns cannot be filtered')
    }
  } catch (err) {
    if (err instanceof ValueError) throw needs(err.message.replace(/^an? \w+ column needs /, ''))
    throw err
  }
}

function dateExists (year: number, month: number, day: number): boolean {
  if (year < 1 || month < 1 || month > 12 || day < 1) return false
  const days = month === 2 ? (year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28) : [4, 6, 9, 11].includes(month) ? 30 : 31
  return day <= days
}

// A timestamp without an offset is taken as UTC, as the example's (and
// Data-Changes-Until's) ISO text is; a space may stand for the T.
const HAS_OFFSET = /(?:[Zz]|[+-][0-9]{2}:[0-9]{2})$/

function timestampOf (text: string, problem: (message: string) => Error): Date {
  let t = text
  if (/^[0-9]{4}-[0-9]{2}-[0-9]{2} /.test(t)) t = t.slice(0, 10) + 'T' + t.slice(11)
  if (/[Tt]/.test(t) && !HAS_OFFSET.test(t)) t += 'Z'
  const reading = readTimestamp(t)
  if (!reading.ok) throw problem(reading.problem)
  return reading.value
}

// ---- since and Data-Changes-Until ------------------------------------------

/** `since=` as the change column's value (no quotes: it is the header's text). */
export function parseChangeValue (text: string, column: Column): ChangeValue {
  if (column.type === 'timestamp') {
    return timestampOf(text, (problem) => invalid('since', `${problem} (pass the last Data-Changes-Until)`))
  }
  if (!INTEGER_LITERAL.test(text)) throw invalid('since', 'must be an integer (pass the last Data-Changes-Until)')
  try {
    return column.type === 'bigint' ? toBigint(text) as bigint : integerValue(text) as number
  } catch {
    throw invalid('since', `out of range for column ${quoted(column.name)}`)
  }
}

/** The host's `changesUntil()` value, checked against the change column's type. */
export function checkChangeValue (value: unknown, column: Column, entity: string): ChangeValue | null {
  if (value === null || value === undefined) return null
  const wrong = (): Error => new Error(`Invalid changesUntil of entity "${entity}": not a value of column "${column.name}" (${column.type})`)
  if (column.type === 'timestamp') {
    if (value instanceof Date && !Number.isNaN(value.getTime())) return value
    // A database's microseconds, cut to the millisecond: a bound a little
    // lower is still safe (the rows past it come in the next download).
    const text = typeof value === 'string' ? value.replace(/(\.[0-9]{3})[0-9]+/, '$1') : value
    const reading = readTimestamp(text)
    if (!reading.ok) throw wrong()
    return reading.value
  }
  try {
    return column.type === 'bigint' ? toBigint(value) as bigint : integerValue(value) as number
  } catch {
    throw wrong()
  }
}

/** The text of a change value, as `Data-Changes-Until` carries it and `since` reads it. */
export function changeValueText (value: ChangeValue): string {
  return value instanceof Date ? value.toISOString() : String(value)
}

/** A canonical text of a selection, for the ETag: the same request typed the same way gives the same text. */
export function selectionKey (selection: RowSelection | undefined, changesUntil: ChangeValue | null | undefined): string | null {
  if (selection === undefined && (changesUntil === undefined || changesUntil === null)) return null
  const typed = (v: unknown): unknown =>
    typeof v === 'bigint' ? `${v}n` : v instanceof Date ? `${v.toISOString()}@` : Array.isArray(v) ? v.map(typed) : v
  return JSON.stringify([
    selection?.columns?.map((c) => c.name) ?? null,
    selection?.filters?.map((c) => [c.column, c.op, typed(c.value)]) ?? null,
    typed(selection?.since ?? null),
    typed(changesUntil ?? null)
  ])
}
