// x402 as a PaymentMethod of the guard: local verification, settlement through the chain port,
// and the reconciler that decides settlements whose outcome was unknown.
import { encodePaymentResponseHeader } from '@x402/core/http'
import type { ChainPort } from '../chain/index.ts'
import type { PaymentMethod, PendingReconciler } from '../guard.ts'
import { X402_NETWORK_CAIP2, X402_NETWORK_V1 } from '../networks.ts'
import type { Hex, SettlementOutcome } from '../types.ts'
import { x402Challenge } from './challenge.ts'
import { decodeX402Proof } from './decode.ts'
import { verifyX402 } from './verify.ts'

export interface X402MethodOptions {
  chain: ChainPort
  now: () => number
  maxTimeoutSeconds?: number
  /** How long settlement waits for the receipt before recording it as pending. */
  settleTimeoutMs?: number
}

export function x402Method(options: X402MethodOptions): PaymentMethod {
  const maxTimeoutSeconds = options.maxTimeoutSeconds ?? 300
  return {
    protocol: 'x402',
    challenge: (quote) => x402Challenge(quote, { maxTimeoutSeconds }),
    async verify(credential, quote) {
      const proof = decodeX402Proof(credential)
      const verified = await verifyX402(proof, quote, { now: options.now, maxTimeoutSeconds })
      const network = proof.version === 2 ? X402_NETWORK_CAIP2 : X402_NETWORK_V1
      const auth = proof.authorization
      let settled: Promise<SettlementOutcome> | undefined
      return {
        protocol: 'x402',
        version: proof.version,
        payer: verified.payer,
        amountMicros: verified.amountMicros,
        replayKey: `x402:${verified.replayKey}`,
        zeroValue: verified.amountMicros === 0n,
        detail: {
          from: auth.from,
          nonce: auth.nonce,
          validBefore: auth.validBefore.toString(),
          payTo: quote.payTo,
          network,
        },
        // Once per payment, however often it is called: a second call returns the first outcome.
        settle() {
          settled ??= options.chain.settleAuthorization(auth, proof.signature, { timeoutMs: options.settleTimeoutMs }).then((result): SettlementOutcome => {
            if (result.status === 'confirmed') {
              const header = encodePaymentResponseHeader({ success: true, transaction: result.txHash, network: network as `${string}:${string}`, payer: verified.payer })
              return {
                status: 'settled',
                reference: result.txHash,
                payer: verified.payer,
                network,
                headers: proof.version === 2 ? { 'PAYMENT-RESPONSE': header } : { 'X-PAYMENT-RESPONSE': header },
              }
            }
            if (result.status === 'pending') return { status: 'pending', reference: result.txHash }
            return { status: 'failed', reason: result.reason }
          })
          return settled
        },
      }
    },
  }
}

/** A broadcast we lost track of: ask the chain. After validBefore an unused nonce can never move. */
export function x402Reconciler(chain: ChainPort, now: () => number): PendingReconciler {
  return async ({ reference, detail }) => {
    if (reference) {
      const status = await chain.settlementStatus(reference as Hex)
      if (status !== 'pending') return status === 'confirmed' ? 'settled' : 'failed'
    }
    const from = detail.from as Hex | undefined
    const nonce = detail.nonce as Hex | undefined
    if (!from || !nonce) return 'pending'
    if (await chain.isAuthorizationUsed(from, nonce)) return 'settled'
    const validBefore = Number(detail.validBefore ?? 0) * 1000
    return now() > validBefore ? 'failed' : 'pending'
  }
}
