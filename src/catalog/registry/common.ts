// Wording and schemas shared by the services of the registry: how to pay per call (PAYG_HOW), how to
// reach a plan-access operation (PLAN_HOW) and the problem+json error schema.
import { ProblemSchema } from '../schemas/common.ts'
import type { ServiceSpec } from '../types.ts'

export const PAYG_HOW =
  'How to pay: call without payment to get 402 Payment Required with a signed challenge (x402 v2 PAYMENT-REQUIRED header, x402 v1 JSON body; plus an MPP WWW-Authenticate: Payment challenge where this gateway offers MPP charges, i.e. x-payment-info.protocols lists mpp). ' +
  'Settle it with x402 (USDC on eip155:8453, scheme exact; retry with the PAYMENT-SIGNATURE header, or X-PAYMENT for x402 v1) or, where offered, with MPP (method tempo, intent charge, currency USD; retry with Authorization: Payment), ' +
  'sending exactly one proof. No account and no upstream API key are needed; you are charged only when the work succeeds. ' +
  'Optional: add Svc-Agent-Authorization: Bearer <accessToken> (from POST /auth/register) to be recognised across calls.'

export const PLAN_HOW =
  'Access: plan; this operation never answers 402. How to get access: (1) POST /auth/register once (free, no body) for {agentId, accessToken}; ' +
  '(2) buy a covering plan with POST /plans/{planId}/purchase, which answers a priced 402 settled by x402 or, where offered, MPP (send your token in Svc-Agent-Authorization: Bearer); ' +
  '(3) call with Authorization: Bearer <accessToken>. Without a token: 401 bearer_required with a registration recipe. Without a covering plan: 403 plan_required listing the plans that cover the call.'

export const problem = ProblemSchema

/**
 * A service of the registry with its literal type kept (operation ids, schemas): the handler of
 * each operation is typed from the schemas its route validates with (Handler in ../routes.ts).
 */
export function defineService<const S extends ServiceSpec>(service: S): S {
  return service
}
