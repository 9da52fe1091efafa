import t from 'tap'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, PIPELINE_URL } from '../helper.js'

// Every management route of DESIGN.md §4, with its 400, 403 and 404 answers.

const P = '/api-keys/acme/shop'
const KEY_FIELDS = ['createdAt', 'expiresAt', 'id', 'isActive', 'limits', 'prefix', 'purpose', 'updatedAt']

t.test('every route needs ManageAPIKeys, refused before the body is read', async (t) => {
  const { app } = await buildApp(t)
  const routes: Array<[string, string]> = [
    ['GET', `${P}/keys`], ['POST', `${P}/keys`], ['PATCH', `${P}/keys/x`], ['DELETE', `${P}/keys/x`],
    ['POST', `${P}/keys/x/regenerate`], ['GET', `${P}/endpoints`], ['PUT', `${P}/endpoints/1/dataset/1`],
    ['DELETE', `${P}/endpoints/1/dataset/1`]
  ]
  for (const [method, url] of routes) {
    for (const headers of [{}, { 'x-permissions': 'ReadData,manageapikeys' }]) {
      const res = await app.inject({
        method: method as 'GET', url, headers: { ...headers, 'content-type': 'application/json' }, payload: '{not json'
      })
      t.equal(res.statusCode, 403, `${method} ${url} ${JSON.stringify(headers)}`)
      t.same(res.json(), { message: 'Not authorized' })
    }
  }
})

t.test('getPermissions may be async and its failure is a 500', async (t) => {
  const { app } = await buildApp(t, {
    getPermissions: async (request) => {
      if (request.headers['x-fail'] !== undefined) throw new Error('directory unavailable')
      return new Set(['ManageAPIKeys'])
    }
  })
  t.equal((await app.inject(`${P}/keys`)).statusCode, 200)
  const failed = await app.inject({ url: `${P}/keys`, headers: { 'x-fail': '1' } })
  t.same([failed.statusCode, failed.json()], [500, { message: 'directory unavailable' }])
})

t.test('create a key: 201, the value shown once, never again', async (t) => {
  const { app } = await buildApp(t)
  const res = await app.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: 'nightly ETL' } })
  t.equal(res.statusCode, 201)
  t.equal(res.headers['cache-control'], 'no-store')
  const created = res.json()
  t.same(Object.keys(created).sort(), [...KEY_FIELDS, 'key'].sort())
  t.match(created, { purpose: 'nightly ETL', isActive: true, updatedAt: null })
  t.match(created.key, /^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/)
  t.equal(created.prefix, created.key.slice(0, 10))

  const list = await app.inject({ url: `${P}/keys`, headers: ADMIN })
  t.equal(list.statusCode, 200)
  t.same(list.json().map((k: { id: string }) => k.id), [created.id])
  t.same(Object.keys(list.json()[0]).sort(), KEY_FIELDS)
  t.notMatch(list.body, created.key.slice(11), 'the secret is not listed')
  const patched = await app.inject({ method: 'PATCH', url: `${P}/keys/${created.id}`, headers: ADMIN, payload: { purpose: 'renamed' } })
  t.notMatch(patched.body, created.key.slice(11))
  t.equal(patched.json().key, undefined)
})

t.test('create a key inactive; 400 for bad bodies', async (t) => {
  const { app } = await buildApp(t)
  const inactive = await app.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: 'later', isActive: false } })
  t.equal(inactive.json().isActive, false)

  const bad: Array<[unknown, RegExp]> = [
    [{}, /purpose/],
    [{ purpose: '' }, /purpose/],
    [{ purpose: 'x'.repeat(201) }, /purpose/],
    [{ purpose: 42 }, /purpose/],
    [{ purpose: 'ok', isActive: 'yes' }, /isActive/],
    [{ purpose: 'ok', owner: 'me' }, /unknown field "owner"/],
    [[], /body/],
    ['"text"', /body/]
  ]
  for (const [payload, message] of bad) {
    const res = await app.inject({
      method: 'POST', url: `${P}/keys`, headers: { ...ADMIN, 'content-type': 'application/json' }, payload: JSON.stringify(payload)
    })
    t.equal(res.statusCode, 400, JSON.stringify(payload))
    t.match(res.json(), { message }, JSON.stringify(payload))
    t.same(Object.keys(res.json()), ['message'])
  }
  const broken = await app.inject({ method: 'POST', url: `${P}/keys`, headers: { ...ADMIN, 'content-type': 'application/json' }, payload: '{"purpose":' })
  t.equal(broken.statusCode, 400)
  t.type(broken.json().message, 'string')
  const polluting = await app.inject({
    method: 'POST', url: `${P}/keys`, headers: { ...ADMIN, 'content-type': 'application/json' }, payload: '{"purpose":"p","__proto__":{"isAdmin":true}}'
  })
  t.equal(polluting.statusCode, 400)
  t.equal(({} as Record<string, unknown>).isAdmin, undefined)
  const keys = await app.inject({ url: `${P}/keys`, headers: ADMIN })
  t.equal(keys.json().length, 1, 'no bad body created a key')
})

t.test('400 for malformed organization or project monikers', async (t) => {
  const { app } = await buildApp(t)
  const res = await app.inject({ url: '/api-keys/acme/sh%20op/keys', headers: ADMIN })
  t.equal(res.statusCode, 400)
  t.match(res.json().message, /project/)
})

t.test('PATCH edits purpose and active flag; 404 for unknown or foreign keys', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  const res = await app.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { purpose: 'new', isActive: false } })
  t.equal(res.statusCode, 200)
  t.match(res.json(), { id: k.id, purpose: 'new', isActive: false, prefix: k.prefix })
  const empty = await app.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: {} })
  t.match(empty.json(), { purpose: 'new', isActive: false }, 'an empty patch changes nothing')

  const missing = await app.inject({ method: 'PATCH', url: `${P}/keys/nope`, headers: ADMIN, payload: { purpose: 'x' } })
  t.same([missing.statusCode, missing.json()], [404, { message: 'API key not found' }])
  const foreign = await app.inject({ method: 'PATCH', url: `/api-keys/acme/other/keys/${k.id}`, headers: ADMIN, payload: { purpose: 'x' } })
  t.same([foreign.statusCode, foreign.json()], [404, { message: 'API key not found' }], 'a key is bound to its project')
  const bad = await app.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { isActive: 1 } })
  t.equal(bad.statusCode, 400)
})

t.test('DELETE a key: 204, endpoints stay without it; 404 after', async (t) => {
  const { app } = await buildApp(t)
  const a = await createKey(app, 'a')
  const b = await createKey(app, 'b')
  await assignKeys(app, 'dataset', [a.id, b.id])
  const res = await app.inject({ method: 'DELETE', url: `${P}/keys/${a.id}`, headers: ADMIN })
  t.equal(res.statusCode, 204)
  t.equal(res.body, '')
  const endpoints = (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json()
  t.equal(endpoints.length, 1, 'the endpoint stays')
  t.same(endpoints[0].keys.map((k: { id: string }) => k.id), [b.id], 'minus the deleted key')
  const again = await app.inject({ method: 'DELETE', url: `${P}/keys/${a.id}`, headers: ADMIN })
  t.same([again.statusCode, again.json()], [404, { message: 'API key not found' }])
})

t.test('regenerate: a new value once, assignments stay, the old value stops', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  t.equal((await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })).statusCode, 200)
  const res = await app.inject({ method: 'POST', url: `${P}/keys/${k.id}/regenerate`, headers: ADMIN })
  t.equal(res.statusCode, 200)
  const renewed = res.json()
  t.equal(renewed.id, k.id)
  t.not(renewed.key, k.key)
  t.match(renewed.key, /^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/)
  t.equal(renewed.prefix, renewed.key.slice(0, 10))
  const old = await app.inject({ url: DATASET_URL, query: { api_key: k.key, format: 'json' } })
  t.same([old.statusCode, old.json()], [403, { message: 'Unknown API key' }])
  t.equal((await app.inject({ url: DATASET_URL, query: { api_key: renewed.key, format: 'json' } })).statusCode, 200)
  const missing = await app.inject({ method: 'POST', url: `${P}/keys/nope/regenerate`, headers: ADMIN })
  t.same([missing.statusCode, missing.json()], [404, { message: 'API key not found' }])
})

t.test('PUT an endpoint: 201 created, 200 replaced, URI unchanged', async (t) => {
  const { app } = await buildApp(t)
  const a = await createKey(app, 'a')
  const b = await createKey(app, 'b')
  const created = await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN, payload: { keyIds: [a.id] } })
  t.equal(created.statusCode, 201)
  const endpoint = created.json()
  t.same(Object.keys(endpoint).sort(), ['calls', 'createdAt', 'id', 'keys', 'method', 'modelSequence', 'organization', 'path', 'project', 'resourceName', 'resourceSequence', 'type'])
  t.match(endpoint, {
    path: '/api/acme/shop/model/1/dataset/1', method: 'GET', type: 'dataset', organization: 'acme', project: 'shop',
    modelSequence: 1, resourceSequence: 1, resourceName: 'sales', calls: 0, keys: [{ id: a.id, prefix: a.prefix, purpose: 'a', isActive: true }]
  })
  const replaced = await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN, payload: { keyIds: [b.id, a.id, b.id] } })
  t.equal(replaced.statusCode, 200)
  t.equal(replaced.json().id, endpoint.id)
  t.equal(replaced.json().path, endpoint.path)
  t.same(replaced.json().keys.map((k: { id: string }) => k.id).sort(), [a.id, b.id].sort())

  const pipeline = await app.inject({ method: 'PUT', url: `${P}/endpoints/1/pipeline/1`, headers: ADMIN, payload: { keyIds: [a.id] } })
  t.match(pipeline.json(), { method: 'POST', type: 'pipeline', path: '/api/acme/shop/model/1/pipeline/1' })
})

t.test('PUT with no keyIds assigns the project\'s only key, else 400', async (t) => {
  const { app } = await buildApp(t)
  const none = await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN })
  t.equal(none.statusCode, 400)
  t.match(none.json().message, /keyIds/)
  const only = await createKey(app, 'only')
  const auto = await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN, payload: { keyIds: [] } })
  t.equal(auto.statusCode, 201)
  t.same(auto.json().keys.map((k: { id: string }) => k.id), [only.id])
  await createKey(app, 'second')
  const ambiguous = await app.inject({ method: 'PUT', url: `${P}/endpoints/1/pipeline/1`, headers: ADMIN, payload: {} })
  t.equal(ambiguous.statusCode, 400)
  t.match(ambiguous.json().message, /keyIds/)
})

t.test('PUT refuses keys of another project, unknown keys and bad paths without writing', async (t) => {
  const { app } = await buildApp(t)
  const mine = await createKey(app, 'mine')
  const theirs = await app.inject({ method: 'POST', url: '/api-keys/acme/other/keys', headers: ADMIN, payload: { purpose: 'theirs' } })
  const foreign = await app.inject({
    method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN, payload: { keyIds: [mine.id, theirs.json().id] }
  })
  t.equal(foreign.statusCode, 400)
  t.match(foreign.json().message, theirs.json().id)
  const unknown = await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN, payload: { keyIds: ['nope'] } })
  t.equal(unknown.statusCode, 400)
  t.same((await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json(), [], 'no endpoint was created')

  for (const path of ['0/dataset/1', '1/table/1', '1/dataset/x', '1/dataset/1.5']) {
    const res = await app.inject({ method: 'PUT', url: `${P}/endpoints/${path}`, headers: ADMIN, payload: { keyIds: [mine.id] } })
    t.equal(res.statusCode, 400, path)
  }
  const wrongType = await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN, payload: { keyIds: mine.id } })
  t.equal(wrongType.statusCode, 400, 'keyIds must be an array')
})

t.test('PUT for a resource the host does not have: 404', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  const dataset = await app.inject({ method: 'PUT', url: `${P}/endpoints/1/dataset/9`, headers: ADMIN, payload: { keyIds: [k.id] } })
  t.same([dataset.statusCode, dataset.json()], [404, { message: 'Dataset not found' }])
  const pipeline = await app.inject({ method: 'PUT', url: `${P}/endpoints/1/pipeline/9`, headers: ADMIN, payload: { keyIds: [k.id] } })
  t.same([pipeline.statusCode, pipeline.json()], [404, { message: 'Pipeline not found' }])
})

t.test('DELETE an endpoint: 204, keys stay, API access gone; 404 after', async (t) => {
  const { app, datasets } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  const res = await app.inject({ method: 'DELETE', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN })
  t.equal(res.statusCode, 204)
  const data = await app.inject({ url: DATASET_URL, query: { api_key: k.key } })
  t.same([data.statusCode, data.json()], [403, { message: 'Unknown API Endpoint' }])
  t.equal((await app.inject({ url: `${P}/keys`, headers: ADMIN })).json().length, 1, 'the key stays')
  t.equal(datasets.datasets.size, 1, 'the dataset stays')
  const again = await app.inject({ method: 'DELETE', url: `${P}/endpoints/1/dataset/1`, headers: ADMIN })
  t.same([again.statusCode, again.json()], [404, { message: 'Endpoint not found' }])
})

t.test('endpoints and keys are listed per project', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  await assignKeys(app, 'pipeline', [k.id])
  const list = (await app.inject({ url: `${P}/endpoints`, headers: ADMIN })).json()
  t.same(list.map((e: { path: string }) => e.path), ['/api/acme/shop/model/1/dataset/1', '/api/acme/shop/model/1/pipeline/1'])
  t.same((await app.inject({ url: '/api-keys/acme/other/endpoints', headers: ADMIN })).json(), [])
  t.same((await app.inject({ url: '/api-keys/acme/other/keys', headers: ADMIN })).json(), [])
  t.ok(PIPELINE_URL)
})

t.test('managementPrefix moves the routes', async (t) => {
  const { app } = await buildApp(t, { managementPrefix: '/admin/keys' })
  t.equal((await app.inject({ url: '/admin/keys/acme/shop/keys', headers: ADMIN })).statusCode, 200)
  t.equal((await app.inject({ url: '/api-keys/acme/shop/keys', headers: ADMIN })).statusCode, 404)
})

t.test('a cross-site form post cannot reach a handler: only JSON bodies are read', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
    const res = await app.inject({ method: 'POST', url: `${P}/keys/${k.id}/regenerate`, headers: { ...ADMIN, 'content-type': type }, payload: '' })
    t.equal(res.statusCode, 415, type)
    t.type(res.json().message, 'string')
  }
  const plain = await app.inject({ method: 'POST', url: `${P}/keys`, headers: { ...ADMIN, 'content-type': 'text/plain' }, payload: '{"purpose":"csrf"}' })
  t.equal(plain.statusCode, 415)
  const keys = (await app.inject({ url: `${P}/keys`, headers: ADMIN })).json()
  t.same(keys.map((x: { prefix: string }) => x.prefix), [k.prefix], 'nothing created, nothing regenerated')
  const ok = await app.inject({ method: 'POST', url: `${P}/keys/${k.id}/regenerate`, headers: ADMIN })
  t.equal(ok.statusCode, 200, 'a body-less POST without content type still works')
})

t.test('a purpose that is only spaces or holds a control character: 400 naming purpose, on create and edit', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app, 'kept')
  const refusal = 'must have a non-space character and no control characters'
  for (const purpose of ['   ', '\u3000', 'a\u0000b', 'line\nbreak', 'tab\there', 'del\u007f', ' \u001f ']) {
    const created = await app.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose } })
    t.same([created.statusCode, created.json()], [400, { message: `body.purpose: ${refusal}` }], JSON.stringify(purpose))
    const edited = await app.inject({ method: 'PATCH', url: `${P}/keys/${k.id}`, headers: ADMIN, payload: { purpose } })
    t.same([edited.statusCode, edited.json()], [400, { message: `body.purpose: ${refusal}` }], JSON.stringify(purpose))
  }
  const keys = (await app.inject({ url: `${P}/keys`, headers: ADMIN })).json()
  t.same(keys.map((x: { purpose: string }) => x.purpose), ['kept'], 'nothing created or changed')

  // Spaces around text are the caller's; the limit counts code points.
  for (const purpose of [' padded ', 'Bäckerei 中文', '😀'.repeat(200)]) {
    const res = await app.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose } })
    t.same([res.statusCode, res.json().purpose], [201, purpose], JSON.stringify(purpose).slice(0, 20))
  }
  const long = await app.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: '😀'.repeat(201) } })
  t.same([long.statusCode, long.json()], [400, { message: 'body.purpose: must not have more than 200 characters' }])
})

t.test('the purpose check stays linear on a body near the size limit', async (t) => {
  const { app } = await buildApp(t)
  const started = Date.now()
  // A pattern that backtracks would take minutes on this (errors are listed past maxLength).
  const res = await app.inject({ method: 'POST', url: `${P}/keys`, headers: ADMIN, payload: { purpose: 'x '.repeat(500_000) + '\u0000' } })
  t.equal(res.statusCode, 400)
  t.match(res.json().message, /^body\.purpose: /)
  t.ok(Date.now() - started < 5000, `answered in ${Date.now() - started} ms`)
})

t.test('a bad sequence in a path: 400 saying what a sequence is, never the pattern', async (t) => {
  const { app } = await buildApp(t)
  const k = await createKey(app)
  const message = (name: string): string =>
    `params.${name}: must be a positive integer (1 to 9007199254740991, no sign, exponent or leading zero)`
  for (const bad of ['01', '1.0', '1e3', '0', '-1', '+1', ' 1', '99999999999999999999', '9007199254740992']) {
    const b = encodeURIComponent(bad)
    for (const [name, path] of [['modelSequence', `${b}/dataset/1`], ['resourceSequence', `1/pipeline/${b}`]]) {
      const put = await app.inject({ method: 'PUT', url: `${P}/endpoints/${path}`, headers: ADMIN, payload: { keyIds: [k.id] } })
      t.same([put.statusCode, put.json()], [400, { message: message(name) }], `PUT ${path}`)
      const del = await app.inject({ method: 'DELETE', url: `${P}/endpoints/${path}`, headers: ADMIN })
      t.same([del.statusCode, del.json()], [400, { message: message(name) }], `DELETE ${path}`)
    }
  }
  const largest = await app.inject({ method: 'PUT', url: `${P}/endpoints/9007199254740991/dataset/1`, headers: ADMIN, payload: { keyIds: [k.id] } })
  t.same([largest.statusCode, largest.json()], [404, { message: 'Dataset not found' }], 'the largest sequence passes validation')
  const moniker = await app.inject({ url: '/api-keys/acme/sh%20op/keys', headers: ADMIN })
  t.same(moniker.json(), { message: 'params.project: must be 1 to 100 letters, digits or ._~-, starting with a letter or digit' })
})
