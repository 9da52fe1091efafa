import t from 'tap'
import type { Column } from '../../lib/index.js'
import { FORMATS } from '../../lib/formats/index.js'
import { csvField, csvRowWriter } from '../../lib/formats/csv.js'
import { datasetOf, specOf } from '../format-fixtures.js'
import { collect, parseCsv, readZip } from '../format-readers.js'

// csv-zip's RFC 4180 rules, value by value.

t.test('a field is quoted only when it must be; "" is the empty string', async (t) => {
  t.equal(csvField('plain'), 'plain')
  t.equal(csvField(''), '""')
  t.equal(csvField('a,b'), '"a,b"')
  t.equal(csvField('say "hi"'), '"say ""hi"""')
  t.equal(csvField('line\r\nbreak'), '"line\r\nbreak"')
  t.equal(csvField('cr\ronly'), '"cr\ronly"')
  t.equal(csvField(' spaced\t'), ' spaced\t', 'spaces and tabs are data, not syntax')
  t.equal(csvField('back\\slash'), 'back\\slash')
})

t.test('rows: NULL is an empty unquoted field, records end with CRLF', async (t) => {
  const columns: Column[] = [
    { name: 'text', type: 'text' }, { name: 'n', type: 'integer' }, { name: 'ok', type: 'boolean' },
    { name: 'bytes', type: 'binary' }, { name: 'doc', type: 'json' }
  ]
  const write = csvRowWriter({ name: 'e', columns })
  t.equal(write([null, null, null, null, null]), ',,,,\r\n')
  t.equal(write(['', 0, false, new Uint8Array(0), '']), '"",0,false,"",""""""\r\n')
  t.equal(write(['x', -5, true, new Uint8Array([1, 2, 3]), { a: [1, ','] }]), 'x,-5,true,AQID,"{""a"":[1,"",""]}"\r\n')
})

t.test('the header names the columns, quoted as needed; no BOM', async (t) => {
  const columns: Column[] = [{ name: 'id', type: 'integer' }, { name: 'last, first', type: 'text' }, { name: 'say "x"', type: 'text' }]
  const zip = await collect(FORMATS['csv-zip'](specOf(datasetOf('d', [{ name: 'people', columns, rows: [[1, 'Doe, J.', null]] }]))).body)
  const csv = (await readZip(zip)).get('people.csv') as Buffer
  t.equal(csv.toString('utf8'), 'id,"last, first","say ""x"""\r\n1,"Doe, J.",\r\n')
  t.same(parseCsv(csv.toString('utf8')), [['id', 'last, first', 'say "x"'], ['1', 'Doe, J.', null]])
})
