import { readFile } from 'node:fs/promises'
import t from 'tap'
import { ADMIN, buildApp } from '../helper.js'

// How the management page is served (the page itself runs in
// ui-browser.test.ts): without permission, with headers that keep it from
// being framed, sniffed, cached or extended with inline code.

const PAGE = '/api-keys/ui/'

t.test('the page and its two files are served to anyone, with the security headers', async (t) => {
  const { app } = await buildApp(t)
  const types: Record<string, RegExp> = {
    [PAGE]: /^text\/html; charset=utf-8$/,
    [`${PAGE}app.js`]: /^text\/javascript; charset=utf-8$/,
    [`${PAGE}app.css`]: /^text\/css; charset=utf-8$/
  }
  for (const [url, type] of Object.entries(types)) {
    const res = await app.inject(url)
    t.equal(res.statusCode, 200, url)
    t.match(res.headers['content-type'], type, url)
    const csp = String(res.headers['content-security-policy'])
    for (const directive of ["default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"]) {
      t.ok(csp.split('; ').includes(directive), `${url}: CSP has ${directive}`)
    }
    t.notMatch(csp, /unsafe/, `${url}: nothing unsafe allowed`)
    t.equal(res.headers['x-content-type-options'], 'nosniff', url)
    t.equal(res.headers['x-frame-options'], 'DENY', url)
    t.equal(res.headers['cache-control'], 'no-store', url)
    t.equal(res.headers['referrer-policy'], 'no-referrer', url)
  }
  // The management API itself still needs the permission.
  t.equal((await app.inject('/api-keys/acme/shop/keys')).statusCode, 403)
})

t.test('<prefix>/ui redirects to <prefix>/ui/, which the relative links need', async (t) => {
  const { app } = await buildApp(t)
  const res = await app.inject('/api-keys/ui?x=1')
  t.equal(res.statusCode, 302)
  t.equal(res.headers.location, 'ui/')
  t.equal(new URL(String(res.headers.location), 'http://host/api-keys/ui').pathname, PAGE)
})

t.test('the page works with a host that ignores trailing slashes', async (t) => {
  const { app } = await buildApp(t, {}, { routerOptions: { ignoreTrailingSlash: true } })
  t.equal((await app.inject('/api-keys/ui')).headers.location, 'ui/')
  t.equal((await app.inject(PAGE)).statusCode, 200)
  t.equal((await app.inject(`${PAGE}app.js`)).statusCode, 200)
})

t.test('the page follows managementPrefix; its calls go to the API beside it', async (t) => {
  const { app } = await buildApp(t, { managementPrefix: '/admin/data-keys' })
  t.equal((await app.inject('/admin/data-keys/ui/')).statusCode, 200)
  t.equal((await app.inject(PAGE)).statusCode, 404)
  const js = (await app.inject('/admin/data-keys/ui/app.js')).body
  t.match(js, "new URL('../', location.href)", 'the API base is the page\'s parent, whatever the prefix')
})

t.test('managementUi: false turns the page off and leaves the API alone', async (t) => {
  const { app } = await buildApp(t, { managementUi: false })
  for (const url of ['/api-keys/ui', PAGE, `${PAGE}app.js`, `${PAGE}app.css`]) {
    t.equal((await app.inject(url)).statusCode, 404, url)
  }
  t.equal((await app.inject({ url: '/api-keys/acme/shop/keys', headers: ADMIN })).statusCode, 200)
})

t.test('managementUi must be a boolean', async (t) => {
  for (const value of ['yes', 1, null]) {
    await t.rejects(buildApp(t, { managementUi: value as unknown as boolean }), /option "managementUi" must be a boolean/)
  }
})

t.test('the page has no inline code and never writes API strings as HTML', async (t) => {
  const { app } = await buildApp(t)
  const html = (await app.inject(PAGE)).body
  const scripts = html.match(/<script\b[^>]*>/g) ?? []
  t.same(scripts, ['<script type="module" src="app.js">'], 'one module script, from a file')
  t.notMatch(html, /<style\b/, 'no style element')
  t.notMatch(html, /\sstyle=/, 'no style attribute')
  t.notMatch(html, /\son[a-z]+=/i, 'no event handler attribute')
  t.notMatch(html, /(src|href)="(https?:)?\/\//, 'nothing from other origins')

  const js = (await app.inject(`${PAGE}app.js`)).body
  t.equal(js, await readFile(new URL('../../lib/ui/app.js', import.meta.url), 'utf8'), 'the file as shipped')
  t.notMatch(js, /innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function/, 'text only, no HTML parsing')
  t.notMatch(js, /\.style\b|'style'|cssText/, 'no inline style from the script either: the charts are coloured by class')
})
