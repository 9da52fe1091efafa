import fc from 'fast-check'
import t, { type Test } from 'tap'
import { SqliteStorage } from '../../lib/index.js'
import { LinkSigner, newLinkId, type LinkClaims } from '../../lib/keys/link-tokens.js'
import { checkProperty } from '../fuzz-arbitraries.js'

// The link token (lib/keys/link-tokens.ts): only the minted token, on the URL
// it was minted for, verifies; its claims come back as signed.

const CLAIMS: LinkClaims = {
  id: newLinkId(),
  keyId: 'c0a80101-0000-4000-8000-000000000001',
  endpointId: 'c0a80101-0000-4000-8000-000000000002',
  expiresAt: Date.UTC(2030, 0, 1),
  params: { format: 'csv', entity: 'orders', limit: '10' }
}

async function signer (t: Test): Promise<LinkSigner> {
  const storage = new SqliteStorage({ filename: ':memory:' })
  t.teardown(() => storage.close())
  return new LinkSigner(storage)
}

t.test('the minted token verifies on its file name and gives back its claims; the first use makes one secret', async (t) => {
  const storage = new SqliteStorage({ filename: ':memory:' })
  t.teardown(() => storage.close())
  const links = new LinkSigner(storage)
  const token = await links.sign(CLAIMS, 'orders.csv')
  t.same(await links.verify(token, 'orders.csv'), CLAIMS)
  t.equal(await links.verify(token, 'orders.json'), null, 'another file name')
  t.equal((await storage.listLinkSecrets()).length, 1)
  const other = new LinkSigner(storage)
  t.same(await other.verify(token, 'orders.csv'), CLAIMS, 'another instance on the same store')
  const elsewhere = new LinkSigner(new SqliteStorage({ filename: ':memory:' }))
  t.equal(await elsewhere.verify(token, 'orders.csv'), null, 'a store with other secrets')
})

t.test('property: no token but the minted one verifies, whatever is changed, added or cut', async (t) => {
  const links = await signer(t)
  const token = await links.sign(CLAIMS, 'orders.csv')
  const chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.%/'
  const edit = fc.oneof(
    fc.record({ kind: fc.constant('replace' as const), at: fc.nat(token.length - 1), char: fc.constantFrom(...chars) }),
    fc.record({ kind: fc.constant('insert' as const), at: fc.nat(token.length), char: fc.constantFrom(...chars) }),
    fc.record({ kind: fc.constant('delete' as const), at: fc.nat(token.length - 1), char: fc.constant('') })
  )
  await checkProperty(t, 'edited tokens', fc.asyncProperty(fc.array(edit, { minLength: 1, maxLength: 4 }), fc.constantFrom('orders.csv', 'orders.csv ', 'Orders.csv', 'x'), async (edits, fileName) => {
    let changed = token
    for (const e of edits) {
      changed = e.kind === 'replace'
        ? changed.slice(0, e.at) + e.char + changed.slice(e.at + 1)
        : e.kind === 'insert' ? changed.slice(0, e.at) + e.char + changed.slice(e.at) : changed.slice(0, e.at) + changed.slice(e.at + 1)
    }
    const verified = await links.verify(changed, fileName)
    if (changed === token && fileName === 'orders.csv') return verified !== null
    return verified === null
  }), 2000)
  await checkProperty(t, 'any string', fc.asyncProperty(fc.string({ maxLength: 400 }), async (s) => await links.verify(s, 'orders.csv') === null), 500)
  await checkProperty(t, 'other claims signed by the same secret do not pass for these', fc.asyncProperty(
    fc.record({ id: fc.string({ minLength: 1, maxLength: 30 }), expiresAt: fc.integer({ min: 0, max: 2 ** 45 }) }), async ({ id, expiresAt }) => {
      const other = await links.sign({ ...CLAIMS, id, expiresAt }, 'orders.csv')
      const [secretId, claims, mac] = other.split('.')
      const [, mine] = token.split('.')
      return other === token || (await links.verify(`${secretId}.${mine}.${mac}`, 'orders.csv') === null && claims !== mine)
    }), 300)
})
