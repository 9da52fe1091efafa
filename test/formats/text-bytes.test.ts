import fc from 'fast-check'
import t from 'tap'
import { utf8Bytes } from '../../lib/formats/text-bytes.js'

t.test('utf8Bytes writes what Buffer.from writes, for any text', async (t) => {
  fc.assert(fc.property(fc.string({ unit: 'binary', maxLength: 300 }), (text) => utf8Bytes(text).equals(Buffer.from(text))), { numRuns: 5000 })
  for (const text of ['', 'é', '山田 太郎', 'Émilie 🚀', '\ud800', 'a\udc00b', 'x'.repeat(70_000) + '€']) {
    t.ok(utf8Bytes(text).equals(Buffer.from(text)), `${text.length} code units`)
  }
})

t.test('each answer is a buffer of its own: the next text does not change it', async (t) => {
  const first = utf8Bytes('first text, 山田')
  const copy = Buffer.from(first)
  utf8Bytes('second text, longer than the first one')
  t.ok(first.equals(copy))
  t.equal(first.byteLength, Buffer.byteLength('first text, 山田'))
})
