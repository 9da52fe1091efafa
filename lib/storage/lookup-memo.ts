import type { EndpointKeyLookup, EndpointLocator } from './storage.js'

/** findEndpointKey answers remembered at most; a project's keys times its endpoints in use is the working set. */
const MEMO_SIZE = 4096
/** answers remembered for one prefix (a key on many endpoints): a lookup compares its locator with each */
const MEMO_PER_PREFIX = 32

/** A remembered findEndpointKey answer, with the locator it answered. */
interface RememberedLookup extends EndpointLocator {
  found: EndpointKeyLookup | null
}

/**
 * Recent findEndpointKey answers, by prefix and locator. It holds no key:
 * only prefixes and stored rows. Whether they still hold is the store's
 * to say (each store clears the memo when its data may have changed).
 */
export class LookupMemo {
  readonly #byPrefix = new Map<string, RememberedLookup[]>()
  #size = 0

  /** The remembered answer (null: no such endpoint), or undefined when none is. */
  get (locator: EndpointLocator, prefix: string | null): EndpointKeyLookup | null | undefined {
    const l = locator
    // By prefix ('' for none), then the locator compared part by part: a
    // key made of the six parts cost a string, its flattening and its hash
    // on every request (about 3,000 instructions of the 5,400 here).
    const remembered = this.#byPrefix.get(prefix ?? '')
    if (remembered === undefined) return undefined
    for (let i = 0; i < remembered.length; i++) {
      const r = remembered[i]
      if (r.resourceSequence === l.resourceSequence && r.modelSequence === l.modelSequence && r.type === l.type &&
        r.project === l.project && r.organization === l.organization) return r.found
    }
    return undefined
  }

  /** Remembers an answer; the caller has looked it up and found none remembered. */
  set (l: EndpointLocator, prefix: string | null, found: EndpointKeyLookup | null): void {
    if (this.#size >= MEMO_SIZE) this.clear()
    const memoKey = prefix ?? ''
    let remembered = this.#byPrefix.get(memoKey)
    if (remembered === undefined) this.#byPrefix.set(memoKey, remembered = [])
    // A prefix's oldest answer makes room for its newest.
    if (remembered.length >= MEMO_PER_PREFIX) remembered.shift()
    else this.#size++
    // The locator's parts copied: the answer must not depend on the caller leaving its object alone.
    remembered.push({ organization: l.organization, project: l.project, modelSequence: l.modelSequence, type: l.type, resourceSequence: l.resourceSequence, found })
  }

  clear (): void {
    this.#byPrefix.clear()
    this.#size = 0
  }
}
