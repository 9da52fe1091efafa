import type { Entity, Row } from '../host/dataset-source.js'
import { BatchPacker, type PackedBatch } from './column-batch.js'
import { AsyncGeneratorPrototype, isAsyncGenerator, isSyncIterable, rowsOptions } from './rows.js'
import type { DownloadSpec } from './types.js'

// One entity's rows in packed batches of about `batchBytes` bytes of values:
// Parquet's row groups, Arrow's record batches. Rows are read as entityChunks
// (rows.ts) reads them: a plain iterable with no await per row, at most
// `limit` rows even if the source ignores it, the source's iterator returned
// when the reader stops early, and the event loop given a turn whenever the
// download has held it for a slice (pace.ts). The next batch is read only
// when the previous one has been taken, so a download holds one batch.

/**
 * The batch being packed. A full one is handed out through take(), so that
 * no variable of the generator holds it while the generator waits for the
 * next call (V8 can keep what such a variable held, see handOut in rows.ts).
 */
class BatchInProgress {
  private packer: BatchPacker

  constructor (private readonly entity: Entity, private readonly reuse: boolean) {
    this.packer = new BatchPacker(entity)
  }

  // A batch taken and not yet refilled counts as empty.
  get rows (): number { return this.refill ? 0 : this.packer.rows }
  get bytes (): number { return this.refill ? 0 : this.packer.bytes }

  /**
   * The batch, full or last. With `reuse`, its buffers are refilled by the
   * next batch once the reader asks for it; else the next has buffers of
   * its own (sized as this one), and this one's are the reader's.
   */
  take (): PackedBatch {
    const batch = this.packer.finish()
    if (this.reuse) this.refill = true
    else this.packer = new BatchPacker(this.entity, this.packer.sizeHint)
    return batch
  }

  /** Whether the next row goes into the buffers of the batch taken last (see take). */
  private refill = false

  push (row: Row): void {
    if (this.refill) {
      this.refill = false
      this.packer.reset()
    }
    this.packer.push(row)
  }
}

/**
 * `reuse`: the reader is done with a batch when it asks for the next (it
 * copied it), so every batch is packed into the same buffers: no garbage of
 * several MiB per batch for the GC to find (Parquet). Without it, the
 * reader may keep each batch's buffers (Arrow hands them to the response).
 */
export async function * entityBatches (spec: DownloadSpec, entity: Entity, batchBytes: number, reuse = false): AsyncGenerator<PackedBatch> {
  const { limit, abort, pace } = spec
  if (pace.turnDue) await pace.turn()
  if (limit === 0) return
  const packer = new BatchInProgress(entity, reuse)
  let n = 0
  const rows = spec.dataset.rows(entity.name, rowsOptions(spec, limit))
  const generator = isAsyncGenerator(rows)
  let exhausted = false
  if (!generator && isSyncIterable(rows)) {
    const iterator = rows[Symbol.iterator]()
    try {
      for (;;) {
        const next = iterator.next()
        if (next.done === true) { exhausted = true; break }
        packer.push(next.value)
        if (++n === limit) break
        if (packer.bytes >= batchBytes) {
          yield packer.take()
          await pace.turn()
        } else if (pace.rowWritten()) {
          await pace.turn()
        } else continue
        if (abort.aborted) break
      }
    } finally {
      if (!exhausted) iterator.return?.()
    }
  } else {
    const iterator = generator ? rows : (rows as AsyncIterable<Row>)[Symbol.asyncIterator]()
    const next = generator ? AsyncGeneratorPrototype.next : iterator.next
    try {
      for (;;) {
        const step = await next.call(iterator)
        if (step.done === true) { exhausted = true; break }
        packer.push(step.value)
        if (++n === limit) break
        if (packer.bytes >= batchBytes) {
          yield packer.take()
          await pace.turn()
        } else if (pace.rowWritten()) {
          await pace.turn()
        }
        if (abort.aborted) break
      }
    } finally {
      if (!exhausted) await (generator ? AsyncGeneratorPrototype.return.call(iterator, undefined) : iterator.return?.())
    }
  }
  // A source that stopped because the client left must not end like a whole file.
  if (abort.aborted) throw new Error('Download aborted')
  if (packer.rows > 0) yield packer.take()
}
