// The storage interface: keys, endpoints, usage counters and idempotency
// records. `SqliteStorage` (embedded default) and `PgStorage` (many instances)
// implement it and pass the same contract tests (test/storage-contract.ts);
// an integrator may write another adapter against the same tests.

export type ResourceType = 'dataset' | 'pipeline'

/** An organization and project, by moniker. Keys belong to exactly one. */
export interface ProjectRef {
  organization: string
  project: string
}

/** The resource an endpoint exposes: where it sits and what it is. */
export interface EndpointLocator extends ProjectRef {
  modelSequence: number
  type: ResourceType
  resourceSequence: number
}

/**
 * A key's limits (DESIGN.md §4.3): each a positive integer, or null for none.
 * `requestsPerMinute` counts the key's admitted calls in each UTC minute;
 * `concurrentDownloads` its dataset GETs streaming at once; `bytesPerDay` the
 * bytes its downloads sent in the UTC day, checked when a download starts.
 */
export interface KeyLimits {
  requestsPerMinute: number | null
  concurrentDownloads: number | null
  bytesPerDay: number | null
}

export const NO_LIMITS: KeyLimits = Object.freeze({ requestsPerMinute: null, concurrentDownloads: null, bytesPerDay: null })

/** Whether any of the three is set. */
export function hasLimits (limits: KeyLimits): boolean {
  return limits.requestsPerMinute !== null || limits.concurrentDownloads !== null || limits.bytesPerDay !== null
}

/** A key's limits from its three stored values, as a lookup answers them: null when it has none. */
export function limitsOrNull (requestsPerMinute: number | null, concurrentDownloads: number | null, bytesPerDay: number | null): KeyLimits | null {
  return requestsPerMinute === null && concurrentDownloads === null && bytesPerDay === null
    ? null
    : { requestsPerMinute, concurrentDownloads, bytesPerDay }
}

/** A key as the management API shows it. The hash never leaves storage. */
export interface ApiKeyRecord {
  id: string
  organization: string
  project: string
  prefix: string
  purpose: string
  isActive: boolean
  createdAt: Date
  /** last successful authentication; null before the first */
  updatedAt: Date | null
  /** from this time on the key is inactive (DESIGN.md §4.1); null: never */
  expiresAt: Date | null
  limits: KeyLimits
}

export interface NewApiKey extends ProjectRef {
  prefix: string
  hash: string
  purpose: string
  isActive: boolean
  expiresAt: Date | null
  /** none given: NO_LIMITS */
  limits?: KeyLimits
}

export interface ApiKeyPatch {
  purpose?: string
  isActive?: boolean
  /** null removes the expiry */
  expiresAt?: Date | null
  /** the limits named change (null removes one); the others stay */
  limits?: Partial<KeyLimits>
}

export interface EndpointKeySummary {
  id: string
  prefix: string
  purpose: string
  isActive: boolean
}

export interface EndpointRecord extends EndpointLocator {
  id: string
  calls: number
  keys: EndpointKeySummary[]
  createdAt: Date
}

/** What verification needs, read in one query on every data request. */
export interface EndpointKeyLookup {
  endpointId: string
  /**
   * the key with the supplied prefix, only if it is assigned to this
   * endpoint; `expiresAt` in milliseconds since the epoch, null for never
   */
  key: {
    id: string
    hash: string
    isActive: boolean
    expiresAt: number | null
    /** null when the key has no limit at all, so that such a key costs one comparison */
    limits: KeyLimits | null
    /** with a `bytesPerDay` limit: the bytes the key's downloads sent this UTC day, as stored; else 0 */
    bytesToday: number
  } | null
}

/** A download slot a key holds (DESIGN.md §4.3): its number, and the random id of the holder's lease. */
export interface DownloadSlot {
  keyId: string
  slot: number
  leaseId: string
}

/**
 * What became of a data request's key (DESIGN.md §4.1): `ok`, or a refusal.
 * `unknown_key` is a wrong secret on a prefix assigned to the endpoint (a
 * guess at that key); `no_key` and `unknown_prefix` name no key;
 * `rate_limited` is a verified key refused for one of its limits (§4.3).
 */
export const USAGE_OUTCOMES = ['ok', 'unknown_key', 'disabled', 'expired', 'no_key', 'unknown_prefix', 'rate_limited'] as const
export type UsageOutcome = typeof USAGE_OUTCOMES[number]

/** Requests to one endpoint in one UTC hour with one key (or none) and outcome. */
export interface UsageCount {
  /** the hour's start, in milliseconds since the epoch */
  hour: number
  endpointId: string
  keyId: string | null
  outcome: UsageOutcome
  count: number
  /** bytes the downloads of this bucket sent (outcome `ok`); default 0 */
  bytes?: number
}

/** Counter increments and last-used times gathered between two flushes. */
export interface UsageBatch {
  /** endpoint id -> number of successful authentications to add */
  calls: Map<string, number>
  /** key id -> time of its latest successful authentication */
  lastUsed: Map<string, Date>
  /** requests by hour, endpoint, key and outcome, to add to the usage history; any key */
  counts: Map<string, UsageCount>
}

export interface UsageQuery {
  granularity: 'hour' | 'day'
  /** buckets that start at or after `from` and before `to` */
  from: Date
  to: Date
  keyId?: string
  endpointId?: string
  /** at most this many rows */
  limit: number
}

/** One bucket of the usage history, as the usage route answers it. */
export interface UsageRow {
  /** the UTC hour or day the bucket starts at */
  start: Date
  endpointId: string
  keyId: string | null
  outcome: UsageOutcome
  count: number
  /** bytes sent by the downloads counted here (the adapters always tell; 0 when absent) */
  bytes?: number
}

/** The endpoint, key and outcome a run of usage rows shares (see UsageColumns). */
export interface UsageSeriesName {
  endpointId: string
  keyId: string | null
  outcome: UsageOutcome
}

/**
 * Usage rows as columns, in the order `queryUsage` answers them: row `i` is
 * `series[seriesOf[i]]` at `starts[i]` (ms since the epoch) with
 * `counts[i]` and `bytes[i]`. A long history then costs typed arrays instead
 * of an object per row, which the collector would otherwise copy and mark
 * while the answer is written (pauses of 10-16 ms on a year of 100 keys).
 */
export interface UsageColumns {
  length: number
  series: UsageSeriesName[]
  starts: Float64Array
  seriesOf: Uint32Array
  counts: Float64Array
  bytes: Float64Array
}

/** Who made a management change, for its audit entry: what the host's `getActor` answered. */
export interface AuditContext {
  actor: string | null
}

export const AUDIT_ACTIONS = ['key.created', 'key.updated', 'key.regenerated', 'key.deleted',
  'endpoint.created', 'endpoint.updated', 'endpoint.deleted', 'link.created', 'link.revoked'] as const
export type AuditAction = typeof AUDIT_ACTIONS[number]

/** A field's value before and after a change (null where there was none). */
export interface AuditChange {
  from: unknown
  to: unknown
}

/**
 * One management change, written in the same transaction as the change.
 * Key changes name the key's fields (purpose, isActive, expiresAt, limits, prefix);
 * endpoint changes its `keyIds`. Never a key value or hash.
 */
export interface AuditEntry {
  /** increasing with time; the cursor of `listAudit` */
  id: string
  at: Date
  actor: string | null
  action: AuditAction
  keyId: string | null
  endpointId: string | null
  /** what was changed, as it read then: the key's prefix, or the endpoint's path */
  target: string
  /** only the fields that changed */
  changes: Record<string, AuditChange>
}

export interface AuditQuery {
  /** entries older than this one (an `id` from an earlier page) */
  before?: string
  limit: number
}

/** Where an Idempotency-Key is remembered: per endpoint and per API key. */
export interface IdempotencyScope {
  endpointId: string
  keyId: string
}

/** The most keys one endpoint holds: what one PUT may assign, and where adding one key stops. */
export const MAX_ENDPOINT_KEYS = 1000

/** A dataset or pipeline by its place in a project, as the host names it. */
export interface ResourcePlace {
  type: ResourceType
  modelSequence: number
  resourceSequence: number
}

/** A page of a project's keys or endpoints, in the list's order. */
export interface ListQuery {
  /** at most this many items */
  limit: number
  /** only the items after this cursor: the `next` of an earlier page; `InvalidCursorError` when it is not one */
  after?: string
  /**
   * only the items whose text (see each list) contains this; letters A-Z
   * match in either case, every other character only itself
   */
  search?: string
}

export interface EndpointListQuery extends ListQuery {
  /** with `search`: the endpoints at these places match too (the route finds them by the host's names) */
  searchPlaces?: readonly ResourcePlace[]
  /** only the endpoints this key is assigned to */
  keyId?: string
}

export interface ListPage<T> {
  items: T[]
  /** the `after` of the next page; null when no item follows */
  next: string | null
}

/** Thrown by the paged lists for an `after` that no page of theirs gave. */
export class InvalidCursorError extends Error {
  readonly code = 'FDE_INVALID_CURSOR'
  constructor () {
    super('not a cursor of this list')
  }
}

export type EndpointKeyResult =
  /** `changed`: false when the key was already assigned (add) or was not (remove); nothing was written then */
  | { ok: true, changed: boolean, endpoint: EndpointRecord }
  /**
   * nothing was written: no endpoint there; the key is not one of the
   * project's; the endpoint holds MAX_ENDPOINT_KEYS already (add); the key is
   * its last (remove)
   */
  | { ok: false, problem: 'no_endpoint' | 'no_key' | 'full' | 'last_key' }

export type PutEndpointResult =
  | { ok: true, created: boolean, endpoint: EndpointRecord }
  /** some key ids are not keys of the endpoint's project; nothing was written */
  | { ok: false, unknownKeyIds: string[] }

export type IdempotencyClaim =
  /** no live record existed: the record now carries the caller's token; complete or release it */
  | { claimed: true }
  /** another call holds the key; `response` is its stored body, or null while it runs */
  | { claimed: false, response: string | null }

/**
 * Called inside a change's transaction with the record the change leaves,
 * before it commits; a throw rolls the change back and is rethrown. The
 * management routes make their answer there, so that an answer that cannot
 * be made never follows a write.
 */
export type BeforeCommit<T> = (record: T) => void

/** A download link (DESIGN.md §4.2) as the management API shows it: never its token. */
export interface LinkRecord {
  id: string
  keyId: string
  endpointId: string
  /** the dataset GET's query parameters the link downloads with */
  params: Record<string, string>
  createdAt: Date
  expiresAt: Date
  revokedAt: Date | null
}

export interface NewLink {
  id: string
  keyId: string
  /** the key's prefix now: a regenerated key (another prefix) ends the link */
  keyPrefix: string
  endpointId: string
  params: Record<string, string>
  expiresAt: Date
}

/** What a link's use needs, read in one query on every use. */
export interface LinkUse {
  revokedAt: Date | null
  /** the key's prefix when the link was minted */
  keyPrefix: string
  /**
   * The key's state now (the link goes with a deleted key); `expiresAt` in ms
   * since the epoch; its limits and, with a bytesPerDay limit, its bytes of
   * the UTC day, as `findEndpointKey` reads them.
   */
  key: { id: string, prefix: string, isActive: boolean, expiresAt: number | null, limits: KeyLimits | null, bytesToday: number }
  /** whether the key is still assigned to the endpoint */
  assigned: boolean
  /** the endpoint, null when it was deleted */
  endpoint: (EndpointLocator & { id: string }) | null
}

/** A secret that signs link tokens; every instance reads the same set from the store. */
export interface LinkSecret {
  id: string
  /** base64url of 32 random bytes */
  secret: string
  createdAt: Date
}

export interface LinkListQuery {
  keyId?: string
  /** at most this many, newest first */
  limit: number
}

/** Thrown by `createKey` / `replaceKeySecret` when the prefix is already taken. */
export class PrefixTakenError extends Error {
  readonly code = 'FDE_PREFIX_TAKEN'
  constructor () {
    super('API key prefix already in use')
  }
}

export interface Storage {
  /**
   * Finds the endpoint at `locator` and, when `prefix` is given, the key with
   * that prefix if it is assigned to the endpoint. Null when there is no endpoint.
   * Runs on every data request: a store that knows the answer without waiting
   * (a remembered lookup still valid) may return it at once instead of a promise.
   */
  findEndpointKey (locator: EndpointLocator, prefix: string | null): Promise<EndpointKeyLookup | null> | EndpointKeyLookup | null
  /**
   * Adds the batch atomically (`calls = calls + n`); ids that no longer exist
   * are ignored. A failure is retried with the batch merged into the next one.
   * When the write may have taken effect (its commit's answer was lost), throw
   * a `UsageInDoubtError` instead: the batch is then held aside until its
   * `fate()` says whether it was written, so it is never counted twice.
   */
  applyUsage (batch: UsageBatch): Promise<void>
  /**
   * The usage history of the project's endpoints, by hour or by UTC day,
   * ordered by start, endpoint id, key id (none first) and outcome; only
   * buckets with a count. An endpoint's history goes with the endpoint; a
   * deleted key's stays.
   */
  queryUsage (project: ProjectRef, query: UsageQuery): Promise<UsageRow[]>
  /**
   * Optional: how many rows `queryUsage` would answer, counting no further
   * than `query.limit`. With it the usage route refuses a range over its
   * row cap without reading the rows.
   */
  countUsage? (project: ProjectRef, query: UsageQuery): Promise<number>
  /**
   * Optional: what `queryUsage` answers, as columns. The usage route prefers
   * it: a long history is then written without an object per row.
   */
  queryUsageColumns? (project: ProjectRef, query: UsageQuery): Promise<UsageColumns>
  /**
   * Optional: what `queryUsageColumns` answers when the range holds no more
   * than `query.limit` rows, or null when it holds more (none of them need
   * be read). The usage route prefers it to `countUsage` and a read one after
   * the other: a store can count and read at once (PgStorage does).
   */
  queryUsageWithinLimit? (project: ProjectRef, query: UsageQuery): Promise<UsageColumns | null>
  /** Deletes history buckets that start before `before`; answers how many. */
  pruneUsage (before: Date): Promise<number>

  // Every change below writes its audit entry (`AuditEntry`) in the same
  // transaction, with `audit.actor`; a call that changes nothing writes none.
  // `beforeCommit`, when given, runs in that transaction too (BeforeCommit).

  /** The project's keys, oldest first. */
  listKeys (project: ProjectRef): Promise<ApiKeyRecord[]>
  /**
   * A page of the project's keys in listKeys' order; `search` looks in the
   * prefix and the purpose. Reads only the page's rows (and, with `search`,
   * the rows it passes over), however many keys the project has.
   */
  listKeysPage (project: ProjectRef, query: ListQuery): Promise<ListPage<ApiKeyRecord>>
  getKey (project: ProjectRef, keyId: string): Promise<ApiKeyRecord | null>
  /** @throws PrefixTakenError */
  createKey (key: NewApiKey, audit: AuditContext, beforeCommit?: BeforeCommit<ApiKeyRecord>): Promise<ApiKeyRecord>
  updateKey (project: ProjectRef, keyId: string, patch: ApiKeyPatch, audit: AuditContext,
    beforeCommit?: BeforeCommit<ApiKeyRecord>): Promise<ApiKeyRecord | null>
  /** New prefix and hash for a key; assignments stay. @throws PrefixTakenError */
  replaceKeySecret (project: ProjectRef, keyId: string, secret: { prefix: string, hash: string }, audit: AuditContext,
    beforeCommit?: BeforeCommit<ApiKeyRecord>): Promise<ApiKeyRecord | null>
  /**
   * Deletes a key and its assignments; endpoints stay. Each endpoint it
   * leaves gets an `endpoint.updated` entry (its keyIds before and after),
   * written before the `key.deleted` one, in the same transaction.
   */
  deleteKey (project: ProjectRef, keyId: string, audit: AuditContext): Promise<boolean>

  /** The project's endpoints, by model sequence, type, then resource sequence. */
  listEndpoints (project: ProjectRef): Promise<EndpointRecord[]>
  /**
   * A page of the project's endpoints in listEndpoints' order, each with its
   * keys; `search` looks in the path (`endpointPath`), and `searchPlaces`
   * match too. Reads only the page's endpoints and their keys.
   */
  listEndpointsPage (project: ProjectRef, query: EndpointListQuery): Promise<ListPage<EndpointRecord>>
  getEndpoint (locator: EndpointLocator): Promise<EndpointRecord | null>
  /** Creates the endpoint or replaces its keys, all or nothing; `beforeCommit` gets the endpoint and whether it was created. */
  putEndpoint (locator: EndpointLocator, keyIds: string[], audit: AuditContext,
    beforeCommit?: (endpoint: EndpointRecord, created: boolean) => void): Promise<PutEndpointResult>
  /** Deletes an endpoint and its assignments; keys stay. */
  deleteEndpoint (locator: EndpointLocator, audit: AuditContext): Promise<boolean>
  /**
   * Assigns one more key to an existing endpoint, audited as `endpoint.updated`
   * with the whole `keyIds` before and after. Reads and writes only that
   * endpoint's rows and the key's, however large the project. `beforeCommit`
   * gets the endpoint whenever the answer is `ok` (changed or not).
   */
  addEndpointKey (locator: EndpointLocator, keyId: string, audit: AuditContext,
    beforeCommit?: BeforeCommit<EndpointRecord>): Promise<EndpointKeyResult>
  /** Takes one key off an endpoint, never its last; audited as addEndpointKey. */
  removeEndpointKey (locator: EndpointLocator, keyId: string, audit: AuditContext,
    beforeCommit?: BeforeCommit<EndpointRecord>): Promise<EndpointKeyResult>

  /** The project's audit entries, newest first. */
  listAudit (project: ProjectRef, query: AuditQuery): Promise<AuditEntry[]>
  /** Deletes audit entries made before `before`; answers how many. */
  pruneAudit (before: Date): Promise<number>

  /**
   * Claims `key` for an endpoint and API key: another API key's same
   * Idempotency-Key is another record. A record older than `ttlMs` counts as
   * absent. Two concurrent claims of the same key: exactly one gets
   * `claimed: true`, and the record it writes keeps `token`, a random id the
   * caller made for this call, so that the caller can release it without
   * knowing the answer. (Records from before keys scoped them hold for the
   * whole endpoint until they expire.)
   */
  claimIdempotencyKey (scope: IdempotencyScope, key: string, ttlMs: number, token: string): Promise<IdempotencyClaim>
  /** Stores the response body of a claimed key. */
  completeIdempotencyKey (scope: IdempotencyScope, key: string, response: string): Promise<void>
  /**
   * Deletes the record of `key` only if `token` claimed it and it has no
   * response; true when it did. The plugin calls it when a run did not start,
   * and also when the claim call itself failed, not knowing whether the claim
   * was written: it must never touch a record another token claimed.
   */
  releaseIdempotencyKey (scope: IdempotencyScope, key: string, token: string): Promise<boolean>
  /** Deletes idempotency records made before `before`, answered or held; answers how many. */
  pruneIdempotencyKeys (before: Date): Promise<number>

  // Per-key limits (DESIGN.md §4.3). Times are the plugin's clock in
  // milliseconds since the epoch, so that every store reads them alike.

  /**
   * Counts one call of a key in the minute that starts at `windowStart`,
   * unless `limit` calls are counted there already; atomic, so exact across
   * instances. Answers the calls counted in the window after this one, or
   * null when refused. One row per key: a later window starts the count
   * again at 1, an earlier one (a clock behind) counts in the later. A key
   * deleted since its lookup is admitted (1), writing nothing: its request
   * was checked before the deletion, like every request then under way.
   */
  takeRequest (keyId: string, windowStart: number, limit: number): Promise<number | null>
  /**
   * Claims one of a key's `limit` download slots for `leaseId` until
   * `expiresAt`: a slot is free when no lease holds it or its lease ended
   * before `now`. Answers the slot's number, or null when all are held.
   * Never answers a slot another live lease holds, on any instance. A key
   * deleted since its lookup gets slot 0, held by nothing (as takeRequest).
   */
  claimDownloadSlot (keyId: string, limit: number, leaseId: string, now: number, expiresAt: number): Promise<number | null>
  /** Moves the end of these leases to `expiresAt` (those still held by their lease). */
  renewDownloadSlots (slots: readonly DownloadSlot[], expiresAt: number): Promise<void>
  /** Frees a slot if `leaseId` still holds it. */
  releaseDownloadSlot (slot: DownloadSlot): Promise<void>

  /**
   * Stores a new link of the project's key (`link.created`, with the key id
   * and endpoint id, in the same transaction). Null, writing nothing, when the
   * key is not the project's.
   */
  createLink (project: ProjectRef, link: NewLink, audit: AuditContext): Promise<LinkRecord | null>
  /** The link's revocation, its key and its endpoint as they are now; null when there is no such link (or its key was deleted). */
  findLinkUse (linkId: string): Promise<LinkUse | null>
  /** The project's links (of one key, with `keyId`), newest first. */
  listLinks (project: ProjectRef, query: LinkListQuery): Promise<LinkRecord[]>
  /**
   * Revokes one of the project's links (`link.revoked`); a revoked link keeps
   * its first `revokedAt`, and is audited once. Null when the project has no such link.
   */
  revokeLink (project: ProjectRef, linkId: string, audit: AuditContext): Promise<LinkRecord | null>
  /** Deletes links that expired before `before`; answers how many. */
  pruneLinks (before: Date): Promise<number>
  /** Every link-signing secret, oldest first. */
  listLinkSecrets (): Promise<LinkSecret[]>
  /** Adds a link-signing secret; a secret with that id already there stays as it is. */
  addLinkSecret (secret: LinkSecret): Promise<void>
  /** Deletes a link-signing secret: the links it signed stop verifying. */
  deleteLinkSecret (id: string): Promise<boolean>

  close (): Promise<void>
}
