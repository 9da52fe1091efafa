import pg from 'pg'
import t, { type Test } from 'tap'
import { queryRow } from '../../lib/storage/row-statement.js'
import { pgAvailable } from '../pg.js'

// The key check's statement as a bare pg Submittable (Bind, Execute, Sync;
// Parse once per connection): its row as the text PostgreSQL sent, its
// errors as pg's own, and the connection fit for the next query after each.

const url = await pgAvailable(t)

async function connected (t: Test, config: pg.ClientConfig = {}): Promise<pg.Client> {
  const client = new pg.Client({ ...config, connectionString: url as string })
  await client.connect()
  t.teardown(() => client.end())
  return client
}

/** What each query on `client` was sent as: a bare Submittable of ours, or pg's Query config. */
function sentAs (client: pg.Client): string[] {
  const sent: string[] = []
  const query = client.query.bind(client) as (...args: unknown[]) => unknown
  client.query = ((...args: unknown[]) => {
    const config = args[0] as { submit?: unknown }
    sent.push(typeof config.submit === 'function' ? 'submittable' : 'config')
    return query(...args)
  }) as typeof client.query
  return sent
}

const ROW = 'SELECT $1::int > 1 AS big, $2::text AS note, json_build_array($1::int, $2::text) AS list, NULL::text AS nothing'
const prepared = async (client: pg.Client, name: string): Promise<number> =>
  (await client.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_prepared_statements WHERE name = $1', [name])).rows[0].n

if (url !== null) {
  t.test('the first row as text, each column as PostgreSQL wrote it; the statement parsed once per connection', async (t) => {
    const client = await connected(t)
    const sent = sentAs(client)
    t.same(await queryRow(client, 'fde_row_a', ROW, ['2', 'two'], 5000), ['t', 'two', '[2, "two"]', null])
    t.same(await queryRow(client, 'fde_row_a', ROW, ['1', null], 5000), ['f', null, '[1, null]', null], 'a null value is sent as SQL NULL')
    t.same(sent, ['submittable', 'submittable'], 'each as a bare Submittable, not through pg\'s Query')
    t.equal(await prepared(client, 'fde_row_a'), 1, 'one prepared statement')
    t.same(await queryRow(client, 'fde_row_none', 'SELECT 1 WHERE false', [], 5000), undefined, 'no row: undefined')
    t.same((await client.query('SELECT 1 AS one')).rows, [{ one: 1 }], 'the connection serves pg\'s own queries after it')
  })

  t.test('an error is pg\'s error; the connection serves the next statement, and a statement that failed to parse is parsed again', async (t) => {
    const client = await connected(t)
    await t.rejects(queryRow(client, 'fde_row_div', 'SELECT 1 / $1::int', ['0'], 5000), { code: '22012' }, 'division by zero, from the server')
    t.same(await queryRow(client, 'fde_row_div', 'SELECT 1 / $1::int', ['1'], 5000), ['1'], 'the same statement runs after it')
    await t.rejects(queryRow(client, 'fde_row_bad', 'SELEC 1', [], 5000), { code: '42601' }, 'a syntax error')
    await t.rejects(queryRow(client, 'fde_row_div', 'SELECT 2', [], 5000), /Prepared statements must be unique/, 'a name taken by another text')
    t.same(await queryRow(client, 'fde_row_bad', 'SELECT 1', [], 5000), ['1'], 'a name whose text failed to parse can be parsed again')
  })

  t.test('a statement slower than its timeout rejects; the connection is then closed by the caller', async (t) => {
    const client = await connected(t)
    const started = Date.now()
    // The statement sleeps 10 s; the answer comes at the 100 ms timeout, however loaded the machine.
    await t.rejects(queryRow(client, 'fde_row_sleep', 'SELECT pg_sleep($1::float8)::text', ['10'], 100), /timeout/i)
    t.ok(Date.now() - started < 5000, 'without waiting for the statement')
  })

  t.test('a connection in pg\'s pipeline mode, which refuses Submittables (as pg\'s native client cannot run one), gets the same row through pg\'s Query', async (t) => {
    const client = await connected(t, { pipeline: true } as pg.ClientConfig)
    const sent = sentAs(client)
    t.same(await queryRow(client, 'fde_row_a', ROW, ['2', 'two'], 5000), ['t', 'two', '[2, "two"]', null])
    t.same(await queryRow(client, 'fde_row_a', ROW, ['0', 'zero'], 5000), ['f', 'zero', '[0, "zero"]', null])
    t.same(sent, ['config', 'config'], 'through pg\'s Query')
  })
}
