import createError from '@fastify/error'

// The one catalogue of errors the plugin answers with. Each carries a stable
// code (for hosts and tests to match on), the exact message of SPEC.md §7 /
// DESIGN.md §2 and §4, and its status. Bodies show only `message`.

const SUPPORTED_FORMATS = 'json|sql|csv-zip|json-zip|oracle-loader'

// Data routes (DESIGN.md §2, in the order the checks run)
export const NotFoundError = createError('FDE_NOT_FOUND', 'Not found', 404)
export const MethodNotAllowedError = createError('FDE_METHOD_NOT_ALLOWED', 'Endpoint or method not allowed', 405)
export const HttpsRequiredError = createError('FDE_HTTPS_REQUIRED', 'HTTPS required', 403)
export const NotAuthorizedError = createError('FDE_NOT_AUTHORIZED', 'Not authorized', 403)
export const UnknownEndpointError = createError('FDE_UNKNOWN_ENDPOINT', 'Unknown API Endpoint', 403)
export const UnknownKeyError = createError('FDE_UNKNOWN_KEY', 'Unknown API key', 403)
export const DisabledKeyError = createError('FDE_DISABLED_KEY', 'Disabled API key', 403)
export const TooManyFailuresError = createError('FDE_TOO_MANY_FAILURES', 'Too many failed authentication attempts', 429)
export const VerificationBusyError = createError('FDE_VERIFICATION_BUSY', 'Too many key verifications in progress', 429)
export const DatasetNotFoundError = createError('FDE_DATASET_NOT_FOUND', 'Dataset not found', 404)
export const PipelineNotFoundError = createError('FDE_PIPELINE_NOT_FOUND', 'Pipeline not found', 404)
export const UnknownFormatError = createError<[string]>(
  'FDE_UNKNOWN_FORMAT', `Unknown download format %s, supported formats = ${SUPPORTED_FORMATS}`, 500)
export const InvalidParameterError = createError<[string]>('FDE_INVALID_PARAMETER', '%s', 400)
export const IdempotencyInProgressError = createError(
  'FDE_IDEMPOTENCY_IN_PROGRESS', 'A request with this Idempotency-Key is still in progress', 409)

// Job status route (SPEC.md §7.3)
export const InvalidJobIdError = createError('FDE_INVALID_JOB_ID', 'Invalid job id', 404)
export const JobNotAvailableError = createError('FDE_JOB_NOT_AVAILABLE', 'Job is not available or has been deleted', 404)
export const JobDatasetGoneError = createError('FDE_JOB_DATASET_GONE', 'Dataset is not available or has been deleted', 404)

// Management routes (DESIGN.md §4)
export const ManagementNotAuthorizedError = createError('FDE_MANAGEMENT_NOT_AUTHORIZED', 'Not authorized', 403)
export const KeyNotFoundError = createError('FDE_KEY_NOT_FOUND', 'API key not found', 404)
export const EndpointNotFoundError = createError('FDE_ENDPOINT_NOT_FOUND', 'Endpoint not found', 404)
export const BadRequestError = createError<[string]>('FDE_BAD_REQUEST', '%s', 400)

// Options checked at registration
export const InvalidOptionError = createError<[string]>('FDE_INVALID_OPTION', 'fastify-data-endpoints: %s')
