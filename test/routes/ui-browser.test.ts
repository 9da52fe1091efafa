import { randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import type { BrowserContext, Locator, Page } from 'playwright-core'
import t, { type Test } from 'tap'
import { chromiumAvailable, sharedBrowserContext } from '../chromium.js'
import { salesDataset, SALES_REF } from '../fixtures.js'
import { buildApp, DATASET_URL, type TestApp } from '../helper.js'
import { buildScaleProject, scalePlace, scalePurpose } from '../scale-project.js'
import type { DataEndpointsOptions } from '../../lib/index.js'

// The management page in a real headless Chromium against a real listening
// server: a key is created in the page, used over HTTP, disabled and deleted
// in the page. The page authenticates to the management API the way a host
// that uses bearer tokens would: a token typed into the page.
//
// Chromium is Debian's `chromium` package (.ci/run installs it). Without it
// the file skips with one line, or fails when DATA_ENDPOINTS_REQUIRE_PG=1
// (CI), as the PostgreSQL tests do.

const ARTIFACTS = new URL('../artifacts/', import.meta.url)
const TOKEN = randomBytes(16).toString('hex')
const KEY = /^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/

let context: () => BrowserContext

/** A listening host whose management API accepts `Authorization: Bearer <TOKEN>`, and a page on it. */
async function openPage (t: Test, options: Partial<DataEndpointsOptions> = {}): Promise<{ page: Page, base: string, problems: string[], host: TestApp }> {
  const host = await buildApp(t, {
    getPermissions: (request) => request.headers.authorization === `Bearer ${TOKEN}` ? ['ManageAPIKeys'] : [],
    ...options
  })
  const { app } = host
  await app.listen({ host: '127.0.0.1', port: 0 })
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  await context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base })
  const page = await context().newPage()
  t.teardown(() => page.close())
  // Script errors and CSP refusals; 4xx answers of the API are expected.
  const problems: string[] = []
  page.on('pageerror', (err) => problems.push(err.message))
  page.on('console', (msg) => {
    if (/Content Security Policy|Refused to/.test(msg.text())) problems.push(msg.text())
  })
  page.setDefaultTimeout(10_000)
  return { page, base, problems, host }
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

const P = '/api-keys/acme/shop'
const HOUR = 3_600_000
const DAY = 24 * HOUR

interface MadeKey { id: string, key: string, prefix: string }

/** The management API over HTTP, with the token the host accepts. */
async function api<T = unknown> (base: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<T> {
  const res = await fetch(`${base}${P}/${path}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body)
  })
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`)
  return (res.status === 204 ? null : await res.json()) as T
}

/** Opens acme/shop in the page with the token, as a user would. */
async function openProject (page: Page, base: string, keyCount: number): Promise<void> {
  await page.goto(`${base}/api-keys/ui/`)
  await page.getByLabel('Organization').fill('acme')
  await page.getByLabel('Project', { exact: true }).fill('shop')
  await page.getByLabel('Access token (optional)').fill(TOKEN)
  await page.getByRole('button', { name: 'Open project' }).click()
  await page.getByRole('status').getByText(`Project acme/shop: ${keyCount} key(s).`).waitFor()
}

/** The audit log's rows as shown: [time, actor, change, fields], newest first. */
async function auditRows (page: Page): Promise<string[][]> {
  const rows: string[][] = []
  for (const row of await page.locator('#audit-table tbody tr').all()) rows.push((await row.locator('td').allInnerTexts()).map((text) => text.trim()))
  return rows
}

/** The value of a datetime-local field for a time (Chromium runs in this process's time zone). */
function localInput (ms: number): string {
  const d = new Date(ms)
  const pad = (n: number): string => String(n).padStart(2, '0')
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`
}

/** The sum of the counts a chart's bars of one kind carry (one path per kind). */
async function bars (chart: Locator, kind: 'ok' | 'refused' | 'guess'): Promise<number> {
  let sum = 0
  for (const path of await chart.locator(`path.${kind}`).all()) sum += Number(await path.getAttribute('data-count'))
  return sum
}

/** An element's text as shown, one line per line, without blank ones. */
async function lines (locator: Locator): Promise<string> {
  return (await locator.innerText()).split('\n').map((line) => line.trim()).filter(Boolean).join('\n')
}

const sleep = async (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * A client outside the browser: it calls the dataset over HTTP with its key,
 * one request after another, until stopped, and keeps every status.
 */
class DatasetClient {
  readonly statuses: number[] = []
  /** successful calls, by the key they were made with */
  private readonly okByKey = new Map<string, number>()
  private running = true
  private request: Promise<void> = Promise.resolve()
  private readonly loop: Promise<void>

  constructor (readonly base: string, public key: string) {
    this.loop = this.run()
  }

  private async run (): Promise<void> {
    while (this.running) {
      this.request = this.call(this.key)
      await this.request
      await sleep(20) // a breath between calls, so the server and the browser get their turns
    }
  }

  private async call (key: string): Promise<void> {
    try {
      const res = await fetch(`${this.base}${DATASET_URL}?meta=entities`, { headers: { authorization: `Bearer ${key}` } })
      await res.arrayBuffer()
      this.statuses.push(res.status)
      if (res.status === 200) this.okByKey.set(key, this.ok(key) + 1)
    } catch {
      this.statuses.push(0)
    }
  }

  /** Moves to another key; resolves once no request with the old one is in flight. */
  async switchTo (key: string): Promise<void> {
    this.key = key
    await this.request
  }

  /** How many calls with `key` answered 200 so far. */
  ok (key: string): number {
    return this.okByKey.get(key) ?? 0
  }

  async until (key: string, okCalls: number): Promise<void> {
    while (this.ok(key) < okCalls) await sleep(20)
  }

  async stop (): Promise<void> {
    this.running = false
    await this.loop
  }
}

/** The rotation panel's figures. */
const live = async (page: Page, which: 'old' | 'new'): Promise<number> => Number(await page.locator(`#rotation-${which}-calls`).textContent())
const checks = async (page: Page): Promise<number> => Number(await page.locator('#rotation-checked').getAttribute('data-checks'))
// Polled from here: a predicate evaluated in the page would be refused by its CSP.
async function untilChecks (page: Page, n: number): Promise<void> {
  while (await checks(page) < n) await sleep(100)
}
/** How many table rows the viewport shows. */
async function rowsOnScreen (page: Page): Promise<number> {
  return await page.evaluate<number>(`[...document.querySelectorAll('#keys-table tbody tr, #endpoints-table tbody tr')]
    .filter((row) => { const box = row.getBoundingClientRect(); return box.bottom > 0 && box.top < innerHeight }).length`)
}

/** Waits until no usage read is in flight: the rows on screen have their charts (the workspace says it is busy until then). */
async function usageDrawn (page: Page): Promise<void> {
  await sleep(100) // the observer's first look at rows just drawn or scrolled to
  await page.locator('#workspace[aria-busy="false"]').waitFor()
}

/** Waits a while for `locator` to match `n` elements (the assertion after it says whether it did). */
async function untilCount (locator: Locator, n: number): Promise<void> {
  for (let i = 0; i < 100 && await locator.count() !== n; i++) await sleep(50)
}
async function untilLive (page: Page, which: 'old' | 'new', n: number): Promise<void> {
  while (await page.locator(`#rotation-${which}-calls`).count() === 0 || await live(page, which) < n) await sleep(100)
}

if (chromiumAvailable(t)) {
  context = sharedBrowserContext(t)

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
    t.equal((await keyRow(page, prefix)).length, 8, 'cancelled: the key stays')
    await page.getByRole('button', { name: `Delete key ${prefix}` }).click()
    await dialog.getByRole('button', { name: 'Delete key' }).click()
    await page.getByRole('status').getByText(`Key ${prefix} deleted.`).waitFor()
    t.equal(await page.locator('#keys-table tbody tr').count(), 0)
    t.ok(await page.getByText('No keys yet: create one above.').isVisible())
    t.equal(await page.locator(':focus').getAttribute('id'), 'keys-title', 'the focus moves to the section, not the page top')
    t.same(await download(base, key), { status: 403, body: { message: 'Unknown API key' } })
    t.match(await page.locator('#endpoints-table tbody tr').first().innerText(), /none/, 'the endpoint stays, without the key')

    // The audit log followed each change, the endpoint the deleted key left
    // included (issue 12); without getActor, no actor.
    t.same((await auditRows(page)).map((row) => row.slice(1)), [
      ['—', `Key ${prefix} deleted`, 'Purpose: “nightly ETL”\nState: disabled'],
      ['—', `Endpoint /api/acme/shop/model/1/dataset/1 keys changed: removed ${prefix}`, `Keys: ${prefix} → none`],
      ['—', `Key ${prefix} disabled`, 'State: active → disabled'],
      ['—', `Endpoint /api/acme/shop/model/1/dataset/1 created with key ${prefix}`, `Keys: ${prefix}`],
      ['—', `Key ${prefix} created`, 'Purpose: “nightly ETL”\nState: active']
    ], 'the audit log, newest first')

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
    await page.getByRole('button', { name: `Edit key ${first}` }).click()
    await page.getByRole('dialog').getByLabel('Purpose').fill('monthly reporting')
    await page.getByRole('dialog').getByLabel('Purpose').press('Enter')
    await page.getByRole('status').getByText(`Key ${first} saved.`).waitFor()
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
    const edit = page.locator('#edit-form').getByLabel('Purpose')
    await page.getByRole('button', { name: `Edit key ${made.prefix}` }).click()
    t.equal(await validity(edit), '')
    await edit.press('End')
    await page.keyboard.type('!')
    await edit.press('Enter')
    await page.getByRole('status').getByText(`Key ${made.prefix} saved.`).waitFor()
    t.equal((await keyRow(page, made.prefix))[1], `${emoji}!`)
    await page.getByRole('button', { name: `Edit key ${made.prefix}` }).click()
    await edit.fill('  ')
    await edit.press('Enter')
    t.equal(await validity(edit), 'Enter a purpose that is not only spaces.')
    t.ok(await page.locator('#edit-dialog').isVisible(), 'the dialog stays open')
    await page.getByRole('button', { name: 'Cancel' }).click()
    await page.getByRole('button', { name: `Edit key ${made.prefix}` }).click()
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
  t.test('usage charts of keys and endpoints, guesses in the warning colour; expiry set, edited, flagged; a narrow screen', async (t) => {
    const { page, base, problems, host } = await openPage(t)
    const watched = await api<MadeKey>(base, 'POST', 'keys', { purpose: 'watched' })
    const quiet = await api<MadeKey>(base, 'POST', 'keys', { purpose: 'quiet' })
    const endpoint = await api<{ id: string }>(base, 'PUT', 'endpoints/1/dataset/1', { keyIds: [watched.id, quiet.id] })
    // Earlier history: 30 hours ago (in the 7 days, not in the 24 hours), 100 hours ago, 200 hours ago (in neither).
    const hour = Math.floor(Date.now() / HOUR) * HOUR
    const past = [[30, 'ok', 10], [100, 'ok', 4], [100, 'unknown_key', 1], [200, 'ok', 50]] as const
    await host.storage.applyUsage({
      calls: new Map(),
      lastUsed: new Map(),
      counts: new Map(past.map(([ago, outcome, count], i) => [String(i), { hour: hour - ago * HOUR, endpointId: endpoint.id, keyId: watched.id, outcome, count }]))
    })
    for (let i = 0; i < 3; i++) t.equal((await download(base, watched.key)).status, 200)
    for (let i = 0; i < 2; i++) t.equal((await download(base, `${watched.prefix}-${'x'.repeat(21)}`)).body.message, 'Unknown API key')
    t.equal((await fetch(`${base}${DATASET_URL}`)).status, 403, 'one call without a key')
    await openProject(page, base, 2)

    // A key: its figures, its chart, the guesses at it in the warning colour.
    const keyUsage = (prefix: string): Locator => page.locator('#keys-table tbody tr', { hasText: prefix }).locator('td.usage')
    t.equal(await lines(keyUsage(watched.prefix)), '24 h: 3 · 7 days: 17 calls\n3 wrong-secret guesses')
    const chart = keyUsage(watched.prefix).locator('svg.chart')
    t.same([await bars(chart, 'ok'), await bars(chart, 'refused'), await bars(chart, 'guess')], [17, 0, 3], 'the bars carry the counts of the 7 days')
    t.match(await chart.getAttribute('aria-label'),
      new RegExp(`^Key ${watched.prefix}: 17 calls in the last 7 days, 3 in the last 24 hours; 3 wrong-secret guesses; busiest hour .+ with 10 requests$`),
      'the chart has its text equivalent')
    t.equal(await chart.getAttribute('role'), 'img')
    t.equal(await chart.locator('path.ok').getAttribute('d').then((d) => d?.match(/M/g)?.length), 3, 'a bar per hour with calls: 100 and 30 hours ago, and this hour')
    await chart.hover() // an hour's title is made when the pointer first comes over its chart
    t.match(await chart.locator('g.bar title').first().textContent(), /^\S.*: 4 calls, 1 wrong-secret guess$/, 'each bar names its hour and counts: 100 hours ago')
    t.ok(await chart.locator('g.bar').count() >= 3, 'a bar per hour with requests')
    const warn = await page.evaluate<string>("getComputedStyle(document.querySelector('#keys-table path.guess')).fill")
    t.equal(warn, 'rgb(184, 106, 0)', 'guess bars in the warning colour')
    t.equal(await page.evaluate<string>("getComputedStyle(document.querySelector('#keys-table .guess-count')).color"), warn, 'and their count too')
    t.not(await page.evaluate<string>("getComputedStyle(document.querySelector('#keys-table path.ok')).fill"), warn, 'calls in another colour')
    t.equal(await lines(keyUsage(quiet.prefix)), '24 h: 0 · 7 days: 0 calls')
    t.equal(await keyUsage(quiet.prefix).locator('path.ok, path.refused, path.guess').count(), 0, 'no bars for a key without requests')

    // The endpoint: its calls, and the refusals it saw (none named a key: no key sent).
    const endpointUsage = page.locator('#endpoints-table tbody tr').first().locator('td.usage')
    // Read when its row comes on screen.
    await endpointUsage.scrollIntoViewIfNeeded()
    await endpointUsage.locator('svg.chart').waitFor()
    t.equal(await lines(endpointUsage), '24 h: 3 · 7 days: 17 calls\n1 refused 3 wrong-secret guesses')
    const endpointChart = endpointUsage.locator('svg.chart')
    t.same([await bars(endpointChart, 'ok'), await bars(endpointChart, 'refused'), await bars(endpointChart, 'guess')], [17, 1, 3])
    t.match(await endpointChart.getAttribute('aria-label'), /^Endpoint \/api\/acme\/shop\/model\/1\/dataset\/1: 17 calls in the last 7 days, 3 in the last 24 hours; 1 refused; 3 wrong-secret guesses; busiest hour .+ with 10 requests$/)

    // Expiry at creation: in three days, flagged.
    const purpose = page.locator('#create-key-form').getByLabel('Purpose')
    const expires = page.getByLabel('Expires (optional)')
    await purpose.fill('expiring')
    await expires.fill(localInput(Date.now() - DAY))
    await page.getByRole('button', { name: 'Create key' }).click()
    t.equal(await validity(expires), 'Choose a time in the future, or leave the field empty for no expiry.', 'the past is refused in the page')
    const inThreeDays = localInput(Date.now() + 3 * DAY)
    await expires.fill(inThreeDays)
    await page.getByRole('button', { name: 'Create key' }).click()
    const expiring = (await page.getByRole('dialog').getByLabel('API key').inputValue()).slice(0, 10)
    await page.getByRole('button', { name: 'Done' }).click()
    await page.getByRole('status').getByText(`Key ${expiring} created.`).waitFor()
    const stored = async (prefix: string): Promise<string | null> =>
      (await api<Array<{ prefix: string, expiresAt: string | null }>>(base, 'GET', 'keys')).find((k) => k.prefix === prefix)?.expiresAt ?? null
    t.equal(await stored(expiring), new Date(inThreeDays).toISOString(), 'sent as the local time the user chose')
    t.equal((await keyRow(page, expiring))[2], 'Active')
    t.match((await keyRow(page, expiring))[4], /expires in 3 days$/, 'flagged: within 7 days')
    t.equal(await page.locator('#keys-table tr', { hasText: expiring }).locator('.flag.soon').count(), 1)
    t.equal(await page.getByLabel('Expires (optional)').inputValue(), '', 'the form is reset')

    // Edited: a month on (no flag), a past time (refused), never.
    const edit = page.locator('#edit-form')
    await page.getByRole('button', { name: `Edit key ${expiring}` }).click()
    t.equal(await edit.getByLabel('Expires').inputValue(), inThreeDays, 'the dialog opens on the stored expiry')
    const inAMonth = localInput(Date.now() + 30 * DAY)
    await edit.getByLabel('Expires').fill(inAMonth)
    await edit.getByRole('button', { name: 'Save' }).click()
    await page.getByRole('status').getByText(`Key ${expiring} saved.`).waitFor()
    t.equal(await stored(expiring), new Date(inAMonth).toISOString())
    t.equal(await page.locator('#keys-table tr', { hasText: expiring }).locator('.flag').count(), 0, 'a month away: not flagged')
    await page.getByRole('button', { name: `Edit key ${expiring}` }).click()
    await edit.getByLabel('Expires').fill(localInput(Date.now() - 60_000))
    await edit.getByRole('button', { name: 'Save' }).click()
    t.equal(await validity(edit.getByLabel('Expires')), 'Choose a time in the future, or leave the field empty for no expiry.')
    t.ok(await page.locator('#edit-dialog').isVisible(), 'the dialog stays open')
    await edit.getByRole('button', { name: 'Clear the expiry: the key does not expire' }).click()
    t.equal(await validity(edit.getByLabel('Expires')), '', 'cleared: valid')
    // The status already reads "Key … saved." from the edit before: what it says meanwhile is recorded.
    await page.evaluate(`{
      const status = document.getElementById('status')
      window.said = []
      new MutationObserver(() => window.said.push(status.textContent)).observe(status, { childList: true, characterData: true, subtree: true })
    }`)
    await edit.getByRole('button', { name: 'Save' }).click()
    await page.locator('#keys-table tbody tr', { hasText: expiring }).locator('td').nth(4).getByText('never', { exact: true }).waitFor()
    await page.getByRole('status').getByText(`Key ${expiring} saved.`).waitFor()
    t.same(await page.evaluate<string[]>('window.said'), ['', `Key ${expiring} saved.`],
      'the same status said again is emptied first: a change that a screen reader announces')
    t.equal(await stored(expiring), null, 'never expires')
    t.equal((await keyRow(page, expiring))[4], 'never')

    // A key whose expiry passed (set in storage: the API takes no past time) shows as expired,
    // and its purpose can still be edited (its expiry is not sent back).
    await host.storage.updateKey({ organization: 'acme', project: 'shop' }, quiet.id, { expiresAt: new Date(Date.now() - 60_000) }, { actor: 'test' })
    await page.getByRole('button', { name: 'Open project' }).click()
    await page.getByRole('status').getByText('Project acme/shop: 3 key(s).').waitFor()
    t.equal((await keyRow(page, quiet.prefix))[2], 'Expired')
    t.match((await keyRow(page, quiet.prefix))[4], /expired$/)
    t.same(await download(base, quiet.key), { status: 403, body: { message: 'Disabled API key' } })
    await page.getByRole('button', { name: `Edit key ${quiet.prefix}` }).click()
    t.equal(await validity(edit.getByLabel('Expires')), '', 'an unchanged past expiry is not refused')
    await edit.getByLabel('Purpose').fill('quiet, expired')
    await edit.getByRole('button', { name: 'Save' }).click()
    await page.getByRole('status').getByText(`Key ${quiet.prefix} saved.`).waitFor()
    t.equal((await keyRow(page, quiet.prefix))[1], 'quiet, expired')

    mkdirSync(ARTIFACTS, { recursive: true })
    await page.screenshot({ path: new URL('management-usage.png', ARTIFACTS).pathname, fullPage: true })

    // A phone's width: rows become cards; nothing sticks out sideways.
    await page.setViewportSize({ width: 360, height: 780 })
    t.ok(await page.evaluate<boolean>('document.documentElement.scrollWidth <= window.innerWidth'), 'no sideways scrolling at 360 px')
    t.ok(await chart.isVisible(), 'the charts stay')
    await page.screenshot({ path: new URL('management-narrow.png', ARTIFACTS).pathname, fullPage: true })

    t.same(problems, [], 'no script error, no CSP refusal')
  })

  t.test('rotate a key from the page while a client calls with it', async (t) => {
    const { page, base, problems } = await openPage(t)
    const old = await api<MadeKey>(base, 'POST', 'keys', { purpose: 'demo' })
    await api(base, 'PUT', 'endpoints/1/dataset/1', { keyIds: [old.id] })
    await api(base, 'PUT', 'endpoints/1/pipeline/1', { keyIds: [old.id] })
    const client = new DatasetClient(base, old.key)
    t.teardown(() => client.stop())
    await client.until(old.key, 3)
    await openProject(page, base, 1)

    // Start: confirmed; the new key's value, once.
    await page.getByRole('button', { name: `Rotate key ${old.prefix}` }).click()
    t.match(await page.getByRole('dialog').innerText(), new RegExp(`Rotate key ${old.prefix} \\(demo\\)\\? A new key with the same purpose is made and added to the 2 endpoints`))
    const beforeStart = client.ok(old.key)
    await page.getByRole('dialog').getByRole('button', { name: 'Start rotation' }).click()
    const dialog = page.locator('#key-dialog')
    await dialog.getByText('it will not be shown again').waitFor()
    // The baseline was read before the new key was made, so before the dialog opened.
    const afterBaseline = client.ok(old.key)
    const renewed = await dialog.getByLabel('API key').inputValue()
    t.match(renewed, KEY)
    t.match(await dialog.getByRole('heading').innerText(), new RegExp(`^New key ${renewed.slice(0, 10)}, replacing ${old.prefix}$`))
    await dialog.getByRole('button', { name: 'Copy' }).click()
    await dialog.getByText('Copied to the clipboard.').waitFor()
    t.equal(await page.evaluate<string>('navigator.clipboard.readText()'), renewed, 'Copy puts the new key on the clipboard')
    await dialog.getByRole('button', { name: 'Done' }).click()
    const panel = page.getByRole('region', { name: `Rotating key ${old.prefix} (demo)` })
    await panel.getByText('Added to 2 of the old key\'s 2 endpoints:').waitFor()
    const endpoints = await api<Array<{ keys: Array<{ id: string }> }>>(base, 'GET', 'endpoints')
    const newId = (await api<Array<{ id: string, prefix: string, purpose: string }>>(base, 'GET', 'keys')).find((k) => k.prefix === renewed.slice(0, 10))
    t.equal(newId?.purpose, 'demo', 'the same purpose')
    t.same(endpoints.map((e) => e.keys.map((k) => k.id).sort()), [[old.id, newId?.id].sort(), [old.id, newId?.id].sort()], 'old and new key on both endpoints')

    // The old key's calls since the start rise while the client uses it; a reload keeps the count.
    await untilLive(page, 'old', 2)
    const beforeReload = await live(page, 'old')
    await page.reload()
    await page.locator('#rotation-old-calls').waitFor()
    t.ok(await live(page, 'old') >= beforeReload, 'after a reload the count goes on from the same baseline')
    const risen = await live(page, 'old')
    await untilChecks(page, (await checks(page)) + 2)
    t.ok(await live(page, 'old') > risen, 'the old key\'s count rises while the client uses it')

    // The client moves to the new key, as read from the page: the old count stops, the new one rises.
    await client.switchTo(renewed)
    const switchedAt = await checks(page)
    await untilChecks(page, switchedAt + 2) // a check that began after the old key's last call
    const stopped = await live(page, 'old')
    const oldTotal = client.ok(old.key)
    t.ok(stopped >= oldTotal - afterBaseline && stopped <= oldTotal - beforeStart,
      `the old key's count is its calls since the start, not before: ${stopped} in [${oldTotal - afterBaseline}, ${oldTotal - beforeStart}], of ${oldTotal}`)
    const newBefore = await live(page, 'new')
    await client.until(renewed, client.ok(renewed) + 2)
    await untilChecks(page, (await checks(page)) + 2)
    await untilChecks(page, (await checks(page)) + 2)
    t.equal(await live(page, 'old'), stopped, 'the old key\'s count does not change across the checks after the switch')
    t.ok(await live(page, 'new') > newBefore, 'while the new key\'s count rises')
    t.match(await page.locator('#rotation-checked').innerText(), /the old key's count has not changed in the last ([3-9]|\d\d+) checks\.$/)

    // The tables follow during the rotation, less often: the new key's row shows its calls (read once on screen).
    const newRow = page.locator('#keys-table tbody tr', { hasText: renewed.slice(0, 10) }).locator('td.usage')
    await newRow.scrollIntoViewIfNeeded()
    const limit = (await checks(page)) + 2 * 5
    while (/^24 h: 0 /.test(await lines(newRow)) && await checks(page) < limit) await sleep(100)
    t.notMatch(await lines(newRow), /^24 h: 0 /, 'the new key\'s row counts its calls')

    mkdirSync(ARTIFACTS, { recursive: true })
    await page.screenshot({ path: new URL('management-rotation.png', ARTIFACTS).pathname, fullPage: true })

    // Remove the old key by keyboard, confirmed; the checks leave the focus alone meanwhile.
    await panel.getByRole('button', { name: `Remove old key ${old.prefix}` }).focus()
    await untilChecks(page, (await checks(page)) + 2)
    t.equal(await page.locator(':focus').textContent(), `Remove old key ${old.prefix}`, 'the focus stays on the button across checks')
    await page.keyboard.press('Enter')
    t.match(await page.getByRole('dialog').innerText(), new RegExp(`Remove the old key ${old.prefix} \\(demo\\)\\? It had ${stopped} calls since the rotation began, none in the last \\d+ checks\\.`))
    await page.getByRole('dialog').getByRole('button', { name: 'Remove old key' }).click()
    await page.getByRole('status').getByText(`Old key ${old.prefix} removed; the rotation is complete.`).waitFor()
    t.same(await download(base, old.key), { status: 403, body: { message: 'Unknown API key' } }, 'the old key is refused')
    t.equal((await download(base, renewed)).status, 200, 'the new key works')
    await client.stop()
    t.ok(client.statuses.length > 0 && client.statuses.every((s) => s === 200), `every one of the client's ${client.statuses.length} calls succeeded: no interruption`)
    t.equal(await page.locator('#keys-table tbody tr').count(), 1)
    t.equal((await keyRow(page, renewed.slice(0, 10)))[1], 'demo')
    t.match(await panel.innerText(), /The rotation is complete\./)
    t.equal(await panel.getByRole('button', { name: `Remove old key ${old.prefix}` }).count(), 0)

    // Closed, it stays closed after a reload.
    await panel.getByRole('button', { name: 'Close the finished rotation' }).click()
    t.ok(await page.locator('#rotation').isHidden())
    await page.reload()
    await page.getByRole('status').getByText('Project acme/shop: 1 key(s).').waitFor()
    t.ok(await page.locator('#rotation').isHidden(), 'nothing left in the session')

    t.same(problems, [], 'no script error, no CSP refusal')
  })

  t.test('a rotation whose assignment fails on one endpoint says which, survives a reload and is finished by a retry', async (t) => {
    const { page, base, problems, host } = await openPage(t)
    // A second dataset that the host then loses: the PUT for it answers 404, for real.
    const known = new Set(host.datasets.datasets.keys())
    host.datasets.add({ ...SALES_REF, resourceSequence: 2 }, salesDataset())
    const second = [...host.datasets.datasets.keys()].find((k) => !known.has(k)) as string
    const old = await api<MadeKey>(base, 'POST', 'keys', { purpose: 'partner' })
    const other = await api<MadeKey>(base, 'POST', 'keys', { purpose: 'other' })
    for (const path of ['1/dataset/1', '1/dataset/2', '1/pipeline/1']) await api(base, 'PUT', `endpoints/${path}`, { keyIds: [old.id] })
    const dataset2 = host.datasets.datasets.get(second)
    host.datasets.datasets.delete(second)
    await openProject(page, base, 2)

    await page.getByRole('button', { name: `Rotate key ${old.prefix}` }).click()
    await page.getByRole('dialog').getByRole('button', { name: 'Start rotation' }).click()
    await page.locator('#key-dialog').getByText('it will not be shown again').waitFor()
    const renewed = await page.locator('#key-dialog').getByLabel('API key').inputValue()
    t.match(renewed, KEY)
    await page.locator('#key-dialog').getByRole('button', { name: 'Done' }).click()
    const panel = page.locator('#rotation')
    await panel.getByText('Added to 2 of the old key\'s 3 endpoints:').waitFor()
    t.equal(await panel.locator('li.failed').innerText(), '✗ not added to /api/acme/shop/model/1/dataset/2: Dataset not found')
    t.equal(await panel.locator('li.done').count(), 2, 'what was done stays listed')
    t.equal(await page.getByRole('alert').innerText(),
      'Could not add the new key everywhere: not added to /api/acme/shop/model/1/dataset/2; see the rotation above and try again')

    // One rotation at a time.
    await page.getByRole('button', { name: `Rotate key ${other.prefix}` }).click()
    t.equal(await page.getByRole('alert').innerText(), `Could not start the rotation: finish or stop the rotation of key ${old.prefix} first`)

    // A reload keeps the state, failure included.
    await page.reload()
    await panel.getByText('Added to 2 of the old key\'s 3 endpoints:').waitFor()
    t.match(await panel.locator('li.failed').innerText(), /dataset\/2: Dataset not found$/)

    // Removing now warns of the endpoint without the new key; cancelled.
    await panel.getByRole('button', { name: `Remove old key ${old.prefix}` }).click()
    t.match(await page.getByRole('dialog').innerText(), /The new key is not on \/api\/acme\/shop\/model\/1\/dataset\/2: clients there lose access\./)
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel' }).click()

    // The host has the dataset again: the retry finishes step 1.
    host.datasets.datasets.set(second, dataset2 as NonNullable<typeof dataset2>)
    await panel.getByRole('button', { name: 'Try again on 1 endpoint' }).click()
    await panel.getByText('Added to 3 of the old key\'s 3 endpoints:').waitFor()
    t.equal(await panel.locator('li.failed').count(), 0)
    const endpoints = await api<Array<{ path: string, keys: Array<{ prefix: string }> }>>(base, 'GET', 'endpoints')
    t.same(endpoints.map((e) => e.keys.map((k) => k.prefix).sort()), endpoints.map(() => [old.prefix, renewed.slice(0, 10)].sort()), 'every endpoint has both keys')

    // Stopped: both keys stay.
    await panel.getByRole('button', { name: `Stop the rotation of key ${old.prefix}; both keys stay` }).click()
    await page.getByRole('status').getByText(`Rotation of key ${old.prefix} stopped; both keys stay as they are.`).waitFor()
    t.ok(await panel.isHidden())
    t.equal((await download(base, old.key)).status, 200)
    t.equal((await download(base, renewed)).status, 200)

    t.same(problems, [], 'no script error, no CSP refusal')
  })

  t.test('the audit log shows the page\'s own changes with their actor, pages back through older entries, and holds no key value', async (t) => {
    // The actor is the x-actor header when there is one (the script below), else 'admin' (the page).
    const { page, base, problems } = await openPage(t, { getActor: (request) => String(request.headers['x-actor'] ?? 'admin') })
    await openProject(page, base, 0)
    t.ok(await page.getByText('No changes recorded yet.').isVisible(), 'an empty log says so')
    t.ok(await page.getByRole('button', { name: 'Older entries' }).isHidden())
    const values: string[] = []
    const dialogValue = async (): Promise<string> => {
      await page.locator('#key-dialog').getByText('it will not be shown again').waitFor()
      const value = await page.locator('#key-dialog').getByLabel('API key').inputValue()
      t.match(value, KEY)
      values.push(value)
      await page.locator('#key-dialog').getByRole('button', { name: 'Done' }).click()
      return value
    }
    const createInPage = async (purpose: string): Promise<string> => {
      await page.locator('#create-key-form').getByLabel('Purpose').fill(purpose)
      await page.getByRole('button', { name: 'Create key' }).click()
      const prefix = (await dialogValue()).slice(0, 10)
      await page.getByRole('status').getByText(`Key ${prefix} created.`).waitFor()
      return prefix
    }
    const confirm = async (button: string, confirmLabel: string): Promise<void> => {
      await page.getByRole('button', { name: button }).click()
      await page.locator('#confirm-dialog').getByRole('button', { name: confirmLabel }).click()
    }
    const path = '/api/acme/shop/model/1/dataset/1'

    // Eight changes made in the page: create, assign, disable, regenerate, create, reassign, delete, delete.
    const first = await createInPage('etl')
    await page.getByLabel('Model sequence').fill('1')
    await page.getByLabel('Resource sequence').fill('1')
    await page.getByLabel(`${first} — etl`).check()
    await page.getByRole('button', { name: 'Assign keys' }).click()
    await page.getByRole('status').getByText(`Endpoint GET ${path} now has 1 key(s).`).waitFor()
    await page.getByRole('button', { name: `Disable key ${first}` }).click()
    await page.getByRole('status').getByText(`Key ${first} disabled.`).waitFor()
    t.equal(await page.locator(':focus').getAttribute('aria-label'), `Enable key ${first}`, 'the log\'s refresh leaves the focus on the toggle')
    t.same((await auditRows(page))[0].slice(1), ['admin', `Key ${first} disabled`, 'State: active → disabled'], 'the log follows at once')
    await confirm(`Regenerate key ${first}`, 'Regenerate')
    const renewed = (await dialogValue()).slice(0, 10)
    await page.getByRole('status').getByText(`Key ${renewed} regenerated; its old value no longer works.`).waitFor()
    const second = await createInPage('partner')
    await page.getByRole('button', { name: `Edit keys of ${path}` }).click()
    await page.getByLabel(`${renewed} — etl (disabled)`).uncheck()
    await page.getByLabel(`${second} — partner`).check()
    await page.getByRole('button', { name: 'Assign keys' }).click()
    await page.getByRole('status').getByText(`Endpoint GET ${path} now has 1 key(s).`).waitFor()
    await confirm(`Delete key ${renewed}`, 'Delete key')
    await page.getByRole('status').getByText(`Key ${renewed} deleted.`).waitFor()
    await confirm(`Delete endpoint ${path}`, 'Delete endpoint')
    await page.getByRole('status').getByText(`Endpoint ${path} deleted.`).waitFor()

    const pageChanges = [
      ['admin', `Endpoint ${path} deleted`, `Keys: ${second}`],
      ['admin', `Key ${renewed} deleted`, 'Purpose: “etl”\nState: disabled'],
      ['admin', `Endpoint ${path} keys changed: added ${second}, removed ${renewed}`, `Keys: ${renewed} → ${second}`],
      ['admin', `Key ${second} created`, 'Purpose: “partner”\nState: active'],
      ['admin', `Key ${first} regenerated as ${renewed}`, `Prefix: ${first} → ${renewed}`],
      ['admin', `Key ${first} disabled`, 'State: active → disabled'],
      // Named by the prefix the key had then, though it was regenerated and deleted since.
      ['admin', `Endpoint ${path} created with key ${first}`, `Keys: ${first}`],
      ['admin', `Key ${first} created`, 'Purpose: “etl”\nState: active']
    ]
    t.same((await auditRows(page)).map((row) => row.slice(1)), pageChanges, 'every change, newest first, readable, with the actor getActor named')
    t.equal(await page.locator('#audit-count').innerText(), 'All 8 entries.')
    const time = page.locator('#audit-table tbody tr').first().locator('time')
    const at = await time.getAttribute('datetime')
    t.equal((await api<{ items: Array<{ at: string }> }>(base, 'GET', 'audit?limit=1')).items[0].at, at, 'the entry\'s time, as the API gives it')
    t.equal(await time.getAttribute('title'), `${(at as string).slice(0, 10)} ${(at as string).slice(11, 19)} UTC`, 'its UTC time as a title')
    t.equal(await time.innerText(), await page.evaluate<string, string>((iso) => new Date(iso).toLocaleString(), at as string), 'shown in local time')

    // 60 edits by a script through the API: the log now takes three pages.
    for (let i = 1; i <= 60; i++) {
      await api(base, 'PATCH', `keys/${(await api<Array<{ id: string }>>(base, 'GET', 'keys'))[0].id}`, { purpose: `p${i}` }, { 'x-actor': 'script' })
    }
    await page.getByRole('button', { name: 'Open project' }).click()
    await page.getByRole('status').getByText('Project acme/shop: 1 key(s).').waitFor()
    const scripted = Array.from({ length: 60 }, (_, i) => 60 - i).map((n) =>
      ['script', `Key ${second} edited`, `Purpose: “${n === 1 ? 'partner' : `p${n - 1}`}” → “p${n}”`])
    const all = [...scripted, ...pageChanges]
    t.same((await auditRows(page)).map((row) => row.slice(1)), all.slice(0, 25), 'the newest page')
    t.equal(await page.locator('#audit-count').innerText(), 'The newest 25 entries.')
    const older = page.getByRole('button', { name: 'Older entries' })
    await older.click()
    await page.getByRole('status').getByText('Audit log: 25 older entries shown.').waitFor()
    t.equal(await page.locator('#audit-table tbody tr').count(), 50)
    t.equal(await page.locator(':focus').textContent(), 'Older entries', 'the focus stays on the button while there is more')
    await page.keyboard.press('Enter')
    await page.getByRole('status').getByText('Audit log: 18 older entries shown; that is the start of the log.').waitFor()
    t.same((await auditRows(page)).map((row) => row.slice(1)), all, 'all 68, newest first, each once')
    t.ok(await older.isHidden(), 'no older entries')
    t.equal(await page.locator('#audit-count').innerText(), 'All 68 entries.')
    t.equal(await page.locator(':focus').locator('xpath=..').locator('td').nth(3).innerText(), all[50][2],
      'the focus moves to the first entry the last page brought (the 51st)')

    // A change in the page puts its entry on top and keeps the pages read.
    await page.getByRole('button', { name: `Disable key ${second}` }).click()
    await page.getByRole('status').getByText(`Key ${second} disabled.`).waitFor()
    t.equal(await page.locator('#audit-table tbody tr').count(), 69)
    t.same((await auditRows(page))[0].slice(1), ['admin', `Key ${second} disabled`, 'State: active → disabled'])
    t.equal(await page.locator('#audit-count').innerText(), 'All 69 entries.')

    // More changes elsewhere than a page holds: the log starts again from the newest.
    for (let i = 61; i <= 90; i++) {
      await api(base, 'PATCH', `keys/${(await api<Array<{ id: string }>>(base, 'GET', 'keys'))[0].id}`, { purpose: `p${i}` }, { 'x-actor': 'script' })
    }
    await page.getByRole('button', { name: `Enable key ${second}` }).click()
    await page.getByRole('status').getByText(`Key ${second} enabled.`).waitFor()
    const rows = await auditRows(page)
    t.equal(rows.length, 25, 'the newest page only: the gap is not shown as continuous')
    t.same(rows[0].slice(1), ['admin', `Key ${second} enabled`, 'State: disabled → active'])
    t.same(rows[1].slice(1), ['script', `Key ${second} edited`, 'Purpose: “p89” → “p90”'])
    t.ok(await older.isVisible(), 'and offers the older ones again')

    // No key value anywhere on the page, nor its secret part.
    t.equal(values.length, 3, 'two keys made and one regenerated in the page')
    const text = await page.locator('body').innerText()
    const html = await page.content()
    for (const value of values) {
      t.notOk(text.includes(value.slice(11)) || html.includes(value.slice(11)), `no part of ${value.slice(0, 10)}'s value after the prefix`)
    }

    mkdirSync(ARTIFACTS, { recursive: true })
    await page.screenshot({ path: new URL('management-audit.png', ARTIFACTS).pathname, fullPage: true })
    await page.setViewportSize({ width: 360, height: 780 })
    t.ok(await page.evaluate<boolean>('document.documentElement.scrollWidth <= window.innerWidth'), 'no sideways scrolling at 360 px')
    await page.locator('#audit-title').scrollIntoViewIfNeeded()
    await page.screenshot({ path: new URL('management-audit-narrow.png', ARTIFACTS).pathname })

    t.same(problems, [], 'no script error, no CSP refusal')
  })

  t.test('the picker names the host\'s datasets and pipelines and assigns through them; numbers when the host lists nothing or fails', async (t) => {
    const { page, base, problems, host } = await openPage(t)
    host.datasets.add({ ...SALES_REF, resourceSequence: 2 }, { ...salesDataset(), name: 'returns' })
    host.datasets.add({ ...SALES_REF, resourceSequence: 3 }, { ...salesDataset(), name: 'unlisted' })
    // The host lists two of its three datasets, and its pipeline.
    Object.assign(host.datasets, {
      listResources: async () => [{ modelSequence: 1, resourceSequence: 2, name: 'returns' }, { modelSequence: 1, resourceSequence: 1, name: 'sales' }]
    })
    Object.assign(host.jobs, { listResources: async () => [{ modelSequence: 1, resourceSequence: 1, name: 'refresh' }] })
    const key = await api<MadeKey>(base, 'POST', 'keys', { purpose: 'reports' })
    const writes: string[] = []
    page.on('request', (req) => {
      if (req.method() !== 'GET') writes.push(`${req.method()} ${new URL(req.url()).pathname}`)
    })
    await openProject(page, base, 1)

    const picker = page.getByLabel('Dataset or pipeline')
    const model = page.getByLabel('Model sequence')
    t.ok(await picker.isVisible(), 'a picker by name')
    t.ok(await model.isHidden(), 'the numbers are not asked for')
    t.same(await picker.locator('option').allInnerTexts(), [
      'Choose one…', 'sales — model 1, dataset 1', 'returns — model 1, dataset 2', 'refresh — model 1, pipeline 1', 'Another, by its numbers…'
    ], 'in the server\'s order, with their numbers')
    t.same([await picker.locator('optgroup').first().getAttribute('label'), await picker.locator('optgroup').last().getAttribute('label')],
      ['Datasets (GET)', 'Pipelines (POST)'], 'grouped by type')
    t.ok(await page.locator('#resource-note').isHidden())

    // Nothing chosen: the browser refuses.
    await page.getByLabel(`${key.prefix} — reports`).check()
    await page.getByRole('button', { name: 'Assign keys' }).click()
    t.not(await validity(picker), '', 'a choice is required')
    t.same(writes, [], 'nothing was sent')

    // By name: a dataset, then the pipeline.
    await picker.selectOption({ label: 'returns — model 1, dataset 2' })
    await page.getByRole('button', { name: 'Assign keys' }).click()
    await page.getByRole('status').getByText('Endpoint GET /api/acme/shop/model/1/dataset/2 now has 1 key(s).').waitFor()
    t.equal(writes.at(-1), 'PUT /api-keys/acme/shop/endpoints/1/dataset/2')
    await picker.selectOption({ label: 'refresh — model 1, pipeline 1' })
    await page.getByRole('button', { name: 'Assign keys' }).click()
    await page.getByRole('status').getByText('Endpoint POST /api/acme/shop/model/1/pipeline/1 now has 1 key(s).').waitFor()
    t.equal(writes.at(-1), 'PUT /api-keys/acme/shop/endpoints/1/pipeline/1')

    // By numbers, for the dataset the host does not list.
    await picker.selectOption({ label: 'Another, by its numbers…' })
    t.ok(await model.isVisible(), 'the numbers come back')
    await model.fill('1')
    await page.getByLabel('Type').selectOption('dataset')
    await page.getByLabel('Resource sequence').fill('3')
    await page.getByRole('button', { name: 'Assign keys' }).click()
    await page.getByRole('status').getByText('Endpoint GET /api/acme/shop/model/1/dataset/3 now has 1 key(s).').waitFor()
    t.equal(writes.at(-1), 'PUT /api-keys/acme/shop/endpoints/1/dataset/3')

    // The endpoints carry their names: each row as its PUT answered it (the host names even the
    // dataset it does not list), in the list's order; opened again, the names the host lists.
    const paths = async (): Promise<string[]> => await page.locator('#endpoints-table tbody td:first-child').allInnerTexts()
    t.same(await paths(), ['returns\n/api/acme/shop/model/1/dataset/2', 'unlisted\n/api/acme/shop/model/1/dataset/3', 'refresh\n/api/acme/shop/model/1/pipeline/1'])
    t.same((await auditRows(page)).slice(0, 3).map((row) => row[2]), [
      `Endpoint /api/acme/shop/model/1/dataset/3 (unlisted) created with key ${key.prefix}`,
      `Endpoint /api/acme/shop/model/1/pipeline/1 (refresh) created with key ${key.prefix}`,
      `Endpoint /api/acme/shop/model/1/dataset/2 (returns) created with key ${key.prefix}`
    ], 'and so does the audit log')
    await page.getByRole('button', { name: 'Open project' }).click()
    await page.getByRole('status').getByText('Project acme/shop: 1 key(s).').waitFor()
    t.same(await paths(), ['returns\n/api/acme/shop/model/1/dataset/2', '/api/acme/shop/model/1/dataset/3', 'refresh\n/api/acme/shop/model/1/pipeline/1'])
    t.same((await auditRows(page))[0][2], `Endpoint /api/acme/shop/model/1/dataset/3 created with key ${key.prefix}`)

    // Edit keys: the picker shows the endpoint's resource, or the numbers for one it does not list.
    await page.getByRole('button', { name: 'Edit keys of /api/acme/shop/model/1/dataset/2' }).click()
    t.equal(await picker.inputValue(), 'dataset/1/2')
    t.ok(await model.isHidden())
    t.equal(await page.locator(':focus').getAttribute('name'), 'resource', 'the focus goes to the picker')
    await page.getByRole('button', { name: 'Edit keys of /api/acme/shop/model/1/dataset/3' }).click()
    t.equal(await picker.inputValue(), 'numbers')
    t.same([await model.inputValue(), await page.getByLabel('Resource sequence').inputValue()], ['1', '3'])
    t.equal(await page.locator(':focus').getAttribute('name'), 'resource')
    await picker.selectOption({ label: 'sales — model 1, dataset 1' })
    t.same([await model.inputValue(), await page.getByLabel('Type').inputValue(), await page.getByLabel('Resource sequence').inputValue()],
      ['1', 'dataset', '1'], 'a name fills the numbers')
    t.ok(await model.isHidden())

    mkdirSync(ARTIFACTS, { recursive: true })
    await page.screenshot({ path: new URL('management-picker.png', ARTIFACTS).pathname, fullPage: true })
    t.same(problems, [], 'no script error, no CSP refusal')

    // A host that lists nothing: the number fields, and no note.
    const plain = await openPage(t)
    await openProject(plain.page, plain.base, 0)
    t.ok(await plain.page.getByLabel('Dataset or pipeline').isHidden(), 'no picker')
    t.ok(await plain.page.getByLabel('Model sequence').isVisible(), 'the numbers')
    t.ok(await plain.page.locator('#resource-note').isHidden())
    t.same(plain.problems, [])

    // A host whose list fails: the number fields, a short note, and they work. Its audit log
    // fails too: the page says so, and shows the rest.
    const failing = await openPage(t)
    Object.assign(failing.host.datasets, { listResources: async () => { throw new Error('catalogue unavailable') } })
    Object.assign(failing.host.storage, { listAudit: async () => { throw new Error('audit table unavailable') } })
    const made = await api<MadeKey>(failing.base, 'POST', 'keys', { purpose: 'fallback' })
    await openProject(failing.page, failing.base, 1)
    t.ok(await failing.page.getByLabel('Dataset or pipeline').isHidden(), 'no picker')
    t.equal(await failing.page.locator('#resource-note').innerText(),
      'The application\'s names for its datasets and pipelines could not be read (catalogue unavailable): enter the numbers.')
    await failing.page.getByLabel('Model sequence').fill('1')
    await failing.page.getByLabel('Resource sequence').fill('1')
    await failing.page.getByLabel(`${made.prefix} — fallback`).check()
    await failing.page.getByRole('button', { name: 'Assign keys' }).click()
    await failing.page.getByRole('status').getByText('Endpoint GET /api/acme/shop/model/1/dataset/1 now has 1 key(s).').waitFor()
    await failing.page.locator('#resource-numbers').screenshot({ path: new URL('management-picker-failed.png', ARTIFACTS).pathname })
    // A storage failure is answered in no storage's words (issue 12): its text is in the log.
    t.equal(await failing.page.locator('#audit-problem').innerText(), 'The audit log could not be read: Internal server error')
    t.ok(await failing.page.getByText('No changes recorded yet.').isHidden(), 'not called empty')
    t.same(failing.problems, [])
  })

  t.test('a project of 10,000 keys and 2,000 endpoints: pages, search as you type, actions on their own rows, usage for the rows on screen', async (t) => {
    const { page, base, problems, host } = await openPage(t)
    const building = Date.now()
    const { keys, endpoints } = await buildScaleProject(host.storage, { keys: 10_000, endpoints: 2_000 })
    // The host names every resource, as a host with 2,000 endpoints would: 2,000 names for the picker.
    const nameOf = (i: number): string => i === 0 ? 'sales' : `${scalePlace(i).type === 'dataset' ? 'table' : 'job'} m${scalePlace(i).modelSequence} r${scalePlace(i).resourceSequence}`
    const listed = (type: string): Array<{ modelSequence: number, resourceSequence: number, name: string }> =>
      endpoints.map((_, i) => ({ ...scalePlace(i), name: nameOf(i) })).filter((r) => r.type === type)
    Object.assign(host.datasets, { listResources: async () => listed('dataset') })
    Object.assign(host.jobs, { listResources: async () => listed('pipeline') })
    t.comment(`10,000 keys and 2,000 endpoints built in ${Date.now() - building} ms`)

    const requests: string[] = []
    page.on('request', (req) => {
      const url = new URL(req.url())
      if (url.pathname.startsWith('/api-keys/acme/shop/')) requests.push(`${req.method()} ${url.pathname.slice(20)}${decodeURIComponent(url.search)}`)
    })
    await page.goto(`${base}/api-keys/ui/`)
    // Tasks over 50 ms on the page's main thread, as Chromium reports them.
    await page.evaluate(`window.longTasks = []; new PerformanceObserver((list) => { for (const e of list.getEntries()) window.longTasks.push(Math.round(e.duration)) }).observe({ type: 'longtask' })`)
    const longest = async (): Promise<number> => Math.max(0, ...await page.evaluate<number[]>('window.longTasks.splice(0)'))
    await page.getByLabel('Organization').fill('acme')
    await page.getByLabel('Project', { exact: true }).fill('shop')
    await page.getByLabel('Access token (optional)').fill(TOKEN)
    const opening = Date.now()
    await page.getByRole('button', { name: 'Open project' }).click()
    await page.getByRole('status').getByText('Project acme/shop: the first 25 keys are shown; search or turn the pages for the others.').waitFor({ timeout: 60_000 })
    const timings: Record<string, number> = { 'first screen (ms)': Date.now() - opening, 'longest task while opening (ms)': await longest() }

    // The first page of each table; the charts of the rows on screen, from reads of those rows only.
    const keyRows = page.locator('#keys-table tbody tr')
    const endpointRows = page.locator('#endpoints-table tbody tr')
    t.equal(await keyRows.count(), 25, '25 keys in the table')
    t.equal(await endpointRows.count(), 25, '25 endpoints in the table')
    t.same((await keyRows.locator('td:first-child').allInnerTexts()).map((text) => text.trim()), keys.slice(0, 25).map((k) => k.prefix), 'the oldest keys first')
    const onScreen = await rowsOnScreen(page)
    t.ok(onScreen > 0, `${onScreen} rows on screen`)
    t.equal(await page.evaluate<number>(`[...document.querySelectorAll('#keys-table tbody tr, #endpoints-table tbody tr')]
      .filter((row) => { const box = row.getBoundingClientRect(); return box.bottom > 0 && box.top < innerHeight })
      .filter((row) => row.querySelector('td.usage svg.chart') !== null).length`), onScreen, 'each of them has its chart')
    t.match(await lines(keyRows.first().locator('td.usage')), /^24 h: \d+ · 7 days: [1-9]\d* calls$/, 'the first key\'s usage, read for it')
    const usageReads = requests.filter((r) => r.startsWith('GET usage'))
    t.ok(usageReads.length >= onScreen && usageReads.length < 50, `${usageReads.length} usage reads: the rows on screen (and a little beyond), not the 50 of the tables`)
    t.ok(usageReads.every((r) => /[?&](keyId|endpointId)=[^&]+/.test(r)), 'each for one key or one endpoint, never the whole project')
    // A row further down is read when it is scrolled to.
    const lastEndpoint = endpointRows.last().locator('td.usage')
    t.match(await lines(lastEndpoint), /^Reading usage/, 'the last endpoint is not read while off screen')
    await lastEndpoint.scrollIntoViewIfNeeded()
    await lastEndpoint.locator('svg.chart').waitFor()
    await usageDrawn(page)
    await page.evaluate('window.scrollTo(0, 0)')
    t.same(requests.filter((r) => !r.startsWith('GET usage')).sort(), ['GET audit?limit=25', 'GET endpoints?limit=25', 'GET keys?limit=25', 'GET links?limit=100', 'GET resources'],
      'and the first page of each list, the log, the newest links and the names: nothing else')
    t.ok(requests.filter((r) => r.startsWith('GET usage')).length < 50, 'fewer usage reads than rows, scrolled to the end and back')
    const elements = await page.evaluate<number>('document.getElementsByTagName("*").length')
    t.ok(elements < 60_000, `${elements} elements on the page (the whole project drew some 440,000)`)
    t.equal(await page.locator('#assign-choices input[type=checkbox]').count(), 20, 'the assign form offers 20 keys, not 10,000')
    t.match(await page.locator('#assign-more').innerText(), /The project's first 20 keys are shown: type part of a prefix or purpose/)

    // Search as you type: the table follows, 10 keys, then one.
    requests.length = 0
    const search = page.getByLabel('Find keys', { exact: true })
    const searching = Date.now()
    await search.pressSequentially('client 0777', { delay: 30 })
    await keyRows.filter({ hasText: scalePurpose(7779) }).waitFor()
    timings['search as you type, to the rows shown (ms)'] = Date.now() - searching - 30 * 11
    t.same(await keyRows.locator('td:nth-child(2)').allInnerTexts(), Array.from({ length: 10 }, (_, i) => scalePurpose(7770 + i)))
    t.ok(requests.filter((r) => r.startsWith('GET keys')).length <= 3, `typing is not a request per key stroke: ${requests.filter((r) => r.startsWith('GET keys')).join(', ')}`)
    await search.fill(keys[4242].prefix.toLowerCase())
    await keyRows.filter({ hasText: keys[4242].prefix }).waitFor()
    await untilCount(keyRows, 1)
    t.equal(await keyRows.count(), 1, 'a prefix in either case: its key')
    t.ok(await page.locator('#keys-pager').isHidden(), 'one page: no pager')
    await search.fill('')
    await keyRows.filter({ hasText: keys[0].prefix }).waitFor()

    // The next page, and back.
    await page.getByRole('button', { name: 'Next keys' }).click()
    await keyRows.filter({ hasText: keys[25].prefix }).waitFor()
    t.same((await keyRows.locator('td:first-child').allInnerTexts()).map((text) => text.trim()), keys.slice(25, 50).map((k) => k.prefix), 'keys 26 to 50')
    t.equal(await page.locator('#keys-page').innerText(), 'Page 2')
    await usageDrawn(page)

    // An action: only its own call and the newest log entries; its row changes, nothing is reloaded.
    const target = keys[30]
    await page.getByRole('button', { name: `Disable key ${target.prefix}` }).scrollIntoViewIfNeeded()
    await usageDrawn(page)
    await longest()
    requests.length = 0
    const acting = Date.now()
    await page.getByRole('button', { name: `Disable key ${target.prefix}` }).click()
    await page.getByRole('status').getByText(`Key ${target.prefix} disabled.`).waitFor()
    timings['disable a key (ms)'] = Date.now() - acting
    timings['longest task of the action (ms)'] = await longest()
    t.same(requests, [`PATCH keys/${target.id}`, 'GET audit?limit=25'], 'the change and the log: no list, no usage read again')
    t.equal((await keyRow(page, target.prefix))[2], 'Disabled')
    t.equal(await page.locator(':focus').getAttribute('aria-label'), `Enable key ${target.prefix}`, 'the focus stays on the toggle')
    t.equal(await keyRows.count(), 25)

    // The assign form finds a key by searching, and the picker names 2,000 resources.
    requests.length = 0
    await page.getByLabel('Find keys to assign', { exact: true }).fill(scalePurpose(9999))
    const choice = page.getByLabel(`${keys[9999].prefix} — ${scalePurpose(9999)}`)
    await choice.waitFor()
    t.equal(await page.locator('#assign-choices input[type=checkbox]').count(), 1)
    await choice.check()
    // The picker lists the first 100 of the 2,000 names, and finds the others by search.
    const picker = page.getByLabel('Dataset or pipeline')
    const findResource = page.getByLabel('Find a resource by name')
    t.equal(await picker.locator('option').count(), 102, 'the first 100 resources by name, and the two fixed choices')
    const far = { ...scalePlace(1999), name: nameOf(1999) }
    const farLabel = `${far.name} — model ${far.modelSequence}, ${far.type} ${far.resourceSequence}`
    await findResource.fill(farLabel)
    await picker.locator('optgroup option', { hasText: farLabel }).waitFor({ state: 'attached' })
    t.same(await picker.locator('optgroup option').allInnerTexts(), [farLabel], 'a search finds one past the first 100')
    await findResource.fill('')
    await picker.locator('option').nth(101).waitFor({ state: 'attached' })
    await picker.selectOption({ label: 'sales — model 1, dataset 1' })
    const assigning = Date.now()
    await page.getByRole('button', { name: 'Assign keys' }).click()
    await page.getByRole('status').getByText('Endpoint GET /api/acme/shop/model/1/dataset/1 now has 1 key(s).').waitFor()
    timings['assign keys (ms)'] = Date.now() - assigning
    t.same(requests.filter((r) => !r.startsWith('GET keys?') && !r.startsWith('GET usage')), ['PUT endpoints/1/dataset/1', 'GET audit?limit=25'])
    t.ok(requests.filter((r) => r.startsWith('GET usage')).every((r) => /[?&](keyId|endpointId)=[^&]+/.test(r)), 'usage only of rows the form scrolled into view')
    t.match(await page.locator('#endpoints-table tbody tr').first().locator('td').nth(2).innerText(), new RegExp(`^${keys[9999].prefix} ${scalePurpose(9999)}$`),
      'the endpoint\'s row shows its new key, in place')

    // Endpoints by the host's name, and by path.
    const endpointSearch = page.getByLabel('Find endpoints', { exact: true })
    await endpointSearch.fill('JOB M4 R250')
    await page.locator('#endpoints-table tbody tr', { hasText: 'job m4 r250' }).waitFor()
    await untilCount(page.locator('#endpoints-table tbody tr'), 1)
    t.same(await page.locator('#endpoints-table tbody tr td:first-child').allInnerTexts(), ['job m4 r250\n/api/acme/shop/model/4/pipeline/250'])
    await endpointSearch.fill('/model/3/dataset/12')
    await page.locator('#endpoints-table tbody tr', { hasText: '/model/3/dataset/125' }).waitFor()
    t.same((await page.locator('#endpoints-table tbody tr td:first-child').allInnerTexts()).map((text) => text.split('\n').at(-1)),
      ['/api/acme/shop/model/3/dataset/12', ...Array.from({ length: 10 }, (_, i) => `/api/acme/shop/model/3/dataset/${120 + i}`)])

    t.comment(Object.entries(timings).map(([name, ms]) => `${name}: ${ms}`).join('; '))
    mkdirSync(ARTIFACTS, { recursive: true })
    writeFileSync(new URL('page-scale.json', ARTIFACTS), JSON.stringify(timings, null, 2))
    await page.screenshot({ path: new URL('management-scale.png', ARTIFACTS).pathname })
    t.same(problems, [], 'no script error, no CSP refusal')
  })

  t.test('download links: each key\'s live links listed, one revoked from the page, the audit says so', async (t) => {
    const { page, base, problems } = await openPage(t)
    const made = await api<MadeKey>(base, 'POST', 'keys', { purpose: 'sheets' })
    await api(base, 'PUT', 'endpoints/1/dataset/1', { keyIds: [made.id] })
    const mint = async (body: Record<string, unknown>): Promise<{ id: string, url: string }> => {
      const res = await fetch(`${base}${DATASET_URL}/links`, {
        method: 'POST', headers: { authorization: `Bearer ${made.key}`, 'content-type': 'application/json' }, body: JSON.stringify(body)
      })
      return await res.json() as { id: string, url: string }
    }
    const kept = await mint({ format: 'csv', entity: 'orders' })
    const revoked = await mint({ format: 'json', expiresIn: 600 })
    const gone = await mint({ format: 'sql' })
    await api(base, 'DELETE', `links/${gone.id}`)
    await openProject(page, base, 1)
    const rows = page.locator('#links-table tbody tr')
    await untilCount(rows, 2)
    t.match(await rows.nth(0).innerText(), made.prefix, 'the key\'s prefix')
    t.match(await rows.nth(0).innerText(), 'format=json')
    t.match(await rows.nth(1).innerText(), 'format=csv entity=orders')
    t.notMatch(await page.locator('#links-table').innerText(), kept.url.split('/')[5], 'no token on the page')

    await page.getByRole('button', { name: `Revoke link ${revoked.id}` }).click()
    await page.getByRole('button', { name: 'Revoke link', exact: true }).click()
    await page.getByRole('status').getByText('Download link revoked.').waitFor()
    await untilCount(rows, 1)
    t.same((await (await fetch(revoked.url)).json() as { message: string }).message, 'Revoked link')
    t.equal((await fetch(kept.url)).status, 200, 'the other link still works')
    t.match((await auditRows(page))[0][2], `Download link ${revoked.id} revoked`)
    t.same(problems, [], 'no script error, no CSP refusal')
  })
}
