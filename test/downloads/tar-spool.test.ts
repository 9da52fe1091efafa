import { spawn } from 'node:child_process'
import { mkdir, mkdtemp, readdir, rm, stat, symlink, writeFile } from 'node:fs/promises'
import http from 'node:http'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import t, { type Test } from 'tap'
import type { Column, Dataset, DatasetSource, ResourceRef, Row } from '../../lib/index.js'
import { thisProcess } from '../../lib/formats/spool-folder.js'
import { SPOOL_BLOCK } from '../../lib/formats/tar-spool.js'
import { ROOT } from '../example-process.js'
import { readArchive } from '../format-readers.js'
import { assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'

// The tar spool (a tar header needs its entry's size, so entries wait on
// disk): its disk budget, the 503 when a download cannot get any before it
// starts, the bounded wait after, and its folders, which go at close and,
// after a kill -9, at the next start.

const KIB = 1024
const MESSAGE = 'Not enough temporary space for a tar download; retry later or use archiveType=zip'
const COLUMNS: Column[] = [{ name: 'id', type: 'integer' }, { name: 'text', type: 'text' }]

/** A gate sources wait at until the test opens it. */
class Gate {
  /** sources that reached it */
  arrived = 0
  open!: () => void
  readonly opened = new Promise<void>((resolve) => { this.open = resolve })
}

/**
 * An entity of about `kib` KiB of CSV (rows of 1 KiB), which may stop at a
 * gate after `gateAfter` rows, and may have `laterKib` from its second read on.
 */
interface PlannedEntity { name: string, kib: number, gate?: Gate, gateAfter?: number, laterKib?: number }

/**
 * A dataset source whose dataset 1 has the entities of `plan` at the time it
 * is asked for (a test changes the plan between downloads), and that counts
 * the sources still open.
 */
class PlannedDatasets implements DatasetSource {
  open = 0
  /** rows() calls, per entity */
  readonly reads = new Map<string, number>()
  /** marks the dataset repeatable */
  repeatable = false

  constructor (public plan: PlannedEntity[]) {}

  async getDataset (ref: ResourceRef): Promise<Dataset | null> {
    if (ref.resourceSequence !== 1) return null
    const plan = this.plan
    const sources = this
    return {
      name: 'planned',
      ...(this.repeatable ? { repeatable: true } : {}),
      entities: plan.map(({ name }) => ({ name, columns: COLUMNS })),
      async * rows (entity, { limit, signal }): AsyncGenerator<Row> {
        const { kib, gate, gateAfter, laterKib } = plan.find((e) => e.name === entity) as PlannedEntity
        const read = (sources.reads.get(entity) ?? 0) + 1
        sources.reads.set(entity, read)
        const rows = read > 1 && laterKib !== undefined ? laterKib : kib
        sources.open++
        try {
          for (let i = 0; i < Math.min(rows, limit ?? rows); i++) {
            if (gate !== undefined && i === gateAfter) {
              gate.arrived++
              await gate.opened
            }
            if (signal.aborted) return
            // 1 KiB of CSV: "<id>,<text>\r\n"
            yield [i, 'x'.repeat(KIB - String(i).length - 3)]
            if (i % 64 === 0) await new Promise((resolve) => setImmediate(resolve))
          }
        } finally {
          sources.open--
        }
      }
    }
  }
}

function captureLogs (): { stream: Writable, lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = []
  const stream = new Writable({
    write (chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line !== '') lines.push(JSON.parse(line))
      done()
    }
  })
  return { stream, lines }
}

async function tempDir (t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'fde-spool-test-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

interface SpoolApp {
  app: Awaited<ReturnType<typeof buildApp>>['app']
  port: number
  /** the URL path of the dataset with the key and `query` */
  path: (query: string) => string
  dir: string
  logs: Array<Record<string, unknown>>
}

/** The plugin on real HTTP, with its tar spool in a folder of its own. */
async function spoolApp (t: Test, datasets: DatasetSource, tarSpool: { maxBytes: number, maxWaitMs: number, memoryPerEntry: number }): Promise<SpoolApp> {
  const dir = await tempDir(t)
  const { stream, lines } = captureLogs()
  const { app } = await buildApp(t, { datasets, tarSpool: { directory: dir, ...tarSpool } }, { logger: { level: 'info', stream } })
  const { id, key } = await createKey(app)
  await assignKeys(app, 'dataset', [id])
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as net.AddressInfo
  return { app, port, path: (query) => `${DATASET_URL}?api_key=${key}&${query}`, dir, logs: lines }
}

interface Outcome { status: number, headers: http.IncomingHttpHeaders, complete: boolean, body: Buffer }

/** A client that reads the whole answer. */
function download (port: number, path: string): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    http.get({ port, host: '127.0.0.1', path, agent: false }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('error', () => {})
      res.on('close', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, complete: res.complete, body: Buffer.concat(chunks) }))
    }).on('error', reject)
  })
}

/** A client that reads the status and headers, then not a byte of the body, until destroyed. */
function stalledClient (port: number, path: string): Promise<{ status: number, request: http.ClientRequest }> {
  return new Promise((resolve) => {
    const request = http.get({ port, host: '127.0.0.1', path, agent: false }, (res) => {
      res.pause()
      resolve({ status: res.statusCode ?? 0, request })
    })
    request.on('error', () => {})
  })
}

/** A client that sends its request and never reads a byte of the answer, until destroyed. */
function idleClient (port: number, path: string): net.Socket {
  const socket = net.connect(port, '127.0.0.1')
  socket.on('error', () => {})
  socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`)
  socket.pause()
  return socket
}

/** Checks `condition` every 10 ms until it holds (true) or `ms` have passed (false). */
async function until (condition: () => boolean | Promise<boolean>, ms = 30_000): Promise<boolean> {
  const end = Date.now() + ms
  for (;;) {
    if (await condition()) return true
    if (Date.now() >= end) return false
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

/** Bytes of the files in the spool folders under `dir`. */
async function bytesOnDisk (dir: string): Promise<number> {
  let total = 0
  for (const folder of await readdir(dir)) {
    for (const file of await readdir(join(dir, folder)).catch(() => [])) {
      total += (await stat(join(dir, folder, file)).catch(() => ({ size: 0 }))).size
    }
  }
  return total
}

async function spoolFiles (dir: string): Promise<string[]> {
  const files: string[] = []
  for (const folder of await readdir(dir)) files.push(...(await readdir(join(dir, folder)).catch(() => [])))
  return files
}

/** Nothing held: no budget, no waiting download, no spool file, no source still open. */
async function drained (s: SpoolApp, datasets: PlannedDatasets): Promise<boolean> {
  const usage = s.app.dataEndpoints.tarSpoolUsage()
  return usage.reservedBytes === 0 && usage.waitingDownloads === 0 && datasets.open === 0 && (await spoolFiles(s.dir)).length === 0
}

t.test('a tar download whose first entry gets no budget answers 503 with Retry-After, as JSON', async (t) => {
  const datasets = new PlannedDatasets([{ name: 'big', kib: 300 }])
  const s = await spoolApp(t, datasets, { maxBytes: 128 * KIB, maxWaitMs: 2500, memoryPerEntry: 16 * KIB })
  for (const format of ['csv-zip', 'json-zip', 'oracle-loader']) {
    const res = await download(s.port, s.path(`format=${format}&archiveType=tar`))
    t.equal(res.status, 503, format)
    t.equal(res.headers['retry-after'], '3', `${format}: Retry-After is maxWaitMs in whole seconds`)
    t.match(res.headers['content-type'], /^application\/json/)
    t.same(JSON.parse(res.body.toString('utf8')), { message: MESSAGE })
  }
  t.ok(await until(() => drained(s, datasets)), 'no budget, file or source held after')
  const zip = await download(s.port, s.path('format=csv-zip'))
  t.equal(zip.status, 200, 'zip needs no spool')
  const line = s.logs.find((l) => l.msg === 'data endpoint call' && l.statusCode === 503)
  t.equal(line?.message, MESSAGE, 'the log line says why')
})

t.test('an entry that fits the budget is sent; its file and budget go once it is sent', async (t) => {
  const datasets = new PlannedDatasets([{ name: 'a', kib: 100 }, { name: 'b', kib: 100 }])
  const s = await spoolApp(t, datasets, { maxBytes: 128 * KIB, maxWaitMs: 1000, memoryPerEntry: 16 * KIB })
  const res = await download(s.port, s.path('format=csv-zip&archiveType=tar'))
  t.same([res.status, res.complete], [200, true])
  const files = await readArchive('tar', res.body)
  t.same([...files.keys()], ['a.csv', 'b.csv'], 'two entries, each alone within the 128 KiB budget')
  t.equal(files.get('b.csv')?.length, 'id,text\r\n'.length + 100 * KIB)
  t.ok(await until(() => drained(s, datasets)), 'nothing held after')
  t.ok((await readdir(s.dir)).length <= 1, 'at most the instance\'s own (empty) folder')
})

/**
 * Another download holds 150 KiB of the 512 KiB budget (its source stopped
 * mid-entry); this one's first entry (100 KiB) goes out, then its second
 * (400 KiB, which alone would fit) runs short.
 */
async function shortAfterStart (t: Test, maxWaitMs: number): Promise<{ s: SpoolApp, datasets: PlannedDatasets, holder: Gate, held: number, holding: Promise<Outcome>, started: Promise<Outcome> }> {
  const holder = new Gate()
  const datasets = new PlannedDatasets([{ name: 'held', kib: 200, gate: holder, gateAfter: 150 }])
  const s = await spoolApp(t, datasets, { maxBytes: 512 * KIB, maxWaitMs, memoryPerEntry: 16 * KIB })
  const holding = download(s.port, s.path('format=csv-zip&archiveType=tar'))
  t.ok(await until(() => holder.arrived === 1), 'the holder stopped mid-entry')
  datasets.plan = [{ name: 'a', kib: 100 }, { name: 'b', kib: 400 }]
  // What it spooled so far, in whole 64 KiB blocks (the last rows wait in the format's chunk).
  const held = s.app.dataEndpoints.tarSpoolUsage().reservedBytes
  t.ok(held > 0 && held <= 3 * SPOOL_BLOCK && held % SPOOL_BLOCK === 0, `the holder holds ${held} bytes of budget`)
  const started = download(s.port, s.path('format=csv-zip&archiveType=tar'))
  t.ok(await until(() => s.app.dataEndpoints.tarSpoolUsage().waitingDownloads === 1), 'the second download waits for budget')
  return { s, datasets, holder, held, holding, started }
}

t.test('a shortage after the first byte waits maxWaitMs, then ends the response incomplete and gives its budget back', async (t) => {
  const { s, datasets, holder, held, holding, started } = await shortAfterStart(t, 1500)
  const outcome = await started
  t.equal(outcome.status, 200, 'the answer had started')
  t.equal(outcome.complete, false, 'the client sees an incomplete response')
  t.ok(outcome.body.length > 100 * KIB, 'after the first entry')
  t.equal(s.app.dataEndpoints.tarSpoolUsage().reservedBytes, held, 'only the holder\'s budget is still held')
  t.ok(await until(() => s.logs.some((l) => l.msg === 'data endpoint call' && l.statusCode === 200)), 'the call is logged')
  const line = s.logs.find((l) => l.msg === 'data endpoint call' && l.statusCode === 200)
  t.equal(line?.message, `Download failed after it started: ${MESSAGE}`, 'the log line says why')
  holder.open()
  const holderOutcome = await holding
  t.same([holderOutcome.status, holderOutcome.complete], [200, true], 'the holder finishes once its source goes on')
  t.ok(await until(() => drained(s, datasets)), 'nothing held after')
})

t.test('a download waiting for budget carries on when one that has not started gives it back', async (t) => {
  const { s, datasets, holder, holding, started } = await shortAfterStart(t, 60_000)
  // The holder needs more for its entry too, but has sent nothing: it is
  // answered 503 at once rather than queued behind the download that waits.
  holder.open()
  const refused = await holding
  t.same([refused.status, JSON.parse(refused.body.toString('utf8'))], [503, { message: MESSAGE }], 'the holder: 503')
  const outcome = await started
  t.same([outcome.status, outcome.complete], [200, true], 'the waiter: complete')
  const files = await readArchive('tar', outcome.body)
  t.equal(files.get('b.csv')?.length, 'id,text\r\n'.length + 400 * KIB, 'the entry that waited arrives whole')
  t.ok(await until(() => drained(s, datasets)), 'nothing held after')
})

t.test('downloads that each hold part of the budget and wait for more do not wait forever', async (t) => {
  // Each stops at its gate holding 3 or 4 of the 8 blocks, and needs 7 in
  // all: the one that takes what is left still lacks some, so both wait.
  const gates = [new Gate(), new Gate()]
  const planWith = (gate: Gate): PlannedEntity[] => [{ name: 'a', kib: 70 }, { name: 'b', kib: 400, gate, gateAfter: 250 }]
  const datasets = new PlannedDatasets(planWith(gates[0]))
  const s = await spoolApp(t, datasets, { maxBytes: 512 * KIB, maxWaitMs: 1000, memoryPerEntry: 16 * KIB })
  const outcomes = [download(s.port, s.path('format=csv-zip&archiveType=tar'))]
  t.ok(await until(() => gates[0].arrived === 1), 'the first stopped at its gate')
  datasets.plan = planWith(gates[1])
  outcomes.push(download(s.port, s.path('format=csv-zip&archiveType=tar')))
  t.ok(await until(() => gates[1].arrived === 1), 'the second stopped at its gate')
  t.ok(s.app.dataEndpoints.tarSpoolUsage().reservedBytes >= 6 * SPOOL_BLOCK, 'together they hold most of the budget')
  for (const gate of gates) gate.open()
  const ended = await Promise.all(outcomes)
  // Which ends how depends on when each wait ends: the first to give up
  // frees what the other waits for, unless the other gave up too by then.
  t.ok(ended.some((o) => !o.complete), 'a wait ended a download, visibly incomplete')
  t.ok(ended.every((o) => o.status === 200), 'both had started')
  t.ok(await until(() => drained(s, datasets)), 'nothing held after')
})

t.test('a burst of tar downloads that together outgrow the budget: one at least is served, the others get 503', async (t) => {
  // Six entries of 300 KiB (5 blocks) against 16 blocks: those that each
  // took part of the budget would all have failed together.
  const datasets = new PlannedDatasets([{ name: 'e', kib: 300 }])
  const s = await spoolApp(t, datasets, { maxBytes: 1024 * KIB, maxWaitMs: 60_000, memoryPerEntry: 16 * KIB })
  const outcomes = await Promise.all(Array.from({ length: 6 }, () => download(s.port, s.path('format=csv-zip&archiveType=tar'))))
  const served = outcomes.filter((o) => o.status === 200)
  t.ok(served.length >= 1, `${served.length} of 6 served`)
  t.ok(served.every((o) => o.complete), 'each in full')
  t.ok(outcomes.every((o) => o.status === 200 || (o.status === 503 && o.headers['retry-after'] === '60')), 'the others: 503 with Retry-After')
  t.ok(await until(() => drained(s, datasets)), 'nothing held after')
})

t.test('idle tar clients cannot push the spool past maxBytes; others get 503, json still works, and leaving frees it all', async (t) => {
  // 60 entries of 300 KiB (5 blocks) each: more than the socket buffers of a
  // client that stops reading take, so each such download ends up holding an
  // entry on disk.
  const entities = Array.from({ length: 60 }, (_, i) => ({ name: `e${i}`, kib: 300 }))
  const datasets = new PlannedDatasets(entities)
  const maxBytes = 1024 * KIB
  const s = await spoolApp(t, datasets, { maxBytes, maxWaitMs: 60_000, memoryPerEntry: 16 * KIB })
  const idle: http.ClientRequest[] = []
  t.teardown(() => { for (const request of idle) request.destroy() })
  let most = 0
  let refused: Outcome | undefined
  // Clients that stop reading come until no entry fits any more; then a new
  // tar download is refused. (Before the idle ones are stuck, one may get
  // through, or a 503 may be one client's bad luck.)
  const full = await until(async () => {
    most = Math.max(most, await bytesOnDisk(s.dir))
    if (s.app.dataEndpoints.tarSpoolUsage().reservedBytes + 5 * SPOOL_BLOCK <= maxBytes) {
      if (idle.length < 30) idle.push((await stalledClient(s.port, s.path('format=csv-zip&archiveType=tar'))).request)
      return false
    }
    const probe = await download(s.port, s.path('format=csv-zip&archiveType=tar&entity=e1'))
    if (probe.status === 503) refused = probe
    return refused !== undefined
  }, 120_000)
  t.ok(full, `the ${idle.length} idle clients took the budget: a new tar download is refused`)
  t.same([refused?.headers['retry-after'], JSON.parse(refused?.body.toString('utf8') ?? 'null')], ['60', { message: MESSAGE }],
    'with Retry-After and the message, at once rather than queued behind them')
  for (let i = 0; i < 20; i++) {
    most = Math.max(most, await bytesOnDisk(s.dir))
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  t.ok(most > 0 && most <= maxBytes, `at most ${most} bytes on disk (maxBytes ${maxBytes})`)
  t.ok(s.app.dataEndpoints.tarSpoolUsage().reservedBytes <= maxBytes, 'the budget is never overdrawn')
  const json = await download(s.port, s.path('format=json&entity=e1'))
  t.same([json.status, json.complete], [200, true], 'json needs no spool and still works')
  t.equal(JSON.parse(json.body.toString('utf8')).e1.length, 300)

  for (const request of idle) request.destroy()
  t.ok(await until(() => drained(s, datasets)), 'clients that leave free their budget, files and sources, waiting or not')
  t.ok(await bytesOnDisk(s.dir) === 0, 'no bytes on disk')
})

t.test('close stops downloads still running and removes the spool folder', async (t) => {
  const holder = new Gate()
  const datasets = new PlannedDatasets([{ name: 'held', kib: 200, gate: holder, gateAfter: 150 }])
  const dir = await tempDir(t)
  // Fastify cuts the open connections at close, as a host's forceCloseConnections does.
  const { app } = await buildApp(t, { datasets, tarSpool: { directory: dir, memoryPerEntry: 16 * KIB } }, { forceCloseConnections: true })
  const { id, key } = await createKey(app)
  await assignKeys(app, 'dataset', [id])
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as net.AddressInfo
  const client = idleClient(port, `${DATASET_URL}?api_key=${key}&format=csv-zip&archiveType=tar`)
  t.teardown(() => client.destroy())
  t.ok(await until(() => holder.arrived === 1), 'spooling, its source stopped')
  t.same((await spoolFiles(dir)).length, 1, 'one spool file')
  // An injected download is not cut by the server's close: the spool stops it.
  const injected = app.inject({ url: `${DATASET_URL}?api_key=${key}&format=csv-zip&archiveType=tar` })
  t.ok(await until(() => holder.arrived === 2), 'the injected one spools too')
  t.same((await spoolFiles(dir)).length, 2, 'two spool files')
  await app.close()
  t.same(await readdir(dir), [], 'nothing left in the spool directory, though both sources still wait at their gate')
  t.same([(await injected).statusCode, (await injected).json()], [500, { message: 'The server closed during the download' }],
    'the injected download was stopped')
  holder.open()
  t.ok(await until(() => datasets.open === 0), 'both sources end when they next run')
  t.same(await readdir(dir), [], 'and leave nothing')
})

// ---- spool folders of other processes ------------------------------------

/** Runs `code` (an ES module, from the repository root) in a new Node process; resolves with its first line of output. */
function runNode (t: Test, code: string, env: Record<string, string> = {}): { firstLine: Promise<string>, child: ReturnType<typeof spawn>, exited: Promise<void> } {
  const child = spawn(process.execPath, ['--import', 'tsx', ...(code.endsWith('.ts') ? [code] : ['--input-type=module', '-e', code])], {
    cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit']
  })
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const firstLine = new Promise<string>((resolve, reject) => {
    let out = ''
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk
      if (out.includes('\n')) resolve(out.slice(0, out.indexOf('\n')))
    })
    void exited.then(() => reject(new Error(`exited before printing a line: ${out}`)))
  })
  return { firstLine, child, exited }
}

t.test('at start, the spool folders of processes that no longer run go; those of live ones and anything not ours stay', async (t) => {
  const dir = await tempDir(t)
  const me = thisProcess()
  const name = (pid: number, start: string, namespace = me.namespace, random = '0123456789abcdef'): string =>
    `fastify-data-endpoints-spool-${pid}-${namespace}-${start}-${random}`
  const populate = async (folder: string): Promise<void> => {
    await mkdir(join(dir, folder))
    await writeFile(join(dir, folder, 'entry-1'), 'x'.repeat(1000))
  }

  // A process that ran and is gone.
  const gone = runNode(t, 'console.log(process.pid)')
  const deadPid = Number(await gone.firstLine)
  await gone.exited
  // A process that runs, with its folder named as the plugin names it.
  const live = runNode(t, "const { newSpoolFolderName } = await import('./lib/formats/spool-folder.ts'); console.log(JSON.stringify({ name: newSpoolFolderName(), pid: process.pid })); setInterval(() => {}, 1000)")
  const running = JSON.parse(await live.firstLine) as { name: string, pid: number }

  const removed = [name(deadPid, me.start)]
  const kept = [running.name]
  if (me.start !== '0') {
    // /proc tells when a process started: a folder with our own pid but
    // another start is an earlier process's (a container's pid 1 after a
    // restart); a live pid with another start was reused by another process.
    removed.push(name(process.pid, '1', me.namespace, 'aaaaaaaaaaaaaaaa'), name(running.pid, '1', me.namespace, 'bbbbbbbbbbbbbbbb'))
  }
  if (me.namespace !== '0') kept.push(name(deadPid, me.start, '1'), name(deadPid, me.start, me.namespace + '0'))
  for (const folder of [...removed, ...kept]) await populate(folder)
  // Not ours, or not exactly: left alone whatever their pid says.
  const others = ['fastify-data-endpoints-Ab12Cd', `fastify-data-endpoints-spool-${deadPid}`, `x${name(deadPid, me.start)}`,
    `${name(deadPid, me.start)}.bak`, name(deadPid, me.start, me.namespace, '0123456789ABCDEF')]
  for (const folder of others) await populate(folder)
  const file = name(deadPid, me.start, me.namespace, '1111111111111111')
  await writeFile(join(dir, file), 'a file, not a folder')
  const target = await tempDir(t)
  await writeFile(join(target, 'precious'), 'keep me')
  const link = name(deadPid, me.start, me.namespace, '2222222222222222')
  await symlink(target, join(dir, link))

  const { stream, lines } = captureLogs()
  await buildApp(t, { tarSpool: { directory: dir } }, { logger: { level: 'info', stream } })
  t.same((await readdir(dir)).sort(), [...kept, ...others, file, link].sort(), 'only the dead owners\' folders went')
  t.same(await readdir(target), ['precious'], 'a link is not followed')
  const logged = lines.filter((l) => l.msg === 'removed a tar spool folder whose process no longer runs').map((l) => l.folder)
  t.same(logged.sort(), removed.map((f) => join(dir, f)).sort(), 'each removal is logged')
  live.child.kill('SIGKILL')
})

t.test('a kill -9 during a tar download leaves its spool behind; the next start removes it, and a live one\'s stays', async (t) => {
  const dir = await tempDir(t)
  const server = runNode(t, 'test/tar-spool-server.ts', { SPOOL_DIR: dir })
  const { port, key } = JSON.parse(await server.firstLine) as { port: number, key: string }
  const client = idleClient(port, `${DATASET_URL}?api_key=${key}&format=csv-zip&archiveType=tar`)
  t.teardown(() => client.destroy())
  t.ok(await until(async () => (await bytesOnDisk(dir)) > 500_000), 'the download spools to disk')
  const [folder] = await readdir(dir)
  t.match(folder, new RegExp(`^fastify-data-endpoints-spool-${server.child.pid}-`), 'in a folder named after its process')

  // Another process starting on the same folder leaves a live one's spool alone.
  const { app } = await buildApp(t, { tarSpool: { directory: dir } })
  t.same(await readdir(dir), [folder], 'the live process\'s folder stays')
  await app.close()
  t.same(await readdir(dir), [folder], 'and stays when that other process closes')

  server.child.kill('SIGKILL')
  await server.exited
  client.destroy()
  t.ok((await bytesOnDisk(dir)) > 500_000, 'the killed process left its spool behind')

  const restarted = runNode(t, 'test/tar-spool-server.ts', { SPOOL_DIR: dir })
  await restarted.firstLine
  t.same(await readdir(dir), [], 'the restart removed it: nothing is left')
  restarted.child.kill('SIGTERM')
  await restarted.exited
  t.equal(restarted.child.exitCode, 0, 'closed gracefully')
  t.same(await readdir(dir), [], 'nothing left after a graceful close either')
})

// ---- a repeatable dataset: read twice, no spool --------------------------

t.test('a repeatable dataset is read twice for tar, and needs no spool at all', async (t) => {
  const datasets = new PlannedDatasets([{ name: 'a', kib: 300 }, { name: 'b', kib: 5 }])
  datasets.repeatable = true
  // No memory and no disk for the spool: only reading twice can serve it.
  const s = await spoolApp(t, datasets, { maxBytes: 0, maxWaitMs: 1000, memoryPerEntry: 0 })
  const res = await download(s.port, s.path('format=csv-zip&archiveType=tar'))
  t.same([res.status, res.complete], [200, true])
  const files = await readArchive('tar', res.body)
  t.same([...files.keys()], ['a.csv', 'b.csv'])
  t.equal(files.get('a.csv')?.length, 'id,text\r\n'.length + 300 * KIB, 'the entry whole')
  t.same(Object.fromEntries(datasets.reads), { a: 2, b: 2 }, 'each entity read twice')
  t.same(await readdir(s.dir), [], 'nothing ever written to disk')
  t.equal(s.app.dataEndpoints.tarSpoolUsage().reservedBytes, 0)

  datasets.reads.clear()
  const zip = await download(s.port, s.path('format=csv-zip'))
  t.same([zip.status, zip.complete], [200, true])
  t.same(Object.fromEntries(datasets.reads), { a: 1, b: 1 }, 'zip reads once')
  datasets.repeatable = false
  t.equal((await download(s.port, s.path('format=csv-zip&archiveType=tar'))).status, 503, 'unmarked, the same dataset needs the spool')
})

t.test('a repeatable dataset whose second read differs in size fails visibly, never as a tar whose header lies', async (t) => {
  const cases: Array<[string, PlannedEntity[], number]> = [
    // the first entry's 100 KiB went out before the second one's reads differ
    ['longer, after the response started', [{ name: 'a', kib: 100 }, { name: 'b', kib: 50, laterKib: 51 }], 200],
    ['shorter, after the response started', [{ name: 'a', kib: 100 }, { name: 'b', kib: 50, laterKib: 49 }], 200],
    // nothing sent yet: the failure is answered
    ['longer, before anything was sent', [{ name: 'a', kib: 10, laterKib: 11 }], 500]
  ]
  for (const [name, plan, status] of cases) {
    const datasets = new PlannedDatasets(plan)
    datasets.repeatable = true
    const s = await spoolApp(t, datasets, { maxBytes: 0, maxWaitMs: 1000, memoryPerEntry: 0 })
    const res = await download(s.port, s.path('format=csv-zip&archiveType=tar'))
    t.equal(res.status, status, name)
    const reason = /^[ab]\.csv changed between the two reads of a repeatable dataset \(\d+ bytes, then (more|\d+)\)$/
    if (status === 200) {
      t.equal(res.complete, false, `${name}: the client sees an incomplete response`)
      t.ok(await until(() => s.logs.some((l) => l.msg === 'data endpoint call')), `${name}: logged`)
      const line = s.logs.find((l) => l.msg === 'data endpoint call')
      t.match(String(line?.message).replace('Download failed after it started: ', ''), reason, `${name}: the log line says why`)
    } else {
      t.match(JSON.parse(res.body.toString('utf8')).message, reason, `${name}: the answer says why`)
    }
    t.ok(await until(() => drained(s, datasets)), `${name}: nothing held after`)
  }
})
