// The usage bench's server (usage-query.ts): the plugin as the management
// benches register it (management-app.ts), a watch on the event loop and V8's collections, and the
// timing of inject calls. Shared by the bench, which seeds the history
// through it, and usage-server.ts, which serves it in a process of its own.
import { readFileSync } from 'node:fs'
import { constants as perfConstants, monitorEventLoopDelay, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks'
import type { FastifyInstance } from 'fastify'
import type { Storage } from '../../lib/index.js'
import { ADMIN, managementBenchApp } from './management-app.js'

export { ADMIN }

/** The usage bench's app, ready. */
export async function usageBenchApp (storage: Storage): Promise<FastifyInstance> {
  const app = await managementBenchApp(storage)
  await app.ready()
  return app
}

const GC_KINDS: Record<number, string> = {
  [perfConstants.NODE_PERFORMANCE_GC_MINOR]: 'scavenge',
  [perfConstants.NODE_PERFORMANCE_GC_MAJOR]: 'mark-compact',
  [perfConstants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental marking',
  [perfConstants.NODE_PERFORMANCE_GC_WEAKCB]: 'weak callbacks'
}

export interface LoopWatch {
  /** the longest delay of a 1 ms timer (monitorEventLoopDelay): wall time, waits for a core included */
  loopMs: number
  /** the most CPU the main thread spent between two ticks of a 1 ms timer; null where Linux's schedstat is missing */
  heldMs: number | null
  gc: string
}

/** The main thread's time on a core so far (ns), from Linux's schedstat; null elsewhere. */
function mainThreadCpuNs (): number | null {
  try {
    return Number(readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[0])
  } catch {
    return null
  }
}

/**
 * Starts watching this process's event loop; the returned function stops and
 * tells the longest delay, the longest hold and the longest collection
 * meanwhile. A delay counts the time the thread waited for a core (on two
 * cores shared with the client, the database and V8's helper threads, up to
 * 19 ms here); a hold is only the time the thread ran, which is what the
 * server's own work decides.
 */
export function watchLoop (): () => LoopWatch {
  let lastCpu = mainThreadCpuNs()
  let held = 0
  const ticks = lastCpu === null
    ? undefined
    : setInterval(() => {
      const cpu = mainThreadCpuNs() as number
      held = Math.max(held, cpu - (lastCpu as number))
      lastCpu = cpu
    }, 1)
  const loop = monitorEventLoopDelay({ resolution: 1 })
  let longest: PerformanceEntry | undefined
  const gcs = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) if (longest === undefined || entry.duration > longest.duration) longest = entry
  })
  gcs.observe({ entryTypes: ['gc'] })
  loop.enable()
  return () => {
    clearInterval(ticks)
    loop.disable()
    gcs.disconnect()
    const kind = ((longest as PerformanceEntry & { detail?: { kind?: number } } | undefined)?.detail)?.kind ?? -1
    return {
      loopMs: loop.max / 1e6,
      heldMs: ticks === undefined ? null : held / 1e6,
      gc: longest === undefined ? 'none' : `${longest.duration.toFixed(1)} ${GC_KINDS[kind] ?? 'other'}`
    }
  }
}

/**
 * `times` calls of `url` through inject, one after another, each body read
 * as it comes (gathering it whole would be the harness's own copy of up to
 * 12 MB); checks status and length; the time of each after the first two.
 */
export async function injectTimes (app: FastifyInstance, url: string, times: number, status: number, length: number): Promise<number[]> {
  const ms: number[] = []
  for (let i = 0; i < times; i++) {
    const t0 = process.hrtime.bigint()
    const res = await app.inject({ url, headers: ADMIN, payloadAsStream: true })
    let got = 0
    for await (const chunk of res.stream() as AsyncIterable<Buffer>) got += chunk.byteLength
    if (res.statusCode !== status || got !== length) throw new Error(`${url}: ${res.statusCode}, ${got} bytes`)
    if (i >= 2) ms.push(Number(process.hrtime.bigint() - t0) / 1e6)
  }
  return ms
}
