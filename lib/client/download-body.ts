import { Readable } from 'node:stream'
import { ReadableStream } from 'node:stream/web'
import { redactKeys } from '../keys/api-key.js'
import { describe } from './attempt.js'
import { DownloadCutOffError } from './errors.js'

// A download's body as a Node stream. fetch errors a body cut off midway with
// a bare `TypeError: terminated`; here it becomes a DownloadCutOffError that
// says how many bytes came. A chunk is read only when the caller reads one,
// so nothing is buffered beyond the streams' own small queues.

export interface BodySource {
  status: number
  /** as logs and errors show it */
  url: string
  /** the announced length, when known */
  length: number | undefined
  /** the caller's: an abort errors the body with its reason, as fetch does */
  signal: AbortSignal | undefined
}

/** The body's length as the caller gets it: unknown when fetch decompresses it. */
export function contentLengthOf (headers: Headers): number | undefined {
  const encoding = headers.get('content-encoding')?.trim().toLowerCase() ?? 'identity'
  if (encoding !== 'identity' && encoding !== '') return undefined
  const length = Number(headers.get('content-length') ?? NaN)
  return Number.isSafeInteger(length) ? length : undefined
}

export function downloadBody (body: globalThis.ReadableStream<Uint8Array>, source: BodySource): Readable {
  const reader = body.getReader()
  let bytes = 0
  const failure = (error: unknown): unknown => {
    if (source.signal?.aborted === true) return source.signal.reason
    const of = source.length === undefined ? '' : ` of ${source.length}`
    return new DownloadCutOffError(redactKeys(`Download cut off after ${bytes}${of} bytes: ${describe(error)}`), {
      status: source.status, url: source.url, bytes, cause: error
    })
  }
  const counted = new ReadableStream<Uint8Array>({
    start (controller) {
      // At once, even while the caller is not reading; a second error() is a no-op.
      reader.closed.catch((error: unknown) => controller.error(failure(error)))
    },
    async pull (controller) {
      try {
        const { done, value } = await reader.read()
        if (done) return controller.close()
        bytes += value.byteLength
        controller.enqueue(value)
      } catch (error) {
        controller.error(failure(error))
      }
    },
    cancel: async (reason) => { await reader.cancel(reason) }
  }, { highWaterMark: 0 })
  return Readable.fromWeb(counted)
}
