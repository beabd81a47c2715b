// "Who owns this call": the owner proof of owner endpoints (the scheduler's today, the memory
// service's next), independent of any service's data. In this order, the first present wins:
//
// 1. SIGN-IN-WITH-X (siwx.ts): bound to the request's method and exact URL, one use → the wallet.
// 2. A payment credential:
//    - x402 (PAYMENT-SIGNATURE / X-PAYMENT), whatever its amount: refused, 401
//      wallet_proof_required `unbound_proof`. EIP-3009 signs from/to/value/validity and a nonce
//      the client picks; x402's `resource` rides unsigned beside it, so nothing ties it to a
//      method, a resource or even this server (a $0 one could be harvested by any site that
//      answers 402 for $0). Nothing is verified or reserved.
//    - MPP (Authorization: Payment): a $0 proof through the payment guard. The challenge it signs
//      is HMAC-bound by us and carries the route `METHOD /path?query` of this very request, so it
//      fits no other method or resource (402 wrong_route elsewhere); its spend key is consumed
//      → the wallet. A priced one is released unsettled and refused.
// 3. Optionally (`holderOf`), `Authorization: Bearer agw_…`: the owner named by a plan access
//    token (the scheduler's marketplace rail: `agent:<agentId>`); holderOf may throw its own
//    401 for an unknown token.
// 4. Nothing: 401 wallet_proof_required. Every 401 here carries a fresh SIWX challenge for the
//    request at extensions["sign-in-with-x"].
//
// Wallets are returned lowercase. Header reading is credentials.ts's.
import { AppError } from '../platform/errors.ts'
import { credentialsOf, paymentCredential, type HeaderBag } from './credentials.ts'
import type { PaymentGuard } from './guard.ts'
import { SIWX_EXTENSION_KEY, SIWX_HEADER, WalletProofRejected, type SiwxVerifier } from './siwx.ts'
import type { Address } from './types.ts'

/** The request being proven: what the proofs are bound to. */
export interface OwnerCall {
  /** HTTP method, as received. */
  method: string
  /** The public absolute URL of the request, query included (behind a proxy, the external one). */
  url: string
  headers: HeaderBag
  /** Labels of the $0 MPP proof's reservation and challenge (default `ownerProof` / "Owner proof"). */
  operationId?: string
  description?: string
}

export interface OwnerProofDeps {
  siwx: SiwxVerifier
  guard: PaymentGuard
  /** Payee named in a $0 MPP challenge (nothing is paid). */
  payTo: Address
  /**
   * Owners that are not wallets: the owner id named by a bearer access token (`agw_…`), or
   * undefined for none. Asked only when no wallet proof came. May throw (e.g. 401 bearer_required
   * for an unknown token).
   */
  holderOf?: (token: string, call: OwnerCall) => Promise<string | undefined>
  /** Sentence added to the no-proof 401 (e.g. how holders of access tokens prove ownership). */
  noProofHint?: string
}

export interface OwnerProof {
  /** The owner of `call` (a lowercase 0x wallet, or what holderOf returned); throws the 401s above. */
  prove(call: OwnerCall): Promise<string>
}

/** `METHOD /path?query` of an absolute URL: the route a $0 MPP proof is bound to. */
export function routeOf(method: string, url: string): string {
  const parsed = new URL(url)
  return `${method} ${parsed.pathname}${parsed.search}`
}

export function createOwnerProof(deps: OwnerProofDeps): OwnerProof {
  const { siwx, guard } = deps
  const challengeOf = async (call: OwnerCall) => ({ [SIWX_EXTENSION_KEY]: await siwx.challenge(call.method, call.url) })

  return {
    async prove(call) {
      const { method, url } = call
      const credentials = credentialsOf(call.headers)
      if (credentials.siwx !== undefined) {
        try {
          return (await siwx.verify(credentials.siwx, method, url)).address.toLowerCase()
        } catch (error) {
          if (!(error instanceof WalletProofRejected)) throw error
          throw new AppError('wallet_proof_required', `The ${SIWX_HEADER} proof was refused (${error.reason}): ${error.message}. Sign the fresh challenge and retry.`, {
            field: 'header.sign-in-with-x',
            extensions: { reason: error.reason, extensions: await challengeOf(call) },
          })
        }
      }
      const credential = paymentCredential(credentials)
      if (credential?.protocol === 'x402') {
        throw new AppError(
          'wallet_proof_required',
          `An x402 payment proof cannot prove ownership: it is not bound to the request (method and URL). Sign the challenge at extensions["${SIWX_EXTENSION_KEY}"] and retry with the ${SIWX_HEADER} header (or send a $0 MPP proof).`,
          { field: 'header', extensions: { reason: 'unbound_proof', extensions: await challengeOf(call) } },
        )
      }
      if (credential !== undefined) {
        const quote = { amountMicros: 0n, resourceUrl: url, route: routeOf(method, url), description: call.description ?? 'Owner proof', payTo: deps.payTo }
        const authorized = await guard.authorize(call.headers, quote, call.operationId ?? 'ownerProof')
        if (!authorized.payment.zeroValue) {
          await authorized.release()
          throw new AppError('wallet_proof_required', `Owner operations take a $0 proof (or ${SIWX_HEADER}); nothing is charged`, { field: 'header' })
        }
        await authorized.commit()
        return authorized.payment.payer.toLowerCase()
      }
      const bearer = credentials.bearer
      if (deps.holderOf !== undefined && bearer?.valid === true && bearer.kind === 'access-token') {
        const owner = await deps.holderOf(bearer.token, call)
        if (owner !== undefined) return owner
      }
      throw new AppError(
        'wallet_proof_required',
        `Prove the paying wallet: sign the challenge at extensions["${SIWX_EXTENSION_KEY}"] and retry with the ${SIWX_HEADER} header (or send a $0 MPP proof).` +
          (deps.noProofHint ? ` ${deps.noProofHint}` : ''),
        { extensions: { extensions: await challengeOf(call) } },
      )
    },
  }
}
