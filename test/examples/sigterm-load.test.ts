import { randomUUID } from 'node:crypto'
import http from 'node:http'
import { join } from 'node:path'
import t from 'tap'
import { SqliteStorage } from '../../lib/index.js'
import { startServer, tempDir } from '../example-process.js'

// SIGTERM while the example server is under load (issue 6): every request
// answered 200 is counted, and nothing else is. 20 clients call two datasets
// and a pipeline in a loop; the process gets SIGTERM half-way and must exit 0;
// then its SQLite file is reopened and each endpoint's `calls` compared with
// the 200s the clients received.
//
// Why equality holds: the key hook counts a call in memory when its key is
// verified. Fastify's close stops accepting connections, answers requests
// that arrive on open keep-alive connections with 503 before any hook runs,
// and waits for the requests already running to finish, their responses
// included; only then do the onClose hooks flush the counters and close the
// storage. So a counted request is always answered in full (200 here), and a
// request that was not answered (503, refused or reset connection) was never
// counted. A client whose 200 body breaks off would be counted without a 200:
// the test checks that this never happens.

const ENDPOINTS = {
  sales: { type: 'dataset', resource: 1, method: 'GET', path: '/api/acme/shop/model/1/dataset/1?meta=entities' },
  events: { type: 'dataset', resource: 2, method: 'GET', path: '/api/acme/shop/model/1/dataset/2?format=json' },
  refresh: { type: 'pipeline', resource: 1, method: 'POST', path: '/api/acme/shop/model/1/pipeline/1' }
} as const
type Name = keyof typeof ENDPOINTS
const NAMES = Object.keys(ENDPOINTS) as Name[]

interface Outcome { name: Name, status: number | 'error', error?: string, endedAt: number }

t.test('SIGTERM under load: exit 0, and calls equal the 200s the clients received', async (t) => {
  const dataDir = tempDir(t)
  const adminToken = `admin-${randomUUID()}`
  const server = await startServer(t, { DATA_DIR: dataDir, ADMIN_TOKEN: adminToken, EVENTS_ROWS: '2000', LOG_LEVEL: 'warn' })
  const key = server.demoKey as string
  t.match(key, /^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/, 'the demo key was printed')

  // The demo key serves dataset 1 and pipeline 1; give it dataset 2 (2000 events, a longer answer) too.
  const admin = { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' }
  const [demo] = await (await fetch(`${server.baseUrl}/api-keys/acme/shop/keys`, { headers: { authorization: admin.authorization } })).json() as Array<{ id: string }>
  const assigned = await fetch(`${server.baseUrl}/api-keys/acme/shop/endpoints/1/dataset/2`, { method: 'PUT', headers: admin, body: JSON.stringify({ keyIds: [demo.id] }) })
  t.equal(assigned.status, 201)

  let exited = false
  const outcomes: Outcome[] = []
  const client = async (n: number): Promise<void> => {
    for (let i = n; !exited; i++) {
      const name = NAMES[i % NAMES.length]
      const { method, path } = ENDPOINTS[name]
      try {
        const res = await fetch(`${server.baseUrl}${path}`, { method, headers: { authorization: `Bearer ${key}` }, signal: AbortSignal.timeout(30_000) })
        // A 200 counts only once its whole body has arrived.
        await res.arrayBuffer()
        outcomes.push({ name, status: res.status, endedAt: Date.now() })
      } catch (err) {
        outcomes.push({ name, status: 'error', error: String((err as Error).cause ?? err), endedAt: Date.now() })
        await new Promise((resolve) => setTimeout(resolve, 5))
      }
    }
  }
  const clients = Array.from({ length: 20 }, async (_, n) => client(n))

  // Load until every endpoint has been served a good number of times.
  const served = (): number => outcomes.filter((o) => o.status === 200).length
  const deadline = Date.now() + 60_000
  while ((served() < 300 || NAMES.some((name) => !outcomes.some((o) => o.name === name && o.status === 200))) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  const signalledAt = Date.now()
  const { code, stderr } = await server.stop('SIGTERM')
  exited = true
  await Promise.all(clients)

  t.equal(code, 0, 'SIGTERM under load exits 0')
  t.equal(stderr, '', 'nothing on stderr')
  const answered = outcomes.filter((o) => o.status !== 'error')
  t.same([...new Set(answered.map((o) => o.status))].filter((s) => s !== 200 && s !== 503), [], 'every answer is 200, or 503 while closing')
  const drained = outcomes.filter((o) => o.status === 200 && o.endedAt > signalledAt).length
  t.ok(drained > 0, `${drained} requests in flight at SIGTERM were still answered 200`)
  t.comment(`outcomes: ${outcomes.length} requests, ${served()} answered 200, ` +
    `${answered.filter((o) => o.status === 503).length} answered 503, ${outcomes.length - answered.length} without an answer ` +
    `(${[...new Set(outcomes.filter((o) => o.status === 'error').map((o) => o.error))].join('; ')})`)

  const storage = new SqliteStorage({ filename: join(dataDir, 'data-endpoints.db') })
  t.teardown(() => storage.close())
  for (const name of NAMES) {
    const { type, resource } = ENDPOINTS[name]
    const endpoint = await storage.getEndpoint({ organization: 'acme', project: 'shop', modelSequence: 1, type, resourceSequence: resource })
    const ok = outcomes.filter((o) => o.name === name && o.status === 200).length
    t.equal(endpoint?.calls, ok, `${type} ${resource}: calls = the ${ok} answers 200`)
  }
  const [stored] = await storage.listKeys({ organization: 'acme', project: 'shop' })
  t.ok(stored.updatedAt !== null && stored.updatedAt.getTime() <= Date.now(), 'the key\'s last use was written')
})

// A client that keeps its connection alive after a download, as a balancer
// does, must not hold the close: Fastify closes only the connections idle when
// the close starts, and this one was busy then.
t.test('SIGTERM mid-download on a keep-alive connection: the download ends whole, and the close does not wait for the idle connection', async (t) => {
  const dataDir = tempDir(t)
  const adminToken = `admin-${randomUUID()}`
  const server = await startServer(t, { DATA_DIR: dataDir, ADMIN_TOKEN: adminToken, EVENTS_ROWS: '50000', LOG_LEVEL: 'warn' })
  const key = server.demoKey as string
  const admin = { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' }
  const [demo] = await (await fetch(`${server.baseUrl}/api-keys/acme/shop/keys`, { headers: { authorization: admin.authorization } })).json() as Array<{ id: string }>
  t.equal((await fetch(`${server.baseUrl}/api-keys/acme/shop/endpoints/1/dataset/2`, { method: 'PUT', headers: admin, body: JSON.stringify({ keyIds: [demo.id] }) })).status, 201)

  const agent = new http.Agent({ keepAlive: true })
  t.teardown(() => agent.destroy())
  const response = await new Promise<http.IncomingMessage>((resolve, reject) => {
    http.get(`${server.baseUrl}/api/acme/shop/model/1/dataset/2?format=json`, { agent, headers: { authorization: `Bearer ${key}` } }, resolve).on('error', reject)
  })
  t.equal(response.statusCode, 200)
  t.equal(response.headers.connection, 'keep-alive')
  // Hold the download open (a 50,000-row body is far more than the socket
  // buffers take) while the server gets SIGTERM and starts closing.
  response.pause()
  const stopped = server.stop('SIGTERM')
  await new Promise((resolve) => setTimeout(resolve, 500))
  const chunks: Buffer[] = []
  for await (const chunk of response) chunks.push(chunk as Buffer)
  const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { events: unknown[] }
  t.equal(body.events.length, 50_000, 'the download in flight at SIGTERM ended whole')

  // The agent now keeps that connection open and idle.
  const { code, stdout } = await stopped
  t.equal(code, 0, 'the close ended by itself, not by its time-out')
  t.notMatch(stdout, 'close timed out')
  const storage = new SqliteStorage({ filename: join(dataDir, 'data-endpoints.db') })
  t.teardown(() => storage.close())
  const endpoint = await storage.getEndpoint({ organization: 'acme', project: 'shop', modelSequence: 1, type: 'dataset', resourceSequence: 2 })
  t.equal(endpoint?.calls, 1, 'the call was written at close')
})
