import bcrypt from 'bcrypt'

/** Hashes keys for storage and compares a supplied key with a stored hash. */
export interface KeyHasher {
  hash (value: string): Promise<string>
  compare (value: string, hash: string): Promise<boolean>
}

/** The default hasher: bcrypt at `cost` rounds, run on libuv's thread pool. */
export function bcryptHasher (cost: number): KeyHasher {
  return {
    hash: (value) => bcrypt.hash(value, cost),
    compare: (value, hash) => bcrypt.compare(value, hash)
  }
}
