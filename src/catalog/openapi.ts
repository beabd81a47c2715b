// Generates OpenAPI 3.1 documents from the registry's route schemas. The same TypeBox schemas
// are handed to fastify for validation, so the document cannot drift from what the routes accept.
import type { TSchema } from '@sinclair/typebox'
import { X402_NETWORK_CAIP2, USDC_BASE_ADDRESS, MPP_METHOD, MPP_INTENT, MPP_CURRENCY } from './networks.ts'
import { formatUsd } from '../platform/money.ts'
import { componentNames, shareComponents, type ComponentNames, type JsonObject } from './components.ts'
import { ProblemSchema } from './schemas/common.ts'
import { ACCEPTED_PROTOCOLS, type OperationSpec, type PaymentProtocol, type ServerName, type ServiceSpec } from './types.ts'

export type ServerUrls = Record<ServerName, string>

/** An operation joined with what the catalog knows about it at run time. */
export interface CatalogOperation {
  spec: OperationSpec
  service: ServiceSpec
  serverUrl: string
  implemented: boolean
  paymentInfo: PaymentInfo
}

export interface PaymentInfo {
  access: 'payg' | 'plan'
  proof: OperationSpec['proof']
  pricing: OperationSpec['pricing']['kind']
  price: { amountMicros: string; amountUsd: string; currency: 'USD'; per: string } | null
  meter: string | null
  unit: string | null
  includedUnits: number
  protocols: string[]
  plans: string[]
  network?: string
  asset?: string
  mpp?: { method: string; intent: string; currency: string }
}

/**
 * The protocols that can prove an operation's access: x402 always; MPP for $0 wallet proofs
 * always (verified locally) and for priced calls only when MPP charges are offered (`mppCharges`:
 * the gateway has a Tempo RPC to verify and broadcast them).
 */
export function protocolsOf(operation: OperationSpec, mppCharges: boolean): PaymentProtocol[] {
  const paid = operation.pricing.kind !== 'free'
  if (operation.access !== 'payg' || !(paid || operation.proof === 'wallet')) return []
  return ACCEPTED_PROTOCOLS.filter((protocol) => protocol !== 'mpp' || mppCharges || (!paid && operation.proof === 'wallet'))
}

export function paymentInfoOf(operation: OperationSpec, service: ServiceSpec, mppCharges = false): PaymentInfo {
  const meter = service.meter
  const pricing = operation.pricing
  let price: PaymentInfo['price'] = null
  if ((pricing.kind === 'per-unit' || pricing.kind === 'plan-credit') && meter) {
    price = { amountMicros: meter.unitPriceMicros.toString(), amountUsd: formatUsd(meter.unitPriceMicros), currency: 'USD', per: meter.unit }
  } else if (pricing.kind === 'free') {
    price = { amountMicros: '0', amountUsd: formatUsd(0n), currency: 'USD', per: 'request' }
  }
  const info: PaymentInfo = {
    access: operation.access,
    proof: operation.proof,
    pricing: pricing.kind,
    price,
    meter: meter?.name ?? null,
    unit: meter?.unit ?? null,
    includedUnits: pricing.kind === 'per-unit' ? (meter?.includedUnits ?? 0) : 0,
    protocols: protocolsOf(operation, mppCharges),
    plans: service.plans.map((plan) => plan.id),
  }
  if (info.protocols.includes('x402')) {
    info.network = X402_NETWORK_CAIP2
    info.asset = USDC_BASE_ADDRESS
  }
  if (info.protocols.includes('mpp')) info.mpp = { method: MPP_METHOD, intent: MPP_INTENT, currency: MPP_CURRENCY }
  return info
}

const STATUS_TEXT: Record<number, string> = {
  200: 'OK',
  201: 'Created',
  202: 'Accepted',
  204: 'No content',
  400: 'Invalid request (problem+json names the field)',
  401: 'Credential required',
  402: 'Payment required: signed x402 / MPP challenge',
  403: 'Not allowed (no covering plan)',
  404: 'Not found',
  409: 'Conflict',
  410: 'Gone',
  413: 'Body too large',
  415: 'Unsupported content type',
  429: 'Too many requests',
  501: 'Not implemented yet',
}

/** JSON-Schema copy without TypeBox's symbol keys and with bigint-free values. */
export function plainSchema(schema: TSchema): Record<string, unknown> {
  return JSON.parse(JSON.stringify(schema)) as Record<string, unknown>
}

function parametersOf(schema: TSchema | undefined, location: 'path' | 'query' | 'header'): unknown[] {
  if (!schema) return []
  const plain = plainSchema(schema)
  const properties = (plain.properties ?? {}) as Record<string, Record<string, unknown>>
  const required = new Set((plain.required as string[] | undefined) ?? [])
  return Object.entries(properties).map(([name, property]) => {
    const { description, ...rest } = property
    const parameter: Record<string, unknown> = {
      name,
      in: location,
      required: location === 'path' ? true : required.has(name),
      schema: rest,
    }
    if (typeof description === 'string') parameter.description = description
    return parameter
  })
}

function securityOf(operation: OperationSpec, mppCharges: boolean): Record<string, string[]>[] {
  switch (operation.proof) {
    case 'payment':
      // MPP charges only where offered (a Tempo RPC is configured); x402 always.
      return mppCharges ? [{ x402: [] }, { mpp: [] }] : [{ x402: [] }]
    case 'wallet':
      // Owner endpoints take proofs bound to the request (SIWX: method and URL; MPP: route); a $0
      // x402 authorization binds neither, so only the gateway's free wallet operations take it.
      return operation.server === 'gateway' ? [{ x402: [] }, { mpp: [] }] : [{ siwx: [] }, { mpp: [] }]
    case 'plan-bearer':
    case 'agent-bearer':
      return [{ planAccess: [] }]
    case 'api-key':
      return [{ accountKey: [] }]
    case 'webhook-secret':
      return [{ webhookSecret: [] }]
    case 'none':
      return []
  }
}

export function operationObject(entry: CatalogOperation): Record<string, unknown> {
  const { spec } = entry
  const responses: Record<string, unknown> = {}
  for (const [status, schema] of Object.entries(spec.schemas.response)) {
    const code = Number(status)
    const isProblem = code >= 400
    responses[status] = {
      description: STATUS_TEXT[code] ?? `HTTP ${code}`,
      content: { [isProblem ? 'application/problem+json' : 'application/json']: { schema: plainSchema(schema) } },
    }
  }
  const problemCodes = [400, ...(spec.proof === 'payment' ? [402] : []), ...(spec.proof === 'plan-bearer' ? [401, 403] : [])]
  if (!entry.implemented) problemCodes.push(501)
  for (const code of problemCodes) {
    responses[String(code)] ??= {
      description: STATUS_TEXT[code],
      content: { 'application/problem+json': { schema: plainSchema(ProblemSchema) } },
    }
  }
  const operation: Record<string, unknown> = {
    operationId: spec.operationId,
    summary: spec.summary,
    description: entry.implemented ? spec.description : `${spec.description}\n\nNot implemented yet: this operation answers 501.`,
    tags: spec.tags,
    parameters: [...parametersOf(spec.schemas.params, 'path'), ...parametersOf(spec.schemas.querystring, 'query'), ...parametersOf(spec.schemas.headers, 'header')],
    responses,
    security: securityOf(spec, entry.paymentInfo.protocols.includes('mpp')),
    'x-service': spec.service,
    'x-payment-info': entry.paymentInfo,
    'x-implemented': entry.implemented,
  }
  if (spec.schemas.body) {
    operation.requestBody = { required: true, content: { 'application/json': { schema: plainSchema(spec.schemas.body) } } }
  }
  if (entry.spec.server !== 'gateway') operation.servers = [{ url: entry.serverUrl, description: `${entry.spec.server} service` }]
  return operation
}

export const securitySchemes = {
  x402: {
    type: 'apiKey',
    in: 'header',
    name: 'PAYMENT-SIGNATURE',
    description: 'x402 v2 payment proof (base64 JSON) answering the PAYMENT-REQUIRED challenge; x402 v1 clients send X-PAYMENT.',
  },
  mpp: { type: 'http', scheme: 'Payment', description: 'MPP credential (`Authorization: Payment …`) answering `WWW-Authenticate: Payment`.' },
  planAccess: { type: 'http', scheme: 'bearer', description: 'Access token from POST /auth/register with an active plan.' },
  siwx: { type: 'apiKey', in: 'header', name: 'SIGN-IN-WITH-X', description: 'CAIP-122 Sign-In-With-X wallet proof (free owner operations).' },
  accountKey: { type: 'http', scheme: 'bearer', description: 'Scheduler account API key.' },
  webhookSecret: { type: 'http', scheme: 'bearer', description: 'Task webhook secret (whsec_…).' },
}

export interface DocumentOptions {
  title: string
  description: string
  serverUrl: string
  info?: Record<string, unknown>
}

/** Component names shared by every document of a registry (see components.ts). */
export function registryComponentNames(operations: readonly CatalogOperation[]): ComponentNames {
  return componentNames(
    operations.map((entry) => ({ operationId: entry.spec.operationId, operation: operationObject(entry) as JsonObject })),
    plainSchema(ProblemSchema) as JsonObject,
  )
}

/**
 * An OpenAPI 3.1.0 document holding exactly `operations`, in their order. Schemas and responses
 * used more than once in the document are written once, under components, and referenced.
 */
export function openapiDocument(operations: readonly CatalogOperation[], options: DocumentOptions & { names: ComponentNames }): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {}
  const tags = new Map<string, string>()
  const objects: { operationId: string; operation: JsonObject }[] = []
  for (const entry of operations) {
    const item = (paths[entry.spec.path] ??= {})
    const operation = operationObject(entry) as JsonObject
    objects.push({ operationId: entry.spec.operationId, operation })
    item[entry.spec.method.toLowerCase()] = operation
    for (const tag of entry.spec.tags) if (!tags.has(tag)) tags.set(tag, entry.service.title)
  }
  const shared = shareComponents(objects, options.names)
  const components: Record<string, unknown> = { securitySchemes }
  if (Object.keys(shared.responses).length > 0) components.responses = shared.responses
  if (Object.keys(shared.schemas).length > 0) components.schemas = shared.schemas
  return {
    openapi: '3.1.0',
    info: { title: options.title, version: '1.0.0', description: options.description, ...options.info },
    servers: [{ url: options.serverUrl }],
    tags: [...tags.keys()].map((name) => ({ name })),
    paths,
    components,
  }
}
