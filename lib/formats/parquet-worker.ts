import { parentPort } from 'node:worker_threads'
import { encodeRowGroup, type RowGroupJob } from './parquet-row-group.js'

// A worker thread of the Parquet encoders (parquet-encoders.ts): encodes
// the row groups it is sent, one at a time, and sends each back with its
// bytes transferred, not copied.

parentPort?.on('message', (job: RowGroupJob) => {
  let result
  try {
    result = encodeRowGroup(job)
  } catch (err) {
    parentPort?.postMessage({ error: err instanceof Error ? err.message : String(err) })
    return
  }
  parentPort?.postMessage(result, [result.bytes.buffer as ArrayBuffer])
})
