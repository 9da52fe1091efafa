import { randomBytes } from 'node:crypto'

// The example server's settings, read from the environment (README, "Example server").

export interface ExampleConfig {
  /** TCP port on 127.0.0.1; 0 picks a free one */
  port: number
  /** where the SQLite files live; created when missing */
  dataDir: string
  /** PostgreSQL for the plugin's storage instead of SQLite, when set */
  databaseUrl?: string
  /** the PostgreSQL schema of the plugin's tables; default data_endpoints */
  databaseSchema?: string
  /** the bearer token that grants ManageAPIKeys */
  adminToken: string
  /** true when adminToken was made up at start (then it is printed) */
  adminTokenGenerated: boolean
  /** create and print a demo key on first start */
  demoKey: boolean
  /** rows of the generated `events` dataset */
  eventsRows: number
  logLevel: string
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']
const MAX_EVENTS_ROWS = 100_000_000

function integerFrom (name: string, text: string, min: number, max: number): number {
  if (!/^[0-9]+$/.test(text) || Number(text) < min || Number(text) > max) {
    throw new Error(`${name} must be an integer from ${min} to ${max}, got "${text}"`)
  }
  return Number(text)
}

/** Reads the settings; throws an error naming the first bad variable. */
export function readConfig (env: NodeJS.ProcessEnv): ExampleConfig {
  const adminToken = env.ADMIN_TOKEN ?? ''
  const logLevel = env.LOG_LEVEL ?? 'info'
  if (!LOG_LEVELS.includes(logLevel)) throw new Error(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got "${logLevel}"`)
  return {
    port: integerFrom('PORT', env.PORT ?? '3000', 0, 65535),
    dataDir: env.DATA_DIR ?? './.data',
    databaseUrl: env.DATABASE_URL === '' ? undefined : env.DATABASE_URL,
    databaseSchema: env.DATABASE_SCHEMA === '' ? undefined : env.DATABASE_SCHEMA,
    // An empty ADMIN_TOKEN counts as unset: an empty bearer token would be no protection.
    // Hex: a base64url token can hold a dash, and then look like an API key
    // (10 characters, a dash, 21) to the log masking and to a reader.
    adminToken: adminToken !== '' ? adminToken : randomBytes(24).toString('hex'),
    adminTokenGenerated: adminToken === '',
    demoKey: env.DEMO_KEY !== 'off',
    eventsRows: integerFrom('EVENTS_ROWS', env.EVENTS_ROWS ?? '100000', 0, MAX_EVENTS_ROWS),
    logLevel
  }
}
