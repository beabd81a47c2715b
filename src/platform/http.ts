// The fastify factory every listener is built from: one error handler speaking problem+json,
// request ids, one access-log line per request, metrics, health and readiness probes.
import { randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import { Ajv, type ValidateFunction } from 'ajv'
import addFormatsModule from 'ajv-formats'
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler'
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type FastifySchemaCompiler,
  type FastifyServerOptions,
} from 'fastify'
import { AppError, PROBLEM_CONTENT_TYPE, isAppError, type ProblemBody } from './errors.ts'
import { unavailableDependency } from './dependency-errors.ts'
import { bodyDepthError } from './json-depth.ts'
import type { Logger } from './logger.ts'
import type { Metrics, RequestObserver } from './metrics.ts'
import type { HostPolicy } from './host-policy.ts'
import { redactPath } from './redact-path.ts'
import { rejectUnsafeText } from './text-safety.ts'

/** A dependency that is not ready may say why, and what fixes it; /readyz shows both under `reasons`. */
export interface ReadinessResult {
  ok: boolean
  reason?: string
  fix?: string
}

export type ReadinessCheck = () => Promise<boolean | ReadinessResult>

export interface HttpAppOptions {
  /** Listener name, used as a metrics label and in logs (`gateway`, `scheduler`, …). */
  name: string
  logger: Logger
  metrics: Metrics
  bodyLimitBytes: number
  /** Dependencies that must answer for /readyz to be 200 (database, redis, …). */
  readiness?: Record<string, ReadinessCheck>
  /**
   * Conditions /readyz reports under `detail` without turning 503 (e.g. refunds stuck on-chain):
   * worth an operator's eye, not worth taking the listener out of its Service. Undefined = nothing to say.
   */
  diagnostics?: Record<string, () => Promise<Record<string, unknown> | undefined>>
  /** HTML pages some problems are answered with instead of problem+json (a paywall for a browser). */
  problemPages?: ProblemPages
  /** The Host and Origin this listener answers (src/platform/host-policy.ts); undefined = any. */
  hosts?: HostPolicy | undefined
}

/** An HTML answer to a problem: its status and every header it carries. */
export interface ProblemPage {
  status: number
  html: string
  headers: Record<string, string>
}

/**
 * Renders a problem as a page for the requests that should get one (a person's browser), and
 * mounts the routes those pages load (their script). Every other request gets problem+json.
 */
export interface ProblemPages {
  render(request: FastifyRequest, problem: ProblemBody, headers: Readonly<Record<string, string>>): ProblemPage | undefined
  register(app: FastifyInstance): void
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/
const MAX_PARAM_LENGTH = 200
/** Prepared URLs added at run time (e.g. one per /openapi.json query seen) are bounded: the oldest go first. */
const MAX_DYNAMIC_PREPARED = 1024

// ajv-formats is CommonJS; its default export is the plugin function.
const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv

/**
 * fastify's default ajv options (@fastify/ajv-compiler), except that additional properties are
 * rejected rather than removed. Formats (date-time, email, uri, …) come from ajv-formats as in
 * fastify's default compiler.
 */
const AJV_OPTIONS = { useDefaults: true, removeAdditional: false, allErrors: false, addUsedSchema: false } as const

let validators: { coercing: Ajv; strict: Ajv } | undefined

/**
 * Route schema validators. Query strings, path parameters and headers arrive as text, so they are
 * coerced to the schema's types (`?page=2` is the integer 2, a repeated parameter an array). A JSON
 * body already carries its types: it is validated strictly, so `{"env": {"N": 1}}` against a string
 * field, or `"5"` for an integer field, is a 400 naming the field rather than silently converted.
 * The two ajv instances are shared by every listener of the process: a schema used by several
 * routes or listeners is compiled once per instance (ajv caches by schema object).
 */
const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => lazyValidator(schema as object, httpPart === 'body' ? 'strict' : 'coercing')

/**
 * A route's validator, compiled by ajv on the route's first request rather than when the listener
 * starts: compiling every route's schemas was a third of a warm start's CPU, for routes many
 * processes never serve. It behaves as ajv's function: fastify calls it with the parent data
 * (`schemaEnv` set, so a root value can be coerced in place) and reads `errors` after a failure.
 */
function lazyValidator(schema: object, kind: 'strict' | 'coercing'): ValidateFunction {
  const compile = onFirstUse(() => {
    validators ??= {
      coercing: addFormats(new Ajv({ ...AJV_OPTIONS, coerceTypes: 'array' })),
      strict: addFormats(new Ajv({ ...AJV_OPTIONS, coerceTypes: false })),
    }
    const compiled = validators[kind].compile(schema) as ValidateFunction
    validate.schemaEnv = compiled.schemaEnv
    return compiled
  })
  const validate = ((data: unknown, context?: object) => {
    const check = compile()
    const valid = context === undefined ? check(data) : check(data, context as Parameters<ValidateFunction>[1])
    validate.errors = check.errors
    return valid
  }) as ValidateFunction
  // Truthy before the first call too: fastify decides by it whether to pass the parent data.
  validate.schemaEnv = true as unknown as ValidateFunction['schemaEnv']
  validate.errors = null
  return validate
}

/**
 * Route response serializers, compiled by fast-json-stringify on the route's first response for a
 * status rather than when the listener starts (a tenth of a warm start, for routes and statuses
 * many processes never answer). The compiler and its options are fastify's own.
 */
function lazySerializers(externalSchemas?: unknown, options?: Parameters<ReturnType<typeof SerializerSelector>>[1]) {
  const compileNow = SerializerSelector()(externalSchemas, options)
  return (route: Parameters<typeof compileNow>[0]) => {
    const compile = onFirstUse(() => compileNow(route))
    return (value: unknown) => compile()(value)
  }
}

/**
 * The schema compilers of every fastify instance of ours: the two above, so fastify never loads its
 * default compilers (they and their ajv are ~60 ms of a warm start) for schemas compiled later.
 */
export const schemaController: FastifyServerOptions['schemaController'] = {
  compilersFactory: {
    // fastify types this factory with @fastify/ajv-compiler's ajv-shaped signature; at run time it
    // takes any function returning a route's validator.
    buildValidator: (() => validatorCompiler) as unknown as ValidatorFactory,
    buildSerializer: lazySerializers,
  },
}
type ValidatorFactory = NonNullable<NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>['buildValidator']>

/** The validators and serializers no request has compiled yet, in every listener of the process. */
const uncompiled = new Set<() => unknown>()

/** `make`'s result, made by the first call and kept; until then listed in `uncompiled`. */
function onFirstUse<T>(make: () => T): () => T {
  let made: { value: T } | undefined
  const get = (): T => {
    if (made === undefined) {
      made = { value: make() }
      uncompiled.delete(get)
    }
    return made.value
  }
  uncompiled.add(get)
  return get
}

/**
 * Compiles every route schema not compiled yet, as a listener used to at start: a schema ajv or
 * fast-json-stringify refuses throws here (the tests call it after building every listener).
 */
export function compileRouteSchemas(): number {
  const pending = [...uncompiled]
  for (const compile of pending) compile()
  return pending.length
}

/**
 * Request ids: the caller's `x-request-id` when it is a plain token, else this process's random
 * tag and a counter (`Yq3kF0aZ-1042`). Unique across processes like a UUID, at a fraction of
 * randomUUID's cost, and short in every response header.
 */
export function requestIdGenerator(): (req: { headers: Record<string, string | string[] | undefined> }) => string {
  const tag = randomBytes(6).toString('base64url')
  let counter = 0
  return (req) => {
    const given = req.headers['x-request-id']
    return typeof given === 'string' && REQUEST_ID.test(given) ? given : `${tag}-${++counter}`
  }
}

export function sendProblem(reply: FastifyReply, problem: ProblemBody, headers: Record<string, string> = {}): FastifyReply {
  reply.code(problem.status)
  for (const [name, value] of Object.entries(headers)) reply.header(name, value)
  return reply.type(PROBLEM_CONTENT_TYPE).send(JSON.stringify(problem))
}

function sendProblemPage(reply: FastifyReply, page: ProblemPage): FastifyReply {
  reply.code(page.status)
  for (const [name, value] of Object.entries(page.headers)) reply.header(name, value)
  return reply.type('text/html; charset=utf-8').send(page.html)
}

interface AjvIssue {
  instancePath?: string
  keyword?: string
  message?: string
  params?: Record<string, unknown>
}

/** Names the offending field as `body.a.b`, `query.page`, `path.id`, `header.idempotency-key` (docs/errors.md). */
function fieldOf(context: string | undefined, issue: AjvIssue | undefined): string {
  const prefix = context === 'querystring' ? 'query' : context === 'headers' ? 'header' : context === 'params' ? 'path' : (context ?? 'body')
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
    const reason = issue?.keyword === 'additionalProperties' ? 'is not an allowed field' : issue?.keyword === 'required' ? 'is required' : (issue?.message ?? 'is invalid')
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
    case 'FST_ERR_BAD_URL':
      return new AppError('validation_error', 'The URL path is not validly percent-encoded', { field: 'path' })
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return new AppError('validation_error', `A path parameter is longer than ${MAX_PARAM_LENGTH} characters`, { field: 'path', status: 414 })
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
  const outage = unavailableDependency(error)
  if (outage === 'storage') {
    // Freeing space takes an operator (or a cleanup pass), not a reconnect: a longer Retry-After.
    return new AppError('unavailable', 'The storage this request writes to is full right now; retry later', {
      headers: { 'retry-after': '30' },
      extensions: { retryable: true },
    })
  }
  if (outage !== undefined) {
    const what = outage === 'database' ? 'The database' : 'A service this request needs (the database, the cache or another backend it calls)'
    return new AppError('unavailable', `${what} is out of reach right now; retry shortly`, {
      headers: { 'retry-after': '2' },
      extensions: { retryable: true },
    })
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

/**
 * The log level of a request that ended in a 5xx through the error handler. A thrown AppError is an
 * answer the code chose: 501 `not_implemented` is routine (info), an unavailable or failing upstream
 * (502, 503, …) is worth a look (warn); neither is a fault, so neither is logged with a stack.
 * Anything else (an exception the catalogue does not name, or an `internal`/`INTERNAL` AppError, a
 * broken invariant) is a fault: error, with the stack.
 */
export function failureLevel(error: unknown, appError: AppError): 'error' | 'warn' | 'info' {
  if (!isAppError(error) && appError.code === 'unavailable') return 'warn' // a dependency's outage, not a fault of ours
  if (!isAppError(error) || appError.code === 'internal' || appError.code === 'INTERNAL') return 'error'
  return appError.status === 501 ? 'info' : 'warn'
}

/** Requests that failed with a 5xx through the error handler: how requestCompleted logs them. */
const failures = new WeakMap<FastifyRequest, { level: 'error' | 'warn' | 'info'; code: string }>()

const LOG_METHODS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const

/**
 * fastify makes a child logger for every request; most requests never log, so children are made
 * on first use: a lazy logger holds its parent, bindings and options, and every child of a lazy
 * logger is lazy too. One shared prototype keeps the per-request cost to a small object.
 */
interface LazyLogger {
  parent: FastifyBaseLogger
  bindings: Record<string, unknown>
  options: { level?: string }
  made: FastifyBaseLogger | undefined
}

const lazyLoggerPrototype: Record<string, unknown> = {
  get level(): string {
    const lazy = this as unknown as LazyLogger
    return lazy.made?.level ?? lazy.options.level ?? lazy.parent.level
  },
  child(this: LazyLogger, bindings: Record<string, unknown>, options?: object) {
    return lazyChild(this as unknown as FastifyBaseLogger, bindings, options)
  },
}
for (const method of LOG_METHODS) {
  lazyLoggerPrototype[method] = function log(this: LazyLogger, ...args: unknown[]) {
    return (materialize(this as unknown as FastifyBaseLogger)[method] as (...a: unknown[]) => void)(...args)
  }
}

/** The real (pino) logger behind a lazy one, made once. */
function materialize(logger: FastifyBaseLogger): FastifyBaseLogger {
  if (Object.getPrototypeOf(logger) !== lazyLoggerPrototype) return logger
  const lazy = logger as unknown as LazyLogger
  return (lazy.made ??= materialize(lazy.parent).child(lazy.bindings, lazy.options))
}

/**
 * A lazy child of `parent`. Handed to fastify as its logger instance, fastify's default child
 * factory then makes request loggers through it (a `childLoggerFactory` option would make fastify
 * re-validate every request's logger).
 */
function lazyChild(parent: FastifyBaseLogger, bindings: Record<string, unknown>, options: object | undefined): FastifyBaseLogger {
  const lazy: LazyLogger = Object.create(lazyLoggerPrototype)
  lazy.parent = parent
  lazy.bindings = bindings
  lazy.options = options ?? {}
  lazy.made = undefined
  return lazy as unknown as FastifyBaseLogger
}

/**
 * A response prepared in advance for one URL: writes the whole response, `x-request-id: requestId`
 * included, and returns its status. It must not throw once it has started writing.
 */
export type PreparedResponse = (request: IncomingMessage, response: ServerResponse, requestId: string) => number

/**
 * Responses prepared in advance for exact request URLs (path and query as sent), answered to GET and
 * HEAD before fastify routes the request: no routing, request/reply objects, hooks or schema
 * validation. Only for documents that are the same for every request to the URL (discovery
 * documents); every other URL, and every request while the app closes, goes through fastify as
 * usual. Prepared answers get a request id and are counted and logged like any other request.
 * fastify hooks do not run for them: a URL that needs a hook must not be prepared.
 */
export interface PreparedRoutes {
  /**
   * Answers GET and HEAD `url` with `respond`, counted under `route` (the route template, as for
   * fastify routes). `dynamic` entries (added while serving) are bounded; the oldest go first.
   */
  set(url: string, route: string, respond: PreparedResponse, options?: { dynamic?: boolean }): void
  has(url: string): boolean
}

interface Prepared {
  route: string
  respond: PreparedResponse
}

/**
 * The request id header, the access log and the request metrics, on the two callbacks fastify
 * makes for every request it routes (404s and validation failures included): `incomingRequest`
 * before any hook, `requestCompleted` once the response has finished or failed. Using them
 * instead of onRequest/onResponse hooks spares every request two hook runs. Prepared responses
 * (see PreparedRoutes) report through `preparedCompleted`.
 */
class RequestLifecycle extends LogController {
  readonly #observe: RequestObserver
  /** The listener's logger: the access line names the request id itself, so no per-request child logger is made for it. */
  readonly #log: Logger

  constructor(observe: RequestObserver, log: Logger) {
    super({ disableRequestLogging: false })
    this.#observe = observe
    this.#log = log
  }

  override incomingRequest(request: FastifyRequest, reply: FastifyReply): void {
    reply.header('x-request-id', request.id)
  }

  /**
   * Every request is counted. A 5xx gets a `request failed` line at the level the error handler chose
   * (failureLevel: error for a fault, warn or info for an expected AppError such as a 501); a 5xx the
   * route answered itself (/readyz while draining, fastify's 503 while closing) at warn; a response
   * that failed to send at error. Other requests get a debug line, written only when the route's
   * level allows it (the probes and /metrics are at `warn`).
   */
  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    const status = reply.statusCode
    const ms = reply.elapsedTime
    this.#observe(request.method, request.is404 ? 'unmatched' : (request.routeOptions.url ?? 'unmatched'), status, ms)
    if (error) {
      this.#log.error({ reqId: request.id, method: request.method, url: redactPath(request.url), status, ms, err: error }, 'request failed')
    } else if (status >= 500) {
      const failure = failures.get(request)
      this.#log[failure?.level ?? 'warn'](
        { reqId: request.id, method: request.method, url: redactPath(request.url), status, ms, ...(failure ? { code: failure.code } : {}) },
        'request failed',
      )
    } else if (this.#log.isLevelEnabled('debug') && (request.log.level === 'debug' || request.log.level === 'trace')) {
      this.#log.debug({ reqId: request.id, method: request.method, url: redactPath(request.url), status, ms }, 'request')
    }
  }

  /** The same for a prepared response (PreparedRoutes), which fastify never sees. */
  preparedCompleted(method: string, route: string, url: string, id: string, status: number, ms: number, error?: unknown): void {
    this.#observe(method, route, status, ms)
    if (error || status >= 500) {
      this.#log.error({ reqId: id, method, url: redactPath(url), status, ms, err: error }, 'request failed')
    } else if (this.#log.isLevelEnabled('debug')) {
      this.#log.debug({ reqId: id, method, url: redactPath(url), status, ms }, 'request')
    }
  }

  /** A prepared response that threw before writing anything: fastify answers the request instead. */
  preparedFailed(url: string, id: string, error: unknown): void {
    this.#log.error({ reqId: id, url, err: error }, 'prepared response failed; routing the request')
  }
}

export function createHttpApp(options: HttpAppOptions): FastifyInstance {
  const lifecycle = new RequestLifecycle(options.metrics.httpRequestTimer(options.name), options.logger.child({ listener: options.name }))
  const genReqId = requestIdGenerator()

  const prepared = new Map<string, Prepared>()
  const dynamic = new Set<string>()
  let closing = false
  const preparedRoutes: PreparedRoutes = {
    set(url, route, respond, { dynamic: isDynamic = false } = {}) {
      prepared.set(url, { route, respond })
      if (!isDynamic) return
      dynamic.delete(url)
      dynamic.add(url)
      if (dynamic.size > MAX_DYNAMIC_PREPARED) {
        const oldest = dynamic.values().next().value as string
        dynamic.delete(oldest)
        prepared.delete(oldest)
      }
    },
    has: (url) => prepared.has(url),
  }
  /** Answers a prepared URL; false when the request is fastify's to route. */
  const answerPrepared = (request: IncomingMessage, response: ServerResponse): boolean => {
    const method = request.method
    if ((method !== 'GET' && method !== 'HEAD') || closing) return false
    const url = request.url as string
    const entry = prepared.get(url)
    if (entry === undefined) return false
    const started = performance.now()
    const id = genReqId(request)
    let status: number
    try {
      status = entry.respond(request, response, id)
    } catch (error) {
      if (!response.headersSent) {
        lifecycle.preparedFailed(url, id, error)
        return false
      }
      response.destroy(error as Error)
      lifecycle.preparedCompleted(method, entry.route, url, id, 500, performance.now() - started, error)
      return true
    }
    lifecycle.preparedCompleted(method, entry.route, url, id, status, performance.now() - started)
    return true
  }

  /** Answers a request for a host or from an origin that is not ours before any route or prepared answer. */
  const refuseHost = (policy: HostPolicy, request: IncomingMessage, response: ServerResponse): boolean => {
    const origin = request.headers.origin
    const refusal = policy.check(request.headers.host, Array.isArray(origin) ? origin[0] : origin, request.method ?? 'GET')
    if (refusal === undefined) return false
    const started = performance.now()
    const id = genReqId(request)
    const problem = { ...new AppError(refusal.code, refusal.detail).toProblem(), field: refusal.code === 'host_not_allowed' ? 'header.host' : 'header.origin' }
    const body = JSON.stringify(problem)
    response.writeHead(problem.status, { 'content-type': PROBLEM_CONTENT_TYPE, 'content-length': Buffer.byteLength(body), 'x-request-id': id, connection: 'close' })
    response.end(body)
    lifecycle.preparedCompleted(request.method ?? 'GET', 'refused', request.url ?? '', id, problem.status, performance.now() - started)
    return true
  }

  const app = Fastify({
    loggerInstance: lazyChild(options.logger as FastifyBaseLogger, { listener: options.name }, undefined),
    logController: lifecycle,
    // fastify's own HTTP/1 server (same timeouts), with prepared URLs answered before routing.
    serverFactory: (handler, serverOptions) => {
      const settings = serverOptions as { http?: object; keepAliveTimeout: number; requestTimeout: number; connectionTimeout: number; maxRequestsPerSocket: number }
      const server = createServer(settings.http ?? {}, (request, response) => {
        if (options.hosts && refuseHost(options.hosts, request, response)) return
        if (!answerPrepared(request, response)) handler(request, response)
      })
      server.keepAliveTimeout = settings.keepAliveTimeout
      server.requestTimeout = settings.requestTimeout
      server.setTimeout(settings.connectionTimeout)
      if (settings.maxRequestsPerSocket > 0) server.maxRequestsPerSocket = settings.maxRequestsPerSocket
      return server
    },
    // URLs the router rejects before any route (bad percent-encoding, over-long parameters): a
    // problem+json too. fastify sets no response listener on this path, so it is counted here.
    frameworkErrors: (error, request, reply) => {
      sendProblem(reply, toAppError(error).toProblem(redactPath(request.url)))
      lifecycle.requestCompleted(null, request, reply)
    },
    bodyLimit: options.bodyLimitBytes,
    genReqId,
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: MAX_PARAM_LENGTH },
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    schemaController,
  })

  let draining = false

  // JSON bodies: fastify's own parser (prototype poisoning refused as before), then the nesting
  // bound, so a body too deep for what runs after it is a 400 before any hook, schema or 402.
  const parseJson = app.getDefaultJsonParser('error', 'error')
  app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    parseJson(request, body as string, (error, value) => {
      done(error ?? bodyDepthError(value) ?? null, value)
    })
  })
  // Strings Postgres cannot store (U+0000, unpaired surrogates) in any body, query, path parameter
  // or header: a 400 naming the field before any schema or handler (src/platform/text-safety.ts).
  app.addHook('preValidation', rejectUnsafeText)

  app.setErrorHandler((error: unknown, request: FastifyRequest, reply: FastifyReply) => {
    const appError = toAppError(error)
    if (appError.status >= 500) {
      const level = failureLevel(error, appError)
      failures.set(request, { level, code: appError.code })
      // A fault gets its stack; an expected 5xx (a 501, an upstream's 502/503) only the access line.
      if (level === 'error') request.log.error({ err: error }, 'unhandled error')
    }
    const problem = appError.toProblem(redactPath(request.url))
    const page = options.problemPages?.render(request, problem, appError.headers)
    return page ? sendProblemPage(reply, page) : sendProblem(reply, problem, appError.headers)
  })

  app.setNotFoundHandler((request, reply) => {
    const path = redactPath(request.url)
    const problem = new AppError('route_not_found', `No route ${request.method} ${path}`).toProblem(path)
    const page = options.problemPages?.render(request, problem, {})
    return page ? sendProblemPage(reply, page) : sendProblem(reply, problem)
  })
  options.problemPages?.register(app)

  // Liveness says the process answers; readiness says its dependencies do and it is not draining.
  app.get('/healthz', { schema: { hide: true } as object, logLevel: 'warn' }, (_request, reply) => {
    reply.type('application/json').send('{"status":"ok"}')
  })

  app.get('/readyz', { schema: { hide: true } as object, logLevel: 'warn' }, async (_request, reply) => {
    const checks: Record<string, boolean> = {}
    const reasons: Record<string, { reason?: string; fix?: string }> = {}
    for (const [name, check] of Object.entries(options.readiness ?? {})) {
      const result = await check().catch(() => false)
      checks[name] = typeof result === 'boolean' ? result : result.ok
      if (typeof result === 'object' && !result.ok) reasons[name] = { reason: result.reason, fix: result.fix }
    }
    const ready = !draining && Object.values(checks).every(Boolean)
    const detail: Record<string, unknown> = {}
    for (const [name, diagnose] of Object.entries(options.diagnostics ?? {})) {
      const found = await diagnose().catch(() => undefined)
      if (found !== undefined) detail[name] = found
    }
    reply.code(ready ? 200 : 503).type('application/json')
    return reply.send(
      JSON.stringify({
        status: ready ? 'ready' : draining ? 'draining' : 'not-ready',
        checks,
        ...(Object.keys(reasons).length > 0 ? { reasons } : {}),
        ...(Object.keys(detail).length > 0 ? { detail } : {}),
      }),
    )
  })

  app.get('/metrics', { schema: { hide: true } as object, logLevel: 'warn' }, async (_request, reply) => {
    reply.type(options.metrics.contentType)
    return reply.send(await options.metrics.render())
  })

  app.decorate('markDraining', () => {
    draining = true
  })
  app.decorate('prepared', preparedRoutes)
  // While closing, fastify answers 503 (return503OnClosing): prepared URLs go to it too.
  app.addHook('preClose', async () => {
    closing = true
  })

  return app
}

declare module 'fastify' {
  interface FastifyInstance {
    markDraining(): void
    prepared: PreparedRoutes
  }
}
