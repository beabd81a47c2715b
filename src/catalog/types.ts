// The declarative service registry: one source for routes (fastify schemas), /openapi.json,
// /manifest.json, /services, llms.txt and the payment guard's prices. Nothing here does I/O.
import type { TSchema } from '@sinclair/typebox'

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'
export const HTTP_METHODS: readonly HttpMethod[] = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE']

/** Which listener serves the operation. Each has its own public base URL. */
export type ServerName = 'gateway' | 'scheduler' | 'memory'

/** SPEC x-payment-info.access. */
export type AccessMode = 'payg' | 'plan'

/** What the caller must present. `payment` = x402/MPP proof answering a 402. */
export type ProofKind =
  | 'none'
  | 'payment' // x402 / MPP proof answering a priced 402
  | 'wallet' // free wallet proof (SIWX or a $0 x402/MPP proof) identifying the owner
  | 'plan-bearer' // Authorization: Bearer <access token> with a covering plan
  | 'agent-bearer' // Authorization: Bearer <access token>, free (agent self-service)
  | 'api-key' // scheduler account API key
  | 'webhook-secret' // Authorization: Bearer whsec_…

export type PaymentProtocol = 'x402' | 'mpp'

/** How the price of one call is found. Money is integer micros (1 USD = 1,000,000). */
export type Pricing =
  | { kind: 'free' }
  /**
   * unitPrice × units; units read from a body field (default 1), or counted from a text field as
   * started blocks of `perCharacters` characters (Unicode code points), at least 1.
   */
  | { kind: 'per-unit'; unitsFromBody?: string; defaultUnits?: number; maxUnits?: number; unitsFromText?: { field: string; perCharacters: number } }
  /** The caller names the amount in a header (scheduler escrow, memory deposits). */
  | { kind: 'amount-header'; header: string }
  /** Debited from a plan's credit per call; never answers 402. */
  | { kind: 'plan-credit' }
  /** The price of the plan named in the path (`/plans/{planId}/purchase`), from its PlanSpec. */
  | { kind: 'plan-price' }

export interface Meter {
  /** Meter name in usage reports (SPEC "Meter / unit"), e.g. `songs`. */
  name: string
  unit: string
  unitPriceMicros: bigint
  /** Free units per claimed account (SPEC 5). */
  includedUnits: number
}

export interface OperationSchemas {
  body?: TSchema
  querystring?: TSchema
  params?: TSchema
  headers?: TSchema
  /** Status → schema. Problem responses are added by the catalog; list only the success bodies and documented codes. */
  response: Record<number, TSchema>
}

export interface OperationSpec {
  operationId: string
  /** Service slug this operation is billed under. */
  service: string
  server: ServerName
  method: HttpMethod
  /** OpenAPI style path (`/api/v1/tasks/{id}`). */
  path: string
  summary: string
  description: string
  tags: string[]
  access: AccessMode
  proof: ProofKind
  pricing: Pricing
  schemas: OperationSchemas
  /** The route's body limit, when it is not the listener's (BODY_LIMIT_BYTES): larger bodies answer 413. */
  bodyLimitBytes?: number
  /** Extra words that help the catalog search find this operation (never shown as text). */
  keywords?: string[]
}

export type PlanKind = 'credit' | 'subscription'

export interface PlanSpec {
  id: string
  kind: PlanKind
  title: string
  description: string
  priceMicros: bigint
  /** credit: prepaid credit in micros, debited per call at the meter price. */
  creditMicros?: bigint
  /** subscription: period length and calls included per period. */
  periodDays?: number
  callsPerPeriod?: number
  /** Service slugs the plan covers. */
  covers: string[]
}

export interface ServiceSpec {
  slug: string
  title: string
  description: string
  server: ServerName
  access: AccessMode
  meter?: Meter
  plans: PlanSpec[]
  operations: OperationSpec[]
}

export interface Registry {
  services: ServiceSpec[]
}

export const ACCEPTED_PROTOCOLS: readonly PaymentProtocol[] = ['x402', 'mpp']
