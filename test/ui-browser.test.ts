import { randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { chromium, type BrowserContext, type Locator, type Page } from 'playwright-core'
import t, { type Test } from 'tap'
import { buildApp, DATASET_URL } from './helper.js'

// The management page in a real headless Chromium against a real listening
// server: a key is created in the page, used over HTTP, disabled and deleted
// in the page. The page authenticates to the management API the way a host
// that uses bearer tokens would: a token typed into the page.
//
// Chromium is Debian's `chromium` package (.ci/run installs it). Without it
// the file skips with one line, or fails when DATA_ENDPOINTS_REQUIRE_PG=1
// (CI), as the PostgreSQL tests do.

const CHROMIUM = '/usr/bin/chromium'
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-quic', '--no-first-run', '--disable-sync']
const ARTIFACTS = new URL('./artifacts/', import.meta.url)
const TOKEN = randomBytes(16).toString('hex')
const KEY = /^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/

function chromiumAvailable (t: Test): boolean {
  if (existsSync(CHROMIUM)) return true
  const message = `Chromium not found at ${CHROMIUM}; install Debian's chromium package to run the browser tests`
  if (process.env.DATA_ENDPOINTS_REQUIRE_PG === '1') t.fail(message + ' (required: DATA_ENDPOINTS_REQUIRE_PG=1)')
  else t.pass(message, { skip: true })
  return false
}

let context: BrowserContext

/** A listening host whose management API accepts `Authorization: Bearer <TOKEN>`, and a page on it. */
async function openPage (t: Test): Promise<{ page: Page, base: string, problems: string[] }> {
  const { app } = await buildApp(t, {
    getPermissions: (request) => request.headers.authorization === `Bearer ${TOKEN}` ? ['ManageAPIKeys'] : []
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base })
  const page = await context.newPage()
  t.teardown(() => page.close())
  // Script errors and CSP refusals; 4xx answers of the API are expected.
  const problems: string[] = []
  page.on('pageerror', (err) => problems.push(err.message))
  page.on('console', (msg) => {
    if (/Content Security Policy|Refused to/.test(msg.text())) problems.push(msg.text())
  })
  page.setDefaultTimeout(10_000)
  return { page, base, problems }
}

/** A data request from outside the browser, as a client would make it. */
async function download (base: string, key: string): Promise<{ status: number, body: { message?: string, customers?: unknown[] } }> {
  const res = await fetch(`${base}${DATASET_URL}?format=json`, { headers: { authorization: `Bearer ${key}` } })
  return { status: res.status, body: await res.json() as { message?: string, customers?: unknown[] } }
}

/** The browser's own message for a field the page refuses; '' when it is valid. */
async function validity (field: Locator): Promise<string> {
  return field.evaluate((input) => (input as unknown as { validationMessage: string }).validationMessage)
}

async function keyRow (page: Page, prefix: string): Promise<string[]> {
  return page.locator('#keys-table tbody tr', { hasText: prefix }).locator('td').allInnerTexts()
}

if (chromiumAvailable(t)) {
  const userDataDir = mkdtempSync(join(tmpdir(), 'data-endpoints-chromium-'))
  t.before(async () => {
    context = await chromium.launchPersistentContext(userDataDir, { executablePath: CHROMIUM, headless: true, args: ARGS })
  })
  t.teardown(async () => {
    await context?.close()
    rmSync(userDataDir, { recursive: true, force: true })
  })

  t.test('create a key by keyboard, use it over HTTP, disable it, delete it', async (t) => {
    const { page, base, problems } = await openPage(t)
    await page.goto(`${base}/api-keys/ui/#acme/shop`)

    // The project comes from the address; without a token the API refuses.
    t.equal(await page.getByLabel('Organization').inputValue(), 'acme')
    t.equal(await page.getByLabel('Project', { exact: true }).inputValue(), 'shop')
    await page.getByRole('alert').getByText('Not authorized').waitFor()
    t.match(await page.getByRole('alert').innerText(), /^Could not open acme\/shop: Not authorized\. This page needs the permission ManageAPIKeys/)

    // Keyboard only: the token, Enter; the purpose, Enter.
    await page.getByLabel('Access token (optional)').focus()
    await page.keyboard.type(TOKEN)
    await page.keyboard.press('Enter')
    await page.getByRole('status').getByText('Project acme/shop: 0 key(s).').waitFor()
    t.ok(await page.getByRole('alert').isHidden(), 'the error is gone')
    await page.locator('#create-key-form').getByLabel('Purpose').focus()
    await page.keyboard.type('nightly ETL')
    await page.keyboard.press('Enter')

    const dialog = page.getByRole('dialog')
    await dialog.waitFor()
    t.match(await dialog.innerText(), /it will not be shown again/)
    const key = await dialog.getByLabel('API key').inputValue()
    t.match(key, KEY, 'the whole key, shown once')
    const prefix = key.slice(0, 10)
    t.equal(await page.locator(':focus').textContent(), 'Copy', 'the dialog opens on Copy')
    await page.keyboard.press('Enter')
    await dialog.getByText('Copied to the clipboard.').waitFor()
    t.equal(await page.evaluate<string>('navigator.clipboard.readText()'), key, 'Copy puts the key on the clipboard')
    await page.keyboard.press('Tab')
    await page.keyboard.press('Enter')
    await dialog.waitFor({ state: 'hidden' })
    t.equal(await page.locator('#key-value').inputValue(), '', 'the value leaves the page with the dialog')
    t.notOk((await page.content()).includes(key.slice(11)))
    t.same((await keyRow(page, prefix)).slice(0, 4), [prefix, 'nightly ETL', 'Active', 'never'])

    // Assign it to dataset 1, with labelled controls.
    await page.getByLabel('Model sequence').fill('1')
    await page.getByLabel('Type').selectOption('dataset')
    await page.getByLabel('Resource sequence').fill('1')
    await page.getByLabel(`${prefix} — nightly ETL`).check()
    await page.getByRole('button', { name: 'Assign keys' }).click()
    await page.getByRole('status').getByText('Endpoint GET /api/acme/shop/model/1/dataset/1 now has 1 key(s).').waitFor()

    // A real HTTP request with the new key.
    const ok = await download(base, key)
    t.equal(ok.status, 200)
    t.ok(Array.isArray(ok.body.customers), 'the dataset')
    await page.getByRole('button', { name: 'Open project' }).click()
    await page.getByRole('status').getByText('Project acme/shop: 1 key(s).').waitFor()
    const endpoint = await page.locator('#endpoints-table tbody tr').first().locator('td').allInnerTexts()
    t.same(endpoint.slice(0, 4), ['/api/acme/shop/model/1/dataset/1', 'GET', `${prefix} nightly ETL`, '1'], 'one call counted')
    t.not((await keyRow(page, prefix))[3], 'never', 'last used is shown')

    // Disable it in the page; the focus stays on the toggle.
    await page.getByRole('button', { name: `Disable key ${prefix}` }).click()
    await page.getByRole('status').getByText(`Key ${prefix} disabled.`).waitFor()
    t.equal((await keyRow(page, prefix))[2], 'Disabled')
    t.equal(await page.locator(':focus').getAttribute('aria-label'), `Enable key ${prefix}`, 'the focus stays on the toggle')
    t.same(await download(base, key), { status: 403, body: { message: 'Disabled API key' } })

    // Delete, with confirmation: Escape cancels, the confirm button deletes.
    await page.getByRole('button', { name: `Delete key ${prefix}` }).click()
    t.match(await dialog.innerText(), new RegExp(`Delete key ${prefix} \\(nightly ETL\\)\\?`))
    await page.keyboard.press('Escape')
    await dialog.waitFor({ state: 'hidden' })
    t.equal((await keyRow(page, prefix)).length, 5, 'cancelled: the key stays')
    await page.getByRole('button', { name: `Delete key ${prefix}` }).click()
    await dialog.getByRole('button', { name: 'Delete key' }).click()
    await page.getByRole('status').getByText(`Key ${prefix} deleted.`).waitFor()
    t.equal(await page.locator('#keys-table tbody tr').count(), 0)
    t.ok(await page.getByText('No keys yet: create one above.').isVisible())
    t.equal(await page.locator(':focus').getAttribute('id'), 'keys-title', 'the focus moves to the section, not the page top')
    t.same(await download(base, key), { status: 403, body: { message: 'Unknown API key' } })
    t.match(await page.locator('#endpoints-table tbody tr').first().innerText(), /none/, 'the endpoint stays, without the key')

    t.same(problems, [], 'no script error, no CSP refusal')
  })

  t.test('edit, regenerate, errors from the API, endpoint deletion; a screenshot', async (t) => {
    const { page, base, problems } = await openPage(t)
    await page.goto(`${base}/api-keys/ui/`)
    await page.getByLabel('Organization').fill('acme')
    await page.getByLabel('Project', { exact: true }).fill('shop')
    await page.getByLabel('Access token (optional)').fill(TOKEN)
    await page.getByRole('button', { name: 'Open project' }).click()
    await page.getByRole('status').getByText('Project acme/shop: 0 key(s).').waitFor()
    t.equal(new URL(page.url()).hash, '#acme/shop', 'the project is remembered in the address')

    const created: string[] = []
    for (const purpose of ['reporting', 'partner <b>feed</b>']) {
      await page.locator('#create-key-form').getByLabel('Purpose').fill(purpose)
      await page.getByRole('button', { name: 'Create key' }).click()
      created.push(await page.getByRole('dialog').getByLabel('API key').inputValue())
      await page.getByRole('button', { name: 'Done' }).click()
    }
    const [first, second] = created.map((k) => k.slice(0, 10))
    t.equal((await keyRow(page, second))[1], 'partner <b>feed</b>', 'API strings are text, never markup')
    t.equal(await page.locator('#keys-table b').count(), 0)

    // Edit the purpose in its dialog.
    await page.getByRole('button', { name: `Edit purpose of key ${first}` }).click()
    await page.getByRole('dialog').getByLabel('Purpose').fill('monthly reporting')
    await page.getByRole('dialog').getByLabel('Purpose').press('Enter')
    await page.getByRole('status').getByText(`Purpose of key ${first} saved.`).waitFor()
    t.equal((await keyRow(page, first))[1], 'monthly reporting')

    // A clear error from the API's message: the host has no dataset 99; no keys ticked with two keys.
    await page.getByLabel('Model sequence').fill('1')
    await page.getByLabel('Resource sequence').fill('99')
    await page.getByLabel(`${first} — monthly reporting`).check()
    await page.getByRole('button', { name: 'Assign keys' }).click()
    await page.getByRole('alert').getByText('Dataset not found').waitFor()
    t.equal(await page.getByRole('alert').innerText(), 'Could not assign the keys: Dataset not found')
    await page.getByLabel('Resource sequence').fill('1')
    await page.getByLabel(`${first} — monthly reporting`).uncheck()
    await page.getByRole('button', { name: 'Assign keys' }).click()
    await page.getByRole('alert').getByText('choose at least one key').waitFor()
    t.match(await page.getByRole('alert').innerText(), /^Could not assign the keys: keyIds: choose at least one key/)

    // Both keys on the dataset, then "Edit keys" fills the form with them.
    await page.getByLabel(`${first} — monthly reporting`).check()
    await page.getByLabel(`${second} — partner <b>feed</b>`).check()
    await page.getByRole('button', { name: 'Assign keys' }).click()
    await page.getByRole('status').getByText('now has 2 key(s).').waitFor()
    t.ok(await page.getByRole('alert').isHidden(), 'a success clears the error')
    await page.getByLabel('Resource sequence').fill('')
    await page.getByRole('button', { name: 'Edit keys of /api/acme/shop/model/1/dataset/1' }).click()
    t.equal(await page.getByLabel('Resource sequence').inputValue(), '1')
    t.ok(await page.getByLabel(`${second} — partner <b>feed</b>`).isChecked())

    // Regenerate, confirmed: a new value, shown once; the old one stops.
    const oldValue = created[0]
    t.equal((await download(base, oldValue)).status, 200)
    await page.getByRole('button', { name: `Regenerate key ${first}` }).click()
    await page.getByRole('dialog').getByRole('button', { name: 'Regenerate' }).click()
    const renewed = await page.getByRole('dialog').getByLabel('API key').inputValue()
    t.match(renewed, KEY)
    t.not(renewed, oldValue)
    mkdirSync(ARTIFACTS, { recursive: true })
    await page.screenshot({ path: new URL('management-key-dialog.png', ARTIFACTS).pathname })
    await page.keyboard.press('Escape')
    await page.getByRole('dialog').waitFor({ state: 'hidden' })
    t.equal(await page.locator('#key-value').inputValue(), '', 'Escape also clears the value')
    t.same(await download(base, oldValue), { status: 403, body: { message: 'Unknown API key' } })
    t.equal((await download(base, renewed)).status, 200, 'the endpoint kept the key')

    const shot = new URL('management-page.png', ARTIFACTS)
    await page.screenshot({ path: shot.pathname, fullPage: true })
    t.ok(existsSync(shot), `screenshot at ${shot.pathname}`)

    // Delete the endpoint, with confirmation; the dataset stays with the host.
    await page.getByRole('button', { name: 'Delete endpoint /api/acme/shop/model/1/dataset/1' }).click()
    t.match(await page.getByRole('dialog').innerText(), /the dataset itself stays/)
    await page.getByRole('dialog').getByRole('button', { name: 'Delete endpoint' }).click()
    await page.getByRole('status').getByText('Endpoint /api/acme/shop/model/1/dataset/1 deleted.').waitFor()
    t.equal(await page.locator('#endpoints-table tbody tr').count(), 0)
    t.same(await download(base, renewed), { status: 403, body: { message: 'Unknown API Endpoint' } })

    t.same(problems, [], 'no script error, no CSP refusal')
  })

  t.test('purposes and sequences are checked as the API checks them, before anything is sent', async (t) => {
    const { page, base, problems } = await openPage(t)
    const writes: string[] = []
    page.on('request', (req) => {
      if (req.method() !== 'GET') writes.push(`${req.method()} ${new URL(req.url()).pathname}`)
    })
    // Made through the API: 150 emoji are 150 characters there, 300 UTF-16 units.
    const emoji = '😀'.repeat(150)
    const made = await (await fetch(`${base}/api-keys/acme/shop/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ purpose: emoji })
    })).json() as { id: string, prefix: string }
    await page.goto(`${base}/api-keys/ui/`)
    await page.getByLabel('Organization').fill('acme')
    await page.getByLabel('Project', { exact: true }).fill('shop')
    await page.getByLabel('Access token (optional)').fill(TOKEN)
    await page.getByRole('button', { name: 'Open project' }).click()
    await page.getByRole('status').getByText('Project acme/shop: 1 key(s).').waitFor()

    // Create: only spaces, a control character, 201 characters are refused by the browser.
    const purpose = page.locator('#create-key-form').getByLabel('Purpose')
    const refusals: Array<[string, string]> = [
      ['   ', 'Enter a purpose that is not only spaces.'],
      ['tab\there', 'Remove the control characters from the purpose.'],
      ['😀'.repeat(201), 'Use at most 200 characters (now 201).']
    ]
    for (const [value, message] of refusals) {
      await purpose.fill(value)
      await page.getByRole('button', { name: 'Create key' }).click()
      t.equal(await validity(purpose), message, JSON.stringify(value).slice(0, 12))
    }
    t.same(writes, [], 'nothing was sent')
    await purpose.fill('😀'.repeat(200))
    await page.getByRole('button', { name: 'Create key' }).click()
    const created = (await page.getByRole('dialog').getByLabel('API key').inputValue()).slice(0, 10)
    await page.getByRole('button', { name: 'Done' }).click()
    t.equal((await keyRow(page, created))[1], '😀'.repeat(200), '200 emoji: 200 characters, as the API counts')

    // Edit: the API's 150-emoji purpose opens valid and takes one more character.
    const edit = page.locator('#purpose-form').getByLabel('Purpose')
    await page.getByRole('button', { name: `Edit purpose of key ${made.prefix}` }).click()
    t.equal(await validity(edit), '')
    await edit.press('End')
    await page.keyboard.type('!')
    await edit.press('Enter')
    await page.getByRole('status').getByText(`Purpose of key ${made.prefix} saved.`).waitFor()
    t.equal((await keyRow(page, made.prefix))[1], `${emoji}!`)
    await page.getByRole('button', { name: `Edit purpose of key ${made.prefix}` }).click()
    await edit.fill('  ')
    await edit.press('Enter')
    t.equal(await validity(edit), 'Enter a purpose that is not only spaces.')
    t.ok(await page.locator('#purpose-dialog').isVisible(), 'the dialog stays open')
    await page.getByRole('button', { name: 'Cancel' }).click()
    await page.getByRole('button', { name: `Edit purpose of key ${made.prefix}` }).click()
    t.equal(await validity(edit), '', 'reopened on the stored purpose: valid again')
    await page.getByRole('button', { name: 'Cancel' }).click()
    t.same(writes.filter((w) => w.startsWith('PATCH')).length, 1, 'one edit sent')

    // Sequences go in plain digits: 01 and 1.0 as 1, 1e3 as 1000.
    const model = page.getByLabel('Model sequence')
    const resource = page.getByLabel('Resource sequence')
    await page.locator(`#assign-keys input[value="${made.id}"]`).check()
    await model.fill('01')
    await resource.fill('1.0')
    await page.getByRole('button', { name: 'Assign keys' }).click()
    await page.getByRole('status').getByText('Endpoint GET /api/acme/shop/model/1/dataset/1 now has 1 key(s).').waitFor()
    t.equal(writes.at(-1), 'PUT /api-keys/acme/shop/endpoints/1/dataset/1')
    await model.fill('1')
    await resource.fill('1e3')
    await page.getByRole('button', { name: 'Assign keys' }).click()
    await page.getByRole('alert').getByText('Dataset not found').waitFor()
    t.equal(writes.at(-1), 'PUT /api-keys/acme/shop/endpoints/1/dataset/1000')

    // Past 2^53 - 1, zero or a fraction: refused in the page, with its reason.
    const sent = writes.length
    for (const bad of ['99999999999999999999', '9007199254740992', '0', '1.5']) {
      await model.fill(bad)
      await resource.fill('1')
      await page.getByRole('button', { name: 'Assign keys' }).click()
      t.equal(await validity(model), 'Enter a whole number from 1 to 9007199254740991.', bad)
    }
    t.equal(writes.length, sent, 'nothing was sent')
    await page.getByRole('button', { name: 'Edit keys of /api/acme/shop/model/1/dataset/1' }).click()
    t.equal(await validity(model), '', 'Edit keys fills in a valid sequence')
    await page.getByRole('button', { name: 'Assign keys' }).click()
    await page.getByRole('status').getByText('Endpoint GET /api/acme/shop/model/1/dataset/1 now has 1 key(s).').waitFor()

    t.same(problems, [], 'no script error, no CSP refusal')
  })
}
