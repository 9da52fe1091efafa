import { createHash, randomBytes } from 'node:crypto'
import fc from 'fast-check'
import t from 'tap'
import { MEMO_SECRET_SIZE, memoDigest } from '../../lib/keys/memo-digest.js'

t.test('memoDigest is SHA-256 of its secret and the message\'s UTF-8 bytes, for ASCII and other messages', async (t) => {
  const secret = randomBytes(MEMO_SECRET_SIZE).map((b) => b & 0x7f)
  const digest = memoDigest(secret)
  const messages = ['', 'a', '$2b$10$' + 'x'.repeat(53) + '\0ABCDEFGHIJ-abcdefghijklmnopqrstu', 'é', '🔑 key', 'x'.repeat(500)]
  for (const m of messages) {
    t.equal(digest(m), createHash('sha256').update(secret).update(m, 'utf8').digest('base64'), JSON.stringify(m).slice(0, 40))
  }
})

t.test('memoDigest: the same digest exactly for the same UTF-8 bytes', async (t) => {
  // (Lone surrogates encode as U+FFFD, so two such texts are one message, as they are to bcrypt.)
  const digest = memoDigest()
  fc.assert(fc.property(fc.string({ unit: 'binary' }), fc.string({ unit: 'binary' }), (a, b) =>
    Buffer.from(a).equals(Buffer.from(b)) === (digest(a) === digest(b))), { numRuns: 2000 })
  t.equal(digest('\ud800'), digest('\udc00'), 'two lone surrogates: the same bytes')
  t.not(digest('ABCDEFGHIJ-a'), digest('ABCDEFGHIJ-b'))
})

t.test('each memoDigest without a secret has its own random secret', async (t) => {
  t.not(memoDigest()('same message'), memoDigest()('same message'))
})

t.test('memoDigest refuses a secret it cannot use', async (t) => {
  t.throws(() => memoDigest(Buffer.alloc(64)), /22 bytes/)
  t.throws(() => memoDigest(Buffer.alloc(MEMO_SECRET_SIZE, 0x80)), /below 0x80/)
})
