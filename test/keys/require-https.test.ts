import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import type { AddressInfo } from 'node:net'
import { networkInterfaces, tmpdir } from 'node:os'
import { join } from 'node:path'
import type { FastifyServerOptions } from 'fastify'
import t, { type Test } from 'tap'
import { assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'

// requireHttps over real connections (SPEC.md §5.9, DESIGN.md §2), both
// sides of the rule: plain HTTP from a non-loopback address is refused, TLS
// and HTTPS at a trusted proxy are accepted, and forwarded headers count only
// from the proxy the host names in trustProxy. test/routes/data-routes.test.ts has
// the same rule through inject, where the peer address is made up; here the
// client really connects from this machine's non-loopback address.

const outside = Object.values(networkInterfaces()).flat()
  .find((i) => i !== undefined && i.family === 'IPv4' && !i.internal)?.address

// .ci/run sets DATA_ENDPOINTS_REQUIRE_OUTSIDE_ADDRESS=1 (making the address
// when the machine has none): there these tests fail rather than skip.
const REQUIRED = process.env.DATA_ENDPOINTS_REQUIRE_OUTSIDE_ADDRESS === '1'
const NO_ADDRESS = 'no non-loopback IPv4 address on this machine'
if (outside === undefined && REQUIRED) t.fail(`${NO_ADDRESS} (required: DATA_ENDPOINTS_REQUIRE_OUTSIDE_ADDRESS=1)`)
const skip = outside === undefined && NO_ADDRESS

interface Setup { url: (path?: string) => string, port: number }

async function serve (t: Test, fastifyOptions: FastifyServerOptions = {}): Promise<Setup> {
  const { app } = await buildApp(t, { failureThrottle: false }, fastifyOptions)
  const k = await createKey(app)
  await assignKeys(app, 'dataset', [k.id])
  await app.listen({ port: 0, host: '0.0.0.0' })
  return { port: (app.server.address() as AddressInfo).port, url: (path = '') => `${DATASET_URL}?meta=entities&api_key=${k.key}${path}` }
}

/** A GET from this machine to `host`: from `host` itself, so a non-loopback host is a non-loopback peer. */
async function get (host: string, port: number, path: string, headers: Record<string, string> = {}, tls?: { ca: string }): Promise<[number, string?]> {
  return new Promise((resolve, reject) => {
    const options = { host, port, path, headers, localAddress: host }
    const done = (res: http.IncomingMessage): void => {
      let body = ''
      res.setEncoding('utf8').on('data', (chunk: string) => { body += chunk })
      res.on('end', () => resolve(res.statusCode === 200 ? [200] : [res.statusCode ?? 0, JSON.parse(body).message]))
    }
    const req = tls === undefined
      ? http.get(options, done)
      : https.get({ ...options, ca: tls.ca, checkServerIdentity: () => undefined }, done)
    req.on('error', reject)
  })
}

const REFUSED = [403, 'HTTPS required']

t.test('plain HTTP: refused from a non-loopback address, whatever the client claims; loopback is exempt', { skip }, async (t) => {
  const host = outside as string
  const { port, url } = await serve(t)
  t.same(await get(host, port, url()), REFUSED, `from ${host}`)
  t.same(await get(host, port, url(), { 'x-forwarded-proto': 'https' }), REFUSED, 'X-Forwarded-Proto without trustProxy counts for nothing')
  t.same(await get(host, port, url(), { 'x-forwarded-for': '127.0.0.1' }), REFUSED, 'nor does X-Forwarded-For: 127.0.0.1')
  t.same(await get('127.0.0.1', port, url()), [200], 'from 127.0.0.1: exempt, for local trials')
})

t.test('behind a trusted proxy: HTTPS at the proxy is accepted, plain HTTP is not, and a client cannot claim loopback', { skip }, async (t) => {
  const proxy = outside as string
  // The proxy is this machine's outside address; the client is 203.0.113.7 behind it.
  const { port, url } = await serve(t, { trustProxy: proxy })
  const client = { 'x-forwarded-for': '203.0.113.7' }
  t.same(await get(proxy, port, url(), { ...client, 'x-forwarded-proto': 'https' }), [200], 'TLS ended at the proxy: accepted')
  t.same(await get(proxy, port, url(), { ...client, 'x-forwarded-proto': 'http' }), REFUSED, 'plain HTTP at the proxy: refused')
  t.same(await get(proxy, port, url(), client), REFUSED, 'no X-Forwarded-Proto: the connection itself is plain')
  // A proxy appends the address it saw; what the client wrote before it is not trusted.
  t.same(await get(proxy, port, url(), { 'x-forwarded-for': '127.0.0.1, 203.0.113.7', 'x-forwarded-proto': 'http' }), REFUSED,
    'a client that writes X-Forwarded-For: 127.0.0.1 is still 203.0.113.7')

  // Now the proxy is on loopback: this machine's outside address is just a client.
  const local = await serve(t, { trustProxy: '127.0.0.1' })
  t.same(await get(proxy, local.port, local.url(), { ...client, 'x-forwarded-proto': 'https' }), REFUSED,
    'from an address that is not the proxy, X-Forwarded-Proto: https is not believed')
})

t.test('trustProxy: true trusts every X-Forwarded-For hop, so a client can claim loopback: name the proxy instead', { skip }, async (t) => {
  // Documents why the README asks for the proxy's address.
  const host = outside as string
  const { port, url } = await serve(t, { trustProxy: true })
  t.same(await get(host, port, url(), { 'x-forwarded-for': '127.0.0.1, 203.0.113.7', 'x-forwarded-proto': 'http' }), [200])
  // A hop count: Fastify (5.12 on) fails closed and trusts no proxy at all, so
  // even a real proxy's X-Forwarded-Proto: https is not believed. Not a way to
  // name the proxy, whatever older guides say.
  const hops = await serve(t, { trustProxy: 1 } as unknown as FastifyServerOptions)
  t.same(await get(host, hops.port, hops.url(), { 'x-forwarded-for': '203.0.113.7', 'x-forwarded-proto': 'https' }), REFUSED,
    'trustProxy: 1 believes no forwarded header: TLS at the proxy still looks like plain HTTP')
})

t.test('real TLS from a non-loopback address is accepted', { skip }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'fde-tls-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-subj', '/CN=fde-test', '-days', '1'], { encoding: 'utf8' })
  if (made.status !== 0) {
    const why = `openssl could not make a certificate: ${made.error?.message ?? made.stderr}`
    if (REQUIRED) t.fail(`${why} (required: DATA_ENDPOINTS_REQUIRE_OUTSIDE_ADDRESS=1)`)
    else t.pass(why, { skip: true })
    return
  }
  const cert = readFileSync(join(dir, 'cert.pem'), 'utf8')
  const { port, url } = await serve(t, { https: { key: readFileSync(join(dir, 'key.pem')), cert } } as FastifyServerOptions)
  t.same(await get(outside as string, port, url(), {}, { ca: cert }), [200], 'HTTPS straight to the host')
})
