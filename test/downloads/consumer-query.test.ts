import fc from 'fast-check'
import t from 'tap'
import type { Column, Condition, Entity } from '../../lib/index.js'
import {
  MAX_CONDITIONS, MAX_IN_VALUES, changeValueText, checkChangeValue, parseChangeValue, parseRowSelection, parseWhere, selectionKey
} from '../../lib/downloads/consumer-query.js'
import { checkProperty } from '../fuzz-arbitraries.js'

// The consumer parameters read into typed values (DESIGN.md §2): the grammar,
// each column type's literals, the 400s, and properties showing that whatever
// the request holds, the host gets only names from its model and typed values.

const COLUMNS: Column[] = [
  { name: 'id', type: 'integer', primaryKey: true },
  { name: 'big', type: 'bigint' },
  { name: 'price', type: 'decimal', precision: 6, scale: 2 },
  { name: 'score', type: 'float' },
  { name: 'name', type: 'text' },
  { name: 'ok', type: 'boolean' },
  { name: 'day', type: 'date' },
  { name: 'at', type: 'timestamp' },
  { name: 'blob', type: 'binary' },
  { name: 'doc', type: 'json' },
  { name: 'odd name', type: 'text' },
  { name: 'secret', type: 'text' }
]
const FILTERABLE = ['id', 'big', 'price', 'score', 'name', 'ok', 'day', 'at', 'odd name']
const ENTITY: Entity = {
  name: 'things',
  columns: COLUMNS,
  consumer: { columns: true, filters: FILTERABLE, changes: { column: 'id', kind: 'version' } }
}

const where = (text: string): Condition[] => parseWhere(text, ENTITY, FILTERABLE)
const problem = (fn: () => unknown): string => {
  try {
    fn()
  } catch (err) {
    if ((err as { statusCode?: number }).statusCode !== 400) throw err
    return (err as Error).message
  }
  throw new Error('no error')
}

t.test('every operator, every filterable type, typed', async (t) => {
  t.same(where("id = 1 and big != 9007199254740993 and price < 12.3 and score <= -1.5e3 and name > 'it''s' and ok >= true"), [
    { column: 'id', op: '=', value: 1 },
    { column: 'big', op: '!=', value: 9007199254740993n },
    { column: 'price', op: '<', value: '12.30' },
    { column: 'score', op: '<=', value: -1500 },
    { column: 'name', op: '>', value: "it's" },
    { column: 'ok', op: '>=', value: true }
  ])
  t.same(where("day in ('2024-02-29', '2023-01-01') AND at = '2024-01-02T03:04:05.678+01:00' and ok is null and \"odd name\" IS NOT NULL"), [
    { column: 'day', op: 'in', value: ['2024-02-29', '2023-01-01'] },
    { column: 'at', op: '=', value: new Date('2024-01-02T02:04:05.678Z') },
    { column: 'ok', op: 'is null', value: null },
    { column: 'odd name', op: 'is not null', value: null }
  ])
  t.same(where("at > '2024-01-02 03:04:05'"), [{ column: 'at', op: '>', value: new Date('2024-01-02T03:04:05Z') }], 'no offset: UTC')
  t.same(where('id in (1)'), [{ column: 'id', op: 'in', value: [1] }])
  t.same(where('ok = FALSE'), [{ column: 'ok', op: '=', value: false }])
  t.same(where('price = 0 and price = -0.5'), [{ column: 'price', op: '=', value: '0.00' }, { column: 'price', op: '=', value: '-0.50' }])
})

t.test('malformed literals: 400 naming the column', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ["id = '1'", /^Invalid where: column "id" needs an integer/],
    ['id = 1.5', /column "id" needs an integer/],
    ['id = 2147483648', /column "id" needs integer out of range/],
    ['big = 9223372036854775808', /column "big" needs bigint out of range/],
    ['price = 1.234', /column "price" needs decimal has more than 2 fraction digits/],
    ['price = 12345', /column "price" needs decimal does not fit/],
    ['score = 1e999', /column "score" needs a finite number/],
    ['name = 42', /column "name" needs text in single quotes/],
    ["name = 'a\0b'", /column "name" needs text without NUL/],
    ['ok = 1', /column "ok" needs true or false/],
    ["day = '2023-02-29'", /column "day" needs a date/],
    ["day = '2023-2-1'", /column "day" needs a date/],
    ["at = '2024-01-01T23:59:60Z'", /column "at" needs a timestamp in single quotes that must not be a leap second/],
    ["at = 'yesterday'", /column "at" needs a timestamp/],
    ['id in ()', /expected a literal for column "id"/],
    ['id = null', /column "id" needs an integer/]
  ]
  for (const [text, expected] of cases) t.match(problem(() => where(text)), expected, text)
})

t.test('outside the grammar: 400 naming where, never a partial list', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ['', /give at least one condition/],
    ['id = 1 or id = 2', /expected and at position 8; or, functions and expressions are not supported/],
    ['id = 1; drop table things', /unexpected character at position 7/],
    ['id = 1 -- comment', /malformed number|expected and|unexpected/],
    ['id = 1 /* x */', /unexpected character/],
    ['lower(name) = \'a\'', /functions are not supported \(position 1\)/],
    ['id = id', /column "id" needs an integer/],
    ['id + 1 = 2', /unexpected character|expected an operator/],
    ['id == 1', /expected a literal/],
    ['id <> 1', /expected a literal/],
    ['id = 1 and', /expected a column name at the end/],
    ["name = 'unterminated", /unterminated string at position 8/],
    ['"id = 1', /unterminated quoted name/],
    ['id = 1abc', /malformed number at position 6/],
    ['nope = 1', /no column "nope" in entity "things"/],
    ['ID = 1', /no column "ID"/],
    ['secret = \'x\'', /column "secret" cannot be filtered by this dataset/],
    ['blob is null', /column "blob" cannot be filtered/],
    ['and = 1', /expected a column name at position 1/],
    ['id is not 1', /expected null after is/],
    ['id in 1', /expected \( after in/],
    ['id in (1 2)', /expected , or \)/],
    ['id = 1 and and id = 2', /expected a column name/],
    ['ｉｄ = 1', /unexpected character at position 1/],
    ['id ＝ 1', /unexpected character at position 4/],
    ['id = １', /unexpected character at position 6/],
    ['id = 1 аnd id = 2', /unexpected character at position 8/], // Cyrillic а
    ['id\u00a0= 1', /unexpected character at position 3/],
    ['id = 1\0', /unexpected character at position 7/],
    ['x'.repeat(5000), /longer than 4096 characters/],
    [Array(MAX_CONDITIONS + 1).fill('id = 1').join(' and '), /more than 32 conditions/],
    [`id in (${Array(MAX_IN_VALUES + 1).fill('1').join(',')})`, /more than 1000 values/]
  ]
  for (const [text, expected] of cases) {
    const message = problem(() => where(text))
    t.match(message, /^Invalid where: /, text.slice(0, 40))
    t.match(message, expected, text.slice(0, 40))
  }
})

t.test('columns, since, support and one entity', async (t) => {
  t.same(parseRowSelection({ columns: 'name,id' }, ENTITY)?.columns?.map((c) => c.name), ['name', 'id'])
  t.equal(parseRowSelection({}, ENTITY), undefined)
  t.equal(problem(() => parseRowSelection({ columns: 'id,nope' }, ENTITY)), 'Invalid columns: no column "nope" in entity "things"')
  t.equal(problem(() => parseRowSelection({ columns: 'id,id' }, ENTITY)), 'Invalid columns: column "id" appears twice')
  t.equal(problem(() => parseRowSelection({ columns: '' }, ENTITY)), 'Invalid columns: name at least one column')
  t.equal(problem(() => parseRowSelection({ columns: 'id, name' }, ENTITY)), 'Invalid columns: no column " name" in entity "things"')
  t.equal(problem(() => parseRowSelection({ columns: ['id', 'name'] }, ENTITY)), 'Invalid columns: give it once')
  t.equal(problem(() => parseRowSelection({ where: 'id = 1' }, undefined)), 'Invalid where: it applies to one entity; name one with entity=')
  const plain: Entity = { name: 'plain', columns: COLUMNS }
  for (const [name, value] of [['columns', 'id'], ['where', 'id = 1'], ['since', '1']]) {
    t.equal(problem(() => parseRowSelection({ [name]: value }, plain)), `Invalid ${name}: not supported by this dataset`)
  }
  t.equal(parseRowSelection({ since: '42' }, ENTITY)?.since, 42)
  t.equal(problem(() => parseRowSelection({ since: '4.2' }, ENTITY)), 'Invalid since: must be an integer (pass the last Data-Changes-Until)')
  t.equal(problem(() => parseRowSelection({ since: '99999999999' }, ENTITY)), 'Invalid since: out of range for column "id"')
  const at = COLUMNS.find((c) => c.name === 'at') as Column
  t.same(parseChangeValue('2024-01-02T03:04:05.678Z', at), new Date('2024-01-02T03:04:05.678Z'))
  t.equal(changeValueText(new Date('2024-01-02T03:04:05.678Z')), '2024-01-02T03:04:05.678Z')
  t.equal(changeValueText(2n ** 62n), '4611686018427387904')
  t.match(problem(() => parseChangeValue('2024-13-01T00:00:00Z', at)), /^Invalid since: must be a date that exists/)
  // The host's bound: microseconds cut (a lower bound stays safe), a wrong type is the host's fault (500).
  t.same(checkChangeValue('2024-01-02T03:04:05.678999Z', at, 'things'), new Date('2024-01-02T03:04:05.678Z'))
  t.equal(checkChangeValue(null, at, 'things'), null)
  t.equal(checkChangeValue('7', COLUMNS[0], 'things'), 7)
  t.throws(() => checkChangeValue('soon', at, 'things'), /Invalid changesUntil of entity "things": not a value of column "at"/)
  t.throws(() => checkChangeValue(1.5, COLUMNS[0], 'things'), /not a value of column "id"/)
})

t.test('the ETag key tells typed values apart and ignores spelling', async (t) => {
  const key = (w: string): string | null => selectionKey({ filters: where(w) }, undefined)
  t.equal(key('id = 1'), key('ID_never_typed'.length > 0 ? 'id=1' : ''))
  t.equal(key("price = 1.5"), key('price = 1.50'))
  t.not(key('id = 1'), key('id = 2'))
  t.not(key('big = 1'), selectionKey({ filters: [{ column: 'big', op: '=', value: 1 }] }, undefined))
  t.equal(selectionKey(undefined, undefined), null)
  t.not(selectionKey(undefined, 5), selectionKey(undefined, 6))
})

// ---- properties: nothing but the model's names and typed values --------------

const HOSTILE = ["'", '"', ';', '--', '/*', '*/', '\0', '\\', ' or 1=1', "' or '1'='1", 'ｉｄ', 'аnd', 'ǀ', '＝', '\u202e',
  '\u00a0', '\u2028', '(', ')', ',', 'drop table things', 'id', 'and', 'in', 'is', 'null', 'not', '1', '-1', '1e5', 'true', '=', '<', '!=']
const hostileText = fc.array(fc.oneof(fc.constantFrom(...HOSTILE), fc.string({ maxLength: 4, unit: 'grapheme' })), { maxLength: 12 })
  .map((parts) => parts.join(''))

const MODEL_NAMES = new Set(COLUMNS.map((c) => c.name))
function isTyped (c: Condition): boolean {
  const column = COLUMNS.find((x) => x.name === c.column)
  if (column === undefined || !MODEL_NAMES.has(c.column) || !FILTERABLE.includes(c.column)) return false
  const values = c.op === 'in' ? c.value : c.op === 'is null' || c.op === 'is not null' ? [] : [c.value]
  if ((c.op === 'is null' || c.op === 'is not null') && c.value !== null) return false
  if (c.op === 'in' && values.length === 0) return false
  if (!['=', '!=', '<', '<=', '>', '>=', 'in', 'is null', 'is not null'].includes(c.op)) return false
  return values.every((v) => {
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
  })
}

t.test('property: any text gives typed conditions on declared columns, or a 400 naming where', async (t) => {
  await checkProperty(t, 'hostile where', fc.asyncProperty(hostileText, async (text) => {
    let conditions: Condition[]
    try {
      conditions = where(text)
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode !== 400 || !(err as Error).message.startsWith('Invalid where: ')) throw err
      return
    }
    for (const c of conditions) if (!isTyped(c)) throw new Error(`untyped condition ${JSON.stringify(c, (_, v) => typeof v === 'bigint' ? String(v) : v)}`)
  }), 3000)
})

t.test('property: a hostile literal inside a valid condition reaches the host only as a value of its type', async (t) => {
  await checkProperty(t, 'hostile literal', fc.asyncProperty(
    fc.constantFrom(...FILTERABLE), fc.constantFrom('=', '!=', '<', '>=', 'in'), hostileText,
    async (name, op, literal) => {
      const quotedName = `"${name.replaceAll('"', '""')}"`
      const text = op === 'in' ? `${quotedName} in ('${literal.replaceAll("'", "''")}', ${literal})` : `${quotedName} ${op} '${literal.replaceAll("'", "''")}'`
      let conditions: Condition[]
      try {
        conditions = where(text)
      } catch (err) {
        if ((err as { statusCode?: number }).statusCode !== 400) throw err
        return
      }
      for (const c of conditions) if (!isTyped(c)) throw new Error('untyped condition')
      // A text literal comes through whole, as one value: never split, never unquoted into the grammar.
      const column = COLUMNS.find((c) => c.name === name) as Column
      if (column.type === 'text' && op !== 'in' && conditions[0].value !== literal) throw new Error('text literal changed')
    }), 2000)
})

t.test('property: hostile column names in columns= are named back, never passed on', async (t) => {
  await checkProperty(t, 'hostile columns', fc.asyncProperty(fc.array(fc.oneof(fc.constantFrom(...COLUMNS.map((c) => c.name)), hostileText), { maxLength: 5 }), async (names) => {
    let chosen: readonly Column[] | undefined
    try {
      chosen = parseRowSelection({ columns: names.join(',') }, ENTITY)?.columns
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode !== 400 || !(err as Error).message.startsWith('Invalid columns: ')) throw err
      return
    }
    for (const c of chosen ?? []) if (!COLUMNS.includes(c)) throw new Error('a column not from the model')
  }), 2000)
})
