// Fastify routes of the discovery surface, and the mounting of registry operations.
// Documents are derived once and served pre-serialized: discovery is the hottest free path.
import type { FastifyInstance, FastifyReply, FastifyRequest, RawRequestDefaultExpression, RawServerDefault, RouteGenericInterface } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { createHash } from 'node:crypto'
import { brotliCompressSync, constants as zlibConstants, gzipSync } from 'node:zlib'
import { Type, type TSchema } from '@sinclair/typebox'
import { AppError } from '../platform/errors.ts'
import type { PreparedResponse } from '../platform/http.ts'
import { parseMicros } from '../platform/money.ts'
import type { Catalog, OpenapiPage } from './catalog.ts'
import type { CatalogOperation } from './openapi.ts'
import type { RegisteredOperation } from './registry.ts'
import type { ServerName } from './types.ts'
import { authMd, llmsFullTxt, llmsTxt, manifestView, planView, serviceView, servicesView, type DocumentContext } from './documents.ts'
import { buildGuide } from './advisor.ts'

export type OperationId = RegisteredOperation['operationId']

/** An operation's spec as the registry declares it (a union of ids: any of them). */
export type OperationOf<Id extends OperationId> = Extract<RegisteredOperation, { operationId: Id }>

/** The operations whose price is the plan named in their path (pricing plan-price). */
export type PlanPricedOperation = Extract<RegisteredOperation, { pricing: { kind: 'plan-price' } }>['operationId']

/**
 * The request of an operation (a union of ids: of any of them), typed from the schemas it
 * declares in the registry: its route validates body, query, params and headers against them
 * before any wrapper or handler runs.
 */
export type OperationRequest<Id extends OperationId> = FastifyRequest<
  RouteGenericInterface,
  RawServerDefault,
  RawRequestDefaultExpression,
  OperationOf<Id>['schemas'],
  TypeBoxTypeProvider
>

/** The handler of one operation; `Decorations` are what the service's access rule sets on the request before it runs. */
export type Handler<Id extends OperationId, Decorations = unknown> = (request: OperationRequest<Id> & Decorations, reply: FastifyReply) => Promise<unknown>

/** Handlers keyed by the operation they answer, each typed from its own operation's schemas. */
export type Handlers<Id extends OperationId> = { [Op in Id]: Handler<Op> }

interface MountedHandler {
  // A method, so its request parameter is bivariant: every Handler<Id> is a MountedHandler. The
  // id binds handler to schemas where a table is written (Handlers<Id>); mountOperations mounts
  // each with its own operation's schemas.
  handle(request: FastifyRequest, reply: FastifyReply): Promise<unknown>
}

/** A handler of any operation, as access rules wrap it and mountOperations mounts it. */
export type OperationHandler = MountedHandler['handle']
export type HandlerTable = Readonly<Record<string, OperationHandler>>

const AnyObject = Type.Object({}, { additionalProperties: true })
const TextDocument = Type.String()

export const OpenapiQuerySchema = Type.Object(
  {
    q: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'Ranked text search over summary, description, path and slug' })),
    path: Type.Optional(Type.String({ minLength: 1, maxLength: 300, pattern: '^/', description: 'Exact path (template or concrete)' })),
    method: Type.Optional(Type.String({ minLength: 3, maxLength: 7, description: 'Exact HTTP method' })),
    page: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000, description: 'Page number, first page is 1' })),
  },
  { additionalProperties: false },
)

const SlugParams = Type.Object({ slug: Type.String({ minLength: 1, maxLength: 100 }) })

export type ContentCoding = 'br' | 'gzip' | 'identity'

/**
 * A document rendered once: its bytes, precompressed variants, a strong ETag and the header list of
 * each response, all prepared in advance. Discovery documents are immutable for the life of the
 * process, so a request only picks a representation and writes it.
 */
export interface RenderedDocument {
  etag: string
  /**
   * Writes the response to `request`: 304 when If-None-Match matches, else 200 in the coding
   * Accept-Encoding asks for (br, gzip or identity), with x-request-id. Returns the status.
   * Usable as a prepared response (see PreparedRoutes in src/platform/http.ts).
   */
  respond: PreparedResponse
}

/** A response's body and header list (node's flat `writeHead` form), x-request-id's value in slot 1. */
interface Prepared {
  headers: string[]
  body: Buffer | undefined
}

/**
 * How hard a document's compressed variants are squeezed. `best` (brotli 11, gzip 9) for documents
 * of a fixed set (the discovery documents, the unfiltered OpenAPI pages): compressed once for the
 * life of the process, and every byte saved is saved on every response (page 1 in brotli: 7.2 KB at
 * quality 6, 6.4 KB at 11, ~25 ms once). `fast` (brotli 5, gzip 6) for documents made per request
 * URL (searches and filters), where anyone can ask for a new one and the effort must stay small.
 */
export type CompressionEffort = 'best' | 'fast'

const BROTLI_QUALITY: Record<CompressionEffort, number> = { best: zlibConstants.BROTLI_MAX_QUALITY, fast: 5 }
const GZIP_LEVEL: Record<CompressionEffort, number> = { best: 9, fast: 6 }

export function renderDocument(contentType: string, text: string, options: { link?: string | undefined; effort?: CompressionEffort } = {}): RenderedDocument {
  const { link, effort = 'fast' } = options
  const bytes = Buffer.from(text)
  const etag = `"${createHash('sha256').update(bytes).digest('base64url').slice(0, 27)}"`
  const common = ['etag', etag, 'vary', 'accept-encoding', 'cache-control', 'public, max-age=60', ...(link ? ['link', link] : [])]
  // Bodies are Buffers whatever their size: node then writes the encoded bytes as they are, where
  // a string body is measured and UTF-8 encoded again on every response. Header lists are handed
  // to writeHead as they are (no per-request header object); only the request id changes.
  const prepare = (body: Buffer | undefined, coding?: ContentCoding): Prepared => ({
    headers: [
      'x-request-id',
      '',
      ...common,
      ...(body === undefined ? [] : ['content-type', contentType, ...(coding === 'identity' ? [] : ['content-encoding', coding as string]), 'content-length', String(body.length)]),
    ],
    body,
  })
  const identity = prepare(bytes, 'identity')
  const notModified = prepare(undefined)
  // Compressed on first use, then kept: searches with no takers for br or gzip cost nothing extra.
  let gzip: Prepared | undefined
  let br: Prepared | undefined
  const representation = (coding: ContentCoding): Prepared => {
    if (coding === 'identity') return identity
    if (coding === 'gzip') return (gzip ??= prepare(gzipSync(bytes, { level: GZIP_LEVEL[effort] }), 'gzip'))
    return (br ??= prepare(
      brotliCompressSync(bytes, { params: { [zlibConstants.BROTLI_PARAM_QUALITY]: BROTLI_QUALITY[effort], [zlibConstants.BROTLI_PARAM_SIZE_HINT]: bytes.length } }),
      'br',
    ))
  }
  return {
    etag,
    respond(request, response, requestId) {
      const ifNoneMatch = request.headers['if-none-match']
      const notModifiedNow = ifNoneMatch !== undefined && etagMatches(ifNoneMatch, etag)
      const chosen = notModifiedNow ? notModified : representation(codingFor(request.headers['accept-encoding']))
      const status = notModifiedNow ? 304 : 200
      // writeHead turns the list into the header block at once, so one list serves every request.
      chosen.headers[1] = requestId
      response.writeHead(status, chosen.headers)
      response.end(chosen.body)
      return status
    },
  }
}

/**
 * A document rendered on its first request rather than at start: the discovery documents of a
 * listener are a tenth of a warm start, and many processes are never asked for most of them.
 */
export function renderedOnFirstUse(render: () => RenderedDocument): RenderedDocument {
  let document: RenderedDocument | undefined
  const rendered = () => (document ??= render())
  return {
    get etag() {
      return rendered().etag
    },
    respond: (request, response, requestId) => rendered().respond(request, response, requestId),
  }
}

/**
 * The coding to answer an Accept-Encoding value with (RFC 9110 §12.5.3): br or gzip when
 * acceptable (q > 0, by name or through `*`), the higher q first and br on a tie; identity when
 * neither is, or when identity is listed with a higher q.
 */
export function negotiateEncoding(acceptEncoding: string | undefined): ContentCoding {
  if (!acceptEncoding) return 'identity'
  const q: Partial<Record<string, number>> = {}
  for (const entry of acceptEncoding.split(',')) {
    const [rawName = '', ...params] = entry.split(';')
    const name = rawName.trim().toLowerCase()
    if (name === '') continue
    let weight = 1
    for (const param of params) {
      const [key, value] = param.split('=').map((part) => part.trim().toLowerCase())
      if (key === 'q') weight = /^(0(\.\d{0,3})?|1(\.0{0,3})?)$/.test(value ?? '') ? Number(value) : 0
    }
    q[name] = Math.max(q[name] ?? 0, weight)
  }
  const weightOf = (coding: string): number => q[coding] ?? q['*'] ?? 0
  const br = weightOf('br')
  const gzip = weightOf('gzip')
  const best: ContentCoding = br >= gzip ? 'br' : 'gzip'
  const bestWeight = Math.max(br, gzip)
  if (bestWeight === 0) return 'identity'
  return (q.identity ?? 0) > bestWeight ? 'identity' : best
}

/** Accept-Encoding values repeat from request to request: each distinct one is negotiated once. */
const negotiated = new Map<string, ContentCoding>()
function codingFor(acceptEncoding: string | undefined): ContentCoding {
  if (acceptEncoding === undefined) return 'identity'
  let coding = negotiated.get(acceptEncoding)
  if (coding === undefined) {
    coding = negotiateEncoding(acceptEncoding)
    if (negotiated.size >= 256) negotiated.clear()
    negotiated.set(acceptEncoding, coding)
  }
  return coding
}

/** If-None-Match against a strong ETag, with the weak comparison RFC 9110 §13.1.2 asks for. */
export function etagMatches(ifNoneMatch: string, etag: string): boolean {
  if (ifNoneMatch === etag) return true
  return ifNoneMatch.split(',').some((candidate) => {
    const tag = candidate.trim()
    return tag === '*' || tag === etag || tag === `W/${etag}`
  })
}

/**
 * Sends a rendered document from a fastify route: the reply is handed over (fastify still counts and
 * logs the request when the response finishes) and the document writes its prepared response.
 */
export function sendDocument(request: FastifyRequest, reply: FastifyReply, document: RenderedDocument): void {
  reply.hijack()
  document.respond(request.raw, reply.raw, request.id)
}

/** Small bounded cache keyed by the normalized query. */
function boundedCache<T>(limit: number): { get(key: string): T | undefined; set(key: string, value: T): void } {
  const entries = new Map<string, T>()
  return {
    get: (key) => entries.get(key),
    set: (key, value) => {
      if (entries.size >= limit) entries.delete(entries.keys().next().value as string)
      entries.set(key, value)
    },
  }
}

const JSON_TYPE = 'application/json; charset=utf-8'

/** The Link header of an OpenAPI page (RFC 8288): first, prev, next and last, those that exist; none for a single page. */
export function pageLinks(page: Pick<OpenapiPage, 'first' | 'prev' | 'next' | 'last'>): string | undefined {
  const links = (['first', 'prev', 'next', 'last'] as const).flatMap((rel) => (page[rel] === undefined ? [] : [`<${page[rel]}>; rel="${rel}"`]))
  return links.length > 0 ? links.join(', ') : undefined
}

/**
 * GET /openapi.json with search, filters, pages, x-next and an RFC 8288 Link header (first, prev, next, last). Each URL that
 * produced a page is then answered as a prepared response (no routing, no query parsing again).
 */
export function registerOpenapiRoute(app: FastifyInstance, catalog: Catalog, scope?: ServerName): void {
  // Bounded, so made-up queries cannot grow memory (the prepared URLs are bounded too).
  const byQuery = boundedCache<RenderedDocument>(512)
  app.withTypeProvider<TypeBoxTypeProvider>().get('/openapi.json', { schema: { querystring: OpenapiQuerySchema, response: { 200: AnyObject } } }, (request, reply) => {
    const { q, path, method, page } = request.query
    const key = JSON.stringify([q, path, method?.toUpperCase(), page ?? 1])
    let document = byQuery.get(key)
    if (document === undefined) {
      const result = catalog.openapiPage({ q, path, method, page }, scope)
      // Unfiltered pages are a fixed set (one per page number); searches and filters are not.
      const effort = q === undefined && path === undefined && method === undefined ? 'best' : 'fast'
      document = renderDocument(JSON_TYPE, JSON.stringify(result.document), { link: pageLinks(result), effort })
      byQuery.set(key, document)
    }
    app.prepared.set(request.url, '/openapi.json', document.respond, { dynamic: true })
    sendDocument(request, reply, document)
  })
}

export function registerDiscoveryRoutes(app: FastifyInstance, context: DocumentContext): void {
  const { catalog } = context
  registerOpenapiRoute(app, catalog)
  const best = { effort: 'best' } as const
  const json = (view: () => unknown): RenderedDocument => renderedOnFirstUse(() => renderDocument(JSON_TYPE, JSON.stringify(view()), best))
  const text = (contentType: string, body: () => string): RenderedDocument => renderedOnFirstUse(() => renderDocument(contentType, body(), best))
  const services = json(() => servicesView(context))
  const manifest = json(() => manifestView(context))
  const llms = text('text/plain; charset=utf-8', () => llmsTxt(context))
  const llmsFull = text('text/plain; charset=utf-8', () => llmsFullTxt(context))
  const auth = text('text/markdown; charset=utf-8', () => authMd(context))
  const serviceDocs = new Map(catalog.registry.services.map((service) => [service.slug, json(() => serviceView(context, service.slug))]))
  const serviceSpecs = new Map(catalog.registry.services.map((service) => [service.slug, json(() => catalog.serviceDocument(service.slug))]))

  const lookup = (table: Map<string, RenderedDocument>, slug: string): RenderedDocument => {
    const document = table.get(slug)
    if (document === undefined) throw new AppError('unknown_service', `No service "${slug}"; see /services`, { field: 'path.slug' })
    return document
  }
  // The fastify routes answer what the prepared URLs do not (HEAD is answered by both, trailing
  // slashes and percent-encoded slugs only by the routes); synchronous handlers, no promise per request.
  const fixed = (url: string, document: RenderedDocument, schema: TSchema) => {
    app.get(url, { schema: { response: { 200: schema } } }, (request, reply) => sendDocument(request, reply, document))
    app.prepared.set(url, url, document.respond)
  }

  fixed('/services', services, AnyObject)
  fixed('/manifest.json', manifest, AnyObject)
  fixed('/llms.txt', llms, TextDocument)
  fixed('/llms-full.txt', llmsFull, TextDocument)
  fixed('/auth.md', auth, TextDocument)
  const routes = app.withTypeProvider<TypeBoxTypeProvider>()
  routes.get('/services/:slug', { schema: { params: SlugParams, response: { 200: AnyObject } } }, (request, reply) =>
    sendDocument(request, reply, lookup(serviceDocs, request.params.slug)),
  )
  routes.get('/services/:slug/openapi.json', { schema: { params: SlugParams, response: { 200: AnyObject } } }, (request, reply) =>
    sendDocument(request, reply, lookup(serviceSpecs, request.params.slug)),
  )
  for (const [slug, document] of serviceDocs) app.prepared.set(`/services/${slug}`, '/services/:slug', document.respond)
  for (const [slug, document] of serviceSpecs) app.prepared.set(`/services/${slug}/openapi.json`, '/services/:slug/openapi.json', document.respond)
}

/** Handlers of the free guide operations (GET/POST /advisor/agent/guide). */
export function guideHandlers(catalog: Catalog): Handlers<'getAgentGuide' | 'postAgentGuide'> {
  const answer = (goal: string, budget: unknown, requirements: string[] | undefined) => {
    const budgetMicros = budget === undefined ? undefined : parseMicros(budget)
    if (budget !== undefined && budgetMicros === undefined) {
      throw new AppError('validation_error', 'budgetMicros must be a non-negative integer of micros', { field: 'body.budgetMicros' })
    }
    return buildGuide(catalog, { goal, budgetMicros, requirements })
  }
  return {
    getAgentGuide: async (request) => answer(request.query.goal, request.query.budgetMicros, undefined),
    postAgentGuide: async (request) => answer(request.body.goal, request.body.budgetMicros, request.body.requirements),
  }
}

/**
 * The handler of an operation that is listed but not built: 501 at once, with no access rule in
 * front of it (no 402 challenge, no 401/403, no plan debit), and a pointer to what is built.
 */
const notImplemented = (entry: CatalogOperation, gatewayUrl: string | undefined): OperationHandler => {
  const where = gatewayUrl ? ` What is built: ${gatewayUrl}/manifest.json (operations with implemented: true).` : ''
  const extensions: Record<string, unknown> = { operationId: entry.spec.operationId, implemented: false }
  if (gatewayUrl) extensions.manifest = `${gatewayUrl}/manifest.json`
  return async function notImplementedYet() {
    throw new AppError(
      'not_implemented',
      `${entry.spec.method} ${entry.spec.path} (${entry.spec.operationId}) is listed but not built yet; nothing was charged and no payment or credential is asked for it.${where}`,
      { extensions },
    )
  }
}

/**
 * Puts `purchase` (the access-wrapped plan purchase) behind the catalog's plan availability: a
 * plan whose covered operations are all unbuilt answers 409 plan_unavailable before any 402 or
 * 401. Unknown plans pass through (the access rule answers 404 unknown_plan).
 */
function onlyPurchasablePlans(catalog: Catalog, purchase: OperationHandler): Handler<PlanPricedOperation> {
  return async function purchasablePlanOnly(request, reply) {
    const planId = request.params.planId
    const plan = catalog.plan(planId)
    if (plan && !plan.purchasable) {
      throw new AppError('plan_unavailable', `Plan "${planId}" cannot be bought: ${plan.reason ?? 'it covers no built operation'}`, {
        field: 'path.planId',
        extensions: {
          planId,
          covers: plan.spec.covers,
          reason: plan.reason,
          plans: catalog.plans.filter((candidate) => candidate.purchasable).map((candidate) => planView(candidate, catalog.urls.gateway)),
          manifest: `${catalog.urls.gateway}/manifest.json`,
        },
      })
    }
    return purchase(request, reply)
  }
}

function fastifyPath(path: string): string {
  return path.replace(/\{([^}]+)\}/g, ':$1')
}

/** Applies an operation's access rule (payment, plan, wallet proof) around its handler. */
export type AccessWrapper = (entry: CatalogOperation, handler: OperationHandler) => OperationHandler

/**
 * Mounts registry operations with their schemas: each built one behind `wrap` (its access rule),
 * each unbuilt one as a bare 501. With `catalog`, plan purchases sell only purchasable plans and
 * the 501 links to the manifest.
 */
export function mountOperations(app: FastifyInstance, entries: readonly CatalogOperation[], handlers: HandlerTable, wrap?: AccessWrapper, catalog?: Catalog): void {
  for (const entry of entries) {
    const { spec } = entry
    const schema: Record<string, unknown> = { response: spec.schemas.response }
    if (spec.schemas.body) schema.body = spec.schemas.body
    if (spec.schemas.querystring) schema.querystring = spec.schemas.querystring
    if (spec.schemas.params) schema.params = spec.schemas.params
    if (spec.schemas.headers) schema.headers = spec.schemas.headers
    const handler = handlers[spec.operationId]
    let routeHandler: OperationHandler
    if (!handler) {
      // Nothing is sold that is not built: an unbuilt operation answers 501 before any access rule,
      // so a caller never meets a 402 challenge, a 401/403 or a plan debit for work that does not exist.
      routeHandler = notImplemented(entry, catalog?.urls.gateway)
    } else {
      routeHandler = wrap ? wrap(entry, handler) : handler
      if (catalog && spec.pricing.kind === 'plan-price') routeHandler = onlyPurchasablePlans(catalog, routeHandler)
    }
    app.route({
      method: spec.method,
      url: fastifyPath(spec.path),
      schema,
      config: { operationId: spec.operationId },
      ...(spec.bodyLimitBytes === undefined ? {} : { bodyLimit: spec.bodyLimitBytes }),
      handler: routeHandler,
    })
  }
}
