// The one reader of the credential headers every service takes. A request's headers are read
// once (readCredentials, pure; credentialsOf memoizes it per header object) into a typed object:
//
//   PAYMENT-SIGNATURE (x402 v2), X-PAYMENT (x402 v1), Authorization: Payment … (MPP)  → payments
//   Authorization: Bearer <token> (agw_ access token, agk_ API key, whsec_ webhook
//     secret, run_ run token)                                                        → bearer
//   Svc-Agent-Authorization: Bearer <agw_ access token> (names the buyer)            → agentBearer
//   SIGN-IN-WITH-X (wallet proof)                                                     → siwx
//   X-Pay-Amount-Micros                                                               → payAmount
//   Idempotency-Key                                                                   → idempotencyKey
//
// Rules: header names are matched case-insensitively; a repeated header counts by its first
// value; auth schemes (`Bearer`, `Payment`) are case-insensitive; a bearer token must be an
// RFC 6750 b64token after exactly `Bearer` and spaces (anything else is `malformed`, which every
// consumer answers like an unknown token, never like no token). Reading never throws: the
// problems a header can have are kept as values, and the accessors below raise the existing
// errors only when a caller needs that part (two payment credentials at once: 400
// payment_malformed / multiple_credentials; a malformed X-Pay-Amount-Micros: 400 naming
// header.x-pay-amount-micros), so a route that does not take a payment is not refused for one.
//
// Here and not in src/platform: it speaks the payments vocabulary (protocols, payment_malformed,
// the token kinds of the gateway and the scheduler), and platform must not import payments.
import { AppError } from '../platform/errors.ts'
import { parseMicros, type Micros } from '../platform/money.ts'
import type { Protocol } from './types.ts'

export type HeaderBag = Record<string, string | string[] | undefined>

/** The request header carrying a wallet proof (base64 JSON of a SIWX payload). */
export const SIWX_HEADER = 'SIGN-IN-WITH-X'
/** The request header naming an amount in micros (the scheduler's escrow, memory deposits). */
export const PAY_AMOUNT_HEADER = 'X-Pay-Amount-Micros'

/** Readable prefixes of the bearer secrets we issue. */
export const TOKEN_PREFIXES = {
  /** Agent access token (POST /auth/register; plans, the buyer's identity, marketplace owners). */
  'access-token': 'agw_',
  /** Scheduler account API key. */
  'api-key': 'agk_',
  /** Scheduler task webhook secret. */
  'webhook-secret': 'whsec_',
  /** Per-run token of the scheduler's helper endpoint (AGW_RUN_TOKEN). */
  'run-token': 'run_',
} as const

export type TokenKind = keyof typeof TOKEN_PREFIXES | 'other'

/** An `Authorization`-style `Bearer` credential: a token, or one that breaks the syntax. */
export type BearerCredential = { readonly valid: true; readonly token: string; readonly kind: TokenKind } | { readonly valid: false; readonly reason: 'malformed' }

export interface PaymentCredential {
  readonly protocol: Protocol
  /** What the protocol verifies: the x402 header's value, or the whole `Authorization: Payment …`. */
  readonly value: string
  /** The (lowercase) header it came in. */
  readonly header: 'payment-signature' | 'x-payment' | 'authorization'
}

export type PayAmount = { readonly valid: true; readonly micros: Micros } | { readonly valid: false; readonly raw: string }

export interface RequestCredentials {
  /** Every payment credential sent, in the order PAYMENT-SIGNATURE, X-PAYMENT, Authorization: Payment. Use paymentCredential(). */
  readonly payments: readonly PaymentCredential[]
  /** `Authorization: Bearer …`; undefined when absent or another scheme (`Payment` is a payment). */
  readonly bearer: BearerCredential | undefined
  /** `Svc-Agent-Authorization: Bearer …`. */
  readonly agentBearer: BearerCredential | undefined
  /** `SIGN-IN-WITH-X`, as sent (an empty one is still a proof, refused as malformed by the verifier). */
  readonly siwx: string | undefined
  /** `X-Pay-Amount-Micros`. Use payAmountMicros(). */
  readonly payAmount: PayAmount | undefined
  /** `Idempotency-Key`, as sent (its syntax is the route schema's business). */
  readonly idempotencyKey: string | undefined
}

const WANTED = new Set(['payment-signature', 'x-payment', 'authorization', 'svc-agent-authorization', 'sign-in-with-x', 'x-pay-amount-micros', 'idempotency-key'])

/** RFC 6750 §2.1: `Bearer` 1*SP b64token, b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=". */
const BEARER = /^bearer(?:$|[ \t])/i
const BEARER_STRICT = /^bearer +([A-Za-z0-9\-._~+/]+=*) *$/i
const PAYMENT_SCHEME = /^payment\s/i

export function tokenKind(token: string): TokenKind {
  for (const [kind, prefix] of Object.entries(TOKEN_PREFIXES)) if (token.startsWith(prefix)) return kind as TokenKind
  return 'other'
}

/** `Bearer <token>` → the token; another scheme → undefined; a `Bearer` value breaking the syntax → malformed. */
export function parseBearer(value: string | undefined): BearerCredential | undefined {
  if (value === undefined || !BEARER.test(value)) return undefined
  const token = BEARER_STRICT.exec(value)?.[1]
  return token === undefined ? { valid: false, reason: 'malformed' } : { valid: true, token, kind: tokenKind(token) }
}

/** Reads the credential headers of one request. Pure; never throws. */
export function readCredentials(headers: HeaderBag): RequestCredentials {
  const first = new Map<string, string>()
  for (const name of Object.keys(headers)) {
    const lower = name.toLowerCase()
    if (!WANTED.has(lower) || first.has(lower)) continue
    const raw = headers[name]
    const value = Array.isArray(raw) ? raw[0] : raw
    if (typeof value === 'string') first.set(lower, value)
  }
  const authorization = first.get('authorization')
  const payments: PaymentCredential[] = []
  const v2 = first.get('payment-signature')
  const v1 = first.get('x-payment')
  // Empty x402 headers are no credential, as the x402 clients' servers treat them.
  if (v2) payments.push({ protocol: 'x402', value: v2, header: 'payment-signature' })
  if (v1) payments.push({ protocol: 'x402', value: v1, header: 'x-payment' })
  if (authorization !== undefined && PAYMENT_SCHEME.test(authorization)) payments.push({ protocol: 'mpp', value: authorization, header: 'authorization' })
  const amount = first.get('x-pay-amount-micros')
  const micros = amount === undefined ? undefined : parseMicros(amount)
  return {
    payments,
    bearer: parseBearer(authorization),
    agentBearer: parseBearer(first.get('svc-agent-authorization')),
    siwx: first.get('sign-in-with-x'),
    payAmount: amount === undefined ? undefined : micros === undefined ? { valid: false, raw: amount } : { valid: true, micros },
    idempotencyKey: first.get('idempotency-key'),
  }
}

const memo = new WeakMap<object, RequestCredentials>()

/**
 * readCredentials, once per header object (a request's `headers`): every layer of one request
 * (rail choice, access control, the guard, owner proofs) shares the same reading.
 */
export function credentialsOf(headers: HeaderBag): RequestCredentials {
  let read = memo.get(headers)
  if (read === undefined) {
    read = readCredentials(headers)
    memo.set(headers, read)
  }
  return read
}

/** The one payment credential, if any; two or more at once is 400 payment_malformed (multiple_credentials). */
export function paymentCredential(credentials: RequestCredentials): PaymentCredential | undefined {
  if (credentials.payments.length > 1) {
    throw new AppError('payment_malformed', 'Send exactly one payment credential: PAYMENT-SIGNATURE, X-PAYMENT or Authorization: Payment', {
      extensions: { reason: 'multiple_credentials' },
      field: 'header',
    })
  }
  return credentials.payments[0]
}

/** X-Pay-Amount-Micros, undefined when absent; a value that is not integer micros is a 400 naming the header. */
export function payAmountMicros(credentials: RequestCredentials): Micros | undefined {
  const amount = credentials.payAmount
  if (amount === undefined) return undefined
  if (!amount.valid) throw payAmountInvalid()
  return amount.micros
}

/** The 400 of a missing (where required), zero or malformed X-Pay-Amount-Micros. */
export function payAmountInvalid(): AppError {
  return new AppError('validation_error', 'x-pay-amount-micros must be a positive integer number of micros', { field: 'header.x-pay-amount-micros' })
}

/** The token of a well-formed bearer credential (undefined when absent or malformed). */
export function tokenOf(bearer: BearerCredential | undefined): string | undefined {
  return bearer?.valid ? bearer.token : undefined
}

/**
 * The buyer's access token: `Svc-Agent-Authorization: Bearer` first, else `Authorization: Bearer`
 * (which an MPP proof occupies instead). `malformed` when the header that names it breaks the
 * bearer syntax: callers answer it as an unknown token.
 */
export function accessTokenCredential(credentials: RequestCredentials): BearerCredential | undefined {
  return credentials.agentBearer ?? credentials.bearer
}
