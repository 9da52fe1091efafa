import fc from 'fast-check'
import t from 'tap'
import type { Column, Dataset, Row } from '../../lib/index.js'
import { Pace } from '../../lib/formats/pace.js'
import { FORMATS } from '../../lib/formats/index.js'
import { isPlainJsonString, jsonRowWriter } from '../../lib/formats/json.js'
import { datasetOf, specOf } from '../format-fixtures.js'
import { collect } from '../format-readers.js'

// json writes each row as JSON.stringify would write the row object, keys
// in column order, without calling it per row.

// Any UTF-16 unit (lone surrogates included), with the characters JSON escapes made common.
const unit = fc.oneof(
  fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)),
  fc.constantFrom('"', '\\', '\n', '\u0000', '\u001f', '\u007f', '\u2028', '\ud800', '\udfff', '😀', 'a', 'é')
)
const anyText = fc.string({ unit, maxLength: 40 })

t.test('a short string with nothing to escape is written as it is, in quotes', async (t) => {
  fc.assert(fc.property(anyText, (s) => {
    const plain = JSON.stringify(s) === '"' + s + '"'
    // Long strings, and any with a surrogate, are left to JSON.stringify.
    return isPlainJsonString(s) ? plain : !plain || s.length > 32 || /[\ud800-\udfff]/.test(s)
  }), { numRuns: 2000 })
  t.equal(isPlainJsonString('page_view'), true)
  t.equal(isPlainJsonString('say "hi"'), false)
  t.equal(isPlainJsonString('\ud83d'), false, 'a lone surrogate is escaped')
  t.equal(isPlainJsonString('é\u2028'), true, 'JSON escapes neither')
  t.equal(isPlainJsonString('x'.repeat(33)), false, 'longer strings go to JSON.stringify')
})

t.test('a row is what JSON.stringify writes for the row object', async (t) => {
  // Column names JSON must escape, and none an object would reorder (array indexes).
  const name = fc.oneof(anyText, fc.constantFrom('__proto__', 'constructor', 'id', 'a b', '"', '\\'))
    .filter((n) => !/^(0|[1-9][0-9]*)$/.test(n))
  const TYPES = ['integer', 'float', 'text', 'boolean', 'json'] as const
  const valueOf: Record<typeof TYPES[number], fc.Arbitrary<unknown>> = {
    integer: fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
    float: fc.double(), // NaN and infinities are NULL, and JSON.stringify writes them as null too
    text: anyText,
    boolean: fc.boolean(),
    json: fc.jsonValue()
  }
  const entity = fc.uniqueArray(fc.record({ name, type: fc.constantFrom(...TYPES) }), { minLength: 1, maxLength: 6, selector: (c) => c.name })
  const sample = entity.chain((columns) => fc.tuple(fc.constant(columns),
    fc.tuple(...columns.map((c) => fc.option(valueOf[c.type], { nil: null }))), fc.constantFrom('', ',\n')))
  fc.assert(fc.property(sample, ([columns, row, start]) => {
    const written = jsonRowWriter({ name: 'e', columns: columns as Column[] }, start)(row as Row)
    const object = Object.fromEntries(columns.map((c, i) => [c.name, row[i]]))
    return written === start + JSON.stringify(object)
  }), { numRuns: 1000 })
  t.pass('rows match JSON.stringify')
})

t.test('the document: one array per entity, one row per line', async (t) => {
  const columns: Column[] = [{ name: 'id', type: 'integer' }, { name: 'at', type: 'timestamp', withTimeZone: true }, { name: 'note', type: 'text' }]
  const dataset = datasetOf('d', [
    { name: 'a', columns, rows: [[1, '2024-01-02T03:04:05.678Z', 'x'], [2, null, 'say "hi"']] },
    { name: 'b', columns, rows: [] }
  ])
  const body = (await collect(FORMATS.json(specOf(dataset)).body)).toString('utf8')
  t.equal(body, '{"a":[\n' +
    '{"id":1,"at":"2024-01-02T03:04:05.678Z","note":"x"},\n' +
    '{"id":2,"at":null,"note":"say \\"hi\\""}\n' +
    '],"b":[\n\n]}\n')
})

t.test('a value the column cannot hold fails the download, naming entity and column, as rows come in arrays or streamed', async (t) => {
  const columns: Column[] = [{ name: 'id', type: 'integer' }, { name: 'note', type: 'text' }, { name: 'at', type: 'date' }]
  const cases: Array<[Row, string]> = [
    [['1.5', 'x', null], 'Entity "e", column "id": an integer column needs an integer'],
    [[1, 'x', 'not a day'], 'Entity "e", column "at": a date column needs a Date or \'YYYY-MM-DD\' text'],
    [[1, { note: 'an object' }, null], 'Entity "e", column "note": a text column needs a string']
  ]
  for (const [bad, message] of cases) {
    const rows: Row[] = [[0, 'fine', '2024-01-01'], bad]
    const arrays: Dataset = { name: 'd', entities: [{ name: 'e', columns }], rows: () => rows }
    const streamed = datasetOf('d', [{ name: 'e', columns, rows }])
    for (const [path, dataset] of [['arrays', arrays], ['streamed', streamed]] as const) {
      await t.rejects(collect(FORMATS.json(specOf(dataset)).body), { message }, `${path}: ${message}`)
    }
  }
})

t.test('row writers are kept per entity object: the same object writes the same; a new one with other columns writes its own', async (t) => {
  const rows: Row[] = [[1, 'a'], [2, null]]
  const columns = (second: string): Column[] => [{ name: 'id', type: 'integer' }, { name: second, type: 'text' }]
  const download = async (format: 'json' | 'sql', entity: { name: string, columns: Column[] }): Promise<string> =>
    (await collect(FORMATS[format](specOf(datasetOf('d', [{ ...entity, rows }]), { entities: [entity] })).body)).toString('utf8')
  for (const format of ['json', 'sql'] as const) {
    const entity = { name: 'e', columns: columns('kind') }
    const first = await download(format, entity)
    t.match(first, /kind/, `${format}: the column's name is written`)
    t.equal(await download(format, entity), first, `${format}: the same entity object again, the same bytes`)
    const changed = await download(format, { name: 'e', columns: columns('sort') })
    t.match(changed, /sort/, `${format}: a new entity object is written with its own columns`)
    t.notMatch(changed, /kind/, `${format}: and none of the old one's`)
  }
})

t.test('rows that come as arrays are written as a streamed source\'s are, each entity asked for once', async (t) => {
  const columns: Column[] = [{ name: 'id', type: 'integer' }, { name: 'note', type: 'text' }]
  const rowsOf = (n: number, width: number): Row[] => Array.from({ length: n }, (_, i) => [i, 'x'.repeat(width)])
  // Small enough for one chunk, and too large for one (the streamed path takes over with the arrays already read).
  for (const [n, width, chunkSize] of [[3, 5, 64 * 1024], [40, 30, 256], [0, 1, 256]] as const) {
    const data = { a: rowsOf(n, width), b: rowsOf(2, 1), c: rowsOf(n, width) }
    const asked: string[] = []
    const arrays: Dataset = {
      name: 'd',
      entities: Object.keys(data).map((name) => ({ name, columns })),
      rows: (entity) => { asked.push(entity); return data[entity as keyof typeof data] }
    }
    const streamed = datasetOf('d', Object.entries(data).map(([name, rows]) => ({ name, columns, rows })))
    for (const limit of [undefined, 1, 0]) {
      asked.length = 0
      const spec = { ...specOf(arrays, { limit }), pace: new Pace(chunkSize) }
      const got = (await collect(FORMATS.json(spec).body as AsyncIterable<string>)).toString()
      const want = (await collect(FORMATS.json(specOf(streamed, { limit })).body as AsyncIterable<string>)).toString()
      t.equal(got, want, `${n} rows of ${width}, chunk ${chunkSize}, limit ${String(limit)}`)
      t.same(asked, limit === 0 ? [] : ['a', 'b', 'c'], 'each entity asked for once')
    }
  }
})

t.test('rows asked for ahead, as an array came before them, are given back if the download stops first', async (t) => {
  const columns: Column[] = [{ name: 'id', type: 'integer' }]
  let returned = 0
  const lazy: Iterable<Row> = {
    [Symbol.iterator]: () => ({
      next: () => ({ done: false, value: [1] }),
      return: () => { returned++; return { done: true, value: undefined } }
    })
  }
  const dataset: Dataset = {
    name: 'd',
    entities: [{ name: 'a', columns }, { name: 'b', columns }],
    // a fits in one chunk, so b is asked for before the write falls back to streaming
    rows: (entity) => (entity === 'a' ? [[1], [2]] : lazy)
  }
  const body = FORMATS.json(specOf(dataset)).body as AsyncGenerator<string | Buffer>
  t.equal(String((await body.next()).value), '{"a":[\n{"id":1},\n{"id":2}\n]', 'a, whole')
  await body.return(undefined)
  t.equal(returned, 1, 'b\'s rows, asked for and never reached, were returned')
})
