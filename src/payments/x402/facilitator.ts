// x402 facilitator mode: proofs are verified and settled by an x402 facilitator over HTTP
// (`@x402/core`'s HTTPFacilitatorClient: POST /verify, POST /settle, GET /supported) instead of our
// own wallet. The guard's order is unchanged (verify → reserve → bind work → settling marker →
// settle); only who broadcasts changes. The facilitator's word decides nothing about money on its
// own: a settle whose answer is lost (timeout, 5xx, connection cut) is no verdict and is left to the
// chain (the authorization's nonce, read through CHAIN_RPC_URL), and every "settled" it reports is
// confirmed from the chain by the confirmation sweep like one of ours.
import { HTTPFacilitatorClient } from '@x402/core/http'
import type { FacilitatorClient } from '@x402/core/http'
import type { PaymentPayload, PaymentRequirements, SettleResponse, SupportedResponse } from '@x402/core/types'
import { SettleError, VerifyError } from '@x402/core/types'
import type { SettlementResult } from '../chain/index.ts'
import { X402_NETWORK_CAIP2, X402_NETWORK_V1 } from '../networks.ts'
import { PaymentRejected, type Hex, type PriceQuote, type RejectReason } from '../types.ts'
import { x402RequirementsV1, x402RequirementsV2 } from './challenge.ts'
import type { X402Proof } from './decode.ts'

/** What a paid proof is sent to the facilitator as (the body of /verify and /settle, less x402Version). */
export interface FacilitatorRequest {
  paymentPayload: PaymentPayload
  paymentRequirements: PaymentRequirements
}

export interface X402Facilitator {
  readonly url: string
  /** Throws PaymentRejected when the facilitator refuses the proof; any other error: it could not be asked. */
  verify(request: FacilitatorRequest): Promise<void>
  /**
   * One /settle call. `confirmed`: the facilitator reports the transaction mined; `pending`: it
   * broadcast and did not see the receipt (`settlement_pending`); `failed`: it answered that it did
   * not settle. Throws when the answer is lost (timeout, 5xx, connection cut, a malformed answer):
   * the outcome is unknown.
   */
  settle(request: FacilitatorRequest): Promise<SettlementResult>
  /** Whether the facilitator lists the kinds we sell (x402 v2 exact on Base, v1 exact on base); the missing ones. */
  missingKinds(): Promise<string[]>
}

export interface FacilitatorOptions {
  url: string
  /** Sent with every call (/verify, /settle, /supported and the bazaar listing): a hosted facilitator's API key. */
  headers?: Record<string, string> | undefined
  /** Per call; default 30 000 ms. A /settle that times out is left pending, never failed. */
  timeoutMs?: number | undefined
  /** A client to use instead of the HTTP one (tests). */
  client?: FacilitatorClient
}

const TX_HASH_RE = /^0x[0-9a-fA-F]{64}$/

/** The facilitator request for a proof that passed local verification, with our own requirements (not the client's copy). */
export function facilitatorRequest(proof: X402Proof, quote: PriceQuote, maxTimeoutSeconds: number): FacilitatorRequest {
  const paymentRequirements =
    proof.version === 2 ? x402RequirementsV2(quote, { maxTimeoutSeconds }) : (x402RequirementsV1(quote, { maxTimeoutSeconds }) as unknown as PaymentRequirements)
  return { paymentPayload: proof.payload as PaymentPayload, paymentRequirements }
}

/** The request as kept in the reservation's detail for a later /settle: extensions and v1 discovery left out (they move no money). */
export function storedRequest(request: FacilitatorRequest): string {
  const { extensions: _extensions, ...paymentPayload } = request.paymentPayload as PaymentPayload & { extensions?: unknown }
  const { outputSchema: _outputSchema, ...paymentRequirements } = request.paymentRequirements as PaymentRequirements & { outputSchema?: unknown }
  return JSON.stringify({ paymentPayload, paymentRequirements })
}

/** The stored request of a reservation's detail, if it has one (a row settled by our own wallet has none). */
export function requestOf(detail: Record<string, unknown>): FacilitatorRequest | undefined {
  if (typeof detail.facilitatorRequest !== 'string') return undefined
  try {
    return JSON.parse(detail.facilitatorRequest) as FacilitatorRequest
  } catch {
    return undefined
  }
}

/**
 * A facilitator's invalidReason (`invalid_exact_evm_insufficient_balance`, …) as our reason. A
 * failed simulation says why only in its message (the token's revert reason).
 */
export function rejectReasonOf(invalidReason: string | undefined, invalidMessage?: string): RejectReason {
  if (/simulation/i.test(invalidReason ?? '') && /exceeds balance|insufficient/i.test(invalidMessage ?? '')) return 'insufficient_funds'
  const reason = (invalidReason ?? '').toLowerCase()
  const rules: [RegExp, RejectReason][] = [
    [/insufficient|balance/, 'insufficient_funds'],
    [/nonce/, 'nonce_already_used'],
    [/valid_?before|expired/, 'expired'],
    [/valid_?after/, 'not_yet_valid'],
    [/signature/, 'invalid_signature'],
    [/recipient|pay_?to|receiver/, 'wrong_payee'],
    [/amount|value/, 'wrong_amount'],
    [/network|chain/, 'wrong_network'],
    [/asset|token|eip712_domain|name_mismatch|version_mismatch/, 'wrong_asset'],
    [/scheme/, 'unsupported_scheme'],
  ]
  return rules.find(([pattern]) => pattern.test(reason))?.[1] ?? 'invalid_signature'
}

function settleResult(answer: SettleResponse): SettlementResult {
  const transaction = TX_HASH_RE.test(answer.transaction) ? (answer.transaction.toLowerCase() as Hex) : undefined
  if (answer.success) {
    // "Settled" without a transaction cannot be checked against the chain: the nonce decides later.
    if (transaction === undefined) throw new Error('the facilitator reported a settlement without a transaction hash')
    return { status: 'confirmed', txHash: transaction, blockNumber: 0n }
  }
  // The official facilitator's answer when it broadcast but did not see the receipt in time.
  if (answer.errorReason === 'settlement_pending') {
    if (transaction === undefined) throw new Error('the facilitator reported a pending settlement without a transaction hash')
    return { status: 'pending', txHash: transaction }
  }
  const reason = `facilitator: ${answer.errorReason ?? 'settlement failed'}${answer.errorMessage ? ` (${answer.errorMessage})` : ''}`
  return transaction === undefined ? { status: 'failed', reason } : { status: 'failed', reason, txHash: transaction }
}

export function createFacilitator(options: FacilitatorOptions): X402Facilitator {
  const headers = options.headers ?? {}
  const client: FacilitatorClient =
    options.client ??
    new HTTPFacilitatorClient({
      url: options.url,
      timeoutMs: options.timeoutMs ?? 30_000,
      // The client wants them per path; a hosted facilitator takes the same key on each.
      ...(Object.keys(headers).length > 0 ? { createAuthHeaders: async () => ({ verify: headers, settle: headers, supported: headers, bazaar: headers }) } : {}),
    })
  return {
    url: options.url,
    async verify({ paymentPayload, paymentRequirements }) {
      let answer: { isValid: boolean; invalidReason?: string | undefined; invalidMessage?: string | undefined }
      try {
        answer = await client.verify(paymentPayload, paymentRequirements)
      } catch (error) {
        // A refusal sent with an error status is still a refusal; anything else: not asked.
        if (!(error instanceof VerifyError)) throw error
        answer = { isValid: false, invalidReason: error.invalidReason, invalidMessage: error.invalidMessage }
      }
      if (answer.isValid) return
      // Its message can be a whole revert dump: the first line says enough.
      const why = [answer.invalidReason, answer.invalidMessage?.split('\n')[0]?.slice(0, 200)].filter(Boolean).join(': ')
      throw new PaymentRejected(rejectReasonOf(answer.invalidReason, answer.invalidMessage), `the facilitator refused the payment${why ? ` (${why})` : ''}`)
    },
    async settle({ paymentPayload, paymentRequirements }) {
      try {
        return settleResult(await client.settle(paymentPayload, paymentRequirements))
      } catch (error) {
        // A refusal with a 4xx status and a settle body is an answer; a 5xx is not (it may have broadcast).
        if (error instanceof SettleError && error.statusCode < 500) {
          return settleResult({ success: false, errorReason: error.errorReason, errorMessage: error.errorMessage, transaction: error.transaction, network: error.network })
        }
        throw error
      }
    },
    async missingKinds() {
      const supported: SupportedResponse = await client.getSupported()
      const wanted = [
        { x402Version: 2, network: X402_NETWORK_CAIP2 },
        { x402Version: 1, network: X402_NETWORK_V1 },
      ]
      return wanted
        .filter((kind) => !supported.kinds.some((k) => k.x402Version === kind.x402Version && k.scheme === 'exact' && k.network === kind.network))
        .map((kind) => `x402 v${kind.x402Version} exact on ${kind.network}`)
    },
  }
}
