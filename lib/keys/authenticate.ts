import { setTimeout } from 'node:timers/promises'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { isKeyAt, KEY_PREFIX_LENGTH, keyPrefixOf, loggablePrefix } from './api-key.js'
import { ThrottleClient, type FailureThrottle } from './failure-throttle.js'
import {
  DisabledKeyError, ExpiredKeyError, HttpsRequiredError, MethodNotAllowedError, NotAuthorizedError, NotFoundError,
  TooManyFailuresError, UnknownEndpointError, UnknownKeyError, VerificationBusyError, withDetails
} from '../errors.js'
import type { EndpointKeyLookup, EndpointLocator, KeyLimits, Storage } from '../storage/storage.js'
import { storageFailure, unguarded } from '../storage/guarded-storage.js'
import { isThenable } from '../host/thenable.js'
import type { UsageRecorder } from '../storage/usage-recorder.js'
import type { KeyVerifier } from './key-verifier.js'
import type { KeyLimiter } from './key-limits.js'

export interface DataRouteParams {
  organization: string
  project: string
  modelSequence: string
  type: string
  resourceSequence: string
}

/** What a data request carries once its key is verified. */
export interface AuthenticatedCall {
  locator: EndpointLocator
  endpointId: string
  /** the key that authenticated the call */
  keyId: string
  /** its prefix and expiry (ms since the epoch, null: never), for the links it mints */
  keyPrefix: string
  keyExpiresAt: number | null
}

declare module 'fastify' {
  interface FastifyRequest {
    /** set by the key hook on data routes once the key is verified */
    dataEndpointCall: AuthenticatedCall | null
    /** the supplied key's first 10 characters, for log lines */
    dataEndpointKeyPrefix: string | undefined
  }
}

const DIGIT_0 = 0x30
const DIGIT_1 = 0x31
const DIGIT_9 = 0x39

/**
 * A positive integer up to 2^53 - 1, written without sign, exponent or
 * leading zero (what /^[1-9][0-9]{0,15}$/ and a safe integer allow); else null.
 */
function sequence (text: string): number | null {
  const length = text.length
  if (length === 0 || length > 16) return null
  let c = text.charCodeAt(0)
  if (c < DIGIT_1 || c > DIGIT_9) return null
  for (let i = 1; i < length; i++) {
    c = text.charCodeAt(i)
    if (c < DIGIT_0 || c > DIGIT_9) return null
  }
  const n = Number(text)
  return Number.isSafeInteger(n) ? n : null
}

export function parseLocator (params: DataRouteParams): EndpointLocator | null {
  const { type } = params
  if (type !== 'dataset' && type !== 'pipeline') return null
  const modelSequence = sequence(params.modelSequence)
  const resourceSequence = sequence(params.resourceSequence)
  if (modelSequence === null || resourceSequence === null) return null
  return { organization: params.organization, project: params.project, modelSequence, type, resourceSequence }
}

const SPACE = 0x20
const TAB = 0x09
const isBlank = (c: number): boolean => c === SPACE || c === TAB
const BEARER_SCHEME = 'bearer'

/** Whether `header` starts with the scheme `bearer`, in any case. */
function isBearerScheme (header: string): boolean {
  // (c | 0x20) is c in lower case for an ASCII letter, and 'b', 'e', 'a' or 'r' for no other character.
  for (let i = 0; i < BEARER_SCHEME.length; i++) if ((header.charCodeAt(i) | 0x20) !== BEARER_SCHEME.charCodeAt(i)) return false
  return true
}

/**
 * The token of `Authorization: Bearer <token>`: the scheme in any case, then
 * spaces or tabs, then the token without the spaces or tabs after it; null
 * when the header says something else. What /^bearer[ \t]+([^ \t].*?)[ \t]*$/i
 * matches, without a backtracking pattern over every key of every request.
 */
export function bearerToken (header: string): string | null {
  const n = header.length
  if (n < 8 || !isBearerScheme(header)) return null
  let start = 6
  while (start < n && isBlank(header.charCodeAt(start))) start++
  let end = n
  while (end > start && isBlank(header.charCodeAt(end - 1))) end--
  if (start === 6 || start === end) return null
  // After its first character (any but a blank), the pattern's `.` stops at line terminators.
  for (let i = start + 1; i < end; i++) {
    const c = header.charCodeAt(i)
    if (c === 0x0a || c === 0x0d || c === 0x2028 || c === 0x2029) return null
  }
  return header.slice(start, end)
}

/** A supplied value, and its prefix when it is a well-formed key (else null). */
export interface SuppliedKey {
  value: unknown
  prefix: string | null
}

/** Where the key starts in `Bearer <key>` as clients write it: the scheme and one space. */
const BEARER_KEY_START = BEARER_SCHEME.length + 1

/**
 * The supplied key: a non-empty `api_key` query value wins over
 * `Authorization: Bearer <key>` (scheme in any case). A repeated `api_key`
 * is passed on as is, and fails later as a malformed key. Undefined when
 * neither is there.
 */
export function suppliedKey (request: FastifyRequest): SuppliedKey | undefined {
  const fromQuery = (request.query as Record<string, unknown>).api_key
  if (fromQuery !== undefined && fromQuery !== '') return { value: fromQuery, prefix: keyPrefixOf(fromQuery) }
  const header = request.headers.authorization
  if (typeof header !== 'string') return undefined
  // The usual header, a well-formed key after `Bearer `, is read where it
  // stands: no scan for blanks and line ends, and no second pass over a copy.
  if (header.charCodeAt(BEARER_KEY_START - 1) === SPACE && isBearerScheme(header) && isKeyAt(header, BEARER_KEY_START)) {
    return { value: header.slice(BEARER_KEY_START), prefix: header.slice(BEARER_KEY_START, BEARER_KEY_START + KEY_PREFIX_LENGTH) }
  }
  const token = bearerToken(header)
  return token === null ? undefined : { value: token, prefix: keyPrefixOf(token) }
}

export function isLoopback (ip: string): boolean {
  return ip === '::1' || ip.startsWith('127.') || ip.startsWith('::ffff:127.')
}

/**
 * The key hook of the data routes (DESIGN.md §2 steps 1-6, and the key's
 * limits of §4.3 between 5 and 6), run in
 * `onRequest` so that an unauthenticated body is never read. Each refusal
 * throws a catalogue error; the context's error handler writes `{ message }`.
 */
/** What the key hook reads and reports to; the plugin builds each once. */
export interface KeyCheckParts {
  storage: Storage
  verifier: KeyVerifier
  usage: UsageRecorder
  /** null when the failure throttle is off */
  throttle: FailureThrottle | null
  limiter: KeyLimiter
  requireHttps: boolean
}

/** A key whose identity is established (its secret matched, or a link's signature did), as storage has it now. */
export interface KnownKey {
  id: string
  isActive: boolean
  /** ms since the epoch; null: never */
  expiresAt: number | null
  /** its limits (DESIGN.md §4.3); null or absent: none */
  limits?: KeyLimits | null
  /** with a bytesPerDay limit: the key's bytes of the UTC day as stored */
  bytesToday?: number
}

/**
 * The checks every call of a key goes through once the key is known, for a
 * keyed request and a link's use alike: refusals count against the client's
 * failure throttle; `admit` says "Disabled" for an inactive or expired key
 * (DESIGN.md §2 step 5) and otherwise counts the call (step 6). A check that
 * belongs between steps 5 and 6 (per-key limits, DESIGN.md §4.3) goes in
 * `admit`, so that it applies to links too.
 */
export function keyChecks ({ usage, throttle, limiter }: Pick<KeyCheckParts, 'usage' | 'throttle' | 'limiter'>) {
  function refuse (client: ThrottleClient, error: Error): never {
    throttle?.recordFailure(client.name)
    throw error
  }

  /**
   * `download`: a dataset GET (it holds a download slot and counts its bytes).
   * Answers a promise only when the key has limits to check: a key without
   * any has nothing to wait for.
   */
  function admit (client: ThrottleClient, endpointId: string, key: KnownKey, reply: FastifyReply, download: boolean): Promise<void> | undefined {
    // An expired key is inactive too; the clock is read on every request,
    // so a memoised comparison never outlives the expiry.
    if (!key.isActive) {
      usage.recordRefusal(endpointId, key.id, 'disabled')
      refuse(client, new DisabledKeyError())
    }
    if (key.expiresAt !== null && key.expiresAt <= Date.now()) {
      usage.recordRefusal(endpointId, key.id, 'expired')
      refuse(client, new ExpiredKeyError())
    }
    // The key's limits (DESIGN.md §4.3): a refusal there is no call of the key.
    const admitting = limiter.admit(reply, { endpointId, keyId: key.id, limits: key.limits ?? null, bytesToday: key.bytesToday ?? 0 }, download)
    if (admitting === undefined) {
      usage.record(endpointId, key.id)
      return undefined
    }
    return admitting.then(() => { usage.record(endpointId, key.id) })
  }

  return { refuse, admit }
}

/** Which route a key hook guards: the data route itself, or the minting of a dataset's links (POST only). */
export type KeyedRoute = 'data' | 'links'

export function authenticateHook ({ storage, verifier, usage, throttle, limiter, requireHttps }: KeyCheckParts, route: KeyedRoute = 'data') {
  const lookupStore = unguarded(storage)
  const checks = keyChecks({ usage, throttle, limiter })
  const { admit } = checks
  // Typed here so that TypeScript narrows after a refusal.
  const refuse: (client: ThrottleClient, error: Error) => never = checks.refuse

  // A key verified here before passes a client's bound: a neighbour behind
  // the same address keeps working (its key still goes through every check).
  function verifiedBefore (call: KeyedCall): boolean {
    return call.valueDigest !== null && verifier.hasVerified(call.valueDigest)
  }

  // A request over its client's bound is held `delayMs` before it is asked
  // again, so a flood's connections wait instead of taking the event loop.
  // While its value is being compared, it waits for that comparison instead,
  // however long bcrypt takes on a loaded machine: a burst of first requests
  // with a good key is over the bound only until the key's first comparison
  // ends. A value that did not match still waits out the hold.
  async function hold (delayMs: number, valueDigest: string | null): Promise<void> {
    let left = delayMs
    const comparing = valueDigest === null ? undefined : verifier.comparison(valueDigest)
    if (comparing !== undefined) {
      const since = Date.now()
      if (await comparing) return
      left -= Date.now() - since
    }
    if (left > 0) await setTimeout(left)
    // one that began during the hold
    const begun = valueDigest === null ? undefined : verifier.comparison(valueDigest)
    if (begun !== undefined) await begun
  }

  /**
   * A request without a key is counted in the endpoint's usage history as
   * `no_key`, if the endpoint exists. That takes a read the refusal itself
   * does not need, so a failed read leaves the answer as it was.
   */
  async function countKeyless (locator: EndpointLocator): Promise<void> {
    try {
      const found = await storage.findEndpointKey(locator, null)
      if (found !== null) usage.recordRefusal(found.endpointId, null, 'no_key')
    } catch {}
  }

  /**
   * The checks of one request, in DESIGN.md §2 order: undefined when they all
   * passed at once (a remembered lookup and comparison, a key without limits:
   * the usual case, with no promise and no turn of the microtask queue), else
   * a promise of the same outcome. A refusal is thrown, or rejects.
   */
  function check (request: FastifyRequest, reply: FastifyReply): Promise<void> | undefined {
    // Data and refusals alike must not be kept by caches on the way.
    reply.header('cache-control', 'no-store')
    const locator = parseLocator(request.params as DataRouteParams)
    // No link opens a pipeline: a pipeline has no links route.
    if (locator === null || (route === 'links' && locator.type !== 'dataset')) throw new NotFoundError()
    if (route === 'links') {
      if (request.method !== 'POST') throw withDetails(new MethodNotAllowedError(), { headers: { allow: 'POST' } })
    } else {
      // HEAD asks for a dataset's headers (a reader that queries a file in place asks for its length first).
      const allowed = locator.type === 'dataset' ? request.method === 'GET' || request.method === 'HEAD' : request.method === 'POST'
      if (!allowed) throw withDetails(new MethodNotAllowedError(), { headers: { allow: locator.type === 'dataset' ? 'GET, HEAD' : 'POST' } })
    }
    const { ip } = request // read once: a getter through the socket's peer name
    if (requireHttps && request.protocol !== 'https' && !isLoopback(ip)) throw new HttpsRequiredError()

    const supplied = suppliedKey(request)
    if (supplied === undefined) {
      return countKeyless(locator).then(() => { throw new NotAuthorizedError() })
    }
    request.dataEndpointKeyPrefix = supplied.prefix ?? loggablePrefix(supplied.value)
    const { prefix } = supplied
    // (A prefix means the supplied value is a well-formed key, so a string.)
    const valueDigest = prefix === null ? null : verifier.digestOf(supplied.value as string)
    const call: KeyedCall = { request, reply, locator, supplied: supplied.value, client: new ThrottleClient(ip), prefix, valueDigest }
    // A key verified here before goes through every check but the throttle's
    // (the usual case): its attempts need no counting, and past the client's
    // bound it passes all the same.
    if (throttle === null || verifiedBefore(call)) return checkKey(call)
    // Admitted attempts count as in flight until settled, so a burst
    // cannot pass the check before its failures are recorded.
    const wait = throttle.admit(call.client.name)
    if (wait === 0) return settledAfter(throttle, call.client.name, () => checkKey(call))
    // A client over its bound is refused before any storage read or bcrypt.
    return heldCheck(throttle, call)
  }

  async function heldCheck (throttle: FailureThrottle, call: KeyedCall): Promise<void> {
    await hold(throttle.delayMs, call.valueDigest)
    const wait = throttle.admit(call.client.name)
    if (wait === 0) return settledAfter(throttle, call.client.name, () => checkKey(call))
    if (!verifiedBefore(call)) {
      throw withDetails(new TooManyFailuresError(), { headers: { 'retry-after': String(wait) } })
    }
    return checkKey(call)
  }

  /** The endpoint and the key (DESIGN.md §2 steps 3-6), once the key is supplied and the client admitted. */
  function checkKey (call: KeyedCall): Promise<void> | undefined {
    // Past the guard, its rule applied here: a failed lookup is turned in
    // the step that goes on with a found one, not in a promise of its own.
    let found: ReturnType<Storage['findEndpointKey']>
    try {
      found = lookupStore.findEndpointKey(call.locator, call.prefix)
    } catch (err) {
      throw storageFailure(err)
    }
    // A host's store may answer with any thenable: it goes on as a Promise.
    if (!isThenable(found)) return checkLookup(call, found)
    return Promise.resolve(found).then((lookup) => checkLookup(call, lookup), (err: unknown) => { throw storageFailure(err) })
  }

  function checkLookup (call: KeyedCall, found: EndpointKeyLookup | null): Promise<void> | undefined {
    const { client, prefix } = call
    if (found === null) refuse(client, new UnknownEndpointError())
    const { endpointId, key } = found
    if (key === null || prefix === null) {
      usage.recordRefusal(endpointId, null, 'unknown_prefix')
      refuse(client, new UnknownKeyError())
    }
    let verdict: boolean | Promise<boolean>
    try {
      verdict = verifier.verify(key.hash, call.supplied as string, call.valueDigest as string)
    } catch (err) {
      return busy(err)
    }
    if (typeof verdict === 'boolean') return checkVerdict(call, endpointId, key, verdict)
    return verdict.then((matches) => checkVerdict(call, endpointId, key, matches), busy)
  }

  // Mostly a flood's (a key's owner needs one place in its key's line): held
  // like the throttle's refusals, so that its connections wait instead of
  // taking the event loop.
  async function busy (err: unknown): Promise<never> {
    if (err instanceof VerificationBusyError) {
      if (throttle !== null) await setTimeout(throttle.delayMs)
      throw withDetails(err, { headers: { 'retry-after': '1' } })
    }
    throw err
  }

  function checkVerdict (call: KeyedCall, endpointId: string, key: StoredKey, matches: boolean): Promise<void> | undefined {
    const { request, reply, locator, client } = call
    if (!matches) {
      // A wrong secret on a prefix that is assigned here: a guess at this key.
      usage.recordRefusal(endpointId, key.id, 'unknown_key')
      refuse(client, new UnknownKeyError())
    }
    // The secret matched, so saying "disabled" reveals nothing to a guesser.
    // A download is a dataset GET (minting its links is none).
    const download = route === 'data' && locator.type === 'dataset' && request.method === 'GET'
    const admitting = admit(client, endpointId, key, reply, download)
    const verified = (): void => {
      request.dataEndpointCall = { locator, endpointId, keyId: key.id, keyPrefix: call.prefix as string, keyExpiresAt: key.expiresAt }
    }
    if (admitting === undefined) {
      verified()
      return undefined
    }
    return admitting.then(verified)
  }

  // A callback hook, not an async one: a request whose checks all pass at
  // once costs no promise.
  return function authenticate (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void): void {
    let pending: Promise<void> | undefined
    try {
      pending = check(request, reply)
    } catch (err) {
      done(err as Error)
      return
    }
    if (pending === undefined) done()
    else pending.then(() => { done() }, (err: Error) => { done(err) })
  }
}

/** A data request whose key was supplied, on its way through the checks. */
interface KeyedCall {
  request: FastifyRequest
  reply: FastifyReply
  locator: EndpointLocator
  supplied: unknown
  /** the client as the failure throttle names it, when it asks */
  client: ThrottleClient
  /** null when the supplied value is no well-formed key */
  prefix: string | null
  /** the verifier's digest of the supplied value; null with the prefix */
  valueDigest: string | null
}

type StoredKey = NonNullable<EndpointKeyLookup['key']>

/** Runs `run`, then settles the client's attempt with the throttle however it ends. */
function settledAfter (throttle: FailureThrottle, client: string, run: () => Promise<void> | undefined): Promise<void> | undefined {
  let pending: Promise<void> | undefined
  try {
    pending = run()
  } catch (err) {
    throttle.settle(client)
    throw err
  }
  if (pending === undefined) {
    throttle.settle(client)
    return undefined
  }
  return pending.finally(() => { throttle.settle(client) })
}
