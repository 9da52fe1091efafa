import type { FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import type { DataEndpointsOptions } from '../../lib/index.js'
import { PgStorage } from '../../lib/storage/pg-storage.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, type TestApp } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'

// Download links on two instances sharing one PostgreSQL schema: a link
// minted on A works on B (the signing secret is shared through the store),
// and whatever A does to the link or its key, B refuses on its next request.

const url = await pgAvailable(t)
const P = '/api-keys/acme/shop'

async function twoInstances (t: Test, options: Partial<DataEndpointsOptions> = {}): Promise<[TestApp, TestApp]> {
  const schema = (await freshSchema(t, url as string)).schema
  const open = (): PgStorage => new PgStorage({ connectionString: url as string, schema, poolSize: 3 })
  // Both start at once, with no secret yet: each may add one, and both verify.
  return Promise.all([buildApp(t, { storage: open(), ...options }), buildApp(t, { storage: open(), ...options })])
}

async function mint (app: FastifyInstance, key: string, body: Record<string, unknown> = { format: 'csv', entity: 'customers' }): Promise<{ id: string, url: string, expiresAt: string }> {
  const res = await app.inject({ method: 'POST', url: `${DATASET_URL}/links`, headers: { authorization: `Bearer ${key}` }, payload: body })
  if (res.statusCode !== 201) throw new Error(`mint: ${res.statusCode} ${res.body}`)
  return res.json()
}

async function use (app: FastifyInstance, link: { url: string }, now?: number): Promise<[number, string?]> {
  const real = Date.now
  if (now !== undefined) Date.now = () => now
  try {
    const res = await app.inject({ url: new URL(link.url).pathname })
    return res.statusCode === 200 ? [200] : [res.statusCode, res.json().message]
  } finally {
    Date.now = real
  }
}

if (url !== null) {
  t.test('minted on A, used on B; revoked, expired, key disabled, regenerated, deleted on A: refused on B\'s next request', async (t) => {
    const [{ app: a }, { app: b }] = await twoInstances(t)
    // Mint on each instance first, with each one's own secrets loaded, so a secret either added is known to both.
    const k = await createKey(a, 'client')
    await assignKeys(a, 'dataset', [k.id])
    const link = await mint(a, k.key)
    const fromB = await mint(b, k.key)
    t.same(await use(b, link), [200], 'minted on A, used on B')
    t.same(await use(a, fromB), [200], 'minted on B, used on A')
    t.same(await use(b, link, Date.parse(link.expiresAt) - 1), [200], 'B: a millisecond before its expiry')
    t.same(await use(b, link, Date.parse(link.expiresAt)), [403, 'Expired link'], 'B: at its expiry')

    const revoked = await mint(a, k.key)
    t.same(await use(b, revoked), [200])
    t.equal((await a.inject({ method: 'DELETE', url: `${P}/links/${revoked.id}`, headers: ADMIN })).statusCode, 204)
    t.same(await use(b, revoked), [403, 'Revoked link'], 'revoked on A: B refuses at once')

    await a.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { isActive: false } })
    t.same(await use(b, link), [403, 'Disabled API key'], 'disabled on A')
    await a.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { isActive: true } })
    t.same(await use(b, link), [200])

    const expiry = Date.now() + 60_000
    await a.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { expiresAt: new Date(expiry).toISOString() } })
    t.same(await use(b, link, expiry), [403, 'Disabled API key'], 'the key expired')
    await a.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { expiresAt: null } })

    await a.inject({ method: 'POST', url: `${P}/keys/${k.id}/regenerate`, headers: ADMIN })
    t.same(await use(b, link), [403, 'Unknown API key'], 'regenerated on A')

    const other = await createKey(a, 'other')
    await assignKeys(a, 'dataset', [other.id])
    const otherLink = await mint(a, other.key)
    t.same(await use(b, otherLink), [200])
    await a.inject({ method: 'DELETE', url: `${P}/keys/${other.id}`, headers: ADMIN })
    t.same(await use(b, otherLink), [403, 'Unknown API key'], 'deleted on A')

    await b.dataEndpoints.flushUsage()
    await a.dataEndpoints.flushUsage()
    const endpoint = (await a.inject({ url: `${P}/endpoints`, headers: ADMIN })).json()[0]
    // Minted: 4; used with success on either: 6.
    t.equal(endpoint.calls, 10, 'each minting and each use counted once, on whichever instance')
  })

  t.test('a secret rotated on A while links are live: B learns of it on the first token it names', async (t) => {
    const [{ app: a }, { app: b }] = await twoInstances(t)
    const k = await createKey(a, 'client')
    await assignKeys(a, 'dataset', [k.id])
    const old = await mint(a, k.key)
    t.same(await use(b, old), [200])
    await a.dataEndpoints.rotateLinkSecret()
    const fresh = await mint(a, k.key)
    t.same(await use(b, fresh), [200], 'B reads the secrets again for a secret id it has not seen')
    t.same(await use(b, old), [200], 'the old secret still verifies')
    const { ids, signing } = await a.dataEndpoints.linkSecretIds()
    for (const id of ids) if (id !== signing) await a.dataEndpoints.retireLinkSecret(id)
    t.same(await use(a, old), [403, 'Unknown link'], 'retired on A: A refuses at once')
    t.same(await use(a, fresh), [200])
  })
}
