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
}

export interface NewApiKey extends ProjectRef {
  prefix: string
  hash: string
  purpose: string
  isActive: boolean
}

export interface ApiKeyPatch {
  purpose?: string
  isActive?: boolean
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
  /** the key with the supplied prefix, only if it is assigned to this endpoint */
  key: { id: string, hash: string, isActive: boolean } | null
}

/** Counter increments and last-used times gathered between two flushes. */
export interface UsageBatch {
  /** endpoint id -> number of successful authentications to add */
  calls: Map<string, number>
  /** key id -> time of its latest successful authentication */
  lastUsed: Map<string, Date>
}

export type PutEndpointResult =
  | { ok: true, created: boolean, endpoint: EndpointRecord }
  /** some key ids are not keys of the endpoint's project; nothing was written */
  | { ok: false, unknownKeyIds: string[] }

export type IdempotencyClaim =
  /** no live record existed: the record now carries the caller's token; complete or release it */
  | { claimed: true }
  /** another call holds the key; `response` is its stored body, or null while it runs */
  | { claimed: false, response: string | null }

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
   */
  findEndpointKey (locator: EndpointLocator, prefix: string | null): Promise<EndpointKeyLookup | null>
  /**
   * Adds the batch atomically (`calls = calls + n`); ids that no longer exist
   * are ignored. A failure is retried with the batch merged into the next one.
   * When the write may have taken effect (its commit's answer was lost), throw
   * a `UsageInDoubtError` instead: the batch is then held aside until its
   * `fate()` says whether it was written, so it is never counted twice.
   */
  applyUsage (batch: UsageBatch): Promise<void>

  /** The project's keys, oldest first. */
  listKeys (project: ProjectRef): Promise<ApiKeyRecord[]>
  getKey (project: ProjectRef, keyId: string): Promise<ApiKeyRecord | null>
  /** @throws PrefixTakenError */
  createKey (key: NewApiKey): Promise<ApiKeyRecord>
  updateKey (project: ProjectRef, keyId: string, patch: ApiKeyPatch): Promise<ApiKeyRecord | null>
  /** New prefix and hash for a key; assignments stay. @throws PrefixTakenError */
  replaceKeySecret (project: ProjectRef, keyId: string, secret: { prefix: string, hash: string }): Promise<ApiKeyRecord | null>
  /** Deletes a key and its assignments; endpoints stay. */
  deleteKey (project: ProjectRef, keyId: string): Promise<boolean>

  /** The project's endpoints, by model sequence, type, then resource sequence. */
  listEndpoints (project: ProjectRef): Promise<EndpointRecord[]>
  getEndpoint (locator: EndpointLocator): Promise<EndpointRecord | null>
  /** Creates the endpoint or replaces its keys, all or nothing. */
  putEndpoint (locator: EndpointLocator, keyIds: string[]): Promise<PutEndpointResult>
  /** Deletes an endpoint and its assignments; keys stay. */
  deleteEndpoint (locator: EndpointLocator): Promise<boolean>

  /**
   * Claims `key` on an endpoint. A record older than `ttlMs` counts as absent.
   * Two concurrent claims of the same key: exactly one gets `claimed: true`,
   * and the record it writes keeps `token`, a random id the caller made for
   * this call, so that the caller can release it without knowing the answer.
   */
  claimIdempotencyKey (endpointId: string, key: string, ttlMs: number, token: string): Promise<IdempotencyClaim>
  /** Stores the response body of a claimed key. */
  completeIdempotencyKey (endpointId: string, key: string, response: string): Promise<void>
  /**
   * Deletes the record of `key` only if `token` claimed it and it has no
   * response; true when it did. The plugin calls it when a run did not start,
   * and also when the claim call itself failed, not knowing whether the claim
   * was written: it must never touch a record another token claimed.
   */
  releaseIdempotencyKey (endpointId: string, key: string, token: string): Promise<boolean>

  close (): Promise<void>
}
