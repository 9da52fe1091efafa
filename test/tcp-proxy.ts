import net from 'node:net'

// A TCP proxy for fault tests: it stands between a client (PgStorage) and a
// server (PostgreSQL) and can cut the line, hold the data (a slow database),
// delay one message, or lose the answer to it, then put things back.

interface Pair {
  client: net.Socket
  server: net.Socket
  /** data held while the proxy is slow, per direction */
  toServer: Buffer[]
  toClient: Buffer[]
  /** answers from the server are dropped for good (see loseAnswerTo) */
  muted: boolean
  /** milliseconds by which this client's data, and its hang-up, reach the server (see delayFrom) */
  delay: number
}

export class TcpProxy {
  private readonly pairs = new Set<Pair>()
  private mode: 'open' | 'down' | 'slow' = 'open'
  private loseAfter: Buffer | null = null
  private delayAfter: { marker: Buffer, ms: number } | null = null
  private cutAfterMarker: Buffer | null = null

  private constructor (private readonly server: net.Server, private readonly target: { host: string, port: number }) {
    server.on('connection', (client) => this.accept(client))
  }

  static async start (target: { host: string, port: number }): Promise<TcpProxy> {
    const server = net.createServer()
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    return new TcpProxy(server, target)
  }

  get port (): number {
    return (this.server.address() as net.AddressInfo).port
  }

  /** `url` with its host and port replaced by the proxy's. */
  urlFor (url: string): string {
    const u = new URL(url)
    u.hostname = '127.0.0.1'
    u.port = String(this.port)
    return u.toString()
  }

  /** The database is unreachable: open connections break, new ones are closed at once. */
  cut (): void {
    this.mode = 'down'
    for (const pair of this.pairs) this.drop(pair)
  }

  /** The database answers nothing: connections stay open but no data passes, either way. */
  slow (): void {
    this.mode = 'slow'
  }

  /** Back to normal; data held while slow is delivered. */
  restore (): void {
    this.mode = 'open'
    for (const pair of this.pairs) {
      for (const chunk of pair.toServer.splice(0)) pair.server.write(chunk)
      for (const chunk of pair.toClient.splice(0)) if (!pair.muted) pair.client.write(chunk)
    }
  }

  /**
   * The next time a client sends `marker`, the server gets it but every
   * answer on that connection is lost from then on, as when the network
   * fails right after a request was sent.
   */
  loseAnswerTo (marker: string): void {
    this.loseAfter = Buffer.from(marker)
  }

  /**
   * The next time a client sends `marker`, that message and all that follows
   * on its connection, its hang-up included, reach the server `ms` late.
   */
  delayFrom (marker: string, ms: number): void {
    this.delayAfter = { marker: Buffer.from(marker), ms }
  }

  /**
   * The next time a client sends `marker`, the message goes on (or is
   * delayed or its answer lost, as set above), then the database becomes
   * unreachable, as with cut(), for every other connection and new ones.
   */
  cutAfter (marker: string): void {
    this.cutAfterMarker = Buffer.from(marker)
  }

  get connections (): number {
    return this.pairs.size
  }

  async close (): Promise<void> {
    this.cut()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }

  private accept (client: net.Socket): void {
    if (this.mode === 'down') {
      client.destroy()
      return
    }
    const server = net.connect(this.target.port, this.target.host)
    const pair: Pair = { client, server, toServer: [], toClient: [], muted: false, delay: 0 }
    this.pairs.add(pair)
    client.on('data', (chunk) => {
      if (this.loseAfter !== null && chunk.includes(this.loseAfter)) {
        this.loseAfter = null
        pair.muted = true
      }
      if (this.delayAfter !== null && chunk.includes(this.delayAfter.marker)) {
        pair.delay = this.delayAfter.ms
        this.delayAfter = null
      }
      if (this.cutAfterMarker !== null && chunk.includes(this.cutAfterMarker)) {
        this.cutAfterMarker = null
        this.mode = 'down'
        for (const other of this.pairs) if (other !== pair) this.drop(other)
      }
      if (pair.delay > 0) setTimeout(() => server.write(chunk), pair.delay)
      else if (this.mode === 'slow') pair.toServer.push(chunk)
      else server.write(chunk)
    })
    server.on('data', (chunk) => {
      if (pair.muted) return
      if (this.mode === 'slow') pair.toClient.push(chunk)
      else client.write(chunk)
    })
    const hangUp = (): void => {
      if (pair.delay > 0) setTimeout(() => this.drop(pair), pair.delay)
      else this.drop(pair)
    }
    client.on('error', hangUp)
    client.on('close', hangUp)
    server.on('error', () => this.drop(pair))
    server.on('close', () => this.drop(pair))
  }

  private drop (pair: Pair): void {
    this.pairs.delete(pair)
    pair.client.destroy()
    pair.server.destroy()
  }
}
