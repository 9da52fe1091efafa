import { createRequire } from 'node:module'
import type { Counter, Gauge, Histogram, Registry } from 'prom-client'
import { InvalidOptionError } from './errors.js'

// Prometheus metrics (SPEC.md §7.4: "watch for sudden rises of 403, patterns
// of 404, frequent 500"), registered in the host's own prom-client registry.
// prom-client is the host's: it is loaded only when the host passes a
// registry, so that the metrics and the registry come from one copy of it,
// and a host without metrics carries none of it.

/**
 * What the plugin needs of a prom-client `Registry`. Written out here so that
 * the package's types do not name prom-client, which a host without metrics
 * does not install.
 */
export interface MetricsRegistry {
  registerMetric (metric: never): void
  removeSingleMetric (name: string): void
  getMetricsAsArray (): Array<{ name: string }>
}

export interface MetricsOptions {
  /** the prom-client `Registry` the plugin registers its metrics in */
  registry: MetricsRegistry
}

/** The values the metrics read when scraped. */
export interface MetricsSources {
  /** bcrypt comparisons waiting for a slot */
  queuedComparisons: () => number
  /** bytes the tar spool holds on disk */
  tarSpoolBytes: () => number
}

/** What the plugin records; every label value is from a fixed set (never a path or key). */
export class PluginMetrics {
  private readonly verification: Histogram<'memo'>
  private readonly downloadsInProgress: Gauge<'format'>
  private readonly flushFailures: Counter
  private readonly limitedCalls: Counter<'limit'>
  /** the names registered, to take them out at close */
  private readonly names: string[]
  /**
   * The two counters every request or download adds to, counted here by
   * label set and added to prom-client's when the registry is read: an
   * `inc` with labels (an object, its hash, a lookup) cost more per request
   * than the rest of the metrics together.
   */
  private readonly pendingRequests = new Map<string, Pending<'route' | 'status' | 'reason'>>()
  private readonly pendingBytes = new Map<string, Pending<'format'>>()
  /** the labels `request` counted last, and their entry */
  private lastRequest: { route: string, status: number, reason: string, pending: Pending<'route' | 'status' | 'reason'> } | undefined
  /**
   * Memo hits' durations, each observed later, in a run of them: when
   * HIT_BATCH have come, or when the registry is read. Every request of a
   * known key is a hit, and the histogram's `observe` cost several times
   * more amid a request than in a loop (its label hashing and checks).
   */
  private readonly pendingHits = new Float64Array(HIT_BATCH)
  private pendingHitCount = 0

  constructor (private readonly registry: MetricsRegistry, sources: MetricsSources) {
    const prom = loadPromClient()
    const registers = [registry as unknown as Registry]
    const before = new Set(registry.getMetricsAsArray().map((m) => m.name))
    // A counter told at each read of the registry what `pending` counted since the last.
    const pendingCounter = <L extends string>(name: string, help: string, labelNames: L[], pending: Map<string, Pending<L>>): void => {
      // eslint-disable-next-line no-new
      new prom.Counter<L>({ name, help, labelNames, registers, collect () { addPending(this, pending) } })
    }
    pendingCounter('data_endpoints_requests_total',
      'Requests to the data and job routes, by route (dataset, pipeline, job), status and reason (ok or the refusal)',
      ['route', 'status', 'reason'], this.pendingRequests)
    this.verification = new prom.Histogram({
      name: 'data_endpoints_verification_seconds',
      help: 'Time to verify a supplied key against its stored hash: memo hit (no bcrypt) or miss (a bcrypt comparison, queue included)',
      labelNames: ['memo'],
      buckets: [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.005, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
      collect: () => { this.observePendingHits() }
    })
    const gauge = (name: string, help: string, read: () => number): void => {
      // eslint-disable-next-line no-new
      new prom.Gauge({ name, help, registers, collect () { this.set(read()) } })
    }
    gauge('data_endpoints_bcrypt_queue_depth', 'bcrypt comparisons waiting for a slot', sources.queuedComparisons)
    gauge('data_endpoints_tar_spool_bytes', 'Bytes of tar entries spooled to disk now', sources.tarSpoolBytes)
    this.downloadsInProgress = new prom.Gauge({
      name: 'data_endpoints_downloads_in_progress',
      help: 'Dataset downloads streaming now, by format',
      labelNames: ['format'],
      registers
    })
    pendingCounter('data_endpoints_download_bytes_total', 'Bytes of dataset downloads handed to the connection, by format',
      ['format'], this.pendingBytes)
    this.flushFailures = new prom.Counter({
      name: 'data_endpoints_usage_flush_failures_total',
      help: 'Writes of the batched usage counters that failed (they are retried)',
      registers
    })
    this.limitedCalls = new prom.Counter({
      name: 'data_endpoints_limited_total',
      help: 'Calls of a verified key refused for one of its limits (requestsPerMinute, concurrentDownloads, bytesPerDay); no key in any label',
      labelNames: ['limit'],
      registers
    })
    this.names = registry.getMetricsAsArray().map((m) => m.name).filter((name) => !before.has(name))
  }

  request (route: string, status: number, reason: string): void {
    // Most requests repeat the last one's labels: counted without making their key.
    const last = this.lastRequest
    if (last !== undefined && last.status === status && last.route === route && last.reason === reason) {
      last.pending.value++
      return
    }
    const key = `${route} ${status} ${reason}`
    let pending = this.pendingRequests.get(key)
    if (pending !== undefined) pending.value++
    else this.pendingRequests.set(key, pending = { labels: { route, status: String(status), reason }, value: 1 })
    this.lastRequest = { route, status, reason, pending }
  }

  verified (memo: 'hit' | 'miss', seconds: number): void {
    if (memo === 'miss') {
      this.verification.observe(MISS, seconds)
      return
    }
    this.pendingHits[this.pendingHitCount++] = seconds
    if (this.pendingHitCount === HIT_BATCH) this.observePendingHits()
  }

  private observePendingHits (): void {
    for (let i = 0; i < this.pendingHitCount; i++) this.verification.observe(HIT, this.pendingHits[i])
    this.pendingHitCount = 0
  }

  downloadStarted (format: string): void {
    this.downloadsInProgress.inc({ format })
  }

  downloadEnded (format: string): void {
    this.downloadsInProgress.dec({ format })
  }

  downloadSent (format: string, bytes: number): void {
    const pending = this.pendingBytes.get(format)
    if (pending !== undefined) pending.value += bytes
    else this.pendingBytes.set(format, { labels: { format }, value: bytes })
  }

  limited (limit: 'requestsPerMinute' | 'concurrentDownloads' | 'bytesPerDay'): void {
    this.limitedCalls.inc({ limit })
  }

  flushFailed (): void {
    this.flushFailures.inc()
  }

  /** Takes the plugin's metrics out of the registry again. */
  unregister (): void {
    for (const name of this.names) this.registry.removeSingleMetric(name)
  }
}

/** Memo hits observed in one run: a few hundred µs of the loop at most. */
const HIT_BATCH = 256
const HIT = { memo: 'hit' } as const
const MISS = { memo: 'miss' } as const

/** What a counter has not yet been told for one set of its labels (a fixed, small set: see PluginMetrics). */
interface Pending<L extends string> {
  labels: Record<L, string>
  value: number
}

/**
 * Adds what was counted since the last read to the counter, when the
 * registry reads it. Entries are kept at zero rather than deleted: the label
 * sets are few, and their keys and objects are then made once.
 */
function addPending<L extends string> (counter: Counter<L>, pending: Map<string, Pending<L>>): void {
  for (const entry of pending.values()) {
    if (entry.value === 0) continue
    counter.inc(entry.labels, entry.value)
    entry.value = 0
  }
}

function loadPromClient (): typeof import('prom-client') {
  try {
    return createRequire(import.meta.url)('prom-client') as typeof import('prom-client')
  } catch (err) {
    throw new InvalidOptionError(`option "metrics" needs the prom-client package, which is not installed (${(err as Error).message})`)
  }
}

/** The reason label of an answer: `ok`, or the catalogue code of its refusal in lower case (`unknown_key`). */
export function reasonOf (status: number, code: string | undefined): string {
  if (code !== undefined && code.startsWith('FDE_')) return code.slice(4).toLowerCase()
  if (status < 400) return 'ok'
  return status < 500 ? 'bad_request' : 'error'
}
