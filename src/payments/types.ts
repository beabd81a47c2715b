// Shared vocabulary of the payment protocols. Each protocol module (x402, mpp) turns request
// headers into a VerifiedPayment; the guard reserves, runs the work, then settles through it.
import type { DiscoveryExtension } from '@x402/extensions/bazaar'
import type { Address, Hex } from 'viem'

export type Protocol = 'x402' | 'mpp'

/** What one priced call asks for; the same object builds every protocol's challenge. */
export interface PriceQuote {
  amountMicros: bigint
  /** Absolute public URL of the resource (x402 `resource.url`, MPP realm binding). */
  resourceUrl: string
  /** `METHOD /path` of the operation: binds a proof to the route it was issued for. */
  route: string
  description: string
  payTo: Address
  /** x402 v2 discovery parts of the operation (bazaar extension, resource metadata); see x402/bazaar.ts. */
  discovery?: QuoteDiscovery
  /** Concrete path parameters of the request (bazaar `pathParams`). */
  pathParams?: Record<string, string>
}

/** Per-operation discovery metadata, computed once from the registry entry. */
export interface QuoteDiscovery {
  /** The `bazaar` extension declaration (@x402/extensions/bazaar DiscoveryExtension). */
  bazaar: DiscoveryExtension
  serviceName?: string | undefined
  tags?: string[] | undefined
}

/** Machine-readable reasons a proof is refused (problem+json `reason`). */
export type RejectReason =
  | 'malformed'
  | 'multiple_credentials'
  | 'unsupported_version'
  | 'unsupported_scheme'
  | 'wrong_network'
  | 'wrong_asset'
  | 'wrong_payee'
  | 'wrong_amount'
  | 'not_yet_valid'
  | 'expired'
  | 'invalid_signature'
  | 'wrong_route'
  | 'challenge_expired'
  | 'challenge_forged'
  | 'nonce_already_used'
  | 'insufficient_funds'
  | 'settlement_failed'

export class PaymentRejected extends Error {
  readonly reason: RejectReason
  constructor(reason: RejectReason, message: string) {
    super(message)
    this.name = 'PaymentRejected'
    this.reason = reason
  }
}

export type SettlementOutcome =
  | { status: 'settled'; reference: string; payer: Address; network: string; headers: Record<string, string> }
  | { status: 'failed'; reason: string }
  | { status: 'pending'; reference: string }

/** A proof that passed local verification. Nothing is consumed until the guard reserves replayKey. */
export interface VerifiedPayment {
  protocol: Protocol
  /** x402 version (1 or 2); MPP is 1. */
  version: number
  payer: Address
  amountMicros: bigint
  /** Unique per spend: x402 `${payer}:${nonce}` lowercased; MPP credential/challenge hash. */
  replayKey: string
  /** Settles on-chain (or through the protocol's method) exactly once. */
  settle(): Promise<SettlementOutcome>
  /** For $0 proofs (advisor, owner identity): nothing to settle. */
  readonly zeroValue: boolean
  /** Opaque detail for the ledger (authorization, tx hash, challenge id). */
  detail: Record<string, string>
}

export interface ChallengeParts {
  /** Header name → value to send with the 402. */
  headers: Record<string, string>
  /** x402 v1 JSON body fields (`x402Version`, `error`, `accepts`). */
  body: Record<string, unknown>
}

/** The EIP-3009 `TransferWithAuthorization` message a payer signed (x402 `exact`). */
export interface TransferAuthorization {
  from: Address
  to: Address
  value: bigint
  validAfter: bigint
  validBefore: bigint
  nonce: Hex
}

export type { Address, Hex }
