import t, { type Test } from 'tap'
import type { ChangeValue, Column, Dataset, Entity, RowsOptions } from '../../lib/index.js'
import { assignKeys, buildApp, createKey } from '../helper.js'

// The host's side of columns, where and since (lib/host/dataset-source.ts):
// what rows() and changesUntil() are handed and when, a timestamp change
// column, an entity with no rows yet, and the model mistakes a host can make.

const COLUMNS: Column[] = [
  { name: 'id', type: 'integer', primaryKey: true },
  { name: 'updated_at', type: 'timestamp', withTimeZone: true },
  { name: 'note', type: 'text' }
]
const ROWS = [
  [1, '2024-01-01T00:00:00.000Z', 'a'],
  [2, '2024-01-02T00:00:00.000Z', 'b'],
  [3, '2024-01-03T00:00:00.000Z', 'c']
]

interface Probe { dataset: Dataset, reads: RowsOptions[], bounds: number }

function probe (entity: Partial<Entity>, until: () => ChangeValue | null = () => new Date('2024-01-03T00:00:00.000Z')): Probe {
  const p: Probe = { reads: [], bounds: 0, dataset: undefined as unknown as Dataset }
  p.dataset = {
    name: 'notes',
    revision: 'r1',
    entities: [{ name: 'notes', columns: COLUMNS, consumer: { columns: true, filters: ['id'], changes: { column: 'updated_at', kind: 'timestamp' } }, ...entity }],
    rows (_entity, options) {
      p.reads.push(options)
      const since = options.since as Date | undefined
      const until = options.changesUntil as Date | undefined
      const picked = (options.columns ?? COLUMNS.map((c) => c.name)).map((name) => COLUMNS.findIndex((c) => c.name === name))
      return ROWS.filter((r) => (since === undefined || Date.parse(r[1] as string) > since.getTime()) && (until === undefined || Date.parse(r[1] as string) <= until.getTime()))
        .map((r) => picked.map((i) => r[i]))
    },
    changesUntil: () => { p.bounds++; return until() }
  }
  return p
}

async function appWith (t: Test, p: Probe) {
  const { app } = await buildApp(t, { datasets: { getDataset: async () => p.dataset } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  return async (query: string, method: 'GET' | 'HEAD' = 'GET', headers: Record<string, string> = {}) =>
    app.inject({ method, url: `/api/acme/shop/model/1/dataset/1?${query}`, headers: { authorization: `Bearer ${k.key}`, ...headers } })
}

t.test('a timestamp change column: the bound as ISO text, since as a Date, both handed to rows()', async (t) => {
  const p = probe({})
  const get = await appWith(t, p)
  const first = await get('format=json')
  t.equal(first.headers['data-changes-until'], '2024-01-03T00:00:00.000Z')
  t.same(first.json().notes.map((r: { id: number }) => r.id), [1, 2, 3])
  t.same(p.reads[0].changesUntil, new Date('2024-01-03T00:00:00.000Z'), 'every read is bounded')
  t.equal(p.reads[0].since, undefined)
  t.same(Object.keys(p.reads[0]).sort(), ['changesUntil', 'columns', 'filters', 'limit', 'signal', 'since'])
  const next = await get(`format=csv&columns=note,id&since=${encodeURIComponent(first.headers['data-changes-until'] as string)}`)
  t.equal(next.body, 'note,id\r\n', 'nothing after the bound')
  t.same(p.reads[1].since, new Date('2024-01-03T00:00:00.000Z'))
  t.same(p.reads[1].columns, ['note', 'id'])
  const older = await get('format=csv&columns=id&since=2024-01-01T12:00:00%2B12:00&where=id%20%3E%3D%202')
  t.equal(older.body, 'id\r\n2\r\n3\r\n', 'since with an offset, and a filter')
  t.same(p.reads[2].filters, [{ column: 'id', op: '>=', value: 2 }])
  const head = await get('format=csv', 'HEAD')
  t.equal(head.headers['data-changes-until'], '2024-01-03T00:00:00.000Z', 'HEAD says it too')
  const meta = await get('meta=ddl&columns=note')
  t.equal(meta.headers['data-changes-until'], undefined, 'meta answers hold no rows and no bound')
  t.match(meta.body, /"note"/)
  t.notMatch(meta.body, /"id"|"updated_at"/)
  const bounds = p.bounds
  const cached = await get('format=json', 'GET', { 'if-none-match': first.headers.etag as string })
  t.equal(cached.statusCode, 304)
  t.equal(p.bounds, bounds + 1, 'the bound is read for a 304 too, and is part of the ETag')
})

t.test('an entity with no rows yet: nothing is read, the bound is since or absent', async (t) => {
  const p = probe({}, () => null)
  const get = await appWith(t, p)
  const none = await get('format=json')
  t.same(none.json(), { notes: [] })
  t.equal(none.headers['data-changes-until'], undefined)
  const since = await get('format=json&since=2024-01-01T00:00:00Z')
  t.equal(since.headers['data-changes-until'], '2024-01-01T00:00:00.000Z')
  t.equal(p.reads.length, 0, 'rows() never called: a row written meanwhile would have no bound')
})

t.test('the host\'s mistakes are 500s that name them, before any byte', async (t) => {
  const cases: Array<[Probe, string, RegExp]> = [
    [probe({ consumer: { filters: ['nope'] } }), 'format=json', /declares filters on "nope"/],
    [probe({ consumer: { filters: ['id'], changes: { column: 'note', kind: 'timestamp' } } }), 'format=json', /declares change column "note"/],
    [probe({}, () => 'later' as unknown as Date), 'format=json', /Invalid changesUntil of entity "notes"/]
  ]
  const noBound = probe({})
  delete (noBound.dataset as { changesUntil?: unknown }).changesUntil
  cases.push([noBound, 'format=json', /declares a change column, so the dataset needs changesUntil\(\)/])
  for (const [p, query, message] of cases) {
    const get = await appWith(t, p)
    const res = await get(query)
    t.equal(res.statusCode, 500)
    t.match(res.json().message, message)
    t.equal(p.reads.length, 0)
  }
})
