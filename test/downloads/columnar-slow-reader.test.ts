import { request as httpRequest, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import type { Dataset, DatasetSource, Row } from '../../lib/index.js'
import { FORMATS } from '../../lib/formats/index.js'
import { specOf } from '../format-fixtures.js'
import { duckdbQuery, parquetFolder, readArrowStream } from '../columnar-readers.js'
import { DATASET_URL, assignKeys, buildApp, createKey } from '../helper.js'

// A client that stops reading holds at most one row group (Parquet) or
// record batch (Arrow): the next is read from the source only when the
// response asks for more, that is when the socket has drained.

const TOTAL = 200_000

/** Text that does not compress, so that the socket's buffers hold only a part of the download. */
function noise (seed: number): string {
  let x = seed * 2654435761 >>> 0
  let out = ''
  for (let i = 0; i < 12; i++) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0
    out += x.toString(36).padStart(7, '0')
  }
  return out
}

/** Rows of about equal size (an int and about 94 characters), counted as they are handed out. */
class CountingDatasets implements DatasetSource {
  pulled = 0
  async getDataset (): Promise<Dataset> {
    const self = this
    return {
      name: 'counted',
      entities: [{ name: 'counted', columns: [{ name: 'id', type: 'integer', nullable: false }, { name: 'text', type: 'text', nullable: false }] }],
      * rows (): Generator<Row> {
        for (let i = 0; i < TOTAL; i++) {
          self.pulled++
          yield [i, noise(i + 1)]
        }
      }
    }
  }
}

t.test('the formats read a row group or batch only when the last one was taken', async (t) => {
  for (const format of ['parquet', 'arrow'] as const) {
    const datasets = new CountingDatasets()
    const dataset = await datasets.getDataset()
    const body = FORMATS[format](specOf(dataset, { batchBytes: 64 * 1024 })).body[Symbol.asyncIterator]()
    await body.next() // the magic, or the schema
    t.equal(datasets.pulled, 0, `${format}: nothing read before the first batch is asked for`)
    await body.next()
    const perBatch = datasets.pulled
    t.ok(perBatch > 0 && perBatch < TOTAL, `${format}: one batch read (${perBatch} rows)`)
    await sleep(200)
    t.equal(datasets.pulled, perBatch, `${format}: nothing more while the reader waits`)
    // Arrow hands a batch out in a few pieces; the next batch comes after them.
    let steps = 0
    while (datasets.pulled === perBatch && steps++ < 10) await body.next()
    t.ok(datasets.pulled > perBatch && datasets.pulled <= 2 * perBatch + 1, `${format}: the next batch once the last was taken`)
    await body.return?.(undefined)
  }
})

t.test('a client that stops reading: the source stops, and the download ends whole once it reads again', async (t) => {
  const save = await parquetFolder(t)
  for (const format of ['parquet', 'arrow']) {
    const datasets = new CountingDatasets()
    const { app } = await buildApp(t, { datasets, columnarBatchBytes: 64 * 1024 })
    const { id, key } = await createKey(app)
    await assignKeys(app, 'dataset', [id])
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as AddressInfo

    const req = httpRequest({ port, path: `${DATASET_URL}?api_key=${key}&format=${format}` })
    req.end()
    const res = await new Promise<IncomingMessage>((resolve) => req.once('response', resolve))
    t.equal(res.statusCode, 200)
    res.pause()
    // Until the source has read nothing more for half a second.
    let last = -1
    while (datasets.pulled !== last) {
      last = datasets.pulled
      await sleep(500)
    }
    t.ok(datasets.pulled < TOTAL, `${format}: the source stopped at ${datasets.pulled} of ${TOTAL} rows while the client did not read`)

    const chunks: Buffer[] = []
    res.on('data', (c: Buffer) => chunks.push(c))
    const ended = new Promise((resolve) => res.once('end', resolve))
    res.resume()
    await ended
    t.equal(datasets.pulled, TOTAL, `${format}: read to the end once the client read again`)
    const body = Buffer.concat(chunks)
    if (format === 'parquet') {
      t.same(await duckdbQuery(`SELECT count(*), count(DISTINCT id) FROM '${await save('slow.parquet', body)}'`), [[BigInt(TOTAL), BigInt(TOTAL)]])
    } else {
      t.equal(readArrowStream(body).numRows, TOTAL)
    }
  }
})
