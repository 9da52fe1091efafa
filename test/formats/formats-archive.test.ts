import { randomBytes } from 'node:crypto'
import { createWriteStream } from 'node:fs'
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pipeline } from 'node:stream/promises'
import t, { type Test } from 'tap'
import yauzl from 'yauzl'
import { archiveFileNames, tarArchive, zipArchive, type ArchiveEntry } from '../../lib/formats/archive.js'
import { TarSpool } from '../../lib/formats/tar-spool.js'
import { collect, readTar, readZip } from '../format-readers.js'

// The archive writers on their own: entries produced one at a time and only
// as fast as the archive is read, ZIP64, tar spooling and its clean-up.

interface Probe { chunks: number, closed: boolean, started: number[] }

/** An entry of `chunks` chunks of 1 KiB (endless when undefined) that records what it handed out. */
function entry (name: string, probe: Probe, index: number, chunks?: number): ArchiveEntry {
  return {
    name,
    content: async function * () {
      probe.started.push(index)
      try {
        for (let i = 0; chunks === undefined || i < chunks; i++) {
          probe.chunks++
          // random, so compression cannot hide how much was produced
          yield `${name}:${i}:${randomBytes(500).toString('hex')}\n`
        }
      } finally {
        probe.closed = true
      }
    }
  }
}

/** A spool in a temporary folder, with entries over `memoryPerEntry` going to files; closed after the test. */
async function spoolFor (t: Test, memoryPerEntry: number): Promise<TarSpool> {
  const dir = await mkdtemp(join(tmpdir(), 'fde-tar-test-'))
  const spool = new TarSpool({ directory: dir, maxBytes: 64 * 1024 * 1024, maxWaitMs: 1000, memoryPerEntry })
  t.teardown(async () => {
    await spool.close()
    await rm(dir, { recursive: true, force: true })
  })
  return spool
}

/** Tells the archive its response has started, so a shortage would wait rather than fail. */
const sent = (): boolean => true

/** The files in the spool's folder (none when it was never made). */
async function spoolFiles (spool: TarSpool): Promise<string[]> {
  return readdir(spool.folder).catch(() => [])
}

/** Waits up to 5 s for the spool's files and budget to go. */
async function spoolEmptied (spool: TarSpool): Promise<boolean> {
  const end = Date.now() + 5000
  const empty = async (): Promise<boolean> => (await spoolFiles(spool)).length === 0 && spool.usage().reservedBytes === 0
  while (!(await empty()) && Date.now() < end) await new Promise((resolve) => setTimeout(resolve, 10))
  return empty()
}

t.test('file names: unsafe characters replaced, collisions told apart regardless of case', async (t) => {
  const names = archiveFileNames(['a/b', '..', 'C:\\x', 'tab\there', "it's", 'Sales', 'sales', 'a_b', 'ünï 😀'].map((name) => ({ name, columns: [] })))
  t.same(names, ['a_b', '..', 'C__x', 'tab_here', 'it_s', 'Sales', 'sales~2', 'a_b~2', 'ünï 😀'])
})

t.test('zip: entries start one after the other, and an endless entry is read only as fast as the zip', async (t) => {
  const probe: Probe = { chunks: 0, closed: false, started: [] }
  const zip = zipArchive([entry('endless.txt', probe, 0), entry('never.txt', probe, 1, 1)])
  let read = 0
  for await (const chunk of zip) {
    read += (chunk as Buffer).length
    if (read > 256 * 1024) break // leaving the loop destroys the stream
  }
  await new Promise((resolve) => setTimeout(resolve, 50))
  t.ok(probe.chunks < 2000, `${probe.chunks} KiB produced for ${read} bytes read`)
  t.ok(probe.closed, 'the entry generator was closed')
  t.same(probe.started, [0], 'the second entry never started')
})

t.test('zip: archive contents in order, readable with yauzl', async (t) => {
  const probe: Probe = { chunks: 0, closed: false, started: [] }
  const files = await readZip(await collect(zipArchive([entry('a.txt', probe, 0, 3), entry('dir-less ü.txt', probe, 1, 0)])))
  t.same([...files.keys()], ['a.txt', 'dir-less ü.txt'])
  t.equal(files.get('a.txt')?.toString().split('\n').length, 4)
  t.equal(files.get('dir-less ü.txt')?.length, 0)
})

// yazl looks for the next entry from the start of its list, so 65,546 entries
// cost about a minute of CPU: opt-in, like the 4 GiB case.
const SLOW = process.env.FORMATS_SLOW_TESTS === '1' ? false : 'slow: set FORMATS_SLOW_TESTS=1 to run'
const ZIP64_TIMEOUTS = { entries: 10 * 60_000, size: 20 * 60_000 }
// tap stops a whole file after .taprc's 600 s, before either test's own
// timeout: when they run, the file asks the runner for room for both and the
// rest of the file (the root test's setTimeout tells the runner).
if (SLOW === false) t.setTimeout(ZIP64_TIMEOUTS.entries + ZIP64_TIMEOUTS.size + 10 * 60_000)

t.test('zip: more than 65,535 entries switch to ZIP64', { skip: SLOW, timeout: ZIP64_TIMEOUTS.entries }, async (t) => {
  const count = 65_536 + 10
  const entries = Array.from({ length: count }, (_, i): ArchiveEntry => ({
    name: `e${i}.csv`,
    content: async function * () { yield `${i}\r\n` }
  }))
  const zip = await collect(zipArchive(entries))
  t.ok(zip.includes(Buffer.from([0x50, 0x4b, 0x06, 0x06])), 'has a ZIP64 end of central directory record')
  const files = await readZip(zip)
  t.equal(files.size, count)
  t.equal(files.get(`e${count - 1}.csv`)?.toString(), `${count - 1}\r\n`)
})

t.test('zip: an entry past 4 GiB is ZIP64', { skip: SLOW, timeout: ZIP64_TIMEOUTS.size }, async (t) => {
  const size = 4 * 1024 ** 3 + 5 * 1024 ** 2
  const block = Buffer.alloc(1024 * 1024, 'a')
  const dir = await mkdtemp(join(tmpdir(), 'fde-zip64-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const file = join(dir, 'big.zip')
  await pipeline(zipArchive([{ name: 'big.bin', content: async function * () { for (let n = 0; n < size; n += block.length) yield block } }]), createWriteStream(file))
  const zipped = await stat(file)
  const read = await new Promise<number>((resolve, reject) => {
    yauzl.open(file, { lazyEntries: true }, (err, zip) => {
      if (err !== null || zip === undefined) return reject(err)
      zip.on('entry', (e: yauzl.Entry) => zip.openReadStream(e, (err, s) => {
        if (err !== null || s === undefined) return reject(err)
        let n = 0
        s.on('data', (c: Buffer) => { n += c.length })
        s.on('end', () => resolve(n))
        s.on('error', reject)
      }))
      zip.readEntry()
    })
  })
  t.equal(read, size, `${size} bytes back from a ${zipped.size}-byte zip`)
})

t.test('tar: an entry over the memory limit goes through a temporary file, removed afterwards', async (t) => {
  const spool = await spoolFor(t, 10_000)
  const probe: Probe = { chunks: 0, closed: false, started: [] }
  let spooled = false
  let reserved = 0
  const watched: ArchiveEntry = {
    name: 'big.txt',
    content: async function * () {
      yield * entry('big.txt', probe, 0, 100).content()
      // The spool file exists while the entry is being spooled, with its budget.
      spooled = (await spoolFiles(spool)).length > 0
      reserved = spool.usage().reservedBytes
    }
  }
  const long = `${'ü'.repeat(60)}/${'n'.repeat(120)}.txt`
  const tarball = await collect(tarArchive([watched, entry(long, probe, 1, 2)], { spool, responseStarted: sent }))
  t.ok(spooled, 'the entry went to a file')
  t.ok(reserved >= 100 * 1000, `${reserved} bytes of budget held for it`)
  const files = await readTar(tarball)
  t.same([...files.keys()], ['big.txt', long], 'long and non-ASCII names survive (pax headers)')
  t.equal(files.get('big.txt')?.toString().split('\n').length, 101)
  t.same(await spoolFiles(spool), [], 'the spool file is gone')
  t.equal(spool.usage().reservedBytes, 0, 'and its budget is back')
})

t.test('tar: a spooled entry comes back byte for byte, text and binary, across many reads', async (t) => {
  const spool = await spoolFor(t, 1000)
  const everyByte = Buffer.from(Array.from({ length: 256 }, (_, i) => i))
  const text = 'ü€😀 "quoted", line\r\n'
  const parts: Array<string | Buffer> = []
  for (let i = 0; i < 2000; i++) parts.push(i % 2 === 0 ? text.repeat(20) : everyByte)
  const expected = Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : p)))
  t.ok(expected.length > 4 * 64 * 1024, 'larger than several reads of the spool file')
  const tarball = await collect(tarArchive([{ name: 'mixed.bin', content: async function * () { yield * parts } }], { spool, responseStarted: sent }))
  const files = await readTar(tarball)
  t.ok(files.get('mixed.bin')?.equals(expected), 'same bytes')
  t.same(await spoolFiles(spool), [], 'the spool file is gone')
})

t.test('tar: a download destroyed while spooling closes the entry and removes the spool file', async (t) => {
  const spool = await spoolFor(t, 1000)
  const probe: Probe = { chunks: 0, closed: false, started: [] }
  const tarball = tarArchive([entry('endless.txt', probe, 0)], { spool, responseStarted: sent })
  tarball.resume()
  while (probe.chunks < 500) await new Promise((resolve) => setImmediate(resolve))
  t.ok((await spoolFiles(spool)).length > 0, 'spooling to disk')
  tarball.destroy()
  t.ok(await spoolEmptied(spool), 'the spool file and its budget are gone')
  t.ok(probe.closed, 'the entry generator was closed')
})

t.test('tar: a download destroyed while an entry streams out ends the archive, not the process', async (t) => {
  const spool = await spoolFor(t, 1000)
  // Each entry is spooled whole, then streamed out: big enough that the
  // reader stops half-way through the first, with a second still to come.
  const big = (name: string): ArchiveEntry => ({ name, content: async function * () { for (let i = 0; i < 200; i++) yield 'x'.repeat(10_000) } })
  const tarball = tarArchive([big('a.txt'), big('b.txt')], { spool, responseStarted: sent })
  let read = 0
  for await (const chunk of tarball) {
    read += (chunk as Buffer).length
    if (read > 100_000) break // destroys the archive, as a client that leaves does
  }
  t.ok(read < 2_000_000, 'stopped half-way through the first entry')
  // An unheard 'error' on the entry would have ended this process by now.
  t.ok(await spoolEmptied(spool), 'the spool file and its budget are gone')
})

t.test('tar: a failing entry fails the archive and removes the spool file', async (t) => {
  const spool = await spoolFor(t, 1000)
  const failing: ArchiveEntry = {
    name: 'f.txt',
    content: async function * () {
      yield 'x'.repeat(5000)
      throw new Error('entry failed')
    }
  }
  await t.rejects(collect(tarArchive([failing], { spool, responseStarted: sent })), { message: 'entry failed' })
  t.ok(await spoolEmptied(spool), 'the spool file and its budget are gone')
})

t.test('tar: closing the spool stops a download still spooling and removes the folder', async (t) => {
  const spool = await spoolFor(t, 1000)
  const probe: Probe = { chunks: 0, closed: false, started: [] }
  const tarball = tarArchive([entry('endless.txt', probe, 0)], { spool, responseStarted: sent })
  const failed = new Promise<Error>((resolve) => tarball.once('error', resolve))
  tarball.resume()
  while (probe.chunks < 500) await new Promise((resolve) => setImmediate(resolve))
  t.ok((await spoolFiles(spool)).length > 0, 'spooling to disk')
  await spool.close()
  t.match(await failed, { message: 'The server closed during the download' }, 'the download fails visibly')
  t.ok(probe.closed, 'the entry generator was closed')
  t.equal(spool.usage().reservedBytes, 0, 'no budget held')
  t.same(await readdir(join(spool.folder, '..')), [], 'the spool folder is gone')
})
