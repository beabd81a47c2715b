// The free seller advisor: ranks the registry's operations for a goal and says how to buy them.
// It never executes a purchase.
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

export interface Guide {
  goal: string
  recommendations: GuideRecommendation[]
  steps: string[]
  notes: string[]
}

const MAX_RECOMMENDATIONS = 5

function howToPay(entry: CatalogOperation, baseUrl: string): string {
  switch (entry.spec.proof) {
    case 'payment':
      return 'Call it, answer the 402 with x402 (PAYMENT-SIGNATURE / X-PAYMENT) or MPP (Authorization: Payment), retry.'
    case 'plan-bearer':
      return `Register (POST ${baseUrl}/auth/register), buy a covering plan (${entry.paymentInfo.plans.join(', ') || 'see /services'}), call with Authorization: Bearer <accessToken>.`
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
  const ranked = catalog.select({ q: query }).filter((entry) => entry.service.slug !== 'advisor')
  const top = ranked.slice(0, MAX_RECOMMENDATIONS)
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
      howToPay: howToPay(entry, catalog.urls.gateway),
      score: Number((1 - position / (top.length + 1)).toFixed(3)),
      withinBudget: request.budgetMicros === undefined || priceMicros === null ? null : priceMicros <= request.budgetMicros,
      implemented: entry.implemented,
    }
  })
  const best = recommendations[0]
  const notes: string[] = []
  if (!best) notes.push(`Nothing in the catalog matches "${request.goal}". Browse ${catalog.urls.gateway}/services.`)
  if (request.budgetMicros !== undefined && best?.withinBudget === false) {
    notes.push(`The best match costs ${best.price?.amountUsd} USD per ${best.price?.per}, above your budget of ${formatUsd(request.budgetMicros)} USD.`)
  }
  for (const recommendation of recommendations) {
    if (!recommendation.implemented) notes.push(`${recommendation.operationId} is listed but not implemented yet (501).`)
  }
  const steps = best
    ? [
        `Read the operation: GET ${catalog.urls.gateway}/openapi.json?path=${encodeURIComponent(new URL(best.url).pathname)}&method=${best.method}`,
        best.howToPay,
        `Call ${best.method} ${best.url}.`,
      ]
    : []
  return { goal: request.goal, recommendations, steps, notes }
}
