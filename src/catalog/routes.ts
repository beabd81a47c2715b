// Fastify routes of the discovery surface, and the mounting of registry operations.
// Documents are derived once and served pre-serialized: discovery is the hottest free path.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { Type, type Static } from '@sinclair/typebox'
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

/** Small bounded cache of serialized responses keyed by the normalized query. */
function boundedCache(limit: number): { get(key: string): string | undefined; set(key: string, value: string): void } {
  const entries = new Map<string, string>()
  return {
    get: (key) => entries.get(key),
    set: (key, value) => {
      if (entries.size >= limit) entries.delete(entries.keys().next().value as string)
      entries.set(key, value)
    },
  }
}

/** GET /openapi.json with search, filters, pages, x-next and an RFC 8288 Link header. */
export function registerOpenapiRoute(app: FastifyInstance, catalog: Catalog, scope?: ServerName): void {
  const cache = boundedCache(512)
  const links = new Map<string, string | undefined>()
  app.get<{ Querystring: OpenapiQuery }>(
    '/openapi.json',
    { schema: { querystring: OpenapiQuerySchema, response: { 200: AnyObject } } },
    async (request, reply) => {
      const { q, path, method, page } = request.query
      const key = JSON.stringify([q, path, method?.toUpperCase(), page ?? 1])
      let body = cache.get(key)
      let next = links.get(key)
      if (body === undefined) {
        const result = catalog.openapiPage({ q, path, method, page }, scope)
        body = JSON.stringify(result.document)
        next = result.next
        cache.set(key, body)
        links.set(key, next)
        if (links.size > 512) links.delete(links.keys().next().value as string)
      }
      if (next) reply.header('link', `<${next}>; rel="next"`)
      return reply.type('application/json; charset=utf-8').send(body)
    },
  )
}

export function registerDiscoveryRoutes(app: FastifyInstance, context: DocumentContext): void {
  const { catalog } = context
  registerOpenapiRoute(app, catalog)
  const json = (value: unknown): string => JSON.stringify(value)
  const services = json(servicesView(context))
  const manifest = json(manifestView(context))
  const llms = llmsTxt(context)
  const llmsFull = llmsFullTxt(context)
  const auth = authMd(context)
  const serviceDocs = new Map(catalog.registry.services.map((service) => [service.slug, json(serviceView(context, service.slug))]))
  const serviceSpecs = new Map(catalog.registry.services.map((service) => [service.slug, json(catalog.serviceDocument(service.slug))]))

  const sendJson = (reply: FastifyReply, body: string): FastifyReply => reply.type('application/json; charset=utf-8').send(body)
  const lookup = (table: Map<string, string>, slug: string): string => {
    const body = table.get(slug)
    if (body === undefined) throw new AppError('unknown_service', `No service "${slug}"; see /services`, { field: 'path.slug' })
    return body
  }

  app.get('/services', { schema: { response: { 200: AnyObject } } }, async (_request, reply) => sendJson(reply, services))
  app.get<{ Params: Static<typeof SlugParams> }>(
    '/services/:slug',
    { schema: { params: SlugParams, response: { 200: AnyObject } } },
    async (request, reply) => sendJson(reply, lookup(serviceDocs, request.params.slug)),
  )
  app.get<{ Params: Static<typeof SlugParams> }>(
    '/services/:slug/openapi.json',
    { schema: { params: SlugParams, response: { 200: AnyObject } } },
    async (request, reply) => sendJson(reply, lookup(serviceSpecs, request.params.slug)),
  )
  app.get('/manifest.json', { schema: { response: { 200: AnyObject } } }, async (_request, reply) => sendJson(reply, manifest))
  app.get('/llms.txt', { schema: { response: { 200: TextDocument } } }, async (_request, reply) =>
    reply.type('text/plain; charset=utf-8').send(llms),
  )
  app.get('/llms-full.txt', { schema: { response: { 200: TextDocument } } }, async (_request, reply) =>
    reply.type('text/plain; charset=utf-8').send(llmsFull),
  )
  app.get('/auth.md', { schema: { response: { 200: TextDocument } } }, async (_request, reply) =>
    reply.type('text/markdown; charset=utf-8').send(auth),
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

/** Mounts registry operations with their schemas; operations without a handler answer 501. */
export function mountOperations(app: FastifyInstance, entries: readonly CatalogOperation[], handlers: HandlerTable): void {
  for (const entry of entries) {
    const { spec } = entry
    const schema: Record<string, unknown> = { response: spec.schemas.response }
    if (spec.schemas.body) schema.body = spec.schemas.body
    if (spec.schemas.querystring) schema.querystring = spec.schemas.querystring
    if (spec.schemas.params) schema.params = spec.schemas.params
    if (spec.schemas.headers) schema.headers = spec.schemas.headers
    app.route({
      method: spec.method,
      url: fastifyPath(spec.path),
      schema,
      config: { operationId: spec.operationId },
      handler: handlers[spec.operationId] ?? notImplemented(entry),
    })
  }
}
