import { LRUCache } from 'lru-cache'

/** A small download as it was sent, kept under its ETag. */
export interface RenderedBody {
  body: string | Buffer
  contentType: string
  fileName: string
}

/** ETags remembered as rendered once (a power of two): a body is kept when one of them is rendered again. */
const RENDERED_ONCE_SLOTS = 4096

/**
 * Small rendered downloads (those within one chunk) by ETag, bounded by
 * their total bytes. A dataset polled by many clients is read and rendered
 * twice per revision instead of once per request.
 *
 * A body is kept the second time it is rendered, not the first: downloads
 * asked for once (each with its own `limit` or `since`) would otherwise push
 * out the ones asked for again and again, and keeping each cost a request
 * about a tenth of its time (the entry, and the collector's work on a full
 * cache). What was rendered once is one ETag in a fixed table, by a hash of
 * the ETag; two that share a slot push each other out, which costs at most
 * another rendering.
 */
export class RenderedBodies {
  readonly #cache: LRUCache<string, RenderedBody>
  readonly #renderedOnce: Array<string | undefined> = new Array(RENDERED_ONCE_SLOTS).fill(undefined)

  constructor (maxBytes: number) {
    this.#cache = new LRUCache<string, RenderedBody>({
      maxSize: maxBytes,
      sizeCalculation: (entry) => Math.max(1, typeof entry.body === 'string' ? Buffer.byteLength(entry.body) : entry.body.byteLength)
    })
  }

  get (etag: string): RenderedBody | undefined {
    return this.#cache.get(etag)
  }

  /** A body just rendered: kept if its ETag was rendered once before, else noted as rendered once. */
  rendered (etag: string, entry: RenderedBody): void {
    const slot = slotOf(etag)
    if (this.#renderedOnce[slot] !== etag) {
      this.#renderedOnce[slot] = etag
      return
    }
    this.#renderedOnce[slot] = undefined
    this.#cache.set(etag, entry)
  }
}

/**
 * The ETag's slot: a hash of the whole tag. A plain download's tag ends in
 * its shape, the same for every dataset polled the same way; its start is the
 * revision's digest (dataset-etag.ts).
 */
function slotOf (etag: string): number {
  let h = 0
  for (let i = 0; i < etag.length; i++) h = Math.imul(h, 31) + etag.charCodeAt(i)
  return h & (RENDERED_ONCE_SLOTS - 1)
}
