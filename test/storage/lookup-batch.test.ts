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

const turn = async (): Promise<void> => new Promise((resolve) => setImmediate(resolve))
/** Two turns of the event loop: a batch that ended in this one has sent the next by then. */
const settle = async (): Promise<void> => { await turn(); await turn() }

t.test('a lookup goes at the end of its turn with those of the same turn; those made meanwhile go together, each answered with its own', async (t) => {
  const held = heldRun()
  const batch = new LookupBatch(held.run, 64)
  const first = batch.lookup(1)
  const sameTurn = batch.lookup(2)
  t.same(held.batches, [], 'nothing goes before the turn ends')
  await settle()
  t.same(held.batches, [[1, 2]], 'the turn\'s lookups go in one batch, once nothing is in flight')
  const later = [3, 4, 5].map((n) => batch.lookup(n))
  await settle()
  t.same(held.batches, [[1, 2]], 'the others wait for the batch in flight')
  t.equal(batch.waiting, 3)
  held.answer(0)
  t.same(await Promise.all([first, sameTurn]), ['answer 1', 'answer 2'])
  const endTurn = batch.lookup(6)
  await settle()
  t.same(held.batches, [[1, 2], [3, 4, 5, 6]], 'then go in one batch, in their order, with those of the turn the batch ended in')
  held.answer(1)
  t.same(await Promise.all([...later, endTurn]), ['answer 3', 'answer 4', 'answer 5', 'answer 6'])
  t.equal(batch.waiting, 0)
  await settle()
  t.equal(held.batches.length, 2, 'no batch goes with nothing to ask')
  const quiet = batch.lookup(7)
  await settle()
  t.same(held.batches[2], [7], 'a lookup on a quiet batch goes at the end of its turn, alone')
  held.answer(2)
  t.equal(await quiet, 'answer 7')
})

t.test('no more than maxBatch - 1 lookups wait: a full batch goes at once', async (t) => {
  const held = heldRun()
  const batch = new LookupBatch(held.run, 3)
  const answers = [1, 2, 3, 4, 5, 6, 7, 8].map((n) => batch.lookup(n))
  t.same(held.batches, [[1, 2, 3], [4, 5, 6]], 'full batches go without waiting for the turn to end')
  t.equal(batch.waiting, 2)
  await settle()
  t.same(held.batches.length, 2, 'the rest wait until no batch is in flight')
  held.answer(0)
  await settle()
  t.same(held.batches.length, 2)
  held.answer(1)
  await settle()
  t.same(held.batches[2], [7, 8])
  held.answer(2)
  t.same(await Promise.all(answers), [1, 2, 3, 4, 5, 6, 7, 8].map((n) => `answer ${n}`))
})

t.test('a failed batch rejects its own lookups only', async (t) => {
  const held = heldRun()
  const batch = new LookupBatch(held.run, 64)
  const first = batch.lookup(1)
  await settle()
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
  await t.rejects(batch.lookup(1), { message: 'LookupBatch: 0 answers to 1 lookups' })
  const together = [batch.lookup(2), batch.lookup(3), batch.lookup(4)]
  for (const answer of together) await t.rejects(answer, { message: 'LookupBatch: 1 answers to 3 lookups' })
  t.throws(() => new LookupBatch(async () => [], 0), TypeError)
})
