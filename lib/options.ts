import { availableParallelism, tmpdir } from 'node:os'
import { resolve } from 'node:path'
import type { FastifyRequest } from 'fastify'
import type { DatasetSource } from './host/dataset-source.js'
import type { JobSource } from './host/job-source.js'
import type { KeyHasher } from './keys/key-hasher.js'
import type { PipelineRunner } from './host/pipeline-runner.js'
import { NO_LIMITS, type KeyLimits, type Storage } from './storage/storage.js'
import type { FailureThrottleOptions } from './keys/failure-throttle.js'
import type { MetricsOptions } from './metrics.js'
import type { TarSpoolOptions } from './formats/tar-spool.js'
import type { RenderedFilesOptions } from './downloads/rendered-files.js'
import { zstdAvailable } from './formats/parquet-row-group.js'
import { InvalidOptionError } from './errors.js'
import { DEFAULT_CHUNK_SIZE } from './formats/pace.js'

export const MANAGE_API_KEYS = 'ManageAPIKeys'

export interface DataEndpointsOptions {
  /** keys, endpoints, counters and idempotency records (SqliteStorage, PgStorage, or your own) */
  storage: Storage
  datasets: DatasetSource
  pipelines: PipelineRunner
  jobs: JobSource
  /** the caller's permissions; management routes need `ManageAPIKeys` */
  getPermissions: (request: FastifyRequest) => Iterable<string> | Promise<Iterable<string>>
  /** who makes a management change, for its audit entry (a user name, an e-mail); default: none (null) */
  getActor?: (request: FastifyRequest) => string | null | undefined | Promise<string | null | undefined>
  /** base of `job_url`; default: the request's protocol and host */
  baseUrl?: string
  /** where the management routes live; default '/api-keys' */
  managementPrefix?: string
  /** refuse data requests over plain HTTP from non-loopback clients; default true */
  requireHttps?: boolean
  /** bcrypt cost for new keys; default 10 */
  bcryptCost?: number
  /** replaces bcrypt (tests spy on it); keys are hashed and compared through it */
  hasher?: KeyHasher
  /** milliseconds between writes of batched `calls` and `updatedAt`; default 1000 */
  usageFlushInterval?: number
  /** verification results remembered (each of matches and mismatches); default 10000 */
  verificationCacheSize?: number
  /** bcrypt comparisons running at once; default half the CPUs (at least 1), so verified traffic keeps the rest */
  maxConcurrentHashes?: number
  /** bcrypt comparisons waiting; beyond it 429 (held the failure throttle's delayMs); default 100 */
  maxQueuedHashes?: number
  /**
   * bcrypt comparisons waiting for one key; beyond it 429, as for
   * `maxQueuedHashes`; default 1. Keys are served in turn, so guesses at one
   * key (or a few) hold only this many of `maxQueuedHashes` places, and other
   * keys' first requests wait for about one comparison per key waiting. One
   * is enough for a key's owner: concurrent first requests with one value
   * share one comparison, and a wrong value is compared once, then remembered.
   */
  maxQueuedHashesPerKey?: number
  /** per-address bound on failed authentications (429, held delayMs, beyond it), or false; default 50 per minute, held 1 s */
  failureThrottle?: FailureThrottleOptions | false
  /** how long an Idempotency-Key is remembered, in milliseconds; default 24 h */
  idempotencyTtl?: number
  /** how long the hourly and daily usage history is kept, in milliseconds; default 400 days */
  usageRetention?: number
  /** how long audit entries of management changes are kept, in milliseconds; default 730 days */
  auditRetention?: number
  /** rows a usage query may answer; a query that would answer more gets 400; default 100000 */
  usageQueryMaxRows?: number
  /**
   * the longest a key may live, in milliseconds: a new key without `expiresAt`
   * expires this long after its creation, and no expiry may be set later than
   * this long from now; default none
   */
  maxKeyLifetime?: number
  /**
   * the limits a new key gets when its creation names none (DESIGN.md §4.3):
   * `{ requestsPerMinute?, concurrentDownloads?, bytesPerDay? }`, each a
   * positive integer or null; default none
   */
  defaultKeyLimits?: Partial<KeyLimits>
  /**
   * how long a download slot stays held without renewal, in milliseconds: a
   * running download renews it every third of this, and the slot of an
   * instance that crashed is free again within it; default 30 s
   */
  downloadSlotLease?: number
  /**
   * the longest a download link may live, in milliseconds (DESIGN.md §4.2):
   * a link asks for `expiresIn` seconds, at most this; default 7 days
   */
  maxLinkLifetime?: number
  /**
   * how often, in milliseconds, each instance reads the link-signing secrets
   * again (to learn of a rotation or a retired secret); default one minute
   */
  linkSecretRefreshInterval?: number
  /**
   * where tar entries wait until their size is known: `directory` (an existing
   * folder the plugin makes its own folder in; default the OS temporary folder), `maxBytes`
   * on disk across all tar downloads (default 512 MiB; beyond it 503),
   * `maxWaitMs` a started download waits for budget (default 10 s),
   * `memoryPerEntry` held in memory before a file is used (default 256 KiB)
   */
  tarSpool?: Partial<TarSpoolOptions>
  /** Prometheus metrics, registered in the host's prom-client registry: `{ registry }`; default none */
  metrics?: MetricsOptions
  /** close the storage when Fastify closes; default true */
  closeStorage?: boolean
  /**
   * answer requests under /api and the management prefix that match no route
   * with 404 `{"message":"Not found"}` (Fastify's default 404 echoes and logs
   * the URL, api_key included); default true. Turn off if the host sets its
   * own not-found handler for those prefixes.
   */
  apiNotFoundHandler?: boolean
  /**
   * characters of a download gathered into one chunk, one write; default
   * 65536. It bounds what the plugin holds for a client that stops reading:
   * the one chunk its response is sending (bytes for ASCII text, up to three
   * times as many for other scripts; a single longer row makes a longer chunk).
   * A download that fits in one chunk is sent whole, with a Content-Length.
   * Smaller chunks hold less per slow client and cost more writes.
   */
  downloadChunkSize?: number
  /**
   * compress sql, json, `meta=ddl` and tar downloads (and JSON answers) with
   * br or gzip when the client's Accept-Encoding asks for it, through
   * @fastify/compress; default true. zip archives are compressed already and
   * go as they are. Turn off when a proxy in front compresses.
   */
  compression?: boolean
  /**
   * bytes of small rendered downloads (those within one chunk) kept in memory
   * under their ETag from their second rendering on, so a repeated download
   * of a dataset with a `revision` skips reading and rendering; default
   * 16 MiB, 0 turns it off
   */
  renderedBodyCacheBytes?: number
  /**
   * bytes of values in one Parquet row group or Arrow record batch; default
   * 512 KiB. A download holds about one (a client that stops reading holds the
   * one being sent); larger groups compress better and cost more memory
   */
  columnarBatchBytes?: number
  /** worker threads that encode Parquet row groups off the event loop; default the CPUs less one, 1 to 4 */
  parquetThreads?: number
  /**
   * Parquet downloads that may wait for an encoder (a slot: two per thread);
   * beyond it a download that has not started answers 503 with Retry-After;
   * default 64
   */
  parquetMaxWaiting?: number
  /** compression of Parquet pages: 'snappy' (default, every reader has it), 'zstd' (Node 22.15 and later) or 'none' */
  parquetCompression?: 'snappy' | 'zstd' | 'none'
  /**
   * where `parquet` and `arrow` downloads of datasets with a `revision` are
   * rendered once and served from, with Content-Length and Range:
   * `directory` (an existing folder the plugin makes its own folder in;
   * default the OS temporary folder), `maxBytes` on disk (default 1 GiB,
   * least recently used files go first; 0 turns the cache off)
   */
  renderedFiles?: Partial<RenderedFilesOptions>
  /**
   * serve the management web page at `<managementPrefix>/ui/`; default true.
   * The page holds no data: every call it makes goes to the management API,
   * which needs `ManageAPIKeys` through `getPermissions`.
   */
  managementUi?: boolean
}

export const DEFAULTS = {
  managementPrefix: '/api-keys',
  requireHttps: true,
  bcryptCost: 10,
  usageFlushInterval: 1000,
  verificationCacheSize: 10_000,
  maxConcurrentHashes: Math.max(1, Math.floor(availableParallelism() / 2)),
  maxQueuedHashes: 100,
  maxQueuedHashesPerKey: 1,
  failureThrottle: { maxFailures: 50, windowMs: 60_000 },
  idempotencyTtl: 24 * 60 * 60 * 1000,
  usageRetention: 400 * 24 * 60 * 60 * 1000,
  auditRetention: 730 * 24 * 60 * 60 * 1000,
  usageQueryMaxRows: 100_000,
  maxLinkLifetime: 7 * 24 * 60 * 60 * 1000,
  linkSecretRefreshInterval: 60_000,
  // directory: os.tmpdir() when the plugin registers
  tarSpool: { maxBytes: 512 * 1024 * 1024, maxWaitMs: 10_000, memoryPerEntry: 256 * 1024 },
  closeStorage: true,
  apiNotFoundHandler: true,
  managementUi: true,
  downloadChunkSize: DEFAULT_CHUNK_SIZE,
  compression: true,
  renderedBodyCacheBytes: 16 * 1024 * 1024,
  columnarBatchBytes: 512 * 1024,
  parquetThreads: Math.max(1, Math.min(4, availableParallelism() - 1)),
  parquetMaxWaiting: 64,
  parquetCompression: 'snappy',
  // directory: os.tmpdir() when the plugin registers
  renderedFiles: { maxBytes: 1024 * 1024 * 1024 },
  defaultKeyLimits: NO_LIMITS,
  downloadSlotLease: 30_000
} as const

export type ResolvedOptions = Required<Omit<DataEndpointsOptions, 'baseUrl' | 'hasher' | 'failureThrottle' | 'maxKeyLifetime' | 'getActor' | 'tarSpool' | 'metrics' | 'renderedFiles' | 'defaultKeyLimits'>> & {
  defaultKeyLimits: KeyLimits
  renderedFiles: RenderedFilesOptions
  metrics: MetricsOptions | undefined
  baseUrl: string | undefined
  getActor: DataEndpointsOptions['getActor']
  maxKeyLifetime: number | undefined
  hasher: KeyHasher | undefined
  failureThrottle: FailureThrottleOptions | false
  tarSpool: TarSpoolOptions
}

function fail (message: string): never {
  throw new InvalidOptionError(message)
}

function requireMethods (name: string, value: unknown, methods: string[]): void {
  if (typeof value !== 'object' || value === null) fail(`option "${name}" is required and must be an object`)
  for (const m of methods) {
    if (typeof (value as Record<string, unknown>)[m] !== 'function') fail(`option "${name}" must have a method "${m}"`)
  }
}

function positiveInteger (name: string, value: unknown, min = 1, max = Number.MAX_SAFE_INTEGER): void {
  if (!Number.isInteger(value) || (value as number) < min || (value as number) > max) {
    fail(`option "${name}" must be an integer from ${min} to ${max}`)
  }
}

/** Checks every option and fills in defaults; throws an error naming the first bad one. */
export function resolveOptions (options: Partial<DataEndpointsOptions>): ResolvedOptions {
  requireMethods('storage', options.storage, ['findEndpointKey', 'applyUsage', 'queryUsage', 'pruneUsage', 'listAudit', 'pruneAudit',
    'pruneIdempotencyKeys', 'listKeys', 'createKey',
    'putEndpoint', 'claimIdempotencyKey', 'findLinkUse', 'listLinkSecrets', 'close'])
  requireMethods('datasets', options.datasets, ['getDataset'])
  requireMethods('pipelines', options.pipelines, ['getPipeline'])
  requireMethods('jobs', options.jobs, ['getJob'])
  if (typeof options.getPermissions !== 'function') fail('option "getPermissions" is required and must be a function')
  if (options.getActor !== undefined && typeof options.getActor !== 'function') fail('option "getActor" must be a function')
  if (options.metrics !== undefined) {
    const registry = (options.metrics as { registry?: unknown } | null)?.registry as Record<string, unknown> | undefined
    if (typeof registry !== 'object' || registry === null || typeof registry.registerMetric !== 'function') {
      fail('option "metrics" must be { registry }, a prom-client Registry')
    }
  }
  if (options.hasher !== undefined) requireMethods('hasher', options.hasher, ['hash', 'compare'])

  const o = { ...DEFAULTS, ...stripUndefined(options) } as ResolvedOptions
  if (o.baseUrl !== undefined) {
    let url: URL | undefined
    try { url = new URL(o.baseUrl) } catch {}
    if (url === undefined || !/^https?:$/.test(url.protocol) || url.search !== '' || url.hash !== '') {
      fail('option "baseUrl" must be an absolute http(s) URL without query or fragment')
    }
    o.baseUrl = o.baseUrl.replace(/\/+$/, '')
  }
  if (typeof o.managementPrefix !== 'string' || !/^\/[A-Za-z0-9._~\-/]*[^/]$/.test(o.managementPrefix)) {
    fail('option "managementPrefix" must be a path such as "/api-keys" (leading slash, no trailing slash)')
  }
  if (o.managementPrefix === '/api' || o.managementPrefix.startsWith('/api/')) {
    fail('option "managementPrefix" must not lie under "/api", where the data routes are')
  }
  for (const name of ['requireHttps', 'closeStorage', 'apiNotFoundHandler', 'managementUi', 'compression'] as const) {
    if (typeof o[name] !== 'boolean') fail(`option "${name}" must be a boolean`)
  }
  positiveInteger('bcryptCost', o.bcryptCost, 4, 31)
  positiveInteger('usageFlushInterval', o.usageFlushInterval, 1, 60 * 60 * 1000)
  positiveInteger('verificationCacheSize', o.verificationCacheSize)
  positiveInteger('maxConcurrentHashes', o.maxConcurrentHashes, 1, 1024)
  positiveInteger('maxQueuedHashes', o.maxQueuedHashes, 0)
  positiveInteger('maxQueuedHashesPerKey', o.maxQueuedHashesPerKey)
  positiveInteger('idempotencyTtl', o.idempotencyTtl)
  positiveInteger('usageRetention', o.usageRetention, 60 * 60 * 1000)
  positiveInteger('auditRetention', o.auditRetention, 60 * 60 * 1000)
  positiveInteger('usageQueryMaxRows', o.usageQueryMaxRows)
  if (o.maxKeyLifetime !== undefined) positiveInteger('maxKeyLifetime', o.maxKeyLifetime, 60 * 1000)
  positiveInteger('maxLinkLifetime', o.maxLinkLifetime, 1000)
  positiveInteger('linkSecretRefreshInterval', o.linkSecretRefreshInterval, 1000, 24 * 60 * 60 * 1000)
  positiveInteger('downloadChunkSize', o.downloadChunkSize, 1024, 16 * 1024 * 1024)
  positiveInteger('renderedBodyCacheBytes', o.renderedBodyCacheBytes, 0, 2 ** 32)
  if (o.failureThrottle !== false) {
    if (typeof o.failureThrottle !== 'object' || o.failureThrottle === null) {
      fail('option "failureThrottle" must be false or { maxFailures, windowMs }')
    }
    positiveInteger('failureThrottle.maxFailures', o.failureThrottle.maxFailures)
    positiveInteger('failureThrottle.windowMs', o.failureThrottle.windowMs)
    if (o.failureThrottle.delayMs !== undefined) positiveInteger('failureThrottle.delayMs', o.failureThrottle.delayMs, 0, 60_000)
    if (o.failureThrottle.maxClients !== undefined) positiveInteger('failureThrottle.maxClients', o.failureThrottle.maxClients)
  }
  positiveInteger('columnarBatchBytes', o.columnarBatchBytes, 64 * 1024, 1024 ** 3)
  positiveInteger('parquetThreads', o.parquetThreads, 1, 64)
  positiveInteger('parquetMaxWaiting', o.parquetMaxWaiting, 0)
  if (!['snappy', 'zstd', 'none'].includes(o.parquetCompression)) fail('option "parquetCompression" must be "snappy", "zstd" or "none"')
  if (o.parquetCompression === 'zstd' && !zstdAvailable()) {
    fail(`option "parquetCompression" "zstd" needs Node.js 22.15 or later (this is ${process.version}); use "snappy"`)
  }
  o.defaultKeyLimits = resolveKeyLimits(options.defaultKeyLimits)
  positiveInteger('downloadSlotLease', o.downloadSlotLease, 100, 60 * 60 * 1000)
  o.tarSpool = resolveTarSpool(options.tarSpool)
  o.renderedFiles = resolveRenderedFiles(options.renderedFiles)
  return o
}

const LIMIT_FIELDS = ['requestsPerMinute', 'concurrentDownloads', 'bytesPerDay'] as const

function resolveKeyLimits (given: unknown): KeyLimits {
  if (given === undefined) return NO_LIMITS
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    fail('option "defaultKeyLimits" must be an object { requestsPerMinute?, concurrentDownloads?, bytesPerDay? }')
  }
  const unknown = Object.keys(given).find((name) => !(LIMIT_FIELDS as readonly string[]).includes(name))
  if (unknown !== undefined) fail(`option "defaultKeyLimits" has no field "${unknown}"`)
  const limits = { ...NO_LIMITS, ...stripUndefined(given) } as KeyLimits
  for (const name of LIMIT_FIELDS) {
    if (limits[name] !== null) positiveInteger(`defaultKeyLimits.${name}`, limits[name])
  }
  return limits
}

function resolveRenderedFiles (given: unknown): RenderedFilesOptions {
  if (given === undefined) return { directory: tmpdir(), ...DEFAULTS.renderedFiles }
  if (typeof given !== 'object' || given === null || Array.isArray(given)) fail('option "renderedFiles" must be an object { directory?, maxBytes? }')
  const unknown = Object.keys(given).find((name) => name !== 'directory' && name !== 'maxBytes')
  if (unknown !== undefined) fail(`option "renderedFiles" has no field "${unknown}"`)
  const files = { directory: tmpdir(), ...DEFAULTS.renderedFiles, ...stripUndefined(given) } as RenderedFilesOptions
  if (typeof files.directory !== 'string' || files.directory === '' || files.directory.includes('\0')) {
    fail('option "renderedFiles.directory" must be a path')
  }
  files.directory = resolve(files.directory)
  positiveInteger('renderedFiles.maxBytes', files.maxBytes, 0)
  return files
}

const TAR_SPOOL_FIELDS = ['directory', 'maxBytes', 'maxWaitMs', 'memoryPerEntry']

function resolveTarSpool (given: unknown): TarSpoolOptions {
  if (given === undefined) return { directory: tmpdir(), ...DEFAULTS.tarSpool }
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    fail('option "tarSpool" must be an object { directory?, maxBytes?, maxWaitMs?, memoryPerEntry? }')
  }
  // A misspelt field would otherwise leave its default in place unnoticed.
  const unknown = Object.keys(given).find((name) => !TAR_SPOOL_FIELDS.includes(name))
  if (unknown !== undefined) fail(`option "tarSpool" has no field "${unknown}"`)
  const spool = { directory: tmpdir(), ...DEFAULTS.tarSpool, ...stripUndefined(given) } as TarSpoolOptions
  if (typeof spool.directory !== 'string' || spool.directory === '' || spool.directory.includes('\0')) {
    fail('option "tarSpool.directory" must be a path')
  }
  spool.directory = resolve(spool.directory)
  positiveInteger('tarSpool.maxBytes', spool.maxBytes, 0)
  // setTimeout's limit, about 24 days
  positiveInteger('tarSpool.maxWaitMs', spool.maxWaitMs, 0, 2 ** 31 - 1)
  positiveInteger('tarSpool.memoryPerEntry', spool.memoryPerEntry, 0, 1024 ** 3)
  return spool
}

function stripUndefined<T extends object> (value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>
}
