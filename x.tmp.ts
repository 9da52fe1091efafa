import { ByteWriter, ParquetWriter } from 'hyparquet-writer'
import { BatchPacker } from './lib/formats/column-batch.js'
import { parquetSchemas } from './lib/formats/parquet.js'
import { EVENTS_COLUMNS } from './test/bench/events-table.js'
const entity = { name: 'events', columns: EVENTS_COLUMNS }
const rows = 100000
const p = new BatchPacker(entity); for (let i = 1; i <= rows; i++) p.push([i, new Date(Date.UTC(2024,0,1) + i * 1500).toISOString(), ['page_view', 'click', 'add_to_cart', 'purchase', 'error'][i % 5], i % 13 === 0 ? null : (i * 0.37) % 1000, i % 10 === 0 ? null : `{"path":"/products/${i % 97}","session":"${(i * 7919).toString(36).padStart(8, '0')}"}`])
const b = p.finish()
const schema = parquetSchemas(entity).encoding
for (const enc of [undefined, 'DELTA_BINARY_PACKED']) {
  const t0 = performance.now()
  const w = new ByteWriter(); const pw = new ParquetWriter({ writer: w, schema })
  const data = [b.columns[0].values, b.columns[1].values, Array.from({length: rows}, (_, i) => (b.columns[2].values as Uint8Array).subarray(b.columns[2].offsets![i], b.columns[2].offsets![i+1])), Array.from({length: rows}, (_, i) => (b.columns[3].validity![i>>3] & (1 << (i&7))) ? (b.columns[3].values as Float64Array)[i] : null), Array.from({length: rows}, (_, i) => (b.columns[4].validity![i>>3] & (1 << (i&7))) ? (b.columns[4].values as Uint8Array).subarray(b.columns[4].offsets![i], b.columns[4].offsets![i+1]) : null)]
  pw.write({ rowGroupSize: rows, columnData: schema.slice(1).map((e, i) => ({ name: e.name, data: data[i] as any, ...(enc && (e.type === 'INT32' || e.type === 'INT64') ? { encoding: enc as any } : {}) })) })
  console.log(enc ?? 'default', w.offset, 'bytes', (performance.now() - t0).toFixed(0), 'ms', pw.row_groups[0].columns.map((c: any) => [c.meta_data.path_in_schema[0], c.meta_data.total_compressed_size, c.meta_data.encodings].join(':')).join(' '))
}
