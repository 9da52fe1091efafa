import { randomBytes } from 'node:crypto'

// Key format (SPEC.md §2.1, DESIGN.md §3): `{prefix}-{secret}`, 10 + 1 + 21 = 31
// characters, prefix and secret drawn from [A-Za-z0-9] only.
export const KEY_PREFIX_LENGTH = 10
export const KEY_SECRET_LENGTH = 21
export const KEY_LENGTH = KEY_PREFIX_LENGTH + 1 + KEY_SECRET_LENGTH

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789'
// 248 is the largest multiple of 62 below 256: bytes at or above it are dropped
// so that every character is equally likely (no modulo bias).
const UNBIASED_LIMIT = 248
const KEY_PATTERN = /^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/

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
  if (typeof value !== 'string' || value.length !== KEY_LENGTH || !KEY_PATTERN.test(value)) return null
  return value.slice(0, KEY_PREFIX_LENGTH)
}

/** What a log line may show of a supplied value: its first 10 characters at most. */
export function loggablePrefix (value: unknown): string | undefined {
  return typeof value === 'string' ? value.slice(0, KEY_PREFIX_LENGTH) : undefined
}

const KEY_ANYWHERE = /[A-Za-z0-9]{10}-[A-Za-z0-9]{21}(?![A-Za-z0-9])/g

/** Replaces anything shaped like a whole key in a text by its prefix, for error messages and logs. */
export function redactKeys (text: string): string {
  return text.replace(KEY_ANYWHERE, (match) => `${match.slice(0, KEY_PREFIX_LENGTH)}-[redacted]`)
}
