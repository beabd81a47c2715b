// x402 402-challenge: one PriceQuote → the v2 `PAYMENT-REQUIRED` header and the v1 JSON body.
// The requirements builders are exported so verification compares a proof against exactly the
// objects the challenge advertised (the x402 v2 and v1 PaymentRequirements shapes).
import type { PaymentRequired, PaymentRequirements, ResourceInfo } from '@x402/core/types'
import type { PaymentRequirementsV1 } from '@x402/core/types/v1'
import { declarePaymentIdentifierExtension, PAYMENT_IDENTIFIER } from '@x402/extensions/payment-identifier'
import { USDC_BASE_ADDRESS, USDC_EIP712, X402_NETWORK_CAIP2, X402_NETWORK_V1 } from '../networks.ts'
import type { ChallengeParts, PriceQuote } from '../types.ts'
import { BAZAAR_KEY, bazaarFor, bazaarOutputSchemaV1 } from './bazaar.ts'
import { encodeHeaderJson } from './header-json.ts'
import { OFFER_RECEIPT_KEY, type OfferReceiptSigner } from './offer-receipt.ts'

export const X402_DEFAULT_MAX_TIMEOUT_SECONDS = 300
export const X402_MIME_TYPE = 'application/json'
export const X402_DEFAULT_ERROR = 'Payment required'
export const PAYMENT_REQUIRED_HEADER = 'PAYMENT-REQUIRED'

export interface X402ChallengeOptions {
  /** Lifetime the client signs for (`validBefore = now + maxTimeoutSeconds`). Default 300. */
  maxTimeoutSeconds?: number
  /** `error` string of both challenges. Default "Payment required". */
  error?: string
  /** v1 only: `outputSchema` of the accepts entry (x402 v1 discovery). Default: derived from the quote's bazaar declaration, if any. */
  outputSchema?: Record<string, unknown>
  /** Signs the `offer-receipt` offers of the v2 challenge (absent: no offer-receipt declared). */
  offerReceipt?: OfferReceiptSigner | undefined
}

// Static, so built once: payment-identifier is optional here (see payment-identifier.ts).
const PAYMENT_IDENTIFIER_DECLARATION = declarePaymentIdentifierExtension(false)

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
  // optional, and the reference v1 body places it between asset and extra. It is v1's bazaar slot.
  const outputSchema = options.outputSchema ?? (quote.discovery ? bazaarOutputSchemaV1(quote.discovery) : undefined)
  return (outputSchema ? { ...base, outputSchema, extra } : { ...base, extra }) as PaymentRequirementsV1
}

/** The decoded v2 `PAYMENT-REQUIRED` object. */
export function x402PaymentRequiredV2(quote: PriceQuote, options: X402ChallengeOptions = {}): PaymentRequired {
  const accepts = [x402RequirementsV2(quote, options)]
  const resource: ResourceInfo = { url: quote.resourceUrl, description: quote.description, mimeType: X402_MIME_TYPE }
  const extensions: Record<string, unknown> = {}
  if (quote.discovery) {
    // bazaar: how to call the operation, and the service metadata facilitators list it under.
    if (quote.discovery.serviceName) resource.serviceName = quote.discovery.serviceName
    if (quote.discovery.tags) resource.tags = quote.discovery.tags
    extensions[BAZAAR_KEY] = bazaarFor(quote.discovery, quote.pathParams)
  }
  // A $0 proof (advisor quote, owner identity) is single-use and never charged: nothing to dedupe.
  if (quote.amountMicros > 0n) extensions[PAYMENT_IDENTIFIER] = PAYMENT_IDENTIFIER_DECLARATION
  if (options.offerReceipt) extensions[OFFER_RECEIPT_KEY] = options.offerReceipt.offers(quote.resourceUrl, accepts)
  return { x402Version: 2, error: options.error ?? X402_DEFAULT_ERROR, resource, accepts, extensions }
}

/**
 * Both x402 challenges for one unpaid call: `headers['PAYMENT-REQUIRED']` (v2, base64 JSON exactly
 * as `encodePaymentRequiredHeader` makes it) and `body` = the v1 `{x402Version:1, error, accepts}`.
 * The caller adds `Cache-Control: no-store` and the other protocols' headers.
 */
export function x402Challenge(quote: PriceQuote, options: X402ChallengeOptions = {}): ChallengeParts {
  const error = options.error ?? X402_DEFAULT_ERROR
  return {
    headers: { [PAYMENT_REQUIRED_HEADER]: encodeHeaderJson(x402PaymentRequiredV2(quote, options)) },
    body: { x402Version: 1, error, accepts: [x402RequirementsV1(quote, options)] },
  }
}
