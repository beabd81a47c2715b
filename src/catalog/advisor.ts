// The free seller advisor: ranks the registry's operations for a goal and says how to buy them.
// It never executes a purchase, and it recommends only what is built: an unbuilt operation is
// never a recommendation (it is listed under `unavailable` when the goal matches it), and a plan
// is only suggested when it can be bought.
import { formatUsd } from '../platform/money.ts'
import type { Catalog } from './catalog.ts'
import type { CatalogOperation } from './openapi.ts'

export interface GuideRequest {
  goal: string
  budgetMicros?: bigint | undefined
  requirements?: string[] | undefined
}

export interface GuideRecommendation {
  service: string
  operationId: string
  method: string
  url: string
  summary: string
  access: 'payg' | 'plan'
  price: { amountMicros: string; amountUsd: string; per: string } | null
  includedUnits: number
  howToPay: string
  score: number
  withinBudget: boolean | null
  implemented: boolean
}

/** An operation that matches the goal but is not built yet (it answers 501; nothing is sold for it). */
export interface GuideUnavailable {
  service: string
  operationId: string
  summary: string
  reason: string
}

/** The MCP door to the same operations: every operation is a tool named by its operationId. */
export interface GuideMcp {
  url: string
  transport: 'streamable-http'
  tool: string | null
  howToPay: string
}

export interface Guide {
  goal: string
  recommendations: GuideRecommendation[]
  /** Matches of the goal that are not built yet; never recommendations. */
  unavailable: GuideUnavailable[]
  steps: string[]
  notes: string[]
  mcp: GuideMcp
}

/** How a paid tool is paid over MCP (the x402 v2 MCP transport; MPP in its own _meta key). */
function mcpHowToPay(mppCharges: boolean): string {
  return (
    'A paid tool called without payment returns isError with the x402 PaymentRequired in structuredContent; retry the call with the x402 PaymentPayload in params._meta["x402/payment"] ' +
    (mppCharges ? '(or an MPP credential in _meta["org.paymentauth/credential"])' : '(MPP charges are not offered here)') +
    '; the settlement comes back in _meta["x402/payment-response"]. Plan tools use the MCP request\'s Authorization: Bearer <accessToken>.'
  )
}

const MAX_RECOMMENDATIONS = 5
const MAX_UNAVAILABLE = 3
/**
 * An operation is relevant to the goal when it scores at least this share of the goal's best
 * match, built or not. Measured against the best match overall so that, when the goal is about
 * something not built (a song), weak built matches (a word shared with a scheduler description)
 * are not promoted in its place.
 */
const RELEVANCE_FLOOR = 0.4

function howToPay(entry: CatalogOperation, catalog: Catalog): string {
  const baseUrl = catalog.urls.gateway
  switch (entry.spec.proof) {
    case 'payment':
      return catalog.mppCharges
        ? 'Call it, answer the 402 with x402 (PAYMENT-SIGNATURE / X-PAYMENT) or MPP (Authorization: Payment), retry.'
        : 'Call it, answer the 402 with x402 (PAYMENT-SIGNATURE / X-PAYMENT), retry. MPP charges are not offered here.'
    case 'plan-bearer': {
      // Only plans that can be bought are ever suggested.
      const plans = entry.paymentInfo.plans.filter((id) => catalog.plan(id)?.purchasable === true)
      return `Register (POST ${baseUrl}/auth/register), buy a covering plan (${plans.join(', ') || `see ${baseUrl}/manifest.json`}), call with Authorization: Bearer <accessToken>.`
    }
    case 'agent-bearer':
      return `Free; send the access token from POST ${baseUrl}/auth/register as Authorization: Bearer.`
    case 'wallet':
      return 'Free; prove wallet ownership with a SIGN-IN-WITH-X header or a $0 MPP proof.'
    case 'api-key':
      return 'Free; send the scheduler account API key as Authorization: Bearer.'
    case 'webhook-secret':
      return 'Send the task webhook secret as Authorization: Bearer whsec_….'
    case 'none':
      return 'Free; no credential needed.'
  }
}

export function buildGuide(catalog: Catalog, request: GuideRequest): Guide {
  const query = [request.goal, ...(request.requirements ?? [])].join(' ')
  // Relevance decides; the advisor never recommends itself.
  const matches = catalog.match(query).filter((hit) => hit.entry.service.slug !== 'advisor')
  const floor = (matches[0]?.score ?? 0) * RELEVANCE_FLOOR
  const relevant = matches.filter((hit) => hit.score >= floor).map((hit) => hit.entry)
  const top = relevant.filter((entry) => entry.implemented).slice(0, MAX_RECOMMENDATIONS)
  const unavailable = relevant
    .filter((entry) => !entry.implemented)
    .slice(0, MAX_UNAVAILABLE)
    .map(
      (entry): GuideUnavailable => ({
        service: entry.service.slug,
        operationId: entry.spec.operationId,
        summary: entry.spec.summary,
        reason: 'Not built yet: it answers 501 not_implemented and nothing is sold for it (no payment, no plan).',
      }),
    )
  const recommendations = top.map((entry, position): GuideRecommendation => {
    const price = entry.paymentInfo.price
    const priceMicros = price ? BigInt(price.amountMicros) : null
    return {
      service: entry.service.slug,
      operationId: entry.spec.operationId,
      method: entry.spec.method,
      url: entry.serverUrl + entry.spec.path,
      summary: entry.spec.summary,
      access: entry.paymentInfo.access,
      price: price ? { amountMicros: price.amountMicros, amountUsd: price.amountUsd, per: price.per } : null,
      includedUnits: entry.paymentInfo.includedUnits,
      howToPay: howToPay(entry, catalog),
      score: Number((1 - position / (top.length + 1)).toFixed(3)),
      withinBudget: request.budgetMicros === undefined || priceMicros === null ? null : priceMicros <= request.budgetMicros,
      implemented: entry.implemented,
    }
  })
  const best = recommendations[0]
  const notes: string[] = []
  if (!best && unavailable.length === 0) notes.push(`Nothing in the catalog matches "${request.goal}". Browse ${catalog.urls.gateway}/services.`)
  if (!best && unavailable.length > 0) {
    notes.push(`Nothing built matches "${request.goal}" yet. What is built: ${catalog.urls.gateway}/manifest.json (operations with implemented: true).`)
  }
  if (unavailable.length > 0) {
    notes.push(`Not available yet (listed, not built, answer 501, not sold): ${unavailable.map((entry) => entry.operationId).join(', ')}.`)
  }
  if (request.budgetMicros !== undefined && best?.withinBudget === false) {
    notes.push(`The best match costs ${best.price?.amountUsd} USD per ${best.price?.per}, above your budget of ${formatUsd(request.budgetMicros)} USD.`)
  }
  const mcpUrl = `${catalog.urls.gateway}/mcp`
  const steps = best
    ? [
        `Read the operation: GET ${catalog.urls.gateway}/openapi.json?path=${encodeURIComponent(new URL(best.url).pathname)}&method=${best.method}`,
        best.howToPay,
        `Call ${best.method} ${best.url}.`,
        `Or, from an MCP client: call the tool ${best.operationId} at ${mcpUrl} (Streamable HTTP); paid tools are paid in params._meta["x402/payment"].`,
      ]
    : []
  const mcp: GuideMcp = { url: mcpUrl, transport: 'streamable-http', tool: best?.operationId ?? null, howToPay: mcpHowToPay(catalog.mppCharges) }
  return { goal: request.goal, recommendations, unavailable, steps, notes, mcp }
}
