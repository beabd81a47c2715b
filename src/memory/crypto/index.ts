// The memory service's keys and ciphers: field envelopes, key rings, per-owner data keys, KEK rotation.
export {
  createFieldCipher,
  dekAad,
  deriveOwnerKeys,
  ENVELOPE_VERSION,
  fieldAad,
  KEY_BYTES,
  MIN_FIELD_CIPHERTEXT_BYTES,
  unwrapDek,
  WRAPPED_DEK_BYTES,
  type WrapBinding,
  wrapDek,
} from './envelope.ts'
export { addKeyToRingFile, EMBEDDED_RING_FILE, ensureEmbeddedKeyRing, fileKeyRing, KEK_ID_RE, newKekId, staticKeyRing } from './keyring.ts'
export { activeKekId, createOwnerKeyStore, kekOf, type OwnerKeyCache, type OwnerKeyStoreOptions } from './owner-keys.ts'
export { type RotateKekOptions, type RotateKekResult, rotateKek } from './rotate.ts'
