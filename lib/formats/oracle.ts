import type { Column, Entity, Row } from '../host/dataset-source.js'
import { archiveBody, archiveDownload, archiveFileNames, type ArchiveEntry } from './archive.js'
import type { DownloadFormat, DownloadSpec } from './types.js'
import { delimitedRows, entityChunks, rowWriter, separated, type CellWriter } from './rows.js'
import { isNotNull } from './sql.js'
import { binaryValue, booleanValue, canonicalText } from './values.js'

// oracle-loader: schema.sql (Oracle DDL), then per entity <entity>.dat (the
// rows) and <entity>.ctl (the SQL*Loader control file). The .ctl comes after
// its .dat so that each CHAR(n) can be sized to the longest value written.
//
// .dat: one record per row, LF-terminated, comma-separated; every text,
// json and timestamp value is enclosed in double quotes with quotes doubled
// (FIELDS CSV WITH EMBEDDED keeps newlines inside them). NULL is an empty
// field; the empty string is "" -- and Oracle loads both as NULL, since it
// has no empty VARCHAR2. Booleans are 1/0, binary is hex (Oracle converts
// character data to RAW/BLOB as hex), numbers are plain decimal text ('.'
// as the decimal point, so load with NLS_NUMERIC_CHARACTERS '.,').
// CHARACTERSET AL32UTF8: Oracle's "UTF8" is CESU-8, which has no 4-byte
// sequences, so emoji would not survive it.

/** Oracle takes quoted identifiers up to 128 bytes, without '"' or NUL. */
export function oracleIdentifier (name: string): string {
  if (name.includes('"') || name.includes('\0') || Buffer.byteLength(name) > 128) {
    throw new Error(`The name "${name.slice(0, 40)}" cannot be an Oracle identifier (no '"', at most 128 bytes)`)
  }
  return '"' + name + '"'
}

function oracleType (column: Column): string {
  switch (column.type) {
    case 'integer': return 'NUMBER(10)'
    case 'bigint': return 'NUMBER(19)'
    // NUMBER holds 38 digits; beyond that only text keeps the value exact.
    case 'decimal': return column.precision <= 38 ? `NUMBER(${column.precision},${column.scale})` : `VARCHAR2(${column.precision + 2} CHAR)`
    case 'float': return 'BINARY_DOUBLE'
    case 'text':
      if (column.maxLength !== undefined && column.maxLength <= 4000) return `VARCHAR2(${column.maxLength} CHAR)`
      // A LOB cannot be a key column.
      return column.primaryKey === true ? 'VARCHAR2(4000 CHAR)' : 'CLOB'
    case 'boolean': return `NUMBER(1) CHECK (${oracleIdentifier(column.name)} IN (0, 1))`
    case 'date': return 'DATE'
    case 'timestamp': return column.withTimeZone === true ? 'TIMESTAMP(6) WITH TIME ZONE' : 'TIMESTAMP(6)'
    case 'binary': return 'BLOB'
    case 'json': return 'CLOB'
  }
}

export function oracleCreateTable (entity: Entity): string {
  const lines = entity.columns.map((c) => `  ${oracleIdentifier(c.name)} ${oracleType(c)}${isNotNull(c) ? ' NOT NULL' : ''}`)
  const key = entity.columns.filter((c) => c.primaryKey === true)
  if (key.length > 0) lines.push(`  PRIMARY KEY (${key.map((c) => oracleIdentifier(c.name)).join(', ')})`)
  return `CREATE TABLE ${oracleIdentifier(entity.name)} (\n${lines.join(',\n')}\n);\n`
}

/** Oracle DDL for the entities (schema.sql, and `meta=ddl` with `format=oracle-loader`). */
export function oracleDdl (entities: readonly Entity[]): string {
  return '-- Oracle DDL written by fastify-data-endpoints; run it before the SQL*Loader control files.\n\n' +
    entities.map(oracleCreateTable).join('\n')
}

export const DATE_MASK = 'YYYY-MM-DD'
export const TIMESTAMP_MASK = 'YYYY-MM-DD HH24:MI:SS.FF'
export const TIMESTAMP_TZ_MASK = 'YYYY-MM-DD HH24:MI:SS.FF TZH:TZM'

/** The longest field (in UTF-16 units, quotes doubled) written per column, to size CHAR(n). */
type Widths = number[]

function datCell (column: Column, widths: Widths, index: number): CellWriter {
  const text = canonicalText(column)
  const track = (s: string): string => {
    if (s.length > widths[index]) widths[index] = s.length
    return s
  }
  switch (column.type) {
    case 'boolean': return (v) => { const b = booleanValue(v); return b === null ? '' : b ? '1' : '0' }
    case 'text': case 'json': return (v) => { const s = text(v); return s === null ? '' : '"' + track(s.replaceAll('"', '""')) + '"' }
    case 'binary': return (v) => {
      const b = binaryValue(v)
      if (b === null) return ''
      const hex = b.toString('hex')
      return hex === '' ? '""' : track(hex)
    }
    case 'decimal': return (v) => { const s = text(v); return s === null ? '' : track(s) }
    case 'timestamp': {
      const zone = column.withTimeZone === true ? ' +00:00' : ''
      // canonical 'YYYY-MM-DDTHH:MM:SS.fff[Z]' -> 'YYYY-MM-DD HH:MM:SS.fff[ +00:00]'
      return (v) => {
        const s = text(v)
        return s === null ? '' : '"' + s.slice(0, 10) + ' ' + s.slice(11, zone === '' ? undefined : -1) + zone + '"'
      }
    }
    default: return (v) => text(v) ?? '' // integer, bigint, float, date: short, nothing to enclose
  }
}

/** The .dat writer of an entity, and the widths it records as it goes. */
export function datRowWriter (entity: Entity): { write: (row: Row) => string, widths: Widths } {
  const widths: Widths = entity.columns.map(() => 0)
  const cells = entity.columns.map((c, i) => datCell(c, widths, i))
  return { write: rowWriter(entity, cells, separated(cells.length, ','), '\n'), widths }
}

function fieldSpec (column: Column, width: number): string {
  const name = oracleIdentifier(column.name)
  switch (column.type) {
    case 'date': return `${name} DATE "${DATE_MASK}"`
    case 'timestamp': return column.withTimeZone === true
      ? `${name} TIMESTAMP WITH TIME ZONE "${TIMESTAMP_TZ_MASK}"`
      : `${name} TIMESTAMP "${TIMESTAMP_MASK}"`
    // A delimited field is 255 bytes unless declared longer. UTF-8 takes at
    // most 3 bytes per UTF-16 unit; hex binary is 2 ASCII bytes per byte.
    case 'text': case 'json': return `${name} CHAR(${Math.max(255, width * 3)})`
    default: return `${name} CHAR(${Math.max(255, width)})`
  }
}

/** The SQL*Loader control file for one entity's .dat file. */
export function controlFile (entity: Entity, datFile: string, widths: Widths): string {
  return [
    '-- SQL*Loader control file written by fastify-data-endpoints; run schema.sql first.',
    'LOAD DATA',
    'CHARACTERSET AL32UTF8',
    `INFILE '${datFile}'`,
    `INTO TABLE ${oracleIdentifier(entity.name)}`,
    'FIELDS CSV WITH EMBEDDED TERMINATED BY \',\' OPTIONALLY ENCLOSED BY \'"\'',
    'TRAILING NULLCOLS',
    '(',
    entity.columns.map((c, i) => '  ' + fieldSpec(c, widths[i])).join(',\n'),
    ')',
    ''
  ].join('\n')
}

function entityEntries (spec: DownloadSpec, entity: Entity, fileName: string): ArchiveEntry[] {
  const { write, widths } = datRowWriter(entity)
  return [
    {
      name: `${fileName}.dat`,
      content: () => entityChunks(spec, entity, delimitedRows(write, '', ''))
    },
    // Produced after the .dat is written, when the widths are known.
    { name: `${fileName}.ctl`, content: async function * () { yield controlFile(entity, `${fileName}.dat`, widths) } }
  ]
}

/** `oracle-loader`: schema.sql plus <entity>.dat and <entity>.ctl per entity. */
export const oracleLoaderFormat: DownloadFormat = (spec) => {
  const schema = oracleDdl(spec.entities) // checks every identifier before anything is sent
  const names = archiveFileNames(spec.entities)
  const entries: ArchiveEntry[] = [
    { name: 'schema.sql', content: async function * () { yield schema } },
    ...spec.entities.flatMap((entity, i) => entityEntries(spec, entity, names[i]))
  ]
  return archiveDownload(spec, 'oracle-loader', archiveBody(entries, spec))
}
