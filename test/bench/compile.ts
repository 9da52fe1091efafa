import { execFileSync } from 'node:child_process'
import { copyFileSync, cpSync, symlinkSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

// Benchmarks measure compiled JavaScript under plain node, as a host runs it:
// under tsx every module load and error stack goes through its loader hooks.

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..')

/**
 * Compiles `entry` (a .ts file under `root`: this repo, or another checkout
 * of it such as a worktree) and its imports into `dir`; returns the compiled
 * entry's path. The packages are always this repo's.
 */
export function compileForBench (entry: string, dir: string, root = REPO): string {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc')
  execFileSync(process.execPath, [tsc, '--outDir', dir, '--rootDir', root, '--module', 'nodenext', '--moduleResolution', 'nodenext',
    '--target', 'es2022', '--esModuleInterop', '--skipLibCheck', '--noCheck', '--types', 'node', entry,
    // Loaded by its URL, not imported, so named here: the Parquet encoders' worker.
    join(root, 'lib/formats/parquet-worker.ts')], { stdio: 'inherit' })
  symlinkSync(join(REPO, 'node_modules'), join(dir, 'node_modules'), 'dir')
  copyFileSync(join(root, 'package.json'), join(dir, 'package.json'))
  cpSync(join(root, 'lib/ui'), join(dir, 'lib/ui'), { recursive: true }) // the management page's files
  return join(dir, relative(root, entry).replace(/\.ts$/, '.js'))
}
