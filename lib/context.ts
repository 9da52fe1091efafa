import type { FailureThrottle } from './failure-throttle.js'
import type { IdempotencyReleaser } from './idempotency-releaser.js'
import type { KeyHasher } from './key-hasher.js'
import type { KeyVerifier } from './key-verifier.js'
import type { ResolvedOptions } from './options.js'
import type { Storage } from './storage.js'
import type { UsageRecorder } from './usage-recorder.js'

/** What the plugin's route modules share, built once at registration. */
export interface PluginContext {
  options: ResolvedOptions
  storage: Storage
  hasher: KeyHasher
  verifier: KeyVerifier
  usage: UsageRecorder
  idempotencyReleaser: IdempotencyReleaser
  throttle: FailureThrottle | null
  /** whether the host's Fastify has a logger that writes anything */
  logs: boolean
}
