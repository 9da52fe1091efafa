import type { FailureThrottle } from '../keys/failure-throttle.js'
import type { TarSpool } from '../formats/tar-spool.js'
import type { ParquetEncoders } from '../formats/parquet-encoders.js'
import type { RenderedFiles } from '../downloads/rendered-files.js'
import type { IdempotencyReleaser } from './idempotency-releaser.js'
import type { KeyHasher } from '../keys/key-hasher.js'
import type { KeyVerifier } from '../keys/key-verifier.js'
import type { KeyLimiter } from '../keys/key-limits.js'
import type { DownloadSlots } from '../keys/download-slots.js'
import type { LinkSigner } from '../keys/link-tokens.js'
import type { PluginMetrics } from '../metrics.js'
import type { RenderedBodies } from '../downloads/rendered-bodies.js'
import type { ResolvedOptions } from '../options.js'
import type { Storage } from '../storage/storage.js'
import type { UsageRecorder } from '../storage/usage-recorder.js'
import type { Housekeeping } from '../storage/housekeeping.js'

/** What the plugin's route modules share, built once at registration. */
export interface PluginContext {
  options: ResolvedOptions
  storage: Storage
  hasher: KeyHasher
  verifier: KeyVerifier
  /** signs and verifies download links' tokens, with the secrets the store shares */
  links: LinkSigner
  usage: UsageRecorder
  housekeeping: Housekeeping
  idempotencyReleaser: IdempotencyReleaser
  throttle: FailureThrottle | null
  /** the check of a verified key's limits (DESIGN.md §4.3), for every route that counts a key's calls */
  limiter: KeyLimiter
  /** the download slots this instance holds */
  downloadSlots: DownloadSlots
  /** null when the host passed no registry */
  metrics: PluginMetrics | null
  /** the tar downloads' spool: its disk budget and folder */
  tarSpool: TarSpool
  /** small rendered downloads by ETag; null when `renderedBodyCacheBytes` is 0 */
  renderedBodies: RenderedBodies | null
  /** rendered Parquet and Arrow files by ETag; null when `renderedFiles.maxBytes` is 0 */
  renderedFiles: RenderedFiles | null
  /** the worker threads that encode Parquet row groups */
  parquetEncoders: ParquetEncoders
  /** whether the host's Fastify has a logger (at any level, silent included: levels change at run time) */
  logs: boolean
}
