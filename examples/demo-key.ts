import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import type { ExampleConfig } from './config.js'
import { endFirstStart, exampleDatabaseFile, isFirstStart, openExampleDatabase, SAMPLE_MODEL } from './sample-datasets.js'

export interface DemoKey {
  id: string
  prefix: string
  /** the whole key: shown once, never stored */
  key: string
}

const { organization, project, modelSequence } = SAMPLE_MODEL
const MANAGEMENT = `/api-keys/${organization}/${project}`

function expect (res: LightMyRequestResponse, status: number[], what: string): void {
  if (!status.includes(res.statusCode)) {
    throw new Error(`demo key: ${what} answered ${res.statusCode} ${res.json<{ message?: string }>().message ?? ''}`)
  }
}

/**
 * On a project without keys or endpoints, creates a key with purpose "demo"
 * and assigns it to dataset 1 and pipeline 1. It goes through the plugin's own
 * management API (app.inject), so the key is made and hashed the usual way.
 * Returns null when the project already has keys or endpoints.
 */
export async function createDemoKey (app: FastifyInstance, adminToken: string): Promise<DemoKey | null> {
  const headers = { authorization: `Bearer ${adminToken}` }
  const [keys, endpoints] = await Promise.all(['keys', 'endpoints'].map((what) =>
    app.inject({ method: 'GET', url: `${MANAGEMENT}/${what}`, headers })))
  expect(keys, [200], 'listing keys')
  expect(endpoints, [200], 'listing endpoints')
  if (keys.json<unknown[]>().length > 0 || endpoints.json<unknown[]>().length > 0) return null

  const created = await app.inject({ method: 'POST', url: `${MANAGEMENT}/keys`, headers, payload: { purpose: 'demo' } })
  expect(created, [201], 'creating the key')
  const demo = created.json<DemoKey>()
  for (const type of ['dataset', 'pipeline']) {
    const assigned = await app.inject({
      method: 'PUT', url: `${MANAGEMENT}/endpoints/${modelSequence}/${type}/1`, headers, payload: { keyIds: [demo.id] }
    })
    expect(assigned, [200, 201], `assigning it to ${type} 1`)
  }
  return { id: demo.id, prefix: demo.prefix, key: demo.key }
}

/**
 * The demo key of the first start (DESIGN.md §5): created, unless DEMO_KEY=off,
 * by the first start on this data that gets this far (past listening), if the
 * project is empty, and by no later start, even once the project is empty again.
 * Returns the key, 'off', or 'none'.
 */
export async function firstStartDemoKey (
  app: FastifyInstance, config: Pick<ExampleConfig, 'dataDir' | 'adminToken' | 'demoKey'>
): Promise<DemoKey | 'none' | 'off'> {
  // A connection of its own for this one step, beside the app's.
  const db = openExampleDatabase(exampleDatabaseFile(config.dataDir))
  try {
    if (!isFirstStart(db)) return 'none'
    const demo = config.demoKey ? (await createDemoKey(app, config.adminToken)) ?? 'none' : 'off'
    // Only now: a start that failed before this point leaves the next one a first start.
    endFirstStart(db)
    return demo
  } finally {
    db.close()
  }
}
