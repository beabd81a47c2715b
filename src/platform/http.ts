// The fastify factory every listener is built from: one error handler speaking problem+json,
// request ids, one access-log line per request, metrics, health and readiness probes.
import { randomUUID } from 'node:crypto'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import { AppError, PROBLEM_CONTENT_TYPE, isAppError, type ProblemBody } from './errors.ts'
import type { Logger } from './logger.ts'
import type { Metrics } from './metrics.ts'

export type ReadinessCheck = () => Promise<boolean>

export interface HttpAppOptions {
  /** Listener name, used as a metrics label and in logs (`gateway`, `scheduler`, …). */
  name: string
  logger: Logger
  metrics: Metrics
  bodyLimitBytes: number
  /** Dependencies that must answer for /readyz to be 200 (database, redis, …). */
  readiness?: Record<string, ReadinessCheck>
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

export function sendProblem(reply: FastifyReply, problem: ProblemBody, headers: Record<string, string> = {}): FastifyReply {
  reply.code(problem.status)
  for (const [name, value] of Object.entries(headers)) reply.header(name, value)
  return reply.type(PROBLEM_CONTENT_TYPE).send(JSON.stringify(problem))
}

interface AjvIssue {
  instancePath?: string
  keyword?: string
  message?: string
  params?: Record<string, unknown>
}

/** Names the offending field as `body.a.b`, `query.page`, `header.idempotency-key`. */
function fieldOf(context: string | undefined, issue: AjvIssue | undefined): string {
  const prefix = context === 'querystring' ? 'query' : context === 'headers' ? 'header' : context ?? 'body'
  const segments = (issue?.instancePath ?? '').split('/').filter(Boolean)
  const extra = issue?.params?.missingProperty ?? issue?.params?.additionalProperty
  if (typeof extra === 'string') segments.push(extra)
  return segments.length > 0 ? `${prefix}.${segments.join('.')}` : prefix
}

/** Translates anything thrown inside a request into the catalogue's problem. Never leaks a stack. */
export function toAppError(error: unknown): AppError {
  if (isAppError(error)) return error
  const fastifyError = error as FastifyError & { validationContext?: string; validation?: AjvIssue[] }
  if (fastifyError?.validation) {
    const issue = fastifyError.validation[0]
    const field = fieldOf(fastifyError.validationContext, issue)
    const reason =
      issue?.keyword === 'additionalProperties'
        ? 'is not an allowed field'
        : issue?.keyword === 'required'
          ? 'is required'
          : (issue?.message ?? 'is invalid')
    return new AppError('validation_error', `${field} ${reason}`, {
      field,
      extensions: { errors: fastifyError.validation.map((i) => ({ field: fieldOf(fastifyError.validationContext, i), message: i.message })) },
    })
  }
  switch (fastifyError?.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new AppError('payload_too_large', 'The request body is larger than the configured limit')
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new AppError('unsupported_media_type', 'Send the body as application/json', { field: 'header.content-type' })
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new AppError('malformed_json', 'Body is empty but content-type is application/json', { field: 'body' })
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new AppError('malformed_json', 'The request body is not valid JSON', { field: 'body' })
    default:
      break
  }
  if (error instanceof SyntaxError || (fastifyError?.statusCode === 400 && /JSON/i.test(fastifyError.message))) {
    return new AppError('malformed_json', 'The request body is not valid JSON', { field: 'body' })
  }
  const status = fastifyError?.statusCode
  if (typeof status === 'number' && status >= 400 && status < 500) {
    if (status === 413) return new AppError('payload_too_large', 'The request body is larger than the configured limit')
    if (status === 415) return new AppError('unsupported_media_type', fastifyError.message)
    if (status === 404) return new AppError('route_not_found')
    return new AppError('validation_error', fastifyError.message, { status })
  }
  return new AppError('internal', 'The server failed to handle the request; it has been logged', { cause: error })
}

const LOG_METHODS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const

/**
 * fastify makes a child logger for every request; most requests never log, so make it on first
 * use. One shared prototype keeps the per-request cost to a small object.
 */
interface LazyLogger {
  parent: FastifyBaseLogger
  bindings: Record<string, unknown>
  options: object
  made: FastifyBaseLogger | undefined
}

function realLogger(this: LazyLogger): FastifyBaseLogger {
  return (this.made ??= this.parent.child(this.bindings, this.options))
}

const lazyLoggerPrototype: Record<string, unknown> = {
  get level(): string {
    return (this as unknown as LazyLogger).parent.level
  },
  child(this: LazyLogger, more: Record<string, unknown>, moreOptions?: object) {
    return realLogger.call(this).child(more, moreOptions)
  },
}
for (const method of LOG_METHODS) {
  lazyLoggerPrototype[method] = function log(this: LazyLogger, ...args: unknown[]) {
    return (realLogger.call(this)[method] as (...a: unknown[]) => void)(...args)
  }
}

function lazyChildLogger(parent: FastifyBaseLogger, bindings: Record<string, unknown>, options: object): FastifyBaseLogger {
  const lazy: LazyLogger = Object.create(lazyLoggerPrototype)
  lazy.parent = parent
  lazy.bindings = bindings
  lazy.options = options
  lazy.made = undefined
  return lazy as unknown as FastifyBaseLogger
}

export function createHttpApp(options: HttpAppOptions): FastifyInstance {
  const app = Fastify({
    loggerInstance: options.logger.child({ listener: options.name }) as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    childLoggerFactory: lazyChildLogger,
    bodyLimit: options.bodyLimitBytes,
    genReqId: (req) => {
      const given = req.headers['x-request-id']
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID()
    },
    ajv: {
      customOptions: {
        removeAdditional: false,
        useDefaults: true,
        coerceTypes: 'array',
        allErrors: false,
      },
    },
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 200 },
    return503OnClosing: true,
    forceCloseConnections: 'idle',
  })

  let draining = false
  const observeRequest = options.metrics.httpRequestTimer(options.name)

  // Callback-style hooks: they run on every request, and an async hook costs a promise each.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id)
    done()
  })

  const debug = options.logger.isLevelEnabled('debug')
  app.addHook('onResponse', (request, reply, done) => {
    observeRequest(request.method, request.routeOptions.url ?? 'unmatched', reply.statusCode, reply.elapsedTime)
    if (reply.statusCode >= 500) {
      request.log.error({ method: request.method, url: request.url, status: reply.statusCode, ms: reply.elapsedTime }, 'request failed')
    } else if (debug) {
      request.log.debug({ method: request.method, url: request.url, status: reply.statusCode, ms: reply.elapsedTime }, 'request')
    }
    done()
  })

  app.setErrorHandler((error: unknown, request: FastifyRequest, reply: FastifyReply) => {
    const appError = toAppError(error)
    if (appError.status >= 500) request.log.error({ err: error }, 'unhandled error')
    return sendProblem(reply, appError.toProblem(request.url), appError.headers)
  })

  app.setNotFoundHandler((request, reply) => {
    const problem = new AppError('route_not_found', `No route ${request.method} ${request.url.split('?')[0]}`).toProblem(request.url)
    return sendProblem(reply, problem)
  })

  // Liveness says the process answers; readiness says its dependencies do and it is not draining.
  app.get('/healthz', { schema: { hide: true } as object, logLevel: 'warn' }, async (_request, reply) => {
    return reply.type('application/json').send('{"status":"ok"}')
  })

  app.get('/readyz', { schema: { hide: true } as object, logLevel: 'warn' }, async (_request, reply) => {
    const checks: Record<string, boolean> = {}
    for (const [name, check] of Object.entries(options.readiness ?? {})) {
      checks[name] = await check().catch(() => false)
    }
    const ready = !draining && Object.values(checks).every(Boolean)
    reply.code(ready ? 200 : 503).type('application/json')
    return reply.send(JSON.stringify({ status: ready ? 'ready' : draining ? 'draining' : 'not-ready', checks }))
  })

  app.get('/metrics', { schema: { hide: true } as object, logLevel: 'warn' }, async (_request, reply) => {
    reply.type(options.metrics.contentType)
    return reply.send(await options.metrics.render())
  })

  app.decorate('markDraining', () => {
    draining = true
  })

  return app
}

declare module 'fastify' {
  interface FastifyInstance {
    markDraining(): void
  }
}
