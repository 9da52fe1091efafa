import { Writable } from 'node:stream'
import type { InjectOptions } from 'fastify'
import t from 'tap'
import { ADMIN, assignKeys, buildApp, createKey, DATASET_URL, PIPELINE_URL } from '../helper.js'

// No whole key reaches a log line at any level (DESIGN.md §2), and data-route
// lines carry what SPEC.md §7.4 asks: URL, status, message, time, key prefix.

function captureLogs (): { stream: Writable, lines: string[] } {
  const lines: string[] = []
  const stream = new Writable({
    write (chunk, _encoding, done) {
      lines.push(...String(chunk).split('\n').filter(Boolean))
      done()
    }
  })
  return { stream, lines }
}

t.test('no key in any log line at trace level, whatever the request', async (t) => {
  const { stream, lines } = captureLogs()
  const { app, datasets } = await buildApp(t, {}, { logger: { level: 'trace', stream } })
  const k = await createKey(app)
  const disabled = await createKey(app, 'disabled', false)
  await assignKeys(app, 'dataset', [k.id, disabled.id])
  await assignKeys(app, 'pipeline', [k.id])
  const secrets = [k.key, disabled.key]

  const requests: InjectOptions[] = [
    { url: `${DATASET_URL}?format=json&api_key=${k.key}` },
    { url: `${DATASET_URL}?api_key=${k.key}&format=xml` },
    { url: DATASET_URL, headers: { authorization: `Bearer ${k.key}` }, query: { format: 'json' } },
    { url: `${DATASET_URL}?api_key=${disabled.key}` },
    { url: `${DATASET_URL}?api_key=${k.key.slice(0, 11)}${'q'.repeat(21)}` },
    { method: 'POST', url: `${DATASET_URL}?api_key=${k.key}` },
    { method: 'POST', url: `${PIPELINE_URL}?api_key=${k.key}`, headers: { 'idempotency-key': 'x' } },
    { url: `/api/acme/shop/model/1/table/1?api_key=${k.key}` },
    { url: `/api/acme/shop?api_key=${k.key}` },
    { url: `/api/job/${k.key}` },
    { url: `/api/acme/shop/model/1/dataset/2?api_key=${k.key}` },
    { url: `${DATASET_URL}?API_KEY=${k.key}&api_key=${k.key}` },
    { method: 'POST', url: `/api-keys/acme/shop/keys/${k.id}/regenerate?api_key=${k.key}` },
    { url: `/api-keys/acme/shop/keys?api_key=${k.key}`, headers: ADMIN }
  ]
  for (const request of requests) await app.inject(request)

  // A host failure whose message carries the key.
  datasets.getDataset = async () => { throw new Error(`backend rejected ${k.key}`) }
  const failed = await app.inject({ url: DATASET_URL, headers: { authorization: `Bearer ${k.key}` } })
  t.equal(failed.statusCode, 500)

  t.ok(lines.length > requests.length, `${lines.length} log lines captured`)
  for (const secret of secrets) {
    const body = secret.slice(11)
    const leaks = lines.filter((line) => line.includes(body))
    t.same(leaks, [], `the secret of ${secret.slice(0, 10)} is in no log line`)
  }
  t.ok(lines.some((line) => line.includes('api_key=[redacted]')), 'URLs are logged with api_key redacted')
})

t.test('data-route lines carry URL, status, message, time and key prefix', async (t) => {
  const { stream, lines } = captureLogs()
  const { app } = await buildApp(t, {}, { logger: { level: 'info', stream } })
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  await app.inject({ url: `${DATASET_URL}?format=json&api_key=${k.key}` })
  await app.inject({ url: `${DATASET_URL}?api_key=${k.key.slice(0, 11)}${'z'.repeat(21)}` })

  const calls = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'data endpoint call')
  t.equal(calls.length, 2)
  t.match(calls[0], {
    url: '/api/acme/shop/model/1/dataset/1?format=json&api_key=[redacted]', statusCode: 200, keyPrefix: k.prefix, time: Number
  })
  t.match(calls[1], { statusCode: 403, message: 'Unknown API key', keyPrefix: k.prefix })
})
