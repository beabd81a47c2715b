// Builds one listener's application from the catalog: platform routes (health, metrics),
// the discovery routes of its scope, and its registry operations with their handlers.
import type { FastifyInstance } from 'fastify'
import { createHttpApp, type HttpAppOptions, type ProblemPages, type ReadinessCheck } from '../platform/http.ts'
import type { Logger } from '../platform/logger.ts'
import type { Metrics } from '../platform/metrics.ts'
import type { Catalog } from './catalog.ts'
import type { ServerName } from './types.ts'
import { scopedLlmsTxt } from './documents.ts'
import {
  mountOperations,
  registerDiscoveryRoutes,
  registerOpenapiRoute,
  renderDocument,
  renderedOnFirstUse,
  sendDocument,
  type AccessWrapper,
  type HandlerTable,
} from './routes.ts'

export interface ServiceAppDeps {
  catalog: Catalog
  logger: Logger
  metrics: Metrics
  bodyLimitBytes: number
  payTo: string
  /** Published in the discovery documents' x402 protocol (see protocolsView). */
  offerReceiptSigners?: readonly string[] | undefined
  readiness: Record<string, ReadinessCheck>
  /** Reported by /readyz under `detail` without making it 503 (see createHttpApp). */
  diagnostics?: HttpAppOptions['diagnostics']
  /** The hosts and origins the listener answers (see createHttpApp). */
  hosts?: HttpAppOptions['hosts']
  /**
   * The listener's payments, as far as this factory needs them: the paywall a browser gets instead
   * of a 402's JSON (typed here, not imported: the catalog does not depend on src/payments).
   */
  payments?: { paywall: { pagesFor(server: ServerName): ProblemPages } }
}

export function createServiceApp(scope: ServerName, deps: ServiceAppDeps, handlers: HandlerTable, wrap?: AccessWrapper): FastifyInstance {
  const app = createHttpApp({
    name: scope,
    logger: deps.logger,
    metrics: deps.metrics,
    bodyLimitBytes: deps.bodyLimitBytes,
    readiness: deps.readiness,
    diagnostics: deps.diagnostics,
    problemPages: deps.payments?.paywall.pagesFor(scope),
    hosts: deps.hosts,
  })
  // Set by the payments access rule before a paid handler runs (see src/payments/access.ts).
  app.decorateRequest('payment', null)
  if (scope === 'gateway') {
    registerDiscoveryRoutes(app, { catalog: deps.catalog, payTo: deps.payTo, offerReceiptSigners: deps.offerReceiptSigners })
  } else {
    registerOpenapiRoute(app, deps.catalog, scope)
    const llms = renderedOnFirstUse(() => renderDocument('text/plain; charset=utf-8', scopedLlmsTxt(deps.catalog, scope), { effort: 'best' }))
    app.get('/llms.txt', { schema: { response: { 200: { type: 'string' } } } }, (request, reply) => sendDocument(request, reply, llms))
    app.prepared.set('/llms.txt', '/llms.txt', llms.respond)
  }
  mountOperations(app, deps.catalog.operationsOn(scope), handlers, wrap, deps.catalog)
  return app
}
