// The browser paywall: a 402 that goes to a person's browser becomes a readable page (the same
// status and payment headers, an HTML body), and a browser opening the URL of a paid POST
// operation gets the same page instead of a 404. API clients are never affected: only a browser
// navigation (negotiation.ts) is answered with HTML. @x402/paywall is not used: it brings React,
// wagmi and the Solana and Algorand kits and pins another @x402/core; paywall.js is ours, small,
// and needs only the wallet the browser injects.
import { readFileSync } from 'node:fs'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { staticAsset, type StaticAsset } from '../../platform/html.ts'
import type { ProblemPage, ProblemPages } from '../../platform/http.ts'
import type { ProblemBody } from '../../platform/errors.ts'
import { formatUsd } from '../../platform/money.ts'
import { templateMatcher } from '../../catalog/catalog.ts'
import type { OperationSpec, Registry, ServerName, ServiceSpec } from '../../catalog/types.ts'
import { USDC_BASE_ADDRESS, X402_NETWORK_CAIP2 } from '../networks.ts'
import { decodeHeaderJson } from '../x402/header-json.ts'
import { isBrowserNavigation } from './negotiation.ts'
import { exampleOf, PAYWALL_ASSET_PREFIX, PAYWALL_CSP, renderPaywallPage, type PaywallView } from './page.ts'

export { isBrowserNavigation, prefersHtml } from './negotiation.ts'
export { renderPaywallPage, type PaywallView } from './page.ts'

export interface PaywallOptions {
  registry: Registry
  gatewayUrl: string
  payTo: string
}

export interface Paywall {
  /** The pages of one listener: its own paid operations, and the script and style sheet they load. */
  pagesFor(server: ServerName): ProblemPages
}

interface PaidOperation {
  spec: OperationSpec
  service: ServiceSpec
}

/** The x402 v2 terms the page shows, read from a PAYMENT-REQUIRED header. */
export interface ExactTerms {
  resourceUrl: string | undefined
  amount: string
  network: string
  asset: string
  assetName: string | undefined
  payTo: string
}

/**
 * The first EVM `exact` entry of a base64 JSON PAYMENT-REQUIRED header. Read field by field, so
 * whatever else the header carries (extensions, other schemes) is ignored; undefined when unreadable.
 */
export function exactTermsOf(header: string): ExactTerms | undefined {
  let decoded: unknown
  try {
    decoded = decodeHeaderJson(header)
  } catch {
    return undefined
  }
  const required = decoded as { resource?: { url?: unknown }; accepts?: unknown }
  if (!Array.isArray(required?.accepts)) return undefined
  for (const entry of required.accepts as Record<string, unknown>[]) {
    if (entry?.scheme !== 'exact' || typeof entry.network !== 'string' || !entry.network.startsWith('eip155:')) continue
    if (typeof entry.amount !== 'string' || typeof entry.asset !== 'string' || typeof entry.payTo !== 'string') continue
    const extra = entry.extra as { name?: unknown } | undefined
    return {
      resourceUrl: typeof required.resource?.url === 'string' ? required.resource.url : undefined,
      amount: entry.amount,
      network: entry.network,
      asset: entry.asset,
      assetName: typeof extra?.name === 'string' ? extra.name : undefined,
      payTo: entry.payTo,
    }
  }
  return undefined
}

function headerNamed(headers: Readonly<Record<string, string>>, name: string): string | undefined {
  for (const [key, value] of Object.entries(headers)) if (key.toLowerCase() === name) return value
  return undefined
}

export function createPaywall(options: PaywallOptions): Paywall {
  const { registry, gatewayUrl } = options
  const byId = new Map<string, PaidOperation>()
  for (const service of registry.services) for (const spec of service.operations) byId.set(spec.operationId, { spec, service })
  const plans = registry.services.flatMap((service) => service.plans)
  const fileOf = (name: string, contentType: string): StaticAsset => staticAsset(readFileSync(new URL(name, import.meta.url)), contentType)
  const files = new Map<string, StaticAsset>([
    ['paywall.js', fileOf('paywall.js', 'text/javascript; charset=utf-8')],
    ['paywall.css', fileOf('paywall.css', 'text/css; charset=utf-8')],
  ])

  function view(paid: PaidOperation, request: FastifyRequest, terms: ExactTerms | undefined): PaywallView {
    const { spec, service } = paid
    const path = request.url.split('?')[0] ?? ''
    const covering = plans.filter((plan) => plan.covers.includes(service.slug))
    return {
      operation: { operationId: spec.operationId, summary: spec.summary, description: spec.description, method: spec.method, path: spec.path },
      resourceUrl: terms?.resourceUrl ?? `${request.protocol}://${request.host}${request.url}`,
      priceUsd: terms ? formatUsd(BigInt(terms.amount)) : listPrice(paid, path),
      amountHeader: spec.pricing.kind === 'amount-header' ? spec.pricing.header : undefined,
      network: terms?.network ?? X402_NETWORK_CAIP2,
      asset: terms?.asset ?? USDC_BASE_ADDRESS,
      assetName: terms?.assetName ?? 'USD Coin',
      payTo: terms?.payTo ?? options.payTo,
      exampleBody: spec.schemas.body ? JSON.stringify(exampleOf(spec.schemas.body), null, 2) : undefined,
      service: { title: service.title, url: `${gatewayUrl}/services/${service.slug}` },
      plans: covering.map((plan) => ({ id: plan.id, title: plan.title, priceUsd: formatUsd(plan.priceMicros), purchaseUrl: `${gatewayUrl}/plans/${plan.id}/purchase` })),
      gatewayUrl,
    }
  }

  /** The price the registry states before any body is seen (the 402 of the real request is exact). */
  function listPrice({ spec, service }: PaidOperation, path: string): string | undefined {
    const pricing = spec.pricing
    if (pricing.kind === 'per-unit' && service.meter) return formatUsd(service.meter.unitPriceMicros * BigInt(pricing.defaultUnits ?? 1))
    if (pricing.kind === 'plan-price') {
      const planId = decodeURIComponent(path.split('/')[2] ?? '')
      const plan = plans.find((candidate) => candidate.id === planId)
      return plan ? formatUsd(plan.priceMicros) : undefined
    }
    return undefined
  }

  function page(html: string, headers: Readonly<Record<string, string>>): ProblemPage {
    return {
      status: 402,
      html,
      headers: {
        ...headers,
        'cache-control': 'no-store',
        vary: 'Accept',
        'content-security-policy': PAYWALL_CSP,
        'x-content-type-options': 'nosniff',
        'referrer-policy': 'no-referrer',
      },
    }
  }

  function sendFile(request: FastifyRequest<{ Params: { file: string } }>, reply: FastifyReply) {
    const file = files.get(request.params.file)
    if (!file) return reply.code(404).type('text/plain; charset=utf-8').send('not found')
    reply.header('etag', file.etag).header('cache-control', 'public, max-age=86400').header('x-content-type-options', 'nosniff')
    if (request.headers['if-none-match'] === file.etag) return reply.code(304).send()
    return reply.type(file.contentType).send(file.body)
  }

  return {
    pagesFor(server) {
      // Paid operations with a body, which a browser can only open with GET: matched by path.
      const opened = [...byId.values()]
        .filter(({ spec }) => spec.server === server && spec.method !== 'GET' && spec.proof === 'payment')
        .map((paid) => ({ paid, pattern: templateMatcher(paid.spec.path) }))
      return {
        render(request: FastifyRequest, problem: ProblemBody, headers: Readonly<Record<string, string>>) {
          if (!isBrowserNavigation(request.headers)) return undefined
          if (problem.status === 402) {
            const header = headerNamed(headers, 'payment-required')
            const operationId = (request.routeOptions?.config as { operationId?: string } | undefined)?.operationId
            const paid = operationId === undefined ? undefined : byId.get(operationId)
            const terms = header === undefined ? undefined : exactTermsOf(header)
            if (!paid || !terms) return undefined
            return page(renderPaywallPage(view(paid, request, terms)), headers)
          }
          if (problem.code === 'route_not_found' && request.method === 'GET') {
            // A trailing slash still names the operation.
            const path = (request.url.split('?')[0] ?? '').replace(/(.)\/$/, '$1')
            const found = opened.find(({ pattern }) => pattern.test(path))
            if (!found) return undefined
            return page(renderPaywallPage(view(found.paid, request, undefined)), headers)
          }
          return undefined
        },
        register(app: FastifyInstance) {
          app.get<{ Params: { file: string } }>(`${PAYWALL_ASSET_PREFIX}:file`, { schema: { hide: true } as object, logLevel: 'warn' }, sendFile)
        },
      }
    },
  }
}
