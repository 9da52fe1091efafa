import { existsSync, readdirSync } from 'node:fs'
import t from 'tap'
import { BatchPacker } from '../../lib/formats/column-batch.js'
import { ParquetEncoders } from '../../lib/formats/parquet-encoders.js'
import { parquetSchemas } from '../../lib/formats/parquet.js'
import type { Entity } from '../../lib/index.js'

// The pool of Parquet encoding threads: its slots and wait line, and close.

const entity: Entity = { name: 'e', columns: [{ name: 'id', type: 'integer' }] }

function job () {
  const packer = new BatchPacker(entity)
  for (let i = 0; i < 100; i++) packer.push([i])
  return { schema: parquetSchemas(entity).encoding, batch: packer.finish(), offset: 4, codec: 'SNAPPY' as const }
}

t.test('two slots per thread; then a wait in arrival order; a download not started is refused when the line is full', async (t) => {
  const pool = new ParquetEncoders({ threads: 1, maxWaiting: 1, batchBytes: 1024 * 1024 })
  t.teardown(() => pool.close())
  const never = new AbortController().signal
  const first = await pool.acquire(false, never)
  const second = await pool.acquire(false, never)
  t.same(pool.usage().slotsInUse, 2)
  const order: string[] = []
  const third = pool.acquire(false, never).then((release) => { order.push('third'); return release })
  await t.rejects(pool.acquire(false, never), { code: 'FDE_PARQUET_ENCODERS_BUSY', statusCode: 503, headers: { 'retry-after': '5' } },
    'a download not started: 503 when the line is full')
  const started = pool.acquire(true, never).then((release) => { order.push('started'); return release })
  const leaving = new AbortController()
  const gone = pool.acquire(true, leaving.signal)
  leaving.abort()
  await t.rejects(gone, /Download stopped/, 'a wait ends when its client leaves')
  first()
  first() // a second release gives nothing back
  second()
  ;(await third)()
  ;(await started)()
  t.same(order, ['third', 'started'], 'in arrival order')
  t.same(pool.usage().slotsInUse, 0)
})

t.test('close stops the threads; encoding after it fails', async (t) => {
  const pool = new ParquetEncoders({ threads: 2, maxWaiting: 4, batchBytes: 1024 * 1024 })
  const [a, b] = await Promise.all([pool.encode(job()), pool.encode(job())])
  t.ok(a.bytes.length > 0 && b.bytes.length > 0)
  t.equal(a.rowGroup.num_rows, 100n)
  t.equal(pool.usage().threads, 2)
  await pool.close()
  t.equal(pool.usage().threads, 0, 'no thread left')
  await t.rejects(pool.encode(job()), /closed/)
  await t.rejects(pool.acquire(false, new AbortController().signal), /closed/)
})

t.test('the plugin closes its threads with Fastify', async (t) => {
  const { buildApp, createKey, assignKeys, DATASET_URL } = await import('../helper.js')
  const { app } = await buildApp(t)
  const { id, key } = await createKey(app)
  await assignKeys(app, 'dataset', [id])
  // The process's threads, as Linux lists them.
  const threads = (): number => readdirSync('/proc/self/task').length
  if (!existsSync('/proc/self/task')) { t.comment('no /proc here to count threads'); return }
  const before = threads()
  t.equal((await app.inject({ url: `${DATASET_URL}?api_key=${key}&format=parquet&entity=orders` })).statusCode, 200)
  t.ok(threads() > before, 'an encoding thread runs')
  await app.close()
  t.ok(threads() <= before, 'and stops with Fastify')
})
