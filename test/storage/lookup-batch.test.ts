import t from 'tap'
import { LookupBatch } from '../../lib/storage/lookup-batch.js'

/** A run whose batches stay in flight until answered by hand. */
function heldRun (): { batches: number[][], answer: (i: number, err?: Error) => void, run: (items: number[]) => Promise<string[]> } {
  const batches: number[][] = []
  const pending: Array<{ resolve: (r: string[]) => void, reject: (err: Error) => void }> = []
  return {
    batches,
    answer: (i, err) => {
      if (err === undefined) pending[i].resolve(batches[i].map((n) => `answer ${n}`))
      else pending[i].reject(err)
    },
    run: async (items) => {
      batches.push(items)
      return new Promise<string[]>((resolve, reject) => { pending.push({ resolve, reject }) })
    }
  }
}

const settle = async (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

t.test('a lone lookup goes at once; those made meanwhile go together, each answered with its own', async (t) => {
  const held = heldRun()
  const batch = new LookupBatch(held.run, 64)
  const first = batch.lookup(1)
  t.same(held.batches, [[1]], 'no wait when nothing is in flight')
  const later = [2, 3, 4].map((n) => batch.lookup(n))
  t.same(held.batches, [[1]], 'the others wait for the batch in flight')
  t.equal(batch.waiting, 3)
  held.answer(0)
  t.equal(await first, 'answer 1')
  await settle()
  t.same(held.batches, [[1], [2, 3, 4]], 'then go in one batch, in their order')
  held.answer(1)
  t.same(await Promise.all(later), ['answer 2', 'answer 3', 'answer 4'])
  t.equal(batch.waiting, 0)
})

t.test('no more than maxBatch - 1 lookups wait: a full batch goes at once', async (t) => {
  const held = heldRun()
  const batch = new LookupBatch(held.run, 3)
  const answers = [1, 2, 3, 4, 5, 6, 7, 8].map((n) => batch.lookup(n))
  t.same(held.batches, [[1], [2, 3, 4], [5, 6, 7]])
  t.equal(batch.waiting, 1)
  held.answer(0)
  await settle()
  t.same(held.batches.length, 3, 'the last one waits until no batch is in flight')
  held.answer(1)
  held.answer(2)
  await settle()
  t.same(held.batches[3], [8])
  held.answer(3)
  t.same(await Promise.all(answers), [1, 2, 3, 4, 5, 6, 7, 8].map((n) => `answer ${n}`))
})

t.test('a failed batch rejects its own lookups only', async (t) => {
  const held = heldRun()
  const batch = new LookupBatch(held.run, 64)
  const first = batch.lookup(1)
  const second = [batch.lookup(2), batch.lookup(3)]
  held.answer(0, new Error('connection lost'))
  await t.rejects(first, { message: 'connection lost' })
  await settle()
  held.answer(1)
  t.same(await Promise.all(second), ['answer 2', 'answer 3'])
  const thrown = new LookupBatch<number, string>(() => { throw new Error('sync') })
  await t.rejects(thrown.lookup(1), { message: 'sync' }, 'a run that throws rejects as well')
  t.same(await new LookupBatch<number, string>(async (items) => items.map(String)).lookup(5), '5', 'and the next batch goes')
})

t.test('a run that answers the wrong number of lookups rejects them', async (t) => {
  const batch = new LookupBatch<number, string>(async (items) => items.length === 1 ? [] : ['one'])
  const answers = [batch.lookup(1), batch.lookup(2), batch.lookup(3)]
  await t.rejects(answers[0], { message: 'LookupBatch: 0 answers to 1 lookups' })
  await t.rejects(answers[1], { message: 'LookupBatch: 1 answers to 2 lookups' })
  await t.rejects(answers[2])
  t.throws(() => new LookupBatch(async () => [], 0), TypeError)
})
