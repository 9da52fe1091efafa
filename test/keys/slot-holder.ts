import pino from 'pino'
import { PgStorage } from '../../lib/storage/pg-storage.js'
import { SqliteStorage } from '../../lib/storage/sqlite-storage.js'
import { DownloadSlots } from '../../lib/keys/download-slots.js'

// An instance that holds one download slot and renews its lease until it is
// killed: test/keys/key-limits-pg.test.ts kills it with SIGKILL, which runs
// no close, and waits for the lease to end by itself.
//   node --import tsx test/keys/slot-holder.ts <pg url | sqlite file> <schema> <keyId> <leaseMs>

const [where, schema, keyId, leaseMs] = process.argv.slice(2)
const storage = where.startsWith('postgres') ? new PgStorage({ connectionString: where, schema }) : new SqliteStorage({ filename: where })
const slots = new DownloadSlots(storage, Number(leaseMs), pino({ level: 'silent' }))
const slot = await slots.claim(keyId, 1)
if (slot === null) {
  process.stdout.write('refused\n')
  process.exit(1)
}
process.stdout.write(`held ${slot.leaseId}\n`)
// The slots' timer is unref'd: this one keeps the process alive.
setInterval(() => {}, 60_000)
