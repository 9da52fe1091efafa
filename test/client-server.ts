import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { gzipSync } from 'node:zlib'
import type { Test } from 'tap'

// A local HTTP server for the client and CLI tests that fails on purpose:
// each test says what the n-th request gets (a status, a hang, a reset, ...).

export const API_KEY = 'AbCdEfGhIj-0123456789abcdefghijK'
export const KEY_PREFIX = API_KEY.slice(0, 10)

export interface SeenRequest {
  method: string
  url: string
  headers: IncomingHttpHeaders
  /** when it arrived (Date.now) */
  at: number
}

/** Answers the `n`-th request (1-based). */
export type Handler = (req: IncomingMessage, res: ServerResponse, n: number) => unknown

export interface TestServer {
  /** http://127.0.0.1:<port> */
  base: string
  seen: SeenRequest[]
}

export async function startServer (t: Test, handler: Handler): Promise<TestServer> {
  const seen: SeenRequest[] = []
  const server = createServer((req, res) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, at: Date.now() })
    void handler(req, res, seen.length)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  })
  return { base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen }
}

export function sendJson (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', ...headers })
  res.end(JSON.stringify(body))
}

/** A handler answering `data` gzipped, with the compressed Content-Length, as a compressing proxy does. */
export function sendGzipped (data: string): Handler {
  const gzipped = gzipSync(data)
  return (_req, res) => res.writeHead(200, {
    'content-type': 'application/sql', 'content-encoding': 'gzip', 'content-length': String(gzipped.length)
  }).end(gzipped)
}

/** A port nothing listens on: connections to it are refused. */
export async function closedPort (): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}

/** A sleep that only records what it was asked to wait. */
export function recordingSleep (): { sleep: (ms: number) => Promise<void>, waits: number[] } {
  const waits: number[] = []
  return { waits, sleep: async (ms) => { waits.push(ms) } }
}

export const DATASET_PATH = '/api/acme/shop/model/1/dataset/1'
export const PIPELINE_PATH = '/api/acme/shop/model/1/pipeline/1'
export const JOB_ID = '0b6f3a52-3f3e-4c55-9a66-1f0d7c1e2a10'
