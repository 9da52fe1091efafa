export interface ComparisonQueueOptions {
  /** comparisons running at once */
  maxRunning: number
  /** comparisons waiting, all keys together */
  maxWaiting: number
  /** comparisons waiting for one key */
  maxWaitingPerKey: number
}

/**
 * Slots for bcrypt comparisons, shared fairly between keys. At most
 * `maxRunning` run at once; the others wait in one line per key, and a freed
 * slot goes to the next line in turn (round-robin), so a key's first
 * comparison waits for about one comparison per key waiting, not for
 * everything queued before it. A flood of guesses at one key fills only that
 * key's line: `maxWaitingPerKey` places of `maxWaiting`.
 */
export class ComparisonQueue {
  // Insertion order is the turn order: a line that is served and still has
  // comparisons waiting is put back at the end.
  private readonly lines = new Map<string, Array<() => void>>()
  private runningCount = 0
  private waitingCount = 0

  constructor (private readonly options: ComparisonQueueOptions) {}

  /** comparisons running now */
  get running (): number {
    return this.runningCount
  }

  /** comparisons waiting for a slot now, all keys together */
  get waiting (): number {
    return this.waitingCount
  }

  /**
   * A slot for a comparison for `key`: resolves when it is this comparison's
   * turn, after which the caller must call `release` once. Null when `key`'s
   * line or the whole queue is full.
   */
  acquire (key: string): Promise<void> | null {
    // A free slot means nobody waits: release hands slots over.
    if (this.runningCount < this.options.maxRunning) {
      this.runningCount++
      return Promise.resolve()
    }
    const line = this.lines.get(key)
    if (this.waitingCount >= this.options.maxWaiting || (line?.length ?? 0) >= this.options.maxWaitingPerKey) return null
    this.waitingCount++
    return new Promise((resolve) => {
      if (line === undefined) this.lines.set(key, [resolve])
      else line.push(resolve)
    })
  }

  /** Ends a comparison: its slot goes to the next line in turn, or is freed. */
  release (): void {
    for (const [key, line] of this.lines) {
      const next = line.shift() as () => void
      this.lines.delete(key)
      if (line.length > 0) this.lines.set(key, line)
      this.waitingCount--
      // The slot is handed over, so `running` stays counted.
      next()
      return
    }
    this.runningCount--
  }
}
