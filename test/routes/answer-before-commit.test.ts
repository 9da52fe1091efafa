import { Writable } from 'node:stream'
import type { InjectOptions } from 'fastify'
import t, { type Test } from 'tap'
import { PgStorage, SqliteStorage, type Storage } from '../../lib/index.js'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'
import { freshSchema, pgAvailable } from '../pg.js'

// No answer fails after its write (issue 12): each management write makes its
// answer inside its transaction, checked against the answer's schema, so an
// answer that cannot be made rolls the write back. Here a trigger makes the
// stored record unfit for its answer (an expiry past the year 9999, a date
// the answer cannot write), as a row from an older version could be; each
// write then answers 500 `Internal server error` and nothing changed. And the
// issue's reproductions are 400s that change nothing, on both stores.

const P = '/api-keys/acme/shop'
const url = await pgAvailable(t)
// 9999-12-31T23:59:59-05:00, as PostgreSQL and SQLite store it.
const LATE_MS = Date.UTC(9999, 11, 31, 23, 59, 59) + 5 * 3_600_000
const LATE_TEXT = '10000-01-01T04:59:59Z'

interface Faults {
  /** makes the expiry of every key written from now on unfit for an answer */
  spoilKeys (): Promise<void>
  /** makes the creation time of every endpoint made from now on unfit for an answer */
  spoilEndpoints (): Promise<void>
  /** makes the creation time of an endpoint unfit for an answer when one of its keys is added or taken off */
  spoilAssignments (): Promise<void>
  clear (): Promise<void>
}

function sqliteFaults (storage: SqliteStorage): Faults {
  const db = storage.db
  return {
    spoilKeys: async () => {
      db.exec(`CREATE TRIGGER spoil_key_insert AFTER INSERT ON api_keys BEGIN UPDATE api_keys SET expires_at = ${LATE_MS} WHERE id = NEW.id; END;
               CREATE TRIGGER spoil_key_update AFTER UPDATE OF purpose, is_active, prefix ON api_keys BEGIN UPDATE api_keys SET expires_at = ${LATE_MS} WHERE id = NEW.id; END;`)
    },
    spoilEndpoints: async () => {
      db.exec(`CREATE TRIGGER spoil_endpoint AFTER INSERT ON endpoints BEGIN UPDATE endpoints SET created_at = ${LATE_MS} WHERE id = NEW.id; END;`)
    },
    spoilAssignments: async () => {
      db.exec(`CREATE TRIGGER spoil_assign AFTER INSERT ON endpoint_keys BEGIN UPDATE endpoints SET created_at = ${LATE_MS} WHERE id = NEW.endpoint_id; END;
               CREATE TRIGGER spoil_unassign AFTER DELETE ON endpoint_keys BEGIN UPDATE endpoints SET created_at = ${LATE_MS} WHERE id = OLD.endpoint_id; END;`)
    },
    clear: async () => {
      for (const name of ['spoil_key_insert', 'spoil_key_update', 'spoil_endpoint', 'spoil_assign', 'spoil_unassign']) db.exec(`DROP TRIGGER IF EXISTS ${name}`)
    }
  }
}

function pgFaults (storage: PgStorage): Faults {
  const s = `"${storage.schema}"`
  const q = async (sql: string): Promise<void> => { await storage.pool.query(sql) }
  return {
    spoilKeys: async () => {
      await q(`CREATE FUNCTION ${s}.spoil_key () RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.expires_at := '${LATE_TEXT}'; RETURN NEW; END $$;
               CREATE TRIGGER spoil_key BEFORE INSERT OR UPDATE OF purpose, is_active, prefix ON ${s}.api_keys FOR EACH ROW EXECUTE FUNCTION ${s}.spoil_key ()`)
    },
    spoilEndpoints: async () => {
      await q(`CREATE FUNCTION ${s}.spoil_endpoint () RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.created_at := '${LATE_TEXT}'; RETURN NEW; END $$;
               CREATE TRIGGER spoil_endpoint BEFORE INSERT ON ${s}.endpoints FOR EACH ROW EXECUTE FUNCTION ${s}.spoil_endpoint ()`)
    },
    spoilAssignments: async () => {
      await q(`CREATE FUNCTION ${s}.spoil_assignment () RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
                 UPDATE ${s}.endpoints SET created_at = '${LATE_TEXT}' WHERE id = COALESCE(NEW.endpoint_id, OLD.endpoint_id); RETURN NULL; END $$;
               CREATE TRIGGER spoil_assignment AFTER INSERT OR DELETE ON ${s}.endpoint_keys FOR EACH ROW EXECUTE FUNCTION ${s}.spoil_assignment ()`)
    },
    clear: async () => {
      await q(`DROP TRIGGER IF EXISTS spoil_key ON ${s}.api_keys; DROP TRIGGER IF EXISTS spoil_endpoint ON ${s}.endpoints;
               DROP TRIGGER IF EXISTS spoil_assignment ON ${s}.endpoint_keys;
               DROP FUNCTION IF EXISTS ${s}.spoil_key (); DROP FUNCTION IF EXISTS ${s}.spoil_endpoint (); DROP FUNCTION IF EXISTS ${s}.spoil_assignment ();`)
    }
  }
}

const adapters: Array<[string, (t: Test) => Promise<[Storage, Faults]>]> = [
  ['SqliteStorage', async () => {
    const storage = new SqliteStorage({ filename: ':memory:' })
    return [storage, sqliteFaults(storage)]
  }]
]
if (url !== null) {
  adapters.push(['PgStorage', async (t) => {
    const storage = new PgStorage({ connectionString: url, schema: (await freshSchema(t, url)).schema })
    await storage.migrate()
    return [storage, pgFaults(storage)]
  }])
}

for (const [name, open] of adapters) {
  t.test(`${name}: a write whose answer cannot be made answers 500 and changes nothing`, async (t) => {
    const [storage, faults] = await open(t)
    const lines: Array<Record<string, any>> = []
    const stream = new Writable({ write (chunk, _encoding, done) { lines.push(JSON.parse(String(chunk))); done() } })
    const { app } = await buildApp(t, { storage }, { logger: { level: 'error', stream } })
    const k = await createKey(app, 'kept')
    await assignKeys(app, 'dataset', [k.id])
    const state = async (): Promise<unknown> => ({
      keys: (await app.inject({ url: `${P}/keys`, headers: ADMIN })).json(),
      endpoints: (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json().map((e: { calls?: number }) => ({ ...e, calls: 0 })),
      audit: (await app.inject({ url: `${P}/audit`, headers: ADMIN })).json()
    })
    const before = await state()
    const refused = async (what: string, request: InjectOptions): Promise<void> => {
      const res = await app.inject(request)
      t.same([res.statusCode, res.json()], [500, { message: 'Internal server error' }], `${what}: 500`)
      t.notOk(res.body.includes(k.key.slice(11)), `${what}: no key in the answer`)
    }

    await faults.spoilKeys()
    await refused('create a key', { method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: 'new' } })
    await refused('edit a key', { method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { purpose: 'renamed', isActive: false } })
    await refused('regenerate a key', { method: 'POST', url: `${P}/keys/${k.id}/regenerate`, headers: ADMIN })
    await faults.clear()
    await faults.spoilEndpoints()
    await refused('create an endpoint', { method: 'PUT', url: `${P}/endpoints/1/pipeline/1`, headers: ADMIN, payload: { keyIds: [k.id] } })
    await faults.clear()
    // One key on or off an endpoint (issue 18): the endpoint the change leaves cannot be answered.
    const other = await storage.createKey({ organization: 'acme', project: 'shop', prefix: 'OTHERKEY00', hash: 'h', purpose: 'other', isActive: true, expiresAt: null }, { actor: null })
    const withOther = await state()
    await faults.spoilAssignments()
    await refused('add a key to an endpoint', { method: 'POST', url: `${P}/endpoints/1/dataset/1/keys/${other.id}`, headers: ADMIN })
    await faults.clear()
    t.same(await state(), withOther, 'the key was not added')
    t.equal((await app.inject({ method: 'POST', url: `${P}/endpoints/1/dataset/1/keys/${other.id}`, headers: ADMIN })).statusCode, 200)
    const withBoth = await state()
    await faults.spoilAssignments()
    await refused('take a key off an endpoint', { method: 'DELETE', url: `${P}/endpoints/1/dataset/1/keys/${other.id}`, headers: ADMIN })
    await faults.clear()
    t.same(await state(), withBoth, 'the key was not taken off')
    t.equal((await app.inject({ method: 'DELETE', url: `${P}/endpoints/1/dataset/1/keys/${other.id}`, headers: ADMIN })).statusCode, 200)
    await app.inject({ method: 'DELETE', url: `${P}/keys/${other.id}`, headers: ADMIN })

    t.same((await state() as { keys: unknown, endpoints: unknown }).keys, (before as { keys: unknown }).keys, 'no key changed')
    t.same((await state() as { endpoints: unknown }).endpoints, (before as { endpoints: unknown }).endpoints, 'no endpoint or assignment changed')
    const use = await app.inject({ url: DATASET_URL, query: { api_key: k.key, meta: 'entities' } })
    t.equal(use.statusCode, 200, 'the key was not regenerated: its value still works')
    const failures = lines.filter((l) => l.statusCode === 500)
    t.equal(failures.length, 6, 'each logged')
    t.ok(failures.every((l) => /^the answer does not fit its schema: \/(expiresAt|createdAt) .*; nothing was changed$/.test(l.cause?.message)),
      'with why: the field that does not fit')

    // Once the fault is gone, every write works.
    t.equal((await app.inject({ method: 'POST', url: `${P}/keys/${k.id}/regenerate`, headers: ADMIN })).statusCode, 200)
    t.equal((await app.inject({ method: 'PUT', url: `${P}/endpoints/1/pipeline/1`, headers: ADMIN, payload: { keyIds: [k.id] } })).statusCode, 201)
  })

  t.test(`${name}: the issue's reproductions are 400s that change nothing`, async (t) => {
    const [storage] = await open(t)
    const { app } = await buildApp(t, { storage, maxKeyLifetime: 365 * 86_400_000 })
    const k = await createKey(app)
    const keys = async (): Promise<unknown> => (await app.inject({ url: `${P}/keys`, headers: ADMIN })).json()
    const before = await keys()
    const cases: Array<[string, InjectOptions, string]> = [
      ['a leap second', { method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: 'x', expiresAt: '2030-06-30T23:59:60Z' } },
        'body.expiresAt: must not be a leap second (:60), which cannot be stored; use :59.999'],
      ['a year past 9999 in UTC', { method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: 'x', expiresAt: '9999-12-31T23:59:59-05:00' } },
        'body.expiresAt: must fall in the years 0001 to 9999 in UTC'],
      ['a PATCH to it', { method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { expiresAt: '9999-12-31T23:59:59-05:00' } },
        'body.expiresAt: must fall in the years 0001 to 9999 in UTC'],
      ['a leap second in a PATCH', { method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { expiresAt: '2030-06-30T23:59:60Z' } },
        'body.expiresAt: must not be a leap second (:60), which cannot be stored; use :59.999'],
      ['usage from a leap second', { url: `${P}/usage?from=2030-06-30T23:59:60Z`, headers: ADMIN },
        'querystring.from: must not be a leap second (:60), which cannot be stored; use :59.999'],
      ['usage to a leap second', { url: `${P}/usage?to=2030-06-30T23:59:60Z`, headers: ADMIN },
        'querystring.to: must not be a leap second (:60), which cannot be stored; use :59.999'],
      ['audit limit 2.5', { url: `${P}/audit?limit=2.5`, headers: ADMIN }, 'querystring.limit: must be an integer in plain digits, e.g. 50'],
      ['audit limit true', { url: `${P}/audit?limit=true`, headers: ADMIN }, 'querystring.limit: must be an integer in plain digits, e.g. 50'],
      ['audit limit 0x10', { url: `${P}/audit?limit=0x10`, headers: ADMIN }, 'querystring.limit: must be an integer in plain digits, e.g. 50'],
      ['audit limit %201', { url: `${P}/audit?limit=%201`, headers: ADMIN }, 'querystring.limit: must be an integer in plain digits, e.g. 50']
    ]
    for (const [what, request, message] of cases) {
      const res = await app.inject(request)
      t.same([res.statusCode, res.json()], [400, { message }], what)
    }
    t.same(await keys(), before, 'no key made or changed')
    const audit = (await app.inject({ url: `${P}/audit`, headers: ADMIN })).json().items
    t.equal(audit.length, 1, 'and nothing audited but the first key')

    // maxKeyLifetime can no longer be slipped past with a value Date cannot hold.
    const latest = await app.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: 'bounded' } })
    t.ok(Date.parse(latest.json().expiresAt) <= Date.now() + 365 * 86_400_000, 'a new key expires within maxKeyLifetime')
  })
}

t.test('maxKeyLifetime beyond the year 9999 is held to the last storable instant', async (t) => {
  const { app } = await buildApp(t, { maxKeyLifetime: Number.MAX_SAFE_INTEGER })
  const res = await app.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: 'forever' } })
  t.same([res.statusCode, res.json().expiresAt], [201, '9999-12-31T23:59:59.999Z'])
  const later = await app.inject({ method: 'PATCH', url: `${P}/keys/${res.json().id}`, headers: ADMIN, payload: { expiresAt: '9999-12-31T23:59:59.999Z' } })
  t.same([later.statusCode, later.json().expiresAt], [200, '9999-12-31T23:59:59.999Z'])
})
