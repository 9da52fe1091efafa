import { randomBytes } from 'node:crypto'
import { readFileSync, readlinkSync } from 'node:fs'
import { lstat, readdir, rm } from 'node:fs/promises'
import { join } from 'node:path'

// The tar spool folders, named after the process that owns them, so that a
// later start can tell a folder whose owner died (a kill -9 leaves it behind)
// from one whose owner still runs, even when several processes share the
// parent folder:
//
//   fastify-data-endpoints-spool-<pid>-<pid namespace>-<start>-<random>
//
// <pid namespace> is the inode of /proc/self/ns/pid: a pid from another
// namespace (another container sharing the folder) means nothing here, so
// such a folder is never touched. <start> is the process's start time in
// clock ticks since boot (/proc/<pid>/stat): a later process that reuses the
// pid starts later, so a live pid with another start is not the owner. Both
// are 0 where /proc is missing (macOS, Windows); there only the pid is
// checked, and a live pid keeps its folder. <random> tells apart the plugin
// instances of one process.

const NAME = /^fastify-data-endpoints-spool-([1-9][0-9]{0,9})-(0|[1-9][0-9]{0,19})-(0|[1-9][0-9]{0,19})-[0-9a-f]{16}$/

export interface ProcessIdentity {
  pid: number
  /** '0' when unknown */
  namespace: string
  /** '0' when unknown */
  start: string
}

/** The start of process `pid` in clock ticks since boot, or '0' when /proc cannot say. */
function startOf (pid: number): string {
  try {
    // The command name (field 2) may hold spaces and parentheses: count the
    // fields after its closing one. starttime is field 22.
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1')
    const start = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]
    return /^[1-9][0-9]{0,19}$/.test(start) ? start : '0'
  } catch {
    return '0'
  }
}

function pidNamespace (): string {
  try {
    return /^pid:\[([1-9][0-9]{0,19})\]$/.exec(readlinkSync('/proc/self/ns/pid'))?.[1] ?? '0'
  } catch {
    return '0'
  }
}

let self: ProcessIdentity | undefined

/** This process, as spool folder names carry it. */
export function thisProcess (): ProcessIdentity {
  self ??= { pid: process.pid, namespace: pidNamespace(), start: startOf(process.pid) }
  return self
}

/** A new, unguessable folder name owned by this process. */
export function newSpoolFolderName (): string {
  const { pid, namespace, start } = thisProcess()
  return `fastify-data-endpoints-spool-${pid}-${namespace}-${start}-${randomBytes(8).toString('hex')}`
}

/** The owner a spool folder's name gives, or null when the name is not exactly ours. */
export function ownerOf (name: string): ProcessIdentity | null {
  const match = NAME.exec(name)
  return match === null ? null : { pid: Number(match[1]), namespace: match[2], start: match[3] }
}

/** Whether `owner` may still run; true whenever that cannot be ruled out. */
export function ownerRuns (owner: ProcessIdentity, me: ProcessIdentity = thisProcess()): boolean {
  if (owner.namespace !== me.namespace) return true
  if (owner.pid === me.pid) {
    // Our own pid: ours if the start matches; else an earlier process that
    // had this pid (a container's pid 1 after a restart), which is gone.
    return owner.start === me.start || me.start === '0'
  }
  try {
    process.kill(owner.pid, 0)
  } catch (err) {
    // ESRCH: no such process. EPERM: it runs, as another user.
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false
  }
  if (owner.start === '0') return true
  const start = startOf(owner.pid)
  return start === '0' || start === owner.start
}

export interface StaleFolders {
  removed: string[]
  failed: Array<{ name: string, error: Error }>
}

/**
 * Removes the spool folders in `directory` whose owner no longer runs. Only
 * real directories named exactly as ours are considered; anything else
 * (other files, symbolic links, older names) is left alone.
 */
export async function removeStaleSpoolFolders (directory: string): Promise<StaleFolders> {
  const result: StaleFolders = { removed: [], failed: [] }
  let names: string[]
  try {
    names = await readdir(directory)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return result
    throw err
  }
  for (const name of names) {
    const owner = ownerOf(name)
    if (owner === null || ownerRuns(owner)) continue
    const path = join(directory, name)
    try {
      if (!(await lstat(path)).isDirectory()) continue
      await rm(path, { recursive: true, force: true })
      result.removed.push(name)
    } catch (err) {
      result.failed.push({ name, error: err as Error })
    }
  }
  return result
}
