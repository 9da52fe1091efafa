import t, { type Test } from 'tap'
import { PgStorage, SqliteStorage, type ResourceSummary, type Storage } from '../../lib/index.js'
import { ADMIN, assignKeys, buildApp, createKey } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'

// Resource names (DESIGN.md §4.1): the host may list a project's datasets and
// pipelines (listResources); GET <prefix>/:org/:project/resources answers
// them, and endpoints carry `resourceName` when the host can tell it.

const P = '/api-keys/acme/shop'
const url = await pgAvailable(t)

const adapters: Array<[string, (t: Test) => Promise<Storage>]> = [
  ['SqliteStorage', async () => new SqliteStorage({ filename: ':memory:' })]
]
if (url !== null) {
  adapters.push(['PgStorage', async (t) => new PgStorage({ connectionString: url, schema: (await freshSchema(t, url)).schema })])
}

const DATASETS: ResourceSummary[] = [
  { modelSequence: 2, resourceSequence: 1, name: 'archive' },
  { modelSequence: 1, resourceSequence: 3, name: 'returns' },
  { modelSequence: 1, resourceSequence: 1, name: 'sales' }
]
const PIPELINES: ResourceSummary[] = [{ modelSequence: 1, resourceSequence: 1, name: 'refresh' }]

for (const [name, open] of adapters) {
  t.test(`${name}: resources listed by the host, and endpoints named by them`, async (t) => {
    const built = await buildApp(t, { storage: await open(t) })
    const { app, datasets, jobs } = built
    const asked: string[] = []
    Object.assign(datasets, { listResources: async (p: { organization: string, project: string }) => { asked.push(`${p.organization}/${p.project}`); return DATASETS } })
    Object.assign(jobs, { listResources: async () => PIPELINES })

    const res = await app.inject({ url: `${P}/resources`, headers: ADMIN })
    t.equal(res.statusCode, 200)
    t.same(res.json().items, [
      { type: 'dataset', modelSequence: 1, resourceSequence: 1, name: 'sales' },
      { type: 'dataset', modelSequence: 1, resourceSequence: 3, name: 'returns' },
      { type: 'pipeline', modelSequence: 1, resourceSequence: 1, name: 'refresh' },
      { type: 'dataset', modelSequence: 2, resourceSequence: 1, name: 'archive' }
    ], 'both kinds, by model, type, then resource')
    t.same(asked, ['acme/shop'], 'asked for the project in the path')

    const k = await createKey(app)
    await assignKeys(app, 'dataset', [k.id])
    await assignKeys(app, 'pipeline', [k.id])
    const listed = (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json() as Array<{ type: string, resourceName?: string }>
    t.same(listed.map((e) => [e.type, e.resourceName]), [['dataset', 'sales'], ['pipeline', 'refresh']], 'each endpoint carries its resource\'s name')
  })
}

t.test('without listResources: no resources, endpoints named only where the resource was just read', async (t) => {
  const { app } = await buildApp(t)
  t.same((await app.inject({ url: `${P}/resources`, headers: ADMIN })).json(), { items: [] })
  const k = await createKey(app)
  const put = await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN, payload: { keyIds: [k.id] } })
  t.equal(put.json().resourceName, 'sales', 'the PUT read the dataset, so it names it')
  const listed = (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json()
  t.notOk('resourceName' in listed[0], 'the listing does not read each dataset: no name')
})

t.test('a failing listResources: the resources route answers 500, the endpoint listing still works', async (t) => {
  const { app, datasets } = await buildApp(t)
  Object.assign(datasets, { listResources: async () => { throw new Error('catalogue unavailable') } })
  const res = await app.inject({ url: `${P}/resources`, headers: ADMIN })
  t.same([res.statusCode, res.json()], [500, { message: 'catalogue unavailable' }])
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const listed = await app.inject({ url: `${P}/endpoints`, headers: ADMIN })
  t.equal(listed.statusCode, 200)
  t.notOk('resourceName' in listed.json()[0])
  t.same((await app.inject({ url: `${P}/resources` })).json(), { message: 'Not authorized' }, 'needs ManageAPIKeys')
})
