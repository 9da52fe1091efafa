import t from 'tap'
import type { Dataset, ResourceRef } from '../../lib/index.js'
import { datasetEtag } from '../../lib/downloads/dataset-etag.js'
import { RenderedBodies } from '../../lib/downloads/rendered-bodies.js'

// The rendered-body cache keeps a body the second time its ETag is rendered.
// Datasets polled the same way have tags that end alike (the shape in
// clear): interleaved, each must still be kept, not push the other out of
// the table of bodies rendered once.

const ref = (resourceSequence: number): ResourceRef => ({ organization: 'acme', project: 'shop', modelSequence: 1, resourceSequence })
const dataset: Dataset = { name: 'd', revision: 'r1', entities: [{ name: 'rows', columns: [{ name: 'id', type: 'integer' }] }], rows: () => [] }
const plainJson = { format: 'json', meta: undefined, archiveType: 'zip', limit: undefined, entities: dataset.entities, selection: null }

t.test('datasets polled alike, interleaved: each body is kept from its second rendering', async (t) => {
  const bodies = new RenderedBodies(1024 * 1024)
  const tags = Array.from({ length: 32 }, (_, i) => datasetEtag(ref(i + 1), dataset, 'r1', plainJson))
  t.equal(new Set(tags.map((tag) => tag.slice(-12))).size, 1, 'the tags end alike')
  for (let round = 0; round < 2; round++) {
    for (const tag of tags) bodies.rendered(tag, { body: tag, contentType: 'application/json', fileName: 'd.json' })
  }
  const kept = tags.filter((tag) => bodies.get(tag)?.body === tag).length
  // 32 tags in 4,096 slots: a shared slot is possible, rare; all but two kept.
  t.ok(kept >= tags.length - 2, `${kept} of ${tags.length} kept`)
})
