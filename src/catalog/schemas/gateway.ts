// Gateway plumbing: the free seller advisor, plan purchase and anonymous registration
// (SPEC "Advisor and plan purchase", "Authentication"; payloads "not shown" there are designed here).
import { Type } from '@sinclair/typebox'
import { MicrosInput, MicrosString, Nullable, StringEnum, Timestamp } from './common.ts'

const Goal = Type.String({ minLength: 1, maxLength: 2000, description: 'What you want done, in plain words' })
const Requirements = Type.Array(Type.String({ minLength: 1, maxLength: 500 }), {
  maxItems: 20,
  description: 'Known requirements or constraints, e.g. "wav output" or "hourly"',
})

export const GuideQuery = Type.Object(
  {
    goal: Goal,
    budgetMicros: Type.Optional(Type.String({ pattern: '^(0|[1-9][0-9]{0,18})$', description: 'Budget per call in integer micros (1 USD = 1,000,000)' })),
  },
  { additionalProperties: false },
)

export const GuideRequest = Type.Object(
  {
    goal: Goal,
    budgetMicros: Type.Optional(MicrosInput({ description: 'Budget per call in integer micros, JSON integer or digit string' })),
    requirements: Type.Optional(Requirements),
  },
  { additionalProperties: false },
)

export const GuideRecommendation = Type.Object(
  {
    service: Type.String({ description: 'Service slug' }),
    operationId: Type.String(),
    method: Type.String(),
    url: Type.String(),
    summary: Type.String(),
    access: StringEnum(['payg', 'plan'] as const),
    price: Nullable(
      Type.Object(
        { amountMicros: MicrosString(), amountUsd: Type.String(), per: Type.String({ description: 'Billing unit, e.g. song or request' }) },
        { additionalProperties: false },
      ),
      { description: 'Unit price; null when the caller names the amount (escrow, deposits, plan purchases)' },
    ),
    includedUnits: Type.Integer({ minimum: 0, description: 'Free units per claimed account' }),
    howToPay: Type.String(),
    score: Type.Number({ minimum: 0, maximum: 1, description: 'Relevance, best first' }),
    withinBudget: Nullable(Type.Boolean(), { description: 'null when no budget was given or the price is not fixed' }),
    implemented: Type.Boolean({ description: 'Always true: only built operations are recommended' }),
  },
  { additionalProperties: false },
)

export const GuideUnavailable = Type.Object(
  {
    service: Type.String({ description: 'Service slug' }),
    operationId: Type.String(),
    summary: Type.String(),
    reason: Type.String(),
  },
  { additionalProperties: false, description: 'An operation that matches the goal but is not built yet: it answers 501 and nothing is sold for it' },
)

export const GuideMcp = Type.Object(
  {
    url: Type.String({ description: 'The MCP endpoint: POST JSON-RPC, Streamable HTTP, stateless' }),
    transport: StringEnum(['streamable-http'] as const),
    tool: Nullable(Type.String(), { description: 'The tool of the best recommendation (tools are named by operationId); null when nothing is recommended' }),
    howToPay: Type.String(),
  },
  { additionalProperties: false, description: 'Every operation is also an MCP tool at this endpoint' },
)

export const Guide = Type.Object(
  {
    goal: Type.String(),
    recommendations: Type.Array(GuideRecommendation, { maxItems: 10, description: 'Built operations only, best first' }),
    unavailable: Type.Array(GuideUnavailable, { maxItems: 10, description: 'Matches of the goal that are not built yet; never recommended' }),
    steps: Type.Array(Type.String()),
    notes: Type.Array(Type.String()),
    mcp: GuideMcp,
  },
  { additionalProperties: false },
)

export const PlanIdParams = Type.Object(
  {
    planId: Type.String({
      minLength: 1,
      maxLength: 64,
      pattern: '^[a-z0-9][a-z0-9-]*$',
      description: 'Plan id, e.g. scheduler-credit-5 (see /manifest.json: only plans with purchasable: true are sold)',
    }),
  },
  { additionalProperties: false },
)

export const PlanPurchase = Type.Object(
  {
    planId: Type.String(),
    agentId: Type.String(),
    status: StringEnum(['active', 'pending'] as const, {
      description:
        'active: the payment settled and the plan is usable; pending: the settlement is not confirmed yet (X-Payment-Status: pending), the plan becomes usable when it is and is cancelled if it fails',
    }),
    kind: Type.Optional(StringEnum(['credit', 'subscription'] as const)),
    creditMicros: Type.Optional(MicrosString({ description: 'Remaining prepaid credit (credit plans)' })),
    expiresAt: Type.Optional(Timestamp),
    callsRemaining: Type.Optional(Type.Integer({ minimum: 0, description: 'Calls left in the current period (subscriptions)' })),
  },
  { additionalProperties: false },
)

export const Registration = Type.Object(
  {
    agentId: Type.String(),
    accessToken: Type.String({ description: 'Send as Authorization: Bearer <accessToken>; shown once' }),
    tokenType: Type.Literal('Bearer'),
  },
  { additionalProperties: false },
)

export const ClaimStartRequest = Type.Object(
  { email: Type.String({ format: 'email', minLength: 3, maxLength: 254, description: 'Address of the human claiming the agent' }) },
  { additionalProperties: false },
)

export const ClaimStarted = Type.Object(
  {
    agentId: Type.String(),
    email: Type.String(),
    expiresAt: Timestamp,
    delivery: StringEnum(['sent'] as const),
  },
  { additionalProperties: false },
)

export const ClaimVerifyRequest = Type.Object(
  { code: Type.String({ minLength: 16, maxLength: 200, pattern: '^[A-Za-z0-9_-]+$', description: 'The code from the verification e-mail' }) },
  { additionalProperties: false },
)

export const ClaimVerified = Type.Object(
  {
    agentId: Type.String(),
    claimedEmail: Type.String(),
    includedUnits: Type.Array(
      Type.Object(
        { service: Type.String(), meter: Type.String(), unit: Type.String(), included: Type.Integer({ minimum: 0 }), left: Type.Integer({ minimum: 0 }) },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
)
