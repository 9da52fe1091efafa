import { spawn } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { buildExampleApp } from '../../examples/app.js'
import { createDemoKey } from '../../examples/demo-key.js'
import { exampleDatabaseFile, openExampleDatabase } from '../../examples/sample-datasets.js'
import { DataEndpointsClient, UsageError } from '../../lib/client/index.js'
import { parseCsv } from '../format-readers.js'
import { tempDir } from '../example-process.js'

// columns, where and since through the client and the CLI, against the
// example: the nightly job of issue 27, one request a night, the bound kept
// in a file for the next.

const EVENTS = '/api/acme/shop/model/1/dataset/2'

async function example (t: Test): Promise<{ base: string, key: string, dataDir: string }> {
  const dataDir = tempDir(t)
  const app = await buildExampleApp({ dataDir, adminToken: 'admin', eventsRows: 500, logLevel: 'silent' })
  t.teardown(() => app.close())
  const demo = await createDemoKey(app, 'admin')
  if (demo === null) throw new Error('no demo key')
  await app.inject({ method: 'PUT', url: '/api-keys/acme/shop/endpoints/1/dataset/2', headers: { authorization: 'Bearer admin' }, payload: { keyIds: [demo.id] } })
  return { base: await app.listen({ port: 0, host: '127.0.0.1' }), key: demo.key, dataDir }
}

async function cli (args: string[], key: string): Promise<{ code: number | null, stdout: string, stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'lib/cli.ts', ...args], {
    env: { PATH: process.env.PATH, DATA_ENDPOINTS_API_KEY: key },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve))
  return { code, stdout, stderr }
}

t.test('the client sends columns, where and since, and gives Data-Changes-Until back', async (t) => {
  const { base, key } = await example(t)
  const client = new DataEndpointsClient({ apiKey: key, baseUrl: base })
  const first = await client.downloadDataset(EVENTS, { format: 'csv', columns: ['id', 'kind'], where: "kind = 'click' and id <= 100" })
  const rows = parseCsv((await first.body.toArray()).join(''))
  t.same(rows[0], ['id', 'kind'])
  t.ok(rows.length > 1 && rows.slice(1).every((r) => r[1] === 'click' && Number(r[0]) <= 100))
  t.equal(first.changesUntil, '500')
  const after = await client.downloadDataset(EVENTS, { format: 'csv', columns: ['id'], since: '490' })
  t.same(parseCsv((await after.body.toArray()).join('')).slice(1).map((r) => r[0]), ['491', '492', '493', '494', '495', '496', '497', '498', '499', '500'])
  await t.rejects(client.downloadDataset(EVENTS, { columns: [] }), UsageError)
  await t.rejects(client.downloadDataset(EVENTS, { columns: ['a,b'] }), UsageError)
  await t.rejects(client.downloadDataset(EVENTS, { where: ' ' }), UsageError)
  await t.rejects(client.downloadDataset(EVENTS, { where: 'payload is null' }), { status: 400, message: 'Invalid where: column "payload" cannot be filtered by this dataset' })
})

t.test('the nightly job: --since-file keeps the bound, each run gets what changed since, as Parquet of three columns', async (t) => {
  const { base, key, dataDir } = await example(t)
  const state = join(tempDir(t), 'events.since')
  const out = join(tempDir(t), 'events.csv')
  const nightly = async (): Promise<string[]> => {
    const run = await cli(['get', `${base}${EVENTS}`, '--format', 'csv', '--columns', 'id,ts,kind', '--since-file', state, '--output', out], key)
    t.equal(run.code, 0, run.stderr)
    const rows = parseCsv(readFileSync(out, 'utf8'))
    t.same(rows[0], ['id', 'ts', 'kind'])
    return rows.slice(1).map((r) => r[0] as string)
  }
  t.notOk(existsSync(state))
  t.equal((await nightly()).length, 500, 'the first run: everything')
  t.equal(readFileSync(state, 'utf8'), '500\n', 'the bound stored')
  t.same(await nightly(), [], 'nothing changed: nothing downloaded')
  const writer = openExampleDatabase(exampleDatabaseFile(dataDir))
  writer.prepare("INSERT INTO events (id, ts, kind, value, payload) VALUES (501, '2025-01-01T00:00:00.000Z', 'click', 1, NULL), (502, '2025-01-01T00:00:01.000Z', 'error', NULL, NULL)").run()
  writer.close()
  t.same(await nightly(), ['501', '502'], 'the next run: the new rows')
  t.equal(readFileSync(state, 'utf8'), '502\n')

  const parquet = await cli(['get', `${base}${EVENTS}`, '--format', 'parquet', '--columns', 'id,ts,kind', '--where', "kind = 'error'", '--since', '500', '--output', `${out}.parquet`], key)
  t.equal(parquet.code, 0, parquet.stderr)
  t.ok(readFileSync(`${out}.parquet`).subarray(0, 4).equals(Buffer.from('PAR1')))

  const both = await cli(['get', `${base}${EVENTS}`, '--since', '1', '--since-file', state], key)
  t.equal(both.code, 2)
  t.match(both.stderr, /give --since or --since-file, not both/)
  const refused = await cli(['get', `${base}${EVENTS}`, '--where', 'id = 1 or id = 2'], key)
  t.equal(refused.code, 1)
  t.match(refused.stderr, /Invalid where: expected and/)
})
