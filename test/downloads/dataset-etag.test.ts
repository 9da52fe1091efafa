import fc from 'fast-check'
import t from 'tap'
import type { Dataset, Entity, ResourceRef } from '../../lib/index.js'
import { datasetEtag, ifNoneMatchHits, type BodyShape } from '../../lib/downloads/dataset-etag.js'
import { ARCHIVE_TYPES, FORMAT_NAMES } from '../../lib/formats/types.js'

// The ETag of a download (issue 10): one per revision and shape of the body,
// never the same for two, and within the header's grammar. A plain shape
// carries the revision's digest, made once per Dataset object, and the shape in clear.

const REF: ResourceRef = { organization: 'acme', project: 'shop', modelSequence: 1, resourceSequence: 1 }

function datasetOf (names: readonly string[], revision = 'r1'): Dataset {
  return { name: 'sales', revision, entities: names.map((name) => ({ name, columns: [{ name: 'id', type: 'integer' }] })), rows: () => [] }
}

/** The tag of a shape whose entities are named: the dataset's own entities by those names (all by default), as parseDownloadQuery chooses them. */
const tag = (dataset: Dataset, { entities, ...shape }: Partial<Omit<BodyShape, 'entities'>> & { entities?: readonly string[] } = {}, ref = REF): string =>
  datasetEtag(ref, dataset, dataset.revision as string, {
    format: 'json',
    meta: undefined,
    archiveType: 'zip',
    limit: undefined,
    entities: entities === undefined ? dataset.entities : entities.map((name) => dataset.entities.find((e) => e.name === name) as Entity),
    selection: null,
    ...shape
  })

// What an entity-tag may hold (RFC 9110 §8.8.3: etagc), less the comma that
// separates If-None-Match's list and the point a rendered file's tag adds.
const ETAG = /^W\/"[\x21\x23-\x2b\x2d\x2f-\x7e]+"$/

t.test('distinct shapes of one revision get distinct tags; each matches itself and no other, in either form', async (t) => {
  const names = ['customers', 'or:ders', 'p"r,o.d']
  const dataset = datasetOf(names)
  const shape = fc.record({
    format: fc.constantFrom(...FORMAT_NAMES),
    meta: fc.constantFrom(undefined, 'entities', 'ddl'),
    archiveType: fc.constantFrom(...ARCHIVE_TYPES),
    limit: fc.option(fc.nat(), { nil: undefined }),
    entities: fc.oneof(
      fc.constant(names),
      fc.constantFrom(...names).map((n) => [n]),
      fc.shuffledSubarray(names, { minLength: 2, maxLength: 2 })
    ),
    selection: fc.option(fc.constantFrom('[["id"],null,null,null]', '[null,[["id","=",1]],null,null]', '[null,null,1,2]'), { nil: null })
  })
  fc.assert(fc.property(shape, shape, (a, b) => {
    const [x, y] = [tag(dataset, a), tag(dataset, b)]
    if (!ETAG.test(x)) throw new Error(`${x}: not an entity-tag`)
    const same = JSON.stringify(a) === JSON.stringify(b)
    if ((x === y) !== same) throw new Error(`${JSON.stringify(a)} and ${JSON.stringify(b)}: ${x}, ${y}`)
    const fileTag = y.slice(2, -1) + '.abc"'
    if (ifNoneMatchHits(y, x) !== same || ifNoneMatchHits(fileTag, x) !== same) throw new Error(`${x} against ${y}`)
  }), { numRuns: 2000 })
  t.equal(tag(dataset, { limit: 5 }), tag(dataset, { limit: 5 }), 'the same shape twice: the same tag')
  t.notMatch(tag(dataset, { selection: '[["id"],null,null,null]' }), /:/, 'a selection is digested: no shape in clear')
  t.match(tag(dataset, { limit: 1000001 }), /:json::zip:1000001:\*"$/, 'a plain shape in clear: format, meta, archive type, limit, all entities')
  t.match(tag(dataset, { entities: ['or:ders'] }), /:json::zip::1"$/, 'one entity by its place')
})

t.test('the revision digest follows the revision, the endpoint and the entity names, on the same object or a new one', async (t) => {
  const dataset = datasetOf(['customers', 'orders'])
  const first = tag(dataset)
  t.equal(tag({ ...dataset }), first, 'a copy of the dataset (a host that makes one per request): the same tag')
  t.not(tag(dataset, {}, { ...REF, resourceSequence: 2 }), first, 'the same object under another endpoint: another tag')
  t.not(tag(dataset, {}, { ...REF, organization: 'other' }), first, 'another organization')
  t.equal(tag(dataset), first, 'and back')
  dataset.revision = 'r2'
  const second = tag(dataset)
  t.not(second, first, 'the revision changed on the same object: a new tag')
  ;(dataset.entities as unknown as Array<{ name: string }>)[1].name = 'orders_2024'
  t.not(tag(dataset), second, 'an entity renamed in place under the same revision: a new tag')
  t.not(tag(datasetOf(['orders', 'customers'])), first, 'the same entities in another order')
  t.not(tag(datasetOf(['customers', 'orders'], 'r1:json::zip::*')), first, 'a revision that looks like a shape')
})
