import type { UsageColumns, UsageRow, UsageSeriesName } from './storage.js'

/** Empty columns with room for `capacity` rows. */
export function usageColumns (capacity: number): UsageColumns {
  return {
    length: 0,
    series: [],
    starts: new Float64Array(capacity),
    seriesOf: new Uint32Array(capacity),
    counts: new Float64Array(capacity),
    bytes: new Float64Array(capacity)
  }
}

/** Rows as columns (for a store that answers rows only); each series named once. */
export function usageColumnsOf (rows: readonly UsageRow[]): UsageColumns {
  const columns = usageColumns(rows.length)
  // endpoint id -> key id ('' for none: ids are never empty) -> outcome -> series index
  const index = new Map<string, Map<string, Map<string, number>>>()
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]
    let byKey = index.get(row.endpointId)
    if (byKey === undefined) index.set(row.endpointId, byKey = new Map())
    let byOutcome = byKey.get(row.keyId ?? '')
    if (byOutcome === undefined) byKey.set(row.keyId ?? '', byOutcome = new Map())
    let s = byOutcome.get(row.outcome)
    if (s === undefined) {
      s = columns.series.push({ endpointId: row.endpointId, keyId: row.keyId, outcome: row.outcome }) - 1
      byOutcome.set(row.outcome, s)
    }
    columns.starts[i] = row.start.getTime()
    columns.seriesOf[i] = s
    columns.counts[i] = row.count
    columns.bytes[i] = row.bytes ?? 0
  }
  columns.length = rows.length
  return columns
}

/** Columns as rows (what `queryUsage` answers); rows of one start share one Date. */
export function usageRowsOf (columns: UsageColumns): UsageRow[] {
  const rows: UsageRow[] = []
  let start = new Date(NaN)
  for (let i = 0; i < columns.length; i++) {
    if (start.getTime() !== columns.starts[i]) start = new Date(columns.starts[i])
    const { endpointId, keyId, outcome }: UsageSeriesName = columns.series[columns.seriesOf[i]]
    rows.push({ start, endpointId, keyId, outcome, count: columns.counts[i], bytes: columns.bytes[i] })
  }
  return rows
}
