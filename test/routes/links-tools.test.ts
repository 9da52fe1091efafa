import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { promisify } from 'node:util'
import { chromium } from 'playwright-core'
import t from 'tap'
import { CHROMIUM, CHROMIUM_ARGS, chromiumAvailable } from '../chromium.js'
import { assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'
import { parseCsv } from '../format-readers.js'

// Issue 24's "done when": a link pasted into curl and into a browser
// downloads the data with no key in the URL, over real HTTP. (DuckDB reading a
// downloaded link is in links.test.ts.)

t.test('a link works pasted into curl and into Chromium', async (t) => {
  const { app } = await buildApp(t)
  const key = await createKey(app)
  await assignKeys(app, 'dataset', [key.id])
  await app.listen({ host: '127.0.0.1', port: 0 })
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  const mint = async (body: Record<string, unknown>): Promise<string> => {
    const res = await fetch(`${base}${DATASET_URL}/links`, {
      method: 'POST', headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' }, body: JSON.stringify(body)
    })
    t.equal(res.status, 201)
    const { url } = await res.json() as { url: string }
    t.ok(url.startsWith(`${base}/api/links/`), 'the URL names this server')
    t.notOk(url.includes(key.key) || url.includes(key.key.slice(11)), 'no key in it')
    return url
  }
  const keyed = async (query: string): Promise<string> => await (await fetch(`${base}${DATASET_URL}?${query}`, { headers: { authorization: `Bearer ${key.key}` } })).text()

  const csvUrl = await mint({ format: 'csv', entity: 'customers' })
  const { stdout } = await promisify(execFile)('curl', ['-sS', '--fail', csvUrl])
  t.equal(stdout, await keyed('format=csv&entity=customers'), 'curl: the keyed GET\'s csv')
  t.equal(parseCsv(stdout).length, 4)

  if (!chromiumAvailable(t, 'the browser part')) return
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS })
  t.teardown(async () => { await browser.close() })
  const page = await (await browser.newContext({ acceptDownloads: true })).newPage()

  // Downloads come as attachments: the browser saves them under the link's file name.
  const jsonUrl = await mint({ format: 'json', entity: 'customers' })
  const [saved] = await Promise.all([page.waitForEvent('download'), page.goto(jsonUrl).catch(() => null)])
  t.equal(saved.suggestedFilename(), decodeURIComponent(new URL(jsonUrl).pathname.split('/').pop() as string), 'the URL\'s own file name')
  t.same(JSON.parse(readFileSync(await saved.path()).toString('utf8')), JSON.parse(await keyed('format=json&entity=customers')), 'Chromium downloads the json')

  const [download] = await Promise.all([page.waitForEvent('download'), page.goto(csvUrl).catch(() => null)])
  t.equal(download.suggestedFilename(), 'customers.csv')
  t.equal(readFileSync(await download.path()).toString('utf8'), stdout, 'Chromium downloads the same csv')
})
