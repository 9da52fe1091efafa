import { randomInt, randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'
import { randomAlphanumeric } from '../lib/keys/api-key.js'
import {
  InvalidCursorError, MAX_ENDPOINT_KEYS, PrefixTakenError,
  type ApiKeyRecord, type EndpointListQuery, type EndpointLocator, type ListPage, type NewApiKey, type ProjectRef, type ResourceType, type Storage,
  type UsageBatch, type UsageCount, type UsageRow, type LinkRecord, type NewLink
} from '../lib/storage/storage.js'
import { countId } from '../lib/storage/usage-buckets.js'
import { usageRowsOf } from '../lib/storage/usage-columns.js'

// The storage contract (lib/storage/storage.ts): one file, run against every adapter
// (test/storage/storage-sqlite.test.ts, test/storage/storage-pg.test.ts). Each case works in
// a project of its own, so adapters whose `open()` returns the same database
// every time (a file, a server) need no cleaning between cases.

export interface ContractOptions {
  /**
   * Two `open()` calls see the same database (a file or a server), as two
   * instances of the host would: the cross-instance cases run too.
   */
  shared?: boolean
  /**
   * A store on an empty database of its own (dropped after `t`), for the
   * cases that count exactly what a prune deletes. Needed when `shared`;
   * otherwise `open()` is used.
   */
  fresh?: (t: Test) => Promise<Storage>
}

const AUDIT = { actor: 'contract' }
const KEY_FIELDS = ['createdAt', 'expiresAt', 'id', 'isActive', 'limits', 'organization', 'prefix', 'project', 'purpose', 'updatedAt']
const ENDPOINT_FIELDS = ['calls', 'createdAt', 'id', 'keys', 'modelSequence', 'organization', 'project',
  'resourceSequence', 'type']
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/
const CURSOR_REFUSED = { code: 'FDE_INVALID_CURSOR', message: 'not a cursor of this list' }
// Stores may take the time from the database server: allow for rounding and clock steps.
const CLOCK_SLACK_MS = 2000

function newProject (): ProjectRef {
  return { organization: `org-${randomUUID().slice(0, 8)}`, project: 'shop' }
}

/** Key characters but the letters of "nightly" and "etl", either case: prefixes no search word of the search test finds. */
const SEARCH_PROOF = 'ABCDFJKMOPQRSUVWXZabcdfjkmopqrsuvwxz0123456789'

function newKey (project: ProjectRef, purpose = 'test', isActive = true): NewApiKey {
  return { ...project, prefix: randomAlphanumeric(10), hash: `hash-${randomAlphanumeric(20)}`, purpose, isActive, expiresAt: null }
}

function at (project: ProjectRef, type: ResourceType = 'dataset', resourceSequence = 1, modelSequence = 1): EndpointLocator {
  return { ...project, modelSequence, type, resourceSequence }
}

/** A batch of usage-history counts alone. */
function countsBatch (counts: UsageCount[]): UsageBatch {
  return { calls: new Map(), lastUsed: new Map(), counts: new Map(counts.map((c) => [countId(c.hour, c.endpointId, c.keyId, c.outcome), { ...c }])) }
}

/** An hour of January 2030, UTC. */
function hourOf (day: number, hour: number): number {
  return Date.UTC(2030, 0, day, hour)
}

type RowTuple = [start: number, endpointId: string, keyId: string | null, outcome: string, count: number]

function tuples (rows: UsageRow[]): RowTuple[] {
  return rows.map((r) => [r.start.getTime(), r.endpointId, r.keyId, r.outcome, r.count])
}

/** The documented order: start, endpoint id, key id (none first), outcome. */
function inUsageOrder (rows: RowTuple[]): RowTuple[] {
  const cmp = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0)
  return [...rows].sort((a, b) => a[0] - b[0] || cmp(a[1], b[1]) || cmp(a[2] ?? '', b[2] ?? '') || cmp(a[3], b[3]))
}

function byId<T extends { id: string }> (list: T[]): T[] {
  return [...list].sort((a, b) => (a.id < b.id ? -1 : 1))
}

/**
 * An adapter with `queryUsageColumns`: every `queryUsage` of the contract
 * also asks for the columns, which must hold the same rows.
 */
function columnsChecked (t: Test, storage: Storage): Storage {
  const columns = storage.queryUsageColumns?.bind(storage)
  if (columns === undefined) return storage
  const rows = storage.queryUsage.bind(storage)
  storage.queryUsage = async (project, query) => {
    const answer = await rows(project, query)
    t.same(usageRowsOf(await columns(project, query)), answer, 'queryUsageColumns holds the rows queryUsage answers')
    return answer
  }
  return storage
}

export async function storageContract (t: Test, name: string, open: () => Promise<Storage>, options: ContractOptions = {}): Promise<void> {
  await t.test(`storage contract: ${name}`, async (t) => {
    async function store (t: Test): Promise<Storage> {
      const storage = columnsChecked(t, await open())
      t.teardown(() => storage.close())
      return storage
    }

    /** A store that holds nothing but what the case writes, so that a prune's count is exact. */
    async function emptyStore (t: Test): Promise<Storage> {
      if (options.fresh === undefined && options.shared === true) throw new Error('storageContract: a shared adapter needs options.fresh')
      const storage = columnsChecked(t, options.fresh === undefined ? await open() : await options.fresh(t))
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
      return { ...await s.createKey(input, AUDIT), hash: input.hash }
    }

    t.test('createKey returns the documented record; getKey and listKeys find it in its project only', async (t) => {
      const s = await store(t)
      const p = newProject()
      const other = newProject()
      const input = newKey(p, 'reporting', true)
      const before = Date.now()
      const k = await s.createKey(input, AUDIT)
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

      const inactive = await s.createKey(newKey(p, 'spare', false), AUDIT)
      t.equal(inactive.isActive, false)
      await s.createKey(newKey(other, 'theirs'), AUDIT)
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
      await s.createKey(first, AUDIT)
      for (const project of [p, other]) {
        const err = await s.createKey({ ...newKey(project), prefix: first.prefix }, AUDIT).catch((e: unknown) => e)
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

      const renamed = await s.updateKey(p, k.id, { purpose: 'new purpose' }, AUDIT)
      t.equal(renamed?.purpose, 'new purpose')
      t.equal(renamed?.isActive, true, 'isActive untouched')
      const disabled = await s.updateKey(p, k.id, { isActive: false }, AUDIT)
      t.equal(disabled?.isActive, false)
      t.equal(disabled?.purpose, 'new purpose', 'purpose untouched')
      const both = await s.updateKey(p, k.id, { purpose: 'both', isActive: true }, AUDIT)
      t.match(both, { purpose: 'both', isActive: true, prefix: k.prefix, createdAt: k.createdAt })
      t.same(Object.keys(both ?? {}).sort(), KEY_FIELDS)
      t.same(await s.updateKey(p, k.id, {}, AUDIT), both, 'an empty patch changes nothing and returns the key')
      t.same(await s.getKey(p, k.id), both, 'the change is stored')

      t.equal(await s.updateKey(newProject(), k.id, { isActive: false }, AUDIT), null, 'another project: not found')
      t.equal(await s.updateKey(p, randomUUID(), { isActive: false }, AUDIT), null, 'unknown id')
      t.equal(await s.updateKey(p, 'not-a-uuid', { purpose: 'x' }, AUDIT), null, 'malformed id')
      t.same(await s.getKey(p, k.id), both, 'nothing changed by the refused updates')
    })

    t.test('replaceKeySecret swaps prefix and hash, keeps assignments, refuses a taken prefix', async (t) => {
      const s = await store(t)
      const p = newProject()
      const k = await keyIn(s, p)
      const taken = await keyIn(s, newProject())
      const l = at(p)
      await s.putEndpoint(l, [k.id], AUDIT)

      const err = await s.replaceKeySecret(p, k.id, { prefix: taken.prefix, hash: 'h2' }, AUDIT).catch((e: unknown) => e)
      t.ok(err instanceof PrefixTakenError, 'a prefix in use elsewhere: PrefixTakenError')
      t.same((await s.findEndpointKey(l, k.prefix))?.key, { id: k.id, hash: k.hash, isActive: true, expiresAt: null, limits: null, bytesToday: 0 }, 'the old secret stays')

      const prefix = randomAlphanumeric(10)
      const replaced = await s.replaceKeySecret(p, k.id, { prefix, hash: 'new-hash' }, AUDIT)
      t.match(replaced, { id: k.id, prefix, purpose: k.purpose, isActive: true, createdAt: k.createdAt })
      t.same(Object.keys(replaced ?? {}).sort(), KEY_FIELDS)
      t.same((await s.findEndpointKey(l, prefix))?.key, { id: k.id, hash: 'new-hash', isActive: true, expiresAt: null, limits: null, bytesToday: 0 },
        'the new prefix finds the key, still assigned, with the new hash')
      t.equal((await s.findEndpointKey(l, k.prefix))?.key, null, 'the old prefix finds nothing')
      t.same((await s.getEndpoint(l))?.keys.map((x) => x.prefix), [prefix], 'the endpoint shows the new prefix')

      t.equal(await s.replaceKeySecret(newProject(), k.id, { prefix: randomAlphanumeric(10), hash: 'x' }, AUDIT), null,
        'another project: not found')
      t.equal(await s.replaceKeySecret(p, randomUUID(), { prefix: randomAlphanumeric(10), hash: 'x' }, AUDIT), null, 'unknown id')
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

      const put = await s.putEndpoint(l, [assigned.id, inactive.id], AUDIT)
      await s.putEndpoint(at(p, 'pipeline', 4, 2), [elsewhere.id], AUDIT)
      t.ok(put.ok)
      const endpointId = put.ok ? put.endpoint.id : ''
      t.same(await s.findEndpointKey(l, null), { endpointId, key: null }, 'no prefix: the endpoint alone')
      t.same(await s.findEndpointKey(l, assigned.prefix), { endpointId, key: { id: assigned.id, hash: assigned.hash, isActive: true, expiresAt: null, limits: null, bytesToday: 0 } })
      t.same(await s.findEndpointKey(l, inactive.prefix), { endpointId, key: { id: inactive.id, hash: inactive.hash, isActive: false, expiresAt: null, limits: null, bytesToday: 0 } },
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

      const created = await s.putEndpoint(l, [a.id, a.id], AUDIT)
      if (!created.ok) throw new Error('putEndpoint refused')
      t.equal(created.created, true)
      const e = created.endpoint
      t.same(Object.keys(e).sort(), ENDPOINT_FIELDS)
      t.match(e.id, UUID)
      t.match(e, { organization: p.organization, project: p.project, modelSequence: 5, type: 'dataset', resourceSequence: 7, calls: 0 })
      t.ok(e.createdAt instanceof Date && Math.abs(e.createdAt.getTime() - before) < CLOCK_SLACK_MS + 1000)
      t.same(e.keys, [{ id: a.id, prefix: a.prefix, purpose: 'a', isActive: true }], 'a repeated id is assigned once')
      t.same(await s.getEndpoint(l), e)

      await s.applyUsage({ calls: new Map([[e.id, 3]]), lastUsed: new Map(), counts: new Map() })
      const replaced = await s.putEndpoint(l, [b.id, a.id], AUDIT)
      if (!replaced.ok) throw new Error('putEndpoint refused')
      t.equal(replaced.created, false)
      t.same({ ...replaced.endpoint, keys: byId(replaced.endpoint.keys) }, {
        ...e,
        calls: 3,
        keys: byId([{ id: a.id, prefix: a.prefix, purpose: 'a', isActive: true }, { id: b.id, prefix: b.prefix, purpose: 'b', isActive: false }])
      }, 'same id, calls and createdAt; both keys')
      const narrowed = await s.putEndpoint(l, [b.id], AUDIT)
      t.same(narrowed.ok && narrowed.endpoint.keys.map((k) => k.id), [b.id], 'a key left out is unassigned')
      t.same((await s.findEndpointKey(l, a.prefix))?.key, null)
      t.not((await s.getKey(p, a.id)), null, 'the unassigned key itself stays')

      const big = at(p, 'pipeline', Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)
      const huge = await s.putEndpoint(big, [a.id], AUDIT)
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
      await s.putEndpoint(l, [a.id], AUDIT)
      const missing = randomUUID()

      t.same(await s.putEndpoint(l, [b.id, missing, foreign.id, 'not-a-uuid'], AUDIT),
        { ok: false, unknownKeyIds: [missing, foreign.id, 'not-a-uuid'] }, 'names every id that is not a key of the project')
      t.same((await s.getEndpoint(l))?.keys.map((k) => k.id), [a.id], 'the assignment is unchanged')

      const fresh = at(p, 'pipeline', 9)
      t.same(await s.putEndpoint(fresh, [a.id, foreign.id], AUDIT), { ok: false, unknownKeyIds: [foreign.id] })
      t.equal(await s.getEndpoint(fresh), null, 'no endpoint was created')
      t.equal(await s.findEndpointKey(fresh, a.prefix), null)
    })

    t.test('concurrent putEndpoint of one new resource: one creates it, the others replace its keys', async (t) => {
      const [a, b] = await twoStores(t)
      const p = newProject()
      const k = await keyIn(a, p)
      const l = at(p, 'pipeline', 4)
      const results = await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2 === 0 ? a : b).putEndpoint(l, [k.id], AUDIT)))
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
        await s.putEndpoint(l, [k.id], AUDIT)
      }
      await s.putEndpoint(at(other), [theirs.id], AUDIT)

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

    /** Every page of a list from the start, `limit` at a time: the items in order, and how many pages it took. */
    async function walk<T> (read: (after: string | undefined) => Promise<ListPage<T>>): Promise<{ items: T[], pages: number }> {
      const items: T[] = []
      let pages = 0
      for (let after: string | undefined; ;) {
        const page = await read(after)
        items.push(...page.items)
        pages++
        if (page.next === null) return { items, pages }
        after = page.next
        if (pages > 1000) throw new Error('the pages do not end')
      }
    }

    t.test('listKeysPage: pages in listKeys\' order, each key once; the cursor holds when its key is deleted', async (t) => {
      const s = await store(t)
      const p = newProject()
      // Made as fast as the store can: several share a creation time, which the id orders.
      const made: ApiKeyRecord[] = []
      for (let i = 0; i < 11; i++) made.push(await s.createKey(newKey(p, `client ${i}`), AUDIT))
      await s.createKey(newKey(newProject(), 'client 0'), AUDIT)
      const all = await s.listKeys(p)
      t.equal(all.length, 11)

      for (const limit of [1, 2, 3, 10, 11, 12, 500]) {
        const { items, pages } = await walk((after) => s.listKeysPage(p, { limit, after }))
        t.same(items, all, `pages of ${limit}: the same keys in the same order`)
        t.equal(pages, Math.max(1, Math.ceil(11 / limit)), `pages of ${limit}: ${pages}, the last one says so (next null)`)
      }
      const first = await s.listKeysPage(p, { limit: 4 })
      t.equal(first.items.length, 4)
      t.type(first.next, 'string')
      t.match(first.next, /^[A-Za-z0-9_-]+$/, 'a cursor is one URL-safe word')

      // The page's last key is deleted before the next page is read: the next page still starts after it.
      await s.deleteKey(p, first.items[3].id, AUDIT)
      const second = await s.listKeysPage(p, { limit: 4, after: first.next ?? undefined })
      t.same(second.items.map((k) => k.id), all.slice(4, 8).map((k) => k.id))
      t.same(await s.listKeysPage(newProject(), { limit: 5 }), { items: [], next: null }, 'an empty project')
      t.same(await s.listKeysPage(p, { limit: 5, after: second.next ?? undefined, search: 'no such text' }), { items: [], next: null })
    })

    t.test('listKeysPage: search finds a prefix or purpose by any part, A-Z in either case, in pages', async (t) => {
      const s = await store(t)
      const p = newProject()
      const purposes = ['Nightly ETL', 'nightly backup', 'Partner feed', 'ÉTL café', '100% sure_thing', 'reporting']
      // Prefixes without a letter of the words searched below: a random one
      // held "etl" or "nightly" now and then, and its key was found by them.
      const prefix = (): string => Array.from({ length: 10 }, () => SEARCH_PROOF[randomInt(SEARCH_PROOF.length)]).join('')
      const keys: ApiKeyRecord[] = []
      for (const purpose of purposes) keys.push(await s.createKey({ ...newKey(p, purpose), prefix: prefix() }, AUDIT))
      await s.createKey(newKey(newProject(), 'Nightly ETL'), AUDIT)
      const find = async (search: string, limit = 100): Promise<string[]> =>
        (await walk((after) => s.listKeysPage(p, { limit, after, search }))).items.map((k) => k.purpose)
      // Keys made in the same millisecond are ordered by id: the expected order is listKeys'.
      const nightly = (await s.listKeys(p)).map((k) => k.purpose).filter((purpose) => /nightly/i.test(purpose))

      t.same(await find('nightly'), nightly, 'in order, this project only')
      t.same(nightly.sort(), ['Nightly ETL', 'nightly backup'])
      t.same(await find('NIGHTLY', 1), await find('nightly'), 'either case, a page at a time')
      t.same(await find('etl'), ['Nightly ETL'], 'É is not E: only A-Z fold')
      t.same(await find('ÉTL'), ['ÉTL café'])
      t.same(await find('%'), ['100% sure_thing'], 'LIKE\'s wildcards are plain characters')
      t.same(await find('_'), ['100% sure_thing'])
      t.same(await find('a\u0000b'), [], 'a NUL finds nothing')
      const reporting = keys[5].prefix
      t.same(await find(reporting.slice(2, 8)), ['reporting'], 'part of a prefix')
      t.same(await find(reporting.toLowerCase()), (await find(reporting.toUpperCase())), 'a prefix in either case')
      t.ok((await find(reporting.toLowerCase())).includes('reporting'))
    })

    t.test('listKeysPage and listEndpointsPage refuse a cursor they did not give', async (t) => {
      const s = await store(t)
      const p = newProject()
      await keyIn(s, p)
      for (const after of ['', 'not a cursor', 'bm90IGpzb24', Buffer.from('[1]').toString('base64url'),
        Buffer.from('["x", 1, "y"]').toString('base64url'), Buffer.from('[1.5, "a"]').toString('base64url'),
        Buffer.from('["2030-02-30T00:00:00.000000Z", "a"]').toString('base64url'), 'a\u0000b']) {
        await t.rejects(s.listKeysPage(p, { limit: 5, after }), CURSOR_REFUSED, `keys: ${JSON.stringify(after)}`)
        await t.rejects(s.listEndpointsPage(p, { limit: 5, after }), CURSOR_REFUSED, `endpoints: ${JSON.stringify(after)}`)
      }
      await keyIn(s, p)
      const keyCursor = (await s.listKeysPage(p, { limit: 1 })).next
      t.type(keyCursor, 'string')
      await t.rejects(s.listEndpointsPage(p, { limit: 5, after: keyCursor ?? '' }), CURSOR_REFUSED, 'a key cursor is no endpoint cursor')
      t.ok(await s.listKeysPage(p, { limit: 1, after: 'x' }).catch((err: unknown) => err instanceof InvalidCursorError), 'an InvalidCursorError')
    })

    t.test('listEndpointsPage: pages in listEndpoints\' order with their keys; by key; search by path or place', async (t) => {
      const s = await store(t)
      const p = newProject()
      const a = await keyIn(s, p, 'a')
      const b = await keyIn(s, p, 'b', false)
      const theirs = await keyIn(s, newProject())
      const places = [at(p, 'dataset', 1, 2), at(p, 'pipeline', 1), at(p, 'dataset', 12), at(p, 'dataset', 1), at(p, 'pipeline', 3, 10),
        at(p, 'dataset', 2), at(p, 'pipeline', 2)]
      for (const [i, l] of places.entries()) await s.putEndpoint(l, i % 3 === 0 ? [a.id, b.id] : [b.id], AUDIT)
      await s.putEndpoint(at(newProject()), [theirs.id], AUDIT)
      const all = await s.listEndpoints(p)
      t.equal(all.length, 7)

      for (const limit of [1, 2, 3, 7, 8]) {
        const { items, pages } = await walk((after) => s.listEndpointsPage(p, { limit, after }))
        t.same(items, all, `pages of ${limit}: the same endpoints, keys and all, in the same order`)
        t.equal(pages, Math.ceil(7 / limit), `pages of ${limit}`)
      }
      const byKey = await walk((after) => s.listEndpointsPage(p, { limit: 2, after, keyId: a.id }))
      t.same(byKey.items, all.filter((e) => e.keys.some((k) => k.id === a.id)), 'the endpoints of one key, with all their keys')
      t.equal(byKey.items.length, 3)
      t.same((await s.listEndpointsPage(p, { limit: 10, keyId: theirs.id })).items, [], 'another project\'s key: none')
      t.same((await s.listEndpointsPage(p, { limit: 10, keyId: randomUUID() })).items, [])

      const paths = async (query: Omit<EndpointListQuery, 'limit'>, limit = 100): Promise<string[]> =>
        (await walk((after) => s.listEndpointsPage(p, { ...query, limit, after }))).items.map((e) => `${e.modelSequence}/${e.type}/${e.resourceSequence}`)
      t.same(await paths({ search: '/pipeline/' }), ['1/pipeline/1', '1/pipeline/2', '10/pipeline/3'])
      t.same(await paths({ search: 'DATASET/1' }, 1), ['1/dataset/1', '1/dataset/12', '2/dataset/1'], 'either case, a page at a time')
      t.same(await paths({ search: 'model/10/' }), ['10/pipeline/3'])
      t.same(await paths({ search: p.organization.toUpperCase() }), all.map((e) => `${e.modelSequence}/${e.type}/${e.resourceSequence}`),
        'the whole path, organization included')
      t.same(await paths({ search: 'sales', searchPlaces: [{ type: 'dataset', modelSequence: 1, resourceSequence: 12 }, { type: 'pipeline', modelSequence: 1, resourceSequence: 9 }] }),
        ['1/dataset/12'], 'a place the host named matches, though its path does not')
      t.same(await paths({ search: '/pipeline/', searchPlaces: [{ type: 'dataset', modelSequence: 2, resourceSequence: 1 }] }),
        ['1/pipeline/1', '1/pipeline/2', '2/dataset/1', '10/pipeline/3'], 'either matches')
      t.same(await paths({ search: '/pipeline/', keyId: a.id }), ['1/pipeline/2'], 'search and key together')
      t.same(await paths({ search: 'a\u0000b' }), [])
      t.same(await s.listEndpointsPage(newProject(), { limit: 3 }), { items: [], next: null })
    })

    t.test('addEndpointKey and removeEndpointKey: one key on or off, audited with the whole list; nothing else changes', async (t) => {
      const s = await store(t)
      const p = newProject()
      const a = await keyIn(s, p, 'a')
      const b = await keyIn(s, p, 'b')
      const foreign = await keyIn(s, newProject())
      const l = at(p, 'dataset', 3)
      const audited = async (): Promise<number> => (await s.listAudit(p, { limit: 500 })).length

      t.same(await s.addEndpointKey(l, a.id, AUDIT), { ok: false, problem: 'no_endpoint' }, 'no endpoint: it is not created')
      t.same(await s.removeEndpointKey(l, a.id, AUDIT), { ok: false, problem: 'no_endpoint' })
      t.equal(await s.getEndpoint(l), null)
      const put = await s.putEndpoint(l, [a.id], AUDIT)
      if (!put.ok) throw new Error('putEndpoint refused')
      await s.applyUsage({ calls: new Map([[put.endpoint.id, 4]]), lastUsed: new Map(), counts: new Map() })
      const entries = await audited()

      for (const id of [foreign.id, randomUUID(), 'not-a-uuid', `${a.id}\u0000`]) {
        t.same(await s.addEndpointKey(l, id, AUDIT), { ok: false, problem: 'no_key' }, `add ${JSON.stringify(id)}: not a key of the project`)
        t.same(await s.removeEndpointKey(l, id, AUDIT), { ok: false, problem: 'no_key' }, `remove ${JSON.stringify(id)}`)
      }
      const added = await s.addEndpointKey(l, b.id, AUDIT)
      if (!added.ok) throw new Error('addEndpointKey refused')
      t.equal(added.changed, true)
      t.same({ ...added.endpoint, keys: byId(added.endpoint.keys) },
        { ...put.endpoint, calls: 4, keys: byId([{ id: a.id, prefix: a.prefix, purpose: 'a', isActive: true }, { id: b.id, prefix: b.prefix, purpose: 'b', isActive: true }]) },
        'the endpoint as it is now: same id, calls and creation time, both keys')
      t.same(await s.getEndpoint(l), added.endpoint)
      t.not((await s.findEndpointKey(l, b.prefix))?.key, null, 'the key opens it')
      const [entry] = await s.listAudit(p, { limit: 1 })
      t.match(entry, { action: 'endpoint.updated', actor: 'contract', endpointId: put.endpoint.id, keyId: null,
        changes: { keyIds: { from: [a.id], to: [a.id, b.id].sort() } } }, 'audited as a PUT would be')

      t.same(await s.addEndpointKey(l, b.id, AUDIT), { ok: true, changed: false, endpoint: added.endpoint }, 'already there: nothing changes')
      t.equal(await audited(), entries + 1, 'and nothing is audited')

      const removed = await s.removeEndpointKey(l, a.id, AUDIT)
      t.match(removed, { ok: true, changed: true, endpoint: { id: put.endpoint.id, calls: 4 } })
      t.same(removed.ok && removed.endpoint.keys.map((k) => k.id), [b.id])
      t.equal((await s.findEndpointKey(l, a.prefix))?.key, null, 'the key no longer opens it')
      t.not(await s.getKey(p, a.id), null, 'the key itself stays')
      t.match((await s.listAudit(p, { limit: 1 }))[0], { action: 'endpoint.updated', changes: { keyIds: { from: [a.id, b.id].sort(), to: [b.id] } } })
      t.same(await s.removeEndpointKey(l, a.id, AUDIT), { ok: true, changed: false, endpoint: removed.ok && removed.endpoint }, 'not there: nothing changes')
      t.same(await s.removeEndpointKey(l, b.id, AUDIT), { ok: false, problem: 'last_key' }, 'never the last key')
      t.same((await s.getEndpoint(l))?.keys.map((k) => k.id), [b.id])
      t.equal(await audited(), entries + 2, 'two changes, two entries')
    })

    t.test(`addEndpointKey stops at ${MAX_ENDPOINT_KEYS} keys, as a PUT does`, async (t) => {
      const s = await store(t)
      const p = newProject()
      const ids: string[] = []
      for (let i = 0; i <= MAX_ENDPOINT_KEYS; i++) ids.push((await s.createKey(newKey(p, `k${i}`), AUDIT)).id)
      const l = at(p)
      t.match(await s.putEndpoint(l, ids.slice(0, MAX_ENDPOINT_KEYS - 1), AUDIT), { ok: true })
      t.match(await s.addEndpointKey(l, ids[MAX_ENDPOINT_KEYS - 1], AUDIT), { ok: true, changed: true }, `the ${MAX_ENDPOINT_KEYS}th`)
      t.same(await s.addEndpointKey(l, ids[MAX_ENDPOINT_KEYS], AUDIT), { ok: false, problem: 'full' }, 'one more is refused')
      t.equal((await s.getEndpoint(l))?.keys.length, MAX_ENDPOINT_KEYS)
      t.match(await s.addEndpointKey(l, ids[0], AUDIT), { ok: true, changed: false }, 'one it has is fine')
    })

    t.test('concurrent addEndpointKey of many keys to one endpoint, from every handle: all are assigned, each audited once', async (t) => {
      const [a, b] = await twoStores(t)
      const p = newProject()
      const first = await keyIn(a, p)
      const l = at(p)
      await a.putEndpoint(l, [first.id], AUDIT)
      const more: string[] = []
      for (let i = 0; i < 8; i++) more.push((await keyIn(a, p)).id)
      const results = await Promise.all(more.map((id, i) => (i % 2 === 0 ? a : b).addEndpointKey(l, id, AUDIT)))
      t.same(results.map((r) => r.ok && r.changed), Array(8).fill(true))
      t.same((await b.getEndpoint(l))?.keys.map((k) => k.id).sort(), [first.id, ...more].sort(), 'no addition lost')
      const entries = (await a.listAudit(p, { limit: 100 })).filter((e) => e.action === 'endpoint.updated')
      t.equal(entries.length, 8)
      t.same(new Set(entries.map((e) => (e.changes.keyIds.to as string[]).length)), new Set([2, 3, 4, 5, 6, 7, 8, 9]),
        'each entry\'s list is the one its change made: none saw another\'s half-done')
    })

    t.test('deleteKey revokes the key and keeps its endpoints, minus that key', async (t) => {
      const s = await store(t)
      const p = newProject()
      const a = await keyIn(s, p)
      const b = await keyIn(s, p)
      const l = at(p)
      const put = await s.putEndpoint(l, [a.id, b.id], AUDIT)
      const endpointId = put.ok ? put.endpoint.id : ''

      t.equal(await s.deleteKey(newProject(), a.id, AUDIT), false, 'another project cannot delete it')
      t.equal(await s.deleteKey(p, 'not-a-uuid', AUDIT), false)
      t.not(await s.getKey(p, a.id), null)

      t.equal(await s.deleteKey(p, a.id, AUDIT), true)
      t.equal(await s.getKey(p, a.id), null)
      t.same((await s.listKeys(p)).map((k) => k.id), [b.id])
      t.same(await s.findEndpointKey(l, a.prefix), { endpointId, key: null }, 'its prefix no longer finds it')
      t.same((await s.getEndpoint(l))?.keys.map((k) => k.id), [b.id], 'the endpoint stays, minus the key')
      t.equal(await s.deleteKey(p, a.id, AUDIT), false, 'a second delete finds nothing')

      t.equal(await s.deleteKey(p, b.id, AUDIT), true)
      const left = await s.getEndpoint(l)
      t.match(left, { id: endpointId, keys: [] }, 'an endpoint without keys still exists')
      t.same(await s.findEndpointKey(l, b.prefix), { endpointId, key: null })

      // The prefix of a deleted key is free again.
      const again = await s.createKey({ ...newKey(p), prefix: a.prefix }, AUDIT)
      t.equal(again.prefix, a.prefix)
    })

    t.test('deleteEndpoint removes the endpoint and its assignments; keys stay', async (t) => {
      const s = await store(t)
      const p = newProject()
      const k = await keyIn(s, p)
      const l = at(p, 'pipeline', 2)
      const other = at(p, 'dataset', 2)
      const first = await s.putEndpoint(l, [k.id], AUDIT)
      await s.putEndpoint(other, [k.id], AUDIT)
      await s.applyUsage({ calls: new Map([[first.ok ? first.endpoint.id : '', 5]]), lastUsed: new Map(), counts: new Map() })
      const keyBefore = await s.getKey(p, k.id)

      t.equal(await s.deleteEndpoint({ ...l, project: 'other' }, AUDIT), false, 'another project\'s locator')
      t.equal(await s.deleteEndpoint(l, AUDIT), true)
      t.equal(await s.getEndpoint(l), null)
      t.equal(await s.findEndpointKey(l, k.prefix), null)
      t.equal(await s.deleteEndpoint(l, AUDIT), false, 'a second delete finds nothing')
      t.same(await s.getKey(p, k.id), keyBefore, 'the key stays, unchanged')
      t.not((await s.findEndpointKey(other, k.prefix))?.key, null, 'and still opens its other endpoint')

      const recreated = await s.putEndpoint(l, [k.id], AUDIT)
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
      const put = await s.putEndpoint(l, [k.id], AUDIT)
      const endpointId = put.ok ? put.endpoint.id : ''
      const nul = 'a\u0000b'
      const nulKeyId = `${k.id}\u0000`

      const history = { granularity: 'hour', from: new Date(0), to: new Date(Date.UTC(2100, 0)), limit: 10 } as const
      for (const id of [nul, nulKeyId]) {
        t.same(await s.queryUsage(p, { ...history, keyId: id }), [], 'queryUsage by key')
        t.same(await s.queryUsage(p, { ...history, endpointId: id }), [], 'queryUsage by endpoint')
        t.same(await s.queryUsage({ ...p, organization: id }, history), [], 'queryUsage by project')
        t.equal(await s.getKey(p, id), null, 'getKey')
        t.equal(await s.updateKey(p, id, { purpose: 'x', isActive: false }, AUDIT), null, 'updateKey')
        t.equal(await s.replaceKeySecret(p, id, { prefix: randomAlphanumeric(10), hash: 'x' }, AUDIT), null, 'replaceKeySecret')
        t.equal(await s.deleteKey(p, id, AUDIT), false, 'deleteKey')
      }
      t.same(await s.putEndpoint(l, [k.id, nul, nulKeyId], AUDIT), { ok: false, unknownKeyIds: [nul, nulKeyId] },
        'putEndpoint names them as not keys of the project')
      t.same(await s.putEndpoint(at(p, 'pipeline', 2), [nul], AUDIT), { ok: false, unknownKeyIds: [nul] })

      for (const where of [{ organization: nul }, { project: nul }, { organization: `${p.organization}\u0000` }]) {
        const project = { ...p, ...where }
        t.same(await s.listKeys(project), [], `listKeys ${JSON.stringify(where)}`)
        t.equal(await s.getKey(project, k.id), null, 'getKey in that project')
        t.equal(await s.deleteKey(project, k.id, AUDIT), false, 'deleteKey in that project')
        t.same(await s.listEndpoints(project), [], 'listEndpoints')
        t.same(await s.listKeysPage(project, { limit: 5 }), { items: [], next: null }, 'listKeysPage')
        t.same(await s.listEndpointsPage(project, { limit: 5 }), { items: [], next: null }, 'listEndpointsPage')
        t.same(await s.addEndpointKey({ ...l, ...where }, k.id, AUDIT), { ok: false, problem: 'no_endpoint' }, 'addEndpointKey')
        t.same(await s.removeEndpointKey({ ...l, ...where }, k.id, AUDIT), { ok: false, problem: 'no_endpoint' }, 'removeEndpointKey')
        t.equal(await s.getEndpoint({ ...l, ...where }), null, 'getEndpoint')
        t.equal(await s.deleteEndpoint({ ...l, ...where }, AUDIT), false, 'deleteEndpoint')
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
      const e1 = await s.putEndpoint(at(p, 'dataset', 1), [k.id], AUDIT)
      const e2 = await s.putEndpoint(at(p, 'dataset', 2), [k.id], AUDIT)
      if (!e1.ok || !e2.ok) throw new Error('putEndpoint refused')
      const id1 = e1.endpoint.id
      const id2 = e2.endpoint.id

      await s.applyUsage({ calls: new Map(), lastUsed: new Map(), counts: new Map() })
      const t1 = new Date(Date.UTC(2030, 0, 2, 3, 4, 5, 678))
      await s.applyUsage({ calls: new Map([[id1, 3], [id2, 1]]), lastUsed: new Map([[k.id, t1]]), counts: new Map() })
      await s.applyUsage({
        calls: new Map([[id1, 4], [randomUUID(), 9], ['not-a-uuid', 1]]),
        lastUsed: new Map([[randomUUID(), t1]]),
        counts: new Map()
      })
      t.equal((await s.getEndpoint(at(p, 'dataset', 1)))?.calls, 7, '3 + 4, unknown ids ignored')
      t.equal((await s.getEndpoint(at(p, 'dataset', 2)))?.calls, 1)
      t.same((await s.getKey(p, k.id))?.updatedAt, t1, 'updatedAt is the time given, to the millisecond')
      t.equal((await s.getKey(p, idle.id))?.updatedAt, null, 'a key not in the batch is untouched')

      await s.applyUsage({ calls: new Map(), lastUsed: new Map([[k.id, new Date(t1.getTime() - 60_000)]]), counts: new Map() })
      t.same((await s.getKey(p, k.id))?.updatedAt, t1, 'an older time does not move it back')
      const t2 = new Date(t1.getTime() + 1)
      await s.applyUsage({ calls: new Map(), lastUsed: new Map([[k.id, t2]]), counts: new Map() })
      t.same((await s.getKey(p, k.id))?.updatedAt, t2, 'a newer time moves it forward')

      await s.deleteKey(p, k.id, AUDIT)
      await s.deleteEndpoint(at(p, 'dataset', 2), AUDIT)
      await s.applyUsage({ calls: new Map([[id2, 1], [id1, 1]]), lastUsed: new Map([[k.id, t2]]), counts: new Map() })
      t.equal((await s.getEndpoint(at(p, 'dataset', 1)))?.calls, 8, 'a deleted id in the batch does not stop the rest')
    })

    t.test('concurrent applyUsage batches, from every handle, all count', async (t) => {
      const [a, b] = await twoStores(t)
      const p = newProject()
      const k = await keyIn(a, p)
      const e1 = await a.putEndpoint(at(p, 'dataset', 1), [k.id], AUDIT)
      const e2 = await a.putEndpoint(at(p, 'dataset', 2), [k.id], AUDIT)
      if (!e1.ok || !e2.ok) throw new Error('putEndpoint refused')
      // Both orders of the same ids, as two instances' batches would be.
      const batches = Array.from({ length: 40 }, (_, i) => ({
        calls: new Map(i % 2 === 0 ? [[e1.endpoint.id, i], [e2.endpoint.id, 1]] : [[e2.endpoint.id, 1], [e1.endpoint.id, i]]),
        lastUsed: new Map([[k.id, new Date(Date.UTC(2030, 0, 1, 0, 0, i))]]),
        // The same history rows from both handles, in both orders.
        counts: countsBatch([
          { hour: hourOf(1, i % 3), endpointId: e1.endpoint.id, keyId: k.id, outcome: 'ok' as const, count: i },
          { hour: hourOf(1, 0), endpointId: e2.endpoint.id, keyId: null, outcome: 'no_key' as const, count: 1 }
        ].sort(() => (i % 2 === 0 ? 1 : -1))).counts
      }))
      await Promise.all(batches.map((batch, i) => (i % 2 === 0 ? a : b).applyUsage(batch)))
      const history = await b.queryUsage(p, { granularity: 'hour', from: new Date(hourOf(1, 0)), to: new Date(hourOf(2, 0)), limit: 10 })
      const okIn = (h: number): number => Array.from({ length: 40 }, (_, i) => i).filter((i) => i % 3 === h).reduce((x, y) => x + y, 0)
      t.same(tuples(history), inUsageOrder([
        [hourOf(1, 0), e1.endpoint.id, k.id, 'ok', okIn(0)],
        [hourOf(1, 1), e1.endpoint.id, k.id, 'ok', okIn(1)],
        [hourOf(1, 2), e1.endpoint.id, k.id, 'ok', okIn(2)],
        [hourOf(1, 0), e2.endpoint.id, null, 'no_key', 40]
      ]), 'every history count from both handles, exactly')
      t.same(tuples(await a.queryUsage(p, { granularity: 'day', from: new Date(hourOf(1, 0)), to: new Date(hourOf(2, 0)), limit: 10 })),
        inUsageOrder([[hourOf(1, 0), e1.endpoint.id, k.id, 'ok', (39 * 40) / 2], [hourOf(1, 0), e2.endpoint.id, null, 'no_key', 40]]),
        'and the day sums them')
      t.equal((await b.getEndpoint(at(p, 'dataset', 1)))?.calls, (39 * 40) / 2)
      t.equal((await a.getEndpoint(at(p, 'dataset', 2)))?.calls, 40)
      t.same((await b.getKey(p, k.id))?.updatedAt, new Date(Date.UTC(2030, 0, 1, 0, 0, 39)), 'the latest time wins')
    })

    t.test('usage history: hourly counts add up per outcome; days roll them up; filters, order and limit', async (t) => {
      const s = await store(t)
      const p = newProject()
      const k1 = await keyIn(s, p)
      const k2 = await keyIn(s, p)
      const e1 = await s.putEndpoint(at(p, 'dataset', 1), [k1.id, k2.id], AUDIT)
      const e2 = await s.putEndpoint(at(p, 'pipeline', 1), [k1.id], AUDIT)
      if (!e1.ok || !e2.ok) throw new Error('putEndpoint refused')
      const [id1, id2] = [e1.endpoint.id, e2.endpoint.id]

      await s.applyUsage(countsBatch([
        { hour: hourOf(1, 10), endpointId: id1, keyId: k1.id, outcome: 'ok', count: 3 },
        { hour: hourOf(1, 10), endpointId: id1, keyId: k1.id, outcome: 'unknown_key', count: 2 },
        { hour: hourOf(1, 10), endpointId: id1, keyId: null, outcome: 'no_key', count: 1 },
        { hour: hourOf(1, 11), endpointId: id1, keyId: k2.id, outcome: 'ok', count: 4 },
        { hour: hourOf(2, 0), endpointId: id2, keyId: k1.id, outcome: 'ok', count: 5 },
        { hour: hourOf(2, 1), endpointId: id2, keyId: k1.id, outcome: 'disabled', count: 0 }
      ]))
      await s.applyUsage(countsBatch([
        { hour: hourOf(1, 10), endpointId: id1, keyId: k1.id, outcome: 'ok', count: 7 },
        { hour: hourOf(1, 23), endpointId: id1, keyId: null, outcome: 'unknown_prefix', count: 1 },
        { hour: hourOf(1, 23), endpointId: id1, keyId: k2.id, outcome: 'expired', count: 2 }
      ]))

      const everything = { from: new Date(hourOf(1, 0)), to: new Date(hourOf(3, 0)), limit: 100 }
      const hours = await s.queryUsage(p, { ...everything, granularity: 'hour' })
      const expectedHours: RowTuple[] = inUsageOrder([
        [hourOf(1, 10), id1, k1.id, 'ok', 10],
        [hourOf(1, 10), id1, k1.id, 'unknown_key', 2],
        [hourOf(1, 10), id1, null, 'no_key', 1],
        [hourOf(1, 11), id1, k2.id, 'ok', 4],
        [hourOf(1, 23), id1, null, 'unknown_prefix', 1],
        [hourOf(1, 23), id1, k2.id, 'expired', 2],
        [hourOf(2, 0), id2, k1.id, 'ok', 5]
      ])
      t.same(tuples(hours), expectedHours, 'each bucket once, summed across batches, in the documented order; no zero counts')
      t.ok(hours.every((r) => r.start instanceof Date), 'starts are Dates')

      const days = await s.queryUsage(p, { ...everything, granularity: 'day' })
      t.same(tuples(days), inUsageOrder([
        [Date.UTC(2030, 0, 1), id1, k1.id, 'ok', 10],
        [Date.UTC(2030, 0, 1), id1, k1.id, 'unknown_key', 2],
        [Date.UTC(2030, 0, 1), id1, null, 'no_key', 1],
        [Date.UTC(2030, 0, 1), id1, null, 'unknown_prefix', 1],
        [Date.UTC(2030, 0, 1), id1, k2.id, 'ok', 4],
        [Date.UTC(2030, 0, 1), id1, k2.id, 'expired', 2],
        [Date.UTC(2030, 0, 2), id2, k1.id, 'ok', 5]
      ]), 'the UTC days sum their hours')

      t.same(tuples(await s.queryUsage(p, { ...everything, granularity: 'hour', keyId: k2.id })),
        expectedHours.filter((r) => r[2] === k2.id), 'by key')
      t.same(tuples(await s.queryUsage(p, { ...everything, granularity: 'hour', endpointId: id2 })),
        expectedHours.filter((r) => r[1] === id2), 'by endpoint')
      t.same(tuples(await s.queryUsage(p, { ...everything, granularity: 'hour', endpointId: id2, keyId: k2.id })), [], 'both filters')
      t.same(tuples(await s.queryUsage(p, { granularity: 'hour', from: new Date(hourOf(1, 11)), to: new Date(hourOf(2, 0)), limit: 100 })),
        expectedHours.filter((r) => r[0] >= hourOf(1, 11) && r[0] < hourOf(2, 0)), 'from is inclusive, to exclusive')
      t.same(tuples(await s.queryUsage(p, { ...everything, granularity: 'hour', limit: 2 })), expectedHours.slice(0, 2), 'limit')
      t.same(await s.queryUsage(newProject(), { ...everything, granularity: 'hour' }), [], 'another project sees none of it')
      t.same(await s.queryUsage(p, { ...everything, granularity: 'hour', keyId: randomUUID() }), [], 'an unknown key id')

      // Both endpoints with buckets in the same hours: an adapter that reads
      // an endpoint at a time must still give one list by start, then endpoint.
      await s.applyUsage(countsBatch([
        { hour: hourOf(4, 0), endpointId: id2, keyId: k1.id, outcome: 'ok', count: 1 },
        { hour: hourOf(4, 0), endpointId: id1, keyId: k2.id, outcome: 'ok', count: 2 },
        { hour: hourOf(4, 0), endpointId: id1, keyId: k1.id, outcome: 'ok', count: 3 },
        { hour: hourOf(4, 1), endpointId: id1, keyId: k1.id, outcome: 'ok', count: 4 },
        { hour: hourOf(4, 2), endpointId: id2, keyId: k2.id, outcome: 'ok', count: 5 },
        { hour: hourOf(4, 2), endpointId: id2, keyId: null, outcome: 'no_key', count: 6 },
        { hour: hourOf(4, 2), endpointId: id1, keyId: k1.id, outcome: 'disabled', count: 7 }
      ]))
      const shared = { granularity: 'hour', from: new Date(hourOf(4, 0)), to: new Date(hourOf(5, 0)), limit: 100 } as const
      const sharedRows: RowTuple[] = inUsageOrder([
        [hourOf(4, 0), id2, k1.id, 'ok', 1],
        [hourOf(4, 0), id1, k2.id, 'ok', 2],
        [hourOf(4, 0), id1, k1.id, 'ok', 3],
        [hourOf(4, 1), id1, k1.id, 'ok', 4],
        [hourOf(4, 2), id2, k2.id, 'ok', 5],
        [hourOf(4, 2), id2, null, 'no_key', 6],
        [hourOf(4, 2), id1, k1.id, 'disabled', 7]
      ])
      t.same(tuples(await s.queryUsage(p, shared)), sharedRows, 'endpoints sharing hours come merged in the documented order')
      for (const limit of [1, 2, 4, 6]) {
        t.same(tuples(await s.queryUsage(p, { ...shared, limit })), sharedRows.slice(0, limit), `limit ${limit} cuts the merged list`)
      }
      if (s.countUsage !== undefined) {
        for (const limit of [1, 6, 7, 8, 100]) {
          t.equal(await s.countUsage(p, { ...shared, limit }), Math.min(limit, 7), `countUsage counts as far as its limit (${limit})`)
        }
        t.equal(await s.countUsage(p, { ...shared, endpointId: id2, keyId: k2.id, limit: 10 }), 1, 'countUsage filters as queryUsage')
        t.equal(await s.countUsage(newProject(), { ...shared }), 0, 'countUsage: another project has none')
      }
      if (s.queryUsageWithinLimit !== undefined) {
        for (const limit of [1, 6]) {
          t.equal(await s.queryUsageWithinLimit(p, { ...shared, limit }), null, `queryUsageWithinLimit: 7 rows are over a limit of ${limit}`)
        }
        for (const limit of [7, 8, 100]) {
          const columns = await s.queryUsageWithinLimit(p, { ...shared, limit })
          t.same(columns === null ? null : tuples(usageRowsOf(columns)), sharedRows, `queryUsageWithinLimit: all 7 rows within a limit of ${limit}`)
        }
        const filtered = await s.queryUsageWithinLimit(p, { ...shared, endpointId: id2, keyId: k2.id, limit: 1 })
        t.same(filtered === null ? null : tuples(usageRowsOf(filtered)), sharedRows.filter((r) => r[1] === id2 && r[2] === k2.id),
          'queryUsageWithinLimit filters as queryUsage, before the limit')
        t.same((await s.queryUsageWithinLimit(newProject(), { ...shared, limit: 1 }))?.length, 0, 'queryUsageWithinLimit: another project has none')
      }
      t.same(tuples(await s.queryUsage(p, { ...shared, granularity: 'day', from: new Date(Date.UTC(2030, 0, 4)) })), inUsageOrder([
        [Date.UTC(2030, 0, 4), id1, k1.id, 'disabled', 7],
        [Date.UTC(2030, 0, 4), id1, k1.id, 'ok', 7],
        [Date.UTC(2030, 0, 4), id1, k2.id, 'ok', 2],
        [Date.UTC(2030, 0, 4), id2, null, 'no_key', 6],
        [Date.UTC(2030, 0, 4), id2, k1.id, 'ok', 1],
        [Date.UTC(2030, 0, 4), id2, k2.id, 'ok', 5]
      ]), 'and their day')
      // A bucket may name a key of another project (a wrong secret on its prefix, say): it names it all the same.
      const stranger = await keyIn(s, newProject())
      await s.applyUsage(countsBatch([{ hour: hourOf(6, 0), endpointId: id1, keyId: stranger.id, outcome: 'unknown_key', count: 1 }]))
      t.same(tuples(await s.queryUsage(p, { ...shared, from: new Date(hourOf(6, 0)), to: new Date(hourOf(7, 0)) })),
        [[hourOf(6, 0), id1, stranger.id, 'unknown_key', 1]], 'a key of another project')
    })

    t.test('usage history: an endpoint\'s goes with it, a deleted key\'s stays; counts for a deleted endpoint are dropped', async (t) => {
      const s = await store(t)
      const p = newProject()
      const k = await keyIn(s, p)
      const kept = await s.putEndpoint(at(p, 'dataset', 1), [k.id], AUDIT)
      const gone = await s.putEndpoint(at(p, 'dataset', 2), [k.id], AUDIT)
      if (!kept.ok || !gone.ok) throw new Error('putEndpoint refused')
      const count = (endpointId: string, n: number): UsageCount => ({ hour: hourOf(5, 5), endpointId, keyId: k.id, outcome: 'ok', count: n })
      await s.applyUsage(countsBatch([count(kept.endpoint.id, 1), count(gone.endpoint.id, 2)]))
      await s.deleteEndpoint(at(p, 'dataset', 2), AUDIT)
      await s.deleteKey(p, k.id, AUDIT)
      await s.applyUsage(countsBatch([count(kept.endpoint.id, 3), count(gone.endpoint.id, 4), count(randomUUID(), 5)]))
      const query = { granularity: 'hour', from: new Date(hourOf(5, 0)), to: new Date(hourOf(6, 0)), limit: 10 } as const
      t.same(tuples(await s.queryUsage(p, query)), [[hourOf(5, 5), kept.endpoint.id, k.id, 'ok', 4]],
        'the deleted endpoint\'s history is gone and its new counts dropped; the deleted key\'s stays')
      t.same(tuples(await s.queryUsage(p, { ...query, granularity: 'day' })), [[Date.UTC(2030, 0, 5), kept.endpoint.id, k.id, 'ok', 4]])
    })

    t.test('long histories come whole and in order, however the adapter reads them (pages, an hour of many keys)', async (t) => {
      const s = await store(t)
      const p = newProject()
      const keys = [await keyIn(s, p), await keyIn(s, p), await keyIn(s, p)]
      const e1 = await s.putEndpoint(at(p, 'dataset', 1), [keys[0].id], AUDIT)
      const e2 = await s.putEndpoint(at(p, 'pipeline', 1), [keys[0].id], AUDIT)
      if (!e1.ok || !e2.ok) throw new Error('putEndpoint refused')
      const [id1, id2] = [e1.endpoint.id, e2.endpoint.id]
      const HOUR = 3_600_000
      const hour = (i: number): number => Date.UTC(2030, 0, 1) + i * HOUR
      const counts: UsageCount[] = []
      // Three keys every hour for 2,000 hours on one endpoint, one key for 1,000 on the other...
      for (let i = 0; i < 2000; i++) {
        for (const [k, key] of keys.entries()) counts.push({ hour: hour(i), endpointId: id1, keyId: key.id, outcome: 'ok', count: 1 + ((i + k) % 9) })
        if (i < 1000) counts.push({ hour: hour(i), endpointId: id2, keyId: keys[1].id, outcome: 'disabled', count: 2 })
      }
      // ...and one hour with guesses at 4,200 keys the project does not have (more than a page of most readers).
      for (let i = 0; i < 4200; i++) counts.push({ hour: hour(1000), endpointId: id1, keyId: randomUUID(), outcome: 'unknown_key', count: 1 })
      await s.applyUsage(countsBatch(counts))
      const expected = inUsageOrder(counts.map((c) => [c.hour, c.endpointId, c.keyId, c.outcome, c.count]))
      const all = { granularity: 'hour', from: new Date(hour(0)), to: new Date(hour(2000)), limit: 20_000 } as const
      t.same(tuples(await s.queryUsage(p, all)), expected, `all ${expected.length} buckets, in the documented order`)
      for (const limit of [4095, 4096, 5000, 9000]) {
        t.same(tuples(await s.queryUsage(p, { ...all, limit })), expected.slice(0, limit), `limit ${limit}`)
      }
      t.same(tuples(await s.queryUsage(p, { ...all, from: new Date(hour(999)), to: new Date(hour(1002)) })),
        expected.filter((r) => r[0] >= hour(999) && r[0] < hour(1002)), 'a range around the crowded hour')
      t.same(tuples(await s.queryUsage(p, { ...all, keyId: keys[1].id })), expected.filter((r) => r[2] === keys[1].id), 'one key, on both endpoints')
      const days = await s.queryUsage(p, { ...all, granularity: 'day' })
      t.equal(days.reduce((sum, r) => sum + r.count, 0), counts.reduce((sum, c) => sum + c.count, 0), 'the days hold every count')
    })

    t.test('pruneUsage deletes the hours and days that start before the time, and says how many', async (t) => {
      const s = await emptyStore(t)
      const p = newProject()
      const k = await keyIn(s, p)
      const e = await s.putEndpoint(at(p), [k.id], AUDIT)
      if (!e.ok) throw new Error('putEndpoint refused')
      const count = (hour: number): UsageCount => ({ hour, endpointId: e.endpoint.id, keyId: k.id, outcome: 'ok', count: 1 })
      await s.applyUsage(countsBatch([count(hourOf(1, 0)), count(hourOf(1, 23)), count(hourOf(2, 0)), count(hourOf(2, 1))]))
      const all = { from: new Date(0), to: new Date(Date.UTC(2100, 0)), limit: 100 }
      t.equal(await s.pruneUsage(new Date(hourOf(1, 0))), 0, 'nothing starts before the first hour')
      t.equal(await s.pruneUsage(new Date(hourOf(2, 0))), 3, 'two hours and a day')
      t.same(tuples(await s.queryUsage(p, { ...all, granularity: 'hour' })).map((r) => r[0]), [hourOf(2, 0), hourOf(2, 1)], 'hours from the time on stay')
      t.same(tuples(await s.queryUsage(p, { ...all, granularity: 'day' })).map((r) => r[0]), [Date.UTC(2030, 0, 2)], 'the day that starts at the time stays')
      t.equal(await s.pruneUsage(new Date(hourOf(1, 0))), 0, 'nothing older is left')
    })

    t.test('expiresAt: set at creation, patched, cleared; findEndpointKey gives it in milliseconds', async (t) => {
      const s = await store(t)
      const p = newProject()
      const when = new Date(Date.UTC(2031, 5, 6, 7, 8, 9, 123))
      const k = await s.createKey({ ...newKey(p), expiresAt: when }, AUDIT)
      t.same(k.expiresAt, when, 'createKey stores it to the millisecond')
      t.same((await s.getKey(p, k.id))?.expiresAt, when)
      const l = at(p)
      await s.putEndpoint(l, [k.id], AUDIT)
      t.equal((await s.findEndpointKey(l, k.prefix))?.key?.expiresAt, when.getTime(), 'the lookup gives milliseconds')

      const later = new Date(when.getTime() + 86_400_000)
      t.same((await s.updateKey(p, k.id, { expiresAt: later }, AUDIT))?.expiresAt, later, 'patched')
      t.same((await s.updateKey(p, k.id, { purpose: 'other' }, AUDIT))?.expiresAt, later, 'a patch without it leaves it')
      t.equal((await s.updateKey(p, k.id, { expiresAt: null }, AUDIT))?.expiresAt, null, 'null clears it')
      t.equal((await s.findEndpointKey(l, k.prefix))?.key?.expiresAt, null)
      t.equal((await keyIn(s, p)).expiresAt, null, 'a key made without one never expires')
    })

    t.test('limits: set at creation, patched one at a time, read by the lookup with the bytes of the day', async (t) => {
      const s = await store(t)
      const p = newProject()
      const plain = await s.createKey(newKey(p), AUDIT)
      t.same(plain.limits, { requestsPerMinute: null, concurrentDownloads: null, bytesPerDay: null }, 'none given: none')
      const k = await s.createKey({ ...newKey(p), limits: { requestsPerMinute: 60, concurrentDownloads: null, bytesPerDay: 2 ** 40 } }, AUDIT)
      t.same((await s.getKey(p, k.id))?.limits, { requestsPerMinute: 60, concurrentDownloads: null, bytesPerDay: 2 ** 40 })
      const patched = await s.updateKey(p, k.id, { limits: { concurrentDownloads: 2, bytesPerDay: null } }, AUDIT)
      t.same(patched?.limits, { requestsPerMinute: 60, concurrentDownloads: 2, bytesPerDay: null }, 'the named ones change')
      t.same((await s.updateKey(p, k.id, { purpose: 'x' }, AUDIT))?.limits, patched?.limits, 'a patch without limits leaves them')
      const l = at(p)
      await s.putEndpoint(l, [k.id, plain.id], AUDIT)
      t.same((await s.findEndpointKey(l, k.prefix))?.key?.limits, { requestsPerMinute: 60, concurrentDownloads: 2, bytesPerDay: null })
      t.equal((await s.findEndpointKey(l, plain.prefix))?.key?.limits, null, 'a key without limits: null')

      await s.updateKey(p, k.id, { limits: { bytesPerDay: 1000 } }, AUDIT)
      const endpointId = (await s.findEndpointKey(l, null))?.endpointId as string
      const now = Date.now()
      const hour = now - (now % 3_600_000)
      await s.applyUsage(countsBatch([
        { hour, endpointId, keyId: k.id, outcome: 'ok', count: 2, bytes: 300 },
        { hour, endpointId, keyId: plain.id, outcome: 'ok', count: 1, bytes: 999 }
      ]))
      await s.applyUsage(countsBatch([{ hour, endpointId, keyId: k.id, outcome: 'ok', count: 0, bytes: 50 }]))
      t.equal((await s.findEndpointKey(l, k.prefix))?.key?.bytesToday, 350, 'the key\'s bytes of the UTC day, a bytes-only bucket too')
      t.equal((await s.findEndpointKey(l, plain.prefix))?.key?.bytesToday, 0, 'without a bytesPerDay limit nothing is read')
      const rows = await s.queryUsage(p, { granularity: 'hour', from: new Date(hour), to: new Date(hour + 3_600_000), keyId: k.id, limit: 10 })
      t.same(rows.map((r) => [r.count, r.bytes]), [[2, 350]], 'a bucket holds its count and bytes')
    })

    t.test('takeRequest: at most `limit` per window and key, then again from 1 in a later window', async (t) => {
      const s = await store(t)
      const p = newProject()
      const k = await s.createKey(newKey(p), AUDIT)
      const other = await s.createKey(newKey(p), AUDIT)
      const w = 1_800_000_000_000
      t.same([await s.takeRequest(k.id, w, 2), await s.takeRequest(k.id, w, 2), await s.takeRequest(k.id, w, 2)], [1, 2, null])
      t.equal(await s.takeRequest(other.id, w, 2), 1, 'each key its own count')
      t.equal(await s.takeRequest(k.id, w - 60_000, 2), null, 'an earlier window (a clock behind) counts in the later')
      t.equal(await s.takeRequest(k.id, w + 60_000, 2), 1, 'a later window starts again')
      t.equal(await s.takeRequest(k.id, w + 60_000, 5), 2, 'a raised limit admits more at once')
      t.equal(await s.takeRequest('a-key-deleted-since-its-lookup', w, 2), 1, 'a key deleted since its lookup: admitted, as a request under way')
      t.equal(await s.claimDownloadSlot('a-key-deleted-since-its-lookup', 2, 'z', Date.now(), Date.now() + 1000), 0, 'and its download gets a slot')
      const many = await Promise.all(Array.from({ length: 20 }, async () => await s.takeRequest(k.id, w + 120_000, 7)))
      t.equal(many.filter((n) => n !== null).length, 7, 'concurrent takes: exactly the limit')
    })

    t.test('download slots: claimed up to the limit, renewed, released, and free once their lease ends', async (t) => {
      const s = await store(t)
      const p = newProject()
      const k = await s.createKey(newKey(p), AUDIT)
      const now = Date.now()
      t.equal(await s.claimDownloadSlot(k.id, 2, 'a', now, now + 1000), 0)
      t.equal(await s.claimDownloadSlot(k.id, 2, 'b', now, now + 1000), 1)
      t.equal(await s.claimDownloadSlot(k.id, 2, 'c', now, now + 1000), null, 'all held')
      t.equal(await s.claimDownloadSlot(k.id, 3, 'c', now, now + 1000), 2, 'a higher limit has room')
      await s.releaseDownloadSlot({ keyId: k.id, slot: 0, leaseId: 'not-a' })
      t.equal(await s.claimDownloadSlot(k.id, 2, 'd', now, now + 1000), null, 'another lease cannot free it')
      await s.releaseDownloadSlot({ keyId: k.id, slot: 0, leaseId: 'a' })
      t.equal(await s.claimDownloadSlot(k.id, 2, 'd', now, now + 1000), 0, 'released: free')
      await s.renewDownloadSlots([{ keyId: k.id, slot: 1, leaseId: 'b' }], now + 5000)
      t.equal(await s.claimDownloadSlot(k.id, 2, 'e', now + 2000, now + 3000), 0, 'past its lease, slot 0 is free again')
      t.equal(await s.claimDownloadSlot(k.id, 2, 'f', now + 2000, now + 3000), null, 'slot 1 was renewed')
      const race = await Promise.all(Array.from({ length: 10 }, async (_, i) => await s.claimDownloadSlot(k.id, 4, `r${i}`, now + 9000, now + 10000)))
      t.same(race.filter((n) => n !== null).sort(), [0, 1, 2, 3], 'concurrent claims: each slot once')
      const other = await s.createKey(newKey(p), AUDIT)
      t.equal(await s.claimDownloadSlot(other.id, Number.MAX_SAFE_INTEGER, 'huge', now, now + 1000), 0, 'a limit of 2^53 - 1 reads no more than the key holds')
      t.equal(await s.claimDownloadSlot(other.id, Number.MAX_SAFE_INTEGER, 'huge2', now, now + 1000), 1)
    })

    t.test('idempotency: claim, complete, replay, release', async (t) => {
      const s = await store(t)
      const endpoint = { endpointId: randomUUID(), keyId: randomUUID() }
      const ttl = 60_000
      const [one, two, three, four] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()]

      t.same(await s.claimIdempotencyKey(endpoint, 'k1', ttl, one), { claimed: true }, 'the first claim owns the key')
      t.same(await s.claimIdempotencyKey(endpoint, 'k1', ttl, two), { claimed: false, response: null }, 'a second one waits: no body yet')
      t.same(await s.claimIdempotencyKey({ ...endpoint, endpointId: randomUUID() }, 'k1', ttl, three), { claimed: true }, 'the same key on another endpoint is another record')
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

    t.test('idempotency: another API key\'s same Idempotency-Key on the same endpoint is another record', async (t) => {
      const s = await store(t)
      const endpointId = randomUUID()
      const mine = { endpointId, keyId: randomUUID() }
      const theirs = { endpointId, keyId: randomUUID() }
      const [a, b] = [randomUUID(), randomUUID()]
      t.same(await s.claimIdempotencyKey(mine, 'nightly', 60_000, a), { claimed: true })
      t.same(await s.claimIdempotencyKey(theirs, 'nightly', 60_000, b), { claimed: true }, 'the other key claims its own')
      await s.completeIdempotencyKey(mine, 'nightly', 'mine')
      t.same(await s.claimIdempotencyKey(theirs, 'nightly', 60_000, randomUUID()), { claimed: false, response: null }, 'theirs is still running')
      t.equal(await s.releaseIdempotencyKey(mine, 'nightly', b), false, 'their token does not release under my scope')
      t.equal(await s.releaseIdempotencyKey(theirs, 'nightly', b), true)
      t.same(await s.claimIdempotencyKey(mine, 'nightly', 60_000, randomUUID()), { claimed: false, response: 'mine' }, 'mine is untouched')
    })

    t.test('pruneIdempotencyKeys deletes records made before the time, answered or held', async (t) => {
      const s = await emptyStore(t)
      const scope = { endpointId: randomUUID(), keyId: randomUUID() }
      await s.claimIdempotencyKey(scope, 'held', 60_000, randomUUID())
      await s.claimIdempotencyKey(scope, 'answered', 60_000, randomUUID())
      await s.completeIdempotencyKey(scope, 'answered', 'body')
      t.equal(await s.pruneIdempotencyKeys(new Date(Date.now() - 60 * 60_000)), 0, 'none is an hour old')
      t.same(await s.claimIdempotencyKey(scope, 'held', 60_000, randomUUID()), { claimed: false, response: null }, 'the young held claim stays')
      t.same(await s.claimIdempotencyKey(scope, 'answered', 60_000, randomUUID()), { claimed: false, response: 'body' }, 'so does the answer')
      await sleep(20)
      t.equal(await s.pruneIdempotencyKeys(new Date(Date.now() + CLOCK_SLACK_MS)), 2, 'both are older than a time after them')
      t.same(await s.claimIdempotencyKey(scope, 'held', 60_000, randomUUID()), { claimed: true }, 'the held claim is gone')
      t.same(await s.claimIdempotencyKey(scope, 'answered', 60_000, randomUUID()), { claimed: true }, 'and the answer')
    })

    t.test('audit: every change writes one entry in its transaction, with its actor and only the fields that changed', async (t) => {
      const s = await store(t)
      const p = newProject()
      const expiry = new Date(Date.UTC(2031, 0, 1))
      const input = { ...newKey(p, 'etl', true), expiresAt: expiry }
      const k = await s.createKey(input, { actor: 'alice' })
      const other = await s.createKey(newKey(p, 'spare', false), { actor: null })
      await s.updateKey(p, k.id, { purpose: 'etl-2', isActive: true }, { actor: 'bob' })
      await s.updateKey(p, k.id, { isActive: false, expiresAt: null }, { actor: 'bob' })
      const regenerated = await s.replaceKeySecret(p, k.id, { prefix: randomAlphanumeric(10), hash: 'hash-two' }, { actor: 'carol' })
      const l = at(p, 'pipeline', 4)
      const created = await s.putEndpoint(l, [k.id], { actor: 'dave' })
      await s.putEndpoint(l, [other.id, k.id], { actor: 'dave' })
      await s.putEndpoint(l, [k.id, other.id], { actor: 'dave' })
      await s.putEndpoint(l, [other.id], { actor: 'erin' })
      await s.deleteEndpoint(l, { actor: 'erin' })
      await s.deleteKey(p, k.id, { actor: 'frank' })
      const endpointId = created.ok ? created.endpoint.id : ''
      const path = `/api/${p.organization}/${p.project}/model/1/pipeline/4`

      const entries = await s.listAudit(p, { limit: 100 })
      const plain = entries.map(({ id, at, ...rest }) => rest)
      t.same(plain.reverse(), [
        { actor: 'alice', action: 'key.created', keyId: k.id, endpointId: null, target: k.prefix, changes: { purpose: { from: null, to: 'etl' }, isActive: { from: null, to: true }, expiresAt: { from: null, to: expiry.toISOString() } } },
        { actor: null, action: 'key.created', keyId: other.id, endpointId: null, target: other.prefix, changes: { purpose: { from: null, to: 'spare' }, isActive: { from: null, to: false } } },
        { actor: 'bob', action: 'key.updated', keyId: k.id, endpointId: null, target: k.prefix, changes: { purpose: { from: 'etl', to: 'etl-2' } } },
        { actor: 'bob', action: 'key.updated', keyId: k.id, endpointId: null, target: k.prefix, changes: { isActive: { from: true, to: false }, expiresAt: { from: expiry.toISOString(), to: null } } },
        { actor: 'carol', action: 'key.regenerated', keyId: k.id, endpointId: null, target: regenerated?.prefix, changes: { prefix: { from: k.prefix, to: regenerated?.prefix } } },
        { actor: 'dave', action: 'endpoint.created', keyId: null, endpointId, target: path, changes: { keyIds: { from: [], to: [k.id] } } },
        { actor: 'dave', action: 'endpoint.updated', keyId: null, endpointId, target: path, changes: { keyIds: { from: [k.id], to: [k.id, other.id].sort() } } },
        { actor: 'erin', action: 'endpoint.updated', keyId: null, endpointId, target: path, changes: { keyIds: { from: [k.id, other.id].sort(), to: [other.id] } } },
        { actor: 'erin', action: 'endpoint.deleted', keyId: null, endpointId, target: path, changes: { keyIds: { from: [other.id], to: [] } } },
        { actor: 'frank', action: 'key.deleted', keyId: k.id, endpointId: null, target: regenerated?.prefix, changes: { purpose: { from: 'etl-2', to: null }, isActive: { from: false, to: null } } }
      ], 'one entry per change, newest first; a change of nothing (the same keys reassigned) writes none')
      t.ok(entries.every((e) => e.at instanceof Date && Math.abs(e.at.getTime() - Date.now()) < 60_000 + CLOCK_SLACK_MS), 'each has its time')
      t.ok(entries.every((e, i) => i === 0 || BigInt(e.id) < BigInt(entries[i - 1].id)), 'ids decrease down the list')
      const text = JSON.stringify(entries)
      for (const secret of [input.hash, 'hash-two']) t.notOk(text.includes(secret), 'no hash in any entry')
      t.same(await s.listAudit(newProject(), { limit: 100 }), [], 'another project sees none of it')
    })

    t.test('audit: deleting a key writes endpoint.updated for each endpoint it leaves, then key.deleted', async (t) => {
      const s = await store(t)
      const p = newProject()
      const [leaving, staying] = [await keyIn(s, p, 'leaving'), await keyIn(s, p, 'staying')]
      const put = async (l: EndpointLocator, keyIds: string[]): Promise<string> => {
        const result = await s.putEndpoint(l, keyIds, AUDIT)
        if (!result.ok) throw new Error('putEndpoint refused')
        return result.endpoint.id
      }
      const shared = await put(at(p, 'dataset', 1), [leaving.id, staying.id])
      const alone = await put(at(p, 'pipeline', 7, 3), [leaving.id])
      await put(at(p, 'dataset', 2), [staying.id])
      const newest = (await s.listAudit(p, { limit: 1 }))[0].id

      t.equal(await s.deleteKey(p, leaving.id, { actor: 'gina' }), true)
      const entries = (await s.listAudit(p, { limit: 100 })).filter((e) => BigInt(e.id) > BigInt(newest)).reverse()
      const left = (endpointId: string, target: string, from: string[], to: string[]): object =>
        ({ actor: 'gina', action: 'endpoint.updated', keyId: null, endpointId, target, changes: { keyIds: { from: [...from].sort(), to } } })
      t.same(entries.map(({ id, at, ...rest }) => rest), [
        ...[
          left(shared, `/api/${p.organization}/${p.project}/model/1/dataset/1`, [leaving.id, staying.id], [staying.id]),
          left(alone, `/api/${p.organization}/${p.project}/model/3/pipeline/7`, [leaving.id], [])
        ].sort((a, b) => ((a as { endpointId: string }).endpointId < (b as { endpointId: string }).endpointId ? -1 : 1)),
        { actor: 'gina', action: 'key.deleted', keyId: leaving.id, endpointId: null, target: leaving.prefix, changes: { purpose: { from: 'leaving', to: null }, isActive: { from: true, to: null } } }
      ], 'the endpoints it left, by id, with their keys before and after; then the key; nothing for the endpoint it was not on')
      t.same((await s.getEndpoint(at(p, 'dataset', 1)))?.keys.map((k) => k.id), [staying.id], 'as the endpoint now reads')
      t.equal(await s.deleteKey(p, leaving.id, AUDIT), false)
      t.equal((await s.listAudit(p, { limit: 100 })).filter((e) => BigInt(e.id) > BigInt(newest)).length, 3, 'a second delete writes nothing')
    })

    t.test('audit: refused changes write nothing; pages go back with before; pruneAudit', async (t) => {
      const s = await emptyStore(t)
      const p = newProject()
      const k = await keyIn(s, p)
      const taken = await keyIn(s, newProject())
      const l = at(p)
      const count = async (): Promise<number> => (await s.listAudit(p, { limit: 1000 })).length
      const start = await count()
      t.equal(await s.updateKey(p, randomUUID(), { purpose: 'x' }, AUDIT), null)
      t.equal(await s.deleteKey(p, randomUUID(), AUDIT), false)
      t.equal(await s.deleteEndpoint(l, AUDIT), false)
      await s.replaceKeySecret(p, k.id, { prefix: taken.prefix, hash: 'h' }, AUDIT).catch(() => {})
      t.same(await s.putEndpoint(l, ['nope'], AUDIT), { ok: false, unknownKeyIds: ['nope'] }, 'an unknown key id is refused')
      await s.createKey({ ...newKey(p), prefix: taken.prefix }, AUDIT).catch(() => {})
      t.same(await s.updateKey(p, k.id, {}, AUDIT), await s.getKey(p, k.id), 'an empty patch')
      t.same(await s.updateKey(p, k.id, { purpose: k.purpose, isActive: k.isActive, expiresAt: null }, AUDIT), await s.getKey(p, k.id), 'a patch to the same values')
      t.equal(await count(), start, 'none of these wrote an entry')

      for (let i = 0; i < 7; i++) await s.updateKey(p, k.id, { purpose: `p${i}` }, AUDIT)
      const all = await s.listAudit(p, { limit: 100 })
      const pages: string[][] = []
      let before: string | undefined
      for (;;) {
        const page = await s.listAudit(p, { before, limit: 3 })
        if (page.length === 0) break
        pages.push(page.map((e) => e.id))
        before = page[page.length - 1].id
      }
      t.same(pages.flat(), all.map((e) => e.id), 'pages of 3 with before walk the whole log once, newest first')
      t.same(pages.map((x) => x.length), [3, 3, 2], `${all.length} entries`)

      const other = newProject()
      await keyIn(s, other)
      t.equal(await s.pruneAudit(new Date(Date.now() - 3_600_000)), 0, 'none is an hour old')
      t.same((await s.listAudit(p, { limit: 1000 })).map((e) => e.id), all.map((e) => e.id), 'so every entry stays')
      await sleep(20)
      t.equal(await s.pruneAudit(new Date(Date.now() + CLOCK_SLACK_MS)), all.length + 2, 'all older than a time after them, two of other projects too')
      t.equal(await count(), 0, 'gone')
      t.same(await s.listAudit(other, { limit: 10 }), [])
    })

    // The plugin releases with its token after a claim call failed, not knowing
    // whether the claim was written: the token alone decides what goes.
    t.test('idempotency: release frees only the claim its token made', async (t) => {
      const [a, b] = await twoStores(t)
      const endpoint = { endpointId: randomUUID(), keyId: randomUUID() }
      const ttl = 60_000
      const [mine, theirs] = [randomUUID(), randomUUID()]

      t.same(await a.claimIdempotencyKey(endpoint, 'k', ttl, mine), { claimed: true })
      t.equal(await b.releaseIdempotencyKey(endpoint, 'k', theirs), false, 'another token releases nothing')
      t.same(await b.claimIdempotencyKey(endpoint, 'k', ttl, theirs), { claimed: false, response: null }, 'a claim that lost owns nothing')
      t.equal(await b.releaseIdempotencyKey(endpoint, 'k', theirs), false, 'so its token still releases nothing')
      t.equal(await b.releaseIdempotencyKey(endpoint, 'other', mine), false, 'a token is good for its own key only')
      t.equal(await b.releaseIdempotencyKey({ ...endpoint, endpointId: randomUUID() }, 'k', mine), false, 'and its own endpoint only')
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
      const endpoint = { endpointId: randomUUID(), keyId: randomUUID() }
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
        const endpoint = { endpointId: randomUUID(), keyId: randomUUID() }
        const tokens = Array.from({ length: 16 }, () => randomUUID())
        const claims = await Promise.all(tokens.map(async (token, i) =>
          (i % 2 === 0 ? a : b).claimIdempotencyKey(endpoint, `key-${round}`, 60_000, token)))
        t.equal(claims.filter((c) => c.claimed).length, 1, `round ${round}: one winner`)
        t.same(claims.filter((c) => !c.claimed), Array(15).fill({ claimed: false, response: null }), 'the others wait')
        const released = await Promise.all(tokens.map(async (token) => a.releaseIdempotencyKey(endpoint, `key-${round}`, token)))
        t.same(released, claims.map((c) => c.claimed), 'only the winner\'s token releases')
      }
      // An expired record: again one winner among the handles. The ttl must
      // outlast the spread of the claims, or a late one rightly wins anew: a
      // loaded CI machine once spread them over more than 300 ms, so 2 s.
      const endpoint = { endpointId: randomUUID(), keyId: randomUUID() }
      await a.claimIdempotencyKey(endpoint, 'old', 60_000, randomUUID())
      await sleep(2200)
      const claims = await Promise.all(Array.from({ length: 16 }, async (_, i) =>
        (i % 2 === 0 ? a : b).claimIdempotencyKey(endpoint, 'old', 2000, randomUUID())))
      t.equal(claims.filter((c) => c.claimed).length, 1, 'one winner takes over an expired record')
    })

    if (options.shared === true) {
      t.test('a write through one handle is seen by the next read through another', async (t) => {
        const [a, b] = await twoStores(t)
        const p = newProject()
        const k = await keyIn(a, p)
        const l = at(p)
        await a.putEndpoint(l, [k.id], AUDIT)
        t.equal((await b.findEndpointKey(l, k.prefix))?.key?.isActive, true)
        await a.updateKey(p, k.id, { isActive: false }, AUDIT)
        t.equal((await b.findEndpointKey(l, k.prefix))?.key?.isActive, false, 'disable')
        const prefix = randomAlphanumeric(10)
        await a.replaceKeySecret(p, k.id, { prefix, hash: 'h' }, AUDIT)
        t.equal((await b.findEndpointKey(l, k.prefix))?.key, null, 'regenerate: old prefix')
        await a.deleteKey(p, k.id, AUDIT)
        t.equal((await b.findEndpointKey(l, prefix))?.key, null, 'delete')
        await a.deleteEndpoint(l, AUDIT)
        t.equal(await b.findEndpointKey(l, null), null, 'endpoint delete')
      })
    }

    /** A link's row as the plugin would write it, of `key` on `endpointId`. */
    function newLink (key: ApiKeyRecord, endpointId: string, expiresInMs = 3_600_000): NewLink {
      return {
        id: randomAlphanumeric(22),
        keyId: key.id,
        keyPrefix: key.prefix,
        endpointId,
        params: { format: 'csv', entity: 'orders', limit: '10' },
        expiresAt: new Date(Date.now() + expiresInMs)
      }
    }

    t.test('links: createLink, findLinkUse, listLinks and revokeLink, each in its project only, audited', async (t) => {
      const [a, b] = await twoStores(t)
      const p = newProject()
      const other = newProject()
      const k = await keyIn(a, p)
      const k2 = await keyIn(a, p)
      const l = at(p)
      const { endpoint } = await a.putEndpoint(l, [k.id], AUDIT) as { endpoint: { id: string } }
      const input = newLink(k, endpoint.id)
      const before = Date.now()
      const created = await a.createLink(p, input, { actor: `key ${k.prefix}` })
      t.ok(created !== null)
      const link = created as LinkRecord
      t.same(Object.keys(link).sort(), ['createdAt', 'endpointId', 'expiresAt', 'id', 'keyId', 'params', 'revokedAt'], 'never the key prefix nor a token')
      t.equal(link.id, input.id)
      t.same(link.params, input.params, 'params come back as written')
      t.equal(link.expiresAt.getTime(), input.expiresAt.getTime())
      t.equal(link.revokedAt, null)
      t.ok(Math.abs(link.createdAt.getTime() - before) < CLOCK_SLACK_MS)
      t.equal(await a.createLink(other, newLink(k, endpoint.id), AUDIT), null, 'a key of another project: nothing written')

      t.same(await b.findLinkUse(link.id), {
        revokedAt: null,
        keyPrefix: k.prefix,
        key: { id: k.id, prefix: k.prefix, isActive: true, expiresAt: null, limits: null, bytesToday: 0 },
        assigned: true,
        endpoint: { id: endpoint.id, ...l }
      }, 'another instance reads the link, its key and its endpoint')
      t.equal(await b.findLinkUse('no-such-link'), null)

      // Made in a later millisecond than the first: two links of one millisecond are equally new,
      // and their order falls to their random ids.
      while (Date.now() <= link.createdAt.getTime()) await sleep(1)
      const second = await a.createLink(p, newLink(k2, endpoint.id), AUDIT) as LinkRecord
      t.same((await b.listLinks(p, { limit: 10 })).map((x) => x.id), [second.id, link.id], 'newest first')
      t.same((await b.listLinks(p, { keyId: k.id, limit: 10 })).map((x) => x.id), [link.id], 'one key\'s')
      t.same((await b.listLinks(p, { limit: 1 })).map((x) => x.id), [second.id], 'limit')
      t.same(await b.listLinks(other, { limit: 10 }), [], 'another project sees none')

      t.equal(await b.revokeLink(other, link.id, AUDIT), null, 'another project cannot revoke it')
      t.equal(await b.revokeLink(p, 'no-such-link', AUDIT), null)
      const revoked = await b.revokeLink(p, link.id, { actor: 'erin' }) as LinkRecord
      t.ok(revoked.revokedAt instanceof Date)
      t.equal((await a.findLinkUse(link.id))?.revokedAt?.getTime(), revoked.revokedAt?.getTime(), 'the first instance sees the revocation')
      const again = await a.revokeLink(p, link.id, AUDIT) as LinkRecord
      t.equal(again.revokedAt?.getTime(), revoked.revokedAt?.getTime(), 'a second revocation keeps the first time')

      const entries = (await a.listAudit(p, { limit: 50 })).filter((e) => e.action.startsWith('link.'))
      t.same(entries.map((e) => [e.action, e.actor, e.keyId, e.endpointId, e.target]), [
        ['link.revoked', 'erin', k.id, endpoint.id, link.id],
        ['link.created', 'contract', k2.id, endpoint.id, second.id],
        ['link.created', `key ${k.prefix}`, k.id, endpoint.id, link.id]
      ], 'one entry per change, the second revocation none')
      t.same(entries[2].changes, { params: { from: null, to: input.params }, expiresAt: { from: null, to: input.expiresAt.toISOString() } })
    })

    t.test('links: a key that is disabled, regenerated, unassigned or deleted, and a deleted endpoint, show in findLinkUse', async (t) => {
      const [a, b] = await twoStores(t)
      const p = newProject()
      const k = await keyIn(a, p)
      const spare = await keyIn(a, p)
      const l = at(p)
      const { endpoint } = await a.putEndpoint(l, [k.id, spare.id], AUDIT) as { endpoint: { id: string } }
      const link = await a.createLink(p, newLink(k, endpoint.id), AUDIT) as LinkRecord
      await a.updateKey(p, k.id, { isActive: false, expiresAt: new Date(Date.UTC(2040, 0, 1)) }, AUDIT)
      t.same((await b.findLinkUse(link.id))?.key, { id: k.id, prefix: k.prefix, isActive: false, expiresAt: Date.UTC(2040, 0, 1), limits: null, bytesToday: 0 })
      const prefix = randomAlphanumeric(10)
      await a.replaceKeySecret(p, k.id, { prefix, hash: 'h' }, AUDIT)
      const use = await b.findLinkUse(link.id)
      t.equal(use?.keyPrefix, k.prefix, 'the prefix at minting stays')
      t.equal(use?.key.prefix, prefix, 'the key\'s new prefix shows')
      await a.removeEndpointKey(l, k.id, AUDIT)
      t.equal((await b.findLinkUse(link.id))?.assigned, false, 'unassigned')
      await a.deleteEndpoint(l, AUDIT)
      t.equal((await b.findLinkUse(link.id))?.endpoint, null, 'endpoint deleted: the link stays, without it')
      await a.deleteKey(p, k.id, AUDIT)
      t.equal(await b.findLinkUse(link.id), null, 'the link goes with its key')
      t.same(await b.listLinks(p, { limit: 10 }), [])
    })

    t.test('links: pruneLinks deletes those that expired before the time given, and answers how many', async (t) => {
      const s = await emptyStore(t)
      const p = newProject()
      const k = await keyIn(s, p)
      const { endpoint } = await s.putEndpoint(at(p), [k.id], AUDIT) as { endpoint: { id: string } }
      const old = await s.createLink(p, { ...newLink(k, endpoint.id), expiresAt: new Date(Date.UTC(2020, 0, 1)) }, AUDIT) as LinkRecord
      const live = await s.createLink(p, newLink(k, endpoint.id), AUDIT) as LinkRecord
      t.equal(await s.pruneLinks(new Date(Date.UTC(2020, 0, 1))), 0, 'expiring at the time given: kept')
      t.equal(await s.pruneLinks(new Date(Date.UTC(2021, 0, 1))), 1)
      t.equal(await s.findLinkUse(old.id), null)
      t.same((await s.listLinks(p, { limit: 10 })).map((l) => l.id), [live.id])
    })

    t.test('link secrets: added once by id, listed oldest first by every instance, deleted', async (t) => {
      const [a, b] = await twoStores(t)
      const older = { id: randomAlphanumeric(12), secret: randomAlphanumeric(43), createdAt: new Date(Date.now() - 60_000) }
      const newer = { id: randomAlphanumeric(12), secret: randomAlphanumeric(43), createdAt: new Date() }
      await a.addLinkSecret(newer)
      await b.addLinkSecret(older)
      await b.addLinkSecret({ ...older, secret: 'another' })
      const mine = (await b.listLinkSecrets()).filter((x) => x.id === older.id || x.id === newer.id)
      t.same(mine.map((x) => [x.id, x.secret, x.createdAt.getTime()]), [
        [older.id, older.secret, older.createdAt.getTime()], [newer.id, newer.secret, newer.createdAt.getTime()]
      ], 'oldest first; adding an id again changes nothing')
      t.equal(await a.deleteLinkSecret(older.id), true)
      t.equal(await a.deleteLinkSecret(older.id), false)
      t.notOk((await b.listLinkSecrets()).some((x) => x.id === older.id))
    })

    t.test('close releases the store: closing twice is fine, later calls reject', async (t) => {
      const s = await open()
      const p = newProject()
      await s.createKey(newKey(p), AUDIT)
      await s.close()
      await s.close()
      await t.rejects(s.listKeys(p), 'listKeys after close')
      // (a store may answer at once: then it throws rather than rejects)
      await t.rejects(async () => s.findEndpointKey(at(p), null), 'findEndpointKey after close')
      await t.rejects(s.applyUsage({ calls: new Map([['x', 1]]), lastUsed: new Map(), counts: new Map() }), 'applyUsage after close')
    })
  })
}
