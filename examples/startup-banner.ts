import type { DemoKey } from './demo-key.js'
import { SAMPLE_MODEL } from './sample-datasets.js'

export interface BannerFacts {
  /** e.g. http://127.0.0.1:3000 */
  baseUrl: string
  /** the admin token when it was generated at start; null when it came from ADMIN_TOKEN */
  adminToken: string | null
  /** the demo key created now, or why there is none */
  demo: DemoKey | 'none' | 'off'
}

const RULE = '='.repeat(78)

/**
 * The block printed at start, outside the JSON log: the admin token and the
 * demo key (each shown once) with curl lines ready to paste.
 */
export function startupBanner ({ baseUrl, adminToken, demo }: BannerFacts): string {
  const { organization, project, modelSequence } = SAMPLE_MODEL
  const model = `${baseUrl}/api/${organization}/${project}/model/${modelSequence}`
  const management = `${baseUrl}/api-keys/${organization}/${project}`
  // A variable the user's shell may not have: if it is unset, the shell refuses
  // the line and says what to set, rather than curl sending an empty token.
  const admin = adminToken ?? '${ADMIN_TOKEN:?set ADMIN_TOKEN to the token you started the server with}'
  const key = typeof demo === 'object' ? demo.key : '${API_KEY:?set API_KEY to your API key}'

  const lines = [
    RULE,
    `fastify-data-endpoints example server on ${baseUrl}`,
    'Secrets below are printed once, here, and never in the JSON log lines.',
    '',
    ...(adminToken === null
      ? ['Admin token:   the value of ADMIN_TOKEN (not printed). The admin curl lines below read it',
          '               from your shell: run them where ADMIN_TOKEN is exported with that value.']
      : [`Admin token:   ${adminToken}   (new at every start; set ADMIN_TOKEN to keep one)`])
  ]
  if (typeof demo === 'object') {
    lines.push(
      `Demo API key:  ${demo.key}`,
      '               purpose "demo", assigned to dataset 1 "sales" and pipeline 1 "refresh-sales".',
      '               Shown this once only: it cannot be read back, only regenerated.')
  } else {
    lines.push(demo === 'off'
      ? 'Demo API key:  none (DEMO_KEY=off)'
      : 'Demo API key:  none new (only a first start on an empty project makes one, and shows it once)',
    '               Create one with:',
    `               curl -X POST -H "Authorization: Bearer ${admin}" -H "Content-Type: application/json" -d '{"purpose":"trial"}' "${management}/keys"`,
    '               then assign it with PUT .../endpoints/1/dataset/1 and export it as API_KEY for the lines below.')
  }
  lines.push(
    '',
    '# dataset 1 "sales" as JSON',
    `curl -H "Authorization: Bearer ${key}" "${model}/dataset/1?format=json"`,
    '# dataset 1 as a zip of CSV files, saved to sales.zip',
    `curl -H "Authorization: Bearer ${key}" -o sales.zip "${model}/dataset/1?format=csv-zip"`,
    '# its orders as Parquet, for DuckDB, pandas, polars or Spark',
    `curl -H "Authorization: Bearer ${key}" -o orders.parquet "${model}/dataset/1?format=parquet&entity=orders"`,
    '# start pipeline 1 "refresh-sales"; the answer carries job_id and job_url',
    `curl -X POST -H "Authorization: Bearer ${key}" "${model}/pipeline/1"`,
    '# the job\'s status (public, no key); put in the job_id from above',
    `curl "${baseUrl}/api/job/<job_id>"`,
    '# management: the project\'s endpoints, their keys and call counters',
    `curl -H "Authorization: Bearer ${admin}" "${management}/endpoints"`,
    RULE)
  return lines.join('\n') + '\n'
}
