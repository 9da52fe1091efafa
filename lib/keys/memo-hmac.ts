import { createHmac, hash, randomBytes } from 'node:crypto'

const BLOCK_SIZE = 64
const DIGEST_SIZE = 32
const ASCII = /^[\x00-\x7f]*$/

/**
 * HMAC-SHA-256 (RFC 2104) of short messages under one key, for the
 * verification memo. It is built from two one-shot `crypto.hash` calls: on
 * the request path `createHmac`, which sets up an OpenSSL context each time,
 * cost several times more. The key's bytes are 7-bit, so the inner padded key
 * is an ASCII string and `ipad + message` hashes to the same bytes as in the
 * RFC for any ASCII message (bcrypt hashes and well-formed keys are ASCII);
 * other messages go through `createHmac`. The outer hash reads a buffer
 * allocated once, with the inner digest written into its tail as a
 * 'binary' (latin1) string: a fresh Buffer per call (digest, then concat)
 * cost about as much as a hash.
 *
 * @param key 64 bytes below 0x80; random when omitted (tests pass one)
 */
export function memoHmac (key: Uint8Array = randomBytes(BLOCK_SIZE).map((b) => b & 0x7f)): (message: string) => string {
  if (key.length !== BLOCK_SIZE || key.some((b) => b > 0x7f)) throw new TypeError('memoHmac: the key must be 64 bytes below 0x80')
  const innerPad = Buffer.from(key.map((b) => b ^ 0x36)).toString('latin1')
  // outer pad, then the inner digest; safe to share, each call is synchronous
  const outer = Buffer.alloc(BLOCK_SIZE + DIGEST_SIZE)
  outer.set(key.map((b) => b ^ 0x5c))
  return (message) => {
    if (!ASCII.test(message)) return createHmac('sha256', key).update(message).digest('base64')
    outer.write(hash('sha256', innerPad + message, 'binary'), BLOCK_SIZE, 'binary')
    return hash('sha256', outer, 'base64')
  }
}
