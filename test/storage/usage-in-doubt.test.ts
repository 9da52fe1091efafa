import { Writable } from 'node:stream'
import t, { type Test } from 'tap'
import { SqliteStorage, type Storage, type UsageBatch } from '../../lib/index.js'
import { UsageInDoubtError, type UsageFate } from '../../lib/index.js'
import { assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'

// A usage write whose outcome is unknown (UsageInDoubtError): the recorder
// writes nothing more until storage says what became of it, writes it again
// only if it was not written, and logs it when that can never be known.
// PostgreSQL's side is in pg-faults.test.ts.

const DATASET_1 = { organization: 'acme', project: 'shop', modelSequence: 1, type: 'dataset', resourceSequence: 1 } as const

/**
 * An app whose storage's first usage write is in doubt: it is applied or not
 * (`applied`), then `fate` answers each question in turn (an Error: rejects).
 */
async function inDoubtApp (t: Test, applied: boolean, answers: Array<UsageFate | Error>) {
  const lines: Array<Record<string, unknown>> = []
  const stream = new Writable({ write (chunk, _encoding, done) { lines.push(JSON.parse(String(chunk))); done() } })
  const real = new SqliteStorage({ filename: ':memory:' })
  let first = true
  const storage: Storage = Object.assign(Object.create(real) as Storage, {
    async applyUsage (batch: UsageBatch) {
      if (!first) return real.applyUsage(batch)
      first = false
      if (applied) await real.applyUsage(batch)
      throw new UsageInDoubtError('the answer was lost', async () => {
        const answer = answers.shift() as UsageFate | Error
        if (answer instanceof Error) throw answer
        return answer
      })
    }
  })
  const { app } = await buildApp(t, { storage, usageFlushInterval: 3_600_000 }, { logger: { level: 'error', stream } })
  const key = await createKey(app)
  await assignKeys(app, 'dataset', [key.id])
  const calls = async (n: number): Promise<void> => {
    for (let i = 0; i < n; i++) t.equal((await app.inject({ url: DATASET_URL, query: { api_key: key.key, meta: 'entities' } })).statusCode, 200)
  }
  const stored = async (): Promise<number | undefined> => (await real.getEndpoint(DATASET_1))?.calls
  return { app, calls, stored, lines }
}

t.test('written after all: nothing is written until that is known, and it is not written again', async (t) => {
  const { app, calls, stored } = await inDoubtApp(t, true, [new Error('unreachable'), new Error('unreachable'), 'written'])
  await calls(3)
  await t.rejects(app.dataEndpoints.flushUsage(), { message: 'the answer was lost' })
  await calls(2)
  await t.rejects(app.dataEndpoints.flushUsage(), { message: 'unreachable' }, 'asked, no answer')
  await t.rejects(app.dataEndpoints.flushUsage(), { message: 'unreachable' }, 'asked again, no answer')
  t.equal(await stored(), 3, 'the later calls wait')
  await app.dataEndpoints.flushUsage()
  t.equal(await stored(), 5, 'the first three once, then the later two')
})

t.test('not written: written again once that is known', async (t) => {
  const { app, calls, stored } = await inDoubtApp(t, false, [new Error('unreachable'), 'not written'])
  await calls(3)
  await t.rejects(app.dataEndpoints.flushUsage())
  await t.rejects(app.dataEndpoints.flushUsage())
  await calls(1)
  await app.dataEndpoints.flushUsage()
  t.equal(await stored(), 4)
})

t.test('never knowable: not written again, and logged as lost', async (t) => {
  const { app, calls, stored, lines } = await inDoubtApp(t, false, ['unknowable'])
  await calls(3)
  await t.rejects(app.dataEndpoints.flushUsage())
  await calls(1)
  await app.dataEndpoints.flushUsage()
  t.equal(await stored(), 1, 'only the later call')
  t.match(lines.find((l) => l.msg === 'fastify-data-endpoints: usage counters whose write cannot be confirmed are not written again'),
    { lostCalls: 3 })
})
