import type pg from 'pg'

/**
 * One connection taken from a pool and kept, for a statement that runs
 * often and one at a time: PostgreSQL mode's key check. Each run then skips
 * the pool's taking and giving back (and the idle timer the pool sets at
 * every giving back), about 1.5 µs of a request's CPU with batches of ten.
 *
 * The caller asks `busy` first and goes through the pool while a statement
 * runs here. A connection whose statement failed, or that broke while idle,
 * is given back to be closed, and the next run takes another. One unused
 * for `idleMs` goes back to the pool: a host that ends its pool without
 * closing the store waits that long at most, and a quiet server holds nothing.
 */
export class HeldConnection {
  #client: Promise<pg.PoolClient> | null = null
  #running: Promise<unknown> | null = null
  #closed = false
  #lastRun = 0
  #idleCheck: ReturnType<typeof setInterval> | undefined
  /** each held connection's error listener, until it is given back (once: the pool refuses a second giving back) */
  readonly #listeners = new Map<pg.PoolClient, (err: Error) => void>()

  /**
   * @param connectError what a failure to take a connection rejects with, from pg's error
   * @param idleMs how long an unused connection is held (checked every `idleMs`, so up to twice that)
   */
  constructor (private readonly pool: pg.Pool, private readonly connectError: (err: unknown) => unknown = (err) => err, private readonly idleMs = 1000) {}

  /** whether a statement runs on the connection now */
  get busy (): boolean {
    return this.#running !== null
  }

  /** Runs `work` on the held connection, taking one first if none is held. Not while `busy`. */
  run<T> (work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    if (this.#closed) return Promise.reject(new Error('HeldConnection: closed'))
    if (this.#running !== null) return Promise.reject(new Error('HeldConnection: busy'))
    const held = this.#client ??= this.#take()
    this.#lastRun = Date.now()
    const running = held.then((client) => work(client).catch((err: unknown) => {
      this.#drop(held, client, err)
      throw err
    }))
    this.#running = running
    const done = (): void => { this.#running = null }
    running.then(done, done)
    return running
  }

  /** Gives the connection back to the pool once its statement (if any) has run. */
  async close (): Promise<void> {
    this.#closed = true
    clearInterval(this.#idleCheck)
    this.#idleCheck = undefined
    const held = this.#client
    this.#client = null
    await this.#running?.catch(() => {})
    const client = await held?.catch(() => null)
    if (client !== null && client !== undefined) this.#release(client)
  }

  #take (): Promise<pg.PoolClient> {
    const held: Promise<pg.PoolClient> = this.pool.connect().then((client) => {
      // Without a listener, a connection that breaks between two statements
      // would crash the process.
      const broken = (err: Error): void => { this.#drop(held, client, err) }
      this.#listeners.set(client, broken)
      client.on('error', broken)
      // One timer for the connection's life, not one a run (unref: it keeps no process alive).
      this.#idleCheck ??= setInterval(() => { this.#giveBackIfIdle() }, this.idleMs).unref()
      return client
    }, (err: unknown) => {
      if (this.#client === held) this.#client = null
      throw this.connectError(err)
    })
    return held
  }

  #giveBackIfIdle (): void {
    const held = this.#client
    if (this.#running !== null || Date.now() - this.#lastRun < this.idleMs) return
    clearInterval(this.#idleCheck)
    this.#idleCheck = undefined
    this.#client = null
    held?.then((client) => { this.#release(client) }, () => {})
  }

  #drop (held: Promise<pg.PoolClient>, client: pg.PoolClient, err: unknown): void {
    if (this.#client === held) this.#client = null
    this.#release(client, err instanceof Error ? err : new Error(String(err)))
  }

  /** Gives a connection back (with an error: to be closed), once. */
  #release (client: pg.PoolClient, err?: Error): void {
    const listener = this.#listeners.get(client)
    if (listener === undefined) return
    this.#listeners.delete(client)
    client.removeListener('error', listener)
    client.release(err)
  }
}
