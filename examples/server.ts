// The example server (`npm start`): reads the environment, builds the app,
// listens on 127.0.0.1, prints the admin token and demo key once, and closes
// gracefully on SIGINT / SIGTERM. See examples/app.ts for the app itself.
import type { FastifyInstance } from 'fastify'
import { readConfig, type ExampleConfig } from './config.js'

// Longer than a close can rightly take: in-flight downloads, then, during a
// database outage, the last counter flush's retries (about 27 s with
// PgStorage's default 5 s query timeout).
const CLOSE_TIMEOUT_MS = 40_000
// How often a closing server closes keep-alive connections that have gone idle.
const IDLE_SWEEP_MS = 200

let config: ExampleConfig
try {
  config = readConfig(process.env)
} catch (err) {
  console.error(`example server: ${(err as Error).message}`)
  process.exit(1)
}

let app: FastifyInstance | undefined
let closing = false

async function shutdown (signal: string): Promise<void> {
  if (closing) return
  closing = true
  app?.log.info({ signal }, 'closing')
  // A download that never ends must not keep the process alive for ever.
  setTimeout(() => {
    app?.log.error('close timed out')
    process.exit(1)
  }, CLOSE_TIMEOUT_MS).unref()
  // Fastify closes the connections that are idle when the close starts. One
  // busy with a download then stays open, kept alive for its client, until its
  // keep-alive timeout (72 s), and the close waits for it: close it as soon as
  // its response is done.
  setInterval(() => app?.server.closeIdleConnections(), IDLE_SWEEP_MS).unref()
  try {
    // Stops accepting, lets in-flight requests end, writes the batched
    // counters, stops the job timers and closes the databases.
    await app?.close()
    process.exit(0)
  } catch (err) {
    app?.log.error({ err }, 'close failed')
    process.exit(1)
  }
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => { void shutdown(signal) })

// The rest is imported once the signal handlers are in place: loading it
// takes seconds on a cold start, and a Ctrl-C meanwhile should still exit 0.
const { buildExampleApp } = await import('./app.js')
const { firstStartDemoKey } = await import('./demo-key.js')
const { startupBanner } = await import('./startup-banner.js')

try {
  app = await buildExampleApp(config)
  const address = await app.listen({ host: '127.0.0.1', port: config.port })
  const demo = await firstStartDemoKey(app, config)
  // Written in one piece to stdout, beside the log lines rather than through the logger.
  process.stdout.write(startupBanner({
    baseUrl: address,
    adminToken: config.adminTokenGenerated ? config.adminToken : null,
    demo
  }))
} catch (err) {
  if (closing) await new Promise(() => {}) // stopped by a signal while starting: shutdown() exits
  if (app !== undefined) app.log.error({ err }, 'start failed')
  else console.error('example server: start failed:', err)
  await app?.close().catch(() => {})
  process.exit(1)
}
