import { createHmac, randomBytes } from 'node:crypto'
import t from 'tap'
import { memoHmac } from '../../lib/keys/memo-hmac.js'

t.test('memoHmac is HMAC-SHA-256 under its key, for ASCII and other messages', async (t) => {
  const key = randomBytes(64).map((b) => b & 0x7f)
  const mac = memoHmac(key)
  const messages = ['', 'a', '$2b$10$' + 'x'.repeat(53) + '\0ABCDEFGHIJ-abcdefghijklmnopqrstu', 'é', '🔑 key', 'x'.repeat(500)]
  for (const m of messages) t.equal(mac(m), createHmac('sha256', key).update(m).digest('base64'), JSON.stringify(m).slice(0, 40))
})

t.test('each memoHmac without a key has its own random key', async (t) => {
  t.not(memoHmac()('same message'), memoHmac()('same message'))
})

t.test('memoHmac refuses a key it cannot use', async (t) => {
  t.throws(() => memoHmac(Buffer.alloc(32)), /64 bytes/)
  t.throws(() => memoHmac(Buffer.alloc(64, 0x80)), /below 0x80/)
})
