import { availableParallelism } from 'node:os'
import type { FastifyRequest } from 'fastify'
import type { DatasetSource } from './dataset-source.js'
import type { JobSource } from './job-source.js'
import type { KeyHasher } from './key-hasher.js'
import type { PipelineRunner } from './pipeline-runner.js'
import type { Storage } from './storage.js'
import type { FailureThrottleOptions } from './failure-throttle.js'
import { InvalidOptionError } from './errors.js'

export const MANAGE_API_KEYS = 'ManageAPIKeys'

export interface DataEndpointsOptions {
  /** keys, endpoints, counters and idempotency records (SqliteStorage, PgStorage, or your own) */
  storage: Storage
  datasets: DatasetSource
  pipelines: PipelineRunner
  jobs: JobSource
  /** the caller's permissions; management routes need `ManageAPIKeys` */
  getPermissions: (request: FastifyRequest) => Iterable<string> | Promise<Iterable<string>>
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
  /** bcrypt comparisons waiting; beyond it 429; default 100 */
  maxQueuedHashes?: number
  /** per-address bound on failed authentications (429, held delayMs, beyond it), or false; default 50 per minute, held 1 s */
  failureThrottle?: FailureThrottleOptions | false
  /** how long an Idempotency-Key is remembered, in milliseconds; default 24 h */
  idempotencyTtl?: number
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
  failureThrottle: { maxFailures: 50, windowMs: 60_000 },
  idempotencyTtl: 24 * 60 * 60 * 1000,
  closeStorage: true,
  apiNotFoundHandler: true,
  managementUi: true
} as const

export type ResolvedOptions = Required<Omit<DataEndpointsOptions, 'baseUrl' | 'hasher' | 'failureThrottle'>> & {
  baseUrl: string | undefined
  hasher: KeyHasher | undefined
  failureThrottle: FailureThrottleOptions | false
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
  requireMethods('storage', options.storage, ['findEndpointKey', 'applyUsage', 'listKeys', 'createKey',
    'putEndpoint', 'claimIdempotencyKey', 'close'])
  requireMethods('datasets', options.datasets, ['getDataset'])
  requireMethods('pipelines', options.pipelines, ['getPipeline'])
  requireMethods('jobs', options.jobs, ['getJob'])
  if (typeof options.getPermissions !== 'function') fail('option "getPermissions" is required and must be a function')
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
  for (const name of ['requireHttps', 'closeStorage', 'apiNotFoundHandler', 'managementUi'] as const) {
    if (typeof o[name] !== 'boolean') fail(`option "${name}" must be a boolean`)
  }
  positiveInteger('bcryptCost', o.bcryptCost, 4, 31)
  positiveInteger('usageFlushInterval', o.usageFlushInterval, 1, 60 * 60 * 1000)
  positiveInteger('verificationCacheSize', o.verificationCacheSize)
  positiveInteger('maxConcurrentHashes', o.maxConcurrentHashes, 1, 1024)
  positiveInteger('maxQueuedHashes', o.maxQueuedHashes, 0)
  positiveInteger('idempotencyTtl', o.idempotencyTtl)
  if (o.failureThrottle !== false) {
    if (typeof o.failureThrottle !== 'object' || o.failureThrottle === null) {
      fail('option "failureThrottle" must be false or { maxFailures, windowMs }')
    }
    positiveInteger('failureThrottle.maxFailures', o.failureThrottle.maxFailures)
    positiveInteger('failureThrottle.windowMs', o.failureThrottle.windowMs)
    if (o.failureThrottle.delayMs !== undefined) positiveInteger('failureThrottle.delayMs', o.failureThrottle.delayMs, 0, 60_000)
    if (o.failureThrottle.maxClients !== undefined) positiveInteger('failureThrottle.maxClients', o.failureThrottle.maxClients)
  }
  return o
}

function stripUndefined<T extends object> (value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>
}
