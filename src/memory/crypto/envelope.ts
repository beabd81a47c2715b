// AES-256-GCM envelopes of the memory service (docs: /work/shared/notes "A4. Encryption at rest").
//   field ciphertext: version(1)=1 | dek_version(2, BE) | nonce(12) | ciphertext | tag(16)
//     AAD mem|v1|owner:<owner>|record:<id>|field:<field>|dek:<ver>  (a ciphertext moved to another
//     row, field or owner fails to authenticate)
//   wrapped data key: version(1)=1 | nonce(12) | ciphertext(32) | tag(16)
//     AAD dek|v1|owner:<owner>|dek:<ver>|kek:<kekId>
// GCM is not key-committing, so the key is chosen by the header's dek_version and never by trial.
// Error messages name versions, fields and record ids only: never key bytes or plaintext.
import { createCipheriv, createDecipheriv, createSecretKey, hkdfSync, randomBytes, type KeyObject } from 'node:crypto'
import type { FieldCipher, FieldName, OwnerId, OwnerKeys } from '../types.ts'

export const KEY_BYTES = 32
export const ENVELOPE_VERSION = 1
const NONCE_BYTES = 12
const TAG_BYTES = 16
const FIELD_HEADER_BYTES = 1 + 2 + NONCE_BYTES
/** The shortest field ciphertext: header and tag around an empty plaintext. */
export const MIN_FIELD_CIPHERTEXT_BYTES = FIELD_HEADER_BYTES + TAG_BYTES
export const WRAPPED_DEK_BYTES = 1 + NONCE_BYTES + KEY_BYTES + TAG_BYTES
const HKDF_SALT = 'agent-gateway-memory'
const FIELDS: ReadonlySet<string> = new Set<FieldName>(['content', 'context', 'tags', 'metadata', 'vector'])

function checkKey(key: Uint8Array, what: string): void {
  if (key.length !== KEY_BYTES) throw new Error(`memory: ${what} must be ${KEY_BYTES} bytes, got ${key.length}`)
}

function checkDekVersion(dekVersion: number): void {
  if (!Number.isInteger(dekVersion) || dekVersion < 1 || dekVersion > 0xffff) throw new Error(`memory: dek_version must be an integer in 1..65535, got ${dekVersion}`)
}

// AAD parts are joined with '|': a part holding '|' could make two different bindings collide.
function checkPart(value: string, what: string): void {
  if (value.length === 0 || value.includes('|')) throw new Error(`memory: ${what} must be non-empty and free of '|'`)
}

function sealGcm(key: Uint8Array | KeyObject, aad: Buffer, plaintext: Uint8Array): { nonce: Buffer; body: Buffer; tag: Buffer } {
  const nonce = randomBytes(NONCE_BYTES)
  const cipher = createCipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_BYTES })
  cipher.setAAD(aad)
  const body = Buffer.concat([cipher.update(plaintext), cipher.final()])
  return { nonce, body, tag: cipher.getAuthTag() }
}

/** Throws `failure` (never the OpenSSL text) unless the tag authenticates. */
function openGcm(key: Uint8Array | KeyObject, aad: Buffer, nonce: Uint8Array, body: Uint8Array, tag: Uint8Array, failure: string): Buffer {
  // authTagLength pins the tag to 16 bytes: without it Node accepts a 4-byte tag (cheap forgeries).
  const decipher = createDecipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_BYTES })
  try {
    decipher.setAAD(aad)
    decipher.setAuthTag(tag)
    return Buffer.concat([decipher.update(body), decipher.final()])
  } catch {
    throw new Error(failure)
  }
}

export function fieldAad(owner: OwnerId, recordId: string, field: FieldName, dekVersion: number): Buffer {
  return Buffer.from(`mem|v1|owner:${owner}|record:${recordId}|field:${field}|dek:${dekVersion}`, 'utf8')
}

/** The field cipher of one owner's data key version, over its 32-byte `content` subkey. */
export function createFieldCipher(owner: OwnerId, dekVersion: number, contentKey: Uint8Array): FieldCipher {
  checkPart(owner, 'owner')
  checkDekVersion(dekVersion)
  checkKey(contentKey, 'the content key')
  // A KeyObject made once (a private copy: the caller may zero its buffer): OpenSSL imports raw
  // key bytes on every cipher call otherwise, which is most of a small field's cost.
  const key = createSecretKey(Buffer.from(contentKey))
  const check = (field: FieldName, recordId: string): void => {
    if (!FIELDS.has(field)) throw new Error(`memory: unknown encrypted field ${JSON.stringify(String(field))}`)
    checkPart(recordId, 'a record id')
  }
  return {
    dekVersion,
    encrypt(field, recordId, plaintext) {
      check(field, recordId)
      const { nonce, body, tag } = sealGcm(key, fieldAad(owner, recordId, field, dekVersion), plaintext)
      const header = Buffer.alloc(3)
      header.writeUInt8(ENVELOPE_VERSION, 0)
      header.writeUInt16BE(dekVersion, 1)
      return Buffer.concat([header, nonce, body, tag])
    },
    decrypt(field, recordId, ciphertext) {
      check(field, recordId)
      const where = `${field} of record ${recordId}`
      if (ciphertext.length < MIN_FIELD_CIPHERTEXT_BYTES) {
        throw new Error(`memory: ciphertext of ${where} is ${ciphertext.length} bytes, shorter than the ${MIN_FIELD_CIPHERTEXT_BYTES}-byte minimum (truncated)`)
      }
      const ct = Buffer.from(ciphertext.buffer, ciphertext.byteOffset, ciphertext.byteLength)
      const version = ct.readUInt8(0)
      if (version !== ENVELOPE_VERSION) throw new Error(`memory: ciphertext of ${where} has envelope version ${version}, expected ${ENVELOPE_VERSION}`)
      const stored = ct.readUInt16BE(1)
      // No trial decryption: the header names the data key, and only that key is tried.
      if (stored !== dekVersion) throw new Error(`memory: ciphertext of ${where} is under data key version ${stored}, this cipher holds version ${dekVersion}`)
      const nonce = ct.subarray(3, FIELD_HEADER_BYTES)
      const body = ct.subarray(FIELD_HEADER_BYTES, ct.length - TAG_BYTES)
      const tag = ct.subarray(ct.length - TAG_BYTES)
      const aad = fieldAad(owner, recordId, field, dekVersion)
      return openGcm(key, aad, nonce, body, tag, `memory: ciphertext of ${where} failed authentication (tampered, truncated, or not this owner's record and field)`)
    },
  }
}

export interface WrapBinding {
  owner: OwnerId
  dekVersion: number
  kekId: string
}

export function dekAad({ owner, dekVersion, kekId }: WrapBinding): Buffer {
  return Buffer.from(`dek|v1|owner:${owner}|dek:${dekVersion}|kek:${kekId}`, 'utf8')
}

function checkBinding(binding: WrapBinding): void {
  checkPart(binding.owner, 'owner')
  checkDekVersion(binding.dekVersion)
  checkPart(binding.kekId, 'the KEK id')
}

/** Wraps a 32-byte data key under a key-encryption key, bound to (owner, dek version, kek id). */
export function wrapDek(kek: Uint8Array, dek: Uint8Array, binding: WrapBinding): Buffer {
  checkKey(kek, 'a key-encryption key')
  checkKey(dek, 'a data key')
  checkBinding(binding)
  const { nonce, body, tag } = sealGcm(kek, dekAad(binding), dek)
  return Buffer.concat([Buffer.from([ENVELOPE_VERSION]), nonce, body, tag])
}

/** The data key inside `wrapped`; throws unless kek and the whole binding match the wrapping. */
export function unwrapDek(kek: Uint8Array, wrapped: Uint8Array, binding: WrapBinding): Buffer {
  checkKey(kek, 'a key-encryption key')
  checkBinding(binding)
  const what = `the data key of ${binding.owner} (dek ${binding.dekVersion}, kek ${binding.kekId})`
  if (wrapped.length !== WRAPPED_DEK_BYTES) throw new Error(`memory: ${what} is ${wrapped.length} bytes wrapped, expected ${WRAPPED_DEK_BYTES}`)
  const w = Buffer.from(wrapped.buffer, wrapped.byteOffset, wrapped.byteLength)
  if (w[0] !== ENVELOPE_VERSION) throw new Error(`memory: ${what} has envelope version ${w[0]}, expected ${ENVELOPE_VERSION}`)
  const nonce = w.subarray(1, 1 + NONCE_BYTES)
  const body = w.subarray(1 + NONCE_BYTES, 1 + NONCE_BYTES + KEY_BYTES)
  const tag = w.subarray(1 + NONCE_BYTES + KEY_BYTES)
  return openGcm(kek, dekAad(binding), nonce, body, tag, `memory: ${what} failed to unwrap (wrong key-encryption key, or the row was tampered with or moved)`)
}

function subkey(dek: Uint8Array, info: 'content' | 'blind-index' | 'dedupe'): Buffer {
  return Buffer.from(hkdfSync('sha256', dek, HKDF_SALT, info, KEY_BYTES))
}

/** Everything derived from one owner's data key: the field cipher and the two HMAC keys. */
export function deriveOwnerKeys(owner: OwnerId, dekVersion: number, dek: Uint8Array): OwnerKeys {
  checkKey(dek, 'a data key')
  const content = subkey(dek, 'content')
  const cipher = createFieldCipher(owner, dekVersion, content)
  content.fill(0) // the cipher keeps its own copy
  const keys: OwnerKeys = { owner, cipher, blindKey: subkey(dek, 'blind-index'), dedupeKey: subkey(dek, 'dedupe') }
  // A stray console.log / JSON.stringify / logger of the object shows the owner, never the keys.
  const redacted = () => ({ owner, dekVersion, keys: '[redacted]' })
  Object.defineProperties(keys, {
    blindKey: { enumerable: false },
    dedupeKey: { enumerable: false },
    toJSON: { value: redacted, enumerable: false },
    [Symbol.for('nodejs.util.inspect.custom')]: { value: () => `OwnerKeys ${JSON.stringify(redacted())}`, enumerable: false },
  })
  return keys
}
