// Decodes an x402 payment proof: the value of `PAYMENT-SIGNATURE` (v2) or `X-PAYMENT` (v1). The
// version comes from the decoded `x402Version`, not from the header name (a v2 payload sent in
// X-PAYMENT is v2). Anything that is not strict base64 of UTF-8 JSON of the right shape is
// `PaymentRejected('malformed')` (the guard answers 400). A request's credential is decoded once
// (x402ProofOf), and its signer recovered at most once: the payment-identifier read and the
// guard's verification share both.
import { PaymentPayloadV1Schema, PaymentPayloadV2Schema } from '@x402/core/schemas'
import type { PaymentPayload, PaymentRequirements, ResourceInfo } from '@x402/core/types'
import type { PaymentPayloadV1 } from '@x402/core/types/v1'
import type { Address, Hex } from 'viem'
import type { PaymentCredential } from '../credentials.ts'
import { PaymentRejected } from '../types.ts'
import { transferWithAuthorizationDigest, type TransferAuthorization } from './eip712.ts'
import { recoverSigner } from './recover.ts'

export const PAYMENT_SIGNATURE_HEADER = 'payment-signature'
export const X_PAYMENT_HEADER = 'x-payment'
/** Longest header value we decode (Node's whole header block defaults to 16 KiB). */
export const MAX_PROOF_HEADER_LENGTH = 16_384

export type X402ProofHeader = typeof PAYMENT_SIGNATURE_HEADER | typeof X_PAYMENT_HEADER

export interface X402Proof {
  version: 1 | 2
  /** Header it arrived in. */
  header: X402ProofHeader
  /** v1: top-level `scheme`; v2: `accepted.scheme`. */
  scheme: string
  /** v1: top-level `network` (`base`); v2: `accepted.network` (CAIP-2). */
  network: string
  authorization: TransferAuthorization
  /** `0x` + even number of hex digits (65 bytes for an EOA). */
  signature: Hex
  /** v2: the client's copy of the `accepts[]` entry it paid for. */
  accepted?: PaymentRequirements
  /** v2: the client's copy of the challenge's `resource` (not covered by the signature). */
  resource?: ResourceInfo
  /** The decoded payload (schema-parsed), as a facilitator's verify/settle expects it. */
  payload: PaymentPayload | PaymentPayloadV1
  /**
   * The address (lowercase) `signature` recovers to over `authorization`, or null when it is not a
   * valid low-s EOA signature. Recovered on the first call and remembered.
   */
  signer(): string | null
}

const ADDRESS_RE = /^0x[0-9a-fA-F]{40}$/
const BYTES32_RE = /^0x[0-9a-fA-F]{64}$/
const HEX_BYTES_RE = /^0x(?:[0-9a-fA-F]{2})+$/
const UINT_RE = /^(?:0|[1-9][0-9]{0,77})$/
const UINT256_MAX = (1n << 256n) - 1n
const utf8 = new TextDecoder('utf-8', { fatal: true })

function malformed(message: string): never {
  throw new PaymentRejected('malformed', message)
}

/** Strict base64 (standard alphabet, padded, canonical) → UTF-8 → JSON object. */
export function decodeProofJson(value: string): Record<string, unknown> {
  if (value.length === 0) malformed('empty payment header')
  if (value.length > MAX_PROOF_HEADER_LENGTH) malformed('payment header too long')
  if (value.length % 4 !== 0) malformed('payment header is not padded base64')
  const bytes = Buffer.from(value, 'base64')
  // Buffer skips characters outside the alphabet; re-encoding catches those and non-zero pad bits.
  if (bytes.toString('base64') !== value) malformed('payment header is not base64')
  let text: string
  try {
    text = utf8.decode(bytes)
  } catch {
    malformed('payment header is not UTF-8')
  }
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    malformed('payment header is not JSON')
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) malformed('payment header is not a JSON object')
  return json as Record<string, unknown>
}

function uint256(value: unknown, field: string): bigint {
  if (typeof value !== 'string' || !UINT_RE.test(value)) malformed(`authorization.${field} is not a decimal string`)
  const n = BigInt(value)
  if (n > UINT256_MAX) malformed(`authorization.${field} exceeds uint256`)
  return n
}

function evmPayload(payload: Record<string, unknown>): { authorization: TransferAuthorization; signature: Hex; signer: () => string | null } {
  const auth = payload.authorization
  if (auth === null || typeof auth !== 'object' || Array.isArray(auth)) malformed('payload.authorization missing')
  const a = auth as Record<string, unknown>
  if (typeof a.from !== 'string' || !ADDRESS_RE.test(a.from)) malformed('authorization.from is not an address')
  if (typeof a.to !== 'string' || !ADDRESS_RE.test(a.to)) malformed('authorization.to is not an address')
  if (typeof a.nonce !== 'string' || !BYTES32_RE.test(a.nonce)) malformed('authorization.nonce is not bytes32')
  const sig = payload.signature
  if (typeof sig !== 'string' || !HEX_BYTES_RE.test(sig)) malformed('payload.signature is not hex')
  const authorization: TransferAuthorization = {
    from: a.from as Address,
    to: a.to as Address,
    value: uint256(a.value, 'value'),
    validAfter: uint256(a.validAfter, 'validAfter'),
    validBefore: uint256(a.validBefore, 'validBefore'),
    nonce: a.nonce as Hex,
  }
  // Recovery is the costliest step of a paid call: done only when asked, and only once.
  let signer: string | null | undefined
  const recovered = () => {
    if (signer === undefined) signer = recoverSigner(transferWithAuthorizationDigest(authorization), Buffer.from(sig.slice(2), 'hex'))
    return signer
  }
  return { authorization, signature: sig as Hex, signer: recovered }
}

/** Decode one header value (either header) into a normalized proof. Throws PaymentRejected. */
export function decodeX402Proof(value: string, header: X402ProofHeader = PAYMENT_SIGNATURE_HEADER): X402Proof {
  const json = decodeProofJson(value)
  const version = json.x402Version
  if (version === 2) {
    const parsed = PaymentPayloadV2Schema.safeParse(json)
    if (!parsed.success) malformed(`not an x402 v2 payment payload: ${parsed.error.issues[0]?.path.join('.') ?? ''}`)
    const p = parsed.data
    const { authorization, signature, signer } = evmPayload(p.payload)
    const accepted = { ...p.accepted, extra: p.accepted.extra ?? {} } as PaymentRequirements
    return {
      version: 2,
      header,
      scheme: p.accepted.scheme,
      network: p.accepted.network,
      authorization,
      signature,
      accepted,
      ...(p.resource ? { resource: p.resource } : {}),
      payload: p as PaymentPayload,
      signer,
    }
  }
  if (version === 1) {
    const parsed = PaymentPayloadV1Schema.safeParse(json)
    if (!parsed.success) malformed(`not an x402 v1 payment payload: ${parsed.error.issues[0]?.path.join('.') ?? ''}`)
    const p = parsed.data
    const { authorization, signature, signer } = evmPayload(p.payload)
    return { version: 1, header, scheme: p.scheme, network: p.network, authorization, signature, payload: p as PaymentPayloadV1, signer }
  }
  if (typeof version === 'number') throw new PaymentRejected('unsupported_version', `x402Version ${version} is not supported`)
  malformed('x402Version missing')
}

// Keyed by the request's credential (credentialsOf keeps one per request): a refusal is kept
// too, so a malformed proof is not decoded again either.
const decoded = new WeakMap<PaymentCredential, X402Proof | PaymentRejected>()

/**
 * The request's x402 credential decoded, once per credential: every later call returns the same
 * proof (or throws the same PaymentRejected).
 */
export function x402ProofOf(credential: PaymentCredential): X402Proof {
  let outcome = decoded.get(credential)
  if (outcome === undefined) {
    try {
      outcome = decodeX402Proof(credential.value, credential.header === X_PAYMENT_HEADER ? X_PAYMENT_HEADER : PAYMENT_SIGNATURE_HEADER)
    } catch (error) {
      if (!(error instanceof PaymentRejected)) throw error
      outcome = error
    }
    decoded.set(credential, outcome)
  }
  if (outcome instanceof PaymentRejected) throw outcome
  return outcome
}
