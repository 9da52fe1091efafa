import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import { LRUCache } from 'lru-cache'
import type { LinkSecret, Storage } from '../storage/storage.js'

// Download link tokens (DESIGN.md §4.2). A token is
//
//   <secret id>.<claims>.<signature>
//
// where claims is base64url of the JSON [1, link id, key id, endpoint id,
// expiry in ms, params], and the signature is base64url of HMAC-SHA256, under
// the named secret, over the file name the URL ends in and the first two
// parts. Everything a link's use needs before its one storage read is in the
// token, so a token that does not verify costs no read; the link's state
// (revoked, its key, its endpoint) is read on every use that verifies.
//
// The secrets live in the store, shared by every instance: the newest signs,
// every one listed verifies. Rotating adds a secret; deleting the old one
// later ends the links it signed.

/** What a verified token says. */
export interface LinkClaims {
  id: string
  keyId: string
  endpointId: string
  /** ms since the epoch */
  expiresAt: number
  /** the dataset GET's query parameters */
  params: Record<string, string>
}

/** Longest token read at all: a link's params are short (checked when minted). */
export const MAX_TOKEN_LENGTH = 4096
const TOKEN = /^([A-Za-z0-9_-]{1,32})\.([A-Za-z0-9_-]{1,4000})\.([A-Za-z0-9_-]{43})$/
const VERSION = 1

export interface LinkSignerOptions {
  /** ms between two reads of the secrets when nothing asks sooner; default one minute */
  refreshMs?: number
  /**
   * at least this many ms between two reads made because a token named a
   * secret this instance has not seen (one minted on another instance just
   * after a rotation); default one second. The first such token is read for
   * at once; a flood of tokens naming unknown secrets costs one read a
   * second, not one per request.
   */
  missRefreshMs?: number
}

interface Keys {
  byId: Map<string, Buffer>
  /** the newest secret: it signs */
  signing: { id: string, key: Buffer }
}

function message (fileName: string, secretId: string, claims: string): string {
  return `fde-link\n${fileName}\n${secretId}.${claims}`
}

/** A new secret for `Storage.addLinkSecret`. */
export function newLinkSecret (now = new Date()): LinkSecret {
  return { id: randomBytes(9).toString('base64url'), secret: randomBytes(32).toString('base64url'), createdAt: now }
}

/** A new link's id: 128 random bits. */
export function newLinkId (): string {
  return randomBytes(16).toString('base64url')
}

export class LinkSigner {
  readonly #storage: Storage
  readonly #refreshMs: number
  readonly #missRefreshMs: number
  #keys: Keys | null = null
  #loading: Promise<Keys> | null = null
  #loadedAt = 0
  #lastMissRead = 0
  // Tokens that verified here, by token and file name: a link used again
  // (a tool polling it) costs a map lookup instead of an HMAC and a decode.
  // Only verified tokens enter; emptied when the set of secrets changes.
  readonly #verified = new LRUCache<string, LinkClaims>({ max: 10_000 })

  constructor (storage: Storage, options: LinkSignerOptions = {}) {
    this.#storage = storage
    this.#refreshMs = options.refreshMs ?? 60_000
    this.#missRefreshMs = options.missRefreshMs ?? 1000
  }

  /** Reads the secrets (making the first one when there is none), one read at a time. */
  #load (): Promise<Keys> {
    this.#loading ??= (async () => {
      try {
        let secrets = await this.#storage.listLinkSecrets()
        if (secrets.length === 0) {
          // Two instances starting at once may each add one: both then verify.
          await this.#storage.addLinkSecret(newLinkSecret())
          secrets = await this.#storage.listLinkSecrets()
        }
        const byId = new Map(secrets.map((s) => [s.id, Buffer.from(s.secret, 'base64url')]))
        const before = this.#keys === null ? '' : [...this.#keys.byId.keys()].join(' ')
        if ([...byId.keys()].join(' ') !== before) this.#verified.clear()
        const newest = secrets[secrets.length - 1]
        const keys = { byId, signing: { id: newest.id, key: byId.get(newest.id) as Buffer } }
        this.#keys = keys
        this.#loadedAt = Date.now()
        return keys
      } finally {
        this.#loading = null
      }
    })()
    return this.#loading
  }

  /** The secrets as known here; read again in the background once they are `refreshMs` old. */
  async #current (): Promise<Keys> {
    const keys = this.#keys
    if (keys === null) return this.#load()
    if (Date.now() - this.#loadedAt >= this.#refreshMs && this.#loading === null) this.#load().catch(() => {})
    return keys
  }

  /** The token of a link, for the URL that ends in `fileName`. */
  async sign (claims: LinkClaims, fileName: string): Promise<string> {
    const { signing } = await this.#current()
    const body = Buffer.from(JSON.stringify([VERSION, claims.id, claims.keyId, claims.endpointId, claims.expiresAt, claims.params]))
      .toString('base64url')
    const mac = createHmac('sha256', signing.key).update(message(fileName, signing.id, body)).digest('base64url')
    return `${signing.id}.${body}.${mac}`
  }

  /**
   * The claims of a token minted here or on another instance for a URL
   * ending in `fileName`; null for anything else. Reads no storage, but for
   * a token naming a secret not seen here (at most once per `missRefreshMs`).
   */
  async verify (token: string, fileName: string): Promise<LinkClaims | null> {
    if (token.length > MAX_TOKEN_LENGTH) return null
    const memoKey = token + '/' + fileName
    const known = this.#verified.get(memoKey)
    if (known !== undefined) {
      await this.#current() // reads the secrets again when due
      return known
    }
    const parts = TOKEN.exec(token)
    if (parts === null) return null
    const [, secretId, body, mac] = parts
    let keys = await this.#current()
    let key = keys.byId.get(secretId)
    if (key === undefined && Date.now() - this.#lastMissRead >= this.#missRefreshMs) {
      this.#lastMissRead = Date.now()
      keys = await (this.#loading ?? this.#load()).catch(() => keys)
      key = keys.byId.get(secretId)
    }
    if (key === undefined) return null
    // Both base64url strings of 32 bytes, compared whole and in constant
    // time: only the canonical encoding of the right signature passes.
    const expected = Buffer.from(createHmac('sha256', key).update(message(fileName, secretId, body)).digest('base64url'))
    if (!timingSafeEqual(expected, Buffer.from(mac))) return null
    const claims = claimsOf(body)
    if (claims !== null) this.#verified.set(memoKey, claims)
    return claims
  }

  /** Adds a new secret, which signs from now on here (and on other instances after their next read); answers its id. */
  async rotate (): Promise<string> {
    // Later than every secret there, so that it is the newest even within the same millisecond.
    const newest = (await this.#storage.listLinkSecrets()).at(-1)?.createdAt.getTime() ?? 0
    const secret = newLinkSecret(new Date(Math.max(Date.now(), newest + 1)))
    await this.#storage.addLinkSecret(secret)
    await this.#load()
    return secret.id
  }

  /** Deletes a secret: the links it signed stop (on other instances after their next read). The newest cannot go. */
  async retire (secretId: string): Promise<boolean> {
    const keys = await this.#load()
    if (keys.signing.id === secretId) throw new Error('the newest link secret signs new links: rotate before retiring it')
    const deleted = await this.#storage.deleteLinkSecret(secretId)
    await this.#load()
    return deleted
  }

  /** The secrets' ids, oldest first, and which one signs. */
  async secretIds (): Promise<{ ids: string[], signing: string }> {
    const keys = await this.#load()
    return { ids: [...keys.byId.keys()], signing: keys.signing.id }
  }
}

/** The claims of a signed body (ours, so well formed; checked all the same). */
function claimsOf (body: string): LinkClaims | null {
  try {
    const value: unknown = JSON.parse(Buffer.from(body, 'base64url').toString('utf8'))
    if (!Array.isArray(value) || value[0] !== VERSION) return null
    const [, id, keyId, endpointId, expiresAt, params] = value as unknown[]
    if (typeof id !== 'string' || typeof keyId !== 'string' || typeof endpointId !== 'string' ||
      typeof expiresAt !== 'number' || typeof params !== 'object' || params === null || Array.isArray(params)) return null
    return { id, keyId, endpointId, expiresAt, params: params as Record<string, string> }
  } catch {
    return null
  }
}
