import type { ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import type { Options } from 'autocannon'

/** The routes the benches load on example-bench-server.ts, by their short names. */
export type BenchRoute = 'json' | 'meta' | 'hand' | 'source' | 'download' | 'bare'

export interface BenchServerStart {
  /** the API key the server made for its example routes (also taken by the hand-written ones) */
  key: string
  /** the example's origin, and the hand-written app's */
  example: string
  hand: string
  urls: Record<BenchRoute, string>
}

/**
 * Reads what example-bench-server.ts prints as it starts ("key <key>", then
 * "ports <example> <hand-written>"), then leaves the rest of its output to
 * be read and dropped, as a log shipper would.
 */
export async function benchServerStarted (child: ChildProcess): Promise<BenchServerStart> {
  let key = ''
  for await (const line of createInterface({ input: child.stdout as NodeJS.ReadableStream })) {
    key = /^key (\S+)$/.exec(line)?.[1] ?? key
    const ports = /^ports (\d+) (\d+)$/.exec(line)
    if (ports === null) continue
    child.stdout?.resume()
    const example = `http://127.0.0.1:${ports[1]}`
    const hand = `http://127.0.0.1:${ports[2]}`
    return {
      key,
      example,
      hand,
      urls: {
        json: `${example}/api/acme/shop/model/1/dataset/1?format=json`,
        meta: `${example}/api/acme/shop/model/1/dataset/1?meta=entities`,
        hand: `${hand}/hand/sales`,
        source: `${hand}/hand/source`,
        download: `${hand}/hand/download?format=json`,
        bare: `${hand}/bare`
      }
    }
  }
  throw new Error('bench server did not start')
}

/**
 * Load on the example's json at `url` with a new `limit` each request, above
 * the data's size: the whole data, under a new cache key every time (with
 * revisions on, every request misses the rendered-body cache).
 */
export function missingLoad (url: string, headers: Record<string, string>): Options {
  let n = 0
  return { url, requests: [{ method: 'GET', headers, setupRequest: (request) => ({ ...request, path: `${new URL(url).pathname}?format=json&limit=${1_000_000 + n++}` }) }] }
}

/** A route the profiling benches load: one of the server's, or `miss` (missingLoad on the example's json). */
export type LoadedRoute = BenchRoute | 'miss'

/** autocannon's options for `route` on a started server, with its key. */
export function routeLoad (start: BenchServerStart, route: LoadedRoute, connections = 20): Options {
  const headers = { authorization: `Bearer ${start.key}` }
  const load = route === 'miss' ? missingLoad(start.urls.json, headers) : { url: start.urls[route], headers }
  return { ...load, connections }
}
