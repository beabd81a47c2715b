// Fastify routes of the discovery surface, and the mounting of registry operations.
// Documents are derived once and served pre-serialized: discovery is the hottest free path.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { createHash } from 'node:crypto'
import { brotliCompressSync, constants as zlibConstants, gzipSync } from 'node:zlib'
import { Type, type Static, type TSchema } from '@sinclair/typebox'
import { AppError } from '../platform/errors.ts'
import { parseMicros } from '../platform/money.ts'
import type { Catalog } from './catalog.ts'
import type { CatalogOperation } from './openapi.ts'
import type { ServerName } from './types.ts'
import { authMd, llmsFullTxt, llmsTxt, manifestView, serviceView, servicesView, type DocumentContext } from './documents.ts'
import { buildGuide } from './advisor.ts'

export type OperationHandler = (request: FastifyRequest, reply: FastifyReply) => Promise<unknown>
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
type OpenapiQuery = Static<typeof OpenapiQuerySchema>

const SlugParams = Type.Object({ slug: Type.String({ minLength: 1, maxLength: 100 }) })

/**
 * A document rendered once: its bytes, precompressed variants and a strong ETag. Discovery
 * documents are immutable for the life of the process, so this is all the work a request does.
 */
export interface RenderedDocument {
  contentType: string
  /** Small documents stay strings: node writes headers and a string body in one write(). */
  body: Buffer | string
  /** Compressed on first use, then kept: searches with no takers for gzip cost nothing extra. */
  gzip(): Buffer
  br(): Buffer
  etag: string
  link?: string | undefined
}

const SMALL_DOCUMENT_BYTES = 16 * 1024

export function renderDocument(contentType: string, text: string, link?: string): RenderedDocument {
  const bytes = Buffer.from(text)
  const body = bytes.length <= SMALL_DOCUMENT_BYTES ? text : bytes
  let gzip: Buffer | undefined
  let br: Buffer | undefined
  return {
    contentType,
    body,
    gzip: () => (gzip ??= gzipSync(bytes, { level: 6 })),
    br: () => (br ??= brotliCompressSync(bytes, { params: { [zlibConstants.BROTLI_PARAM_QUALITY]: 6, [zlibConstants.BROTLI_PARAM_SIZE_HINT]: bytes.length } })),
    etag: `"${createHash('sha256').update(bytes).digest('base64url').slice(0, 27)}"`,
    link,
  }
}

/** Sends a rendered document, honouring If-None-Match and Accept-Encoding (br, then gzip). */
export function sendDocument(request: FastifyRequest, reply: FastifyReply, document: RenderedDocument): FastifyReply {
  reply.header('etag', document.etag).header('vary', 'accept-encoding').header('cache-control', 'public, max-age=60')
  if (document.link) reply.header('link', document.link)
  if (request.headers['if-none-match'] === document.etag) return reply.code(304).send()
  reply.type(document.contentType)
  const accepted = request.headers['accept-encoding'] ?? ''
  if (/\bbr\b/.test(accepted)) return reply.header('content-encoding', 'br').send(document.br())
  if (/\bgzip\b/.test(accepted)) return reply.header('content-encoding', 'gzip').send(document.gzip())
  return reply.send(document.body)
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

/** GET /openapi.json with search, filters, pages, x-next and an RFC 8288 Link header. */
export function registerOpenapiRoute(app: FastifyInstance, catalog: Catalog, scope?: ServerName): void {
  const cache = boundedCache<RenderedDocument>(512)
  app.get<{ Querystring: OpenapiQuery }>(
    '/openapi.json',
    { schema: { querystring: OpenapiQuerySchema, response: { 200: AnyObject } } },
    async (request, reply) => {
      const { q, path, method, page } = request.query
      const key = JSON.stringify([q, path, method?.toUpperCase(), page ?? 1])
      let document = cache.get(key)
      if (document === undefined) {
        const result = catalog.openapiPage({ q, path, method, page }, scope)
        document = renderDocument(JSON_TYPE, JSON.stringify(result.document), result.next ? `<${result.next}>; rel="next"` : undefined)
        cache.set(key, document)
      }
      return sendDocument(request, reply, document)
    },
  )
}

export function registerDiscoveryRoutes(app: FastifyInstance, context: DocumentContext): void {
  const { catalog } = context
  registerOpenapiRoute(app, catalog)
  const json = (value: unknown): RenderedDocument => renderDocument(JSON_TYPE, JSON.stringify(value))
  const services = json(servicesView(context))
  const manifest = json(manifestView(context))
  const llms = renderDocument('text/plain; charset=utf-8', llmsTxt(context))
  const llmsFull = renderDocument('text/plain; charset=utf-8', llmsFullTxt(context))
  const auth = renderDocument('text/markdown; charset=utf-8', authMd(context))
  const serviceDocs = new Map(catalog.registry.services.map((service) => [service.slug, json(serviceView(context, service.slug))]))
  const serviceSpecs = new Map(catalog.registry.services.map((service) => [service.slug, json(catalog.serviceDocument(service.slug))]))

  const lookup = (table: Map<string, RenderedDocument>, slug: string): RenderedDocument => {
    const document = table.get(slug)
    if (document === undefined) throw new AppError('unknown_service', `No service "${slug}"; see /services`, { field: 'path.slug' })
    return document
  }
  const fixed = (url: string, document: RenderedDocument, schema: TSchema) =>
    app.get(url, { schema: { response: { 200: schema } } }, async (request, reply) => sendDocument(request, reply, document))

  fixed('/services', services, AnyObject)
  fixed('/manifest.json', manifest, AnyObject)
  fixed('/llms.txt', llms, TextDocument)
  fixed('/llms-full.txt', llmsFull, TextDocument)
  fixed('/auth.md', auth, TextDocument)
  app.get<{ Params: Static<typeof SlugParams> }>(
    '/services/:slug',
    { schema: { params: SlugParams, response: { 200: AnyObject } } },
    async (request, reply) => sendDocument(request, reply, lookup(serviceDocs, request.params.slug)),
  )
  app.get<{ Params: Static<typeof SlugParams> }>(
    '/services/:slug/openapi.json',
    { schema: { params: SlugParams, response: { 200: AnyObject } } },
    async (request, reply) => sendDocument(request, reply, lookup(serviceSpecs, request.params.slug)),
  )
}

/** Handlers of the free guide operations (GET/POST /advisor/agent/guide). */
export function guideHandlers(catalog: Catalog): Record<'getAgentGuide' | 'postAgentGuide', OperationHandler> {
  const answer = (goal: string, budget: unknown, requirements: string[] | undefined) => {
    const budgetMicros = budget === undefined ? undefined : parseMicros(budget)
    if (budget !== undefined && budgetMicros === undefined) {
      throw new AppError('validation_error', 'budgetMicros must be a non-negative integer of micros', { field: 'body.budgetMicros' })
    }
    return buildGuide(catalog, { goal, budgetMicros, requirements })
  }
  return {
    getAgentGuide: async (request) => {
      const query = request.query as { goal: string; budgetMicros?: string }
      return answer(query.goal, query.budgetMicros, undefined)
    },
    postAgentGuide: async (request) => {
      const body = request.body as { goal: string; budgetMicros?: string | number; requirements?: string[] }
      return answer(body.goal, body.budgetMicros, body.requirements)
    },
  }
}

const notImplemented = (entry: CatalogOperation): OperationHandler =>
  async function notImplementedYet() {
    throw new AppError('not_implemented', `${entry.spec.method} ${entry.spec.path} (${entry.spec.operationId}) is registered but not implemented yet`, {
      extensions: { operationId: entry.spec.operationId },
    })
  }

function fastifyPath(path: string): string {
  return path.replace(/\{([^}]+)\}/g, ':$1')
}

/** Applies an operation's access rule (payment, plan, wallet proof) around its handler. */
export type AccessWrapper = (entry: CatalogOperation, handler: OperationHandler) => OperationHandler

/** Mounts registry operations with their schemas, each behind `wrap` (its access rule). */
export function mountOperations(app: FastifyInstance, entries: readonly CatalogOperation[], handlers: HandlerTable, wrap?: AccessWrapper): void {
  for (const entry of entries) {
    const { spec } = entry
    const schema: Record<string, unknown> = { response: spec.schemas.response }
    if (spec.schemas.body) schema.body = spec.schemas.body
    if (spec.schemas.querystring) schema.querystring = spec.schemas.querystring
    if (spec.schemas.params) schema.params = spec.schemas.params
    if (spec.schemas.headers) schema.headers = spec.schemas.headers
    const handler = handlers[spec.operationId]
    app.route({
      method: spec.method,
      url: fastifyPath(spec.path),
      schema,
      config: { operationId: spec.operationId },
      // Access rules apply to unbuilt operations too (401/403/402 first); their 501 then releases
      // the reservation or debit, so nothing is ever charged for work that does not exist.
      handler: wrap ? wrap(entry, handler ?? notImplemented(entry)) : (handler ?? notImplemented(entry)),
    })
  }
}
