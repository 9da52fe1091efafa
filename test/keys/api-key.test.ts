import fc from 'fast-check'
import t from 'tap'
import { generateKey, KEY_LENGTH, keyPrefixOf, loggablePrefix, randomAlphanumeric, redactKeys } from '../../lib/keys/api-key.js'

t.test('a generated key is 10 + 21 URL-safe alphanumerics around one dash (32 characters), its prefix the first 10', async (t) => {
  t.equal(KEY_LENGTH, 32)
  const seen = new Set<string>()
  for (let i = 0; i < 500; i++) {
    const { value, prefix } = generateKey()
    t.equal(value.length, 32)
    t.match(value, /^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/)
    t.equal(prefix, value.slice(0, 10))
    t.equal(keyPrefixOf(value), prefix)
    seen.add(value)
  }
  t.equal(seen.size, 500, 'no two keys alike')
})

t.test('characters are spread over the whole alphabet', async (t) => {
  const counts = new Map<string, number>()
  const text = randomAlphanumeric(62 * 400)
  for (const c of text) counts.set(c, (counts.get(c) ?? 0) + 1)
  t.equal(counts.size, 62, 'every one of the 62 characters occurs')
  for (const [c, n] of counts) t.ok(n > 250 && n < 550, `${c} occurs about 400 times (${n})`)
})

t.test('keyPrefixOf refuses anything that is not a well-formed key', async (t) => {
  const good = generateKey().value
  for (const bad of [undefined, null, 42, [good], '', good + 'x', good.slice(1), good.replace('-', '_'),
    good.slice(0, 10) + '-' + '!'.repeat(21), ' ' + good.slice(1), good.slice(0, 30) + 'é']) {
    t.equal(keyPrefixOf(bad), null, `refuses ${JSON.stringify(bad)}`)
  }
})

t.test('keyPrefixOf answers what the key pattern says, on generated values near a key\'s shape', async (t) => {
  const PATTERN = /^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/
  // Mostly the alphabet, with the characters next to its ranges, a dash, and beyond ASCII.
  const char = fc.oneof(
    { weight: 20, arbitrary: fc.constantFrom(...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789') },
    { weight: 3, arbitrary: fc.constantFrom('-', '/', ':', '@', '[', '`', '{', '\u007f', '\u0080', '\u00c0', '\u0130', '\uff21') }
  )
  const value = fc.oneof(
    fc.array(char, { minLength: 32, maxLength: 32 }).map((c) => c.join('')),
    fc.tuple(fc.array(char, { minLength: 10, maxLength: 10 }), fc.array(char, { minLength: 21, maxLength: 21 })).map(([p, s]) => `${p.join('')}-${s.join('')}`),
    fc.string({ minLength: 30, maxLength: 34 })
  )
  fc.assert(fc.property(value, (v) => keyPrefixOf(v) === (PATTERN.test(v) ? v.slice(0, 10) : null)), { numRuns: 20000 })
  t.pass('20,000 values: the same answer')
})

t.test('loggablePrefix never yields more than 10 characters, nor any of a value shorter than a key', async (t) => {
  const { value } = generateKey()
  t.equal(loggablePrefix(value), value.slice(0, 10))
  t.equal(loggablePrefix(value + 'xyz'), value.slice(0, 10))
  // A pasted password or a truncated key: its first 10 characters could be most of it.
  t.equal(loggablePrefix('hunter22'), undefined)
  t.equal(loggablePrefix('s3cr3t-passw0rd!'), undefined)
  t.equal(loggablePrefix(value.slice(0, KEY_LENGTH - 1)), undefined)
  t.equal(loggablePrefix(['a']), undefined)
})

t.test('redactKeys masks every whole key in a text and keeps the prefix', async (t) => {
  const a = generateKey()
  const b = generateKey()
  const text = `failed for ${a.value} and url ?api_key=${b.value}&x=1`
  const redacted = redactKeys(text)
  t.notMatch(redacted, a.value.slice(11))
  t.notMatch(redacted, b.value.slice(11))
  t.match(redacted, `${a.prefix}-[redacted]`)
  t.match(redacted, `${b.prefix}-[redacted]`)
})

t.test('redactKeys masks a key with letters or digits right after it, or several in a row', async (t) => {
  const a = generateKey()
  const b = generateKey()
  // Labels name the shape, not the text: a test log is no place for whole keys either.
  const shapes: Array<[string, string]> = [
    ['key + letter', `${a.value}x`], ['key + digit', `${a.value}0`], ['letters around', `x${a.value}y`],
    ['three back to back', `${a.value}${b.value}${a.value}`], ['in a path', `/api/${b.value}${a.value}z/model`]
  ]
  for (const [shape, text] of shapes) {
    const redacted = redactKeys(text)
    t.notMatch(redacted, a.value.slice(11), `hides the first key: ${shape}`)
    t.notMatch(redacted, b.value.slice(11), `hides the second key: ${shape}`)
  }
  t.equal(redactKeys(`${a.value}x`), `${a.prefix}-[redacted]x`)
})

t.test('redactKeys masks a key percent-encoded once or twice, whole', async (t) => {
  const { value } = generateKey()
  const once = encodeURIComponent(value).replace('-', '%2D')
  const twice = once.replace(/%/g, '%25')
  const everyCharacter = [...value].map((c) => '%' + c.charCodeAt(0).toString(16)).join('')
  const encodings: Array<[string, string]> = [
    ['dash encoded', once], ['dash encoded twice', twice], ['every character encoded', everyCharacter],
    ['dash encoded twice, a letter after', value.slice(0, 10) + '%252D' + value.slice(11) + 'x']
  ]
  for (const [encoding, encoded] of encodings) {
    const redacted = redactKeys(`Unknown download format ${encoded}, supported formats = json`)
    t.notMatch(redacted, value.slice(11), `hides the key: ${encoding}`)
    t.match(redacted, '[redacted]', `${encoding}: marked`)
  }
  // Text with escapes but no key is left alone.
  t.equal(redactKeys('a%20b %2D c'), 'a%20b %2D c')
})
