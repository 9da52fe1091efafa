import { hash } from 'node:crypto'
import type { ResourceRef } from '../host/dataset-source.js'

// Conditional GET for datasets that carry a `revision` (issue 10). The ETag
// is weak: the same revision rendered twice gives equivalent data, not
// always the same bytes (a compressed stream, an archive's timestamps), and
// If-None-Match compares weakly anyway (RFC 9110 §13.1.2).

/** What shapes a download's body, besides the dataset's revision. */
export interface BodyShape {
  format: string
  meta: string | undefined
  archiveType: string
  limit: number | undefined
  /** the entities the body holds, in order */
  entities: readonly string[]
  /** the typed columns, filters, since and change bound (consumer-query.ts selectionKey), or null */
  selection?: string | null
}

/** Bump when the way a body is rendered changes, so that old ETags stop matching. */
const RENDERING_VERSION = '1'

export function datasetEtag (ref: ResourceRef, revision: string, shape: BodyShape): string {
  // One-shot: createHash sets up a hashing context per call, which cost a
  // cache miss several times what the hash itself does.
  const digest = hash('sha256', JSON.stringify([
    RENDERING_VERSION, ref.organization, ref.project, ref.modelSequence, ref.resourceSequence, revision,
    shape.format, shape.meta ?? null, shape.archiveType, shape.limit ?? null, shape.entities,
    ...(shape.selection == null ? [] : [shape.selection])
  ]), 'base64url')
  return `W/"${digest.slice(0, 27)}"`
}

/**
 * Whether an `If-None-Match` header names `etag`, by weak comparison, or is
 * `*`. A rendered file's strong ETag (rendered-files.ts) is the download's
 * opaque tag with `.<hash of the bytes>` before its closing quote: it names
 * the same download.
 */
export function ifNoneMatchHits (header: string | string[] | undefined, etag: string): boolean {
  if (header === undefined) return false
  const opaque = etag.replace(/^W\//, '')
  const fileTagStart = opaque.slice(0, -1) + '.'
  for (const list of Array.isArray(header) ? header : [header]) {
    for (const item of list.split(',')) {
      const tag = item.trim().replace(/^W\//, '')
      if (tag === '*' || tag === opaque || tag.startsWith(fileTagStart)) return true
    }
  }
  return false
}
