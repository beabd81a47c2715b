// x402 (`exact`, USDC on Base) for the 402 gateway: challenge → decode → local verify.
export {
  PAYMENT_REQUIRED_HEADER,
  X402_DEFAULT_ERROR,
  X402_DEFAULT_MAX_TIMEOUT_SECONDS,
  X402_MIME_TYPE,
  x402Challenge,
  x402PaymentRequiredV2,
  x402RequirementsV1,
  x402RequirementsV2,
} from './challenge.ts'
export type { X402ChallengeOptions } from './challenge.ts'
export {
  MAX_PROOF_HEADER_LENGTH,
  PAYMENT_SIGNATURE_HEADER,
  X_PAYMENT_HEADER,
  decodeProofJson,
  decodeX402Proof,
  x402ProofOf,
} from './decode.ts'
export type { X402Proof, X402ProofHeader } from './decode.ts'
export {
  BASE_CHAIN_ID,
  TRANSFER_WITH_AUTHORIZATION_TYPES,
  USDC_DOMAIN,
  transferWithAuthorizationDigest,
  transferWithAuthorizationDigestHex,
} from './eip712.ts'
export type { TransferAuthorization } from './eip712.ts'
export { recoverSigner, recoveryBackend, recoveryBackends } from './recover.ts'
export type { RecoverPublicKey, RecoveryBackendName } from './recover.ts'
export { VALID_BEFORE_MARGIN_SECONDS, verifyX402 } from './verify.ts'
export type { X402NonceChecker, X402Verified, X402VerifyOptions } from './verify.ts'
export { BAZAAR_BUDGET_BYTES, BAZAAR_KEY, bazaarDeclaration, bazaarFor, bazaarOutputSchemaV1, discoveryOf } from './bazaar.ts'
export { createOfferReceiptSigner, OFFER_RECEIPT_KEY, offerReceiptKeys, parseSigningKeys } from './offer-receipt.ts'
export type { OfferReceiptSigner } from './offer-receipt.ts'
export {
  createPaymentIdentifiers,
  PAYMENT_ID_FIELD,
  PAYMENT_ID_LEASE_MS,
  PAYMENT_ID_TTL_MS,
  readPaymentIdentifier,
  requestFingerprint,
} from './payment-identifier.ts'
export type { ClaimOutcome, PaymentIdentifiers, StoredResponse } from './payment-identifier.ts'
export { decodeHeaderJson, encodeHeaderJson } from './header-json.ts'
