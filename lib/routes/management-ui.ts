import { readFile } from 'node:fs/promises'
import type { FastifyInstance } from 'fastify'
import { InvalidOptionError } from '../errors.js'

// The management page, <managementPrefix>/ui/: three static files that hold
// no data, so they are served to anyone; every call the page makes goes to
// the management API, which asks the host's getPermissions. The files ship
// as they are (the build copies lib/ui to dist/ui) and are read once here.

const FILES = {
  'index.html': 'text/html; charset=utf-8',
  'app.js': 'text/javascript; charset=utf-8',
  'app.css': 'text/css; charset=utf-8'
} as const

// No inline code, nothing from other origins, no framing, no form posts.
const CONTENT_SECURITY_POLICY = [
  "default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "img-src 'self'",
  "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'"
].join('; ')

const HEADERS = {
  'content-security-policy': CONTENT_SECURITY_POLICY,
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  // The page shows key values: nothing of it is kept by caches.
  'cache-control': 'no-store'
}

async function readAssets (): Promise<Record<keyof typeof FILES, Buffer>> {
  const names = Object.keys(FILES) as Array<keyof typeof FILES>
  try {
    const contents = await Promise.all(names.map((name) => readFile(new URL(`../ui/${name}`, import.meta.url))))
    return Object.fromEntries(names.map((name, i) => [name, contents[i]])) as Record<keyof typeof FILES, Buffer>
  } catch (err) {
    throw new InvalidOptionError(`the management page's files are missing (${(err as Error).message}); ` +
      'build with `npm run build`, which copies lib/ui to dist/ui, or set managementUi: false')
  }
}

/** Registered with the prefix `/ui` under the management prefix. */
export async function managementUi (app: FastifyInstance): Promise<void> {
  const assets = await readAssets()

  // '/' answers both <prefix>/ui and <prefix>/ui/; the page's relative
  // links need the slash, so the first one redirects (relatively, which
  // keeps any path a proxy puts in front).
  app.get('/', { schema: { hide: true } }, async (request, reply) => {
    const path = request.url.split('?', 1)[0]
    if (!path.endsWith('/')) return reply.redirect(`${path.slice(path.lastIndexOf('/') + 1)}/`)
    return reply.headers(HEADERS).type(FILES['index.html']).send(assets['index.html'])
  })
  for (const name of ['app.js', 'app.css'] as const) {
    app.get(`/${name}`, { schema: { hide: true } }, async (request, reply) =>
      reply.headers(HEADERS).type(FILES[name]).send(assets[name]))
  }
}
