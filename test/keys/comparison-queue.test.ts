import t from 'tap'
import { ComparisonQueue } from '../../lib/keys/comparison-queue.js'

// The bcrypt comparison queue (issue "9 ·"): one line per key, served in
// turn, each line and the whole queue bounded.

/** A queue and a log of the comparisons that got their slot, in order. */
function queue (maxRunning: number, maxWaiting: number, maxWaitingPerKey: number) {
  const q = new ComparisonQueue({ maxRunning, maxWaiting, maxWaitingPerKey })
  const started: string[] = []
  /** asks for a slot for `key`, logging `label` when granted; false when refused */
  const ask = (key: string, label = key): boolean => {
    const turn = q.acquire(key)
    if (turn === null) return false
    turn.then(() => started.push(label), () => {})
    return true
  }
  return { q, started, ask }
}

const settle = async (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

t.test('free slots are granted at once; the rest wait', async (t) => {
  const { q, started, ask } = queue(2, 10, 10)
  t.ok(ask('a', 'a1'))
  t.ok(ask('a', 'a2'))
  t.ok(ask('b', 'b1'))
  await settle()
  t.same(started, ['a1', 'a2'])
  t.same([q.running, q.waiting], [2, 1])
  q.release()
  await settle()
  t.same(started, ['a1', 'a2', 'b1'], 'a freed slot is handed to the one waiting')
  t.same([q.running, q.waiting], [2, 0])
  q.release()
  q.release()
  t.same([q.running, q.waiting], [0, 0], 'with nobody waiting, a release frees the slot')
})

t.test('lines are served in turn: a new key waits for one comparison per key ahead, not for the whole flood', async (t) => {
  const { q, started, ask } = queue(1, 100, 100)
  t.ok(ask('flood', 'running'))
  for (let i = 1; i <= 5; i++) t.ok(ask('flood', `flood${i}`))
  t.ok(ask('b', 'b1'))
  t.ok(ask('c', 'c1'))
  t.ok(ask('b', 'b2'))
  for (let i = 0; i < 8; i++) {
    q.release()
    await settle()
  }
  t.same(started, ['running', 'flood1', 'b1', 'c1', 'flood2', 'b2', 'flood3', 'flood4', 'flood5'])
  t.same([q.running, q.waiting], [1, 0])
})

t.test('a line that empties and fills again joins the end of the turn', async (t) => {
  const { q, started, ask } = queue(1, 100, 1)
  ask('flood', 'running')
  ask('flood', 'flood1')
  ask('b', 'b1')
  q.release() // flood1 runs; its line is empty
  await settle()
  t.ok(ask('flood', 'flood2'), 'the flood takes its one place again at once')
  ask('c', 'c1')
  for (let i = 0; i < 3; i++) {
    q.release()
    await settle()
  }
  t.same(started, ['running', 'flood1', 'b1', 'flood2', 'c1'])
})

t.test('each line holds maxWaitingPerKey; other keys still get places', async (t) => {
  const { q, ask } = queue(1, 10, 3)
  ask('flood')
  const flood = Array.from({ length: 20 }, () => ask('flood'))
  t.same(flood.filter(Boolean).length, 3, 'three wait, the rest are refused')
  t.equal(q.waiting, 3)
  for (const key of ['b', 'c', 'd']) t.ok(ask(key), `${key} gets a place`)
  t.equal(q.waiting, 6)
})

t.test('the queue as a whole holds maxWaiting: keys beyond it are refused', async (t) => {
  const { q, started, ask } = queue(1, 4, 2)
  ask('x', 'running')
  t.same(['a', 'a', 'b', 'b'].map((k) => ask(k)), [true, true, true, true])
  t.notOk(ask('c'), 'full: a new key is refused too')
  t.equal(q.waiting, 4)
  q.release()
  await settle()
  t.ok(ask('c', 'c1'), 'a place freed is a place for anyone')
  t.notOk(ask('d'))
  for (let i = 0; i < 4; i++) {
    q.release()
    await settle()
  }
  t.same(started, ['running', 'a', 'b', 'a', 'c1', 'b'])
  t.same([q.running, q.waiting], [1, 0])
})

t.test('maxWaiting 0: only running comparisons, no line', async (t) => {
  const { q, ask } = queue(1, 0, 1)
  t.ok(ask('a'))
  t.notOk(ask('b'))
  q.release()
  t.ok(ask('b'))
  t.same([q.running, q.waiting], [1, 0])
})

t.test('running never exceeds maxRunning, however slots are asked for and released', async (t) => {
  const { q, ask } = queue(3, 50, 4)
  let max = 0
  const keys = ['a', 'b', 'c', 'd', 'e']
  // a fixed pseudo-random walk, so a failure can be replayed
  let seed = 7
  const next = (): number => (seed = (seed * 1103515245 + 12345) % 2 ** 31)
  let granted = 0
  let released = 0
  for (let i = 0; i < 2000; i++) {
    if (next() % 3 !== 0) {
      if (ask(keys[next() % keys.length])) granted++
    } else if (released < granted && q.running > 0) {
      q.release()
      released++
    }
    max = Math.max(max, q.running)
    if (q.waiting > 0 && q.running < 3) t.fail('a slot is free while comparisons wait')
    if (q.waiting > 20) t.fail('more than five lines of four wait')
  }
  t.equal(max, 3)
  t.equal(q.running + q.waiting, granted - released, 'every grant is running or waiting until released')
})
