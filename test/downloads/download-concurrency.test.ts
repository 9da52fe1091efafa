import http, { type ServerResponse } from 'node:http'
import net, { type AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { Worker } from 'node:worker_threads'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import dataEndpoints, { SqliteStorage, type Column, type Dataset, type DataEndpointsOptions, type DatasetSource, type ResourceRef, type Row } from '../../lib/index.js'
import { DEFAULT_CHUNK_SIZE, Pace, SLICE_MS } from '../../lib/formats/pace.js'
import { MemoryJobs } from '../fixtures.js'
import { assignKeys, createKey, DATASET_URL } from '../helper.js'
import { eventually } from '../limit-fixtures.js'
import { requestBytes } from '../raw-http.js'

// Downloads share the server (issue 7): a download to a client that reads as
// fast as loopback allows must leave the event loop to everyone else, several
// downloads progress side by side, and a client that stops reading holds one
// chunk in the plugin. Every assertion counts rows, bytes or the order of
// events, never time: a timer cannot fire while the loop is held, so what a
// download did from setting a timer to the answer of the request that timer
// fired measures how long it held the loop, on any machine. Clients that must
// keep reading whatever the server does are in a worker thread, on their own
// event loop.

const COLUMNS: Column[] = [
  { name: 'id', type: 'integer', primaryKey: true, nullable: false },
  { name: 'payload', type: 'text' }
]
const PAYLOAD = 'x'.repeat(100)
/** A row takes at least this much text in every format. */
const MIN_ROW_TEXT = 100
/** The longest a row gets in any format (json: `{"id":200000,"payload":"x...x"},\n`). */
const MAX_ROW_TEXT = 160

type Shape = 'plain iterable' | 'async generator' | 'async iterator'

/**
 * Dataset 1 with `entityCount` entities of `rowsPerEntity` rows each, made on
 * demand and counted as they are handed out. Every shape hands its rows out
 * at once, as a database driver with rows in memory does, so none of them
 * ever waits on I/O: the case the plugin must yield for by itself.
 */
class CountingDatasets implements DatasetSource {
  pulled = 0
  /** runs for each row handed out, after it is counted */
  onRow: () => void = () => {}

  constructor (readonly rowsPerEntity: number, readonly shape: Shape = 'plain iterable', readonly entityCount = 1) {}

  async getDataset (ref: ResourceRef): Promise<Dataset | null> {
    if (ref.resourceSequence !== 1) return null
    return {
      name: 'counting',
      entities: Array.from({ length: this.entityCount }, (_, i) => ({ name: `entity${i}`, columns: COLUMNS })),
      rows: () => this.rows()
    }
  }

  private * generate (): Generator<Row, void, undefined> {
    for (let i = 1; i <= this.rowsPerEntity; i++) {
      this.pulled++
      this.onRow()
      yield [i, PAYLOAD]
    }
  }

  private rows (): Iterable<Row> | AsyncIterable<Row> {
    const rows = this.generate()
    switch (this.shape) {
      case 'plain iterable': return rows
      case 'async generator': return (async function * () { yield * rows })()
      case 'async iterator': return {
        [Symbol.asyncIterator]: () => ({ next: async () => rows.next(), return: async () => rows.return() })
      }
    }
  }
}

interface Served {
  port: number
  url: (query: string) => string
  /** the public job route, the concurrent request */
  jobPath: string
  /** each streamed download: its body stream and its response */
  downloads: Array<{ body: Readable, response: ServerResponse }>
}

async function serve (t: Test, datasets: DatasetSource, options: Partial<DataEndpointsOptions> = {}): Promise<Served> {
  const jobs = new MemoryJobs()
  const job = jobs.addJob({ type: 'pipeline', status: 'running' })
  const downloads: Served['downloads'] = []
  const app = Fastify()
  app.addHook('onSend', async (request, reply, payload) => {
    if (payload instanceof Readable) downloads.push({ body: payload, response: reply.raw })
    return payload
  })
  await app.register(dataEndpoints, {
    storage: new SqliteStorage({ filename: ':memory:' }),
    datasets,
    pipelines: jobs,
    jobs,
    bcryptCost: 4,
    getPermissions: (request) => String(request.headers['x-permissions'] ?? '').split(',').filter(Boolean),
    ...options
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(() => app.close())
  const { id, key } = await createKey(app)
  await assignKeys(app, 'dataset', [id])
  const url = (query: string): string => `${DATASET_URL}?api_key=${key}&${query}`
  // Verify the key once, so that no request below waits on bcrypt: every
  // step of a download is then work on the event loop.
  await app.inject({ url: url('meta=entities') })
  return { port: (app.server.address() as AddressInfo).port, url, jobPath: `/api/job/${job.id}`, downloads }
}

interface Fetched {
  status: number
  bytes: number
  complete: boolean
  /** performance.now() in the reader's thread */
  firstByteAt: number
  endAt: number
}

// Reads each path as fast as it can, all at once, and posts the outcomes.
const READER = `
const { parentPort, workerData } = require('node:worker_threads')
const http = require('node:http')
const { port, paths } = workerData
const results = paths.map(() => ({ status: 0, bytes: 0, complete: false, firstByteAt: -1, endAt: -1 }))
let left = paths.length
const done = (i) => { results[i].endAt = performance.now(); if (--left === 0) parentPort.postMessage(results) }
paths.forEach((path, i) => {
  http.get({ host: '127.0.0.1', port, path, agent: false }, (res) => {
    results[i].status = res.statusCode
    res.on('data', (chunk) => {
      if (results[i].firstByteAt < 0) results[i].firstByteAt = performance.now()
      results[i].bytes += chunk.length
    })
    res.on('end', () => { results[i].complete = true })
    res.on('close', () => done(i))
  }).on('error', () => done(i))
})
`

// Asks for each path and never reads the answers.
const STALLED_CLIENTS = `
const { workerData } = require('node:worker_threads')
const net = require('node:net')
const { port, paths } = workerData
for (const path of paths) {
  const socket = net.connect(port, '127.0.0.1', () => socket.write('GET ' + path + ' HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n\\r\\n'))
  socket.pause()
}
setInterval(() => {}, 60_000)
`

/** Clients in a worker thread that read `paths` as fast as loopback allows. */
function fastReaders (t: Test, port: number, paths: string[]): { finished: Promise<Fetched[]>, ended: () => boolean, stop: () => Promise<number> } {
  const worker = new Worker(READER, { eval: true, workerData: { port, paths } })
  let ended = false
  const finished = new Promise<Fetched[]>((resolve, reject) => {
    worker.once('message', (results: Fetched[]) => { ended = true; resolve(results) })
    worker.once('error', reject)
  })
  t.teardown(() => worker.terminate())
  return { finished, ended: () => ended, stop: () => worker.terminate() }
}

function get (port: number, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path, agent: false }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode ?? 0))
    }).on('error', reject)
  })
}

interface Probe {
  status: number
  /** rows the source handed out, and bytes the server sent, from setting the timer to the answer */
  rows: number
  bytes: number
  ms: number
  /** the download had started when the timer was set and had not ended when the answer came */
  during: boolean
}

/**
 * Calls the job route over and over, each call fired from a timer set when
 * the last answer came, until the download ended (or `enough` says so), and
 * records what the download did from setting the timer to the answer.
 */
async function probeDuring (served: Served, datasets: CountingDatasets, ended: () => boolean, enough = (probes: Probe[]) => false): Promise<Probe[]> {
  const sent = (): number => served.downloads.reduce((sum, d) => sum + (d.response.socket?.bytesWritten ?? 0), 0)
  const probes: Probe[] = []
  while (!ended() && !enough(probes)) {
    const started = datasets.pulled > 0
    const rows = datasets.pulled
    const bytes = sent()
    const at = performance.now()
    await sleep(0)
    const status = await get(served.port, served.jobPath)
    probes.push({
      status,
      rows: datasets.pulled - rows,
      bytes: sent() - bytes,
      ms: performance.now() - at,
      during: started && !ended()
    })
  }
  return probes
}

function summary (probes: Probe[]): string {
  const during = probes.filter((p) => p.during)
  const max = (key: 'rows' | 'bytes' | 'ms'): number => Math.max(0, ...during.map((p) => p[key]))
  const sorted = during.map((p) => p.ms).sort((a, b) => a - b)
  const p50 = sorted[Math.floor(sorted.length / 2)] ?? 0
  return `${during.length} probes during the download: answered in ${p50.toFixed(1)} ms (median), ${max('ms').toFixed(1)} ms at most; ` +
    `meanwhile at most ${max('rows')} rows read and ${max('bytes')} bytes sent`
}

// From a probe's timer to its answer the loop turns a few times, and each
// turn lets a download write about one chunk. Held for the whole download, the
// loop would let hundreds of chunks through instead. How many turns the probe
// takes depends on how the kernel schedules its packets beside the download's
// (the probe's client shares the process): on a loaded machine a tar download
// once sent 17 chunks' worth meanwhile, so the bytes get twice the rows' margin.
const CHUNKS_PER_PROBE = 16
const ROWS_PER_PROBE = CHUNKS_PER_PROBE * Math.ceil(DEFAULT_CHUNK_SIZE / MIN_ROW_TEXT)
const BYTES_PER_PROBE = 2 * CHUNKS_PER_PROBE * (DEFAULT_CHUNK_SIZE + MAX_ROW_TEXT + 16)

const ROWS = 200_000
const CASES: Array<{ query: string, shape?: Shape, entities?: number }> = [
  { query: 'format=sql' },
  { query: 'format=json' },
  { query: 'format=csv-zip' },
  { query: 'format=json-zip' },
  { query: 'format=oracle-loader' },
  { query: 'format=csv-zip&archiveType=tar' },
  { query: 'format=json-zip&archiveType=tar' },
  { query: 'format=oracle-loader&archiveType=tar' },
  { query: 'format=json', shape: 'async generator' },
  { query: 'format=sql', shape: 'async generator' },
  { query: 'format=json', shape: 'async iterator' },
  { query: 'format=sql', shape: 'async iterator' },
  // No entity fills a chunk: the turns come between entities.
  { query: 'format=json', entities: 2000 },
  { query: 'format=sql', entities: 2000 }
]

for (const { query, shape = 'plain iterable', entities = 1 } of CASES) {
  const name = `${query}, ${entities === 1 ? `${ROWS} rows` : `${entities} entities of ${ROWS / entities} rows`} from ${/^[aeiou]/.test(shape) ? 'an' : 'a'} ${shape}`
  t.test(`a fast reader of ${name} lets concurrent requests through`, async (t) => {
    const datasets = new CountingDatasets(ROWS / entities, shape, entities)
    const served = await serve(t, datasets)
    const reader = fastReaders(t, served.port, [served.url(query)])
    const probes = await probeDuring(served, datasets, reader.ended)
    const [download] = await reader.finished
    t.same([download.status, download.complete], [200, true], 'the download arrived whole')
    t.equal(datasets.pulled, ROWS, 'every row was read')
    t.ok(probes.every((p) => p.status === 200), 'every probe was answered 200')
    const during = probes.filter((p) => p.during)
    t.ok(during.length > 0, `probes were answered while the download ran (${during.length} of ${probes.length})`)
    const worst = Math.max(...during.map((p) => p.rows))
    t.ok(worst <= ROWS_PER_PROBE, `at most ${worst} rows read from a probe's timer to its answer (bound ${ROWS_PER_PROBE})`)
    const most = Math.max(...during.map((p) => p.bytes))
    t.ok(most <= BYTES_PER_PROBE, `at most ${most} bytes sent from a probe's timer to its answer (bound ${BYTES_PER_PROBE})`)
    t.comment(summary(probes))
  })
}

t.test('rows that come slowly are cut into short slices', async (t) => {
  for (const shape of ['plain iterable', 'async generator'] as const) {
    const datasets = new CountingDatasets(5000, shape)
    // Each row costs a millisecond of CPU: a 64 KiB chunk would hold the loop for hundreds of them.
    datasets.onRow = () => {
      const end = performance.now() + 1
      while (performance.now() < end);
    }
    const served = await serve(t, datasets)
    const reader = fastReaders(t, served.port, [served.url('format=json')])
    const probes = await probeDuring(served, datasets, reader.ended, (probes) => probes.filter((p) => p.during).length >= 8)
    await reader.stop()
    const during = probes.filter((p) => p.during)
    t.equal(during.length, 8, `${shape}: probes were answered while the download ran`)
    // The clock is read after 1, 2, 4, ... rows into a slice, so a slice of
    // millisecond rows ends before 2 * SLICE_MS of them.
    const bound = CHUNKS_PER_PROBE * 2 * SLICE_MS
    const worst = Math.max(...during.map((p) => p.rows))
    t.ok(worst <= bound, `${shape}: at most ${worst} slow rows read from a probe's timer to its answer (bound ${bound}; a chunk holds ${Math.floor(DEFAULT_CHUNK_SIZE / MAX_ROW_TEXT)} or more)`)
    t.comment(`${shape}: ${summary(probes)}`)
  }
})

t.test('concurrent fast downloads progress side by side', async (t) => {
  const datasets = new CountingDatasets(100_000)
  const served = await serve(t, datasets)
  const queries = ['format=json', 'format=json', 'format=sql', 'format=csv-zip']
  const results = await fastReaders(t, served.port, queries.map(served.url)).finished
  t.same(results.map((r) => [r.status, r.complete]), queries.map(() => [200, true]), 'every download arrived whole')
  const lastStart = Math.max(...results.map((r) => r.firstByteAt))
  const firstEnd = Math.min(...results.map((r) => r.endAt))
  t.ok(lastStart < firstEnd, 'each download received its first bytes before any of them ended')
  t.comment(`first bytes within ${(lastStart - Math.min(...results.map((r) => r.firstByteAt))).toFixed(1)} ms of each other; ` +
    `ended after ${results.map((r) => (r.endAt - r.firstByteAt).toFixed(0)).join(', ')} ms`)
})

/** Waits until `value()` stays the same over `turns` timer callbacks, each one at least a turn of the loop. */
async function settled (value: () => number, turns = 10): Promise<number> {
  let last = -1
  let same = 0
  while (same < turns) {
    await sleep(20)
    const now = value()
    same = now === last ? same + 1 : 0
    last = now
  }
  return last
}

t.test('a client that never reads holds one chunk in the plugin, and the source stops being pulled', async (t) => {
  for (const chunkSize of [DEFAULT_CHUNK_SIZE, 16 * 1024]) {
    for (const query of ['format=json', 'format=sql']) {
      const TOTAL = 5_000_000
      const datasets = new CountingDatasets(TOTAL)
      const served = await serve(t, datasets, { downloadChunkSize: chunkSize })
      const socket = net.connect(served.port, '127.0.0.1')
      socket.pause() // reads nothing: the kernel's buffers fill, then the server's writes wait
      socket.write(requestBytes({ target: served.url(query) }))
      t.teardown(() => { socket.destroy() })
      // A download that can write takes a chunk per turn of the loop, so rows
      // that stay the same over several turns mean it waits for the client.
      const pulled = await settled(() => datasets.pulled)
      t.ok(pulled > 0 && pulled < TOTAL, `${query}, chunks of ${chunkSize}: the source stopped at row ${pulled} of ${TOTAL}`)
      const [{ body, response }] = served.downloads
      const held = body.readableLength + response.writableLength
      // The response is handed a chunk while it holds less than its
      // high-water mark: when the kernel took part of the last chunk, what
      // is left of it (under the mark) waits beside the next one. One chunk
      // (a row past its size, and its chunked framing) above the mark at most.
      const bound = response.writableHighWaterMark + chunkSize + MAX_ROW_TEXT + 16
      t.equal(body.readableLength, 0, `${query}, chunks of ${chunkSize}: the body stream holds nothing read ahead`)
      t.ok(held < bound, `${query}, chunks of ${chunkSize}: ${held} bytes held (body stream ${body.readableLength}, response ${response.writableLength}; bound ${bound})`)
      socket.destroy()
    }
  }
})

t.test('clients that never read hold no other copy of a chunk', async (t) => {
  setFlagsFromString('--expose-gc')
  const fullGc = runInNewContext('gc') as () => void
  // V8 frees the memory of dead Buffers after the collection, concurrently: give it time.
  const gc = async (): Promise<void> => {
    for (let i = 0; i < 3; i++) {
      fullGc()
      await sleep(50)
    }
  }
  const datasets = new CountingDatasets(5_000_000)
  const served = await serve(t, datasets)
  await gc()
  const before = process.memoryUsage().arrayBuffers
  const paths = ['format=json', 'format=sql'].flatMap((query) => Array.from({ length: 5 }, () => served.url(query)))
  // In a worker, so that what its sockets read ahead is not counted here.
  const clients = new Worker(STALLED_CLIENTS, { eval: true, workerData: { port: served.port, paths } })
  t.teardown(() => clients.terminate())
  // Every download under way before they are watched settle: on a loaded
  // machine the worker's clients may connect later than 200 ms, and pulled
  // rows that stay at 0 meanwhile would count downloads still starting.
  t.ok(await eventually(async () => served.downloads.length === paths.length, 1500), 'every client\'s download started')
  await settled(() => datasets.pulled)
  await gc()
  // Every chunk is a Buffer outside V8's heap: one per client is the one its
  // response is sending. Anything that kept another (a stream reading ahead,
  // a generator holding an earlier chunk, see handOut in lib/formats/rows.ts)
  // would make two.
  const perClient = (process.memoryUsage().arrayBuffers - before) / paths.length
  t.ok(perClient < 1.5 * DEFAULT_CHUNK_SIZE, `${Math.round(perClient)} bytes of Buffers per client (a chunk is ${DEFAULT_CHUNK_SIZE})`)
})

t.test('a download that fits in one chunk takes no turn of the event loop; a longer one takes one per chunk', async (t) => {
  let turns = 0
  // eslint-disable-next-line @typescript-eslint/unbound-method
  const turn = Pace.prototype.turn
  Pace.prototype.turn = async function (this: Pace) {
    turns++
    return turn.call(this)
  }
  // The time slice never runs out here, so every turn counted is one the
  // chunks call for, whatever the machine's speed.
  const sliceSpent = Object.getOwnPropertyDescriptor(Pace.prototype, 'sliceSpent') as PropertyDescriptor
  Object.defineProperty(Pace.prototype, 'sliceSpent', { get: () => false, configurable: true })
  t.teardown(() => {
    Pace.prototype.turn = turn
    Object.defineProperty(Pace.prototype, 'sliceSpent', sliceSpent)
  })
  const small = await serve(t, new CountingDatasets(100, 'plain iterable', 3))
  const large = await serve(t, new CountingDatasets(20_000))
  const queries = ['format=sql', 'format=json', 'format=csv-zip', 'format=json-zip', 'format=oracle-loader',
    'format=csv-zip&archiveType=tar', 'format=json-zip&archiveType=tar', 'format=oracle-loader&archiveType=tar']
  for (const query of queries) {
    turns = 0
    t.equal(await get(small.port, small.url(query)), 200)
    t.equal(turns, 0, `${query}: three entities of 100 rows, no turn`)
    turns = 0
    t.equal(await get(large.port, large.url(query)), 200)
    const chunks = Math.floor(20_000 * MIN_ROW_TEXT / DEFAULT_CHUNK_SIZE)
    const most = Math.ceil(20_000 * MAX_ROW_TEXT / DEFAULT_CHUNK_SIZE)
    t.ok(turns >= chunks && turns <= most, `${query}: 20,000 rows, ${turns} turns (one per chunk: from ${chunks} to ${most})`)
  }
})
