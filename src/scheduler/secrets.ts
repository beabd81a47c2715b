// Secrets of the scheduler: task env encrypted at rest (AES-256-GCM, a fresh 96-bit IV per write,
// the task id as associated data so a ciphertext cannot be moved to another task), and the
// one-way hashes of bearer secrets (webhook secrets, run tokens, account API keys) — only their
// SHA-256 is stored, a leaked table leaks no usable secret. Signed log URLs use HMAC-SHA256.
import { createCipheriv, createDecipheriv, createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import type { Db } from '../platform/db/index.ts'
import { generatedOnce } from '../platform/db/service-meta.ts'

const VERSION = 'v1'

export interface SchedulerSecrets {
  encryptEnv(taskId: string, env: Readonly<Record<string, string>>): string
  decryptEnv(taskId: string, sealed: string | null): Record<string, string>
  /** HMAC of a message (signed URLs). */
  sign(message: string): string
  verify(message: string, signature: string): boolean
}

/** The 32-byte master key: configured (SCHEDULER_SECRET_KEY), or generated once and kept in the database. */
export async function schedulerMasterKey(db: Db, configured: string | undefined): Promise<Buffer> {
  if (configured) return createHash('sha256').update(configured).digest()
  return Buffer.from(await generatedOnce(db, 'scheduler_secret_key', () => randomBytes(32).toString('base64url')), 'base64url')
}

export function createSchedulerSecrets(masterKey: Buffer): SchedulerSecrets {
  if (masterKey.length !== 32) throw new RangeError('the scheduler master key must be 32 bytes')
  // Separate keys per purpose, derived from the master key.
  const derive = (purpose: string) => createHmac('sha256', masterKey).update(purpose).digest()
  const envKey = derive('task-env')
  const macKey = derive('signed-urls')
  return {
    encryptEnv(taskId, env) {
      const iv = randomBytes(12)
      const cipher = createCipheriv('aes-256-gcm', envKey, iv)
      cipher.setAAD(Buffer.from(taskId))
      const body = Buffer.concat([cipher.update(JSON.stringify(env), 'utf8'), cipher.final()])
      return [VERSION, iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), body.toString('base64url')].join('.')
    },
    decryptEnv(taskId, sealed) {
      if (sealed === null || sealed === '') return {}
      const [version, iv, tag, body] = sealed.split('.')
      if (version !== VERSION || !iv || !tag || body === undefined) throw new Error('task env ciphertext has an unknown format')
      const decipher = createDecipheriv('aes-256-gcm', envKey, Buffer.from(iv, 'base64url'))
      decipher.setAAD(Buffer.from(taskId))
      decipher.setAuthTag(Buffer.from(tag, 'base64url'))
      const text = Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8')
      return JSON.parse(text) as Record<string, string>
    },
    sign(message) {
      return createHmac('sha256', macKey).update(message).digest('base64url')
    },
    verify(message, signature) {
      const expected = Buffer.from(createHmac('sha256', macKey).update(message).digest('base64url'))
      const given = Buffer.from(signature)
      return given.length === expected.length && timingSafeEqual(given, expected)
    },
  }
}

/** A new bearer secret with a readable prefix (`whsec_…`, `agk_…`, `run_…`). */
export function newBearerSecret(prefix: string): string {
  return `${prefix}${randomBytes(24).toString('base64url')}`
}

/** What is stored for a bearer secret: its SHA-256, hex. */
export function secretHash(secret: string): string {
  return createHash('sha256').update(secret).digest('hex')
}
