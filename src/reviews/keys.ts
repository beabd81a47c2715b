// Keys of review sessions, all derived from one master key so nothing secret is stored per review:
// the share capability (the reviewer's URL: the review id plus its MAC, checked without a database
// read) and the Standard Webhooks secret that signs the callback. Several master keys may be
// configured for a rotation: the first signs and mints, every one is still accepted.
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import type { Db } from '../platform/db/index.ts'
import { generatedOnce } from '../platform/db/service-meta.ts'

const MIN_SECRET_BYTES = 32
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
/** base64url of 16 id bytes + 32 MAC bytes: 48 bytes, no padding. */
const CAPABILITY_RE = /^[A-Za-z0-9_-]{64}$/

/**
 * The master keys, active first: REVIEWS_SECRET_KEY (comma-separated secrets of at least 32 bytes
 * each, the first active, the others older ones kept during a rotation; each becomes its SHA-256),
 * or, unset, one 32-byte key generated once and kept in service_meta.
 */
export async function reviewsMasterKeys(db: Db, configured: string | undefined): Promise<Buffer[]> {
  if (configured) {
    const secrets = configured.split(',').map((s) => s.trim())
    if (secrets.some((s) => Buffer.byteLength(s) < MIN_SECRET_BYTES)) {
      throw new RangeError(`REVIEWS_SECRET_KEY: every comma-separated secret must be at least ${MIN_SECRET_BYTES} bytes`)
    }
    return secrets.map((s) => createHash('sha256').update(s).digest())
  }
  return [Buffer.from(await generatedOnce(db, 'reviews_secret_key', () => randomBytes(32).toString('base64url')), 'base64url')]
}

export interface ReviewKeys {
  /** The share capability of a review: 64 base64url characters. */
  capability(reviewId: string): string
  /** The review id (lower-case uuid) a capability grants, or undefined for anything else. */
  reviewIdOf(capability: string): string | undefined
  /** The `whsec_…` secret that signs the review's callback (under the active key). */
  webhookSecret(reviewId: string): string
  /** The review's secret under every master key, active first (one signature each during a rotation). */
  webhookSecrets(reviewId: string): string[]
}

function uuidBytes(reviewId: string): Buffer {
  const id = reviewId.toLowerCase()
  if (!UUID_RE.test(id)) throw new TypeError('review id must be a uuid')
  return Buffer.from(id.replaceAll('-', ''), 'hex')
}

function uuidString(bytes: Buffer): string {
  const h = bytes.toString('hex')
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`
}

export function createReviewKeys(masterKeys: Buffer[]): ReviewKeys {
  if (masterKeys.length === 0) throw new RangeError('at least one reviews master key is needed')
  for (const key of masterKeys) if (key.length !== 32) throw new RangeError('a reviews master key must be 32 bytes')
  // Separate keys per purpose, derived from each master key.
  const derive = (master: Buffer, purpose: string) => createHmac('sha256', master).update(purpose).digest()
  const capabilityKeys = masterKeys.map((k) => derive(k, 'share-capability'))
  const webhookKeys = masterKeys.map((k) => derive(k, 'webhook-secret'))
  const mac = (key: Buffer, id: Buffer) => createHmac('sha256', key).update(id).digest()
  const secret = (key: Buffer, reviewId: string) => `whsec_${createHmac('sha256', key).update(reviewId.toLowerCase()).digest('base64')}`

  return {
    capability(reviewId) {
      const id = uuidBytes(reviewId)
      return Buffer.concat([id, mac(capabilityKeys[0]!, id)]).toString('base64url')
    },
    reviewIdOf(capability) {
      if (typeof capability !== 'string' || !CAPABILITY_RE.test(capability)) return undefined
      const raw = Buffer.from(capability, 'base64url')
      // 64 characters decode to 48 bytes exactly, so the encoding is canonical: one id, one string.
      if (raw.length !== 48) return undefined
      const id = raw.subarray(0, 16)
      const given = raw.subarray(16)
      // Every key is tried (no early exit), so the time does not tell which one matched.
      let valid = false
      for (const key of capabilityKeys) valid = timingSafeEqual(given, mac(key, id)) || valid
      return valid ? uuidString(id) : undefined
    },
    webhookSecret(reviewId) {
      return secret(webhookKeys[0]!, reviewId)
    },
    webhookSecrets(reviewId) {
      return webhookKeys.map((key) => secret(key, reviewId))
    },
  }
}
