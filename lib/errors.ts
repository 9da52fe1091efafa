import createError from '@fastify/error'

// The one catalogue of errors the plugin answers with. Each carries a stable
// code (for hosts and tests to match on), the exact message of SPEC.md §7 /
// DESIGN.md §2 and §4, and its status. Bodies show only `message`.

export const SUPPORTED_FORMATS = 'json|sql|csv-zip|json-zip|oracle-loader|csv|parquet|parquet-zip|arrow'

// Answers, not faults: they carry no stack trace, whose capture would cost
// every refused request (a flood of wrong keys is mostly refusals).
function answer<Arg extends unknown[] = []> (code: string, message: string, statusCode: number) {
  return createError<Arg>(code, message, statusCode, Error, false)
}

// Data routes (DESIGN.md §2, in the order the checks run)
export const NotFoundError = answer('FDE_NOT_FOUND', 'Not found', 404)
export const MethodNotAllowedError = answer('FDE_METHOD_NOT_ALLOWED', 'Endpoint or method not allowed', 405)
export const HttpsRequiredError = answer('FDE_HTTPS_REQUIRED', 'HTTPS required', 403)
export const NotAuthorizedError = answer('FDE_NOT_AUTHORIZED', 'Not authorized', 403)
export const UnknownEndpointError = answer('FDE_UNKNOWN_ENDPOINT', 'Unknown API Endpoint', 403)
export const UnknownKeyError = answer('FDE_UNKNOWN_KEY', 'Unknown API key', 403)
export const DisabledKeyError = answer('FDE_DISABLED_KEY', 'Disabled API key', 403)
// An expired key is inactive too (DESIGN.md §4.1): the same answer, its own code.
export const ExpiredKeyError = answer('FDE_EXPIRED_KEY', 'Disabled API key', 403)
export const TooManyFailuresError = answer('FDE_TOO_MANY_FAILURES', 'Too many failed authentication attempts', 429)
export const VerificationBusyError = answer('FDE_VERIFICATION_BUSY', 'Too many key verifications in progress', 429)
// Per-key limits (DESIGN.md §4.3), after the key is verified
export const RateLimitedError = answer('FDE_RATE_LIMITED', 'Rate limit exceeded', 429)
export const TooManyDownloadsError = answer('FDE_TOO_MANY_DOWNLOADS', 'Too many concurrent downloads', 429)
export const DailyQuotaError = answer('FDE_DAILY_QUOTA', 'Daily download quota exceeded', 429)
export const DatasetNotFoundError = answer('FDE_DATASET_NOT_FOUND', 'Dataset not found', 404)
export const PipelineNotFoundError = answer('FDE_PIPELINE_NOT_FOUND', 'Pipeline not found', 404)
export const UnknownFormatError = answer<[string]>(
  'FDE_UNKNOWN_FORMAT', `Unknown download format %s, supported formats = ${SUPPORTED_FORMATS}`, 500)
export const InvalidParameterError = answer<[string]>('FDE_INVALID_PARAMETER', '%s', 400)
export const IdempotencyInProgressError = answer(
  'FDE_IDEMPOTENCY_IN_PROGRESS', 'A request with this Idempotency-Key is still in progress', 409)
export const ParquetEncodersBusyError = answer(
  'FDE_PARQUET_ENCODERS_BUSY', 'Too many Parquet downloads waiting for an encoder; retry later', 503)
export const RangeNotSatisfiableError = answer<[string]>(
  'FDE_RANGE_NOT_SATISFIABLE', 'Range not satisfiable: the file has %s bytes', 416)
export const TarSpoolFullError = answer(
  'FDE_TAR_SPOOL_FULL', 'Not enough temporary space for a tar download; retry later or use archiveType=zip', 503)

// Download links (DESIGN.md §4.2, in the order the checks run)
export const UnknownLinkError = answer('FDE_UNKNOWN_LINK', 'Unknown link', 403)
export const RevokedLinkError = answer('FDE_REVOKED_LINK', 'Revoked link', 403)
export const ExpiredLinkError = answer('FDE_EXPIRED_LINK', 'Expired link', 403)

// Job status route (SPEC.md §7.3)
export const InvalidJobIdError = answer('FDE_INVALID_JOB_ID', 'Invalid job id', 404)
export const JobNotAvailableError = answer('FDE_JOB_NOT_AVAILABLE', 'Job is not available or has been deleted', 404)
export const JobDatasetGoneError = answer('FDE_JOB_DATASET_GONE', 'Dataset is not available or has been deleted', 404)

// Management routes (DESIGN.md §4)
export const ManagementNotAuthorizedError = answer('FDE_MANAGEMENT_NOT_AUTHORIZED', 'Not authorized', 403)
export const KeyNotFoundError = answer('FDE_KEY_NOT_FOUND', 'API key not found', 404)
export const EndpointNotFoundError = answer('FDE_ENDPOINT_NOT_FOUND', 'Endpoint not found', 404)
export const LinkNotFoundError = answer('FDE_LINK_NOT_FOUND', 'Link not found', 404)
export const BadRequestError = answer<[string]>('FDE_BAD_REQUEST', '%s', 400)

// A failure the client cannot act on: storage that failed (its text may name
// tables, values or hosts) or an answer that did not fit its schema. The
// detail, its `cause`, goes to the log only.
export const InternalServerError = answer<[{ cause: unknown }]>('FDE_INTERNAL', 'Internal server error', 500)

// Options checked at registration
export const InvalidOptionError = createError<[string]>('FDE_INVALID_OPTION', 'fastify-data-endpoints: %s')

/** Attaches response headers and extra body fields to a catalogue error. */
export function withDetails<E extends Error> (error: E, details: { headers?: Record<string, string>, body?: Record<string, string> }): E {
  return Object.assign(error, details)
}
