import { spawn } from 'node:child_process'
import t, { type Test } from 'tap'
import { DataEndpointsClient, DataEndpointsError, HttpError, UsageError, type ClientLogEntry } from '../../lib/client/index.js'
import { nextPageUrl } from '../../lib/client/link-header.js'
import { buildApp, createKey } from '../helper.js'
import { sendJson, startServer } from '../client-server.js'

// The client and the CLI list a project's keys and endpoints whole, following
// each page's `Link: <…>; rel="next"` (issue 18), with the management token,
// against the real plugin and against a server that misbehaves on purpose.

const TOKEN = 'management-token-for-tests'
const AUDIT = { actor: 'test' }

/** The plugin on loopback, its management API open to `Bearer TOKEN`, with `keys` keys and an endpoint per 3 of them; `seen`: the URLs asked. */
async function project (t: Test, keys: number): Promise<{ base: string, seen: string[] }> {
  const seen: string[] = []
  const { app, storage } = await buildApp(t, {
    getPermissions: (request) => {
      seen.push(request.url)
      return request.headers.authorization === `Bearer ${TOKEN}` ? ['ManageAPIKeys'] : []
    }
  })
  const ids: string[] = []
  for (let i = 0; i < keys; i++) {
    const prefix = `L${String(i).padStart(4, '0')}abcde`
    ids.push((await storage.createKey({ organization: 'acme', project: 'shop', prefix, hash: 'h', purpose: `client ${i}`, isActive: true, expiresAt: null }, AUDIT)).id)
  }
  for (let r = 1; r <= Math.ceil(keys / 3); r++) {
    await storage.putEndpoint({ organization: 'acme', project: 'shop', modelSequence: 1, type: 'dataset', resourceSequence: r }, ids.slice(3 * (r - 1), 3 * r), AUDIT)
  }
  return { base: await app.listen({ port: 0, host: '127.0.0.1' }), seen }
}

t.test('nextPageUrl reads RFC 8288 Link headers', async (t) => {
  const base = new URL('https://data.example.com/api-keys/acme/shop/keys?limit=2')
  t.equal(nextPageUrl(null, base), null)
  t.equal(nextPageUrl('', base), null)
  t.equal(nextPageUrl('<https://x.example/a?after=1>; rel="next"', base)?.href, 'https://x.example/a?after=1')
  t.equal(nextPageUrl('<https://x.example/p>; rel="prev", <https://x.example/n>; rel="next"', base)?.href, 'https://x.example/n', 'one of several links')
  t.equal(nextPageUrl('<https://x.example/n>; title="a, b"; rel="last next"', base)?.href, undefined, 'a comma inside a quoted parameter ends the link: not misread')
  t.equal(nextPageUrl('<https://x.example/n>;rel=NEXT', base)?.href, 'https://x.example/n', 'unquoted, any case')
  t.equal(nextPageUrl('<https://x.example/n>; rel="first last next"', base)?.href, 'https://x.example/n', 'one of several relation types')
  t.equal(nextPageUrl('<?limit=2&after=abc>; rel="next"', base)?.href, 'https://data.example.com/api-keys/acme/shop/keys?limit=2&after=abc', 'a relative reference')
  t.equal(nextPageUrl('<https://x.example/n>; rel="nextish"', base), null)
})

t.test('listKeys and listEndpoints read every page of the plugin\'s lists, with the token, and search', async (t) => {
  const { base, seen } = await project(t, 23)
  const log: ClientLogEntry[] = []
  const client = new DataEndpointsClient({ baseUrl: base, managementToken: TOKEN, logger: (entry) => log.push(entry) })
  const keys = await client.listKeys('/api-keys/acme/shop', { pageSize: 5 })
  t.equal(keys.length, 23)
  t.same(keys.map((k) => k.purpose).sort(), Array.from({ length: 23 }, (_, i) => `client ${i}`).sort())
  t.equal(new Set(keys.map((k) => k.id)).size, 23, 'each key once')
  t.equal(seen.filter((url) => url.startsWith('/api-keys/acme/shop/keys')).length, 5, 'five pages of 5')
  t.ok(log.every((entry) => entry.keyPrefix === undefined), 'a management call logs no key prefix')
  t.same(await client.listKeys(`${base}/api-keys/acme/shop/`), keys, 'an absolute URL, a trailing slash, pages of 500')

  const found = await client.listKeys('/api-keys/acme/shop', { search: 'CLIENT 1', pageSize: 2 })
  t.same(found.map((k) => k.purpose).sort(), ['client 1', 'client 10', 'client 11', 'client 12', 'client 13', 'client 14', 'client 15', 'client 16', 'client 17', 'client 18', 'client 19'].sort())
  const endpoints = await client.listEndpoints('/api-keys/acme/shop', { pageSize: 3 })
  t.same(endpoints.map((e) => e.resourceSequence), [1, 2, 3, 4, 5, 6, 7, 8])
  const ofKey = await client.listEndpoints('/api-keys/acme/shop', { keyId: keys.find((k) => k.purpose === 'client 4')?.id })
  t.same(ofKey.map((e) => e.path), ['/api/acme/shop/model/1/dataset/2'])
  t.same(await client.listEndpoints('/api-keys/acme/shop', { search: 'dataset/8' }).then((list) => list.map((e) => e.resourceSequence)), [8])

  const refused = new DataEndpointsClient({ baseUrl: base, managementToken: 'wrong' })
  await t.rejects(refused.listKeys('/api-keys/acme/shop'), { name: 'HttpError', status: 403, message: 'Not authorized' })
  await t.rejects(client.listKeys('/api-keys/acme/shop', { pageSize: 501 }), UsageError)
  await t.rejects(client.listKeys('/api-keys/acme/shop', { pageSize: 0 }), UsageError)
  t.throws(() => new DataEndpointsClient({ managementToken: ' ' }), UsageError)
})

t.test('a Link to another origin, or back to a page already read, is not followed; a 500 page is retried', async (t) => {
  let answers: Array<{ status: number, body: unknown, link?: string }> = []
  const server = await startServer(t, (req, res, n) => {
    const answer = answers[n - 1] ?? { status: 500, body: { message: 'no answer planned' } }
    sendJson(res, answer.status, answer.body, answer.link === undefined ? {} : { link: answer.link })
  })
  /** The answers of the next requests, from the first. */
  const plan = (next: typeof answers): void => {
    answers = next
    server.seen.length = 0
  }
  const client = new DataEndpointsClient({ baseUrl: server.base, managementToken: TOKEN, retryDelays: [1, 1] })

  plan([{ status: 200, body: [{ id: 'a' }], link: `<${server.base}/api-keys/acme/shop/keys?limit=1&after=x>; rel="next"` },
    { status: 500, body: { message: 'database unavailable' } }, { status: 200, body: [{ id: 'b' }] }])
  t.same(await client.listKeys('/api-keys/acme/shop', { pageSize: 1 }), [{ id: 'a' }, { id: 'b' }], 'the second page came on a retry')
  t.same(server.seen.map((r) => r.url), ['/api-keys/acme/shop/keys?limit=1', '/api-keys/acme/shop/keys?limit=1&after=x', '/api-keys/acme/shop/keys?limit=1&after=x'])
  t.ok(server.seen.every((r) => r.headers.authorization === `Bearer ${TOKEN}`), 'the token on every page')

  plan([{ status: 200, body: [{ id: 'a' }], link: '<https://elsewhere.example/steal?after=x>; rel="next"' }])
  await t.rejects(client.listKeys('/api-keys/acme/shop'), { name: 'DataEndpointsError', message: /another origin/ })
  t.equal(server.seen.length, 1, 'the token went nowhere else')

  plan([{ status: 200, body: [{ id: 'a' }], link: '<?limit=500&after=1>; rel="next"' }, { status: 200, body: [{ id: 'b' }], link: '<?limit=500&after=1>; rel="next"' }])
  await t.rejects(client.listKeys('/api-keys/acme/shop'), { name: 'DataEndpointsError', message: /one already read/ })
  t.equal(server.seen.length, 2)

  plan([{ status: 200, body: { not: 'a list' } }])
  await t.rejects(client.listKeys('/api-keys/acme/shop'), { name: 'DataEndpointsError', message: 'The server answered with something that is not a list' })
  plan([{ status: 404, body: { message: 'Not Found' } }])
  await t.rejects(client.listEndpoints('/api-keys/acme/shop'), { name: 'HttpError', status: 404 }, 'a 404 is not retried')
  t.equal(server.seen.length, 1)
  t.ok(HttpError.prototype instanceof DataEndpointsError)
})

/** The CLI, run from its source. */
async function cli (args: string[], env: Record<string, string>): Promise<{ code: number | null, stdout: string, stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'lib/cli.ts', ...args], { env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve))
  return { code, stdout, stderr }
}

t.test('the CLI prints every key or endpoint, with --search and --key-id, the token from DATA_ENDPOINTS_MANAGEMENT_TOKEN', async (t) => {
  const { base } = await project(t, 7)
  const env = { DATA_ENDPOINTS_MANAGEMENT_TOKEN: TOKEN }
  const keys = await cli(['keys', `${base}/api-keys/acme/shop`], env)
  t.equal(keys.code, 0, keys.stderr)
  const listed = JSON.parse(keys.stdout) as Array<{ id: string, purpose: string }>
  t.equal(listed.length, 7)
  const searched = await cli(['keys', `${base}/api-keys/acme/shop`, '--search', 'Client 6'], env)
  t.same(JSON.parse(searched.stdout).map((k: { purpose: string }) => k.purpose), ['client 6'])
  const endpoints = await cli(['endpoints', `${base}/api-keys/acme/shop`, '--key-id', listed.find((k) => k.purpose === 'client 6')?.id ?? ''], env)
  t.same(JSON.parse(endpoints.stdout).map((e: { path: string }) => e.path), ['/api/acme/shop/model/1/dataset/3'])
  t.same((await cli(['endpoints', `${base}/api-keys/acme/shop`, '--search', 'dataset/2'], env)).stdout.match(/"path"/g)?.length, 1)

  const noToken = await cli(['keys', `${base}/api-keys/acme/shop`], {})
  t.same([noToken.code, noToken.stderr], [1, 'data-endpoints: Not authorized (HTTP 403)\n'])
  const misplaced = await cli(['keys', `${base}/api-keys/acme/shop`, '--key-id', 'x'], env)
  t.equal(misplaced.code, 2)
  t.match(misplaced.stderr, /--key-id goes with endpoints/)
  const help = await cli(['--help'], {})
  t.match(help.stdout, /keys <project-url>[\s\S]*--search TEXT[\s\S]*DATA_ENDPOINTS_MANAGEMENT_TOKEN/)
})

t.test('a page the API answers alone: a project with more keys than a page', async (t) => {
  // Through the real plugin, the default page size (500) with 501 keys: two pages.
  const { base, seen } = await project(t, 501)
  const client = new DataEndpointsClient({ baseUrl: base, managementToken: TOKEN })
  t.equal((await client.listKeys('/api-keys/acme/shop')).length, 501)
  t.equal(seen.filter((url) => url.includes('/keys?')).length, 2)
  const { app } = await buildApp(t)
  t.ok(await createKey(app), 'the helper still works')
})
