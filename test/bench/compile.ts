import { execFileSync } from 'node:child_process'
import { copyFileSync, cpSync, symlinkSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

// Benchmarks measure compiled JavaScript under plain node, as a host runs it:
// under tsx every module load and error stack goes through its loader hooks.

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..')

/** Compiles `entry` (a .ts file of this repo) and its imports into `dir`; returns the compiled entry's path. */
export function compileForBench (entry: string, dir: string): string {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc')
  execFileSync(process.execPath, [tsc, '--outDir', dir, '--rootDir', REPO, '--module', 'nodenext', '--moduleResolution', 'nodenext',
    '--target', 'es2022', '--esModuleInterop', '--skipLibCheck', '--noCheck', '--types', 'node', entry,
    // Loaded by its URL, not imported, so named here: the Parquet encoders' worker.
    join(REPO, 'lib/formats/parquet-worker.ts')], { stdio: 'inherit' })
  symlinkSync(join(REPO, 'node_modules'), join(dir, 'node_modules'), 'dir')
  copyFileSync(join(REPO, 'package.json'), join(dir, 'package.json'))
  cpSync(join(REPO, 'lib/ui'), join(dir, 'lib/ui'), { recursive: true }) // the management page's files
  return join(dir, relative(REPO, entry).replace(/\.ts$/, '.js'))
}
