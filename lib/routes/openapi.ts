import { readFileSync } from 'node:fs'
import type { FastifyDynamicSwaggerOptions, SwaggerTransform, SwaggerTransformObject } from '@fastify/swagger'
import { errorCodes, type FastifyContextConfig, type FastifyInstance, type FastifySchema, type FastifySchemaCompiler } from 'fastify'
import { Type } from 'typebox'
import type { PluginContext } from './context.js'
import { sendError } from './error-reply.js'
import { requireManageApiKeys } from './management-routes.js'
import type { ResolvedOptions } from '../options.js'
import { MAX_ENDPOINT_KEYS } from '../storage/storage.js'
import {
  DataRouteParams, DatasetQuery, DatasetHeaders, DatasetResponses, JobParams, JobResponses, PipelineHeaders, PipelineResponses,
  LinkUseParams, MintLinkAnswer, MintLinkBody
} from './schemas.js'

// The OpenAPI 3 document of the plugin's routes, built by @fastify/swagger
// from the TypeBox route schemas and served at <managementPrefix>/openapi.json.

const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }

const KEY_SECURITY: Array<Record<string, string[]>> = [{ apiKeyQuery: [] }, { bearerAuth: [] }]

const MANAGEMENT_AUTH = 'Needs the permission `ManageAPIKeys`, which the host grants through its own ' +
  'authentication (`getPermissions(request)`: a session cookie, a bearer token, ...); otherwise 403 `Not authorized`.'

/**
 * Makes the schemas of this context's routes documentation only: no request
 * is validated or coerced and replies are written as without a schema. The
 * data and job routes answer every bad input themselves, in the order and
 * with the bodies DESIGN.md §2 fixes; a validator would answer first.
 */
export function documentationOnly (app: FastifyInstance): void {
  // No validator at all, rather than one that passes everything: Fastify
  // skips a part without a validator, and with none for any part skips the
  // validation step of every request (lib/validation.js, `validate`).
  app.setValidatorCompiler(() => null as unknown as ReturnType<FastifySchemaCompiler<unknown>>)
  app.setSerializerCompiler(() => (data) => JSON.stringify(data))
}

/**
 * The data route serves every type and method on one URL, so that its key
 * hook answers 404 and 405 itself; the document names the one type each
 * method serves instead, as callers write it.
 */
function dataRouteConfig (type: 'dataset' | 'pipeline'): FastifyContextConfig {
  return {
    swaggerTransform: ({ schema, url, ...document }) => {
      // A host's own @fastify/swagger sees these routes too, and fails on a
      // security scheme its document does not define: name ours only where
      // they are defined.
      const schemes = 'openapiObject' in document ? document.openapiObject.components?.securitySchemes : undefined
      const security = schemes?.apiKeyQuery !== undefined && schemes?.bearerAuth !== undefined ? KEY_SECURITY : undefined
      return { schema: { ...schema, security }, url: url.replace('/:type/', `/${type}/`) }
    }
  }
}

export const datasetRoute = {
  config: dataRouteConfig('dataset'),
  schema: {
    tags: ['data'],
    summary: 'Download a dataset',
    description: 'Needs an API key assigned to the endpoint: the query parameter `api_key` (wins when both are sent) or ' +
      '`Authorization: Bearer <key>`. Over plain HTTP from a non-loopback address: 403 `HTTPS required`.',
    params: DataRouteParams,
    querystring: DatasetQuery,
    headers: DatasetHeaders,
    response: DatasetResponses
  } satisfies FastifySchema
}

export const pipelineRoute = {
  config: dataRouteConfig('pipeline'),
  schema: {
    tags: ['data'],
    summary: 'Start a pipeline run',
    description: 'Needs an API key assigned to the endpoint, as for datasets. Each call starts a run: check the job ' +
      'status before retrying, or send an `Idempotency-Key`. Any request body is ignored.',
    params: DataRouteParams,
    headers: PipelineHeaders,
    response: PipelineResponses
  } satisfies FastifySchema
}

const errorBody = (description: string): ReturnType<typeof Type.Object> =>
  Type.Object({ message: Type.String() }, { description })

export const mintLinkRoute = {
  config: dataRouteConfig('dataset'),
  schema: {
    tags: ['data'],
    summary: 'Mint a download link: a URL that downloads the dataset without a key',
    description: 'Needs an API key assigned to the endpoint, checked as for the dataset GET, with the same answers. ' +
      'The link answers what the GET with these parameters answers, until it expires, is revoked, or its key is disabled, ' +
      'expires, is regenerated or deleted (DESIGN.md §4.2).',
    params: DataRouteParams,
    body: MintLinkBody,
    response: {
      201: MintLinkAnswer,
      400: errorBody('a parameter the GET refuses, with the message of the GET; `Invalid expiresIn: must be a positive integer (seconds)`, ' +
        '`Invalid expiresIn: at most <n> seconds (maxLinkLifetime)`, `Invalid expiresIn: the key expires at <time>, before the link would`, ' +
        '`Invalid <name>: not a parameter of the dataset download`, or a body that is not a JSON object'),
      403: DatasetResponses[403],
      404: errorBody('`Not found` (a sequence that is not a positive integer, or a pipeline: no link opens a pipeline) or `Dataset not found`'),
      405: DatasetResponses[405],
      429: DatasetResponses[429],
      500: DatasetResponses[500]
    }
  } satisfies FastifySchema
}

export const linkUseRoute = {
  // The route is a wildcard (link-routes.ts); the document names its two parts.
  config: { swaggerTransform: ({ schema, url }) => ({ schema, url: url.replace('/links/*', '/links/:token/:fileName') }) } satisfies FastifyContextConfig,
  schema: {
    tags: ['data'],
    summary: 'Download through a link (GET or HEAD; no key)',
    description: 'Answers exactly what the dataset GET with the parameters of the link answers (formats, compression, ETag and 304, Range), ' +
      'with `Referrer-Policy: no-referrer` and `Cache-Control: private`. Each use is a successful call of the key that minted it.',
    security: [],
    params: LinkUseParams,
    headers: DatasetHeaders,
    response: {
      ...DatasetResponses,
      403: errorBody('in this order: `Unknown link` (a token that does not verify, read before any storage), `Revoked link`, ' +
        '`Expired link`, then the key and endpoint as the GET answers them: `Unknown API Endpoint` (endpoint deleted), ' +
        '`Unknown API key` (key deleted, regenerated or no longer assigned), `Disabled API key` (key disabled or expired); ' +
        'or `HTTPS required`'),
      404: errorBody('`Dataset not found`'),
      405: errorBody('`Endpoint or method not allowed`: a method other than GET and HEAD')
    }
  } satisfies FastifySchema
}

export const jobRouteSchema = {
  tags: ['jobs'],
  summary: 'A job\'s status (public, no key)',
  security: [],
  params: JobParams,
  response: JobResponses
} satisfies FastifySchema


const KEY_404 = '`API key not found` (no such key in this project)'
const EXPIRY_400 = '`body.expiresAt: must be in the future`, `body.expiresAt: must be no later than <time> (maxKeyLifetime)`, ' +
  '`body.expiresAt: must be set, no later than <time> (maxKeyLifetime)`'
const MONIKER_400 = 'a malformed organization, project or id, or an unknown query parameter (`querystring: unknown field "<name>"`); ' +
  'the message names it'
const LIST_400 = '`limit` not an integer from 1 to 500 in plain digits, `after` not from a `Link` header of this list ' +
  '(`querystring.after: not a cursor of this list; follow the Link header\'s rel="next" URL`), an unknown parameter, ' +
  'or a malformed organization or project; the message names it'

// Fastify's own answers to a body it cannot read, on every route that reads
// one (all but GET, HEAD and TRACE): their messages, quoted from Fastify.
const BODYLESS_METHODS = new Set(['GET', 'HEAD', 'TRACE'])
const BODY_415 = `\`${new errorCodes.FST_ERR_CTP_INVALID_MEDIA_TYPE().message}\`: a body that is not JSON ` +
  '(JSON only, so that a cross-site form post is refused)'
const BODY_413 = `\`${new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE().message}\`: a body over the host's \`bodyLimit\` (1 MiB by default)`

interface ManagementDoc {
  summary: string
  ok: string
  400: string
  404?: string
  /** The route reads a missing body as `{}`: the body is optional. */
  optionalBody?: true
}

/** Summaries and answers of the management routes, by method and path under the prefix. */
const MANAGEMENT_DOCS: Record<string, ManagementDoc> = {
  'GET /:organization/:project/keys': {
    summary: 'List the project\'s API keys (never their values), oldest first; in pages with `limit`, searched with `q`',
    ok: 'the keys, or a page of them: a `Link` header gives the next page\'s URL; `updatedAt` is the last successful authentication (null before)',
    400: LIST_400
  },
  'POST /:organization/:project/keys': {
    summary: 'Create an API key; its value is in this answer only',
    ok: 'the key, its whole value in `key`: shown this once only',
    400: 'a bad body (`purpose` required: 1 to 200 characters, not only spaces, no control characters; `expiresAt` ' +
      `in the future and, with \`maxKeyLifetime\`, within it: ${EXPIRY_400}); the message names the field`
  },
  'PATCH /:organization/:project/keys/:keyId': {
    summary: 'Edit a key\'s purpose, active flag or expiry',
    ok: 'the key as changed',
    400: `a bad body (${EXPIRY_400}); the message names the field`,
    404: KEY_404
  },
  'DELETE /:organization/:project/keys/:keyId': {
    summary: 'Delete a key: it stops at once; its endpoints stay, without it', ok: 'deleted', 400: MONIKER_400, 404: KEY_404
  },
  'POST /:organization/:project/keys/:keyId/regenerate': {
    summary: 'A new value for a key: the old value stops at once; assignments stay',
    ok: 'the key, its new whole value in `key`: shown this once only',
    400: MONIKER_400,
    404: KEY_404
  },
  'GET /:organization/:project/links': {
    summary: 'List the project\'s download links (never their tokens), newest first; one key\'s with `keyId`',
    ok: 'the links, revoked and expired ones included',
    400: MONIKER_400
  },
  'DELETE /:organization/:project/links/:linkId': {
    summary: 'Revoke a download link: its next use answers 403 `Revoked link`, on every instance',
    ok: 'revoked (again: no change)',
    400: MONIKER_400,
    404: '`Link not found` (no such link in this project)'
  },
  'GET /:organization/:project/usage': {
    summary: 'The usage history: requests by hour or day, endpoint, key and outcome',
    ok: 'every bucket with a count that overlaps [from, to), ordered by start, endpoint id, key id (none first) and outcome',
    400: 'a bad parameter (`querystring.from: must be before to`, or a range that holds more than `usageQueryMaxRows` ' +
      'rows: `querystring.from: the range holds more than <n> rows; narrow from and to, or filter by keyId or endpointId`); ' +
      'the message names the parameter'
  },
  'GET /:organization/:project/audit': {
    summary: 'Who changed what: the audit log of key and endpoint changes, newest first',
    ok: 'a page of entries and the cursor of the next (`next`, null on the last page)',
    400: 'a bad parameter (`before` not the `next` of an earlier page, `limit` not 1 to 500); the message names it'
  },
  'GET /:organization/:project/resources': {
    summary: 'The project\'s datasets and pipelines by name, as the host lists them (listResources)',
    ok: 'the resources; empty when the host does not list them',
    400: MONIKER_400
  },
  'GET /:organization/:project/endpoints': {
    summary: 'List the project\'s endpoints with their keys and calls; in pages with `limit`, searched with `q`, one key\'s with `keyId`',
    ok: 'the endpoints, or a page of them: a `Link` header gives the next page\'s URL',
    400: LIST_400
  },
  'PUT /:organization/:project/endpoints/:modelSequence/:type/:resourceSequence': {
    summary: 'Create an endpoint or replace its keys; the path stays the same',
    ok: 'the endpoint: 201 created, 200 its keys replaced',
    400: '`keyIds` is empty while the project has several keys or none, or names keys of another project; or a bad body',
    404: '`Dataset not found` / `Pipeline not found`: the host has no such resource',
    optionalBody: true
  },
  'DELETE /:organization/:project/endpoints/:modelSequence/:type/:resourceSequence': {
    summary: 'Delete an endpoint; the dataset or pipeline stays', ok: 'deleted', 400: MONIKER_400, 404: '`Endpoint not found`'
  },
  'POST /:organization/:project/endpoints/:modelSequence/:type/:resourceSequence/keys/:keyId': {
    summary: 'Assign one more key to an endpoint, without sending its list',
    ok: 'the endpoint with the key (unchanged when it had it already)',
    400: `\`keyId: the endpoint has ${MAX_ENDPOINT_KEYS} keys, the most it holds; remove one first\`, or a bad parameter`,
    404: '`Endpoint not found`, `API key not found` (not a key of this project), or `Dataset not found` / `Pipeline not found`: the host has no such resource'
  },
  'DELETE /:organization/:project/endpoints/:modelSequence/:type/:resourceSequence/keys/:keyId': {
    summary: 'Take one key off an endpoint, without sending its list; never its last',
    ok: 'the endpoint without the key (unchanged when it did not have it)',
    400: '`keyId: the endpoint\'s last key; assign another first, or delete the endpoint`, or a bad parameter',
    404: '`Endpoint not found`, or `API key not found` (not a key of this project)'
  }
}

/** Adds summaries, error descriptions and the 500 answer to the management routes' own schemas. */
function managementDocs (prefix: string): SwaggerTransform {
  return ({ schema, url, route }) => {
    const methods = [route.method].flat()
    const docs = url.startsWith(prefix + '/') ? MANAGEMENT_DOCS[`${methods[0]} ${url.slice(prefix.length)}`] : undefined
    if (docs === undefined) return { schema, url }
    const response: Record<string, unknown> = {}
    for (const [status, body] of Object.entries(schema.response as Record<string, object>)) {
      // The route's own schema for success; a described {message} for errors.
      response[status] = status.startsWith('2') ? { ...body, description: docs.ok } : body
    }
    response[400] = errorBody(docs[400])
    if (docs[404] !== undefined) response[404] = errorBody(docs[404])
    if (!methods.every((m) => BODYLESS_METHODS.has(m))) {
      response[413] = errorBody(BODY_413)
      response[415] = errorBody(BODY_415)
    }
    response[403] = errorBody('`Not authorized`: the caller lacks `ManageAPIKeys`')
    response[500] = errorBody('the server\'s message (for example getPermissions failed)')
    return { schema: { ...schema, tags: ['management'], summary: docs.summary, description: MANAGEMENT_AUTH, response }, url }
  }
}

/**
 * Marks the optional request bodies: @fastify/swagger writes
 * `requestBody.required: true` for every route with a body schema.
 */
function optionalBodies (prefix: string): SwaggerTransformObject {
  return (document) => {
    const openapi = (document as { openapiObject: { paths: Record<string, Record<string, { requestBody?: { required: boolean } }>> } }).openapiObject
    for (const [route, docs] of Object.entries(MANAGEMENT_DOCS)) {
      if (docs.optionalBody !== true) continue
      const [method, url] = route.split(' ')
      const operation = openapi.paths[prefix + url.replace(/:(\w+)/g, '{$1}')]?.[method.toLowerCase()]
      if (operation?.requestBody !== undefined) operation.requestBody.required = false
    }
    // Minting a link takes no body too: the defaults (sql, an hour).
    const mint = openapi.paths['/api/{organization}/{project}/model/{modelSequence}/dataset/{resourceSequence}/links']?.post
    if (mint?.requestBody !== undefined) mint.requestBody.required = false
    return openapi
  }
}

/** Options of the @fastify/swagger instance that collects this plugin's routes. */
export function swaggerOptions (options: ResolvedOptions): FastifyDynamicSwaggerOptions {
  return {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: 'fastify-data-endpoints',
        version,
        description: 'Datasets and pipelines as REST endpoints protected by API keys, the public job status, ' +
          'and the management of keys and endpoints.'
      },
      tags: [
        { name: 'data', description: 'dataset and pipeline endpoints (API key)' },
        { name: 'jobs', description: 'job status (public)' },
        { name: 'management', description: 'keys, endpoints, usage and audit (ManageAPIKeys)' }
      ],
      components: {
        securitySchemes: {
          apiKeyQuery: { type: 'apiKey', in: 'query', name: 'api_key', description: 'the API key; wins over the header' },
          bearerAuth: { type: 'http', scheme: 'bearer', description: 'Authorization: Bearer <API key>' }
        }
      }
    },
    transform: managementDocs(options.managementPrefix),
    transformObject: optionalBodies(options.managementPrefix)
  }
}

/** GET <managementPrefix>/openapi.json, for callers with `ManageAPIKeys`. */
export async function openapiRoute (app: FastifyInstance, { ctx }: { ctx: PluginContext }): Promise<void> {
  documentationOnly(app)
  app.setErrorHandler(sendError)
  app.addHook('onRequest', async (request) => requireManageApiKeys(ctx.options, request))

  app.get('/openapi.json', {
    schema: {
      tags: ['management'],
      summary: 'This OpenAPI document',
      description: MANAGEMENT_AUTH,
      response: {
        200: Type.Object({}, { additionalProperties: true, description: 'the OpenAPI 3 document' }),
        403: errorBody('`Not authorized`: the caller lacks `ManageAPIKeys`'),
        500: errorBody('the server\'s message')
      }
    }
  }, async (request, reply) => {
    reply.header('cache-control', 'no-store')
    return app.swagger()
  })
}
