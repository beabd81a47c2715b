// x402 as a PaymentMethod of the guard: local verification, settlement through the chain port (or
// a facilitator, facilitator.ts), and the reconciler that decides settlements whose outcome was unknown.
import { encodePaymentResponseHeader } from '@x402/core/http'
import type { ChainPort, SettlementResult } from '../chain/index.ts'
import type { ChainTruth, ChainTruthReader } from '../confirmations.ts'
import type { PaymentMethod, PendingReconciler } from '../guard.ts'
import { X402_NETWORK_CAIP2, X402_NETWORK_V1 } from '../networks.ts'
import type { Hex, SettlementOutcome, TransferAuthorization } from '../types.ts'
import { x402Challenge } from './challenge.ts'
import { decodeX402Proof, x402ProofOf } from './decode.ts'
import { facilitatorRequest, requestOf, storedRequest, type X402Facilitator } from './facilitator.ts'
import { verifyX402 } from './verify.ts'
import type { OfferReceiptSigner } from './offer-receipt.ts'
import { OFFER_RECEIPT_KEY } from './offer-receipt.ts'

export interface X402MethodOptions {
  chain: ChainPort
  now: () => number
  maxTimeoutSeconds?: number
  /** How long settlement waits for the receipt before recording it as pending. */
  settleTimeoutMs?: number
  /** Signs offer-receipt offers (402) and receipts (v2 PAYMENT-RESPONSE). */
  offerReceipt?: OfferReceiptSigner | undefined
  /** Facilitator mode: priced proofs are also verified by it, and it settles them (not our wallet). */
  facilitator?: X402Facilitator | undefined
}

export function x402Method(options: X402MethodOptions): PaymentMethod {
  const maxTimeoutSeconds = options.maxTimeoutSeconds ?? 300
  return {
    protocol: 'x402',
    challenge: (quote) => x402Challenge(quote, { maxTimeoutSeconds, offerReceipt: options.offerReceipt }),
    async verify(value, quote, credential) {
      // Decoded once per request: the payment-identifier read of the same credential shares it.
      const proof = credential?.value === value ? x402ProofOf(credential) : decodeX402Proof(value)
      const verified = await verifyX402(proof, quote, { now: options.now, maxTimeoutSeconds })
      const network = proof.version === 2 ? X402_NETWORK_CAIP2 : X402_NETWORK_V1
      const auth = proof.authorization
      const { facilitator } = options
      // $0 proofs are never settled, so the local check is the whole verification.
      const viaFacilitator = facilitator !== undefined && verified.amountMicros > 0n ? facilitatorRequest(proof, quote, maxTimeoutSeconds) : undefined
      if (facilitator && viaFacilitator) await facilitator.verify(viaFacilitator)
      let settled: Promise<SettlementOutcome> | undefined
      return {
        protocol: 'x402',
        version: proof.version,
        payer: verified.payer,
        amountMicros: verified.amountMicros,
        replayKey: `x402:${verified.replayKey}`,
        zeroValue: verified.amountMicros === 0n,
        // What the reconciler needs to finish or judge this settlement after a crash. The signature
        // is no secret: it can only move this amount from the payer to payTo, as the payer signed.
        detail: {
          from: auth.from,
          to: auth.to,
          value: auth.value.toString(),
          validAfter: auth.validAfter.toString(),
          nonce: auth.nonce,
          validBefore: auth.validBefore.toString(),
          signature: proof.signature,
          payTo: quote.payTo,
          network,
          // What the reconciler sends the facilitator again when this settlement's answer is lost.
          ...(viaFacilitator ? { facilitatorRequest: storedRequest(viaFacilitator) } : {}),
        },
        // Once per payment, however often it is called: a second call returns the first outcome.
        settle() {
          if (settled) return settled
          const sent: Promise<SettlementResult> =
            facilitator && viaFacilitator ? facilitator.settle(viaFacilitator) : options.chain.settleAuthorization(auth, proof.signature, { timeoutMs: options.settleTimeoutMs })
          settled = sent.then(async (result): Promise<SettlementOutcome> => {
            if (result.status === 'confirmed') {
              // v2 receipts carry the signed offer-receipt receipt; v1 clients get the v1 shape as before.
              const receipt =
                proof.version === 2 && options.offerReceipt
                  ? { [OFFER_RECEIPT_KEY]: options.offerReceipt.receipt({ resourceUrl: quote.resourceUrl, payer: verified.payer, network, transaction: result.txHash }) }
                  : undefined
              const header = encodePaymentResponseHeader({
                success: true,
                transaction: result.txHash,
                network: network as `${string}:${string}`,
                payer: verified.payer,
                ...(receipt ? { extensions: receipt } : {}),
              })
              return {
                status: 'settled',
                reference: result.txHash,
                payer: verified.payer,
                network,
                headers: proof.version === 2 ? { 'PAYMENT-RESPONSE': header } : { 'X-PAYMENT-RESPONSE': header },
              }
            }
            if (result.status === 'pending') return { status: 'pending', reference: result.txHash }
            return settlementFailed(options.chain, auth, result)
          })
          return settled
        },
      }
    },
  }
}

/**
 * A settlement that reports failure is final only if the authorization was not used after all
 * (another broadcast of the same authorization may have landed first) and the transaction it names,
 * if any, reverted (a facilitator's may still wait in the mempool): otherwise it is left pending
 * and the reconciler reads the outcome from the chain.
 */
async function settlementFailed(chain: ChainPort, auth: TransferAuthorization, result: { reason: string; txHash?: Hex }): Promise<SettlementOutcome> {
  try {
    if (result.txHash && (await chain.settlementStatus(result.txHash)) !== 'failed') return { status: 'pending', reference: result.txHash }
    if (await chain.isAuthorizationUsed(auth.from, auth.nonce)) return { status: 'pending', reference: result.txHash ?? '' }
  } catch {
    return { status: 'pending', reference: result.txHash ?? '' }
  }
  return { status: 'failed', reason: result.reason }
}

/**
 * Sends a recorded authorization again, for the reconciler and the confirmation sweep: by our own
 * wallet (self-settlement), or as the same /settle request to the facilitator (facilitator mode:
 * this gateway may hold no gas wallet). Either is idempotent: a used nonce cannot move twice.
 */
export type Resettle = (detail: Record<string, unknown>) => Promise<SettlementResult>

export function broadcastAgain(chain: ChainPort): Resettle {
  return async (detail) => {
    const signed = authorizationOf(detail)
    if (signed === undefined) throw new Error('the settlement has no stored authorization')
    return chain.settleAuthorization(signed.auth, signed.signature)
  }
}

export function settleAgainVia(facilitator: X402Facilitator): Resettle {
  return async (detail) => {
    const request = requestOf(detail)
    // Recorded before facilitator mode (no stored request): the chain decides once it expires.
    if (request === undefined) throw new Error('the settlement has no stored facilitator request')
    return facilitator.settle(request)
  }
}

function authorizationOf(detail: Record<string, unknown>): { auth: TransferAuthorization; signature: Hex } | undefined {
  const { from, to, value, validAfter, validBefore, nonce, signature } = detail as Record<string, string | undefined>
  if (!from || !to || !value || !validAfter || !validBefore || !nonce || !signature) return undefined
  return {
    auth: { from: from as Hex, to: to as Hex, value: BigInt(value), validAfter: BigInt(validAfter), validBefore: BigInt(validBefore), nonce: nonce as Hex },
    signature: signature as Hex,
  }
}

/**
 * Decides an x402 settlement whose outcome is unknown, from the chain:
 * - the authorization's nonce is used on-chain: settled (reference: our tx, or the one that used it);
 * - unused and past validBefore: it can never move, so it failed;
 * - unused, still valid, and its request died mid-settlement ('settling'): the work is bound and
 *   was bought, so the settlement is finished here through `resettle` (our wallet, or the
 *   facilitator again; the authorization makes this idempotent: a second broadcast can only revert);
 * - unused, still valid, 'pending', and our transaction cannot land (the node does not know it:
 *   the broadcast was lost with the RPC, or dropped; or it reverted): broadcast the authorization
 *   again, as above;
 * - otherwise pending (our transaction waits in the mempool): asked again on the next pass.
 */
/**
 * How long after an authorization's validBefore its carrying transaction is still looked for
 * before a used authorization settles without it: far inside the RPC adapter's log lookback
 * (10,000 blocks, about 5.5 hours of Base blocks), since the carrier is mined before validBefore.
 */
export const CARRIER_LOOKUP_WINDOW_S = 3_600

export function x402Reconciler(chain: ChainPort, now: () => number, resettle: Resettle = broadcastAgain(chain)): PendingReconciler {
  return async ({ state, reference, detail }) => {
    let unmined = false
    if (reference) {
      const status = await chain.settlementStatus(reference as Hex)
      if (status === 'confirmed') return { status: 'settled', reference }
      unmined = status === 'pending'
    }
    const from = detail.from as Hex | undefined
    const nonce = detail.nonce as Hex | undefined
    if (!from || !nonce) return { status: 'pending' }
    // Asked of the chain, not of our clock: a lagging RPC node must not make a valid payment look dead.
    const fate = await chain.authorizationFate(from, nonce, BigInt(String(detail.validBefore ?? 0)))
    if (fate === 'used' || fate === 'final') {
      // The money moved; the ledgers record the transaction that moved it. A lookup the node did
      // not answer is asked again on the next pass rather than settled without its hash.
      let tx: Hex | undefined
      try {
        tx = await chain.findAuthorizationTx(from, nonce)
      } catch {
        return { status: 'pending' }
      }
      if (tx !== undefined) return { status: 'settled', reference: tx }
      // Used, yet no log names its carrier (a node catching up, or one restarted from a saved
      // state without its logs): the transaction we sent is the record when there is one;
      // without one, asked again until the authorization is too old for the lookup's window.
      if (reference) return { status: 'settled', reference }
      if (now() < (Number(detail.validBefore ?? 0) + CARRIER_LOOKUP_WINDOW_S) * 1000) return { status: 'pending' }
      return { status: 'settled', reference: '' }
    }
    if (fate === 'dead') return { status: 'failed', reason: 'the authorization expired unused' }
    const validBefore = Number(detail.validBefore ?? 0) * 1000
    if (now() > validBefore) return { status: 'pending' }
    const signed = authorizationOf(detail)
    if (signed === undefined) return { status: 'pending' }
    // Ours may still land: wait while the node holds it (a second broadcast would only revert).
    if (state === 'pending' && unmined && (await chain.transactionKnown(reference as Hex))) return { status: 'pending' }
    const result = await resettle(detail)
    if (result.status === 'confirmed') return { status: 'settled', reference: result.txHash }
    if (result.status === 'pending') return { status: 'pending', reference: result.txHash }
    // Not final while the authorization is valid: the next pass asks again.
    return { status: 'pending' }
  }
}

/**
 * What the chain says about a recorded x402 settlement (confirmations.ts):
 * - its transaction is on the chain with the payer's Transfer to payTo: confirmed once final;
 * - it is not, but the authorization's nonce is used: another transaction carried it (found from
 *   its AuthorizationUsed log), judged the same way;
 * - the nonce is unused and the authorization still valid: broadcast it again (the buyer signed it
 *   and got the work), and judge the new transaction on the next pass;
 * - unused, and a final block is past validBefore: it can never land (dead).
 */
export function x402ChainTruth(chain: ChainPort, resettle: Resettle = broadcastAgain(chain)): ChainTruthReader {
  return async ({ reference, detail }): Promise<ChainTruth> => {
    const signed = authorizationOf(detail)
    if (signed === undefined) return { status: 'unknown' }
    const { auth } = signed
    const expected = { from: auth.from, to: auth.to, value: auth.value }
    const judged = async (txHash: Hex): Promise<ChainTruth | undefined> => {
      const seen = await chain.inclusion(txHash, expected)
      if (seen.status !== 'included' || !seen.matched) return undefined
      return { status: seen.final ? 'confirmed' : 'included', reference: txHash, blockNumber: seen.blockNumber }
    }
    if (reference) {
      const truth = await judged(reference as Hex)
      if (truth) return truth
    }
    const fate = await chain.authorizationFate(auth.from, auth.nonce, auth.validBefore)
    if (fate === 'used' || fate === 'final') {
      // The money moved, in a transaction other than the one we recorded (or one we cannot see).
      const carrier = await chain.findAuthorizationTx(auth.from, auth.nonce)
      const truth = carrier === undefined || carrier === reference ? undefined : await judged(carrier)
      if (truth) return truth
      return { status: fate === 'final' ? 'confirmed' : 'included', reference: carrier ?? reference ?? '', blockNumber: null }
    }
    if (fate === 'dead') return { status: 'dead', reason: 'the settlement was dropped by the chain and its authorization expired unused' }
    const again = await resettle(detail)
    if (again.status === 'confirmed') return (await judged(again.txHash)) ?? { status: 'missing', reference: again.txHash }
    if (again.status === 'pending') return { status: 'missing', reference: again.txHash }
    return { status: 'missing' }
  }
}
