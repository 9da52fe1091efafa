/** What became of a usage write whose outcome was not known. */
export type UsageFate = 'written' | 'not written' | 'unknowable'

/**
 * Thrown by `Storage.applyUsage` when the batch may or may not have been
 * written: the answer to its COMMIT was lost, and the database could not be
 * asked what became of it. Writing the batch again could count it twice, so
 * the usage recorder keeps it aside and calls `fate()` before it writes
 * anything else. `fate()` rejects while the outcome cannot be known yet; only
 * 'not written' lets the batch be written again.
 */
export class UsageInDoubtError extends Error {
  constructor (message: string, readonly fate: () => Promise<UsageFate>) {
    super(message)
  }
}
