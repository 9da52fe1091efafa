import { ParquetEncoders } from '../../lib/formats/parquet-encoders.js'
import type { ColumnarSettings } from '../../lib/formats/types.js'
import { DEFAULTS } from '../../lib/options.js'

/** Parquet and Arrow settings for a benchmark that calls sendDataset itself, as the plugin's defaults would be. */
export function benchColumnar (): ColumnarSettings {
  return {
    batchBytes: DEFAULTS.columnarBatchBytes,
    encoders: new ParquetEncoders({ threads: DEFAULTS.parquetThreads, maxWaiting: DEFAULTS.parquetMaxWaiting, batchBytes: DEFAULTS.columnarBatchBytes }),
    codec: 'SNAPPY'
  }
}
