// Local verification of an x402 `exact` proof (EIP-3009 TransferWithAuthorization of USDC on
// Base) against the quote its challenge was built from. Same checks as `@x402/evm`'s
// ExactEvmScheme.verify (notes §2.3 steps 1–4) for EOA signatures, but with precise reasons,
// exact amounts in v1 too, and the signature recovered by libsecp256k1 instead of pure JS.
// Nothing is consumed: the guard reserves `replayKey` before doing the work.
import { getAddress } from 'viem'
import type { Address, Hex } from 'viem'
import { X402_NETWORK_CAIP2, X402_NETWORK_V1 } from '../networks.ts'
import { PaymentRejected } from '../types.ts'
import type { PriceQuote, RejectReason } from '../types.ts'
import { x402RequirementsV2 } from './challenge.ts'
import type { X402ChallengeOptions } from './challenge.ts'
import type { X402Proof } from './decode.ts'

/** EIP-3009 nonce state on chain (USDC `authorizationState(from, nonce)`). */
export interface X402NonceChecker {
  isAuthorizationUsed(from: Address, nonce: Hex): Promise<boolean>
}

export interface X402VerifyOptions {
  /** Clock in ms since the epoch. */
  now: () => number
  /** Optional on-chain check that the nonce is still unused. */
  chain?: X402NonceChecker
  /** Must equal the challenge's (default 300): a v2 `accepted` is compared field by field. */
  maxTimeoutSeconds?: number
}

export interface X402Verified {
  version: 1 | 2
  /** Checksummed `authorization.from`, proven by the signature. */
  payer: Address
  amountMicros: bigint
  /** `${from}:${nonce}`, lowercase. Keep it reserved at least until `validBefore`. */
  replayKey: string
  /** `authorization.validBefore` in ms: the settle deadline, and how long the replay key matters. */
  expiresAtMs: number
}

/** Seconds the authorization must still be valid for (ExactEvmScheme's margin). */
export const VALID_BEFORE_MARGIN_SECONDS = 6n

function reject(reason: RejectReason, message: string): never {
  throw new PaymentRejected(reason, message)
}

function sameAddress(a: unknown, b: string): boolean {
  return typeof a === 'string' && a.toLowerCase() === b.toLowerCase()
}

/** `required.extra` ⊆ `accepted.extra` (flat string/number values, as USDC's {name, version}). */
function extraContains(required: Record<string, unknown>, accepted: Record<string, unknown> | undefined): boolean {
  for (const [k, v] of Object.entries(required)) {
    if (!accepted || accepted[k] !== v) return false
  }
  return true
}

/** Checks of a v2 `accepted` against our requirements; each mismatch maps to its own reason. */
function checkAccepted(proof: X402Proof, quote: PriceQuote, maxTimeoutSeconds: number | undefined): void {
  const acc = proof.accepted
  if (!acc) reject('malformed', 'x402 v2 proof without accepted')
  const opts: X402ChallengeOptions = maxTimeoutSeconds === undefined ? {} : { maxTimeoutSeconds }
  const req = x402RequirementsV2(quote, opts)
  if (proof.resource && proof.resource.url !== quote.resourceUrl) {
    reject('wrong_route', `proof was made for ${proof.resource.url}, not ${quote.resourceUrl}`)
  }
  if (!sameAddress(acc.asset, req.asset)) reject('wrong_asset', `accepted.asset ${acc.asset} is not USDC on Base`)
  if (!extraContains(req.extra, acc.extra)) reject('wrong_asset', "accepted.extra does not name USDC's EIP-712 domain")
  if (!sameAddress(acc.payTo, req.payTo)) reject('wrong_payee', `accepted.payTo ${acc.payTo} is not ${req.payTo}`)
  if (acc.amount !== req.amount) reject('wrong_amount', `accepted.amount ${acc.amount} is not the price ${req.amount}`)
  if (acc.maxTimeoutSeconds !== req.maxTimeoutSeconds) {
    reject('wrong_route', `accepted.maxTimeoutSeconds ${acc.maxTimeoutSeconds} was not offered`)
  }
}

/**
 * Verifies `proof` for `quote`, or throws PaymentRejected with the first failing reason, in this
 * order: unsupported_scheme, wrong_network, (v2 `accepted`/`resource`: wrong_route, wrong_asset,
 * wrong_payee, wrong_amount), wrong_payee (`to`), wrong_amount (`value` must equal the price
 * exactly), not_yet_valid, expired (validBefore < now + 6 s), invalid_signature,
 * nonce_already_used (only with `chain`).
 */
export async function verifyX402(proof: X402Proof, quote: PriceQuote, options: X402VerifyOptions): Promise<X402Verified> {
  if (proof.scheme !== 'exact') reject('unsupported_scheme', `scheme ${proof.scheme} is not supported`)
  const network = proof.version === 2 ? X402_NETWORK_CAIP2 : X402_NETWORK_V1
  if (proof.network !== network) reject('wrong_network', `network ${proof.network} is not ${network}`)
  if (proof.version === 2) checkAccepted(proof, quote, options.maxTimeoutSeconds)

  const auth = proof.authorization
  if (!sameAddress(auth.to, quote.payTo)) reject('wrong_payee', `authorization.to ${auth.to} is not ${quote.payTo}`)
  if (auth.value !== quote.amountMicros) {
    reject('wrong_amount', `authorization.value ${auth.value} is not the price ${quote.amountMicros}`)
  }
  const nowSec = BigInt(Math.floor(options.now() / 1000))
  if (auth.validAfter > nowSec) reject('not_yet_valid', `authorization is valid only after ${auth.validAfter}`)
  if (auth.validBefore < nowSec + VALID_BEFORE_MARGIN_SECONDS) {
    reject('expired', `authorization expired (validBefore ${auth.validBefore})`)
  }

  // Recovered once per proof: a payment-identifier read of the same request may have done it.
  const signer = proof.signer()
  if (signer === null || signer !== auth.from.toLowerCase()) {
    reject('invalid_signature', 'signature does not recover to authorization.from')
  }

  const payer = getAddress(auth.from)
  if (options.chain && (await options.chain.isAuthorizationUsed(payer, auth.nonce))) {
    reject('nonce_already_used', 'authorization nonce already used on chain')
  }
  const validBeforeMs = auth.validBefore * 1000n
  return {
    version: proof.version,
    payer,
    amountMicros: auth.value,
    replayKey: `${auth.from}:${auth.nonce}`.toLowerCase(),
    expiresAtMs: validBeforeMs > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(validBeforeMs),
  }
}
