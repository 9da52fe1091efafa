/**
 * Lookups that arrive together, answered by one query: PostgreSQL mode's key
 * check (findEndpointKey) costs a round trip per request, and under load the
 * round trips, not the server's work, were most of a request's time.
 *
 * A lookup made while no batch is in flight goes at the end of this turn of
 * the event loop (setImmediate), with the others made in the same turn: the
 * requests read from the sockets in one poll go together, and a quiet server
 * waits no longer than the rest of its turn. Lookups made while one is in
 * flight wait for it to end, and go together at the end of the turn it ends
 * in, with those the same turn's requests make. A batch holds up to
 * `maxBatch`; one that fills up goes at once, so no more than
 * `maxBatch - 1` lookups ever wait here (the pool's own wait bounds the
 * rest). Sending at the end of the turn rather than at once made batches a
 * third larger under load and took 6% off PostgreSQL mode's CPU a request
 * (docs/benchmarks.md).
 *
 * Revocation stays "on the next request": a lookup joins a batch whose query
 * is sent after the lookup was made, so it reads whatever had committed then.
 */
export class LookupBatch<Q, R> {
  #waiting: Array<{ item: Q, resolve: (r: R) => void, reject: (err: unknown) => void }> = []
  #inFlight = 0
  /** whether a send waits for the end of this turn */
  #sendScheduled = false

  /**
   * @param run answers `items` in their order, with as many answers; a
   *   rejection rejects the lookups of that batch only
   */
  constructor (private readonly run: (items: Q[]) => Promise<R[]>, readonly maxBatch = 64) {
    if (!Number.isInteger(maxBatch) || maxBatch < 1) throw new TypeError('LookupBatch: maxBatch must be a positive integer')
  }

  lookup (item: Q): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.#waiting.push({ item, resolve, reject })
      if (this.#waiting.length >= this.maxBatch) this.#send()
      else if (this.#inFlight === 0) this.#schedule()
    })
  }

  /** Lookups waiting for a batch (for tests and metrics). */
  get waiting (): number {
    return this.#waiting.length
  }

  #send (): void {
    const batch = this.#waiting.splice(0, this.maxBatch)
    if (batch.length === 0) return
    this.#inFlight++
    let answered: Promise<R[]>
    try {
      answered = this.run(batch.map((w) => w.item))
    } catch (err) {
      answered = Promise.reject(err)
    }
    answered.then((answers) => {
      if (answers.length !== batch.length) throw new Error(`LookupBatch: ${answers.length} answers to ${batch.length} lookups`)
      batch.forEach((w, i) => w.resolve(answers[i]))
    }).catch((err: unknown) => {
      for (const w of batch) w.reject(err)
    }).finally(() => {
      this.#inFlight--
      if (this.#inFlight === 0 && this.#waiting.length > 0) this.#schedule()
    })
  }

  /** Sends what waits at the end of this turn, unless a batch is in flight then (its end schedules the next). */
  #schedule (): void {
    if (this.#sendScheduled) return
    this.#sendScheduled = true
    setImmediate(() => {
      this.#sendScheduled = false
      if (this.#inFlight === 0) this.#send()
    })
  }
}
