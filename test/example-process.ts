import { execFile, spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Test } from 'tap'

// The example server (examples/server.ts) as a real process, for the tests
// that drive it: started as `npm start` starts it, on a free port, and
// stopped with a signal.

export const ROOT = new URL('..', import.meta.url).pathname
export const RULE = '='.repeat(78)

export function tempDir (t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'fde-example-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

export async function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().once('error', reject).listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
}

export interface Started {
  baseUrl: string
  /** the lines between the two rules */
  banner: string[]
  curl: Curl[]
  adminToken: string | undefined
  demoKey: string | undefined
  /** stops the process with a signal; resolves with its exit code once its output has ended */
  stop: (signal?: NodeJS.Signals) => Promise<{ code: number | null, stdout: string, stderr: string }>
}

export interface Curl {
  line: string
  method: string
  headers: Record<string, string>
  url: string
  output: string | undefined
}

export function parseCurl (line: string): Curl {
  const headers: Record<string, string> = {}
  for (const [, name, value] of line.matchAll(/-H "([^:"]+): ([^"]*)"/g)) headers[name.toLowerCase()] = value
  const urls = [...line.matchAll(/"(http[^"]+)"/g)]
  return {
    line,
    method: /-X (\w+)/.exec(line)?.[1] ?? 'GET',
    headers,
    url: urls[urls.length - 1][1],
    output: /-o (\S+)/.exec(line)?.[1]
  }
}

export interface Pasted {
  /** the shell's exit code: not 0 when it refused to run the line */
  code: number
  stderr: string
  /** the request curl was asked to make */
  request: { method: string, headers: Record<string, string>, url: string, body: string | undefined }
}

/**
 * Runs a printed curl line as a shell runs it pasted, with `env` as the
 * user's variables (and nothing else set), but with a `curl` that only hands
 * back the arguments the shell gave it.
 */
export async function pasteCurl (line: string, env: Record<string, string> = {}): Promise<Pasted> {
  const script = `curl () { printf '%s\\0' "$@"; }\n${line.trim()}\n`
  const { code, stdout, stderr } = await new Promise<{ code: number, stdout: string, stderr: string }>((resolve) => {
    execFile('sh', ['-c', script], { env: { PATH: process.env.PATH, ...env } }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : Number(err.code ?? 1), stdout, stderr })
    })
  })
  const args = stdout.split('\0').slice(0, -1)
  // Every option the banner uses takes a value; the URL comes last.
  const request: Pasted['request'] = { method: 'GET', headers: {}, url: args[args.length - 1] ?? '', body: undefined }
  for (let i = 0; i + 1 < args.length; i += 2) {
    const [option, value] = [args[i], args[i + 1]]
    if (option === '-X') request.method = value
    if (option === '-d') request.body = value
    if (option === '-H') {
      const colon = value.indexOf(':')
      request.headers[value.slice(0, colon).toLowerCase()] = value.slice(colon + 1).trim()
    }
  }
  return { code, stderr, request }
}

/** Starts `examples/server.ts` and waits for its start-up block. */
export async function startServer (t: Test, env: Record<string, string>): Promise<Started> {
  const port = await freePort()
  const childEnv: NodeJS.ProcessEnv = { ...process.env, PORT: String(port), EVENTS_ROWS: '1000', ...env }
  for (const name of ['ADMIN_TOKEN', 'DEMO_KEY', 'LOG_LEVEL'] as const) {
    if (env[name] === undefined) delete childEnv[name]
  }
  const child = spawn(process.execPath, ['--import', 'tsx', 'examples/server.ts'], {
    cwd: ROOT, env: childEnv, stdio: ['ignore', 'pipe', 'pipe']
  })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)))
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })

  const banner = await new Promise<string[]>((resolve, reject) => {
    const check = (): void => {
      const lines = stdout.split('\n')
      const first = lines.indexOf(RULE)
      const last = lines.indexOf(RULE, first + 1)
      if (first >= 0 && last > first) {
        child.stdout.off('data', check)
        resolve(lines.slice(first + 1, last))
      }
    }
    child.stdout.on('data', check)
    void exited.then((code) => reject(new Error(`server exited with ${code} before start-up:\n${stdout}\n${stderr}`)))
  })
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    banner,
    curl: banner.filter((l) => l.startsWith('curl ')).map(parseCurl),
    adminToken: /^Admin token: +(\S+)/.exec(banner.find((l) => l.startsWith('Admin token:')) ?? '')?.[1],
    demoKey: /^Demo API key: +([A-Za-z0-9]{10}-[A-Za-z0-9]{21})$/.exec(banner.find((l) => l.startsWith('Demo API key:')) ?? '')?.[1],
    stop: async (signal = 'SIGTERM') => {
      child.kill(signal)
      return { code: await exited, stdout, stderr }
    }
  }
}

/** Each non-banner line of the output, parsed: they must all be pino JSON. */
export function logLines (stdout: string): Array<Record<string, unknown>> {
  const lines = stdout.split('\n')
  const first = lines.indexOf(RULE)
  const last = lines.indexOf(RULE, first + 1)
  return [...lines.slice(0, first), ...lines.slice(last + 1)].filter((l) => l !== '').map((l) => JSON.parse(l))
}
