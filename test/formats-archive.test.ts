import { randomBytes } from 'node:crypto'
import { createWriteStream } from 'node:fs'
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pipeline } from 'node:stream/promises'
import t from 'tap'
import yauzl from 'yauzl'
import { archiveFileNames, tarArchive, zipArchive, type ArchiveEntry } from '../lib/formats/archive.js'
import { collect, readTar, readZip } from './format-readers.js'

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

t.test('zip: more than 65,535 entries switch to ZIP64', { skip: SLOW, timeout: 10 * 60_000 }, async (t) => {
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

t.test('zip: an entry past 4 GiB is ZIP64', { skip: SLOW, timeout: 20 * 60_000 }, async (t) => {
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

t.test('tar: an entry over the spool limit goes through a temporary file, removed afterwards', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'fde-tar-test-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const probe: Probe = { chunks: 0, closed: false, started: [] }
  let spooled = false
  const watched: ArchiveEntry = {
    name: 'big.txt',
    content: async function * () {
      yield * entry('big.txt', probe, 0, 100).content()
      // The spool file exists while the entry is being spooled.
      spooled = (await readdir(dir)).length > 0 && (await readdir(join(dir, (await readdir(dir))[0]))).length > 0
    }
  }
  const long = `${'ü'.repeat(60)}/${'n'.repeat(120)}.txt`
  const tarball = await collect(tarArchive([watched, entry(long, probe, 1, 2)], { spoolLimit: 10_000, tmpDir: dir }))
  t.ok(spooled, 'the entry went to a file')
  const files = await readTar(tarball)
  t.same([...files.keys()], ['big.txt', long], 'long and non-ASCII names survive (pax headers)')
  t.equal(files.get('big.txt')?.toString().split('\n').length, 101)
  t.same(await readdir(dir), [], 'the spool directory is gone')
})

t.test('tar: a spooled entry comes back byte for byte, text and binary, across many reads', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'fde-tar-test-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const everyByte = Buffer.from(Array.from({ length: 256 }, (_, i) => i))
  const text = 'ü€😀 "quoted", line\r\n'
  const parts: Array<string | Buffer> = []
  for (let i = 0; i < 2000; i++) parts.push(i % 2 === 0 ? text.repeat(20) : everyByte)
  const expected = Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : p)))
  t.ok(expected.length > 4 * 64 * 1024, 'larger than several reads of the spool file')
  const tarball = await collect(tarArchive([{ name: 'mixed.bin', content: async function * () { yield * parts } }], { spoolLimit: 1000, tmpDir: dir }))
  const files = await readTar(tarball)
  t.ok(files.get('mixed.bin')?.equals(expected), 'same bytes')
  t.same(await readdir(dir), [], 'the spool directory is gone')
})

t.test('tar: a download destroyed while spooling closes the entry and removes the spool', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'fde-tar-test-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const probe: Probe = { chunks: 0, closed: false, started: [] }
  const tarball = tarArchive([entry('endless.txt', probe, 0)], { spoolLimit: 1000, tmpDir: dir })
  tarball.resume()
  while (probe.chunks < 500) await new Promise((resolve) => setImmediate(resolve))
  t.ok((await readdir(dir)).length > 0, 'spooling to disk')
  tarball.destroy()
  const end = Date.now() + 5000
  while ((!probe.closed || (await readdir(dir)).length > 0) && Date.now() < end) await new Promise((resolve) => setTimeout(resolve, 10))
  t.ok(probe.closed, 'the entry generator was closed')
  t.same(await readdir(dir), [], 'the spool directory is gone')
})

t.test('tar: a download destroyed while an entry streams out ends the archive, not the process', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'fde-tar-test-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  // Each entry is spooled whole, then streamed out: big enough that the
  // reader stops half-way through the first, with a second still to come.
  const big = (name: string): ArchiveEntry => ({ name, content: async function * () { for (let i = 0; i < 200; i++) yield 'x'.repeat(10_000) } })
  const tarball = tarArchive([big('a.txt'), big('b.txt')], { spoolLimit: 1000, tmpDir: dir })
  let read = 0
  for await (const chunk of tarball) {
    read += (chunk as Buffer).length
    if (read > 100_000) break // destroys the archive, as a client that leaves does
  }
  t.ok(read < 2_000_000, 'stopped half-way through the first entry')
  // An unheard 'error' on the entry would have ended this process by now.
  const end = Date.now() + 5000
  while ((await readdir(dir)).length > 0 && Date.now() < end) await new Promise((resolve) => setTimeout(resolve, 10))
  t.same(await readdir(dir), [], 'the spool directory is gone')
})

t.test('tar: a failing entry fails the archive and removes the spool', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'fde-tar-test-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const failing: ArchiveEntry = {
    name: 'f.txt',
    content: async function * () {
      yield 'x'.repeat(5000)
      throw new Error('entry failed')
    }
  }
  await t.rejects(collect(tarArchive([failing], { spoolLimit: 1000, tmpDir: dir })), { message: 'entry failed' })
  t.same(await readdir(dir), [])
})
