import bcrypt from 'bcrypt'
import t from 'tap'
import { SqliteStorage } from '../../lib/index.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'

// bcryptCost reaches bcrypt (SPEC.md §2.1: keys are stored as bcrypt hashes):
// every other test runs at cost 4, so only the stored hashes can tell that
// the option is used, and that the default is 10.

const P = '/api-keys/acme/shop'

/** The stored hash of each of the project's keys, read from the database itself. */
function storedHashes (storage: SqliteStorage): Map<string, string> {
  const rows = storage.db.prepare<[], { id: string, hash: string }>('SELECT id, hash FROM api_keys').all()
  return new Map(rows.map((r) => [r.id, r.hash]))
}

for (const [cost, given] of [[5, 5], [10, undefined]] as const) {
  t.test(`bcryptCost ${given === undefined ? 'left to its default' : given}: stored hashes are bcrypt hashes of cost ${cost}`, async (t) => {
    const storage = new SqliteStorage({ filename: ':memory:' })
    const { app } = await buildApp(t, { storage, bcryptCost: given })
    const created = await createKey(app)
    await assignKeys(app, 'dataset', [created.id])
    const regenerated = (await app.inject({ method: 'POST', url: `${P}/keys/${created.id}/regenerate`, headers: ADMIN })).json()
    const other = await createKey(app, 'other')

    const hashes = storedHashes(storage)
    t.equal(hashes.size, 2)
    for (const [id, value] of [[created.id, regenerated.key], [other.id, other.key]] as const) {
      const hash = hashes.get(id) as string
      t.match(hash, new RegExp(`^\\$2b\\$${String(cost).padStart(2, '0')}\\$[./A-Za-z0-9]{53}$`), 'a bcrypt hash (2b) of that cost')
      t.equal(bcrypt.getRounds(hash), cost)
      t.ok(await bcrypt.compare(value, hash), 'of the key\'s value')
    }
    const res = await app.inject({ url: DATASET_URL, query: { api_key: regenerated.key, meta: 'entities' } })
    t.equal(res.statusCode, 200, 'and the key authenticates')
  })
}
