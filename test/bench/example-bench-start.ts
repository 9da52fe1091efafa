import type { ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'

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
