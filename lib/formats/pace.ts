// How a download shares the event loop with the rest of the server.
//
// A client reading at loopback speed (or a proxy on the same host) takes
// every write at once, and a row source that is a plain iterable, or an async
// one that only resolves promises, never waits on I/O. Such a download would
// run to its end in one go on microtasks alone, and every other request (and
// every other download) would wait for it. So a download gives the event loop
// a turn after each chunk it hands out (or a chunk's worth of entities that
// each fit in less), and a chunk is cut short once the download has held the
// loop for SLICE_MS: rows that come slowly, or cost much to write, cannot hold
// it longer. Concurrent downloads then take a chunk each per turn of the loop,
// side by side.

/** Text gathered into one chunk, in UTF-16 units (bytes, for ASCII text). */
export const DEFAULT_CHUNK_SIZE = 64 * 1024

/** The longest a download runs before it gives the event loop a turn. */
export const SLICE_MS = 4

/**
 * The most rows written between two reads of the clock. Reading it costs about
 * a tenth of a row here, so fast rows read it only every so many; the first
 * reads in a slice come after 1, 2, 4, ... rows, so that slow rows (a
 * millisecond each, say) overrun the slice by no more than it lasts.
 */
export const ROWS_PER_CLOCK_READ = 16

function nextTurn (): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve))
}

/** One download's pace: its chunk size and its current time slice. */
export class Pace {
  #sliceEnd = performance.now() + SLICE_MS
  #rowsToClockRead = 1
  #clockReadEvery = 1
  #writtenSinceTurn = 0

  constructor (readonly chunkSize: number = DEFAULT_CHUNK_SIZE) {}

  /** Whether the slice is used up (reads the clock). */
  get sliceSpent (): boolean {
    return performance.now() >= this.#sliceEnd
  }

  /** Counts text handed out with no turn after it (an entity's last chunk). */
  wrote (length: number): void {
    this.#writtenSinceTurn += length
  }

  /**
   * Whether to give the loop a turn before the next entity: a chunk's worth
   * of text went out since the last turn (many small entities), or the slice
   * is used up.
   */
  get turnDue (): boolean {
    return this.#writtenSinceTurn >= this.chunkSize || this.sliceSpent
  }

  /** Counts a row written; true once the slice is used up (the clock is read now and then, see ROWS_PER_CLOCK_READ). */
  rowWritten (): boolean {
    if (--this.#rowsToClockRead > 0) return false
    if (this.#clockReadEvery < ROWS_PER_CLOCK_READ) this.#clockReadEvery *= 2
    this.#rowsToClockRead = this.#clockReadEvery
    return this.sliceSpent
  }

  /**
   * Lets the event loop turn (setImmediate: the I/O that is due runs first,
   * and the timers at the next turn), then starts a new slice.
   */
  async turn (): Promise<void> {
    await nextTurn()
    this.#sliceEnd = performance.now() + SLICE_MS
    this.#rowsToClockRead = 1
    this.#clockReadEvery = 1
    this.#writtenSinceTurn = 0
  }
}
