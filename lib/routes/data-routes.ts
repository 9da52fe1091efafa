import { randomUUID } from 'node:crypto'
import zlib from 'node:zlib'
import fastifyCompress from '@fastify/compress'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { redactKeys } from '../keys/api-key.js'
import { authenticateHook, type AuthenticatedCall } from '../keys/authenticate.js'
import type { PluginContext } from './context.js'
import type { Dataset, ResourceRef } from '../host/dataset-source.js'
import { isThenable } from '../host/thenable.js'
import { sendDataset, type DownloadContext } from '../downloads/dataset-download.js'
import { PARQUET_CODECS } from '../formats/parquet-row-group.js'
import { errorCodeOf, errorMessageOf, noteFailure, sendError } from './error-reply.js'
import {
  BadRequestError, DatasetNotFoundError, IdempotencyInProgressError, PipelineNotFoundError
} from '../errors.js'
import { logsAt, redactUrl } from './log-redaction.js'
import { reasonOf } from '../metrics.js'
import { datasetRoute, documentationOnly, pipelineRoute } from './openapi.js'
import { linkRoutes, refOf } from './link-routes.js'
import type { Pipeline } from '../host/pipeline-runner.js'
import type { IdempotencyClaim } from '../storage/storage.js'

/** Relative to the /api prefix the plugin registers it under. */
export const DATA_ROUTE = '/:organization/:project/model/:modelSequence/:type/:resourceSequence'

// How long a call waits for a concurrent call with the same Idempotency-Key
// to finish before answering 409.
const IDEMPOTENCY_WAIT_MS = 10_000
const IDEMPOTENCY_POLL_MS = 25
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/

// A host name, IPv4 address or [IPv6 address], with an optional port.
const HOST = /^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$/

/**
 * The host for `job_url` when no `baseUrl` is set: the request's Host header
 * (or X-Forwarded-Host behind a trusted proxy) when it is a plain host, else
 * the address the request came in on (HTTP/1.0 needs no Host). The header is
 * the client's to write: it must not add a path, query or user to the URL, nor
 * carry a key into the body. Set `baseUrl` where clients must get one address.
 */
export function hostOf (request: FastifyRequest): string {
  const host = request.host as string | undefined
  if (host !== undefined && HOST.test(host) && redactKeys(host) === host) return host
  const { localAddress, localPort } = request.socket
  if (localAddress === undefined) return 'localhost'
  const address = localAddress.startsWith('::ffff:') ? localAddress.slice(7) : localAddress
  return (address.includes(':') ? `[${address}]` : address) + (localPort === undefined ? '' : `:${localPort}`)
}

export interface JobReference {
  job_id: string
  job_url: string
}

/**
 * sql, json, csv, meta=ddl, tar, and the JSON answers (a long error, a job
 * reference). Not Parquet nor Arrow: Parquet is compressed inside, and both
 * are read in place by byte ranges, which must count the bytes of the file.
 */
const COMPRESSIBLE_TYPES = /^(application\/(sql|json|x-tar)|text\/(plain|csv))(;|$)/

/** The data routes and their key hook, in their own encapsulated context. */
export async function dataRoutes (app: FastifyInstance, { ctx }: { ctx: PluginContext }): Promise<void> {
  const { options, storage, idempotencyReleaser } = ctx

  app.decorateRequest('dataEndpointCall', null)
  app.decorateRequest('dataEndpointKeyPrefix', undefined)
  app.setErrorHandler(sendError)
  // SPEC.md §4.2 describes no request body: a pipeline call ignores whatever
  // body comes, in any content type or none, rather than refusing clients that
  // always send one (`curl -d ''`, ETL tools). Node discards the unread bytes.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (request, payload, done) => { done(null, undefined) })

  // Text downloads shrink five to ten times. @fastify/compress picks br or
  // gzip by Accept-Encoding and streams with backpressure; a body within one
  // chunk is compressed in one step and keeps its Content-Length. zip
  // archives are compressed already. Request bodies are never read, so
  // never decompressed.
  if (options.compression) {
    await app.register(fastifyCompress, {
      global: true,
      globalDecompression: false,
      // gzip first: a client that takes both gets it; br for one that prefers it.
      encodings: ['gzip', 'br'],
      customTypes: COMPRESSIBLE_TYPES,
      syncThreshold: options.downloadChunkSize,
      // A download held by a client that stops reading keeps its encoder's
      // state: brotli's default (quality 11, a 4 MiB window) holds megabytes,
      // quality 4 with a 256 KiB window still 0.9 MiB. Quality 2 with a
      // 16 KiB window holds about 0.35 MiB, near gzip's 0.3, and on our json
      // and sql compresses better than either (16-17 times, against 9 for
      // gzip and 14 for quality 4) in half gzip's time (docs/benchmarks.md).
      brotliOptions: { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 2, [zlib.constants.BROTLI_PARAM_LGWIN]: 14 } }
    })
  }
  const download: DownloadContext = {
    tarSpool: ctx.tarSpool,
    chunkSize: options.downloadChunkSize,
    renderedBodies: ctx.renderedBodies,
    renderedFiles: ctx.renderedFiles,
    columnar: {
      batchBytes: options.columnarBatchBytes,
      encoders: ctx.parquetEncoders,
      codec: PARQUET_CODECS[options.parquetCompression]
    },
    metrics: ctx.metrics,
    compression: options.compression,
    noteFailure
  }

  // SPEC.md §7.4: each call is logged with its URL (api_key redacted),
  // status, message and the key prefix, never the key. Without a logger the
  // log hooks are not added at all; with one, the line (its redacted URL, and
  // the close listener below) is made only when its level writes info lines.
  // Metrics: every answer by route, status and reason. The route is the
  // path's type when it names one, so the label stays from a fixed set.
  // Both are one synchronous onResponse hook: each async hook costs every
  // request a promise and a turn of the microtask queue.
  const { metrics } = ctx
  const logged = new WeakSet<FastifyRequest>()
  const logCall = (request: FastifyRequest, reply: FastifyReply, message: string | undefined): void => {
    if (!logsAt(request.log, 'info') || logged.has(request)) return
    logged.add(request)
    request.log.info({
      url: redactUrl(request.url),
      statusCode: reply.statusCode,
      message,
      keyPrefix: request.dataEndpointKeyPrefix
    }, 'data endpoint call')
  }
  if (ctx.logs || metrics !== null) {
    app.addHook('onResponse', (request, reply, done) => {
      if (ctx.logs) logCall(request, reply, errorMessageOf(request))
      if (metrics !== null) {
        const type = (request.params as { type?: string }).type
        const route = type === 'dataset' || type === 'pipeline' ? type : 'other'
        metrics.request(route, reply.statusCode, reasonOf(reply.statusCode, errorCodeOf(request)))
      }
      done()
    })
  }
  if (ctx.logs) {
    // A download cut short after its headers (the source failed, the client
    // left) never reaches onResponse; it is logged when the connection closes.
    app.addHook('onRequest', (request, reply, done) => {
      if (logsAt(request.log, 'info')) {
        reply.raw.once('close', () => {
          if (!reply.raw.writableFinished) {
            logCall(request, reply, errorMessageOf(request) ?? 'Response not completed: the client closed the connection')
          }
        })
      }
      done()
    })
  }

  function baseUrl (request: FastifyRequest): string {
    return options.baseUrl ?? `${request.protocol}://${hostOf(request)}`
  }

  async function startRun (pipeline: Pipeline, request: FastifyRequest): Promise<JobReference> {
    const jobId = randomUUID()
    await pipeline.start(jobId)
    return { job_id: jobId, job_url: `${baseUrl(request)}/api/job/${jobId}` }
  }

  async function runPipeline (request: FastifyRequest, reply: FastifyReply, call: AuthenticatedCall): Promise<unknown> {
    const pipeline = await options.pipelines.getPipeline(refOf(call.locator))
    if (pipeline === null) throw new PipelineNotFoundError()
    const idempotencyKey = request.headers['idempotency-key']
    if (idempotencyKey === undefined) return startRun(pipeline, request)
    if (typeof idempotencyKey !== 'string' || !IDEMPOTENCY_KEY.test(idempotencyKey)) {
      throw new BadRequestError('Idempotency-Key must be 1 to 255 visible ASCII characters')
    }

    // Remembered per endpoint and API key: another key's same Idempotency-Key
    // is its own call. This call's claim token releases its claim and no other.
    const scope = { endpointId: call.endpointId, keyId: call.keyId }
    const token = randomUUID()
    const release = async (): Promise<void> => idempotencyReleaser.release(scope, idempotencyKey, token)
    const deadline = Date.now() + IDEMPOTENCY_WAIT_MS
    while (true) {
      let claim: IdempotencyClaim
      try {
        claim = await storage.claimIdempotencyKey(scope, idempotencyKey, options.idempotencyTtl, token)
      } catch (err) {
        // The claim may have been written with its answer lost: nothing ran,
        // so free it, or the key would be held for idempotencyTtl.
        await release()
        throw err
      }
      if (claim.claimed) {
        let body: JobReference
        try {
          body = await startRun(pipeline, request)
        } catch (err) {
          // Nothing started: let a retry with the same key run.
          await release()
          throw err
        }
        // Until this write lands the key stays claimed without a body: later
        // calls get 409 rather than a second run. The run itself did start, so
        // a failed write is retried in the background.
        await idempotencyReleaser.complete(scope, idempotencyKey, token, JSON.stringify(body))
        return body
      }
      if (claim.response !== null) {
        return reply.header('idempotent-replayed', 'true').type('application/json; charset=utf-8').send(claim.response)
      }
      if (Date.now() >= deadline) throw new IdempotencyInProgressError()
      await new Promise((resolve) => setTimeout(resolve, IDEMPOTENCY_POLL_MS))
    }
  }

  // Not an async function: a host whose getDataset answers at once (a Map,
  // a prepared statement) gets its download started in the same turn, with
  // no promise to wait for first.
  function dataEndpoint (request: FastifyRequest, reply: FastifyReply): Promise<unknown> {
    const call = request.dataEndpointCall as AuthenticatedCall
    if (call.locator.type === 'pipeline') return runPipeline(request, reply, call)
    const ref = refOf(call.locator)
    const found = options.datasets.getDataset(ref)
    if (isThenable(found)) return Promise.resolve(found).then((dataset) => sendFound(request, reply, dataset, ref))
    return sendFound(request, reply, found, ref)
  }

  function sendFound (request: FastifyRequest, reply: FastifyReply, dataset: Dataset | null, ref: ResourceRef): Promise<unknown> {
    if (dataset === null) throw new DatasetNotFoundError()
    return sendDataset(request, reply, dataset, ref, download)
  }

  // Every method on DATA_ROUTE goes through the same key hook and handler, as
  // with `app.all`; GET and POST are routes of their own only to carry their
  // OpenAPI schemas, which never validate (the hook answers in DESIGN.md §2
  // order). The other methods, HEAD included, come first, so GET gets no
  // second HEAD route.
  documentationOnly(app)
  const onRequest = authenticateHook({ ...ctx, requireHttps: options.requireHttps })
  const otherMethods = app.supportedMethods.filter((m) => m !== 'GET' && m !== 'POST')
  app.route({ method: otherMethods, url: DATA_ROUTE, onRequest, schema: { hide: true }, handler: dataEndpoint })
  app.route({ method: 'GET', url: DATA_ROUTE, onRequest, exposeHeadRoute: false, ...datasetRoute, handler: dataEndpoint })
  app.route({ method: 'POST', url: DATA_ROUTE, onRequest, ...pipelineRoute, handler: dataEndpoint })
  await linkRoutes(app, { ctx, download, baseUrl })
}
