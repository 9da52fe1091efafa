import { hash } from 'node:crypto'
import type { Dataset, Entity, ResourceRef } from '../host/dataset-source.js'

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
  /** the entities the body holds, in order: the dataset's own, or projections of one (with a selection) */
  entities: readonly Entity[]
  /** the typed columns, filters, since and change bound (consumer-query.ts selectionKey), or null */
  selection?: string | null
}

/** Bump when the way a body is rendered changes, so that old ETags stop matching. */
const RENDERING_VERSION = '1'

/** A dataset revision's tag, and what it was made of. */
interface RevisionTag {
  ref: ResourceRef
  revision: string
  names: readonly string[]
  /** SHA-256 of the reference, revision and entity names: 27 base64url characters */
  tag: string
}

// Per Dataset object, the tag of the revision it last had: a host that hands
// out the same object on each request (as it should) pays the digest once
// per revision.
const revisionTags = new WeakMap<Dataset, RevisionTag>()

function digest (text: string): string {
  // One-shot: createHash sets up a hashing context per call, which cost a
  // cache miss several times what the hash itself does.
  return hash('sha256', text, 'base64url').slice(0, 27)
}

function sameRef (a: ResourceRef, b: ResourceRef): boolean {
  return a.organization === b.organization && a.project === b.project &&
    a.modelSequence === b.modelSequence && a.resourceSequence === b.resourceSequence
}

function sameNames (names: readonly string[], dataset: Dataset): boolean {
  const { entities } = dataset
  if (names.length !== entities.length) return false
  for (let i = 0; i < names.length; i++) if (names[i] !== entities[i].name) return false
  return true
}

/** The digest of the dataset's reference, revision and entity names, made once per revision. */
function revisionTag (ref: ResourceRef, dataset: Dataset, revision: string): RevisionTag {
  let known = revisionTags.get(dataset)
  if (known === undefined || known.revision !== revision || !sameRef(known.ref, ref) || !sameNames(known.names, dataset)) {
    const names = dataset.entities.map((e) => e.name)
    const { organization, project, modelSequence, resourceSequence } = ref
    known = {
      ref: { organization, project, modelSequence, resourceSequence },
      revision,
      names,
      tag: digest(JSON.stringify([RENDERING_VERSION, organization, project, modelSequence, resourceSequence, revision, names]))
    }
    revisionTags.set(dataset, known)
  }
  return known
}

/**
 * The body's entities as the tag writes them: `*` for all of the dataset's,
 * in order, else the one's place among them; undefined for any other choice.
 * Told by the entities themselves: their names are the revision tag's.
 */
function entitiesCode (dataset: Dataset, entities: readonly Entity[]): string | undefined {
  const all = dataset.entities
  if (entities.length === all.length) {
    let same = true
    for (let i = 0; i < all.length && same; i++) same = entities[i] === all[i]
    if (same) return '*'
  }
  if (entities.length !== 1) return undefined
  const at = all.indexOf(entities[0])
  return at < 0 ? undefined : String(at)
}

/**
 * A download's ETag. A plain download (no columns, filters nor since) is
 * tagged with its revision's digest and its shape in clear: format, meta,
 * archive type, limit and entities, each from a fixed set or digits, joined
 * by `:`, which none of them holds. So a request whose `limit` is new each
 * time (every request a cache miss) costs no digest of its own. Any other
 * shape is digested with the revision's tag; its tag holds no `:`, so the
 * two kinds never meet. No tag holds a `.`: a rendered file's strong ETag
 * adds one (ifNoneMatchHits).
 */
export function datasetEtag (ref: ResourceRef, dataset: Dataset, revision: string, shape: BodyShape): string {
  const known = revisionTag(ref, dataset, revision)
  const entities = shape.selection == null ? entitiesCode(dataset, shape.entities) : undefined
  if (entities !== undefined) {
    return `W/"${known.tag}:${shape.format}:${shape.meta ?? ''}:${shape.archiveType}:${shape.limit ?? ''}:${entities}"`
  }
  const names = shape.entities.map((e) => e.name)
  return `W/"${digest(JSON.stringify([known.tag, shape.format, shape.meta ?? null, shape.archiveType, shape.limit ?? null, names, shape.selection ?? null]))}"`
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
