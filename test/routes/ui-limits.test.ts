import t from 'tap'
import { chromiumAvailable, sharedBrowserContext } from '../chromium.js'
import { assignKeys, buildApp, createKey, DATASET_URL } from '../helper.js'

// The management page and per-key limits (issue 26), in a real headless
// Chromium: an operator gives a key 60 requests a minute, 2 concurrent
// downloads and 10 GB a day; the row shows them, the audit log tells the
// change, and refusals for limits are drawn in their own colour.

const TOKEN = 'limits-page-token'

if (chromiumAvailable(t)) {
  const context = sharedBrowserContext(t)

  t.test('limits shown, edited and audited on the page; refusals for limits in their own colour', async (t) => {
    const { app } = await buildApp(t, {
      getPermissions: (request) => request.headers.authorization === `Bearer ${TOKEN}` || request.headers['x-permissions'] === 'ManageAPIKeys' ? ['ManageAPIKeys'] : []
    })
    const k = await createKey(app, 'script')
    await assignKeys(app, 'dataset', [k.id])
    const base = await app.listen({ host: '127.0.0.1', port: 0 })
    const page = await context().newPage()
    t.teardown(() => page.close())
    const problems: string[] = []
    page.on('pageerror', (err) => problems.push(err.message))
    page.setDefaultTimeout(10_000)

    await page.goto(`${base}/api-keys/ui/#acme/shop`)
    await page.getByLabel('Access token (optional)').fill(TOKEN)
    await page.getByRole('button', { name: 'Open project' }).click()
    await page.getByRole('status').getByText('Project acme/shop: 1 key(s).').waitFor()
    const row = page.locator('#keys-table tbody tr', { hasText: k.prefix })
    t.equal((await row.locator('td.limits').innerText()).trim(), 'none')

    await page.getByRole('button', { name: `Edit key ${k.prefix}` }).click()
    const edit = page.locator('#edit-form')
    await edit.getByLabel('Requests a minute').fill('1.5')
    await edit.getByRole('button', { name: 'Save' }).click()
    t.match(await edit.getByLabel('Requests a minute').evaluate((input) => (input as unknown as { validationMessage: string }).validationMessage),
      /whole number/, 'a fraction is refused in the page')
    await edit.getByLabel('Requests a minute').fill('60')
    await edit.getByLabel('Concurrent downloads').fill('2')
    await edit.getByLabel('Bytes a day').fill('10000000000')
    await edit.getByRole('button', { name: 'Save' }).click()
    await page.getByRole('status').getByText(`Key ${k.prefix} saved.`).waitFor()
    t.equal((await row.locator('td.limits').innerText()).trim().split('\n').map((s) => s.trim()).join(' | '),
      '60 requests/min | 2 concurrent downloads | 10 GB a day')
    const stored = await app.inject({ url: '/api-keys/acme/shop/keys', headers: { 'x-permissions': 'ManageAPIKeys' } })
    t.same(stored.json()[0].limits, { requestsPerMinute: 60, concurrentDownloads: 2, bytesPerDay: 10_000_000_000 })
    await page.locator('#audit-table tbody tr', { hasText: '60 requests/min, 2 concurrent downloads, 10 GB a day' }).first().waitFor()

    // One limit removed: the others stay.
    await page.getByRole('button', { name: `Edit key ${k.prefix}` }).click()
    t.equal(await edit.getByLabel('Concurrent downloads').inputValue(), '2', 'the dialog opens on the stored limits')
    await edit.getByLabel('Concurrent downloads').fill('')
    await edit.getByRole('button', { name: 'Save' }).click()
    await page.getByRole('status').getByText(`Key ${k.prefix} saved.`).waitFor()
    const after = await app.inject({ url: '/api-keys/acme/shop/keys', headers: { 'x-permissions': 'ManageAPIKeys' } })
    t.same(after.json()[0].limits, { requestsPerMinute: 60, concurrentDownloads: null, bytesPerDay: 10_000_000_000 })

    // Refusals for a limit: their own kind in the chart, their own count.
    await app.inject({ method: 'PATCH', url: `/api-keys/acme/shop/keys/${k.id}`, headers: { 'x-permissions': 'ManageAPIKeys' }, payload: { limits: { bytesPerDay: 1 } } })
    const statuses = []
    for (let i = 0; i < 3; i++) statuses.push((await fetch(`${base}${DATASET_URL}?format=json`, { headers: { authorization: `Bearer ${k.key}` } })).status)
    t.same(statuses, [200, 429, 429])
    await app.dataEndpoints.flushUsage()
    await page.getByRole('button', { name: 'Open project' }).click()
    await page.getByRole('status').getByText('Project acme/shop: 1 key(s).').waitFor()
    const chart = row.locator('td.usage svg.chart')
    await chart.waitFor()
    t.equal(Number(await chart.locator('path.limited').getAttribute('data-count')), 2, 'two refusals for limits')
    t.equal(await chart.locator('path.refused').count(), 0, 'not drawn as other refusals')
    t.match(await row.locator('td.usage').innerText(), /2 refused for limits/)
    const fill = async (kind: string): Promise<string> => await page.evaluate<string>(
      `getComputedStyle(document.querySelector('svg.chart path.${kind}') ?? document.querySelector('.swatch.${kind}') ?? document.body).fill`)
    const limitedColour = await fill('limited')
    await app.inject({ url: `${DATASET_URL}?api_key=nope` })
    const refusedColour = await page.evaluate<string>('getComputedStyle(document.documentElement).getPropertyValue("--refused").trim()')
    t.not(limitedColour, refusedColour, 'a colour of its own')
    t.same(problems, [], 'no script error, no CSP refusal')
  })
}
