import t from 'tap'
import type { Column, Row } from '../../lib/index.js'
import { FORMATS } from '../../lib/formats/index.js'
import { controlFile, DATE_MASK, datRowWriter, oracleDdl, TIMESTAMP_MASK, TIMESTAMP_TZ_MASK } from '../../lib/formats/oracle.js'
import { ALL_TYPES, datasetOf, specOf } from '../format-fixtures.js'
import { collect, parseDelimited, readArchive } from '../format-readers.js'

// oracle-loader, checked as text (no Oracle here): the DDL types, the control
// file clauses, CHAR(n) sizes that follow the data, date masks that match
// what the .dat holds, and the .dat quoting rules.

const entity = { name: 'all', columns: ALL_TYPES }

t.test('schema.sql: Oracle types, NOT NULL, boolean CHECK, primary key', async (t) => {
  t.equal(oracleDdl([entity]), [
    '-- Oracle DDL written by fastify-data-endpoints; run it before the SQL*Loader control files.',
    '',
    'CREATE TABLE "all" (',
    '  "id" NUMBER(10) NOT NULL,',
    '  "big" NUMBER(19),',
    '  "amount" NUMBER(12,2),',
    '  "long decimal" VARCHAR2(42 CHAR),',
    '  "ratio" BINARY_DOUBLE,',
    '  "note" CLOB,',
    '  "code \'v\'" VARCHAR2(20 CHAR),',
    '  "Flag" NUMBER(1) CHECK ("Flag" IN (0, 1)),',
    '  "day" DATE,',
    '  "local time" TIMESTAMP(6),',
    '  "at" TIMESTAMP(6) WITH TIME ZONE,',
    '  "bytes" BLOB,',
    '  "doc" CLOB,',
    '  PRIMARY KEY ("id")',
    ');',
    ''
  ].join('\n'))
  t.match(oracleDdl([{ name: 'k', columns: [{ name: 'code', type: 'text', primaryKey: true }] }]), /"code" VARCHAR2\(4000 CHAR\) NOT NULL/,
    'a key column cannot be a CLOB')
  t.throws(() => oracleDdl([{ name: 'a"b', columns: [{ name: 'x', type: 'integer' }] }]), /cannot be an Oracle identifier/)
  t.throws(() => oracleDdl([{ name: 'ok', columns: [{ name: 'é'.repeat(65), type: 'integer' }] }]), /at most 128 bytes/)
})

t.test('the control file: LOAD DATA, AL32UTF8, INFILE, CSV WITH EMBEDDED, TRAILING NULLCOLS, masks', async (t) => {
  const { write, widths } = datRowWriter(entity)
  write([1, 2n, '1.00', '3.0000000000', 0.5, 'x'.repeat(1000), 'short', true, '2024-01-01', new Date(0), new Date(0), new Uint8Array(300), { a: 1 }])
  t.equal(controlFile(entity, 'all.dat', widths), [
    '-- SQL*Loader control file written by fastify-data-endpoints; run schema.sql first.',
    'LOAD DATA',
    'CHARACTERSET AL32UTF8',
    "INFILE 'all.dat'",
    'INTO TABLE "all"',
    "FIELDS CSV WITH EMBEDDED TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"'",
    'TRAILING NULLCOLS',
    '(',
    '  "id" CHAR(255),',
    '  "big" CHAR(255),',
    '  "amount" CHAR(255),',
    '  "long decimal" CHAR(255),',
    '  "ratio" CHAR(255),',
    '  "note" CHAR(3000),',
    '  "code \'v\'" CHAR(255),',
    '  "Flag" CHAR(255),',
    '  "day" DATE "YYYY-MM-DD",',
    '  "local time" TIMESTAMP "YYYY-MM-DD HH24:MI:SS.FF",',
    '  "at" TIMESTAMP WITH TIME ZONE "YYYY-MM-DD HH24:MI:SS.FF TZH:TZM",',
    '  "bytes" CHAR(600),',
    '  "doc" CHAR(255)',
    ')',
    ''
  ].join('\n'))
})

/** A regular expression for what an Oracle datetime mask accepts (the elements we use). */
function maskPattern (mask: string): RegExp {
  const elements: Record<string, string> = {
    YYYY: '\\d{4}', MM: '\\d{2}', DD: '\\d{2}', HH24: '\\d{2}', MI: '\\d{2}', SS: '\\d{2}', FF: '\\d{1,9}', TZH: '[+-]\\d{2}', TZM: '\\d{2}'
  }
  const source = mask.replace(/YYYY|HH24|TZH|TZM|MM|DD|MI|SS|FF|[^A-Z]/g, (part) => elements[part] ?? part.replace(/[.+]/, '\\$&'))
  return new RegExp(`^${source}$`)
}

t.test('dates and timestamps in the .dat match the masks of the control file', async (t) => {
  const rows: Row[] = [[1, null, null, null, null, null, null, null, '0001-01-01', new Date('9999-12-31T23:59:59.999Z'), '2024-02-29T12:00:00.123456+01:00', null, null]]
  const dat = (await readArchive('zip', await collect(FORMATS['oracle-loader'](specOf(datasetOf('d', [{ ...entity, rows }]))).body))).get('all.dat')
  const [record] = parseDelimited(dat?.toString('utf8') ?? '', '\n')
  t.equal(record[8], '0001-01-01')
  t.match(record[8], maskPattern(DATE_MASK))
  t.equal(record[9], '9999-12-31 23:59:59.999')
  t.match(record[9], maskPattern(TIMESTAMP_MASK))
  t.equal(record[10], '2024-02-29 11:00:00.123456 +00:00')
  t.match(record[10], maskPattern(TIMESTAMP_TZ_MASK))
})

t.test('.dat: NULL is an empty field, the empty string "" (Oracle loads both as NULL)', async (t) => {
  const columns: Column[] = [{ name: 'a', type: 'text' }, { name: 'b', type: 'text' }, { name: 'c', type: 'binary' }, { name: 'd', type: 'boolean' }]
  const { write } = datRowWriter({ name: 'e', columns })
  t.equal(write([null, '', new Uint8Array(0), false]), ',"","",0\n')
  t.equal(write(['say "hi"\nbye', ' padded ', new Uint8Array([0xab]), true]), '"say ""hi""\nbye"," padded ",ab,1\n',
    'text always enclosed, so blanks and newlines survive')
})
