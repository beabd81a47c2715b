// Discovery documents derived from the catalog: /manifest.json, /services, /services/{slug},
// /llms.txt, /llms-full.txt, /auth.md. Prices are always micros strings plus a USD rendering.
import { formatUsd } from '../platform/money.ts'
import { AppError } from '../platform/errors.ts'
import { MPP_CURRENCY, MPP_INTENT, MPP_METHOD, USDC_BASE_ADDRESS, X402_NETWORK_CAIP2, X402_NETWORK_V1 } from './networks.ts'
import type { Catalog, CatalogPlan } from './catalog.ts'
import type { CatalogOperation } from './openapi.ts'
import type { ServiceSpec } from './types.ts'

export interface DocumentContext {
  catalog: Catalog
  payTo: string
  /** Addresses whose EIP-712 signatures on x402 offers and receipts are ours (the key ring). */
  offerReceiptSigners?: readonly string[] | undefined
}

/**
 * A plan as the discovery documents show it. Every plan is listed; one that covers no built
 * operation says `purchasable: false` with the `reason` and has no `purchase` link (buying it
 * answers 409 plan_unavailable).
 */
export function planView(entry: CatalogPlan, baseUrl: string): Record<string, unknown> {
  const plan = entry.spec
  const view: Record<string, unknown> = {
    id: plan.id,
    kind: plan.kind,
    title: plan.title,
    description: plan.description,
    price: { amountMicros: plan.priceMicros.toString(), amountUsd: formatUsd(plan.priceMicros), currency: 'USD' },
    covers: plan.covers,
    purchasable: entry.purchasable,
  }
  if (entry.purchasable) view.purchase = { method: 'POST', url: `${baseUrl}/plans/${plan.id}/purchase` }
  else view.reason = entry.reason
  if (plan.creditMicros !== undefined) view.creditMicros = plan.creditMicros.toString()
  if (plan.periodDays !== undefined) view.periodDays = plan.periodDays
  if (plan.callsPerPeriod !== undefined) view.callsPerPeriod = plan.callsPerPeriod
  return view
}

function operationView(entry: CatalogOperation): Record<string, unknown> {
  return {
    operationId: entry.spec.operationId,
    method: entry.spec.method,
    path: entry.spec.path,
    url: entry.serverUrl + entry.spec.path,
    summary: entry.spec.summary,
    implemented: entry.implemented,
    'x-payment-info': entry.paymentInfo,
  }
}

function meterView(service: ServiceSpec): Record<string, unknown> | null {
  const meter = service.meter
  if (!meter) return null
  return {
    name: meter.name,
    unit: meter.unit,
    price: { amountMicros: meter.unitPriceMicros.toString(), amountUsd: formatUsd(meter.unitPriceMicros), currency: 'USD', per: meter.unit },
    includedUnits: meter.includedUnits,
  }
}

/** How a priced 402 can be paid here, in prose: MPP charges only where offered (a Tempo RPC). */
function payWith(mppCharges: boolean): string {
  return mppCharges ? 'x402 or MPP' : 'x402'
}

function howToBuy(service: ServiceSpec, baseUrl: string, built: boolean, mppCharges: boolean): string[] {
  if (!built) {
    return [
      `Not available yet: no operation of ${service.slug} is built. Each answers 501 not_implemented before any payment or credential, and nothing is sold for it (its plans, if any, are marked purchasable: false).`,
      `What is built: ${baseUrl}/manifest.json (operations with implemented: true).`,
    ]
  }
  if (service.access === 'plan') {
    return [
      `POST ${baseUrl}/auth/register (free, no body) to get {agentId, accessToken}.`,
      `Buy a covering plan: POST ${baseUrl}/plans/{planId}/purchase answers a priced 402; pay it with ${payWith(mppCharges)} and retry with the proof and your token in Svc-Agent-Authorization: Bearer <accessToken>.`,
      'Call the operation with Authorization: Bearer <accessToken>. Plan operations never answer 402: 401 bearer_required without a token, 403 plan_required without a covering plan.',
    ]
  }
  if (!mppCharges) {
    return [
      'Call the operation; an unpaid call answers 402 with an x402 v2 PAYMENT-REQUIRED header and an x402 v1 JSON body. MPP charges are not offered by this gateway (it has no Tempo RPC to verify them): a priced 402 carries no WWW-Authenticate: Payment challenge.',
      'Sign the challenge with your wallet (EIP-3009 transferWithAuthorization for USDC on eip155:8453) and retry with PAYMENT-SIGNATURE (x402 v2) or X-PAYMENT (x402 v1).',
      'You are charged only when the work succeeds; the receipt comes back in PAYMENT-RESPONSE / X-PAYMENT-RESPONSE.',
    ]
  }
  return [
    'Call the operation; an unpaid call answers 402 with an x402 v2 PAYMENT-REQUIRED header, an x402 v1 JSON body and an MPP WWW-Authenticate: Payment challenge.',
    'Sign the challenge with your wallet (x402: EIP-3009 transferWithAuthorization for USDC on eip155:8453; MPP: tempo charge credential) and retry with PAYMENT-SIGNATURE, X-PAYMENT or Authorization: Payment.',
    'You are charged only when the work succeeds; the receipt comes back in PAYMENT-RESPONSE / X-PAYMENT-RESPONSE / Payment-Receipt.',
  ]
}

/**
 * The payment protocols of the discovery documents. MPP is listed with what it is offered for:
 * `charges` only with a Tempo RPC to verify them; `proofs` ($0 wallet proofs, verified locally)
 * always.
 */
export function protocolsView(payTo: string, offerReceiptSigners: readonly string[] = [], mppCharges = false): Record<string, unknown> {
  // Verifiers of a signed offer or receipt check the recovered address against this list (every
  // key of the ring, so what an older key signed stays verifiable during a rotation).
  const offerReceipt = offerReceiptSigners.length > 0 ? { offerReceipt: { format: 'eip712', signers: [...offerReceiptSigners] } } : {}
  return {
    x402: { versions: [1, 2], scheme: 'exact', network: X402_NETWORK_CAIP2, networkV1: X402_NETWORK_V1, asset: USDC_BASE_ADDRESS, payTo, ...offerReceipt },
    mpp: {
      method: MPP_METHOD,
      intent: MPP_INTENT,
      currency: MPP_CURRENCY,
      charges: mppCharges,
      proofs: true,
      ...(mppCharges ? {} : { note: 'MPP charges are not offered here (no Tempo RPC to verify them); MPP is accepted for $0 wallet proofs only. Pay priced calls with x402.' }),
    },
  }
}

export function servicesView(context: DocumentContext): Record<string, unknown> {
  const { catalog } = context
  return {
    services: catalog.registry.services.map((service) => ({
      slug: service.slug,
      title: service.title,
      description: service.description,
      access: service.access,
      baseUrl: catalog.urls[service.server],
      meter: meterView(service),
      plans: service.plans.map((plan) => plan.id),
      operations: catalog.operationsOf(service.slug).length,
      links: {
        self: `${catalog.urls.gateway}/services/${service.slug}`,
        openapi: `${catalog.urls.gateway}/services/${service.slug}/openapi.json`,
      },
    })),
  }
}

export function serviceView(context: DocumentContext, slug: string): Record<string, unknown> {
  const { catalog } = context
  const service = catalog.service(slug)
  if (!service) throw new AppError('unknown_service', `No service "${slug}"; see /services`, { field: 'path.slug' })
  return {
    slug: service.slug,
    title: service.title,
    description: service.description,
    access: service.access,
    baseUrl: catalog.urls[service.server],
    meter: meterView(service),
    priceMatrix: catalog.operationsOf(slug).map(operationView),
    plans: service.plans.map((plan) => planView(catalog.plan(plan.id) ?? { spec: plan, purchasable: false, builtOperations: [] }, catalog.urls.gateway)),
    protocols: protocolsView(context.payTo, context.offerReceiptSigners, catalog.mppCharges),
    howToBuy: howToBuy(
      service,
      catalog.urls.gateway,
      catalog.operationsOf(slug).some((entry) => entry.implemented),
      catalog.mppCharges,
    ),
    openapi: `${catalog.urls.gateway}/services/${service.slug}/openapi.json`,
  }
}

export function manifestView(context: DocumentContext): Record<string, unknown> {
  const { catalog } = context
  return {
    name: 'agent-gateway',
    version: '1.0.0',
    baseUrl: catalog.urls.gateway,
    schedulerUrl: catalog.urls.scheduler,
    memoryUrl: catalog.urls.memory,
    protocols: protocolsView(context.payTo, context.offerReceiptSigners, catalog.mppCharges),
    services: catalog.registry.services.map((service) => ({
      slug: service.slug,
      title: service.title,
      access: service.access,
      baseUrl: catalog.urls[service.server],
      meters: service.meter ? [meterView(service)] : [],
      plans: service.plans.map((plan) => plan.id),
      operations: catalog.operationsOf(service.slug).map(operationView),
    })),
    plans: catalog.plans.map((plan) => planView(plan, catalog.urls.gateway)),
    discovery: {
      openapi: `${catalog.urls.gateway}/openapi.json`,
      services: `${catalog.urls.gateway}/services`,
      llms: `${catalog.urls.gateway}/llms.txt`,
      llmsFull: `${catalog.urls.gateway}/llms-full.txt`,
      auth: `${catalog.urls.gateway}/auth.md`,
      guide: `${catalog.urls.gateway}/advisor/agent/guide?goal=`,
    },
  }
}

function priceLine(entry: CatalogOperation): string {
  const info = entry.paymentInfo
  if (info.pricing === 'free') return 'free'
  const paidBy = info.protocols.includes('mpp') ? 'x402/MPP' : 'x402'
  if (info.pricing === 'amount-header') return `you choose the amount (X-Pay-Amount-Micros), paid by ${paidBy}`
  if (info.pricing === 'plan-price') return `the plan price, paid by ${paidBy}`
  if (!info.price) return 'priced per call'
  const included = info.includedUnits > 0 ? `; ${info.includedUnits} free per claimed account` : ''
  const mode = info.access === 'plan' ? ' debited from a plan' : ''
  return `${info.price.amountUsd} USD per ${info.price.per}${mode}${included}`
}

/** One plan in llms.txt and auth.md: price, coverage and whether it can be bought. */
function planLine(plan: CatalogPlan): string {
  const { spec } = plan
  const sale = plan.purchasable ? 'purchasable' : `NOT purchasable: ${plan.reason ?? 'it covers no built operation'}`
  return `- \`${spec.id}\` (${spec.kind}): ${spec.title}, ${formatUsd(spec.priceMicros)} USD; covers ${spec.covers.join(', ')}; ${sale}`
}

function operationLine(entry: CatalogOperation): string {
  const status = entry.implemented ? '' : ' (not implemented yet: 501)'
  return `- ${entry.spec.method} ${entry.serverUrl}${entry.spec.path}: ${entry.spec.summary} [${entry.paymentInfo.access}; ${priceLine(entry)}]${status}`
}

export function llmsTxt(context: DocumentContext): string {
  const { catalog } = context
  const base = catalog.urls.gateway
  const lines = [
    '# Agent Gateway',
    '',
    '> Pay-per-request API for AI agents: annotation reviews, song and speech generation, a script scheduler and an encrypted memory store.',
    catalog.mppCharges
      ? '> No account needed for payg operations: answer the 402 with x402 (USDC on eip155:8453, scheme exact) or MPP (tempo/charge).'
      : '> No account needed for payg operations: answer the 402 with x402 (USDC on eip155:8453, scheme exact). MPP (tempo) is accepted here for $0 wallet proofs only.',
    '',
    '## Discovery',
    `- ${base}/openapi.json: full paid surface (OpenAPI 3.1). ?q= ranked search, ?path= and ?method= filters, ?page= (10 operations a page; follow info.x-next or the Link header)`,
    `- ${base}/services and ${base}/services/{slug}: catalog, price matrix, plans`,
    `- ${base}/manifest.json: live services, meters, plans, prices, free units (authoritative)`,
    `- ${base}/auth.md: registration recipe for plan access`,
    `- ${base}/advisor/agent/guide?goal=<text>: free guide for a goal; POST ${base}/advisor/agent/quote with a $0 wallet proof for a quote`,
    `- ${base}/llms-full.txt: every operation with its fields`,
    '',
    '## MCP',
    `- ${base}/mcp: every operation is also an MCP tool named by its operationId, with its input and output JSON schemas and its price (Streamable HTTP, stateless: POST JSON-RPC; tools/list, tools/call).`,
    `- Paid tools (x402 v2 MCP transport): a call without payment returns isError with the x402 PaymentRequired in structuredContent; retry the same call with the x402 PaymentPayload in params._meta["x402/payment"]${catalog.mppCharges ? ' (MPP: _meta["org.paymentauth/credential"])' : ''}; the settlement comes back in the result's _meta["x402/payment-response"].`,
    "- Plan tools use the MCP HTTP request's Authorization: Bearer <accessToken>; owner tools a SIGN-IN-WITH-X proof.",
    '',
    '## Services',
  ]
  for (const service of catalog.registry.services) {
    lines.push('', `### ${service.title} (\`${service.slug}\`, ${service.access})`, service.description)
    for (const entry of catalog.operationsOf(service.slug)) lines.push(operationLine(entry))
  }
  lines.push('', '## Paying', ...howToBuy({ access: 'payg' } as ServiceSpec, base, true, catalog.mppCharges).map((step) => `- ${step}`))
  lines.push('', '## Plans', ...howToBuy({ access: 'plan' } as ServiceSpec, base, true, catalog.mppCharges).map((step) => `- ${step}`), '', ...catalog.plans.map(planLine), '')
  return lines.join('\n')
}

function schemaFields(schema: unknown, indent = ''): string[] {
  const plain = JSON.parse(JSON.stringify(schema ?? {})) as Record<string, unknown>
  const properties = (plain.properties ?? {}) as Record<string, Record<string, unknown>>
  const required = new Set((plain.required as string[] | undefined) ?? [])
  return Object.entries(properties).map(([name, property]) => {
    const type = Array.isArray(property.enum) ? `enum ${property.enum.join('|')}` : String(property.type ?? (property.anyOf ? 'one of several shapes' : 'any'))
    const bounds = ['minimum', 'maximum', 'minLength', 'maxLength', 'minItems', 'maxItems', 'pattern', 'default']
      .filter((key) => property[key] !== undefined)
      .map((key) => `${key} ${JSON.stringify(property[key])}`)
    const description = typeof property.description === 'string' ? ` — ${property.description}` : ''
    return `${indent}- \`${name}\` (${type}${required.has(name) ? ', required' : ''}${bounds.length ? `; ${bounds.join(', ')}` : ''})${description}`
  })
}

export function llmsFullTxt(context: DocumentContext): string {
  const { catalog } = context
  const lines = [llmsTxt(context), '## Operations in full']
  for (const entry of catalog.operations) {
    const { spec } = entry
    lines.push('', `### ${spec.method} ${entry.serverUrl}${spec.path} (${spec.operationId})`, '', spec.description, '', `Price: ${priceLine(entry)}. Proof: ${spec.proof}.`)
    if (spec.schemas.params) lines.push('', 'Path parameters:', ...schemaFields(spec.schemas.params))
    if (spec.schemas.querystring) lines.push('', 'Query parameters:', ...schemaFields(spec.schemas.querystring))
    if (spec.schemas.headers) lines.push('', 'Headers:', ...schemaFields(spec.schemas.headers))
    if (spec.schemas.body) lines.push('', 'Body (JSON):', ...schemaFields(spec.schemas.body))
    const success = Object.keys(spec.schemas.response).filter((status) => Number(status) < 300)
    for (const status of success) lines.push('', `Response ${status}:`, ...schemaFields(spec.schemas.response[Number(status)]))
  }
  lines.push('')
  return lines.join('\n')
}

export function authMd(context: DocumentContext): string {
  const { catalog } = context
  const base = catalog.urls.gateway
  const planLines = catalog.plans.map(planLine)
  return [
    '# Agent Gateway: authentication',
    '',
    '## Pay per request (payg operations)',
    '',
    ...(catalog.mppCharges
      ? [
          'No registration. Call the operation; the 402 answer carries an x402 v2 `PAYMENT-REQUIRED` header, an x402 v1 JSON body and an MPP `WWW-Authenticate: Payment` challenge.',
          'Retry with `PAYMENT-SIGNATURE` (x402 v2), `X-PAYMENT` (x402 v1) or `Authorization: Payment` (MPP); send only one.',
        ]
      : [
          'No registration. Call the operation; the 402 answer carries an x402 v2 `PAYMENT-REQUIRED` header and an x402 v1 JSON body. MPP charges are not offered here (no Tempo RPC to verify them), so a priced 402 has no `WWW-Authenticate: Payment` challenge.',
          'Retry with `PAYMENT-SIGNATURE` (x402 v2) or `X-PAYMENT` (x402 v1); send only one.',
        ]),
    'To be recognised across calls (free included units of a claimed account), add `Svc-Agent-Authorization: Bearer <accessToken>`.',
    '',
    '## Plan access (plan operations)',
    '',
    '1. Register once, anonymously and free:',
    '',
    '```sh',
    `curl -s -X POST ${base}/auth/register`,
    '# → {"agentId":"agt_…","accessToken":"agw_…","tokenType":"Bearer"}',
    '```',
    '',
    `2. Buy a purchasable plan that covers the operation. The purchase answers a priced 402; pay it with x402 (send your token in \`Authorization: Bearer\` or \`Svc-Agent-Authorization: Bearer\`)${catalog.mppCharges ? ' or MPP (token in `Svc-Agent-Authorization: Bearer`, since the MPP proof occupies `Authorization`)' : ''}. A plan whose covered operations are all still unbuilt is not sold: its purchase answers 409 \`plan_unavailable\` before any 402.`,
    '',
    '```sh',
    `curl -s -X POST ${base}/plans/<planId>/purchase -H "Svc-Agent-Authorization: Bearer $TOKEN"   # 402 + challenge`,
    '```',
    '',
    ...planLines,
    '',
    '3. Call plan operations with `Authorization: Bearer <accessToken>`. Without a token: 401 `bearer_required`. Without a covering plan: 403 `plan_required`, whose body lists the plans that cover the call.',
    '',
    '## Scheduler and memory owners',
    '',
    'Owner operations take a free wallet proof: a CAIP-122 Sign-In-With-X message in the `SIGN-IN-WITH-X` header (the challenge comes in the 401 body at `extensions["sign-in-with-x"]`), or a $0 MPP proof. Scheduler account operations take an account API key as `Authorization: Bearer`. Scheduler tasks created on the marketplace rail (with a plan access token instead of a payment) belong to the plan holder, whose `Authorization: Bearer <accessToken>` is their owner proof.',
    '',
  ].join('\n')
}

/** llms.txt of one sibling service (scheduler, memory), served on its own listener. */
export function scopedLlmsTxt(catalog: Catalog, scope: 'scheduler' | 'memory'): string {
  const base = catalog.urls[scope]
  const title = scope === 'scheduler' ? 'Agent Gateway scheduler' : 'Agent Gateway memory'
  const lines = [
    `# ${title}`,
    '',
    `> Base URL ${base}. Operations, prices and proofs below; the full catalog is at ${catalog.urls.gateway}/llms.txt.`,
    '',
    '## Discovery',
    `- ${base}/openapi.json: this service's operations (OpenAPI 3.1; ?q=, ?path=, ?method=, ?page=)`,
    `- ${catalog.urls.gateway}/mcp: every operation below is also an MCP tool named by its operationId (Streamable HTTP; paid tools are paid in params._meta["x402/payment"])`,
    '',
    '## Operations',
    ...catalog.operationsOn(scope).map(operationLine),
    '',
    '## Proofs',
    catalog.mppCharges
      ? '- payment: answer the 402 with x402 (PAYMENT-SIGNATURE / X-PAYMENT) or MPP (Authorization: Payment).'
      : '- payment: answer the 402 with x402 (PAYMENT-SIGNATURE / X-PAYMENT); MPP charges are not offered here.',
    '- wallet: a CAIP-122 Sign-In-With-X message in the SIGN-IN-WITH-X header (challenge in the 401 body at extensions["sign-in-with-x"]) or a $0 MPP proof.',
    '- api-key: the account API key as Authorization: Bearer.',
    '- webhook-secret: the task webhook secret as Authorization: Bearer whsec_….',
    '',
  ]
  if (scope === 'scheduler') {
    const plans = catalog.registry.services.find((service) => service.slug === 'scheduler')?.plans.map((plan) => plan.id) ?? []
    lines.push(
      '## Billing rails',
      '- Direct rail: POST /api/v1/tasks pays max_amount_usdc_micros (X-Pay-Amount-Micros) as refundable USDC escrow; DELETE refunds max_amount minus cumulative cost on-chain; the ledger is authoritative.',
      `- Marketplace rail: POST /api/v1/tasks with Authorization: Bearer <accessToken> of an agent holding a plan that covers the scheduler (${plans.join(', ') || 'see /manifest.json'}; register and buy at ${catalog.urls.gateway}), no payment and no 402. ` +
        'max_amount_usdc_micros is a non-refundable lifetime cap; each run reports its cost as usage and is debited from the plan; the token is the owner proof of the task; fund raises the cap with the token; DELETE refunds nothing; ledger rows are audit-only.',
      '',
    )
  }
  return lines.join('\n')
}
