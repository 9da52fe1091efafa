#!/usr/bin/env node
import { createWriteStream, readFileSync } from 'node:fs'
import { readFile, rename, rm, writeFile } from 'node:fs/promises'
import { Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { parseArgs } from 'node:util'
import { redactKeys } from './keys/api-key.js'
import { redactUrl } from './routes/log-redaction.js'
import {
  DataEndpointsClient, DataEndpointsError, HttpError, JobWaitTimeoutError, UsageError, jsonLinesLogger,
  type ClientLogger, type DataEndpointsClientOptions, type DatasetQuery, type JobInfo
} from './client/index.js'

// The `data-endpoints` command. The key comes from DATA_ENDPOINTS_API_KEY
// only: an argument would sit in shell history and in `ps` output.

const KEY_VARIABLE = 'DATA_ENDPOINTS_API_KEY'
// The management commands' bearer token (the host's getPermissions grants ManageAPIKeys for it).
const TOKEN_VARIABLE = 'DATA_ENDPOINTS_MANAGEMENT_TOKEN'
// 0 done; 1 the request or the job failed; 2 the command line is wrong; 130 interrupted.
const EXIT_FAILED = 1
const EXIT_USAGE = 2
const EXIT_INTERRUPTED = 130

const USAGE = `Usage: data-endpoints <command> <url> [options]

Commands:
  get <endpoint-url>    download a dataset to stdout, or to --output FILE
  link <endpoint-url>   mint a download link (a URL that needs no key) and print it
  run <pipeline-url>    start a pipeline run and print its job reference as JSON
  job <job-url>         print a job's status as JSON
  keys <project-url>    print a project's keys as a JSON array (never their values)
  endpoints <project-url>
                        print a project's endpoints as a JSON array

Options of get:
  --format F            sql (default), json, csv-zip, json-zip, oracle-loader, csv,
                        parquet, parquet-zip or arrow
  --entity E            only the entity (table) E (csv, parquet and arrow need it
                        when the dataset has several)
  --meta M              entities (the entity names) or ddl (the schema) instead of the data
  --limit N             at most N records per entity
  --columns A,B         only these columns, in this order (one entity; the
                        primary key is not added)
  --where EXPR          only the rows that meet EXPR, e.g. "kind = 'click' and
                        id > 100" (one entity; grammar in docs/api.md)
  --since V             only the rows changed after V, a Data-Changes-Until of
                        an earlier download
  --since-file FILE     read --since from FILE when it exists, and write the
                        answer's Data-Changes-Until to FILE once the download is
                        complete: the next run gets what changed meanwhile
  --archive-type T      zip (default) or tar, for csv-zip, json-zip, oracle-loader
                        and parquet-zip
  --output FILE         write to FILE (written whole or not at all) instead of stdout
  --progress            show the progress line (bytes received, of the total when
                        known) on stderr even when it is not a terminal

Options of link (and get's --format, --entity, --meta, --limit, --archive-type,
--columns, --where, --since and --since-file: the link downloads with them):
  --expires D           how long the link lives: 90s, 30m, 2h or 7d (default 1h;
                        at most the server's maxLinkLifetime and the key's expiry)
  --json                print {"id","url","expiresAt"} instead of the URL alone

Options of run:
  --wait                poll the job until it ends, print the final job as JSON;
                        exit 1 if it failed
  --interval S          seconds between polls (default 2)
  --wait-timeout S      give up waiting after S seconds (default 3600)

Options of keys and endpoints (<project-url>: the project under the management
prefix, e.g. https://data.example.com/api-keys/acme/shop; every page is read):
  --search TEXT         only keys whose prefix or purpose holds TEXT, or endpoints
                        whose path or resource name does (A-Z in either case)
  --key-id ID           endpoints: only those this key is assigned to

Common options:
  --timeout S           seconds one attempt may wait for an answer (default 30)
  --allow-http          allow sending the key over plain HTTP to a non-loopback host
  --no-retry            send each request once, never retry it (for a pipeline
                        whose server ignores Idempotency-Key: check the job first)
  --verbose             log every request attempt to stderr, not only failed ones
  -h, --help            show this help
  --version             show the version

The API key is read from ${KEY_VARIABLE}, and the management token of keys and
endpoints from ${TOKEN_VARIABLE}; neither is ever taken from an argument.
Answers 500 and network time-outs are retried after 1, 2, 4, 8 and 16 s
(unless --no-retry); 403, 404, 405 and other statuses are not.
Exit status: 0 success, 1 request or job failed, 2 usage error, 130 interrupted.
`

class UsageProblem extends Error {}

const COMMON = {
  timeout: { type: 'string' },
  'allow-http': { type: 'boolean' },
  'no-retry': { type: 'boolean' },
  verbose: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' }
} as const
/** The download's shaping parameters: `get` sends them, `link` mints a link that carries them. */
const SHAPING = {
  format: { type: 'string' },
  entity: { type: 'string' },
  meta: { type: 'string' },
  limit: { type: 'string' },
  columns: { type: 'string' },
  where: { type: 'string' },
  since: { type: 'string' },
  'since-file': { type: 'string' },
  'archive-type': { type: 'string' }
} as const
const GET_OPTIONS = {
  ...COMMON,
  ...SHAPING,
  output: { type: 'string', short: 'o' },
  progress: { type: 'boolean' }
} as const
const LINK_OPTIONS = {
  ...COMMON,
  ...SHAPING,
  expires: { type: 'string' },
  json: { type: 'boolean' }
} as const
const LIST_OPTIONS = {
  ...COMMON,
  search: { type: 'string' },
  'key-id': { type: 'string' }
} as const
const RUN_OPTIONS = {
  ...COMMON,
  wait: { type: 'boolean' },
  interval: { type: 'string' },
  'wait-timeout': { type: 'string' }
} as const

interface Io {
  stdout: NodeJS.WriteStream
  stderr: NodeJS.WriteStream
  env: NodeJS.ProcessEnv
  signal: AbortSignal
}

function version (): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
  return pkg.version
}

/** Parses the options of one command; never echoes an argument's value (it could be a key). */
function parse<O extends Record<string, { type: 'string' | 'boolean', short?: string }>> (args: string[], options: O) {
  try {
    const parsed = parseArgs({ args, options, allowPositionals: true, strict: true })
    return parsed
  } catch (err) {
    // Only the first sentence: parseArgs goes on about positionals after '--'.
    const message = (err as Error).message.split('. To specify')[0]
    const hint = /api[-_]?key|'--key'/i.test(message) ? ` (the key is read from ${KEY_VARIABLE} only)` : ''
    throw new UsageProblem(message + hint)
  }
}

function oneUrl (positionals: string[], what: string): string {
  if (positionals.length === 0) throw new UsageProblem(`missing <${what}>`)
  // The extra argument is not shown: it could be a key pasted in the wrong place.
  if (positionals.length > 1) throw new UsageProblem(`one <${what}> expected, got ${positionals.length} arguments`)
  return positionals[0]
}

function seconds (name: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback * 1000
  const value = Number(text)
  if (!/^\d+(\.\d+)?$/.test(text) || value <= 0 || value > 365 * 24 * 3600) throw new UsageProblem(`--${name} must be a positive number of seconds`)
  return Math.max(1, Math.round(value * 1000))
}

type CommonValues = { timeout?: string, 'allow-http'?: boolean, 'no-retry'?: boolean, verbose?: boolean }

/** The client options every command's common options set. */
function clientOptions (values: CommonValues, io: Io): DataEndpointsClientOptions {
  // SPEC.md §7.4 log lines, as JSON on stderr: by default only attempts that
  // failed and are retried, so a wait is explained; all of them with --verbose.
  const lines = jsonLinesLogger(io.stderr)
  const logger: ClientLogger = (entry) => {
    if (values.verbose === true || entry.retryInMs !== undefined) lines(entry)
  }
  return {
    timeout: seconds('timeout', values.timeout, 30),
    allowHttp: values['allow-http'] === true,
    retryDelays: values['no-retry'] === true ? [] : undefined,
    logger
  }
}

function clientFor (values: CommonValues, io: Io, needsKey: boolean): DataEndpointsClient {
  const apiKey = io.env[KEY_VARIABLE]
  if (needsKey && (apiKey === undefined || apiKey.trim() === '')) {
    throw new UsageProblem(`set ${KEY_VARIABLE} to the API key`)
  }
  return new DataEndpointsClient({ ...clientOptions(values, io), apiKey: needsKey ? apiKey : undefined })
}

function formatBytes (n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let value = n
  let unit = 0
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024
    unit++
  }
  return unit === 0 ? `${n} B` : `${value.toFixed(1)} ${units[unit]}`
}

/**
 * Counts the bytes that pass and shows them on stderr. On a terminal the line
 * is rewritten in place four times a second; elsewhere (--progress into a
 * log) a line of its own once a second.
 */
function progressMeter (stderr: NodeJS.WriteStream, total: number | undefined): { counter: Transform, finish (): void } {
  const started = Date.now()
  let bytes = 0
  let shown = false
  const line = (): string => {
    const elapsed = Math.max(Date.now() - started, 1) / 1000
    // Past a total, the total was wrong: show the bytes alone rather than 120%.
    const of = total === undefined || bytes > total ? '' : ` of ${formatBytes(total)} (${Math.floor(bytes * 100 / Math.max(total, 1))}%)`
    return `received ${formatBytes(bytes)}${of} at ${formatBytes(Math.round(bytes / elapsed))}/s`
  }
  const show = (): void => {
    shown = true
    if (stderr.isTTY) stderr.write(`\r\x1b[K${line()}`)
    else stderr.write(line() + '\n')
  }
  const timer = setInterval(show, stderr.isTTY ? 250 : 1000)
  timer.unref()
  const counter = new Transform({
    transform (chunk: Buffer, _encoding, callback) {
      bytes += chunk.length
      callback(null, chunk)
    }
  })
  return {
    counter,
    finish () {
      clearInterval(timer)
      // A short download on a terminal shows nothing; a forced meter always ends with its total.
      if (shown || !stderr.isTTY) {
        show()
        if (stderr.isTTY) stderr.write('\n')
      }
    }
  }
}

/** The dataset query of get's and link's options. */
async function datasetQuery (values: {
  format?: string, entity?: string, meta?: string, limit?: string, 'archive-type'?: string,
  columns?: string, where?: string, since?: string, 'since-file'?: string
}): Promise<DatasetQuery> {
  const limit = values.limit
  if (limit !== undefined && !/^\d+$/.test(limit)) throw new UsageProblem('--limit must be a non-negative integer')
  const sinceFile = values['since-file']
  if (sinceFile !== undefined && values.since !== undefined) throw new UsageProblem('give --since or --since-file, not both')
  const since = sinceFile === undefined ? values.since : await readSinceFile(sinceFile)
  return {
    format: values.format,
    entity: values.entity,
    meta: values.meta,
    limit: limit === undefined ? undefined : Number(limit),
    archiveType: values['archive-type'],
    columns: values.columns?.split(','),
    where: values.where,
    since
  } as DatasetQuery
}

const DURATION_UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 }

/** `--expires`: a positive number of seconds, minutes, hours or days (`2h`), as seconds. */
function durationSeconds (text: string): number {
  const match = /^([1-9][0-9]{0,8})([smhd]?)$/.exec(text)
  if (match === null) throw new UsageProblem('--expires must be a duration such as 90s, 30m, 2h or 7d')
  return Number(match[1]) * DURATION_UNITS[match[2] === '' ? 's' : match[2]]
}

async function link (args: string[], io: Io): Promise<number> {
  const { values, positionals } = parse(args, LINK_OPTIONS)
  const url = oneUrl(positionals, 'endpoint-url')
  const query = await datasetQuery(values)
  const expiresIn = values.expires === undefined ? undefined : durationSeconds(values.expires)
  const minted = await clientFor(values, io, true).createLink(url, query, { expiresIn, signal: io.signal })
  if (values.json === true) printJson(io, minted)
  else io.stdout.write(minted.url + '\n')
  return 0
}

async function get (args: string[], io: Io): Promise<number> {
  const { values, positionals } = parse(args, GET_OPTIONS)
  const url = oneUrl(positionals, 'endpoint-url')
  const query = await datasetQuery(values)
  const sinceFile = values['since-file']
  const client = clientFor(values, io, true)
  const download = await client.downloadDataset(url, query, { signal: io.signal })
  // On its own the meter shows only on a terminal, and not over data printed to the same terminal.
  const auto = io.stderr.isTTY && (values.output !== undefined || !io.stdout.isTTY)
  const meter = values.progress === true || auto
    ? progressMeter(io.stderr, download.contentLength)
    : null
  const stages = meter === null ? [download.body] : [download.body, meter.counter]
  try {
    if (values.output === undefined) {
      await pipeline([...stages, io.stdout], { end: false })
    } else {
      // Written beside the target and renamed at the end: a failed download
      // leaves no partial file that looks complete.
      const part = `${values.output}.part`
      try {
        await pipeline([...stages, createWriteStream(part)])
        await rename(part, values.output)
      } catch (err) {
        await rm(part, { force: true })
        throw err
      }
    }
  } finally {
    meter?.finish()
  }
  // Only after the whole body was written: a cut-off download leaves the old
  // value, so the next run asks again for what this one did not deliver.
  if (sinceFile !== undefined) {
    if (download.changesUntil === undefined) {
      io.stderr.write('the answer carried no Data-Changes-Until; --since-file left as it was\n')
    } else {
      await writeFile(`${sinceFile}.part`, download.changesUntil + '\n')
      await rename(`${sinceFile}.part`, sinceFile)
    }
  }
  return 0
}

/** The since value stored by an earlier run, or undefined when there is none yet. */
async function readSinceFile (file: string): Promise<string | undefined> {
  let text: string
  try {
    text = await readFile(file, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
  const value = text.trim()
  return value === '' ? undefined : value
}

function printJson (io: Io, value: unknown): void {
  io.stdout.write(JSON.stringify(value, null, 2) + '\n')
}

async function run (args: string[], io: Io): Promise<number> {
  const { values, positionals } = parse(args, RUN_OPTIONS)
  const url = oneUrl(positionals, 'pipeline-url')
  if (values.wait !== true && (values.interval !== undefined || values['wait-timeout'] !== undefined)) {
    throw new UsageProblem('--interval and --wait-timeout go with --wait')
  }
  const interval = seconds('interval', values.interval, 2)
  const timeout = seconds('wait-timeout', values['wait-timeout'], 3600)
  const client = clientFor(values, io, true)
  const reference = await client.runPipeline(url, { signal: io.signal })
  if (values.wait !== true) {
    printJson(io, reference)
    return 0
  }
  io.stderr.write(redactKeys(`job ${reference.job_id} started; waiting for it to end\n`))
  const job = await client.waitForJob(reference, { interval, timeout, signal: io.signal })
  printJson(io, job)
  return job.status === 'failed' ? EXIT_FAILED : 0
}

async function job (args: string[], io: Io): Promise<number> {
  const { values, positionals } = parse(args, COMMON)
  const url = oneUrl(positionals, 'job-url')
  const info: JobInfo = await clientFor(values, io, false).getJob(url, { signal: io.signal })
  printJson(io, info)
  return 0
}

/** keys / endpoints: the whole list, page after page, as one JSON array. */
async function list (which: 'keys' | 'endpoints', args: string[], io: Io): Promise<number> {
  const { values, positionals } = parse(args, LIST_OPTIONS)
  const url = oneUrl(positionals, 'project-url')
  if (which === 'keys' && values['key-id'] !== undefined) throw new UsageProblem('--key-id goes with endpoints')
  const token = io.env[TOKEN_VARIABLE]?.trim()
  const client = new DataEndpointsClient({
    ...clientOptions(values, io),
    managementToken: token === undefined || token === '' ? undefined : token
  })
  const options = { search: values.search, signal: io.signal }
  printJson(io, which === 'keys'
    ? await client.listKeys(url, options)
    : await client.listEndpoints(url, { ...options, keyId: values['key-id'] }))
  return 0
}

const COMMANDS: Record<string, (args: string[], io: Io) => Promise<number>> = {
  get,
  link,
  run,
  job,
  keys: async (args, io) => await list('keys', args, io),
  endpoints: async (args, io) => await list('endpoints', args, io)
}

/** Runs the command line `args`; resolves with the exit status. */
async function main (args: string[], io: Io): Promise<number> {
  const [command, ...rest] = args
  if (command === undefined || command === '-h' || command === '--help' || command === 'help' ||
    rest.includes('--help') || rest.includes('-h')) {
    io.stdout.write(USAGE)
    return command === undefined ? EXIT_USAGE : 0
  }
  if (command === '--version') {
    io.stdout.write(version() + '\n')
    return 0
  }
  try {
    const handler = COMMANDS[command]
    if (handler === undefined) {
      // Echoed only when it cannot be a key (a key has digits, capitals and a dash).
      const shown = /^[a-z]{1,15}$/.test(command) ? ` "${command}"` : ''
      throw new UsageProblem(`unknown command${shown} (get, link, run, job, keys or endpoints)`)
    }
    return await handler(rest, io)
  } catch (err) {
    return report(err, io)
  }
}

function report (err: unknown, io: Io): number {
  // Masked whatever the source: a key pasted into a path or a host name shows up in messages.
  const say = (text: string): void => { io.stderr.write(`data-endpoints: ${redactKeys(text)}\n`) }
  if (err instanceof UsageProblem) {
    say(`${err.message}\nRun "data-endpoints --help" for usage.`)
    return EXIT_USAGE
  }
  if (io.signal.aborted) {
    say('interrupted')
    return EXIT_INTERRUPTED
  }
  if (err instanceof JobWaitTimeoutError) {
    printJson(io, err.job)
    say(err.message)
    return EXIT_FAILED
  }
  if (err instanceof HttpError) {
    // A 429 the client did not wait out (a key's daily quota): when to try again.
    const retry = err.status === 429 && err.retryAt !== undefined && err.retryAfterMs !== undefined
      ? `; retry after ${err.retryAt.toISOString()} (in ${Math.ceil(err.retryAfterMs / 1000)} s)`
      : ''
    say(`${err.message} (HTTP ${err.status})${retry}`)
    return EXIT_FAILED
  }
  if (err instanceof DataEndpointsError) {
    say(err.message)
    return err instanceof UsageError ? EXIT_USAGE : EXIT_FAILED
  }
  // A download that broke mid-body, a file that could not be written, ...
  const code = (err as { code?: unknown }).code
  if (code === 'EPIPE') return 0 // the reader of stdout went away (`| head`): nothing to report
  say(`${(err as Error).message ?? String(err)}${typeof code === 'string' ? ` (${code})` : ''}`)
  return EXIT_FAILED
}

// Ctrl-C aborts the request or the wait; a partial --output file is removed.
const interrupt = new AbortController()
process.once('SIGINT', () => interrupt.abort())
process.once('SIGTERM', () => interrupt.abort())
main(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, env: process.env, signal: interrupt.signal })
  .then((code) => { process.exitCode = code })
  .catch((err: unknown) => {
    process.stderr.write(`data-endpoints: ${redactUrl(String(err))}\n`)
    process.exitCode = EXIT_FAILED
  })
