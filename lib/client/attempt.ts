import { inspect } from 'node:util'
import { redactKeys } from '../keys/api-key.js'
import { DataEndpointsError, HttpError, NetworkError } from './errors.js'
import { parseRetryAfter } from './retry.js'

// One HTTP attempt through Node's built-in fetch, and what its failure means
// for the retry policy: an HttpError with the server's status and message, or
// a NetworkError that is retryable when it is a time-out or a failed connection.

export interface AttemptSpec<T> {
  method: 'GET' | 'POST'
  url: URL
  /** the URL as logs and errors show it */
  loggedUrl: string
  headers: Record<string, string>
  /** a JSON request body (its content type is the caller's header to set) */
  body?: string
  /** the caller's; aborting it is passed on as is and never retried */
  signal: AbortSignal | undefined
  /**
   * Reads a 2xx answer inside the attempt's time-out. With `handsOnBody` the
   * body stays open for the caller, and `release` must be called once it is done.
   */
  read: (response: Response, release: () => void) => Promise<T>
  handsOnBody: boolean
}

// The reason the per-attempt timer aborts with, to tell it from the caller's abort.
const TIMED_OUT = Symbol('per-attempt time-out')
// Codes of a connection that failed or timed out: retried as network time-outs.
// Others (ENOTFOUND, certificate errors, ...) will not mend by waiting.
const RETRYABLE_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EAI_AGAIN',
  'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT'
])

function errorCodeOf (error: unknown): string | undefined {
  // fetch wraps the socket error: TypeError('fetch failed', { cause: { code } })
  let e = error
  for (let depth = 0; typeof e === 'object' && e !== null && depth < 5; depth++) {
    const code = (e as { code?: unknown }).code
    if (typeof code === 'string') return code
    e = (e as { cause?: unknown }).cause
  }
  return undefined
}

/** fetch's reason for a failure: the socket's, when it gave one. */
export function describe (error: unknown): string {
  const cause = (error as { cause?: { message?: unknown } }).cause
  if (typeof cause?.message === 'string') return cause.message
  return error instanceof Error ? error.message : String(error)
}

/** The error itself, or undefined when it would show a key (fetch names the host it failed to reach). */
function keyFree (error: unknown): unknown {
  const shown = inspect(error, { depth: null })
  return redactKeys(shown) === shown ? error : undefined
}

/** A parsed JSON value with key-shaped text masked in every string and property name. */
function redactedJson (value: unknown): unknown {
  if (typeof value === 'string') return redactKeys(value)
  if (Array.isArray(value)) return value.map(redactedJson)
  if (typeof value !== 'object' || value === null) return value
  return Object.fromEntries(Object.entries(value).map(([name, item]) => [redactKeys(name), redactedJson(item)]))
}

async function httpErrorOf (response: Response, url: string, now: number): Promise<HttpError> {
  // The whole body, not only its message: a proxy may echo the key anywhere in it.
  const body = await readJson(response).then((json) => redactedJson(json) as Record<string, unknown> | undefined).catch(() => undefined)
  const serverMessage = typeof body?.message === 'string' && body.message !== '' ? body.message : undefined
  return new HttpError(redactKeys(serverMessage ?? `HTTP ${response.status} ${response.statusText}`.trim()), {
    status: response.status,
    url,
    body,
    retryAfterMs: response.status === 429 ? parseRetryAfter(response.headers.get('retry-after'), now) : undefined,
    now
  })
}

/** The answer's JSON object, or undefined when it is not one. */
export async function readJson (response: Response): Promise<Record<string, unknown> | undefined> {
  const text = await response.text()
  try {
    const value: unknown = JSON.parse(text)
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? value as Record<string, unknown> : undefined
  } catch {
    return undefined
  }
}

/**
 * One attempt, bounded by `timeout` milliseconds until the answer's headers
 * and, unless the body is handed on, its body. A plain timer rather than
 * AbortSignal.timeout: it must stop once a download's headers are in, or a
 * long download would be cut off mid-body.
 */
export async function attempt<T> (spec: AttemptSpec<T>, timeout: number, now: () => number): Promise<{ value: T, status: number }> {
  spec.signal?.throwIfAborted()
  const controller = new AbortController()
  const timer = setTimeout(() => controller.abort(TIMED_OUT), timeout)
  const onAbort = (): void => controller.abort(spec.signal?.reason)
  spec.signal?.addEventListener('abort', onAbort, { once: true })
  let released = false
  const release = (): void => {
    if (released) return
    released = true
    clearTimeout(timer)
    spec.signal?.removeEventListener('abort', onAbort)
  }
  let succeeded = false
  try {
    const sendsKey = 'authorization' in spec.headers
    const response = await fetch(spec.url, {
      method: spec.method,
      headers: spec.headers,
      body: spec.body,
      signal: controller.signal,
      // A redirect is not followed with the key: it could lead anywhere.
      redirect: sendsKey ? 'manual' : 'follow'
    })
    if (response.status >= 300 && response.status < 400) {
      await response.body?.cancel()
      throw new HttpError(`Unexpected redirect (HTTP ${response.status}); not followed, so the key is not sent elsewhere`, {
        status: response.status, url: spec.loggedUrl
      })
    }
    if (!response.ok) throw await httpErrorOf(response, spec.loggedUrl, now())
    const value = await spec.read(response, release)
    succeeded = true
    clearTimeout(timer)
    return { value, status: response.status }
  } catch (error) {
    if (error instanceof DataEndpointsError) throw error
    if (controller.signal.reason === TIMED_OUT) {
      throw new NetworkError(`No answer within ${timeout} ms`, { code: 'TIMEOUT', retryable: true, url: spec.loggedUrl })
    }
    if (spec.signal?.aborted === true) throw error
    const code = errorCodeOf(error) ?? 'FETCH_FAILED'
    throw new NetworkError(redactKeys(describe(error)), {
      code, retryable: RETRYABLE_CODES.has(code), url: spec.loggedUrl, cause: keyFree(error)
    })
  } finally {
    if (!(succeeded && spec.handsOnBody)) release()
  }
}
