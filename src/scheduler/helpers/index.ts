// The service side of the task helpers (docs/helpers.md). A run's helper endpoint is
// {scheduler_url}/internal/v1/runs/{runId}; the sandbox's bootstrap POSTs to its sub-paths
// generate_text, call, store_artifact and request_continuation with `Authorization: Bearer
// $AGW_RUN_TOKEN` and reads {status, body} from the answer. Errors are problem+json from the
// catalogue; call(...) otherwise mirrors the target's status and body.
//
// registerSiblingPublicRoutes adds what the siblings and artifacts serve to everybody:
// /s/{code}, /cdn/{taskId}/{name}, /f/{formId}, /inbox/{inboxId}, /artifacts/..., /shots/....
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { Static } from '@sinclair/typebox'
import type { BlobStore } from '../../platform/blobs.ts'
import type { Clock } from '../../platform/clock.ts'
import type { Db } from '../../platform/db/index.ts'
import { AppError } from '../../platform/errors.ts'
import type { Logger } from '../../platform/logger.ts'
import type { SchedulerRates } from '../domain/rates.ts'
import { storeArtifact } from './artifacts.ts'
import { callHelper, type MarketplaceConfig } from './call.ts'
import { check, sendPublicFile } from './common.ts'
import { requestContinuation } from './continuation.ts'
import { egressPolicy, type EgressOptions } from '../../platform/egress.ts'
import { generateText, type LlmUpstreamConfig } from './llm.ts'
import { authenticateRun, bearerToken, type HelperRun } from './run.ts'
import {
  ArtifactParams,
  BinaryFile,
  CallBody,
  CallResponse,
  CdnParams,
  FormParams,
  FormSubmissionResponse,
  GenerateTextBody,
  GenerateTextResponse,
  InboxIngestResponse,
  InboxParams,
  Problem,
  RequestContinuationBody,
  RequestContinuationResponse,
  RunParams,
  ShortCodeParams,
  ShotParams,
  StableArtifactParams,
  StoreArtifactBody,
  StoreArtifactResponse,
} from './schemas.ts'
import { cdnPath } from './siblings/cdn.ts'
import { formPage, loadForm, storeSubmission, submissionValues } from './siblings/forms.ts'
import { IncomingMessage, ingestMessage } from './siblings/inbox.ts'
import type { ScreenshotConfig } from './siblings/types.ts'
import { resolveShortLink } from './siblings/urlshortener.ts'

export type { LlmUpstreamConfig } from './llm.ts'
export type { MarketplaceConfig } from './call.ts'
export type { EgressOptions } from '../../platform/egress.ts'
export type { ScreenshotConfig } from './siblings/types.ts'

export interface HelperDeps {
  db: Db
  clock: Clock
  rates: SchedulerRates
  logger: Logger
  blobs: BlobStore
  /** {scheduler_url}: public links (short links, forms, files) are built on it. */
  publicSchedulerUrl: string
  llm: LlmUpstreamConfig
  marketplace: MarketplaceConfig
  screenshot?: ScreenshotConfig
  /** The private-address rule for capabilities and screenshots: exemptions, resolver, the rule itself. */
  egress?: EgressOptions
  /** Domain of inbox addresses; default the host name of publicSchedulerUrl. */
  inboxDomain?: string
}

export type PublicRouteDeps = Pick<HelperDeps, 'db' | 'blobs' | 'clock' | 'logger'>

export const HELPER_PATH_PREFIX = '/internal/v1/runs'

const ERRORS = { '4xx': Problem, '5xx': Problem }
const hidden = { hide: true } as object

export function registerHelperRoutes(app: FastifyInstance, deps: HelperDeps): void {
  const runs = new WeakMap<FastifyRequest, HelperRun>()
  // Authentication runs before body validation: a caller without the run's token learns nothing
  // else. runId is the router's path segment, its pattern not checked yet.
  const authenticate = async (request: FastifyRequest<{ Params: Static<typeof RunParams> }>): Promise<void> => {
    const { runId } = request.params
    runs.set(request, await authenticateRun(deps.db, runId, bearerToken(request.headers)))
  }
  const runOf = (request: FastifyRequest): HelperRun => runs.get(request)!
  const egress = egressPolicy(deps.egress)
  const callDeps = {
    ...deps,
    egress,
    egressAllow: deps.egress?.allow ?? [],
    screenshot: deps.screenshot ?? {},
    inboxDomain: deps.inboxDomain ?? new URL(deps.publicSchedulerUrl).hostname,
  }
  // Room for a base64 file of max_artifact_bytes in a JSON envelope.
  const fileBodyLimit = Math.ceil((deps.rates.hard_caps.max_artifact_bytes * 4) / 3) + (1 << 20)
  const base = `${HELPER_PATH_PREFIX}/:runId`
  const routes = app.withTypeProvider<TypeBoxTypeProvider>()

  routes.post(
    `${base}/generate_text`,
    {
      schema: { ...hidden, params: RunParams, body: GenerateTextBody, response: { 200: GenerateTextResponse, ...ERRORS } },
      bodyLimit: 4 << 20,
      preValidation: authenticate,
    },
    async (request) => generateText(deps, runOf(request), request.body),
  )

  routes.post(
    `${base}/call`,
    {
      schema: { ...hidden, params: RunParams, body: CallBody, response: { '2xx': CallResponse, '4xx': CallResponse, '5xx': CallResponse } },
      bodyLimit: fileBodyLimit,
      preValidation: authenticate,
    },
    async (request, reply) => {
      const result = await callHelper(callDeps, runOf(request), request.body)
      reply.code(result.status)
      if (result.status === 204 || result.status === 304) return reply.send()
      return reply.type('application/json; charset=utf-8').send(JSON.stringify(result.body ?? null))
    },
  )

  routes.post(
    `${base}/store_artifact`,
    {
      schema: { ...hidden, params: RunParams, body: StoreArtifactBody, response: { 201: StoreArtifactResponse, ...ERRORS } },
      bodyLimit: fileBodyLimit,
      preValidation: authenticate,
    },
    async (request, reply) => {
      const out = await storeArtifact(deps, runOf(request), request.body)
      return reply.code(201).send(out)
    },
  )

  routes.post(
    `${base}/request_continuation`,
    {
      schema: { ...hidden, params: RunParams, body: RequestContinuationBody, response: { 200: RequestContinuationResponse, ...ERRORS } },
      preValidation: authenticate,
    },
    async (request) => requestContinuation(deps, runOf(request), request.body?.delay_sec ?? 0),
  )
}

const USER_CONTENT_PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"

function wantsHtml(request: FastifyRequest): boolean {
  return (request.headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded') && (request.headers.accept ?? '').includes('text/html')
}

function sendHtml(reply: FastifyReply, status: number, html: string): FastifyReply {
  return reply.code(status).type('text/html; charset=utf-8').header('content-security-policy', USER_CONTENT_PAGE_CSP).header('x-content-type-options', 'nosniff').send(html)
}

/**
 * Public routes of the siblings and artifacts. Registered in their own encapsulated scope (HTML
 * form posts need an application/x-www-form-urlencoded parser that the rest of the app does not
 * get); they exist once the app is ready.
 */
export function registerSiblingPublicRoutes(app: FastifyInstance, deps: PublicRouteDeps): void {
  app.register(async (plain) => {
    const scope = plain.withTypeProvider<TypeBoxTypeProvider>()
    if (!scope.hasContentTypeParser('application/x-www-form-urlencoded')) {
      scope.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string', bodyLimit: 64 << 10 }, (_request, body, done) => {
        done(null, Object.fromEntries(new URLSearchParams(body as string)))
      })
    }

    scope.get('/s/:code', { schema: { ...hidden, params: ShortCodeParams, response: { 404: Problem } } }, async (request, reply) => {
      const { code } = request.params
      const url = await resolveShortLink(deps.db, code)
      if (url === undefined) throw new AppError('not_found', `No short link ${code}`)
      return reply.header('cache-control', 'no-cache').redirect(url, 302)
    })

    scope.get('/cdn/:taskId/:name', { schema: { ...hidden, params: CdnParams, response: { 200: BinaryFile, 404: Problem } } }, async (request, reply) => {
      const { taskId, name } = request.params
      return sendPublicFile(deps, reply, cdnPath(taskId, name), 'public, max-age=60')
    })

    scope.get('/artifacts/:taskId/:name', { schema: { ...hidden, params: StableArtifactParams, response: { 200: BinaryFile, 404: Problem } } }, async (request, reply) => {
      const { taskId, name } = request.params
      return sendPublicFile(deps, reply, `artifacts/${taskId}/${name}`, 'no-cache')
    })

    scope.get('/artifacts/:taskId/:id/:name', { schema: { ...hidden, params: ArtifactParams, response: { 200: BinaryFile, 404: Problem } } }, async (request, reply) => {
      const { taskId, id, name } = request.params
      return sendPublicFile(deps, reply, `artifacts/${taskId}/${id}/${name}`, 'public, max-age=31536000, immutable')
    })

    scope.get('/shots/:taskId/:file', { schema: { ...hidden, params: ShotParams, response: { 200: BinaryFile, 404: Problem } } }, async (request, reply) => {
      const { taskId, file } = request.params
      return sendPublicFile(deps, reply, `shots/${taskId}/${file}`, 'public, max-age=31536000, immutable')
    })

    scope.get('/f/:formId', { schema: { ...hidden, params: FormParams, response: { 200: BinaryFile, 404: Problem } } }, async (request, reply) => {
      const { formId } = request.params
      const form = await loadForm(deps.db, formId)
      if (form === undefined) throw new AppError('not_found', `No form ${formId}`)
      return sendHtml(reply, 200, formPage(form))
    })

    scope.post('/f/:formId', { schema: { ...hidden, params: FormParams, response: { 201: FormSubmissionResponse, ...ERRORS } }, bodyLimit: 64 << 10 }, async (request, reply) => {
      const { formId } = request.params
      const form = await loadForm(deps.db, formId)
      if (form === undefined) throw new AppError('not_found', `No form ${formId}`)
      const body = request.body
      if (body === null || typeof body !== 'object' || Array.isArray(body)) {
        throw new AppError('VALIDATION_ERROR', 'Send the submission as a JSON object or an HTML form post', { field: 'body' })
      }
      const id = await storeSubmission(deps.db, formId, submissionValues(form, body as Record<string, unknown>), deps.clock.now())
      if (wantsHtml(request)) return sendHtml(reply, 201, '<!doctype html><meta charset="utf-8"><title>Thank you</title><p>Thank you, your answer was recorded.</p>\n')
      return reply.code(201).send({ ok: true, submission_id: id })
    })

    scope.post('/inbox/:inboxId', { schema: { ...hidden, params: InboxParams, response: { 201: InboxIngestResponse, ...ERRORS } }, bodyLimit: 2 << 20 }, async (request, reply) => {
      const { inboxId } = request.params
      check(IncomingMessage, request.body)
      const id = await ingestMessage(deps.db, inboxId, request.body, deps.clock.now())
      if (id === undefined) throw new AppError('not_found', `No inbox ${inboxId}`)
      return reply.code(201).send({ ok: true, message_id: id })
    })
  })
}
