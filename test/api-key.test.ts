import t from 'tap'
import { generateKey, KEY_LENGTH, keyPrefixOf, loggablePrefix, randomAlphanumeric, redactKeys } from '../lib/api-key.js'

t.test('a generated key is 31 URL-safe alphanumerics around one dash, its prefix the first 10', async (t) => {
  const seen = new Set<string>()
  for (let i = 0; i < 500; i++) {
    const { value, prefix } = generateKey()
    t.equal(value.length, KEY_LENGTH)
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

t.test('loggablePrefix never yields more than 10 characters', async (t) => {
  const { value } = generateKey()
  t.equal(loggablePrefix(value), value.slice(0, 10))
  t.equal(loggablePrefix('short'), 'short')
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
