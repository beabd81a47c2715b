// Card purchase of plans: the port is designed, the adapter is disabled. SPEC lets plans be
// "settled by x402, MPP or card"; a card processor (e.g. Stripe Checkout) needs an account,
// webhooks and a public callback URL, none of which this deployment has. See docs/payments.md.
import type { PlanSpec } from '../catalog/types.ts'

export interface CardCheckout {
  /** Where the human pays (hosted checkout page). */
  checkoutUrl: string
  /** Processor session id, stored with the pending purchase. */
  sessionId: string
  expiresAt: Date
}

export interface CardPaymentPort {
  readonly enabled: boolean
  /** Starts a hosted checkout for `plan`, bought by `agentId`. */
  createCheckout(input: { plan: PlanSpec; agentId: string; successUrl: string; cancelUrl: string }): Promise<CardCheckout>
  /**
   * Verifies a processor webhook (signature over the raw body) and returns the completed session,
   * which activates the plan exactly once (the session id is the purchase's replay key).
   */
  verifyWebhook(rawBody: Buffer, signatureHeader: string): Promise<{ sessionId: string; agentId: string; planId: string; amountMicros: bigint } | undefined>
}

/** The adapter every deployment has today: no card processor configured. */
export const disabledCardPayments: CardPaymentPort = {
  enabled: false,
  async createCheckout() {
    throw new Error('card payments are not enabled in this deployment')
  },
  async verifyWebhook() {
    return undefined
  },
}
