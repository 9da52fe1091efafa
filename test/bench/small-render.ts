// The example's `sales` json made in a loop, without a server: what the
// hand-written route does (three prepared SELECTs through `.all()`,
// JSON.stringify, the byte count Fastify takes) against what the plugin does
// (the example's source, the json writer's whole document, Buffer.from).
// Each case runs 20,000 times in each of 7 rounds, the cases interleaved;
// the fastest round counts. In a server every step costs several times more
// (caches shared with the rest of the request), so read the differences
// between the lines, not the figures. Not a test: run it with
//   nice -n -20 npx tsx test/bench/small-render.ts
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { exampleDatabaseFile, openExampleDatabase, seedSampleData, SampleDatasets } from '../../examples/sample-datasets.js'
import { FORMATS, type DownloadSpec } from '../../lib/formats/index.js'
import { Pace } from '../../lib/formats/pace.js'
import { DownloadAbort } from '../../lib/formats/download-abort.js'
import { DEFAULTS } from '../../lib/options.js'
import { handWrittenSales } from './hand-written-sales.js'

const dir = mkdtempSync(join(tmpdir(), 'fde-small-render-'))
process.on('exit', () => rmSync(dir, { recursive: true, force: true }))
const file = exampleDatabaseFile(dir)
const seed = openExampleDatabase(file)
seedSampleData(seed, 10)
seed.close()
const source = new SampleDatasets(file)
const sales = await source.getDataset({ organization: 'acme', project: 'shop', modelSequence: 1, resourceSequence: 1 })
if (sales === null) throw new Error('no sales dataset')
const db = new Database(file, { readonly: true })
const hand = handWrittenSales(db)

// What sendDataset gives the json format for a whole small download (json never spools to tar).
function spec (): DownloadSpec {
  return {
    dataset: sales as NonNullable<typeof sales>,
    entities: (sales as NonNullable<typeof sales>).entities,
    limit: undefined,
    archiveType: 'zip',
    tarSpool: undefined as unknown as DownloadSpec['tarSpool'],
    responseStarted: false,
    abort: new DownloadAbort(),
    pace: new Pace(DEFAULTS.downloadChunkSize),
    columnar: undefined as unknown as DownloadSpec['columnar']
  }
}
const pluginBytes = (): Buffer => {
  const bytes = FORMATS.json(spec()).whole?.()
  if (bytes === undefined) throw new Error('sales is no longer one whole document')
  return bytes
}
const noSignal = new AbortController().signal

const cases: Array<[string, () => unknown]> = [
  ['hand-written: the three .all() (objects)', hand.all],
  ['hand-written: .all() + JSON.stringify', hand.text],
  ['hand-written: the same + Buffer.byteLength', () => Buffer.byteLength(hand.text())],
  ['plugin: the example source\'s rows (arrays)', () => sales.entities.map((e) => sales.rows(e.name, { limit: undefined, signal: noSignal }))],
  ['plugin: the json writer\'s whole document, in bytes', pluginBytes]
]
const best = new Map<string, number>()
for (let round = 0; round < 7; round++) {
  for (const [name, run] of cases) {
    for (let i = 0; i < 3000; i++) run()
    const started = process.hrtime.bigint()
    for (let i = 0; i < 20_000; i++) run()
    const us = Number(process.hrtime.bigint() - started) / 20_000 / 1000
    best.set(name, Math.min(best.get(name) ?? Infinity, us))
  }
}
console.log('| case | µs (fastest of 7 rounds) |\n|---|---:|')
for (const [name, us] of best) console.log(`| ${name} | ${us.toFixed(1)} |`)
source.close()
db.close()
