// The errors the client throws. Every one is a DataEndpointsError with a
// message fit to show a user and, when the server answered, its status.
// No message or field ever holds the API key: URLs are redacted, server
// messages and bodies have key-shaped text masked, and a cause that shows a
// key (fetch's error naming a host) is left off.

export class DataEndpointsError extends Error {
  /** the HTTP status of the answer, or undefined when none came */
  readonly status: number | undefined
  /** the request URL, `api_key` redacted */
  readonly url: string | undefined

  constructor (message: string, options: { status?: number, url?: string, cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.name = new.target.name
    this.status = options.status
    this.url = options.url
  }
}

/** The server answered with an error status; `message` is the server's `message`. */
export class HttpError extends DataEndpointsError {
  declare readonly status: number
  /** the parsed JSON error body (job errors add `id` or `job`), when there was one; key-shaped text masked */
  readonly body: Readonly<Record<string, unknown>> | undefined
  /** what `Retry-After` asked for, in milliseconds */
  readonly retryAfterMs: number | undefined
  /**
   * when `Retry-After` says to try again: a 429 whose wait is longer than
   * the client's `maxRetryAfter` (a key's daily quota) is thrown at once,
   * and this tells the caller when the server will take the call again
   */
  readonly retryAt: Date | undefined

  constructor (message: string, options: { status: number, url: string, body?: Record<string, unknown>, retryAfterMs?: number, now?: number }) {
    super(message, options)
    this.body = options.body
    this.retryAfterMs = options.retryAfterMs
    this.retryAt = options.retryAfterMs === undefined ? undefined : new Date((options.now ?? Date.now()) + options.retryAfterMs)
  }
}

/**
 * No answer: the per-attempt time-out fired (`code` 'TIMEOUT') or the
 * connection failed (`code` such as 'ECONNREFUSED'). `retryable` tells whether
 * the retry policy treats it as a network time-out.
 */
export class NetworkError extends DataEndpointsError {
  readonly code: string
  readonly retryable: boolean

  constructor (message: string, options: { code: string, retryable: boolean, url: string, cause?: unknown }) {
    super(message, options)
    this.code = options.code
    this.retryable = options.retryable
  }
}

/**
 * A download's body ended before it was whole: the connection was reset or
 * closed before the Content-Length or the last chunk. Not retried, since the
 * bytes before it may already be with the caller; `cause` is fetch's error.
 */
export class DownloadCutOffError extends DataEndpointsError {
  declare readonly status: number
  /** the bytes received before the cut */
  readonly bytes: number

  constructor (message: string, options: { status: number, url: string, bytes: number, cause: unknown }) {
    super(message, options)
    this.bytes = options.bytes
  }
}

/** A call the client refuses to make: a key in the URL, a key over plain HTTP, a bad option. */
export class UsageError extends DataEndpointsError {}

/** waitForJob gave up before the job ended; `job` is the last status seen. */
export class JobWaitTimeoutError extends DataEndpointsError {
  readonly job: unknown

  constructor (message: string, options: { url: string, job: unknown }) {
    super(message, { url: options.url })
    this.job = options.job
  }
}
