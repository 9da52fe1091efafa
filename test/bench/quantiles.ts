// Medians and percentiles of the benches' timings, by one definition for all.
// A percentile is the nearest rank's: the smallest time that `p` per cent of
// the runs took at most: the p95 of 20 runs is the 19th of them sorted
// fastest first, and only the p100 is the slowest. (Until 2026-11-28 the
// usage and management benches took the element at floor(n * p), which for 20
// runs is the slowest of all; the figures recorded before say so.)

function sorted (values: readonly number[]): number[] {
  if (values.length === 0) throw new Error('no values')
  return [...values].sort((a, b) => a - b)
}

/** The nearest-rank percentile `p` (0 < p ≤ 100) of `values`. */
export function percentile (values: readonly number[], p: number): number {
  const s = sorted(values)
  return s[Math.min(s.length, Math.max(1, Math.ceil(s.length * p / 100))) - 1]
}

/** The median: the middle value, or the mean of the two middle values. */
export function median (values: readonly number[]): number {
  const s = sorted(values)
  const middle = s.length >> 1
  return s.length % 2 === 1 ? s[middle] : (s[middle - 1] + s[middle]) / 2
}
