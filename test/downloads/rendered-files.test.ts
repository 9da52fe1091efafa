import { spawn } from 'node:child_process'
import { readdirSync, statSync } from 'node:fs'
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import type { Dataset, DatasetSource, Row } from '../../lib/index.js'
import { parseRange } from '../../lib/downloads/file-reply.js'
import { duckdbQuery, parquetFolder, readArrowStream } from '../columnar-readers.js'
import { ROOT } from '../example-process.js'
import { ADMIN, DATASET_URL, assignKeys, buildApp, createKey } from '../helper.js'

// Parquet and Arrow downloads of a dataset with a revision are rendered once
// and read in place: HEAD, Content-Length, Range (206, 416), If-Range, a
// strong ETag; one render for concurrent requests, a disk budget, nothing
// left after a close or a kill -9.

const ROWS = 20_000

/** One entity of ROWS rows; counts its reads. `revision` null: none. */
class NumberDatasets implements DatasetSource {
  reads = 0
  constructor (readonly revision: string | null = 'r1', readonly rows = ROWS) {}

  async getDataset (): Promise<Dataset> {
    const self = this
    return {
      name: 'numbers',
      ...(this.revision === null ? {} : { revision: this.revision }),
      entities: [{ name: 'numbers', columns: [{ name: 'id', type: 'integer', nullable: false }, { name: 'text', type: 'text' }] }],
      * rows (_entity, { limit }): Generator<Row> {
        self.reads++
        const n = Math.min(limit ?? Infinity, self.rows)
        for (let i = 0; i < n; i++) yield [i, `row ${i} ${'z'.repeat(i % 40)}`]
      }
    }
  }
}

async function tempDir (t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'fde-rendered-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

/** Bytes of every file in the rendered-files folders under `dir`. */
async function bytesOnDisk (dir: string): Promise<number> {
  let total = 0
  for (const folder of await readdir(dir).catch(() => [])) {
    for (const name of await readdir(join(dir, folder)).catch(() => [])) {
      total += (await stat(join(dir, folder, name)).catch(() => ({ size: 0 }))).size
    }
  }
  return total
}

/**
 * The same, read in one synchronous pass: the cache's own code cannot run
 * during it, so it sees one moment. The async version can add up a file's size
 * read before its removal and another's growth made after it.
 */
function bytesOnDiskNow (dir: string): number {
  let total = 0
  const list = (path: string): string[] => { try { return readdirSync(path) } catch { return [] } }
  for (const folder of list(dir)) {
    for (const name of list(join(dir, folder))) {
      try { total += statSync(join(dir, folder, name)).size } catch {}
    }
  }
  return total
}

async function setup (t: Test, datasets: NumberDatasets, maxBytes?: number) {
  const dir = await tempDir(t)
  const { app } = await buildApp(t, { datasets, renderedFiles: { directory: dir, ...(maxBytes === undefined ? {} : { maxBytes }) } })
  const { id, key } = await createKey(app)
  await assignKeys(app, 'dataset', [id])
  const get = (query: string, headers: Record<string, string> = {}, method: 'GET' | 'HEAD' = 'GET') =>
    app.inject({ method, url: `${DATASET_URL}?${query}`, headers: { authorization: `Bearer ${key}`, ...headers } })
  const calls = async (): Promise<number> => {
    await app.dataEndpoints.flushUsage()
    const endpoints = (await app.inject({ url: '/api-keys/acme/shop/endpoints', headers: ADMIN })).json<Array<{ calls: number }>>()
    return endpoints[0].calls
  }
  return { app, dir, get, calls }
}

t.test('parseRange: one range, several, suffixes, open ends, and what is ignored', async (t) => {
  t.same(parseRange('bytes=0-3', 10), [{ start: 0, end: 3 }])
  t.same(parseRange('bytes=-4', 10), [{ start: 6, end: 9 }])
  t.same(parseRange('bytes=-40', 10), [{ start: 0, end: 9 }])
  t.same(parseRange('bytes=7-', 10), [{ start: 7, end: 9 }])
  t.same(parseRange('bytes=7-100', 10), [{ start: 7, end: 9 }])
  t.same(parseRange('BYTES = 1-2, 4-5', 10), [{ start: 1, end: 2 }, { start: 4, end: 5 }])
  t.same(parseRange('bytes=10-', 10), [], 'past the end: nothing satisfiable (416)')
  t.same(parseRange('bytes=-0', 10), [])
  t.same(parseRange('bytes=10-20, 12-', 10), [])
  for (const ignored of ['items=0-1', 'bytes=', 'bytes=a-b', 'bytes=5-2', 'bytes=1-2-3', 'bytes 0-1', 'bytes=--1']) {
    t.equal(parseRange(ignored, 10), null, ignored)
  }
})

t.test('a revisioned parquet download: HEAD, Range, If-Range, 416, and every range a counted call', async (t) => {
  const datasets = new NumberDatasets()
  const { get, calls } = await setup(t, datasets)
  const full = await get('format=parquet')
  t.equal(full.statusCode, 200)
  const file = full.rawPayload
  const size = file.length
  t.equal(full.headers['content-length'], String(size))
  t.equal(full.headers['accept-ranges'], 'bytes')
  t.equal(full.headers['content-type'], 'application/vnd.apache.parquet')
  t.equal(full.headers['cache-control'], 'private, no-cache')
  const etag = full.headers.etag as string
  t.match(etag, /^"[A-Za-z0-9_-]{27}:parquet::zip::\*\.[A-Za-z0-9_-]{22}"$/, 'a strong ETag: the download\'s, then the hash of the bytes')
  const save = await parquetFolder(t)
  t.same(await duckdbQuery(`SELECT count(*), sum(id) FROM '${await save('full.parquet', file)}'`), [[BigInt(ROWS), BigInt(ROWS * (ROWS - 1) / 2)]])

  const head = await get('format=parquet', {}, 'HEAD')
  t.same([head.statusCode, head.headers['content-length'], head.headers['accept-ranges'], head.headers.etag, head.body],
    [200, String(size), 'bytes', etag, ''], 'HEAD: the length, ranges accepted, no body')
  const headRange = await get('format=parquet', { range: 'bytes=0-3' }, 'HEAD')
  t.same([headRange.statusCode, headRange.headers['content-length']], [200, String(size)], 'HEAD ignores Range')

  const cases: Array<[string, number, number]> = [['bytes=0-3', 0, 3], ['bytes=-8', size - 8, size - 1], ['bytes=10-', 10, size - 1],
    ['bytes=5-5', 5, 5], ['bytes=100-99999999', 100, size - 1]]
  for (const [range, start, end] of cases) {
    const res = await get('format=parquet', { range })
    t.equal(res.statusCode, 206, range)
    t.equal(res.headers['content-range'], `bytes ${start}-${end}/${size}`, range)
    t.equal(res.headers['content-length'], String(end - start + 1), range)
    t.same(res.rawPayload, file.subarray(start, end + 1), range)
  }
  t.equal((await get('format=parquet', { range: 'bytes=0-3' })).body, 'PAR1')

  const past = await get('format=parquet', { range: `bytes=${size}-` })
  t.same([past.statusCode, past.headers['content-range'], past.json()], [416, `bytes */${size}`, { message: `Range not satisfiable: the file has ${size} bytes` }])

  for (const range of ['bytes=0-1,4-5', 'bytes=abc', 'items=0-3', 'bytes=9-2']) {
    const res = await get('format=parquet', { range })
    t.same([res.statusCode, res.rawPayload.length], [200, size], `${range}: the whole file (several ranges, or a Range to ignore)`)
  }

  const matching = await get('format=parquet', { range: 'bytes=0-3', 'if-range': etag })
  t.equal(matching.statusCode, 206, 'If-Range with the file\'s ETag: the range')
  for (const ifRange of [`W/${etag}`, '"other"', new Date().toUTCString()]) {
    const res = await get('format=parquet', { range: 'bytes=0-3', 'if-range': ifRange })
    t.same([res.statusCode, res.rawPayload.length], [200, size], `If-Range ${ifRange}: the whole file`)
  }
  t.equal((await get('format=parquet', { 'if-none-match': etag })).statusCode, 304, 'If-None-Match with the file\'s ETag')
  const weak = (await get('format=json')).headers.etag as string
  t.match(weak, /^W\//, 'other formats keep their weak ETag')

  // A reader that takes the file by pieces gets the same bytes.
  const pieces: Buffer[] = []
  for (let at = 0; at < size; at += 4096) pieces.push((await get('format=parquet', { range: `bytes=${at}-${at + 4095}` })).rawPayload)
  t.same(Buffer.concat(pieces), file, 'the pieces make the file')

  t.equal(datasets.reads, 2, 'rendered once (the other read was the json download)')
  const made = 1 + 1 + 1 + cases.length + 1 + 1 + 4 + 1 + 3 + 1 + 1 + pieces.length
  t.equal(await calls(), made, 'every request, each range included, was a counted call')
})

t.test('arrow too; without a revision, Range is ignored and the download streams', async (t) => {
  const { get } = await setup(t, new NumberDatasets())
  const full = await get('format=arrow')
  t.equal(full.headers['accept-ranges'], 'bytes')
  const size = full.rawPayload.length
  const head = await get('format=arrow', { range: 'bytes=0-7' })
  t.same([head.statusCode, head.headers['content-range']], [206, `bytes 0-7/${size}`])
  const tail = await get('format=arrow', { range: `bytes=8-` })
  t.equal(readArrowStream(Buffer.concat([head.rawPayload, tail.rawPayload])).numRows, ROWS, 'flechette reads the pieces joined')

  const plain = await setup(t, new NumberDatasets(null))
  for (const format of ['parquet', 'arrow']) {
    const res = await plain.get(`format=${format}`, { range: 'bytes=0-3' })
    t.equal(res.statusCode, 200, `${format} without a revision: 200`)
    t.equal(res.headers['accept-ranges'], undefined)
    t.equal(res.headers.etag, undefined)
    t.ok(res.rawPayload.length > 1000, 'the whole download')
    const headOnly = await plain.get(`format=${format}`, {}, 'HEAD')
    t.same([headOnly.statusCode, headOnly.headers['content-length'], headOnly.body], [200, undefined, ''], 'HEAD: no length to tell')
  }
})

t.test('concurrent first requests share one render; renders of several ETags stay within the budget', async (t) => {
  const datasets = new NumberDatasets()
  const probe = await setup(t, datasets)
  const one = await probe.get('format=parquet&limit=10000')
  const fileSize = one.rawPayload.length

  const shared = new NumberDatasets()
  const { get, dir } = await setup(t, shared, Math.floor(fileSize * 2.5))
  const same = await Promise.all(Array.from({ length: 6 }, async () => await get('format=parquet&limit=10000')))
  t.same(same.map((r) => r.statusCode), [200, 200, 200, 200, 200, 200])
  t.ok(same.every((r) => r.rawPayload.equals(same[0].rawPayload)), 'the same bytes for all')
  t.equal(shared.reads, 1, 'one render for six concurrent first requests')

  // Five ETags at once (limits 10000 to 10004, each file about fileSize), in a budget of 2.5 files.
  let most = 0
  let sampling = true
  const sampler = (async () => {
    while (sampling) {
      most = Math.max(most, bytesOnDiskNow(dir))
      await new Promise((resolve) => setTimeout(resolve, 2))
    }
  })()
  const answers = await Promise.all([1, 2, 3, 4, 5].map(async (i) => await get(`format=parquet&limit=${10000 + i}`)))
  sampling = false
  await sampler
  const save = await parquetFolder(t)
  for (const [i, res] of answers.entries()) {
    t.equal(res.statusCode, 200)
    t.same(await duckdbQuery(`SELECT count(*) FROM '${await save(`limit-${i}.parquet`, res.rawPayload)}'`), [[BigInt(10001 + i)]], 'complete, whether rendered or streamed')
  }
  t.ok(answers.some((r) => r.headers['accept-ranges'] === 'bytes'), 'some were rendered')
  t.ok(most <= Math.floor(fileSize * 2.5), `at most the budget on disk (${most} bytes seen)`)
  t.ok(await bytesOnDisk(dir) <= Math.floor(fileSize * 2.5), 'and after')

  const tooLarge = await setup(t, new NumberDatasets(), 1000)
  const streamed = await tooLarge.get('format=parquet')
  t.same([streamed.statusCode, streamed.headers['accept-ranges']], [200, undefined], 'a file larger than the whole budget streams')
  t.equal(await bytesOnDisk(tooLarge.dir), 0, 'and leaves nothing on disk')
})

t.test('close removes the rendered files; a kill -9 leaves them, and the next start removes them', async (t) => {
  const { app, dir, get } = await setup(t, new NumberDatasets())
  await get('format=parquet')
  t.ok(await bytesOnDisk(dir) > 1000, 'a rendered file on disk')
  await app.close()
  t.same(await readdir(dir), [], 'nothing left after close')

  const killDir = await tempDir(t)
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/rendered-files-server.ts'], {
    cwd: ROOT, env: { ...process.env, RENDER_DIR: killDir }, stdio: ['ignore', 'pipe', 'inherit']
  })
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  const line = await new Promise<string>((resolve, reject) => {
    let out = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk
      if (out.includes('\n')) resolve(out.slice(0, out.indexOf('\n')))
    })
    child.once('exit', () => reject(new Error(`exited: ${out}`)))
  })
  const { port, key } = JSON.parse(line) as { port: number, key: string }
  const res = await fetch(`http://127.0.0.1:${port}${DATASET_URL}?format=parquet`, { headers: { authorization: `Bearer ${key}` } })
  t.equal(res.headers.get('accept-ranges'), 'bytes')
  await res.arrayBuffer()
  const [folder] = await readdir(killDir)
  t.match(folder, new RegExp(`^fastify-data-endpoints-spool-${child.pid}-`), 'in a folder named after its process')
  child.kill('SIGKILL')
  await new Promise((resolve) => child.once('exit', resolve))
  t.ok(await bytesOnDisk(killDir) > 1000, 'the killed process left its file behind')
  await buildApp(t, { datasets: new NumberDatasets(), renderedFiles: { directory: killDir } })
  t.same(await readdir(killDir), [], 'the next start removed it')
})
