import type { UsageCount, UsageOutcome } from './storage.js'

// The usage history's buckets (DESIGN.md §4.1): UTC hours, rolled up into
// UTC days. Shared by the recorder, which fills the hours, and the adapters,
// which keep the days beside them.

export const HOUR_MS = 60 * 60 * 1000
export const DAY_MS = 24 * HOUR_MS

/** The start of the UTC hour (or day) that `ms` falls in. */
export function bucketStart (ms: number, size: number): number {
  return ms - (((ms % size) + size) % size)
}

/** The identity of a count within a batch: its hour, endpoint, key and outcome. */
export function countId (hour: number, endpointId: string, keyId: string | null, outcome: UsageOutcome): string {
  return `${hour}\n${endpointId}\n${keyId ?? ''}\n${outcome}`
}

/** Adds `from`'s count and bytes to `into` (the same endpoint, key and outcome). */
export function addCount (into: UsageCount, from: UsageCount): void {
  into.count += from.count
  if (from.bytes !== undefined) into.bytes = (into.bytes ?? 0) + from.bytes
}

/** A batch's hourly counts summed by UTC day (`hour` holds the day's start). */
export function dailyCounts (counts: Iterable<UsageCount>): UsageCount[] {
  const days = new Map<string, UsageCount>()
  for (const c of counts) {
    const day = bucketStart(c.hour, DAY_MS)
    const id = countId(day, c.endpointId, c.keyId, c.outcome)
    const seen = days.get(id)
    if (seen === undefined) days.set(id, { ...c, hour: day })
    else addCount(seen, c)
  }
  return [...days.values()]
}
