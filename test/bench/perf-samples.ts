import { spawnSync } from 'node:child_process'

/**
 * The samples of a process's main thread in a `perf record -g` file: one
 * stack per sample, innermost frame first, each frame its symbol name (its
 * address dropped). The main thread is the one with the most samples; the
 * others are V8's and libuv's helpers.
 */
export function mainThreadStacks (perfData: string): string[][] {
  const script = spawnSync('perf', ['script', '-i', perfData, '-F', 'tid,ip,sym'], { maxBuffer: 1 << 30, encoding: 'utf8' })
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
