import { spawnSync } from 'node:child_process'
import type { Readable } from 'node:stream'
import Database from 'better-sqlite3'
import type { Test } from 'tap'
import tar from 'tar-stream'
import yauzl from 'yauzl'

// Strict readers for what the formats write, used to read downloads back:
// an RFC 4180 parser that keeps NULL (empty unquoted) apart from "" (empty
// quoted), a reader for the SQL*Loader .dat files, and zip and tar readers
// built on yauzl and tar-stream; SQLite loaders through better-sqlite3 and
// through the sqlite3 command-line shell.

export async function collect (body: Readable | AsyncIterable<Uint8Array | string>): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of body) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.from(chunk as Uint8Array))
  return Buffer.concat(chunks)
}

/**
 * Parses delimited text with double-quote enclosures ("" inside for a
 * quote). An empty unquoted field is null, a quoted one a string. Throws on
 * anything malformed (a bare quote, text after a closing quote, a record end
 * other than `recordEnd` outside quotes, a missing final record end).
 */
export function parseDelimited (text: string, recordEnd: '\r\n' | '\n'): Array<Array<string | null>> {
  const records: Array<Array<string | null>> = []
  let record: Array<string | null> = []
  let i = 0
  while (i < text.length) {
    let field: string | null
    if (text[i] === '"') {
      let value = ''
      i++
      for (;;) {
        const q = text.indexOf('"', i)
        if (q === -1) throw new Error('unterminated quoted field')
        value += text.slice(i, q)
        if (text[q + 1] === '"') { value += '"'; i = q + 2 } else { i = q + 1; break }
      }
      field = value
    } else {
      let end = i
      while (end < text.length && text[end] !== ',' && text[end] !== '\r' && text[end] !== '\n') {
        if (text[end] === '"') throw new Error(`bare quote in unquoted field at ${end}`)
        end++
      }
      field = end === i ? null : text.slice(i, end)
      i = end
    }
    record.push(field)
    if (text[i] === ',') { i++; continue }
    if (text.startsWith(recordEnd, i)) {
      records.push(record)
      record = []
      i += recordEnd.length
      continue
    }
    throw new Error(`unexpected ${JSON.stringify(text.slice(i, i + 5))} at ${i} (expected , or the record end)`)
  }
  if (record.length > 0) throw new Error('last record has no record end')
  return records
}

/** RFC 4180: CRLF record ends. */
export function parseCsv (text: string): Array<Array<string | null>> {
  return parseDelimited(text, '\r\n')
}

/** The entries of a zip, in archive order, read with yauzl (ZIP64 included). */
export function readZip (zip: Buffer): Promise<Map<string, Buffer>> {
  return new Promise((resolve, reject) => {
    yauzl.fromBuffer(zip, { lazyEntries: true, strictFileNames: true, validateEntrySizes: true }, (err, file) => {
      if (err !== null || file === undefined) return reject(err)
      const entries = new Map<string, Buffer>()
      file.on('error', reject)
      file.on('end', () => resolve(entries))
      file.on('entry', (entry: yauzl.Entry) => {
        file.openReadStream(entry, (err, stream) => {
          if (err !== null || stream === undefined) return reject(err)
          collect(stream).then((data) => { entries.set(entry.fileName, data); file.readEntry() }, reject)
        })
      })
      file.readEntry()
    })
  })
}

/** The entries of a tar, in archive order, read with tar-stream's extract. */
export async function readTar (archive: Buffer): Promise<Map<string, Buffer>> {
  const extract = tar.extract()
  const entries = new Map<string, Buffer>()
  const done = (async () => {
    for await (const entry of extract) {
      const chunks: Buffer[] = []
      for await (const chunk of entry) chunks.push(chunk as Buffer)
      const data = Buffer.concat(chunks)
      if (data.length !== entry.header.size) throw new Error(`tar entry ${entry.header.name}: size mismatch`)
      entries.set(entry.header.name, data)
    }
  })()
  extract.end(archive)
  await done
  return entries
}

export function readArchive (type: 'zip' | 'tar', data: Buffer): Promise<Map<string, Buffer>> {
  return type === 'zip' ? readZip(data) : readTar(data)
}

/** Runs a script in a fresh in-memory SQLite database (64-bit integers as BigInt). */
export function loadSqlite (script: string): Database.Database {
  const db = new Database(':memory:')
  db.defaultSafeIntegers(true)
  db.exec(script)
  return db
}

let cliProblem: string | null | undefined // probed once per process: null when it runs

/**
 * Whether the sqlite3 command-line shell runs. Without it, records one
 * skipped assertion that says how to get it; with
 * DATA_ENDPOINTS_REQUIRE_SQLITE3=1 (CI sets it) it fails instead, as
 * pgAvailable does for PostgreSQL.
 */
export function sqliteCliAvailable (t: Test): boolean {
  if (cliProblem === undefined) {
    const probe = spawnSync('sqlite3', ['-version'], { encoding: 'utf8' })
    cliProblem = probe.status === 0 ? null : probe.error?.message ?? probe.stderr.trim()
  }
  if (cliProblem === null) return true
  const message = `sqlite3 shell not runnable (${cliProblem}); install it (apt-get install sqlite3) to run these`
  if (process.env.DATA_ENDPOINTS_REQUIRE_SQLITE3 === '1') t.fail(message + ' (required: DATA_ENDPOINTS_REQUIRE_SQLITE3=1)')
  else t.pass(message, { skip: true })
  return false
}

/**
 * Loads a script into the database file `file` as `sqlite3 file < script`
 * does (stopping at the first error), then opens it with better-sqlite3,
 * read-only, 64-bit integers as BigInt.
 */
export function loadSqliteCli (script: string, file: string): Database.Database {
  const run = spawnSync('sqlite3', ['-bail', file], { input: script, encoding: 'utf8' })
  if (run.status !== 0 || run.stderr !== '') throw new Error(`sqlite3 exited with ${run.status}: ${run.stderr}`)
  const db = new Database(file, { readonly: true, fileMustExist: true })
  db.defaultSafeIntegers(true)
  return db
}
