import { hash, randomBytes } from 'node:crypto'

// SHA-256 works in 64-byte blocks, and its padding takes 9 bytes of the last:
// a secret of 22 bytes and a key of 32 hash in one block, where 64 bytes of
// secret took two. 22 bytes below 0x80 are 154 random bits.
export const MEMO_SECRET_SIZE = 22

/**
 * The verification memo's key for a message: SHA-256 of a per-process secret
 * followed by the message (its UTF-8 bytes), base64. It is a one-way,
 * collision-resistant function of the message that nobody without the secret
 * can compute, which is all the memo needs: the supplied key is never kept,
 * and no other value can land on a remembered entry. The digests never leave
 * the process, so SHA-256's length extension (computing the digest of a
 * longer message from a shorter one's) gives nobody anything.
 *
 * It was HMAC-SHA-256, two one-shot hashes. Under load a native hash call
 * costs several times what it costs in a loop (0.5 µs): one call instead of
 * two took 2-3% off an authenticated small download (docs/benchmarks.md).
 * The secret's bytes are 7-bit: as a latin1 string prepended to the message,
 * it hashes to the same bytes as the secret itself for any message.
 *
 * @param secret MEMO_SECRET_SIZE bytes below 0x80; random when omitted (tests pass one)
 */
export function memoDigest (secret: Uint8Array = randomBytes(MEMO_SECRET_SIZE).map((b) => b & 0x7f)): (message: string) => string {
  if (secret.length !== MEMO_SECRET_SIZE || secret.some((b) => b > 0x7f)) throw new TypeError(`memoDigest: the secret must be ${MEMO_SECRET_SIZE} bytes below 0x80`)
  const prefix = Buffer.from(secret).toString('latin1')
  return (message) => hash('sha256', prefix + message, 'base64')
}
