// The usage bench's server in a process of its own (usage-query.ts forks it,
// compiled, under plain node, as a host runs the plugin): its heap holds the
// server alone, not the bench's seeding of the history or tsx. Env:
// BENCH_STORAGE=pg with PGURL and PG_SCHEMA, else SQLITE_FILE. Sends
// { address } once listening; answers { cmd: 'watch' } (starts watching the
// event loop), { cmd: 'report' } (LoopWatch), { cmd: 'inject', url, times,
// status, length } ({ ms }), each with { error } on failure. Ends when the
// bench disconnects.
import { PgStorage, SqliteStorage } from '../../lib/index.js'
import { injectTimes, usageBenchApp, watchLoop, type LoopWatch } from './usage-bench-app.js'

const storage = process.env.BENCH_STORAGE === 'pg'
  ? new PgStorage({ connectionString: process.env.PGURL, schema: process.env.PG_SCHEMA })
  : new SqliteStorage({ filename: process.env.SQLITE_FILE as string })
const app = await usageBenchApp(storage)
const address = await app.listen({ host: '127.0.0.1', port: 0 })
let stop: (() => LoopWatch) | undefined

type Ask = { cmd: 'watch' } | { cmd: 'report' } | { cmd: 'inject', url: string, times: number, status: number, length: number }

async function answer (ask: Ask): Promise<unknown> {
  if (ask.cmd === 'watch') {
    stop = watchLoop()
    return {}
  }
  if (ask.cmd === 'report') {
    if (stop === undefined) throw new Error('not watching')
    const watched = stop()
    stop = undefined
    return watched
  }
  return { ms: await injectTimes(app, ask.url, ask.times, ask.status, ask.length) }
}

process.on('message', (ask: Ask) => {
  answer(ask).then((reply) => process.send?.(reply), (err: Error) => process.send?.({ error: err.message }))
})
process.on('disconnect', () => {
  app.close().then(() => process.exit(0), () => process.exit(1))
})
process.send?.({ address })
