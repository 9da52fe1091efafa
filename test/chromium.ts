import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { chromium, type BrowserContext } from 'playwright-core'
import type { Test } from 'tap'

// Debian's `chromium` package for the browser tests (.ci/run installs it),
// headless and offline, never a downloaded browser.

export const CHROMIUM = '/usr/bin/chromium'
export const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-quic', '--no-first-run', '--disable-sync']

/**
 * Whether Chromium is installed. Without it the test skips with one line,
 * or fails when DATA_ENDPOINTS_REQUIRE_PG=1 (CI), as the PostgreSQL tests do.
 */
export function chromiumAvailable (t: Test, what = 'the browser tests'): boolean {
  if (existsSync(CHROMIUM)) return true
  const message = `Chromium not found at ${CHROMIUM}; install Debian's chromium package to run ${what}`
  if (process.env.DATA_ENDPOINTS_REQUIRE_PG === '1') t.fail(message + ' (required: DATA_ENDPOINTS_REQUIRE_PG=1)')
  else t.pass(message, { skip: true })
  return false
}

/**
 * One persistent browser context for the file's tests, launched before them
 * and closed (its profile removed) after them; the getter answers it once
 * the tests run.
 */
export function sharedBrowserContext (t: Test): () => BrowserContext {
  const userDataDir = mkdtempSync(join(tmpdir(), 'data-endpoints-chromium-'))
  let context: BrowserContext | undefined
  t.before(async () => {
    context = await chromium.launchPersistentContext(userDataDir, { executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS })
  })
  t.teardown(async () => {
    await context?.close()
    rmSync(userDataDir, { recursive: true, force: true })
  })
  return () => {
    if (context === undefined) throw new Error('the browser context is not launched yet')
    return context
  }
}
