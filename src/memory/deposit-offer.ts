// What the 402 of an unpaid write tells a depositor: sign in instead of paying. The offer is in the
// problem body (`depositor`, `rails`, `extensions["sign-in-with-x"]`) and in the x402 v2
// PAYMENT-REQUIRED header's `extensions["sign-in-with-x"]`, where an x402 client with the SIWX
// client hook (@x402/extensions createSIWxClientHook) finds it and signs in before it would pay.
// A client that pays anyway is not charged twice: a payment from a wallet whose deposit covers the
// write is debited from the deposit and never settled (service.ts rememberPaid).
import type { AppError } from '../platform/errors.ts'
import { SIWX_HEADER, SIWX_EXTENSION_KEY, type SiwxChallenge } from '../payments/siwx.ts'
import { PAYMENT_REQUIRED_HEADER } from '../payments/x402/challenge.ts'
import { decodeHeaderJson, encodeHeaderJson } from '../payments/x402/header-json.ts'
import { EMBEDDING_MICROS_PER_MTOK } from './limits.ts'

/** The `depositor` hint of a write's 402 (also inside its SIWX extension). */
export interface DepositorHint {
  /** A deposit holder may sign the SIWX challenge and retry with only its header: no payment. */
  signInInstead: true
  /** Where the challenge is: the key in the body's and PAYMENT-REQUIRED's `extensions`. */
  extension: typeof SIWX_EXTENSION_KEY
  /** The request header carrying the signed challenge. */
  header: string
  /** What a write is debited from the deposit: ceil(tokens × this / 1e6) micro-USDC. */
  microsPerMillionTokens: string
  /** A payment signed by a wallet whose deposit covers the write is debited from the deposit and never settled. */
  paymentDrawsOnDeposit: true
  /** Make or top up a deposit (POST, X-Pay-Amount-Micros). */
  deposit: string
  /** The deposit's balance (GET, SIWX). */
  account: string
  detail: string
}

export function depositorHint(memoryUrl: string): DepositorHint {
  return {
    signInInstead: true,
    extension: SIWX_EXTENSION_KEY,
    header: SIWX_HEADER,
    microsPerMillionTokens: EMBEDDING_MICROS_PER_MTOK.toString(),
    paymentDrawsOnDeposit: true,
    deposit: `${memoryUrl}/api/v1/deposits`,
    account: `${memoryUrl}/api/v1/account`,
    detail:
      `Holders of a memory deposit: sign extensions["${SIWX_EXTENSION_KEY}"] and retry with only the ${SIWX_HEADER} header; the write is debited ` +
      `ceil(tokens × ${EMBEDDING_MICROS_PER_MTOK} / 1e6) micro-USDC from the deposit. A payment from a wallet whose deposit covers the write is ` +
      'debited the same way and never settled (nothing moves on-chain).',
  }
}

/** Adds the depositor's offer to a write's 402 (body and PAYMENT-REQUIRED), in place. */
export function offerDepositRail(error: AppError, challenge: SiwxChallenge, hint: DepositorHint, rails: Record<string, string>): void {
  const extension = { ...challenge, depositor: hint }
  error.extensions.extensions = { [SIWX_EXTENSION_KEY]: extension }
  error.extensions.depositor = hint
  error.extensions.rails = rails
  const name = Object.keys(error.headers).find((header) => header.toLowerCase() === PAYMENT_REQUIRED_HEADER.toLowerCase())
  if (name === undefined) return
  const required = decodeHeaderJson(error.headers[name] as string) as { extensions?: Record<string, unknown> }
  required.extensions = { ...(required.extensions ?? {}), [SIWX_EXTENSION_KEY]: extension }
  ;(error.headers as Record<string, string>)[name] = encodeHeaderJson(required)
}
