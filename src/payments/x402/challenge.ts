// x402 402-challenge: one PriceQuote → the v2 `PAYMENT-REQUIRED` header and the v1 JSON body.
// The requirements builders are exported so verification compares a proof against exactly the
// objects the challenge advertised (the x402 v2 and v1 PaymentRequirements shapes).
import { encodePaymentRequiredHeader } from '@x402/core/http'
import type { PaymentRequired, PaymentRequirements } from '@x402/core/types'
import type { PaymentRequirementsV1 } from '@x402/core/types/v1'
import { USDC_BASE_ADDRESS, USDC_EIP712, X402_NETWORK_CAIP2, X402_NETWORK_V1 } from '../networks.ts'
import type { ChallengeParts, PriceQuote } from '../types.ts'

export const X402_DEFAULT_MAX_TIMEOUT_SECONDS = 300
export const X402_MIME_TYPE = 'application/json'
export const X402_DEFAULT_ERROR = 'Payment required'
export const PAYMENT_REQUIRED_HEADER = 'PAYMENT-REQUIRED'

export interface X402ChallengeOptions {
  /** Lifetime the client signs for (`validBefore = now + maxTimeoutSeconds`). Default 300. */
  maxTimeoutSeconds?: number
  /** `error` string of both challenges. Default "Payment required". */
  error?: string
  /** v1 only: `outputSchema` of the accepts entry (x402 v1 discovery). Omitted when absent. */
  outputSchema?: Record<string, unknown>
}

function timeoutOf(options: X402ChallengeOptions): number {
  const s = options.maxTimeoutSeconds ?? X402_DEFAULT_MAX_TIMEOUT_SECONDS
  if (!Number.isSafeInteger(s) || s <= 0) throw new RangeError(`maxTimeoutSeconds must be a positive integer, got ${s}`)
  return s
}

function amountOf(quote: PriceQuote): string {
  if (typeof quote.amountMicros !== 'bigint' || quote.amountMicros < 0n) {
    throw new RangeError(`amountMicros must be a non-negative bigint, got ${String(quote.amountMicros)}`)
  }
  return quote.amountMicros.toString()
}

/** The single v2 `accepts[]` entry; a v2 proof's `accepted` must match it. */
export function x402RequirementsV2(quote: PriceQuote, options: X402ChallengeOptions = {}): PaymentRequirements {
  return {
    scheme: 'exact',
    network: X402_NETWORK_CAIP2,
    amount: amountOf(quote),
    asset: USDC_BASE_ADDRESS,
    payTo: quote.payTo,
    maxTimeoutSeconds: timeoutOf(options),
    extra: { name: USDC_EIP712.name, version: USDC_EIP712.version },
  }
}

/** The single v1 `accepts[]` entry (v1 proofs carry no copy of it; they are bound by amount/payee). */
export function x402RequirementsV1(quote: PriceQuote, options: X402ChallengeOptions = {}): PaymentRequirementsV1 {
  const base = {
    scheme: 'exact',
    network: X402_NETWORK_V1,
    maxAmountRequired: amountOf(quote),
    resource: quote.resourceUrl,
    description: quote.description,
    mimeType: X402_MIME_TYPE,
    payTo: quote.payTo,
    maxTimeoutSeconds: timeoutOf(options),
    asset: USDC_BASE_ADDRESS,
  }
  const extra = { name: USDC_EIP712.name, version: USDC_EIP712.version }
  // The SDK type marks outputSchema required; the wire schema (PaymentRequirementsV1Schema) has it
  // optional, and the reference v1 body places it between asset and extra.
  return (options.outputSchema ? { ...base, outputSchema: options.outputSchema, extra } : { ...base, extra }) as PaymentRequirementsV1
}

/** The decoded v2 `PAYMENT-REQUIRED` object. */
export function x402PaymentRequiredV2(quote: PriceQuote, options: X402ChallengeOptions = {}): PaymentRequired {
  return {
    x402Version: 2,
    error: options.error ?? X402_DEFAULT_ERROR,
    resource: { url: quote.resourceUrl, description: quote.description, mimeType: X402_MIME_TYPE },
    accepts: [x402RequirementsV2(quote, options)],
    extensions: {},
  }
}

/**
 * Both x402 challenges for one unpaid call: `headers['PAYMENT-REQUIRED']` (v2, base64 JSON exactly
 * as `encodePaymentRequiredHeader` makes it) and `body` = the v1 `{x402Version:1, error, accepts}`.
 * The caller adds `Cache-Control: no-store` and the other protocols' headers.
 */
export function x402Challenge(quote: PriceQuote, options: X402ChallengeOptions = {}): ChallengeParts {
  const error = options.error ?? X402_DEFAULT_ERROR
  return {
    headers: { [PAYMENT_REQUIRED_HEADER]: encodePaymentRequiredHeader(x402PaymentRequiredV2(quote, options)) },
    body: { x402Version: 1, error, accepts: [x402RequirementsV1(quote, options)] },
  }
}
