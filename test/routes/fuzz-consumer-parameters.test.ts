import fc from 'fast-check'
import t from 'tap'
import type { Column, Condition, Dataset, RowsOptions } from '../../lib/index.js'
import { assignKeys, buildApp, createKey } from '../helper.js'
import { checkProperty } from '../fuzz-arbitraries.js'
import { leaks } from '../secret-scan.js'

// columns=, where= and since= through the route, as any client may send them:
// quotes, comments, semicolons, confusables, NUL, repeated parameters. The
// host's rows() records what it is handed: only names of its own model, the
// nine operators and values of each column's type, or no call at all when the
// answer is a 400 naming the parameter. Never a 500, never a key in a body.

const COLUMNS: Column[] = [
  { name: 'id', type: 'integer', primaryKey: true },
  { name: 'big', type: 'bigint' },
  { name: 'price', type: 'decimal', precision: 8, scale: 2 },
  { name: 'score', type: 'float' },
  { name: 'name', type: 'text' },
  { name: 'ok', type: 'boolean' },
  { name: 'day', type: 'date' },
  { name: 'at', type: 'timestamp' },
  { name: 'doc', type: 'json' }
]
const FILTERABLE = ['id', 'big', 'price', 'score', 'name', 'ok', 'day', 'at']
const ROWS = [[1, 2n, '1.50', 0.5, "O'Neil", true, '2024-01-01', '2024-01-01T00:00:00.000Z', { a: 1 }]]
const seen: RowsOptions[] = []
const dataset: Dataset = {
  name: 'things',
  entities: [{ name: 'things', columns: COLUMNS, consumer: { columns: true, filters: FILTERABLE, changes: { column: 'id', kind: 'version' } } }],
  rows (_entity, options) {
    seen.push(options)
    const picked = options.columns?.map((name) => COLUMNS.findIndex((c) => c.name === name))
    return ROWS.map((row) => (picked === undefined ? row : picked.map((i) => row[i])))
  },
  changesUntil: () => 1
}

function typed (column: Column, v: unknown): boolean {
  switch (column.type) {
    case 'integer': return typeof v === 'number' && Number.isInteger(v)
    case 'bigint': return typeof v === 'bigint'
    case 'float': return typeof v === 'number' && Number.isFinite(v)
    case 'decimal': return typeof v === 'string' && /^-?[0-9]+\.[0-9]{2}$/.test(v)
    case 'boolean': return typeof v === 'boolean'
    case 'text': return typeof v === 'string' && !v.includes('\0')
    case 'date': return typeof v === 'string' && /^[0-9]{4}-[0-9]{2}-[0-9]{2}$/.test(v)
    case 'timestamp': return v instanceof Date && !Number.isNaN(v.getTime())
    default: return false
  }
}

function checkHanded (options: RowsOptions): void {
  for (const name of options.columns ?? []) if (!COLUMNS.some((c) => c.name === name)) throw new Error(`column ${name} not of the model`)
  for (const c of options.filters ?? [] as Condition[]) {
    const column = COLUMNS.find((x) => x.name === c.column)
    if (column === undefined || !FILTERABLE.includes(column.name)) throw new Error(`filter on ${c.column}`)
    if (c.op === 'is null' || c.op === 'is not null') { if (c.value !== null) throw new Error('is null with a value'); continue }
    const values = c.op === 'in' ? c.value : [c.value]
    if (!['=', '!=', '<', '<=', '>', '>=', 'in'].includes(c.op) || values.length === 0 || !values.every((v) => typed(column, v))) {
      throw new Error(`untyped ${c.column} ${c.op}`)
    }
  }
  if (options.since !== undefined && typeof options.since !== 'number') throw new Error('since untyped')
  if (options.changesUntil !== 1) throw new Error('changesUntil not the host\'s')
}

const PIECES = ["'", "''", '"', ';', '--', '/*', '*/', '\0', '\\', ' or 1=1', "' or '1'='1", 'ｉｄ', 'аnd', '＝', '\u202e', '\u00a0',
  '(', ')', ',', 'drop table things', 'id', 'name', 'at', 'ok', 'doc', 'and', 'in', 'is', 'null', 'not', '1', '-1', '1.5', 'true', '=', '<', '!=', ' ',
  "'2024-01-01'", "'2024-01-01T00:00:00Z'", 'x'.repeat(300)]
const hostile = fc.array(fc.oneof(fc.constantFrom(...PIECES), fc.string({ maxLength: 3, unit: 'grapheme' })), { maxLength: 10 }).map((p) => p.join(''))
const quotedText = (text: string): string => `'${text.replaceAll("'", "''")}'`
/** A literal that fits `column` (hostile text inside quotes for text), or hostile text. */
function literalFor (name: string): fc.Arbitrary<string> {
  const fits: Record<string, fc.Arbitrary<string>> = {
    id: fc.integer({ min: -5, max: 5 }).map(String),
    big: fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }).map(String),
    price: fc.constantFrom('1.5', '-0.25', '0', '999999.99'),
    score: fc.double({ noNaN: true, noDefaultInfinity: true }).map(String),
    name: hostile.map(quotedText),
    ok: fc.constantFrom('true', 'FALSE'),
    day: fc.constantFrom("'2024-02-29'", "'0001-01-01'"),
    at: fc.constantFrom("'2024-01-01T00:00:00Z'", "'2024-01-01 12:00:00'", "'2024-01-01T00:00:00.5+05:30'")
  }
  return fc.oneof({ weight: 12, arbitrary: fits[name] ?? hostile.map(quotedText) }, { weight: 1, arbitrary: hostile })
}
const condition = fc.constantFrom(...FILTERABLE, 'doc', '"name"').chain((name) => {
  const bare = name.replaceAll('"', '')
  return fc.oneof(
    fc.tuple(fc.constantFrom('=', '!=', '<', '<=', '>', '>='), literalFor(bare)).map(([op, lit]) => `${name} ${op} ${lit}`),
    fc.array(literalFor(bare), { minLength: 1, maxLength: 3 }).map((lits) => `${name} in (${lits.join(', ')})`),
    fc.constantFrom('is null', 'IS NOT NULL').map((tail) => `${name} ${tail}`)
  )
})
const structuredWhere = fc.array(fc.oneof({ weight: 12, arbitrary: condition }, { weight: 1, arbitrary: hostile }), { minLength: 1, maxLength: 3 })
  .chain((parts) => fc.oneof({ weight: 8, arbitrary: fc.constantFrom(' and ', ' AND ', '\tand ') }, { weight: 1, arbitrary: fc.constantFrom(' or ', '; ', ' and\0') })
    .map((joint) => parts.join(joint)))
const structuredColumns = fc.array(fc.oneof({ weight: 12, arbitrary: fc.constantFrom(...COLUMNS.map((c) => c.name)) }, { weight: 1, arbitrary: hostile }),
  { minLength: 1, maxLength: 4 }).map((names) => names.join(','))
const sinceText = fc.oneof(fc.integer({ min: -3, max: 3 }).map(String), hostile)
function param (structured: fc.Arbitrary<string>): fc.Arbitrary<string[] | undefined> {
  return fc.oneof(
    { weight: 3, arbitrary: fc.constant(undefined) },
    { weight: 8, arbitrary: structured.map((v) => [v]) },
    { weight: 2, arbitrary: hostile.map((v) => [v]) },
    { weight: 1, arbitrary: fc.tuple(structured, hostile).map(([a, b]) => [a, b]) }
  )
}

t.test('property: hostile consumer parameters reach the host only as typed values of its model', async (t) => {
  const { app } = await buildApp(t, { datasets: { getDataset: async () => dataset } })
  let accepted = 0
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  await checkProperty(t, 'consumer parameters', fc.asyncProperty(param(structuredColumns), param(structuredWhere), param(sinceText), fc.constantFrom('json', 'csv', 'sql', 'arrow'), async (columns, where, since, format) => {
    const query = new URLSearchParams({ format })
    for (const [name, values] of [['columns', columns], ['where', where], ['since', since]] as const) {
      for (const v of values ?? []) query.append(name, v)
    }
    seen.length = 0
    const res = await app.inject({ url: `/api/acme/shop/model/1/dataset/1?${query.toString()}`, headers: { authorization: `Bearer ${k.key}` } })
    if (leaks([res.body], [k.key]).length > 0) throw new Error('a key in the body')
    if (res.statusCode === 400) {
      const { message } = res.json<{ message: string }>()
      if (!/^Invalid (columns|where|since): /.test(message)) throw new Error(`400 ${message}`)
      if (seen.length > 0) throw new Error('the host was called for a refused request')
      return
    }
    if (res.statusCode !== 200) throw new Error(`${res.statusCode} ${res.body}`)
    if (seen.length !== 1) throw new Error(`${seen.length} reads`)
    checkHanded(seen[0])
    accepted++
  }), 1500)
  t.ok(accepted > 150, `${accepted} requests reached the host`)
})
