import { Type, type Static } from 'typebox'
import {
  IdempotencyInProgressError, ParquetEncodersBusyError, SUPPORTED_FORMATS as FORMAT_LIST, TarSpoolFullError, TooManyFailuresError, RateLimitedError, TooManyDownloadsError, DailyQuotaError,
  VerificationBusyError
} from '../errors.js'
import { FORMAT_NAMES } from '../formats/types.js'
import { AUDIT_ACTIONS, MAX_ENDPOINT_KEYS, USAGE_OUTCOMES } from '../storage/storage.js'

// TypeBox schemas of the management API (DESIGN.md §4). The same schemas
// validate requests, serialise responses and feed the OpenAPI document.

export const ErrorBody = Type.Object({ message: Type.String() })

const MONIKER_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._~-]{0,99}$'
const Moniker = Type.String({ pattern: MONIKER_PATTERN, description: 'moniker' })
/**
 * The source of a pattern matching exactly the decimal integers 1 to `max`
 * written plainly: every shorter number, then for each digit of `max` the
 * numbers that share its leading digits and are smaller at that one.
 */
function plainIntegersUpTo (max: string): string {
  const alternatives = [`[1-9][0-9]{0,${max.length - 2}}`]
  for (let i = 0; i < max.length; i++) {
    const low = i === 0 ? 1 : 0
    const digit = Number(max[i])
    if (digit > low) alternatives.push(`${max.slice(0, i)}[${low}-${digit - 1}][0-9]{${max.length - 1 - i}}`)
  }
  return `^(?:${[...alternatives, max].join('|')})$`
}

// Sequences in paths: positive integers written plainly (no sign, exponent or
// leading zero) up to 2^53 - 1, past which a number is no longer exact: the
// same rule as the data routes.
const SEQUENCE_PATTERN = plainIntegersUpTo(String(Number.MAX_SAFE_INTEGER))
const Sequence = Type.String({ pattern: SEQUENCE_PATTERN, description: 'positive integer' })
// A purpose: a non-space character somewhere, no control character (C0, DEL)
// anywhere, at most 200 code points (as the page counts). The lookahead keeps
// the match linear: when errors are listed, the pattern runs on a string of
// any length the body limit allows, past maxLength too.
const PURPOSE_PATTERN = '^(?=\\s*\\S)[^\\u0000-\\u001f\\u007f]*$'
const Purpose = Type.String({ minLength: 1, maxLength: 200, pattern: PURPOSE_PATTERN })

// An audit entry's id: a positive integer, as storage numbers them.
const AUDIT_ID_PATTERN = '^[1-9][0-9]{0,17}$'

// Items per page of a list, as the audit log's.
export const MAX_PAGE_LIMIT = 500

/**
 * What a value failing each pattern must be. 400 messages say this instead
 * of quoting the regular expression (error-reply.ts).
 */
export const PATTERN_MESSAGES: ReadonlyMap<string, string> = new Map([
  [MONIKER_PATTERN, 'must be 1 to 100 letters, digits or ._~-, starting with a letter or digit'],
  [SEQUENCE_PATTERN, `must be a positive integer (1 to ${Number.MAX_SAFE_INTEGER}, no sign, exponent or leading zero)`],
  [PURPOSE_PATTERN, 'must have a non-space character and no control characters'],
  [AUDIT_ID_PATTERN, 'must be the `next` of an earlier page']
])

export const ProjectParams = Type.Object({
  organization: Moniker,
  project: Moniker
})

export const KeyParams = Type.Object({
  organization: Moniker,
  project: Moniker,
  keyId: Type.String({ minLength: 1, maxLength: 100 })
})

export const EndpointParams = Type.Object({
  organization: Moniker,
  project: Moniker,
  modelSequence: Sequence,
  type: Type.Union([Type.Literal('dataset'), Type.Literal('pipeline')]),
  resourceSequence: Sequence
})

export const EndpointKeyParams = Type.Object({
  ...EndpointParams.properties,
  keyId: KeyParams.properties.keyId
})

/** The query of a route that takes none: an unknown parameter is a 400 that names it, not ignored. */
export const NoQuerystring = Type.Object({}, { additionalProperties: false })

const ListLimit = Type.Integer({
  minimum: 1,
  maximum: MAX_PAGE_LIMIT,
  description: `items per page, 1 to ${MAX_PAGE_LIMIT}; the next page is the \`Link: <…>; rel="next"\` header's URL. ` +
    'Without it the whole list in one answer: past 1,000 items, page'
})
const ListAfter = Type.String({
  minLength: 1,
  maxLength: 1000,
  description: 'where the page starts: set by the `rel="next"` URL of the page before; not to be made by hand'
})

export const KeysQuerystring = Type.Object({
  limit: Type.Optional(ListLimit),
  after: Type.Optional(ListAfter),
  q: Type.Optional(Type.String({ maxLength: 200, description: 'only the keys whose prefix or purpose contains this text; A-Z match either case' }))
}, { additionalProperties: false })

export const EndpointsQuerystring = Type.Object({
  limit: Type.Optional(ListLimit),
  after: Type.Optional(ListAfter),
  q: Type.Optional(Type.String({
    maxLength: 200,
    description: 'only the endpoints whose path, or the host\'s name of whose resource, contains this text; A-Z match either case'
  })),
  keyId: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'only the endpoints this key is assigned to' }))
}, { additionalProperties: false })

/** The header of a list answer that has a next page (RFC 8288). */
export const NextPageHeader = {
  link: Type.String({ description: '`<URL of the next page>; rel="next"`, only when more items follow' })
}

// When a key stops working: an ISO 8601 date-time with its offset, in the
// future (checked by the route), or null for never.
const ExpiresAt = Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
  description: 'ISO 8601 date-time with an offset (e.g. `2027-01-01T00:00:00Z`), in the future; null: never'
})

// A key's limit (DESIGN.md §4.3): a JSON integer from 1, or null for none.
const Limit = (description: string) => Type.Union([Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER }), Type.Null()], { description })
const LIMIT_DESCRIPTIONS = {
  requestsPerMinute: 'calls of the key in each UTC minute, across instances; beyond, 429 `Rate limit exceeded`',
  concurrentDownloads: 'dataset downloads of the key streaming at once, across instances; beyond, 429 `Too many concurrent downloads`',
  bytesPerDay: 'bytes the key\'s downloads may send in a UTC day: a download starts while the day\'s bytes are below it; ' +
    'beyond, 429 `Daily download quota exceeded`'
}

/** Limits as a body gives them: the ones named are set (null: none), the others stay (PATCH) or are none (creation). */
const LimitsInput = Type.Object({
  requestsPerMinute: Type.Optional(Limit(LIMIT_DESCRIPTIONS.requestsPerMinute)),
  concurrentDownloads: Type.Optional(Limit(LIMIT_DESCRIPTIONS.concurrentDownloads)),
  bytesPerDay: Type.Optional(Limit(LIMIT_DESCRIPTIONS.bytesPerDay))
}, { additionalProperties: false, description: 'each a positive integer, or null for none' })

export const KeyLimitsSchema = Type.Object({
  requestsPerMinute: Limit(LIMIT_DESCRIPTIONS.requestsPerMinute),
  concurrentDownloads: Limit(LIMIT_DESCRIPTIONS.concurrentDownloads),
  bytesPerDay: Limit(LIMIT_DESCRIPTIONS.bytesPerDay)
}, { description: 'the key\'s limits (null: none)' })

export const CreateKeyBody = Type.Object({
  purpose: Purpose,
  isActive: Type.Optional(Type.Boolean()),
  expiresAt: Type.Optional(ExpiresAt),
  limits: Type.Optional(Type.Object(LimitsInput.properties, {
    additionalProperties: false,
    description: 'the key\'s limits, each a positive integer or null; absent: the plugin\'s `defaultKeyLimits`; a limit not named: none'
  }))
}, { additionalProperties: false })

export const UpdateKeyBody = Type.Object({
  purpose: Type.Optional(Purpose),
  isActive: Type.Optional(Type.Boolean()),
  expiresAt: Type.Optional(ExpiresAt),
  limits: Type.Optional(Type.Object(LimitsInput.properties, {
    additionalProperties: false,
    description: 'the limits named change (null removes one); the others stay'
  }))
}, { additionalProperties: false })

export const PutEndpointBody = Type.Object({
  keyIds: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 100 }), { maxItems: MAX_ENDPOINT_KEYS }))
}, { additionalProperties: false })

export const ApiKey = Type.Object({
  id: Type.String(),
  prefix: Type.String(),
  purpose: Type.String(),
  isActive: Type.Boolean(),
  createdAt: Type.String({ format: 'date-time' }),
  updatedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  expiresAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
    description: 'from this time on the key is inactive; null: never'
  }),
  limits: KeyLimitsSchema
})

export const ApiKeyWithValue = Type.Object({
  ...ApiKey.properties,
  key: Type.String({ description: 'the whole key; shown this once only' })
})

export const Endpoint = Type.Object({
  id: Type.String(),
  path: Type.String(),
  method: Type.Union([Type.Literal('GET'), Type.Literal('POST')]),
  type: Type.Union([Type.Literal('dataset'), Type.Literal('pipeline')]),
  organization: Type.String(),
  project: Type.String(),
  modelSequence: Type.Integer(),
  resourceSequence: Type.Integer(),
  resourceName: Type.Optional(Type.String({ description: 'the dataset\'s or pipeline\'s name, when the host can tell it' })),
  calls: Type.Integer(),
  keys: Type.Array(Type.Object({
    id: Type.String(),
    prefix: Type.String(),
    purpose: Type.String(),
    isActive: Type.Boolean()
  })),
  createdAt: Type.String({ format: 'date-time' })
})

export const UsageQuerystring = Type.Object({
  granularity: Type.Optional(Type.Enum(['hour', 'day'], { description: 'bucket size: UTC hours or UTC days; default hour' })),
  from: Type.Optional(Type.String({
    format: 'date-time',
    description: 'the buckets from the one holding this time; default: `to` less 24 hours (hour) or 30 days (day)'
  })),
  to: Type.Optional(Type.String({ format: 'date-time', description: 'up to the buckets that start before this time; default now' })),
  keyId: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'only this key\'s requests' })),
  endpointId: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'only this endpoint\'s requests' }))
}, { additionalProperties: false })

export const UsageOutcomeSchema = Type.Enum(USAGE_OUTCOMES, {
  description: '`ok`; `unknown_key`: a wrong secret on a prefix assigned to the endpoint (a guess at that key); ' +
    '`disabled`; `expired`; `rate_limited`: refused for one of the key\'s limits; ' +
    'with no key: `no_key` (none sent), `unknown_prefix` (malformed, or no key of this endpoint)'
})

export const UsageAnswer = Type.Object({
  granularity: Type.Union([Type.Literal('hour'), Type.Literal('day')]),
  rows: Type.Array(Type.Object({
    start: Type.String({ format: 'date-time', description: 'the UTC hour or day the bucket starts at' }),
    endpointId: Type.String(),
    keyId: Type.Union([Type.String(), Type.Null()]),
    outcome: UsageOutcomeSchema,
    count: Type.Integer({ minimum: 0, description: 'requests; 0 in a bucket that holds only bytes of a download that began in an earlier hour' }),
    bytes: Type.Integer({ minimum: 0, description: 'bytes the downloads of the bucket sent (outcome ok), counted as they go' })
  }))
})

export const AuditQuerystring = Type.Object({
  before: Type.Optional(Type.String({ pattern: AUDIT_ID_PATTERN, description: 'entries older than this one: the `next` of the page before' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, description: 'entries per page, 1 to 500; default 50' }))
}, { additionalProperties: false })

export const AuditAnswer = Type.Object({
  items: Type.Array(Type.Object({
    id: Type.String(),
    at: Type.String({ format: 'date-time' }),
    actor: Type.Union([Type.String(), Type.Null()], { description: 'what the host\'s getActor answered; null without one' }),
    action: Type.Enum(AUDIT_ACTIONS),
    keyId: Type.Union([Type.String(), Type.Null()]),
    endpointId: Type.Union([Type.String(), Type.Null()]),
    target: Type.String({ description: 'the key\'s prefix or the endpoint\'s path, as it read then; a link\'s id' }),
    changes: Type.Record(Type.String(), Type.Object({ from: Type.Unknown(), to: Type.Unknown() }), {
      description: 'each changed field, old and new: purpose, isActive, expiresAt, prefix of a key; keyIds of an endpoint; params, expiresAt, revokedAt of a link. Never a key value, hash or link token'
    })
  })),
  next: Type.Union([Type.String(), Type.Null()], { description: 'the `before` of the next page; null on the last' })
}, { description: 'newest first' })

const ResourceItemSchema = Type.Object({
  type: Type.Union([Type.Literal('dataset'), Type.Literal('pipeline')]),
  modelSequence: Type.Integer(),
  resourceSequence: Type.Integer(),
  name: Type.String()
})

export const ResourcesAnswer = Type.Object({
  items: Type.Array(ResourceItemSchema, { description: 'by model, type, then resource sequence; empty when the host does not list them' })
})

export type ResourceItem = Static<typeof ResourceItemSchema>
export type ApiKeyBody = Static<typeof ApiKey>
export type EndpointBody = Static<typeof Endpoint>

// Schemas of the data and job routes. They only document those routes (the
// OpenAPI document): the key hook checks requests in the order of DESIGN.md
// §2, so these routes never validate or serialise with them (see
// `documentationOnly` in openapi.ts).

const errorBody = (description: string): typeof ErrorBody =>
  Type.Object({ message: Type.String() }, { description })

/** A catalogue error's exact message, quoted for a description. */
const quoted = (error: new () => Error): string => `\`${new error().message}\``

export const DataRouteParams = Type.Object({
  organization: Type.String({ description: 'moniker of the organization' }),
  project: Type.String({ description: 'moniker of the project' }),
  modelSequence: Type.String({ pattern: SEQUENCE_PATTERN, description: 'sequence number of the model (positive integer)' }),
  resourceSequence: Type.String({ pattern: SEQUENCE_PATTERN, description: 'sequence number of the dataset or pipeline (positive integer)' })
})

export const DatasetQuery = Type.Object({
  format: Type.Optional(Type.Enum([...FORMAT_NAMES], {
    type: 'string',
    default: 'sql',
    description: 'download format; another value answers 500 Unknown download format. `csv`, `parquet` and `arrow` hold one entity: ' +
      'a dataset with several needs `entity`'
  })),
  entity: Type.Optional(Type.String({ description: 'only this entity (table); default all entities (required with csv, parquet and arrow when the dataset has several)' })),
  meta: Type.Optional(Type.Enum(['entities', 'ddl'], {
    type: 'string',
    description: '`entities`: a JSON array of the entity names; `ddl`: the schema DDL (Oracle for format=oracle-loader)'
  })),
  archiveType: Type.Optional(Type.Enum(['zip', 'tar'], {
    type: 'string',
    default: 'zip', description: 'archive of csv-zip, json-zip, oracle-loader and parquet-zip'
  })),
  limit: Type.Optional(Type.Integer({ minimum: 0, description: 'at most this many records per entity' })),
  columns: Type.Optional(Type.String({
    description: '`a,b,c`: only those columns, in that order (one entity: `entity`, or a dataset of one). Every format and `meta=ddl` ' +
      'follow it; the primary key is not added. Only where the host supports it'
  })),
  where: Type.Optional(Type.String({
    description: 'only the rows meeting every condition, joined by `and`: `<column> <op> <literal>` (op `= != < <= > >=`), ' +
      '`<column> in (<literal>, ...)`, `<column> is null`, `<column> is not null`. Literals: numbers and `true`/`false` bare; text, ' +
      'dates and timestamps in single quotes (`\'\'` for a quote); a column name may be in double quotes. No `or`, functions or ' +
      'expressions. Only the columns the host declares filterable. Example: `kind = \'click\' and ts >= \'2024-01-01T00:00:00Z\'`'
  })),
  since: Type.Optional(Type.String({
    description: 'only the rows changed after this value of the entity\'s change column: the `Data-Changes-Until` of the previous ' +
      'download. Only for an entity with a change column'
  }))
})

export const PipelineHeaders = Type.Object({
  'idempotency-key': Type.Optional(Type.String({
    minLength: 1,
    maxLength: 255,
    description: 'the same value on the same endpoint within 24 hours returns the first call\'s body (header Idempotent-Replayed: true) and starts nothing'
  }))
})

const AllowHeader = { allow: Type.String({ description: 'the one method the endpoint accepts' }) }
const RetryAfterHeader = { 'retry-after': Type.String({ description: 'seconds to wait' }) }

const Refused = Type.Object({ message: Type.String() }, {
  description: '`Not authorized` (no key), `Unknown API Endpoint`, `Unknown API key`, `Disabled API key`, or `HTTPS required` (plain HTTP from a non-loopback address)'
})
const WrongMethod = Type.Object({ message: Type.String() }, {
  description: '`Endpoint or method not allowed`: GET on a pipeline, POST on a dataset, or another method',
  headers: AllowHeader
})
// The RateLimit fields of draft-ietf-httpapi-ratelimit-headers-11, on every answer to a key with a request limit.
const RateLimitHeaders = {
  'ratelimit-policy': Type.String({ description: '`"minute";q=<requestsPerMinute>;w=60`: only for a key with a `requestsPerMinute` limit' }),
  ratelimit: Type.String({ description: '`"minute";r=<calls left this UTC minute>;t=<seconds until it ends>`: only for a key with a `requestsPerMinute` limit' })
}
const LIMIT_REFUSALS = `${quoted(RateLimitedError)} (the key's requestsPerMinute), ${quoted(TooManyDownloadsError)} (its concurrentDownloads; ` +
  `Retry-After: 1) or ${quoted(DailyQuotaError)} (its bytesPerDay; Retry-After: until the next UTC day)`
const tooMany = (limits: string): ReturnType<typeof Type.Object> => Type.Object({ message: Type.String() }, {
  description: `${quoted(TooManyFailuresError)} (too many failed authentications from this address), ` +
    `${quoted(VerificationBusyError)} (too many key verifications waiting), or ${limits}`,
  headers: { ...RetryAfterHeader, ...RateLimitHeaders }
})
const TooMany = tooMany(LIMIT_REFUSALS)

export const DatasetHeaders = Type.Object({
  'if-none-match': Type.Optional(Type.String({
    description: 'the `ETag` of a download kept before: 304 with no body while the dataset\'s revision and the query are the same'
  })),
  'accept-encoding': Type.Optional(Type.String({
    description: '`br` or `gzip` compresses sql, json, csv, `meta=ddl` and tar answers (zip archives, Parquet and Arrow are not compressed again)'
  })),
  range: Type.Optional(Type.String({
    description: '`bytes=<first>-<last>`, `bytes=<first>-` or `bytes=-<suffix>`: one range of a parquet or arrow download of a dataset with a ' +
      'revision, answered 206 (416 past the end). Several ranges are answered with the whole file (200). Ignored for other downloads'
  })),
  'if-range': Type.Optional(Type.String({
    description: 'the strong `ETag` of the file: the Range applies only while the file is still the same, else the whole file comes (200)'
  }))
})

const ChangesUntilHeader = {
  'data-changes-until': Type.String({
    description: 'for a download of one entity with a change column, without `limit`: the greatest value of that column when the download started. ' +
      'The body holds no row past it; pass it as `since` next time to get every row written after it, each once'
  })
}

const EtagHeaders = {
  etag: Type.String({ description: 'weak; only for a dataset whose host gives a revision. Derived from the revision, the endpoint and the query parameters that shape the body' }),
  'cache-control': Type.String({ description: '`private, no-cache` with an ETag (keep it, revalidate each time); `no-store` without' })
}

export const DatasetResponses = {
  200: {
    description: 'the dataset in the chosen format (an attachment); `meta=entities` answers a JSON array, `meta=ddl` plain text',
    headers: {
      'content-disposition': Type.String({ description: 'attachment with a file name from the dataset' }),
      ...EtagHeaders,
      ...ChangesUntilHeader,
      'content-encoding': Type.String({ description: '`br` or `gzip` when Accept-Encoding asked for it and the body is text or tar, over 1 KiB' }),
      vary: Type.String({ description: '`accept-encoding`' }),
      ...RateLimitHeaders
    },
    content: {
      'application/sql': { schema: Type.String({ description: 'format=sql: a script that creates the tables and inserts the rows in one transaction' }) },
      'application/json': { schema: Type.Unknown({ description: 'format=json: one object keyed by entity name, each an array of row objects; meta=entities: an array of names' }) },
      'application/zip': { schema: Type.String({ format: 'binary', description: 'csv-zip, json-zip, oracle-loader with archiveType=zip' }) },
      'application/x-tar': { schema: Type.String({ format: 'binary', description: 'csv-zip, json-zip, oracle-loader with archiveType=tar' }) },
      'text/csv': { schema: Type.String({ description: 'format=csv: one entity, RFC 4180 with a header row' }) },
      'application/vnd.apache.parquet': { schema: Type.String({ format: 'binary', description: 'format=parquet: one entity' }) },
      'application/vnd.apache.arrow.stream': { schema: Type.String({ format: 'binary', description: 'format=arrow: one entity, an Arrow IPC stream' }) },
      'text/plain': { schema: Type.String({ description: 'meta=ddl' }) }
    }
  },
  206: {
    description: 'one byte range of a parquet or arrow download of a dataset with a revision (`Range`). A counted, successful call, as a 200 is',
    headers: {
      'content-range': Type.String({ description: '`bytes <first>-<last>/<length>`' }),
      'accept-ranges': Type.String({ description: '`bytes`' }),
      etag: Type.String({ description: 'strong: the hash of the file\'s bytes, after the download\'s own tag' })
    },
    content: {
      'application/vnd.apache.parquet': { schema: Type.String({ format: 'binary' }) },
      'application/vnd.apache.arrow.stream': { schema: Type.String({ format: 'binary' }) }
    }
  },
  304: {
    description: 'Not Modified, no body: `If-None-Match` named the current ETag. A counted, successful call, as a 200 is',
    headers: { ...EtagHeaders, ...ChangesUntilHeader }
  },
  // parseDownloadQuery's messages (dataset-download.ts), written there inline;
  // openapi.test.ts checks each against a real answer.
  400: errorBody('`Invalid archiveType: must be one of zip, tar`, `Invalid meta: must be one of entities, ddl`, ' +
    '`Invalid limit: must be a non-negative integer`, `Invalid entity: the dataset has no entity of that name` or ' +
    '`Invalid entity: <format> holds one entity; name one with entity=` (csv, parquet, arrow without `entity` on a dataset with several); ' +
    '`Invalid columns: not supported by this dataset`, `Invalid where: not supported by this dataset`, ' +
    '`Invalid since: not supported by this dataset` (the host does not declare it for the entity); ' +
    '`Invalid <name>: it applies to one entity; name one with entity=` (columns, where, since); ' +
    '`Invalid columns: no column "<name>" in entity "<entity>"`, `Invalid columns: column "<name>" appears twice`; ' +
    '`Invalid where: ...` naming the column whose literal is malformed (`column "<name>" needs an integer, written bare (42)`) or the ' +
    'position outside the grammar; `Invalid since: ...`'),
  403: Refused,
  404: errorBody('`Not found` (a sequence that is not a positive integer) or `Dataset not found`'),
  405: WrongMethod,
  416: Type.Object({ message: Type.String() }, {
    description: '`Range not satisfiable: the file has <length> bytes`: the Range starts past the end of the file',
    headers: { 'content-range': Type.String({ description: '`bytes */<length>`' }) }
  }),
  429: TooMany,
  500: errorBody(`\`Unknown download format <value>, supported formats = ${FORMAT_LIST}\`, or the server's message`),
  503: Type.Object({ message: Type.String() }, {
    description: `${quoted(TarSpoolFullError)}: archiveType=tar holds each entry on disk until its size is known, ` +
      'and the disk budget for that (option `tarSpool.maxBytes`) is taken by other downloads or is smaller than the entry; or ' +
      `${quoted(ParquetEncodersBusyError)}: more Parquet downloads wait for an encoding thread than option \`parquetMaxWaiting\` allows`,
    headers: RetryAfterHeader
  })
}

export const JobReference = Type.Object({
  job_id: Type.String({ format: 'uuid' }),
  job_url: Type.String({ description: '<base_url>/api/job/<job_id>' })
}, {
  description: 'the job reference of the run this call started, or with `Idempotent-Replayed: true` the first call\'s, replayed',
  headers: {
    ...RateLimitHeaders,
    'idempotent-replayed': Type.Enum(['true'], {
      type: 'string',
      description: '`true` when the body replays the first call with this `Idempotency-Key` (nothing started); absent otherwise'
    })
  }
})

export const PipelineResponses = {
  200: JobReference,
  // runPipeline's message (data-routes.ts), written there inline; checked as above.
  400: errorBody('`Idempotency-Key must be 1 to 255 visible ASCII characters`'),
  403: Refused,
  404: errorBody('`Not found` (a sequence that is not a positive integer) or `Pipeline not found`'),
  405: WrongMethod,
  409: errorBody(`${quoted(IdempotencyInProgressError)}: another call with this key had not stored its answer after this one ` +
    'waited 10 s for it: it is still starting its run, or was cut off after claiming the key (held until `idempotencyTtl`)'),
  429: tooMany(`${quoted(RateLimitedError)} (the key's requestsPerMinute)`),
  500: errorBody('the server\'s message; check the job status before retrying')
}

export const JobParams = Type.Object({
  jobId: Type.String({ description: 'the job_id a pipeline call returned (a UUID)' })
})

export const JobStatus = Type.Object({
  job_id: Type.String({ format: 'uuid' }),
  type: Type.Enum(['pipeline', 'dump'], { type: 'string' }),
  status: Type.Enum(['queued', 'running', 'succeeded', 'failed'], { type: 'string' }),
  created_at: Type.String({ format: 'date-time' }),
  updated_at: Type.String({ format: 'date-time' }),
  error: Type.Optional(Type.String({ description: 'why a failed job failed' }))
}, { description: 'the job\'s status' })

export const JobResponses = {
  200: JobStatus,
  404: Type.Object({
    message: Type.String(),
    id: Type.Optional(Type.String({ description: 'with `Invalid job id`: the id given' })),
    job: Type.Optional(Type.String({ description: 'with `Job is not available or has been deleted`: the job id' }))
  }, { description: '`Invalid job id` (with `id`), `Job is not available or has been deleted` (with `job`), or `Dataset is not available or has been deleted` (a dump job whose dataset is gone)' }),
  500: errorBody('the server\'s message')
}

// Download links (DESIGN.md §4.2)

export const MintLinkBody = Type.Object({
  expiresIn: Type.Optional(Type.Integer({
    minimum: 1,
    default: 3600,
    description: 'seconds the link lives: at most `maxLinkLifetime` (default 7 days) and never past the key\'s `expiresAt`; else 400 naming it'
  })),
  ...DatasetQuery.properties
}, {
  additionalProperties: false,
  description: 'the dataset GET\'s query parameters the link downloads with, validated as the GET validates them, and `expiresIn`'
})

export const MintLinkAnswer = Type.Object({
  id: Type.String({ description: 'the link\'s id, to list or revoke it' }),
  url: Type.String({
    description: '`<base>/api/links/<token>/<file name>`: the token is shown this once; the file name carries the format\'s extension'
  }),
  expiresAt: Type.String({ format: 'date-time' })
}, { description: 'the new link' })

export const LinkUseParams = Type.Object({
  token: Type.String({ description: 'the signed token, as minted' }),
  fileName: Type.String({ description: 'the file name the link was minted with; another name is `Unknown link`' })
})

export const Link = Type.Object({
  id: Type.String(),
  keyId: Type.String(),
  endpointId: Type.String(),
  params: Type.Record(Type.String(), Type.String(), { description: 'the dataset GET\'s query parameters the link downloads with' }),
  createdAt: Type.String({ format: 'date-time' }),
  expiresAt: Type.String({ format: 'date-time' }),
  revokedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()])
})
export type LinkBody = Static<typeof Link>

export const LinksAnswer = Type.Object({ items: Type.Array(Link) })

export const LinksQuerystring = Type.Object({
  keyId: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'only this key\'s links' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_PAGE_LIMIT, default: 100, description: 'at most this many, newest first' }))
}, { additionalProperties: false })

export const LinkParams = Type.Object({
  organization: Moniker,
  project: Moniker,
  linkId: Type.String({ minLength: 1, maxLength: 100 })
})
