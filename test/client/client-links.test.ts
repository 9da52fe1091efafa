import { spawn } from 'node:child_process'
import t, { type Test } from 'tap'
import { DataEndpointsClient, HttpError, UsageError } from '../../lib/client/index.js'
import { parseCsv } from '../format-readers.js'
import { DATASET_URL, assignKeys, buildApp, createKey } from '../helper.js'

// Minting links with the client and with `data-endpoints link`, against the
// plugin: the URL printed downloads the data with no key.

async function plugin (t: Test): Promise<{ base: string, key: string }> {
  const { app } = await buildApp(t, { maxLinkLifetime: 24 * 3600_000 })
  const { id, key } = await createKey(app)
  await assignKeys(app, 'dataset', [id])
  return { base: await app.listen({ port: 0, host: '127.0.0.1' }), key }
}

async function cli (args: string[], key: string): Promise<{ code: number | null, stdout: string, stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'lib/cli.ts', ...args], {
    env: { PATH: process.env.PATH, DATA_ENDPOINTS_API_KEY: key },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve))
  return { code, stdout, stderr }
}

t.test('client.createLink mints a link whose URL downloads without the key', async (t) => {
  const { base, key } = await plugin(t)
  const client = new DataEndpointsClient({ apiKey: key, baseUrl: base })
  const before = Date.now()
  const link = await client.createLink(DATASET_URL, { format: 'csv', entity: 'customers' }, { expiresIn: 7200 })
  t.match(link.url, /\/api\/links\/[^/]+\/customers\.csv$/)
  t.ok(Date.parse(link.expiresAt) >= before + 7_200_000 - 1000)
  const res = await fetch(link.url)
  t.equal(res.status, 200)
  t.equal(res.headers.get('referrer-policy'), 'no-referrer')
  t.equal(parseCsv(await res.text()).length, 4)
  await t.rejects(client.createLink(DATASET_URL, { format: 'csv' }), HttpError, 'the server\'s 400 (csv needs an entity)')
  await t.rejects(client.createLink(DATASET_URL, {}, { expiresIn: 0 }), UsageError)
})

t.test('data-endpoints link … --expires 2h prints the URL', async (t) => {
  const { base, key } = await plugin(t)
  const run = await cli(['link', `${base}${DATASET_URL}`, '--format', 'json', '--expires', '2h'], key)
  t.equal(run.code, 0, run.stderr)
  const url = run.stdout.trim()
  t.match(url, /^http:\/\/127\.0\.0\.1:\d+\/api\/links\/[^/]+\/sales\.json$/)
  t.notMatch(run.stdout + run.stderr, key.slice(11), 'no key in the output')
  const res = await fetch(url)
  t.same(Object.keys(await res.json() as object), ['customers', 'orders'])

  const json = await cli(['link', `${base}${DATASET_URL}`, '--format', 'csv', '--entity', 'orders', '--json'], key)
  const minted = JSON.parse(json.stdout) as { id: string, url: string, expiresAt: string }
  t.match(minted.url, /\/orders\.csv$/)
  t.ok(Date.parse(minted.expiresAt) - Date.now() <= 3600_000, 'an hour by default')

  const bad = await cli(['link', `${base}${DATASET_URL}`, '--expires', 'soon'], key)
  t.equal(bad.code, 2)
  t.match(bad.stderr, /--expires must be a duration such as 90s, 30m, 2h or 7d/)
  const tooLong = await cli(['link', `${base}${DATASET_URL}`, '--expires', '2d'], key)
  t.equal(tooLong.code, 1)
  t.match(tooLong.stderr, /Invalid expiresIn: at most 86400 seconds \(maxLinkLifetime\) \(HTTP 400\)/)
})
