import net from 'node:net'

// HTTP/1.1 over a bare socket, for the requests that fetch, node:http and
// inject refuse to send or quietly normalise: NUL and non-ASCII bytes, dot
// segments, duplicate or oversized headers, absolute-form targets.

export interface RawResponse {
  /** 0 when the server closed the connection without a status line */
  status: number
  /** lower-cased names; a repeated header keeps its last value */
  headers: Record<string, string>
  /** the body, de-chunked, as latin1 text (bytes kept one to one) */
  body: string
}

export interface RawRequestParts {
  method?: string
  /** the request-target, sent byte for byte */
  target: string
  headers?: Array<[string, string]>
  body?: string | Buffer
}

/** The bytes of one request, `Connection: close`, with Host unless given. */
export function requestBytes ({ method = 'GET', target, headers = [], body }: RawRequestParts): Buffer {
  const lines = [`${method} ${target} HTTP/1.1`]
  if (!headers.some(([name]) => name.toLowerCase() === 'host')) lines.push('Host: 127.0.0.1')
  for (const [name, value] of headers) lines.push(`${name}: ${value}`)
  if (body !== undefined) lines.push(`Content-Length: ${Buffer.byteLength(body)}`)
  lines.push('Connection: close', '', '')
  const head = Buffer.from(lines.join('\r\n'), 'latin1')
  return body === undefined ? head : Buffer.concat([head, Buffer.from(body)])
}

function dechunk (data: Buffer): Buffer {
  const parts: Buffer[] = []
  let at = 0
  while (at < data.length) {
    const lineEnd = data.indexOf('\r\n', at)
    if (lineEnd < 0) break
    const size = parseInt(data.subarray(at, lineEnd).toString('latin1'), 16)
    if (!Number.isFinite(size) || size === 0) break
    parts.push(data.subarray(lineEnd + 2, lineEnd + 2 + size))
    at = lineEnd + 2 + size + 2
  }
  return Buffer.concat(parts)
}

export function parseResponse (data: Buffer): RawResponse {
  const headEnd = data.indexOf('\r\n\r\n')
  if (headEnd < 0) return { status: 0, headers: {}, body: data.toString('latin1') }
  const [statusLine, ...headerLines] = data.subarray(0, headEnd).toString('latin1').split('\r\n')
  const headers: Record<string, string> = {}
  for (const line of headerLines) {
    const colon = line.indexOf(':')
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
  }
  let body = data.subarray(headEnd + 4)
  if (headers['transfer-encoding'] === 'chunked') body = dechunk(body)
  else if (headers['content-length'] !== undefined) body = body.subarray(0, Number(headers['content-length']))
  return { status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? 0), headers, body: body.toString('latin1') }
}

/** Sends `request` and reads until the server closes the connection. */
export async function rawRequest (port: number, request: RawRequestParts | Buffer, host = '127.0.0.1', timeoutMs = 15_000): Promise<RawResponse> {
  const bytes = Buffer.isBuffer(request) ? request : requestBytes(request)
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    const socket = net.connect(port, host, () => socket.write(bytes))
    const timer = setTimeout(() => {
      socket.destroy()
      reject(new Error(`no answer within ${timeoutMs} ms to ${bytes.subarray(0, 80).toString('latin1')}`))
    }, timeoutMs)
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    // The server may reset a connection it refused; what arrived before counts.
    socket.on('error', () => {})
    socket.on('close', () => {
      clearTimeout(timer)
      resolve(parseResponse(Buffer.concat(chunks)))
    })
  })
}

/**
 * Writes `bytes` and leaves the connection open: resolves with the first
 * whole answer (head and Content-Length body) as soon as it is in, or with
 * status 0 when none came within `waitMs`.
 */
export async function firstAnswer (port: number, bytes: string | Buffer, waitMs = 15_000): Promise<RawResponse> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = []
    const socket = net.connect(port, '127.0.0.1', () => socket.write(bytes))
    const done = (response: RawResponse): void => {
      clearTimeout(timer)
      socket.destroy()
      resolve(response)
    }
    const timer = setTimeout(() => done({ status: 0, headers: {}, body: '' }), waitMs)
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk)
      const response = parseResponse(Buffer.concat(chunks))
      const length = Number(response.headers['content-length'])
      if (response.status !== 0 && Number.isFinite(length) && Buffer.byteLength(response.body, 'latin1') >= length) done(response)
    })
    socket.on('error', () => {})
  })
}
