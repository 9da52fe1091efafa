import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'

/**
 * Node's flag for the profiled process. With --perf-prof, V8 writes each
 * compiled function, with its address and the time, to jit-<pid>.dump (and
 * perf inject writes a file per function beside it) in the process's
 * folder: start it in a temporary one. `perf inject --jit` then names each
 * sample's frame after the code that was at its address when the sample
 * was taken. The map of --perf-basic-prof has no times: V8 frees code and
 * compiles new code into the same addresses, and perf named such frames
 * after whatever was there first (10-17 µs a request went to fast-uri's
 * module body, which runs once, at load; 2026-11-27).
 */
export const PERF_NODE_ARGS = ['--perf-prof']

/**
 * Samples process `pid` for `seconds` at `frequency` a second into `data`.
 * Async: a load that this process makes meanwhile goes on.
 */
export async function recordPerf (pid: number, data: string, seconds: number, frequency: number): Promise<void> {
  // -k 1: the monotonic clock, which the jit dump's times use.
  const record = spawn('perf', ['record', '-k', '1', '-F', String(frequency), '-g', '-p', String(pid), '-o', data, '--', 'sleep', String(seconds)], { stdio: 'ignore' })
  const [status] = await once(record, 'exit') as [number | null]
  if (status !== 0) throw new Error('perf record failed: is linux-perf installed?')
}

/**
 * The samples of a process's main thread in a `perf record -g` file: one
 * stack per sample, innermost frame first, each frame its symbol name (its
 * address dropped). The main thread is the one with the most samples; the
 * others are V8's and libuv's helpers.
 */
export function mainThreadStacks (perfData: string): string[][] {
  // JIT frames named from the process's jit dump, if it wrote one (PERF_NODE_ARGS).
  const injected = spawnSync('perf', ['inject', '--jit', '-i', perfData, '-o', `${perfData}.jit`], { stdio: 'ignore' })
  if (injected.status !== 0) throw new Error('perf inject --jit failed')
  const script = spawnSync('perf', ['script', '-i', `${perfData}.jit`, '-F', 'tid,ip,sym'], { maxBuffer: 1 << 30, encoding: 'utf8' })
  // perf script prints a line with the thread id, then one frame per line, then a blank line.
  const byThread = new Map<string, string[][]>()
  let frames: string[] = []
  for (const line of script.stdout.split('\n')) {
    if (/^\s*\d+\s*$/.test(line)) {
      frames = []
      const thread = byThread.get(line.trim()) ?? []
      thread.push(frames)
      byThread.set(line.trim(), thread)
    } else if (line.trim() !== '') {
      frames.push(line.trim().replace(/^[0-9a-f]+ /, ''))
    }
  }
  return [...byThread.values()].sort((a, b) => b.length - a.length)[0] ?? []
}
