import fc from 'fast-check'
import { rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { Readable } from 'node:stream'
import type { Column, Dataset, DatasetSource, Entity, ResourceRef, Row, RowsOptions } from '../lib/index.js'
import type { ArchiveType, DownloadSpec } from '../lib/formats/index.js'
import { DownloadAbort } from '../lib/formats/download-abort.js'
import { Pace } from '../lib/formats/pace.js'
import { TarSpool } from '../lib/formats/tar-spool.js'
import { ParquetEncoders } from '../lib/formats/parquet-encoders.js'
import { DEFAULTS } from '../lib/options.js'

// Datasets for the format tests: an entity with every column type, random
// rows full of values that break naive exporters (fast-check), and row
// sources that count what they hand out, fail on purpose or never end.

/** Every logical type, with names that need quoting in every dialect. */
export const ALL_TYPES: Column[] = [
  { name: 'id', type: 'integer', primaryKey: true, nullable: false },
  { name: 'big', type: 'bigint' },
  { name: 'amount', type: 'decimal', precision: 12, scale: 2 },
  { name: 'long decimal', type: 'decimal', precision: 40, scale: 10 },
  { name: 'ratio', type: 'float' },
  { name: 'note', type: 'text' },
  { name: "code 'v'", type: 'text', maxLength: 20 },
  { name: 'Flag', type: 'boolean' },
  { name: 'day', type: 'date' },
  { name: 'local time', type: 'timestamp' },
  { name: 'at', type: 'timestamp', withTimeZone: true },
  { name: 'bytes', type: 'binary' },
  { name: 'doc', type: 'json' }
]

/** An entity name with a comma, quote, semicolon, space and non-ASCII (no '"': Oracle refuses it). */
export const ODD_ENTITY = "odd name, 'quoted'; ünï 😀"

/** Builds a dataset over fixed rows; `rows()` honours limit and signal like a real source. */
export function datasetOf (name: string, entities: Array<Entity & { rows: Row[] }>): Dataset {
  return {
    name,
    entities: entities.map(({ name, columns }) => ({ name, columns })),
    async * rows (entity, { limit, signal }) {
      const e = entities.find((x) => x.name === entity)
      if (e === undefined) throw new Error(`no entity ${entity}`)
      for (const row of limit === undefined ? e.rows : e.rows.slice(0, limit)) {
        if (signal.aborted) return
        yield row
      }
    }
  }
}

// The spool of the formats called directly, as the plugin's would be; its
// folder (made only if an entry outgrows memory) goes when the process ends.
const tarSpool = new TarSpool({ directory: tmpdir(), ...DEFAULTS.tarSpool })
process.once('exit', () => { rmSync(tarSpool.folder, { recursive: true, force: true }) })

/** A DownloadSpec for calling a format directly. */
// Likewise the Parquet encoders: their threads never keep the process alive.
export const parquetEncoders = new ParquetEncoders({ threads: 2, maxWaiting: 64, batchBytes: DEFAULTS.columnarBatchBytes })

export function specOf (dataset: Dataset, options: { limit?: number, archiveType?: ArchiveType, entities?: readonly Entity[], batchBytes?: number } = {}): DownloadSpec {
  return {
    dataset,
    entities: options.entities ?? dataset.entities,
    limit: options.limit,
    archiveType: options.archiveType ?? 'zip',
    tarSpool,
    responseStarted: false,
    abort: new DownloadAbort(),
    pace: new Pace(),
    columnar: { batchBytes: options.batchBytes ?? DEFAULTS.columnarBatchBytes, encoders: parquetEncoders, codec: 'SNAPPY' }
  }
}

// ---- random rows --------------------------------------------------------

const NASTY = ['"', "'", ',', ';', '\r', '\n', '\r\n', '\t', '\\', '\\\\', '--', '/*', '*/', 'é', 'ß', '中文', '😀', '👩‍👩‍👧', ' ', '', 'NULL', '\u2028', '\uFEFF', 'a']

/** Text with quotes, separators, CR/LF, tabs, backslashes, non-ASCII, emoji; never U+0000 (no SQL dialect carries it). */
export const nastyText = fc.oneof(
  fc.array(fc.constantFrom(...NASTY), { maxLength: 12 }).map((parts) => parts.join('')),
  fc.string({ unit: 'binary', maxLength: 30 }).map((s) => s.replaceAll('\0', '')),
  fc.constant('')
)

const MIN_DATE = new Date('0001-01-01T00:00:00.000Z')
const MAX_DATE = new Date('9999-12-31T23:59:59.999Z')
const anyDate = fc.oneof(
  fc.date({ min: MIN_DATE, max: MAX_DATE, noInvalidDate: true }),
  fc.constantFrom(MIN_DATE, MAX_DATE, new Date(0), new Date('1899-12-31T23:59:59.999Z'), new Date('2000-02-29T12:00:00Z'))
)

function decimalOf (precision: number, scale: number): fc.Arbitrary<string> {
  const max = 10n ** BigInt(precision) - 1n
  return fc.bigInt(-max, max).map((n) => {
    const digits = (n < 0n ? -n : n).toString().padStart(scale + 1, '0')
    const text = scale === 0 ? digits : `${digits.slice(0, -scale)}.${digits.slice(-scale)}`
    return (n < 0n ? '-' : '') + text
  })
}

const nullable = <T>(arb: fc.Arbitrary<T>): fc.Arbitrary<T | null> => fc.option(arb, { nil: null, freq: 5 })

/** A row of ALL_TYPES with id `id`: the values as a source hands them over. */
export function allTypesRow (id: number): fc.Arbitrary<Row> {
  return fc.tuple(
    fc.constant(id),
    nullable(fc.bigInt(-(2n ** 63n), 2n ** 63n - 1n)),
    nullable(decimalOf(12, 2)),
    nullable(decimalOf(40, 10)),
    nullable(fc.oneof(fc.double(), fc.constantFrom(Number.MAX_VALUE, Number.MIN_VALUE, -Number.MAX_VALUE, 2 ** 53 + 2, 1e21, 0.1))),
    nullable(nastyText),
    nullable(nastyText.filter((s) => [...s].length <= 20)),
    nullable(fc.boolean()),
    nullable(anyDate.map((d) => d.toISOString().slice(0, 10))),
    nullable(anyDate),
    nullable(anyDate),
    nullable(fc.uint8Array({ maxLength: 40 })),
    nullable(fc.jsonValue({ maxDepth: 2 }))
  )
}

/** 0 to `max` rows of ALL_TYPES with ids 1, 2, ... */
export function allTypesRows (max = 8): fc.Arbitrary<Row[]> {
  return fc.integer({ min: 0, max }).chain((n) => n === 0 ? fc.constant([]) : fc.tuple(...Array.from({ length: n }, (_, i) => allTypesRow(i + 1))))
}

/**
 * What each value must read back as, in a form every reader can produce:
 * numbers as numbers, bigint and decimal as text, timestamps as epoch
 * milliseconds, dates as 'YYYY-MM-DD', binary as hex, json as JSON text,
 * floats that are not finite as null.
 */
export function expectedRow (row: Row): unknown[] {
  return ALL_TYPES.map((column, i) => {
    const v = row[i]
    if (v === null || v === undefined) return null
    switch (column.type) {
      case 'bigint': return String(v)
      case 'float': return Number.isFinite(v) ? (v === 0 ? 0 : v) : null
      case 'timestamp': return (v as Date).getTime()
      case 'binary': return Buffer.from(v as Uint8Array).toString('hex')
      case 'json': return JSON.stringify(v) === 'null' ? null : JSON.stringify(v)
      default: return v
    }
  })
}

// ---- row sources for the streaming tests -------------------------------

export type SourceShape = 'async' | 'sync' | 'stream'

export interface SourceProbe {
  /** rows handed out */
  pulled: number
  /** the source's iterator was closed (finally ran) */
  closed: boolean
  /** the signal it was given had been aborted */
  aborted: boolean
}

export const EVENT_COLUMNS: Column[] = [
  { name: 'id', type: 'integer', primaryKey: true, nullable: false },
  { name: 'kind', type: 'text' },
  { name: 'payload', type: 'text' }
]

function eventRow (i: number): Row {
  return [i, i % 3 === 0 ? 'click' : 'view', `payload ${i}, "quoted", ${'x'.repeat(40)}`]
}

/**
 * A DatasetSource for dataset 1 with one entity `events` of `total` rows,
 * generated on demand. `failAt`: throw when row `failAt` is pulled (0: at
 * once). `shape`: an async generator (the default); a plain generator, as
 * better-sqlite3's iterate() is; or an object-mode Readable, an async
 * iterable that is no generator, as database drivers' row streams are.
 */
export class ProbeDatasets implements DatasetSource {
  readonly probe: SourceProbe = { pulled: 0, closed: false, aborted: false }

  constructor (private readonly total: number, private readonly failAt?: number, private readonly shape: SourceShape = 'async') {}

  async getDataset (ref: ResourceRef): Promise<Dataset | null> {
    if (ref.resourceSequence !== 1) return null
    const { probe, total, failAt } = this
    function * generate (end: number, signal: AbortSignal): Generator<Row, void, undefined> {
      try {
        for (let i = 0; i < end; i++) {
          if (failAt !== undefined && i === failAt) throw new Error('source failed on purpose')
          probe.pulled++
          yield eventRow(i + 1)
        }
      } finally {
        probe.closed = true
        probe.aborted = signal.aborted
      }
    }
    async function * slowly (_entity: string, { limit, signal }: RowsOptions): AsyncGenerator<Row> {
      let i = 0
      for (const row of generate(Math.min(total, limit ?? total), signal)) {
        // A real source waits on I/O now and then.
        if (i++ % 256 === 0) await new Promise((resolve) => setImmediate(resolve))
        yield row
      }
    }
    return {
      name: 'probe',
      entities: [{ name: 'events', columns: EVENT_COLUMNS }],
      rows: {
        sync: (_entity: string, { limit, signal }: RowsOptions) => generate(Math.min(total, limit ?? total), signal),
        async: slowly,
        // Destroying the stream returns the generator it reads.
        stream: (entity: string, options: RowsOptions) => Readable.from(slowly(entity, options), { highWaterMark: 16 })
      }[this.shape]
    }
  }
}
