import t from 'tap'
import { PrefixTakenError, SqliteStorage, UsageInDoubtError } from '../../lib/index.js'
import { BadRequestError } from '../../lib/errors.js'
import { guardStorage } from '../../lib/storage/guarded-storage.js'

// guardStorage (lib/storage/guarded-storage.ts): what the routes see of a
// storage. A failure becomes 500 `Internal server error` with the storage's
// error as its cause; what the Storage contract throws on purpose, and the
// plugin's own errors, pass unchanged.

const project = { organization: 'acme', project: 'shop' }

t.test('a failure becomes FDE_INTERNAL with its cause; contract and catalogue errors pass', async (t) => {
  const storage = new SqliteStorage({ filename: ':memory:' })
  t.teardown(() => storage.close())
  const guarded = guardStorage(storage)
  t.equal((guarded as SqliteStorage).db, storage.db, 'other properties are the storage\'s own')
  t.same(await guarded.listKeys(project), [], 'a call that works answers as the storage does')

  const driverError = Object.assign(new Error('no such table: api_keys'), { code: 'SQLITE_ERROR' })
  const failures: Array<[string, unknown, (err: any) => boolean]> = [
    ['a driver error', driverError, (err) => err.code === 'FDE_INTERNAL' && err.statusCode === 500 && err.message === 'Internal server error' && err.cause === driverError],
    ['PrefixTakenError', new PrefixTakenError(), (err) => err instanceof PrefixTakenError],
    ['UsageInDoubtError', new UsageInDoubtError('lost', async () => 'written'), (err) => err instanceof UsageInDoubtError],
    ['a catalogue error from a callback', new BadRequestError('no'), (err) => err.code === 'FDE_BAD_REQUEST'],
    ['a thrown string', 'bare', (err) => err.code === 'FDE_INTERNAL' && err.cause === 'bare']
  ]
  for (const [what, thrown, expected] of failures) {
    Object.assign(storage, { listKeys: async () => { throw thrown } })
    const err = await guarded.listKeys(project).then(() => null, (e: unknown) => e)
    t.ok(err !== null && expected(err), `${what}: async`)
    Object.assign(storage, { getKey: () => { throw thrown } })
    let syncErr: unknown = null
    try { await guarded.getKey(project, 'x') } catch (e) { syncErr = e }
    t.ok(syncErr !== null && expected(syncErr), `${what}: thrown at once`)
  }
})
