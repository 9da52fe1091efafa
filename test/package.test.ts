import { execFile, spawn } from 'node:child_process'
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import t from 'tap'
import { duckdbQuery, parquetFolder } from './columnar-readers.js'
import { ROOT } from './example-process.js'

// The package as an integrator gets it: `npm pack` (whose prepack builds
// dist/), the tarball installed into a fresh host project next to a plain
// fastify, and a host written against the installed package: type-checked by
// tsc as a user's project sees the published declarations, then run. A key is
// made through the management API, a dataset is downloaded over real HTTP,
// with the installed client and with the installed `data-endpoints` command.

const MANIFEST = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  name: string
  version: string
  main: string
  types: string
  exports: unknown
  bin: Record<string, string>
}
const repoRequire = createRequire(join(ROOT, 'package.json'))
const ADMIN_TOKEN = 'packed-host-admin-token'
const DATASET_PATH = '/api/acme/shop/model/1/dataset/1'
// better-sqlite3 builds from source here (minutes); bcrypt loads a prebuilt
// binary from its own package. Their compiled binaries are taken from this
// checkout, so the host gets the same versions (see installHost).
const NATIVE_MODULES = ['better-sqlite3', 'bcrypt']
// What the host's dataset serves, and what every download must bring back.
const ROWS_JSON = { greetings: [{ id: 1, text: 'hello' }, { id: 2, text: 'grüße, "quoted"\nand a second line' }, { id: 3, text: null }] }

// ---- the host project's files, as an integrator writes them ----

const HOST_TS = `import Fastify from 'fastify'
import dataEndpoints, {
  MANAGE_API_KEYS, SqliteStorage, type DatasetSource, type Job, type JobSource, type PipelineRunner
} from 'fastify-data-endpoints'

const rows: unknown[][] = ${JSON.stringify(ROWS_JSON.greetings.map((row) => [row.id, row.text]))}
const jobs = new Map<string, Job>()

const datasets: DatasetSource = {
  async getDataset (ref) {
    if (ref.modelSequence !== 1 || ref.resourceSequence !== 1) return null
    return {
      name: 'greetings',
      entities: [{
        name: 'greetings',
        columns: [{ name: 'id', type: 'integer', primaryKey: true }, { name: 'text', type: 'text', nullable: true }]
      }],
      rows: () => rows
    }
  }
}
const pipelines: PipelineRunner = {
  async getPipeline (ref) {
    if (ref.resourceSequence !== 1) return null
    return {
      name: 'refresh',
      async start (jobId) {
        const now = new Date()
        jobs.set(jobId, { id: jobId, type: 'pipeline', status: 'succeeded', createdAt: now, updatedAt: now })
      }
    }
  }
}
const jobSource: JobSource = { getJob: async (jobId) => jobs.get(jobId) ?? null }

const app = Fastify()
await app.register(dataEndpoints, {
  storage: new SqliteStorage({ filename: 'data-endpoints.db' }),
  datasets,
  pipelines,
  jobs: jobSource,
  getPermissions: (request) => request.headers.authorization === 'Bearer ' + process.env.ADMIN_TOKEN ? [MANAGE_API_KEYS] : []
})
const address = await app.listen({ port: 0, host: '127.0.0.1' })
console.log(JSON.stringify({ address }))

process.once('SIGTERM', () => {
  // app.dataEndpoints comes from the package's 'fastify' module augmentation.
  void app.dataEndpoints.flushUsage().then(() => app.close()).then(() => process.exit(0))
})

// The declarations are real types, not any: each line below must fail to compile.
export function wrongUses (): void {
  // @ts-expect-error: storage is required
  void Fastify().register(dataEndpoints, { datasets, pipelines, jobs: jobSource, getPermissions: () => [] })
  // @ts-expect-error: SqliteStorage needs a filename
  void new SqliteStorage({})
}
`

const CONSUMER_TS = `import { DataEndpointsClient } from 'fastify-data-endpoints/client'

const client = new DataEndpointsClient({ apiKey: process.env.DATA_ENDPOINTS_API_KEY, retryDelays: [] })
const download = await client.downloadDataset(process.argv[2], { format: 'json' })
let body = ''
for await (const chunk of download.body.setEncoding('utf8')) body += chunk
console.log(JSON.stringify({ contentType: download.contentType, body: JSON.parse(body) }))

export function wrongUses (): void {
  // @ts-expect-error: no such format
  void client.downloadDataset('x', { format: 'xml' })
}
`

// The user's own compiler settings: NodeNext resolution (so the exports map
// and its "types" conditions decide), strict, and the package's declarations
// checked too (skipLibCheck off), as a strict user's project checks them.
const HOST_TSCONFIG = {
  compilerOptions: {
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    strict: true,
    skipLibCheck: false,
    types: ['node']
  },
  files: ['host.ts', 'consumer.ts']
}

// ---- processes ----

interface Run {
  code: number | null
  stdout: string
  stderr: string
}

// What the test's own npm and tap set must not reach the processes started
// here: npm_config_local_prefix would point a nested npm at this checkout,
// and tap's NODE_OPTIONS loads its hooks into every node.
const CLEAN_ENV = Object.fromEntries(Object.entries(process.env).filter(([name]) =>
  !/^npm_/i.test(name) && name !== 'INIT_CWD' && name !== 'NODE_OPTIONS'))

async function run (command: string, args: string[], cwd: string, env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(command, args, { cwd, env: { ...CLEAN_ENV, ...env }, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err === null) resolve({ code: 0, stdout, stderr })
      // A numeric code is the exit status; any other error (ENOENT, a signal) says what went wrong itself.
      else resolve(typeof err.code === 'number' ? { code: err.code, stdout, stderr } : { code: 1, stdout, stderr: `${stderr}${err.message}` })
    })
  })
}

function must (what: string, result: Run): Run {
  if (result.code !== 0) throw new Error(`${what} failed (exit ${result.code}):\n${result.stdout}\n${result.stderr}`)
  return result
}

// ---- pack and install, once each; every test below awaits what it needs ----

interface Packed {
  tarball: string
  files: Array<{ path: string, mode: number }>
}

const work = mkdtempSync(join(tmpdir(), 'fde-package-'))
t.teardown(() => rmSync(work, { recursive: true, force: true }))

function once<T> (make: () => Promise<T>): () => Promise<T> {
  let made: Promise<T> | undefined
  return () => (made ??= make())
}

const STALE_FILE = 'dist/stale-from-an-earlier-build.js'

const pack = once(async (): Promise<Packed> => {
  // A file an earlier build left behind: prepack must clean it away.
  mkdirSync(join(ROOT, 'dist'), { recursive: true })
  writeFileSync(join(ROOT, STALE_FILE), 'export {}\n')
  const { stdout } = must('npm pack', await run('npm', ['pack', '--json', '--pack-destination', work], ROOT))
  const [info] = JSON.parse(stdout.slice(stdout.indexOf('['))) as Array<{ filename: string, files: Packed['files'] }>
  return { tarball: join(work, info.filename), files: info.files }
})

const installHost = once(async (): Promise<string> => {
  const { tarball } = await pack()
  const host = join(work, 'host')
  mkdirSync(host)
  // better-sqlite3 would build from source for minutes: install without
  // scripts, pin the native modules to this checkout's versions, and copy in
  // the binaries this checkout built for them.
  const native = NATIVE_MODULES.map((name) => {
    const dir = join(repoRequire.resolve(`${name}/package.json`), '..')
    return { name, dir, version: (JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version: string }).version }
  })
  writeFileSync(join(host, 'package.json'), JSON.stringify({
    name: 'packed-host',
    private: true,
    type: 'module',
    overrides: Object.fromEntries(native.map(({ name, version }) => [name, version]))
  }, null, 2))
  must('npm install', await run('npm', [
    'install', tarball, 'fastify@5', '--prefer-offline', '--ignore-scripts', '--no-audit', '--no-fund'
  ], host))
  for (const { name, dir, version } of native) {
    const installed = join(host, 'node_modules', name)
    const installedVersion = (JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')) as { version: string }).version
    if (installedVersion !== version) throw new Error(`${name} ${installedVersion} installed, ${version} expected`)
    const release = join(dir, 'build', 'Release')
    if (!existsSync(release)) continue
    mkdirSync(join(installed, 'build', 'Release'), { recursive: true })
    for (const file of readdirSync(release).filter((f) => f.endsWith('.node'))) {
      copyFileSync(join(release, file), join(installed, 'build', 'Release', file))
    }
  }
  writeFileSync(join(host, 'tsconfig.json'), JSON.stringify(HOST_TSCONFIG, null, 2))
  writeFileSync(join(host, 'host.ts'), HOST_TS)
  writeFileSync(join(host, 'consumer.ts'), CONSUMER_TS)
  return host
})

// The repo's own tsc compiles the host project, as the user's would.
const compileHost = once(async (): Promise<{ host: string, tsc: Run }> => {
  const host = await installHost()
  const tsc = repoRequire.resolve('typescript/bin/tsc')
  return { host, tsc: await run(process.execPath, [tsc, '-p', 'tsconfig.json'], host) }
})

// ---- the tarball's contents ----

/** Every file path the manifest names: main, types, bin and each target of exports. */
function namedFiles (): string[] {
  const targets: string[] = []
  const walk = (value: unknown): void => {
    if (typeof value === 'string') targets.push(value)
    else if (value !== null && typeof value === 'object') Object.values(value).forEach(walk)
  }
  walk(MANIFEST.exports)
  return [...new Set([MANIFEST.main, MANIFEST.types, ...Object.values(MANIFEST.bin), ...targets])]
    .map((file) => file.replace(/^\.\//, ''))
}

function sourceFiles (dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.ts'))
    .map((file) => join(dir, file))
}

t.test('npm pack builds a fresh dist/ and ships every file the manifest names', async (t) => {
  const { files } = await pack()
  const paths = files.map((f) => f.path)
  t.ok(namedFiles().includes('dist/client/index.d.ts'), 'the walk reaches the conditions nested in exports')
  for (const file of namedFiles()) t.ok(paths.includes(file), `${file} is in the tarball`)
  for (const source of sourceFiles('lib')) {
    const built = relative('lib', source).replace(/\.ts$/, '')
    t.ok(paths.includes(`dist/${built}.js`) && paths.includes(`dist/${built}.d.ts`), `${source} ships as .js and .d.ts`)
  }
  for (const page of readdirSync(join(ROOT, 'lib', 'ui'))) t.ok(paths.includes(`dist/ui/${page}`), `the management page's ${page} ships`)
  t.notOk(paths.includes(STALE_FILE), 'a file left in dist/ by an earlier build does not ship')
  t.same(paths.filter((p) => !p.startsWith('dist/') && !['package.json', 'README.md', 'LICENSE'].includes(p)), [],
    'nothing outside dist/ but package.json, README.md and LICENSE')
  t.same(paths.filter((p) => p.endsWith('.ts') && !p.endsWith('.d.ts')), [], 'no TypeScript sources')
  // Maps would point at lib/*.ts, which does not ship.
  t.same(paths.filter((p) => p.endsWith('.map')), [], 'no source or declaration maps')
  for (const bin of Object.values(MANIFEST.bin)) {
    const entry = files.find((f) => f.path === bin.replace(/^\.\//, ''))
    t.ok(entry !== undefined && (entry.mode & 0o111) !== 0, `${bin} is executable in the tarball`)
  }
})

t.test('the tarball installs into a fresh host project next to fastify', async (t) => {
  const host = await installHost()
  const installed = join(host, 'node_modules', MANIFEST.name)
  t.equal((JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')) as { version: string }).version, MANIFEST.version)
  for (const file of namedFiles()) t.ok(existsSync(join(installed, file)), `${file} is installed`)
  for (const [name, file] of Object.entries(MANIFEST.bin)) {
    t.match(readFileSync(join(installed, file), 'utf8'), /^#!\/usr\/bin\/env node\n/, `${file} starts with a node shebang`)
    t.ok(existsSync(join(host, 'node_modules', '.bin', name)), `npm linked the ${name} command`)
  }
  const fastify = createRequire(join(host, 'package.json'))
  t.equal(fastify.resolve('fastify'), createRequire(join(installed, 'package.json')).resolve('fastify'),
    'the plugin and the host share one fastify')
})

t.test('the installed declarations type-check in the host, under NodeNext and strict', async (t) => {
  const { host, tsc } = await compileHost()
  t.equal(tsc.code, 0, tsc.stdout + tsc.stderr)
  t.ok(existsSync(join(host, 'host.js')) && existsSync(join(host, 'consumer.js')), 'tsc emitted the host and the consumer')
})

t.test('the installed plugin serves an authenticated download; its client and command fetch it too', async (t) => {
  // tsc emits despite type errors: the run is tried whatever the check said.
  const { host, tsc } = await compileHost()
  if (!existsSync(join(host, 'host.js'))) must('tsc', tsc)

  const child = spawn(process.execPath, ['host.js'], { cwd: host, env: { ...CLEAN_ENV, ADMIN_TOKEN }, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  const exited = new Promise<number | null>((resolve) => child.once('close', resolve))
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  const address = await new Promise<string>((resolve, reject) => {
    const check = (): void => {
      const line = stdout.split('\n').find((l) => l.startsWith('{"address"'))
      if (line !== undefined) resolve((JSON.parse(line) as { address: string }).address)
    }
    child.stdout.on('data', check)
    void exited.then((code) => reject(new Error(`the host exited with ${code}:\n${stdout}\n${stderr}`)))
  })

  const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }
  const created = await fetch(`${address}/api-keys/acme/shop/keys`, { method: 'POST', headers: admin, body: JSON.stringify({ purpose: 'packed tarball' }) })
  t.equal(created.status, 201, 'a key made through the management API')
  const { id, key } = await created.json() as { id: string, key: string }
  const assigned = await fetch(`${address}/api-keys/acme/shop/endpoints/1/dataset/1`, { method: 'PUT', headers: admin, body: JSON.stringify({ keyIds: [id] }) })
  t.equal(assigned.status, 201, 'the key assigned to the dataset')

  const url = `${address}${DATASET_PATH}`
  const refused = await fetch(`${url}?format=json`)
  t.equal(refused.status, 403)
  t.same(await refused.json(), { message: 'Not authorized' }, 'no key, no data')
  const download = await fetch(`${url}?format=json`, { headers: { authorization: `Bearer ${key}` } })
  t.equal(download.status, 200)
  t.same(await download.json(), ROWS_JSON, 'the dataset over real HTTP')
  // Its encoding thread runs from dist/, loaded by its URL rather than imported.
  const parquet = await fetch(`${url}?format=parquet`, { headers: { authorization: `Bearer ${key}` } })
  t.equal(parquet.status, 200)
  const file = Buffer.from(await parquet.arrayBuffer())
  const save = await parquetFolder(t)
  t.same(await duckdbQuery(`SELECT id, text FROM '${await save('greetings.parquet', file)}' ORDER BY id`),
    ROWS_JSON.greetings.map((g) => [g.id, g.text]), 'the same rows as Parquet, encoded by the packed worker')
  const page = await fetch(`${address}/api-keys/ui/`)
  t.equal(page.status, 200)
  t.match(page.headers.get('content-type'), /^text\/html/, 'the management page ships and is served')

  const consumer = await run(process.execPath, ['consumer.js', url], host, { DATA_ENDPOINTS_API_KEY: key })
  t.equal(consumer.code, 0, consumer.stderr)
  const consumed = JSON.parse(consumer.stdout) as { contentType: string, body: unknown }
  t.match(consumed.contentType, /^application\/json/)
  t.same(consumed.body, ROWS_JSON, "the same through 'fastify-data-endpoints/client'")

  const command = join(host, 'node_modules', '.bin', Object.keys(MANIFEST.bin)[0])
  const got = await run(command, ['get', url, '--format', 'json'], host, { DATA_ENDPOINTS_API_KEY: key })
  t.equal(got.code, 0, got.stderr)
  t.same(JSON.parse(got.stdout), ROWS_JSON, 'the same through the installed data-endpoints command')
  const version = await run(command, ['--version'], host)
  t.equal(version.stdout.trim(), MANIFEST.version, 'the command finds its package.json')
  const help = await run(command, ['--help'], host)
  t.equal(help.code, 0)
  t.match(help.stdout, /^Usage: data-endpoints <command>/)

  child.kill('SIGTERM')
  t.equal(await exited, 0, `the host closes cleanly: ${stderr}`)
})
