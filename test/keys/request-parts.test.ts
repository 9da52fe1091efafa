import fc from 'fast-check'
import t from 'tap'
import { bearerToken } from '../../lib/keys/authenticate.js'

// The pattern the key hook used before it read the header by hand: the two must agree on every header.
const PATTERN = /^bearer[ \t]+([^ \t].*?)[ \t]*$/i
const byPattern = (header: string): string | null => PATTERN.exec(header)?.[1] ?? null

t.test('bearerToken: the scheme in any case, blanks around the token dropped, anything else refused', async (t) => {
  const key = 'AbCdEfGhIj-0123456789abcdefghijk'
  t.equal(bearerToken(`Bearer ${key}`), key)
  t.equal(bearerToken(`bEaReR \t ${key} \t`), key)
  t.equal(bearerToken('Bearer a b'), 'a b', 'blanks inside the token are kept')
  for (const refused of ['Bearer', 'Bearer ', 'Bearer \t ', `Bearer${key}`, `Basic ${key}`, `Bearer ${key}\n`, `Bearer a\rb`, 'Bearer a\u2028', ` Bearer ${key}`, `Beare ${key}`]) {
    t.equal(bearerToken(refused), null, encodeURIComponent(refused))
  }
})

t.test('bearerToken agrees with the pattern on generated headers', async (t) => {
  // Characters near each branch: the scheme's letters in both cases, blanks, line terminators, others.
  const char = fc.constantFrom('b', 'B', 'e', 'E', 'a', 'A', 'r', 'R', ' ', '\t', '\n', '\r', '\u2028', '\u2029', 'x', '-', '0', '\u00e9', '\u0130', '\u212a')
  const header = fc.oneof(
    fc.array(char, { maxLength: 16 }).map((c) => c.join('')),
    fc.tuple(fc.constantFrom('Bearer', 'bearer', 'BEARER', 'bEaReR'), fc.array(char, { maxLength: 16 })).map(([s, c]) => s + c.join('')),
    fc.string({ unit: 'binary', maxLength: 40 }).map((s) => 'Bearer ' + s)
  )
  fc.assert(fc.property(header, (h) => bearerToken(h) === byPattern(h)), { numRuns: 20000 })
  t.pass('20,000 headers: the same answer')
})
