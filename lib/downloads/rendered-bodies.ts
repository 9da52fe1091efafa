import { LRUCache } from 'lru-cache'

/** A small download as it was sent, kept under its ETag. */
export interface RenderedBody {
  body: string | Buffer
  contentType: string
  fileName: string
}

/**
 * Small rendered downloads (those within one chunk) by ETag, bounded by
 * their total bytes. A dataset polled by many clients is read and rendered
 * once per revision instead of once per request.
 */
export class RenderedBodies {
  readonly #cache: LRUCache<string, RenderedBody>

  constructor (maxBytes: number) {
    this.#cache = new LRUCache<string, RenderedBody>({
      maxSize: maxBytes,
      sizeCalculation: (entry) => Math.max(1, typeof entry.body === 'string' ? Buffer.byteLength(entry.body) : entry.body.byteLength)
    })
  }

  get (etag: string): RenderedBody | undefined {
    return this.#cache.get(etag)
  }

  set (etag: string, entry: RenderedBody): void {
    this.#cache.set(etag, entry)
  }
}
