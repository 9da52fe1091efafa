import { createReadStream } from 'node:fs'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { RangeNotSatisfiableError, withDetails } from '../errors.js'
import { contentDisposition } from './content-disposition.js'

// Answers a GET or HEAD with a file whose bytes are fixed: Content-Length,
// Accept-Ranges, a strong ETag, one byte range as 206 (RFC 9110 §14), and
// If-Range. A reader that queries a Parquet file in place (DuckDB's httpfs,
// pyarrow, polars) asks for the length, then the footer, then the column
// chunks it needs. Used for rendered Parquet and Arrow downloads; it takes
// nothing but the request, the reply and the file, so any route that serves
// such a file can use it.
//
// Several ranges in one request are answered with the whole file (200), as
// RFC 9110 §14.2 allows: none of those readers asks for several, and a
// multipart answer to many small or overlapping ranges costs the server more
// than the file.

export interface ServedFile {
  path: string
  /** bytes */
  size: number
  /** a strong ETag of exactly these bytes */
  etag: string
  contentType: string
  /** for Content-Disposition */
  fileName: string
}

interface ByteRange {
  start: number
  /** inclusive */
  end: number
}

const RANGE_SPEC = /^\s*(?:(\d+)\s*-\s*(\d*)|-\s*(\d+))\s*$/

/**
 * The ranges a Range header asks for: [] when it asks for none the file
 * holds (416), null when it is to be ignored (another unit, a syntax error).
 */
export function parseRange (header: string, size: number): ByteRange[] | null {
  const m = /^bytes\s*=(.*)$/i.exec(header)
  if (m === null) return null
  const ranges: ByteRange[] = []
  let specs = 0
  for (const part of m[1].split(',')) {
    if (part.trim() === '') continue
    const spec = RANGE_SPEC.exec(part)
    if (spec === null) return null
    specs++
    if (spec[3] !== undefined) {
      const suffix = Number(spec[3])
      if (suffix > 0 && size > 0) ranges.push({ start: Math.max(0, size - suffix), end: size - 1 })
      continue
    }
    const start = Number(spec[1])
    const last = spec[2] === '' ? Infinity : Number(spec[2])
    if (last < start) return null
    if (start < size) ranges.push({ start, end: Math.min(last, size - 1) })
  }
  return specs === 0 ? null : ranges
}

/**
 * Whether If-Range lets the Range apply: an entity tag that matches the
 * file's by strong comparison. A weak tag never does, and neither does a
 * date, since no Last-Modified is sent.
 */
function ifRangeMatches (header: string | string[] | undefined, etag: string): boolean {
  if (header === undefined) return true
  return typeof header === 'string' && header.trim() === etag
}

/**
 * Sends `file` for a GET or HEAD. `done` is called once when the answer has
 * ended, sent or cut off (the caller may then remove the file).
 */
export function sendFile (request: FastifyRequest, reply: FastifyReply, file: ServedFile, done: () => void = () => {}): FastifyReply {
  let ended = false
  const end = (): void => {
    if (!ended) {
      ended = true
      done()
    }
  }
  reply.raw.once('close', end)
  reply
    .header('accept-ranges', 'bytes')
    .header('etag', file.etag)
    .header('content-disposition', contentDisposition(file.fileName))
    .header('x-content-type-options', 'nosniff')

  let range: ByteRange | null = null
  const header = request.headers.range
  // Range applies to GET alone (RFC 9110 §14.2).
  if (request.method === 'GET' && typeof header === 'string') {
    const ranges = ifRangeMatches(request.headers['if-range'], file.etag) ? parseRange(header, file.size) : null
    if (ranges !== null && ranges.length === 0) {
      end()
      throw withDetails(new RangeNotSatisfiableError(String(file.size)), { headers: { 'content-range': `bytes */${file.size}` } })
    }
    if (ranges !== null && ranges.length === 1) range = ranges[0]
  }

  reply.type(file.contentType)
  if (range === null) {
    reply.header('content-length', String(file.size))
    if (request.method === 'HEAD') return reply.send()
    return reply.send(createReadStream(file.path))
  }
  reply.code(206)
    .header('content-range', `bytes ${range.start}-${range.end}/${file.size}`)
    .header('content-length', String(range.end - range.start + 1))
  return reply.send(createReadStream(file.path, { start: range.start, end: range.end }))
}
