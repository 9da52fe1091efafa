import { randomBytes } from 'node:crypto'

// Key format (SPEC.md §2.1, DESIGN.md §3): `{prefix}-{secret}`, prefix and secret
// drawn from [A-Za-z0-9] only. The spec's parts, 10 + 1 + 21, make 32 characters,
// not the 31 it states in all; the parts are kept (README, "Key length").
export const KEY_PREFIX_LENGTH = 10
export const KEY_SECRET_LENGTH = 21
export const KEY_LENGTH = KEY_PREFIX_LENGTH + 1 + KEY_SECRET_LENGTH

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789'
// 248 is the largest multiple of 62 below 256: bytes at or above it are dropped
// so that every character is equally likely (no modulo bias).
const UNBIASED_LIMIT = 248
// 1 for the alphabet's characters, by code: a key's shape is checked with one
// table read a character, and no branch on which kind of character it is
// (/^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/ mispredicted about 40 branches a key).
const IN_ALPHABET = new Uint8Array(128)
for (let i = 0; i < ALPHABET.length; i++) IN_ALPHABET[ALPHABET.charCodeAt(i)] = 1
const DASH = 0x2d

/**
 * Whether `text` from `start` to its end is a key's shape: KEY_LENGTH
 * characters, alphanumeric around a dash after the prefix. Checked where it
 * stands, so that a key inside a header needs no copy of its own first.
 */
export function isKeyAt (text: string, start: number): boolean {
  if (text.length - start !== KEY_LENGTH) return false
  let shaped = text.charCodeAt(start + KEY_PREFIX_LENGTH) === DASH ? 1 : 0
  for (let i = 0; i < KEY_LENGTH; i++) {
    if (i === KEY_PREFIX_LENGTH) continue
    const c = text.charCodeAt(start + i)
    shaped &= c < 128 ? IN_ALPHABET[c] : 0
  }
  return shaped === 1
}

export function randomAlphanumeric (length: number): string {
  let out = ''
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < UNBIASED_LIMIT) out += ALPHABET[byte % ALPHABET.length]
      if (out.length === length) break
    }
  }
  return out
}

export interface GeneratedKey {
  /** the whole key, to be shown once and never stored */
  value: string
  /** the first 10 characters, stored in clear to find the key */
  prefix: string
}

export function generateKey (): GeneratedKey {
  const prefix = randomAlphanumeric(KEY_PREFIX_LENGTH)
  return { prefix, value: `${prefix}-${randomAlphanumeric(KEY_SECRET_LENGTH)}` }
}

/** The prefix of a well-formed key, or null when the value cannot be a key. */
export function keyPrefixOf (value: unknown): string | null {
  if (typeof value !== 'string' || !isKeyAt(value, 0)) return null
  return value.slice(0, KEY_PREFIX_LENGTH)
}

/**
 * What a log line may show of a supplied value: the first 10 characters of a
 * value at least as long as a key, so that at least a key's secret length
 * stays unlogged. A shorter value (a truncated key, or another system's
 * secret pasted by mistake) is not logged at all, since its first 10
 * characters could be most or all of it.
 */
export function loggablePrefix (value: unknown): string | undefined {
  return typeof value === 'string' && value.length >= KEY_LENGTH ? value.slice(0, KEY_PREFIX_LENGTH) : undefined
}

// A key with anything around it: a key followed by more letters is still a key
// to hide (the whole of it is in the text).
const KEY_ANYWHERE = /[A-Za-z0-9]{10}-[A-Za-z0-9]{21}/g
const HAS_KEY = /[A-Za-z0-9]{10}-[A-Za-z0-9]{21}/
// A run of URL characters and %XX escapes: a key may arrive with any of its
// characters percent-encoded, once or more (a client that encodes twice).
const URL_RUN = /(?:[A-Za-z0-9._~-]|%[0-9A-Fa-f]{2})+/g
const ESCAPE = /%([0-9A-Fa-f]{2})/g

/** Percent-decoded up to three times (double encoding included), byte by byte. */
export function percentDecoded (text: string): string {
  let out = text
  for (let i = 0; i < 3 && out.includes('%'); i++) {
    out = out.replace(ESCAPE, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)))
  }
  return out
}

/**
 * Masks anything shaped like a whole key in a text, for error messages and
 * logs: a plain key keeps its prefix, a percent-encoded one is replaced whole.
 */
export function redactKeys (text: string): string {
  const encodedMasked = text.includes('%')
    ? text.replace(URL_RUN, (run) => (run.includes('%') && HAS_KEY.test(percentDecoded(run)) ? '[redacted]' : run))
    : text
  return encodedMasked.replace(KEY_ANYWHERE, (match) => `${match.slice(0, KEY_PREFIX_LENGTH)}-[redacted]`)
}
