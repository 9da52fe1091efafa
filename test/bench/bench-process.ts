import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { createInterface } from 'node:readline'

// The bench server (bench-server.ts, compiled) as a child process, and the
// management calls the benchmarks make to it.

export interface BenchServer { child: ChildProcess, base: string }

const ADMIN = { 'x-permissions': 'ManageAPIKeys', 'content-type': 'application/json' }

/** Starts the compiled server at `entry` and waits for its port. */
export async function startBenchServer (entry: string, options: { env?: Record<string, string>, nodeArgs?: string[], cwd?: string } = {}): Promise<BenchServer> {
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), entry], {
    cwd: options.cwd,
    env: { ...process.env, ...options.env }, stdio: ['ignore', 'pipe', 'inherit']
  })
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream })
  for await (const line of lines) {
    const match = /^port (\d+)$/.exec(line)
    if (match !== null) return { child, base: `http://127.0.0.1:${match[1]}` }
  }
  throw new Error('bench server did not start')
}

export async function stopBenchServer (server: BenchServer): Promise<void> {
  server.child.kill('SIGTERM')
  await once(server.child, 'exit')
}

/** A management call; throws on an error status. */
export async function call (base: string, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(base + path, { method, headers: ADMIN, body: body === undefined ? undefined : JSON.stringify(body) })
  if (res.status >= 400) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`)
  return res.status === 204 ? null : res.json()
}

export async function newKeys (base: string, n: number): Promise<Array<{ id: string, key: string }>> {
  const keys = []
  for (let i = 0; i < n; i++) keys.push(await call(base, 'POST', '/api-keys/acme/shop/keys', { purpose: `bench ${i}` }))
  return keys
}
