// Management page benchmark (not a test; issue "18 ·"): the page in headless
// Chromium against a project of 100, 1,000 and 10,000 keys (a fifth as many
// endpoints, 3 keys each, a week of hourly usage on 100 of them, every
// resource named by the host), BENCH_RUNS times each:
//   - first screen: from the click on "Open project" (the token entered) to
//     the first frame with the keys table drawn, and to the status line that
//     says the project is open (the charts of the rows on screen drawn);
//   - one action: from the click on a key's Disable to its status line;
//   - the longest main-thread task Chromium reports (longtask) meanwhile.
// Times are taken in the page (performance.now), not by the driver.
//
//   npx tsx test/bench/management-page.ts
//
// Env: BENCH_SIZES (default 100,1000,10000), BENCH_RUNS (default 5), BENCH_TRACE (a path:
// the first open of each size is traced there, as <path>-<size>.json, for chrome://tracing).
import { writeFile } from 'node:fs/promises'
import type { AddressInfo } from 'node:net'
import { chromium } from 'playwright-core'
import { MemoryDatasets, MemoryJobs, PIPELINE_REF, SALES_REF, salesDataset } from '../fixtures.js'
import dataEndpoints, { SqliteStorage } from '../../lib/index.js'
import Fastify from 'fastify'
import { buildScaleProject, scalePlace } from '../scale-project.js'

const SIZES = (process.env.BENCH_SIZES ?? '100,1000,10000').split(',').map(Number)
const RUNS = Number(process.env.BENCH_RUNS ?? 5)
const TOKEN = 'bench-token'
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update']

// In the page: the click, the keys table's first frame, each status line, the long tasks.
const INSTRUMENT = `
  window.marks = { status: {} }
  window.longTasks = []
  new PerformanceObserver((list) => { for (const e of list.getEntries()) window.longTasks.push(e.duration) }).observe({ type: 'longtask' })
  document.addEventListener('click', () => { window.marks.click = performance.now() }, true)
  new MutationObserver(() => {
    if (window.marks.rows === undefined && document.querySelector('#keys-table tbody tr') !== null) {
      window.marks.rows = 0
      requestAnimationFrame(() => { window.marks.rows = performance.now() })
    }
  }).observe(document.querySelector('#keys-table tbody'), { childList: true })
  new MutationObserver(() => {
    const text = document.querySelector('#status').textContent
    if (text !== '') window.marks.status[text] = performance.now()
  }).observe(document.querySelector('#status'), { childList: true, characterData: true, subtree: true })`

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ARGS })
const rows: string[] = []
try {
  for (const size of SIZES) {
    const storage = new SqliteStorage({ filename: ':memory:' })
    const jobs = new MemoryJobs().addPipeline(PIPELINE_REF, 'refresh')
    const datasets = new MemoryDatasets().add(SALES_REF, salesDataset())
    const app = Fastify()
    await app.register(dataEndpoints, {
      storage, datasets, pipelines: jobs, jobs, bcryptCost: 4,
      getPermissions: (request) => request.headers.authorization === `Bearer ${TOKEN}` ? ['ManageAPIKeys'] : []
    })
    const endpointCount = size / 5
    const { keys } = await buildScaleProject(storage, { keys: size, endpoints: endpointCount })
    const named = (type: string): Array<{ modelSequence: number, resourceSequence: number, name: string }> =>
      Array.from({ length: endpointCount }, (_, i) => ({ ...scalePlace(i), name: `resource ${i}` })).filter((r) => r.type === type)
    Object.assign(datasets, { listResources: async () => named('dataset') })
    Object.assign(jobs, { listResources: async () => named('pipeline') })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`

    const figures = { rows: [] as number[], opened: [] as number[], openTask: [] as number[], action: [] as number[], actionTask: [] as number[] }
    const page = await browser.newPage()
    for (let run = 0; run < RUNS; run++) {
      await page.goto(`${base}/api-keys/ui/`)
      await page.evaluate(INSTRUMENT)
      await page.getByLabel('Organization').fill('acme')
      await page.getByLabel('Project', { exact: true }).fill('shop')
      await page.getByLabel('Access token (optional)').fill(TOKEN)
      await page.evaluate('window.longTasks = []')
      const tracing = run === 0 && process.env.BENCH_TRACE !== undefined
      if (tracing) await browser.startTracing(page, { categories: ['devtools.timeline', 'v8.execute', 'blink'] })
      await page.getByRole('button', { name: 'Open project' }).click()
      await page.locator('#status', { hasText: /^Project acme\/shop/ }).waitFor({ timeout: 60_000 })
      if (tracing) await writeFile(`${process.env.BENCH_TRACE as string}-${size}.json`, await browser.stopTracing())
      const opened = await page.evaluate<{ click: number, rows: number, status: Record<string, number> }>('window.marks')
      figures.rows.push(opened.rows - opened.click)
      figures.opened.push(Math.max(...Object.entries(opened.status).filter(([text]) => text.startsWith('Project')).map(([, at]) => at)) - opened.click)
      figures.openTask.push(Math.max(0, ...await page.evaluate<number[]>('window.longTasks')))

      // One action on a key on screen: disable it (enable it on the next run).
      await page.locator('#workspace[aria-busy="false"]').waitFor()
      const key = keys[run % 5]
      const toggle = page.locator(`button[aria-label$="key ${key.prefix}"][data-focus$=":toggle"]`)
      const verb = (await toggle.innerText()) === 'Disable' ? 'disabled' : 'enabled'
      await page.evaluate('window.longTasks = []; window.marks.status = {}')
      await toggle.click()
      await page.locator('#status', { hasText: `Key ${key.prefix} ${verb}.` }).waitFor()
      const acted = await page.evaluate<{ click: number, status: Record<string, number> }>('window.marks')
      figures.action.push(acted.status[`Key ${key.prefix} ${verb}.`] - acted.click)
      figures.actionTask.push(Math.max(0, ...await page.evaluate<number[]>('window.longTasks')))
    }
    await page.close()
    await app.close()
    const f = (values: number[]): string => `${Math.round(median(values))} (${Math.round(Math.max(...values))})`
    rows.push(`| ${size.toLocaleString('en')} keys, ${endpointCount.toLocaleString('en')} endpoints | ${f(figures.rows)} | ${f(figures.opened)} | ${f(figures.openTask)} | ${f(figures.action)} | ${f(figures.actionTask)} |`)
    console.log(rows.at(-1))
    console.log(`  each run: ${JSON.stringify(Object.fromEntries(Object.entries(figures).map(([name, values]) => [name, values.map(Math.round)])))}`)
  }
} finally {
  await browser.close()
}
console.log(`\n${RUNS} runs each; milliseconds, median (slowest)\n`)
console.log('| project | first screen: keys table drawn | first screen: open, charts on screen drawn | longest task while opening | disable a key | longest task of the action |')
console.log('|---|---:|---:|---:|---:|---:|')
for (const row of rows) console.log(row)
