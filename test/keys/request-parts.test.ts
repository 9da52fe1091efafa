import fc from 'fast-check'
import t from 'tap'
import type { FastifyRequest } from 'fastify'
import { bearerToken, parseLocator, suppliedKey } from '../../lib/keys/authenticate.js'
import { keyPrefixOf } from '../../lib/keys/api-key.js'

// The patterns the key hook used before it read the request by hand: each reading must agree with its pattern.
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

t.test('suppliedKey reads `Bearer <key>` where it stands as the general reading does', async (t) => {
  const key = 'AbCdEfGhIj-0123456789abcdefghijk'
  const read = (authorization: string | undefined, query: Record<string, unknown> = {}): unknown =>
    suppliedKey({ query, headers: { authorization } } as unknown as FastifyRequest)
  t.same(read(`Bearer ${key}`), { value: key, prefix: 'AbCdEfGhIj' })
  t.same(read(`bearer ${key}`), { value: key, prefix: 'AbCdEfGhIj' })
  t.same(read(`Bearer ${key}`, { api_key: 'other' }), { value: 'other', prefix: null }, 'the query wins')
  t.same(read(`Bearer ${key}`, { api_key: '' }), { value: key, prefix: 'AbCdEfGhIj' }, 'an empty query value does not')
  t.equal(read(undefined), undefined)
  t.equal(read('Basic abc'), undefined)
  // Headers a key's length long and near a key's shape, where the quick reading and the general one meet.
  const keyChar = fc.constantFrom('a', 'Z', '0', '9', '-', ' ', '\t', '\n', '\u00e9', '\u0130', '_', '/')
  const nearKey = fc.oneof(
    fc.array(keyChar, { minLength: 30, maxLength: 34 }).map((c) => c.join('')),
    fc.tuple(fc.nat(31), keyChar).map(([i, c]) => key.slice(0, i) + c + key.slice(i + 1)),
    fc.constant(key)
  )
  const scheme = fc.constantFrom('Bearer ', 'bearer ', 'BEARER\t', 'Bearer  ', 'Bearer', 'Bearex ', 'Bearer\u00a0')
  fc.assert(fc.property(scheme, nearKey, fc.constantFrom('', ' ', '\t'), (s, k, after) => {
    const header = s + k + after
    const token = bearerToken(header)
    const expected = token === null ? undefined : { value: token, prefix: keyPrefixOf(token) }
    const got = read(header) as { value: unknown, prefix: string | null } | undefined
    return got === expected || (got !== undefined && expected !== undefined && got.value === expected.value && got.prefix === expected.prefix)
  }), { numRuns: 20000 })
  t.pass('20,000 headers: the same value and prefix')
})

t.test('parseLocator: sequences are what /^[1-9][0-9]{0,15}$/ allows and a safe integer holds', async (t) => {
  const SEQUENCE = /^[1-9][0-9]{0,15}$/
  const expected = (text: string): number | null => SEQUENCE.test(text) && Number.isSafeInteger(Number(text)) ? Number(text) : null
  const text = fc.oneof(
    fc.array(fc.constantFrom('0', '1', '5', '9', '/', ':', '-', '+', 'e', '.', ' ', '\u0660'), { maxLength: 18 }).map((c) => c.join('')),
    fc.bigInt({ min: 0n, max: 2n ** 60n }).map(String),
    fc.string({ maxLength: 18 })
  )
  fc.assert(fc.property(text, text, (model, resource) => {
    const locator = parseLocator({ organization: 'o', project: 'p', modelSequence: model, type: 'dataset', resourceSequence: resource })
    const [m, r] = [expected(model), expected(resource)]
    return m === null || r === null ? locator === null : locator?.modelSequence === m && locator.resourceSequence === r
  }), { numRuns: 20000 })
  t.equal(parseLocator({ organization: 'o', project: 'p', modelSequence: '9007199254740991', type: 'dataset', resourceSequence: '1' })?.modelSequence, 9007199254740991)
  t.equal(parseLocator({ organization: 'o', project: 'p', modelSequence: '9007199254740992', type: 'dataset', resourceSequence: '1' }), null, 'past 2^53 - 1')
})
