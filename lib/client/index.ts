import { randomUUID } from 'node:crypto'
import type { Readable } from 'node:stream'
import { loggablePrefix } from '../keys/api-key.js'
import type { JobStatus, JobType } from '../host/job-source.js'
import { redactUrl } from '../routes/log-redaction.js'
import { attempt, readJson, type AttemptSpec } from './attempt.js'
import { fileNameOf } from './content-disposition.js'
import { datasetParams, type DatasetQuery } from './dataset-query.js'
import { contentLengthOf, downloadBody } from './download-body.js'
import { nextPageUrl } from './link-header.js'
import { DataEndpointsError, JobWaitTimeoutError, UsageError } from './errors.js'
import { silentLogger, type ClientLogger } from './log.js'
import { checkedUrl } from './request-url.js'
import { DEFAULT_MAX_RETRY_AFTER, DEFAULT_RETRY_DELAYS, realSleep, withRetries, type Sleep } from './retry.js'

// The typed client of fastify-data-endpoints (`fastify-data-endpoints/client`):
// download a dataset as a stream, run a pipeline, read a job and wait for it.
// Node's built-in fetch does the HTTP; retries follow SPEC.md §7.4 (retry.ts).

export type { JobStatus, JobType }
export type { ArchiveType, FormatName } from '../formats/types.js'
export { DATASET_FORMATS, type DatasetQuery } from './dataset-query.js'
export * from './errors.js'
export { jsonLinesLogger, silentLogger, type ClientLogEntry, type ClientLogger } from './log.js'
export { DEFAULT_MAX_RETRY_AFTER, DEFAULT_RETRY_DELAYS, type Sleep } from './retry.js'
export { fileNameOf } from './content-disposition.js'

export interface DataEndpointsClientOptions {
  /** the API key; needed for datasets and pipelines, never sent to job URLs */
  apiKey?: string
  /**
   * a bearer token the host's getPermissions grants ManageAPIKeys for; sent
   * as `Authorization: Bearer …` by the management calls (listKeys, listEndpoints) only
   */
  managementToken?: string
  /** relative URLs given to the methods are resolved against it */
  baseUrl?: string | URL
  /** milliseconds one attempt may take until the answer's headers (and, for JSON answers, its body); default 30000 */
  timeout?: number
  /** waits before each retry, in milliseconds; default [1000, 2000, 4000, 8000, 16000]; [] disables retries */
  retryDelays?: readonly number[]
  /** the longest `Retry-After` (of a 429) waited for, in milliseconds; default 60000 */
  maxRetryAfter?: number
  /** one entry per attempt; default: silent */
  logger?: ClientLogger
  /** send the key over plain HTTP to a non-loopback host; default false */
  allowHttp?: boolean
  /** how the client waits between retries and polls (tests inject their own) */
  sleep?: Sleep
  /** the clock of log times and of waitForJob's time-out; default Date.now */
  now?: () => number
}

export interface CallOptions {
  /** aborts the call, its retries and (for a download) the body stream, with the signal's reason as the error */
  signal?: AbortSignal
}

export interface DatasetDownload {
  /** the data; read it to the end or destroy it */
  body: Readable
  contentType: string | undefined
  /** from Content-Disposition; a suggestion, not a safe path */
  fileName: string | undefined
  /** bytes, when the server said; undefined for a compressed answer, which fetch decompresses */
  contentLength: number | undefined
  /**
   * `Data-Changes-Until`, for an entity with a change column: store it once
   * the body is read whole, and pass it as `since` next time.
   */
  changesUntil: string | undefined
  headers: Headers
}

/** The answer to a pipeline call. */
export interface JobReference {
  job_id: string
  job_url: string
}

/** A key as the management API lists it (never its value). */
export interface ManagedKey {
  id: string
  prefix: string
  purpose: string
  isActive: boolean
  /** ISO 8601 */
  createdAt: string
  /** the last successful authentication, ISO 8601; null before */
  updatedAt: string | null
  expiresAt: string | null
}

/** An endpoint as the management API lists it. */
export interface ManagedEndpoint {
  id: string
  path: string
  method: 'GET' | 'POST'
  type: 'dataset' | 'pipeline'
  organization: string
  project: string
  modelSequence: number
  resourceSequence: number
  resourceName?: string
  calls: number
  keys: Array<{ id: string, prefix: string, purpose: string, isActive: boolean }>
  createdAt: string
}

export interface ListOptions extends CallOptions {
  /** only the items holding this text (the API's `q`): a key's prefix or purpose, an endpoint's path or name */
  search?: string
  /** items per request, 1 to 500; default 500 */
  pageSize?: number
}

/** The answer of `/api/job/:jobId`. */
export interface JobInfo {
  job_id: string
  type: JobType
  status: JobStatus
  /** ISO 8601 */
  created_at: string
  /** ISO 8601 */
  updated_at: string
  /** why a failed job failed */
  error?: string
}

/** A download link as minted (DESIGN.md §4.2): its URL downloads the dataset without a key. */
export interface DownloadLink {
  id: string
  /** the link itself: whoever holds it can download until it expires or is revoked */
  url: string
  /** ISO 8601 */
  expiresAt: string
}

export interface CreateLinkOptions extends CallOptions {
  /** seconds the link lives; default on the server: 3600, at most its maxLinkLifetime */
  expiresIn?: number
}

export interface RunPipelineOptions extends CallOptions {
  /** default: a fresh UUID per call, the same on every retry of that call */
  idempotencyKey?: string
}

export interface WaitForJobOptions extends CallOptions {
  /** milliseconds between polls; default 2000 */
  interval?: number
  /** milliseconds before giving up with JobWaitTimeoutError; default 3600000 (one hour) */
  timeout?: number
  /** hears every status read, the final one included */
  onStatus?: (job: JobInfo) => void
}

type JobTarget = string | URL | JobReference

const JOB_STATUSES: readonly string[] = ['queued', 'running', 'succeeded', 'failed']
const FINAL_STATUSES: readonly string[] = ['succeeded', 'failed']
const VISIBLE_ASCII = /^[\x21-\x7e]+$/

function positiveInteger (name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) throw new UsageError(`${name} must be a positive integer of milliseconds`)
  return value
}

function jobUrlOf (job: JobTarget): string | URL {
  return typeof job === 'object' && 'job_url' in job ? job.job_url : job
}

export class DataEndpointsClient {
  readonly #apiKey: string | undefined
  readonly #managementToken: string | undefined
  readonly #baseUrl: URL | undefined
  readonly #timeout: number
  readonly #retryDelays: readonly number[]
  readonly #maxRetryAfter: number
  readonly #logger: ClientLogger
  readonly #allowHttp: boolean
  readonly #sleep: Sleep
  readonly #now: () => number

  constructor (options: DataEndpointsClientOptions = {}) {
    if (options.apiKey !== undefined) {
      const key = options.apiKey.trim()
      // Checked here so that fetch never echoes a bad header value, key included, in an error.
      if (!VISIBLE_ASCII.test(key)) throw new UsageError('The API key is empty or holds characters a key cannot have')
      this.#apiKey = key
    }
    if (options.managementToken !== undefined) {
      const token = options.managementToken.trim()
      if (!VISIBLE_ASCII.test(token)) throw new UsageError('The management token is empty or holds characters a header cannot have')
      this.#managementToken = token
    }
    if (options.baseUrl !== undefined) {
      try {
        this.#baseUrl = new URL(options.baseUrl)
      } catch {
        throw new UsageError(`Invalid baseUrl: ${redactUrl(String(options.baseUrl))}`)
      }
    }
    this.#timeout = positiveInteger('timeout', options.timeout ?? 30_000)
    const delays = options.retryDelays ?? DEFAULT_RETRY_DELAYS
    if (!delays.every((d) => Number.isFinite(d) && d >= 0)) throw new UsageError('retryDelays must be non-negative numbers')
    this.#retryDelays = [...delays]
    const maxRetryAfter = options.maxRetryAfter ?? DEFAULT_MAX_RETRY_AFTER
    // Else a NaN or negative value would throw every 429 at once.
    if (!Number.isFinite(maxRetryAfter) || maxRetryAfter < 0) throw new UsageError('maxRetryAfter must be a non-negative number of milliseconds')
    this.#maxRetryAfter = maxRetryAfter
    this.#logger = options.logger ?? silentLogger
    this.#allowHttp = options.allowHttp ?? false
    this.#sleep = options.sleep ?? realSleep
    this.#now = options.now ?? Date.now
  }

  /**
   * Downloads a dataset. Resolves once the server has answered 200, after
   * retrying 500 and network time-outs; the body is a stream that is never
   * retried, since bytes may already be with the caller: a failure mid-body
   * errors the stream with DownloadCutOffError.
   */
  async downloadDataset (url: string | URL, query: DatasetQuery = {}, options: CallOptions = {}): Promise<DatasetDownload> {
    const target = this.#keyedUrl(url)
    for (const [name, value] of Object.entries(datasetParams(query))) target.searchParams.set(name, value)
    return this.#call({
      method: 'GET',
      url: target,
      loggedUrl: redactUrl(target.href),
      // sql and json shrink five to ten times; fetch decompresses as it reads.
      headers: { ...this.#keyHeaders(), 'accept-encoding': 'gzip' },
      signal: options.signal,
      handsOnBody: true,
      read: async (response, release) => {
        if (response.body === null) throw new DataEndpointsError('The server sent no body', { status: response.status, url: redactUrl(target.href) })
        const length = contentLengthOf(response.headers)
        const body = downloadBody(response.body, { status: response.status, url: redactUrl(target.href), length, signal: options.signal })
        body.once('close', release)
        return {
          body,
          contentType: response.headers.get('content-type') ?? undefined,
          fileName: fileNameOf(response.headers.get('content-disposition')),
          contentLength: length,
          changesUntil: response.headers.get('data-changes-until') ?? undefined,
          headers: response.headers
        }
      }
    })
  }

  /**
   * Mints a download link for a dataset endpoint with these query parameters:
   * a URL that tools which cannot send a header (spreadsheets, BI tools,
   * DuckDB) open as is. A retried call may mint a second link; each expires
   * on its own and can be revoked.
   */
  async createLink (url: string | URL, query: DatasetQuery = {}, options: CreateLinkOptions = {}): Promise<DownloadLink> {
    const { expiresIn } = options
    if (expiresIn !== undefined && (!Number.isSafeInteger(expiresIn) || expiresIn < 1)) throw new UsageError('expiresIn must be a positive integer of seconds')
    const target = this.#keyedUrl(url)
    target.pathname = target.pathname.replace(/\/*$/, '/links')
    const body = await this.#call({
      method: 'POST',
      url: target,
      loggedUrl: redactUrl(target.href),
      headers: { ...this.#keyHeaders(), 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify({ ...datasetParams(query), ...(expiresIn === undefined ? {} : { expiresIn }) }),
      signal: options.signal,
      handsOnBody: false,
      read: readJson
    })
    if (typeof body?.id !== 'string' || typeof body.url !== 'string' || typeof body.expiresAt !== 'string') {
      throw new DataEndpointsError('The server answered without id, url and expiresAt', { status: 201, url: redactUrl(target.href) })
    }
    return { id: body.id, url: body.url, expiresAt: body.expiresAt }
  }

  /**
   * Starts a pipeline run. Every attempt of one call sends the same
   * Idempotency-Key, so a retry after a time-out gets the first run's job
   * back instead of starting a second run.
   */
  async runPipeline (url: string | URL, options: RunPipelineOptions = {}): Promise<JobReference> {
    const idempotencyKey = options.idempotencyKey ?? randomUUID()
    if (!VISIBLE_ASCII.test(idempotencyKey) || idempotencyKey.length > 255) {
      throw new UsageError('idempotencyKey must be 1 to 255 visible ASCII characters')
    }
    const target = this.#keyedUrl(url)
    const body = await this.#call({
      method: 'POST',
      url: target,
      loggedUrl: redactUrl(target.href),
      headers: { ...this.#keyHeaders(), 'idempotency-key': idempotencyKey },
      signal: options.signal,
      handsOnBody: false,
      read: readJson
    })
    if (typeof body?.job_id !== 'string' || typeof body.job_url !== 'string') {
      throw new DataEndpointsError('The server answered without job_id and job_url', { status: 200, url: redactUrl(target.href) })
    }
    return { job_id: body.job_id, job_url: body.job_url }
  }

  /** Reads a job's status. The job route is public: the key is not sent there. */
  async getJob (job: JobTarget, options: CallOptions = {}): Promise<JobInfo> {
    const target = checkedUrl(jobUrlOf(job), { baseUrl: this.#baseUrl, sendsKey: false, allowHttp: this.#allowHttp })
    const body = await this.#call({
      method: 'GET',
      url: target,
      loggedUrl: redactUrl(target.href),
      headers: { accept: 'application/json' },
      signal: options.signal,
      handsOnBody: false,
      read: readJson
    })
    if (typeof body?.job_id !== 'string' || typeof body.status !== 'string' || !JOB_STATUSES.includes(body.status)) {
      throw new DataEndpointsError('The server answered with something that is not a job', { status: 200, url: redactUrl(target.href) })
    }
    return body as unknown as JobInfo
  }

  /**
   * Polls a job until it is `succeeded` or `failed` and resolves with that
   * final status (a failed job resolves too: look at `status`). Rejects with
   * JobWaitTimeoutError after `timeout`, or with the error of a poll that
   * still failed after its retries.
   */
  async waitForJob (job: JobTarget, options: WaitForJobOptions = {}): Promise<JobInfo> {
    const interval = positiveInteger('interval', options.interval ?? 2000)
    const timeout = positiveInteger('timeout', options.timeout ?? 60 * 60 * 1000)
    const deadline = this.#now() + timeout
    while (true) {
      const info = await this.getJob(job, options)
      options.onStatus?.(info)
      if (FINAL_STATUSES.includes(info.status)) return info
      const left = deadline - this.#now()
      if (left <= 0) {
        throw new JobWaitTimeoutError(`Job ${info.job_id} is still ${info.status} after ${timeout} ms`, {
          url: redactUrl(String(jobUrlOf(job))),
          job: info
        })
      }
      await this.#sleep(Math.min(interval, left), options.signal)
    }
  }

  /**
   * Every key of a project, oldest first: `projectUrl` is the project under
   * the management prefix (`https://host/api-keys/acme/shop`). Reads the list
   * a page at a time, following each answer's `Link: <…>; rel="next"`.
   */
  async listKeys (projectUrl: string | URL, options: ListOptions = {}): Promise<ManagedKey[]> {
    return await this.#listAll<ManagedKey>(projectUrl, 'keys', {}, options)
  }

  /** Every endpoint of a project (or of one key, with `keyId`), as listKeys reads them. */
  async listEndpoints (projectUrl: string | URL, options: ListOptions & { keyId?: string } = {}): Promise<ManagedEndpoint[]> {
    return await this.#listAll<ManagedEndpoint>(projectUrl, 'endpoints', options.keyId === undefined ? {} : { keyId: options.keyId }, options)
  }

  async #listAll<T> (projectUrl: string | URL, list: 'keys' | 'endpoints', filters: Record<string, string>, options: ListOptions): Promise<T[]> {
    const pageSize = options.pageSize ?? 500
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 500) throw new UsageError('pageSize must be an integer from 1 to 500')
    const base = checkedUrl(projectUrl, { baseUrl: this.#baseUrl, sendsKey: true, allowHttp: this.#allowHttp })
    base.pathname = base.pathname.replace(/\/*$/, `/${list}`)
    base.search = new URLSearchParams({ limit: String(pageSize), ...(options.search === undefined ? {} : { q: options.search }), ...filters }).toString()
    const headers: Record<string, string> = { accept: 'application/json' }
    if (this.#managementToken !== undefined) headers.authorization = `Bearer ${this.#managementToken}`
    const items: T[] = []
    const read = new Set<string>()
    for (let url: URL | null = base; url !== null;) {
      // The token goes to the first page's origin only, and no page is read twice.
      if (url.origin !== base.origin) throw new DataEndpointsError(`The next page is on another origin (${redactUrl(url.origin)}); not followed`, { url: redactUrl(url.href) })
      if (read.has(url.href)) throw new DataEndpointsError('The next page is one already read; the list does not end', { url: redactUrl(url.href) })
      read.add(url.href)
      const page: URL = url
      const answer = await this.#call({
        method: 'GET',
        url: page,
        loggedUrl: redactUrl(page.href),
        headers,
        signal: options.signal,
        handsOnBody: false,
        read: async (response) => ({ body: await response.json().catch(() => null) as unknown, next: nextPageUrl(response.headers.get('link'), page) })
      })
      if (!Array.isArray(answer.body)) throw new DataEndpointsError('The server answered with something that is not a list', { status: 200, url: redactUrl(page.href) })
      items.push(...answer.body as T[])
      url = answer.next
    }
    return items
  }

  #keyedUrl (url: string | URL): URL {
    if (this.#apiKey === undefined) throw new UsageError('No API key: give the apiKey option (DATA_ENDPOINTS_API_KEY for the CLI)')
    return checkedUrl(url, { baseUrl: this.#baseUrl, sendsKey: true, allowHttp: this.#allowHttp })
  }

  #keyHeaders (): Record<string, string> {
    return { authorization: `Bearer ${this.#apiKey as string}` }
  }

  /** Runs the attempts of one call under the retry policy, logging each. */
  async #call<T> (spec: AttemptSpec<T>): Promise<T> {
    // The prefix of the API key, when it is what the call sends (not a management token).
    const keyPrefix = this.#apiKey !== undefined && spec.headers.authorization === `Bearer ${this.#apiKey}` ? loggablePrefix(this.#apiKey) : undefined
    const log = (n: number, status: number | null, message: string, retryInMs?: number): void => {
      this.#logger({
        time: new Date(this.#now()).toISOString(),
        method: spec.method,
        url: spec.loggedUrl,
        status,
        message,
        ...(keyPrefix === undefined ? {} : { keyPrefix }),
        attempt: n,
        ...(retryInMs === undefined ? {} : { retryInMs })
      })
    }
    const policy = { delays: this.#retryDelays, maxRetryAfter: this.#maxRetryAfter, sleep: this.#sleep, signal: spec.signal }
    return withRetries(async (n) => {
      const { value, status } = await attempt(spec, this.#timeout, this.#now)
      log(n, status, 'OK')
      return value
    }, policy, (error, n, retryInMs) => {
      const status = error instanceof DataEndpointsError ? error.status ?? null : null
      log(n, status, error instanceof Error ? error.message : String(error), retryInMs)
    })
  }
}
