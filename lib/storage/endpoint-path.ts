import type { EndpointLocator } from '../storage/storage.js'

/** The URI path of the endpoint at `l` (SPEC.md §2.2), relative to the base address. */
export function endpointPath (l: EndpointLocator): string {
  return `/api/${l.organization}/${l.project}/model/${l.modelSequence}/${l.type}/${l.resourceSequence}`
}
