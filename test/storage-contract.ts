import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'
import { randomAlphanumeric } from '../lib/api-key.js'
import {
  PrefixTakenError,
  type ApiKeyRecord, type EndpointLocator, type NewApiKey, type ProjectRef, type ResourceType, type Storage
} from '../lib/storage.js'

// The storage contract (lib/storage.ts): one file, run against every adapter
// (test/storage-sqlite.test.ts, test/storage-pg.test.ts). Each case works in
// a project of its own, so adapters whose `open()` returns the same database
// every time (a file, a server) need no cleaning between cases.

export interface ContractOptions {
  /**
   * Two `open()` calls see the same database (a file or a server), as two
   * instances of the host would: the cross-instance cases run too.
   */
  shared?: boolean
}

const KEY_FIELDS = ['createdAt', 'id', 'isActive', 'organization', 'prefix', 'project', 'purpose', 'updatedAt']
const ENDPOINT_FIELDS = ['calls', 'createdAt', 'id', 'keys', 'modelSequence', 'organization', 'project',
  'resourceSequence', 'type']
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/
// Stores may take the time from the database server: allow for rounding and clock steps.
const CLOCK_SLACK_MS = 2000

function newProject (): ProjectRef {
  return { organization: `org-${randomUUID().slice(0, 8)}`, project: 'shop' }
}

function newKey (project: ProjectRef, purpose = 'test', isActive = true): NewApiKey {
  return { ...project, prefix: randomAlphanumeric(10), hash: `hash-${randomAlphanumeric(20)}`, purpose, isActive }
}

function at (project: ProjectRef, type: ResourceType = 'dataset', resourceSequence = 1, modelSequence = 1): EndpointLocator {
  return { ...project, modelSequence, type, resourceSequence }
}

function byId<T extends { id: string }> (list: T[]): T[] {
  return [...list].sort((a, b) => (a.id < b.id ? -1 : 1))
}

export async function storageContract (t: Test, name: string, open: () => Promise<Storage>, options: ContractOptions = {}): Promise<void> {
  await t.test(`storage contract: ${name}`, async (t) => {
    async function store (t: Test): Promise<Storage> {
      const storage = await open()
      t.teardown(() => storage.close())
      return storage
    }

    /** Two handles on the same database when the adapter has one, else the same handle twice. */
    async function twoStores (t: Test): Promise<[Storage, Storage]> {
      const a = await store(t)
      return [a, options.shared === true ? await store(t) : a]
    }

    /** A key with its hash, and the record createKey answered. */
    async function keyIn (s: Storage, project: ProjectRef, purpose = 'test', isActive = true): Promise<ApiKeyRecord & { hash: string }> {
      const input = newKey(project, purpose, isActive)
      return { ...await s.createKey(input), hash: input.hash }
    }

    t.test('createKey returns the documented record; getKey and listKeys find it in its project only', async (t) => {
      const s = await store(t)
      const p = newProject()
      const other = newProject()
      const input = newKey(p, 'reporting', true)
      const before = Date.now()
      const k = await s.createKey(input)
      const after = Date.now()

      t.same(Object.keys(k).sort(), KEY_FIELDS, 'exactly the documented fields: the hash never leaves storage')
      t.match(k.id, UUID, 'the store chooses a UUID')
      t.equal(k.organization, p.organization)
      t.equal(k.project, p.project)
      t.equal(k.prefix, input.prefix)
      t.equal(k.purpose, 'reporting')
      t.equal(k.isActive, true)
      t.ok(k.createdAt instanceof Date)
      t.ok(k.createdAt.getTime() >= before - CLOCK_SLACK_MS && k.createdAt.getTime() <= after + CLOCK_SLACK_MS,
        'createdAt is the time of creation')
      t.equal(k.updatedAt, null, 'never used yet')

      t.same(await s.getKey(p, k.id), k)
      t.equal(await s.getKey(other, k.id), null, 'another project does not see it')
      t.equal(await s.getKey({ organization: p.organization, project: 'other' }, k.id), null, 'the project name counts')
      t.equal(await s.getKey(p, randomUUID()), null, 'unknown id')
      t.equal(await s.getKey(p, 'not-a-uuid'), null, 'a malformed id is simply not found')

      const inactive = await s.createKey(newKey(p, 'spare', false))
      t.equal(inactive.isActive, false)
      await s.createKey(newKey(other, 'theirs'))
      const list = await s.listKeys(p)
      t.same(byId(list), byId([k, inactive]), 'listKeys: this project\'s keys, nothing else')
      for (const record of list) t.same(Object.keys(record).sort(), KEY_FIELDS)
      t.ok(list[0].createdAt <= list[1].createdAt, 'oldest first')
      t.same(await s.listKeys(newProject()), [], 'a project without keys')
    })

    t.test('prefixes are unique across all projects: createKey throws PrefixTakenError and writes nothing', async (t) => {
      const s = await store(t)
      const p = newProject()
      const other = newProject()
      const first = newKey(p)
      await s.createKey(first)
      for (const project of [p, other]) {
        const err = await s.createKey({ ...newKey(project), prefix: first.prefix }).catch((e: unknown) => e)
        t.ok(err instanceof PrefixTakenError, 'PrefixTakenError')
        t.equal((err as PrefixTakenError).code, 'FDE_PREFIX_TAKEN')
      }
      t.equal((await s.listKeys(p)).length, 1)
      t.equal((await s.listKeys(other)).length, 0)
    })

    t.test('updateKey changes what the patch names, in its own project only', async (t) => {
      const s = await store(t)
      const p = newProject()
      const k = await keyIn(s, p, 'old purpose')

      const renamed = await s.updateKey(p, k.id, { purpose: 'new purpose' })
      t.equal(renamed?.purpose, 'new purpose')
      t.equal(renamed?.isActive, true, 'isActive untouched')
      const disabled = await s.updateKey(p, k.id, { isActive: false })
      t.equal(disabled?.isActive, false)
      t.equal(disabled?.purpose, 'new purpose', 'purpose untouched')
      const both = await s.updateKey(p, k.id, { purpose: 'both', isActive: true })
      t.match(both, { purpose: 'both', isActive: true, prefix: k.prefix, createdAt: k.createdAt })
      t.same(Object.keys(both ?? {}).sort(), KEY_FIELDS)
      t.same(await s.updateKey(p, k.id, {}), both, 'an empty patch changes nothing and returns the key')
      t.same(await s.getKey(p, k.id), both, 'the change is stored')

      t.equal(await s.updateKey(newProject(), k.id, { isActive: false }), null, 'another project: not found')
      t.equal(await s.updateKey(p, randomUUID(), { isActive: false }), null, 'unknown id')
      t.equal(await s.updateKey(p, 'not-a-uuid', { purpose: 'x' }), null, 'malformed id')
      t.same(await s.getKey(p, k.id), both, 'nothing changed by the refused updates')
    })

    t.test('replaceKeySecret swaps prefix and hash, keeps assignments, refuses a taken prefix', async (t) => {
      const s = await store(t)
      const p = newProject()
      const k = await keyIn(s, p)
      const taken = await keyIn(s, newProject())
      const l = at(p)
      await s.putEndpoint(l, [k.id])

      const err = await s.replaceKeySecret(p, k.id, { prefix: taken.prefix, hash: 'h2' }).catch((e: unknown) => e)
      t.ok(err instanceof PrefixTakenError, 'a prefix in use elsewhere: PrefixTakenError')
      t.same((await s.findEndpointKey(l, k.prefix))?.key, { id: k.id, hash: k.hash, isActive: true }, 'the old secret stays')

      const prefix = randomAlphanumeric(10)
      const replaced = await s.replaceKeySecret(p, k.id, { prefix, hash: 'new-hash' })
      t.match(replaced, { id: k.id, prefix, purpose: k.purpose, isActive: true, createdAt: k.createdAt })
      t.same(Object.keys(replaced ?? {}).sort(), KEY_FIELDS)
      t.same((await s.findEndpointKey(l, prefix))?.key, { id: k.id, hash: 'new-hash', isActive: true },
        'the new prefix finds the key, still assigned, with the new hash')
      t.equal((await s.findEndpointKey(l, k.prefix))?.key, null, 'the old prefix finds nothing')
      t.same((await s.getEndpoint(l))?.keys.map((x) => x.prefix), [prefix], 'the endpoint shows the new prefix')

      t.equal(await s.replaceKeySecret(newProject(), k.id, { prefix: randomAlphanumeric(10), hash: 'x' }), null,
        'another project: not found')
      t.equal(await s.replaceKeySecret(p, randomUUID(), { prefix: randomAlphanumeric(10), hash: 'x' }), null, 'unknown id')
      t.equal((await s.getKey(p, k.id))?.prefix, prefix, 'unchanged by the refused calls')
    })

    t.test('findEndpointKey: null without endpoint; the key only when assigned to it', async (t) => {
      const s = await store(t)
      const p = newProject()
      const assigned = await keyIn(s, p)
      const inactive = await keyIn(s, p, 'off', false)
      const unassigned = await keyIn(s, p)
      const elsewhere = await keyIn(s, p)
      const foreign = await keyIn(s, newProject())
      const l = at(p, 'pipeline', 3, 2)

      t.equal(await s.findEndpointKey(l, assigned.prefix), null, 'no endpoint yet')
      t.equal(await s.findEndpointKey(l, null), null, 'no endpoint yet, no prefix')

      const put = await s.putEndpoint(l, [assigned.id, inactive.id])
      await s.putEndpoint(at(p, 'pipeline', 4, 2), [elsewhere.id])
      t.ok(put.ok)
      const endpointId = put.ok ? put.endpoint.id : ''
      t.same(await s.findEndpointKey(l, null), { endpointId, key: null }, 'no prefix: the endpoint alone')
      t.same(await s.findEndpointKey(l, assigned.prefix), { endpointId, key: { id: assigned.id, hash: assigned.hash, isActive: true } })
      t.same(await s.findEndpointKey(l, inactive.prefix), { endpointId, key: { id: inactive.id, hash: inactive.hash, isActive: false } },
        'an inactive key is found, flagged')
      t.same(await s.findEndpointKey(l, unassigned.prefix), { endpointId, key: null }, 'a key of the project not assigned here')
      t.same(await s.findEndpointKey(l, elsewhere.prefix), { endpointId, key: null }, 'a key assigned to another endpoint')
      t.same(await s.findEndpointKey(l, foreign.prefix), { endpointId, key: null }, 'a key of another project')
      t.same(await s.findEndpointKey(l, randomAlphanumeric(10)), { endpointId, key: null }, 'an unknown prefix')

      t.equal(await s.findEndpointKey(at(p, 'dataset', 3, 2), assigned.prefix), null, 'same numbers, other type')
      t.equal(await s.findEndpointKey(at(p, 'pipeline', 3, 1), assigned.prefix), null, 'other model')
      t.equal(await s.findEndpointKey({ ...l, organization: 'other' }, assigned.prefix), null, 'other organization')
      t.equal(await s.findEndpointKey({ ...l, project: 'other' }, assigned.prefix), null, 'other project')
    })

    t.test('putEndpoint creates, then replaces the keys; the endpoint keeps its id, calls and creation time', async (t) => {
      const s = await store(t)
      const p = newProject()
      const a = await keyIn(s, p, 'a')
      const b = await keyIn(s, p, 'b', false)
      const l = at(p, 'dataset', 7, 5)
      const before = Date.now()

      const created = await s.putEndpoint(l, [a.id, a.id])
      if (!created.ok) throw new Error('putEndpoint refused')
      t.equal(created.created, true)
      const e = created.endpoint
      t.same(Object.keys(e).sort(), ENDPOINT_FIELDS)
      t.match(e.id, UUID)
      t.match(e, { organization: p.organization, project: p.project, modelSequence: 5, type: 'dataset', resourceSequence: 7, calls: 0 })
      t.ok(e.createdAt instanceof Date && Math.abs(e.createdAt.getTime() - before) < CLOCK_SLACK_MS + 1000)
      t.same(e.keys, [{ id: a.id, prefix: a.prefix, purpose: 'a', isActive: true }], 'a repeated id is assigned once')
      t.same(await s.getEndpoint(l), e)

      await s.applyUsage({ calls: new Map([[e.id, 3]]), lastUsed: new Map() })
      const replaced = await s.putEndpoint(l, [b.id, a.id])
      if (!replaced.ok) throw new Error('putEndpoint refused')
      t.equal(replaced.created, false)
      t.same({ ...replaced.endpoint, keys: byId(replaced.endpoint.keys) }, {
        ...e,
        calls: 3,
        keys: byId([{ id: a.id, prefix: a.prefix, purpose: 'a', isActive: true }, { id: b.id, prefix: b.prefix, purpose: 'b', isActive: false }])
      }, 'same id, calls and createdAt; both keys')
      const narrowed = await s.putEndpoint(l, [b.id])
      t.same(narrowed.ok && narrowed.endpoint.keys.map((k) => k.id), [b.id], 'a key left out is unassigned')
      t.same((await s.findEndpointKey(l, a.prefix))?.key, null)
      t.not((await s.getKey(p, a.id)), null, 'the unassigned key itself stays')

      const big = at(p, 'pipeline', Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)
      const huge = await s.putEndpoint(big, [a.id])
      t.match(huge.ok && huge.endpoint, { modelSequence: Number.MAX_SAFE_INTEGER, resourceSequence: Number.MAX_SAFE_INTEGER },
        'sequences up to 2^53 - 1 come back as the same numbers')
      t.not(await s.findEndpointKey(big, a.prefix), null)
    })

    t.test('putEndpoint is all or nothing: an unknown or foreign key id writes nothing', async (t) => {
      const s = await store(t)
      const p = newProject()
      const a = await keyIn(s, p)
      const b = await keyIn(s, p)
      const foreign = await keyIn(s, newProject())
      const l = at(p)
      await s.putEndpoint(l, [a.id])
      const missing = randomUUID()

      t.same(await s.putEndpoint(l, [b.id, missing, foreign.id, 'not-a-uuid']),
        { ok: false, unknownKeyIds: [missing, foreign.id, 'not-a-uuid'] }, 'names every id that is not a key of the project')
      t.same((await s.getEndpoint(l))?.keys.map((k) => k.id), [a.id], 'the assignment is unchanged')

      const fresh = at(p, 'pipeline', 9)
      t.same(await s.putEndpoint(fresh, [a.id, foreign.id]), { ok: false, unknownKeyIds: [foreign.id] })
      t.equal(await s.getEndpoint(fresh), null, 'no endpoint was created')
      t.equal(await s.findEndpointKey(fresh, a.prefix), null)
    })

    t.test('concurrent putEndpoint of one new resource: one creates it, the others replace its keys', async (t) => {
      const [a, b] = await twoStores(t)
      const p = newProject()
      const k = await keyIn(a, p)
      const l = at(p, 'pipeline', 4)
      const results = await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2 === 0 ? a : b).putEndpoint(l, [k.id])))
      t.same(results.map((r) => r.ok), Array(8).fill(true), 'all succeed')
      t.equal(results.filter((r) => r.ok && r.created).length, 1, 'exactly one created it')
      t.equal(new Set(results.map((r) => r.ok && r.endpoint.id)).size, 1, 'all name the same endpoint')
      t.equal((await b.listEndpoints(p)).length, 1)
    })

    t.test('listEndpoints and getEndpoint: the project\'s endpoints with their keys, in a stable order', async (t) => {
      const s = await store(t)
      const p = newProject()
      const other = newProject()
      const k = await keyIn(s, p)
      const theirs = await keyIn(s, other)
      for (const l of [at(p, 'dataset', 1, 2), at(p, 'pipeline', 1), at(p, 'dataset', 2), at(p, 'dataset', 1)]) {
        await s.putEndpoint(l, [k.id])
      }
      await s.putEndpoint(at(other), [theirs.id])

      const list = await s.listEndpoints(p)
      t.same(list.map((e) => [e.modelSequence, e.type, e.resourceSequence]),
        [[1, 'dataset', 1], [1, 'dataset', 2], [1, 'pipeline', 1], [2, 'dataset', 1]], 'ordered by model, type, resource')
      for (const e of list) {
        t.same(e.keys, [{ id: k.id, prefix: k.prefix, purpose: k.purpose, isActive: true }])
        t.same(await s.getEndpoint(e), e)
      }
      t.same((await s.listEndpoints(other)).map((e) => e.keys[0].id), [theirs.id], 'another project lists its own')
      t.same(await s.listEndpoints(newProject()), [])
      t.equal(await s.getEndpoint(at(p, 'pipeline', 2)), null)
      t.equal(await s.getEndpoint(at(newProject())), null)
    })

    t.test('deleteKey revokes the key and keeps its endpoints, minus that key', async (t) => {
      const s = await store(t)
      const p = newProject()
      const a = await keyIn(s, p)
      const b = await keyIn(s, p)
      const l = at(p)
      const put = await s.putEndpoint(l, [a.id, b.id])
      const endpointId = put.ok ? put.endpoint.id : ''

      t.equal(await s.deleteKey(newProject(), a.id), false, 'another project cannot delete it')
      t.equal(await s.deleteKey(p, 'not-a-uuid'), false)
      t.not(await s.getKey(p, a.id), null)

      t.equal(await s.deleteKey(p, a.id), true)
      t.equal(await s.getKey(p, a.id), null)
      t.same((await s.listKeys(p)).map((k) => k.id), [b.id])
      t.same(await s.findEndpointKey(l, a.prefix), { endpointId, key: null }, 'its prefix no longer finds it')
      t.same((await s.getEndpoint(l))?.keys.map((k) => k.id), [b.id], 'the endpoint stays, minus the key')
      t.equal(await s.deleteKey(p, a.id), false, 'a second delete finds nothing')

      t.equal(await s.deleteKey(p, b.id), true)
      const left = await s.getEndpoint(l)
      t.match(left, { id: endpointId, keys: [] }, 'an endpoint without keys still exists')
      t.same(await s.findEndpointKey(l, b.prefix), { endpointId, key: null })

      // The prefix of a deleted key is free again.
      const again = await s.createKey({ ...newKey(p), prefix: a.prefix })
      t.equal(again.prefix, a.prefix)
    })

    t.test('deleteEndpoint removes the endpoint and its assignments; keys stay', async (t) => {
      const s = await store(t)
      const p = newProject()
      const k = await keyIn(s, p)
      const l = at(p, 'pipeline', 2)
      const other = at(p, 'dataset', 2)
      const first = await s.putEndpoint(l, [k.id])
      await s.putEndpoint(other, [k.id])
      await s.applyUsage({ calls: new Map([[first.ok ? first.endpoint.id : '', 5]]), lastUsed: new Map() })
      const keyBefore = await s.getKey(p, k.id)

      t.equal(await s.deleteEndpoint({ ...l, project: 'other' }), false, 'another project\'s locator')
      t.equal(await s.deleteEndpoint(l), true)
      t.equal(await s.getEndpoint(l), null)
      t.equal(await s.findEndpointKey(l, k.prefix), null)
      t.equal(await s.deleteEndpoint(l), false, 'a second delete finds nothing')
      t.same(await s.getKey(p, k.id), keyBefore, 'the key stays, unchanged')
      t.not((await s.findEndpointKey(other, k.prefix))?.key, null, 'and still opens its other endpoint')

      const recreated = await s.putEndpoint(l, [k.id])
      t.match(recreated, { ok: true, created: true, endpoint: { calls: 0 } }, 'created anew, its count from zero')
      t.not(recreated.ok && recreated.endpoint.id, first.ok && first.endpoint.id)
    })

    // PostgreSQL text cannot hold NUL: such a value comes from a URL or body,
    // never from storage, and must be answered as unknown, not as an error.
    t.test('an id, moniker or prefix with a NUL character is simply not found', async (t) => {
      const s = await store(t)
      const p = newProject()
      const k = await keyIn(s, p)
      const l = at(p)
      const put = await s.putEndpoint(l, [k.id])
      const endpointId = put.ok ? put.endpoint.id : ''
      const nul = 'a\u0000b'
      const nulKeyId = `${k.id}\u0000`

      for (const id of [nul, nulKeyId]) {
        t.equal(await s.getKey(p, id), null, 'getKey')
        t.equal(await s.updateKey(p, id, { purpose: 'x', isActive: false }), null, 'updateKey')
        t.equal(await s.replaceKeySecret(p, id, { prefix: randomAlphanumeric(10), hash: 'x' }), null, 'replaceKeySecret')
        t.equal(await s.deleteKey(p, id), false, 'deleteKey')
      }
      t.same(await s.putEndpoint(l, [k.id, nul, nulKeyId]), { ok: false, unknownKeyIds: [nul, nulKeyId] },
        'putEndpoint names them as not keys of the project')
      t.same(await s.putEndpoint(at(p, 'pipeline', 2), [nul]), { ok: false, unknownKeyIds: [nul] })

      for (const where of [{ organization: nul }, { project: nul }, { organization: `${p.organization}\u0000` }]) {
        const project = { ...p, ...where }
        t.same(await s.listKeys(project), [], `listKeys ${JSON.stringify(where)}`)
        t.equal(await s.getKey(project, k.id), null, 'getKey in that project')
        t.equal(await s.deleteKey(project, k.id), false, 'deleteKey in that project')
        t.same(await s.listEndpoints(project), [], 'listEndpoints')
        t.equal(await s.getEndpoint({ ...l, ...where }), null, 'getEndpoint')
        t.equal(await s.deleteEndpoint({ ...l, ...where }), false, 'deleteEndpoint')
        t.equal(await s.findEndpointKey({ ...l, ...where }, k.prefix), null, 'findEndpointKey: no endpoint')
        t.equal(await s.findEndpointKey({ ...l, ...where }, null), null, 'findEndpointKey without prefix: no endpoint')
      }
      t.same(await s.findEndpointKey(l, `${k.prefix.slice(0, 9)}\u0000`), { endpointId, key: null },
        'a prefix with NUL: the endpoint, no key (as an unknown prefix)')

      t.same((await s.getEndpoint(l))?.keys.map((x) => x.id), [k.id], 'nothing changed')
      t.match(await s.getKey(p, k.id), { purpose: k.purpose, isActive: true, prefix: k.prefix })
    })

    t.test('applyUsage adds exactly, ignores unknown ids and keeps the latest updatedAt', async (t) => {
      const s = await store(t)
      const p = newProject()
      const k = await keyIn(s, p)
      const idle = await keyIn(s, p)
      const e1 = await s.putEndpoint(at(p, 'dataset', 1), [k.id])
      const e2 = await s.putEndpoint(at(p, 'dataset', 2), [k.id])
      if (!e1.ok || !e2.ok) throw new Error('putEndpoint refused')
      const id1 = e1.endpoint.id
      const id2 = e2.endpoint.id

      await s.applyUsage({ calls: new Map(), lastUsed: new Map() })
      const t1 = new Date(Date.UTC(2030, 0, 2, 3, 4, 5, 678))
      await s.applyUsage({ calls: new Map([[id1, 3], [id2, 1]]), lastUsed: new Map([[k.id, t1]]) })
      await s.applyUsage({
        calls: new Map([[id1, 4], [randomUUID(), 9], ['not-a-uuid', 1]]),
        lastUsed: new Map([[randomUUID(), t1]])
      })
      t.equal((await s.getEndpoint(at(p, 'dataset', 1)))?.calls, 7, '3 + 4, unknown ids ignored')
      t.equal((await s.getEndpoint(at(p, 'dataset', 2)))?.calls, 1)
      t.same((await s.getKey(p, k.id))?.updatedAt, t1, 'updatedAt is the time given, to the millisecond')
      t.equal((await s.getKey(p, idle.id))?.updatedAt, null, 'a key not in the batch is untouched')

      await s.applyUsage({ calls: new Map(), lastUsed: new Map([[k.id, new Date(t1.getTime() - 60_000)]]) })
      t.same((await s.getKey(p, k.id))?.updatedAt, t1, 'an older time does not move it back')
      const t2 = new Date(t1.getTime() + 1)
      await s.applyUsage({ calls: new Map(), lastUsed: new Map([[k.id, t2]]) })
      t.same((await s.getKey(p, k.id))?.updatedAt, t2, 'a newer time moves it forward')

      await s.deleteKey(p, k.id)
      await s.deleteEndpoint(at(p, 'dataset', 2))
      await s.applyUsage({ calls: new Map([[id2, 1], [id1, 1]]), lastUsed: new Map([[k.id, t2]]) })
      t.equal((await s.getEndpoint(at(p, 'dataset', 1)))?.calls, 8, 'a deleted id in the batch does not stop the rest')
    })

    t.test('concurrent applyUsage batches, from every handle, all count', async (t) => {
      const [a, b] = await twoStores(t)
      const p = newProject()
      const k = await keyIn(a, p)
      const e1 = await a.putEndpoint(at(p, 'dataset', 1), [k.id])
      const e2 = await a.putEndpoint(at(p, 'dataset', 2), [k.id])
      if (!e1.ok || !e2.ok) throw new Error('putEndpoint refused')
      // Both orders of the same ids, as two instances' batches would be.
      const batches = Array.from({ length: 40 }, (_, i) => ({
        calls: new Map(i % 2 === 0 ? [[e1.endpoint.id, i], [e2.endpoint.id, 1]] : [[e2.endpoint.id, 1], [e1.endpoint.id, i]]),
        lastUsed: new Map([[k.id, new Date(Date.UTC(2030, 0, 1, 0, 0, i))]])
      }))
      await Promise.all(batches.map((batch, i) => (i % 2 === 0 ? a : b).applyUsage(batch)))
      t.equal((await b.getEndpoint(at(p, 'dataset', 1)))?.calls, (39 * 40) / 2)
      t.equal((await a.getEndpoint(at(p, 'dataset', 2)))?.calls, 40)
      t.same((await b.getKey(p, k.id))?.updatedAt, new Date(Date.UTC(2030, 0, 1, 0, 0, 39)), 'the latest time wins')
    })

    t.test('idempotency: claim, complete, replay, release', async (t) => {
      const s = await store(t)
      const endpoint = randomUUID()
      const ttl = 60_000
      const [one, two, three, four] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()]

      t.same(await s.claimIdempotencyKey(endpoint, 'k1', ttl, one), { claimed: true }, 'the first claim owns the key')
      t.same(await s.claimIdempotencyKey(endpoint, 'k1', ttl, two), { claimed: false, response: null }, 'a second one waits: no body yet')
      t.same(await s.claimIdempotencyKey(randomUUID(), 'k1', ttl, three), { claimed: true }, 'the same key on another endpoint is another record')
      t.same(await s.claimIdempotencyKey(endpoint, 'K1', ttl, four), { claimed: true }, 'keys are case-sensitive')

      await s.completeIdempotencyKey(endpoint, 'k1', '{"job_id":"1"}')
      t.same(await s.claimIdempotencyKey(endpoint, 'k1', ttl, two), { claimed: false, response: '{"job_id":"1"}' }, 'the stored body')
      t.equal(await s.releaseIdempotencyKey(endpoint, 'k1', one), false, 'release does not remove a completed record')
      t.same(await s.claimIdempotencyKey(endpoint, 'k1', ttl, two), { claimed: false, response: '{"job_id":"1"}' }, 'it is still there')

      const five = randomUUID()
      t.same(await s.claimIdempotencyKey(endpoint, 'k2', ttl, five), { claimed: true })
      t.equal(await s.releaseIdempotencyKey(endpoint, 'k2', five), true, 'the claim\'s token releases it')
      t.same(await s.claimIdempotencyKey(endpoint, 'k2', ttl, randomUUID()), { claimed: true }, 'a released key can be claimed again')
      t.equal(await s.releaseIdempotencyKey(endpoint, 'never-claimed', randomUUID()), false, 'releasing nothing is fine')
    })

    // The plugin releases with its token after a claim call failed, not knowing
    // whether the claim was written: the token alone decides what goes.
    t.test('idempotency: release frees only the claim its token made', async (t) => {
      const [a, b] = await twoStores(t)
      const endpoint = randomUUID()
      const ttl = 60_000
      const [mine, theirs] = [randomUUID(), randomUUID()]

      t.same(await a.claimIdempotencyKey(endpoint, 'k', ttl, mine), { claimed: true })
      t.equal(await b.releaseIdempotencyKey(endpoint, 'k', theirs), false, 'another token releases nothing')
      t.same(await b.claimIdempotencyKey(endpoint, 'k', ttl, theirs), { claimed: false, response: null }, 'a claim that lost owns nothing')
      t.equal(await b.releaseIdempotencyKey(endpoint, 'k', theirs), false, 'so its token still releases nothing')
      t.equal(await b.releaseIdempotencyKey(endpoint, 'other', mine), false, 'a token is good for its own key only')
      t.equal(await b.releaseIdempotencyKey(randomUUID(), 'k', mine), false, 'and its own endpoint only')
      t.same(await b.claimIdempotencyKey(endpoint, 'k', ttl, theirs), { claimed: false, response: null }, 'the claim is still held')

      t.equal(await b.releaseIdempotencyKey(endpoint, 'k', mine), true, 'its own token releases it, through any handle')
      t.equal(await a.releaseIdempotencyKey(endpoint, 'k', mine), false, 'once')
      t.same(await b.claimIdempotencyKey(endpoint, 'k', ttl, theirs), { claimed: true }, 'the key is free again')
      t.equal(await a.releaseIdempotencyKey(endpoint, 'k', mine), false, 'the old token does not release the new claim')
      await b.completeIdempotencyKey(endpoint, 'k', 'body')
      t.equal(await a.releaseIdempotencyKey(endpoint, 'k', theirs), false, 'nor its own token, once completed')
      t.same(await a.claimIdempotencyKey(endpoint, 'k', ttl, mine), { claimed: false, response: 'body' })
    })

    t.test('idempotency: a record older than the ttl counts as absent', async (t) => {
      const s = await store(t)
      const endpoint = randomUUID()
      const [first, second, third] = [randomUUID(), randomUUID(), randomUUID()]
      t.same(await s.claimIdempotencyKey(endpoint, 'running', 60_000, first), { claimed: true })
      t.same(await s.claimIdempotencyKey(endpoint, 'done', 60_000, randomUUID()), { claimed: true })
      await s.completeIdempotencyKey(endpoint, 'done', 'old body')
      await sleep(50)

      t.same(await s.claimIdempotencyKey(endpoint, 'running', 60_000, second), { claimed: false, response: null }, 'young enough for a long ttl')
      t.same(await s.claimIdempotencyKey(endpoint, 'running', 10, second), { claimed: true }, 'expired for a 10 ms ttl: claimed anew')
      t.same(await s.claimIdempotencyKey(endpoint, 'running', 60_000, third), { claimed: false, response: null }, 'the new claim is live')
      t.equal(await s.releaseIdempotencyKey(endpoint, 'running', first), false, 'the expired claim\'s token does not release the new one')
      t.same(await s.claimIdempotencyKey(endpoint, 'done', 10, randomUUID()), { claimed: true }, 'an expired completed record is replaced')
      t.same(await s.claimIdempotencyKey(endpoint, 'done', 60_000, third), { claimed: false, response: null }, 'its old body is gone')
    })

    t.test('idempotency: of concurrent claims of one key, exactly one wins', async (t) => {
      const [a, b] = await twoStores(t)
      for (let round = 0; round < 5; round++) {
        const endpoint = randomUUID()
        const tokens = Array.from({ length: 16 }, () => randomUUID())
        const claims = await Promise.all(tokens.map(async (token, i) =>
          (i % 2 === 0 ? a : b).claimIdempotencyKey(endpoint, `key-${round}`, 60_000, token)))
        t.equal(claims.filter((c) => c.claimed).length, 1, `round ${round}: one winner`)
        t.same(claims.filter((c) => !c.claimed), Array(15).fill({ claimed: false, response: null }), 'the others wait')
        const released = await Promise.all(tokens.map(async (token) => a.releaseIdempotencyKey(endpoint, `key-${round}`, token)))
        t.same(released, claims.map((c) => c.claimed), 'only the winner\'s token releases')
      }
      // An expired record: again one winner among the handles. (The ttl must
      // outlast the spread of the claims, or a late one rightly wins anew.)
      const endpoint = randomUUID()
      await a.claimIdempotencyKey(endpoint, 'old', 60_000, randomUUID())
      await sleep(600)
      const claims = await Promise.all(Array.from({ length: 16 }, async (_, i) =>
        (i % 2 === 0 ? a : b).claimIdempotencyKey(endpoint, 'old', 300, randomUUID())))
      t.equal(claims.filter((c) => c.claimed).length, 1, 'one winner takes over an expired record')
    })

    if (options.shared === true) {
      t.test('a write through one handle is seen by the next read through another', async (t) => {
        const [a, b] = await twoStores(t)
        const p = newProject()
        const k = await keyIn(a, p)
        const l = at(p)
        await a.putEndpoint(l, [k.id])
        t.equal((await b.findEndpointKey(l, k.prefix))?.key?.isActive, true)
        await a.updateKey(p, k.id, { isActive: false })
        t.equal((await b.findEndpointKey(l, k.prefix))?.key?.isActive, false, 'disable')
        const prefix = randomAlphanumeric(10)
        await a.replaceKeySecret(p, k.id, { prefix, hash: 'h' })
        t.equal((await b.findEndpointKey(l, k.prefix))?.key, null, 'regenerate: old prefix')
        await a.deleteKey(p, k.id)
        t.equal((await b.findEndpointKey(l, prefix))?.key, null, 'delete')
        await a.deleteEndpoint(l)
        t.equal(await b.findEndpointKey(l, null), null, 'endpoint delete')
      })
    }

    t.test('close releases the store: closing twice is fine, later calls reject', async (t) => {
      const s = await open()
      const p = newProject()
      await s.createKey(newKey(p))
      await s.close()
      await s.close()
      await t.rejects(s.listKeys(p), 'listKeys after close')
      await t.rejects(s.findEndpointKey(at(p), null), 'findEndpointKey after close')
      await t.rejects(s.applyUsage({ calls: new Map([['x', 1]]), lastUsed: new Map() }), 'applyUsage after close')
    })
  })
}
