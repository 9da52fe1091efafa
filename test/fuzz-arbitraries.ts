import fc from 'fast-check'
import type { Test } from 'tap'

// Inputs shared by the fuzz tests, each generated together with what the
// rules of DESIGN.md §2 and §4 make of it, so that a property can state the
// exact answer instead of "not a 5xx".

/** A path segment: the text the server decodes and the bytes written for it. */
export interface Segment {
  text: string
  wire: string
}

export const segment = (text: string, wire = encodeURIComponent(text)): Segment => ({ text, wire })

/** Fastify's default maxParamLength: a longer path parameter is answered 414. */
export const MAX_PARAM_LENGTH = 100

/**
 * DESIGN.md §2: a sequence is a positive integer written plainly (ASCII
 * digits, no sign, exponent, point or leading zero) up to 2^53 - 1.
 */
export function sequenceOf (text: string): number | null {
  if (!/^[0-9]+$/.test(text) || text.startsWith('0')) return null
  return BigInt(text) <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(text) : null
}

/** Sequence texts: mostly 1 and 2, then every way a number can be written wrong. */
export const sequenceText: fc.Arbitrary<string> = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('1', '2') },
  {
    weight: 4,
    arbitrary: fc.constantFrom('0', '01', '-1', '+1', '1.5', '1e3', '1E3', '0x10', '0b1', '1_0', ' 1', '1 ', '١', '１',
      'Infinity', 'NaN', '1\0', '', '9007199254740991', '9007199254740992', '1234567890123456789012345')
  },
  { weight: 2, arbitrary: fc.bigInt({ min: -10n, max: 10n ** 25n }).map(String) },
  { weight: 1, arbitrary: fc.string({ maxLength: 4, unit: 'grapheme' }) },
  { weight: 1, arbitrary: fc.constant('9'.repeat(MAX_PARAM_LENGTH + 1)) }
)

/** An organization or project: mostly `usual`, then odd ones, non-ASCII, NUL, slashes, dots, too long. */
export function monikerText (usual: string): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 10, arbitrary: fc.constant(usual) },
    { weight: 4, arbitrary: fc.constantFrom('other', '', 'a b', 'ä', 'ac\0me', 'a/b', '-x', 'x'.repeat(100), '..', '.', '%', '?', '#') },
    { weight: 2, arbitrary: fc.string({ maxLength: 6, unit: 'grapheme' }) },
    { weight: 1, arbitrary: fc.constant('x'.repeat(MAX_PARAM_LENGTH + 1)) }
  )
}

/** `.` and `..` as whole segments: inject resolves them like a browser would; a raw request does not. */
export const isDotSegment = (text: string): boolean => text === '.' || text === '..'

/** Runs a property with a printed seed (FUZZ_SEED to replay one) and records it as one passing assertion. */
export async function checkProperty<T> (t: Test, name: string, property: fc.IAsyncPropertyWithHooks<T>, numRuns: number): Promise<void> {
  const seed = process.env.FUZZ_SEED === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(process.env.FUZZ_SEED)
  t.comment(`${name}: seed ${seed} (FUZZ_SEED=${seed} replays it)`)
  await fc.assert(property, { numRuns, seed, endOnFailure: false })
  t.pass(`${name}: ${numRuns} runs`)
}
