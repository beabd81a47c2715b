// x402 `payment-identifier` (specs/extensions/payment_identifier.md): the client's id in a v2
// PaymentPayload's extensions makes a paid request idempotent. The id is claimed with a unique
// insert before anything is verified against the reservation table or charged, so replicas racing
// with one id cannot both charge; the first successful answer is kept (encrypted) for at least 24 h
// and replayed to a retry of the same request by the same payer. v1 payloads have no extensions.
import { createCipheriv, createDecipheriv, createHash, createHmac, randomBytes, randomUUID } from 'node:crypto'
import type { PaymentPayload } from '@x402/core/types'
import { extractPaymentIdentifier, isValidPaymentId, PAYMENT_IDENTIFIER, PAYMENT_ID_MAX_LENGTH, PAYMENT_ID_MIN_LENGTH } from '@x402/extensions/payment-identifier'
import type { FastifyRequest } from 'fastify'
import { canonicalJson } from '../../platform/canonical-json.ts'
import type { Db } from '../../platform/db/index.ts'
import { AppError } from '../../platform/errors.ts'
import { credentialsOf, paymentCredential, type HeaderBag } from '../credentials.ts'
import { PaymentRejected } from '../types.ts'
import { decodeX402Proof } from './decode.ts'
import { transferWithAuthorizationDigest } from './eip712.ts'
import { recoverSigner } from './recover.ts'

export const PAYMENT_ID_FIELD = `header.payment-signature.extensions.${PAYMENT_IDENTIFIER}.info.id`
/** How long a completed id is remembered (the extension asks for "at least 24 hours"). */
export const PAYMENT_ID_TTL_MS = 24 * 60 * 60_000
/** An in-flight claim not renewed for this long belongs to a dead request and may be taken over (= the guard's reserved-stale). */
export const PAYMENT_ID_LEASE_MS = 10 * 60_000
/** Headers of a paid answer not worth replaying (hop-by-hop, per-response). */
const SKIPPED_HEADERS = new Set(['content-length', 'connection', 'transfer-encoding', 'date', 'set-cookie', 'keep-alive', 'x-request-id', 'vary'])

export interface PaymentIdentifierRead {
  id: string
  /** The address the payload's EIP-3009 signature recovers to (lowercase). */
  payer: string
}

/**
 * The payment id of the request's x402 v2 payload, with the payer its signature proves; undefined
 * without one (no credential, MPP, v1, no extension, or a proof the guard will refuse anyway: not
 * signed by `from`, or not paying `payTo`, so an authorization made out to someone else never
 * proves the payer). A present but malformed id is a 400 naming the field.
 */
export function readPaymentIdentifier(headers: HeaderBag, payTo?: string): PaymentIdentifierRead | undefined {
  const credential = paymentCredential(credentialsOf(headers))
  if (credential?.protocol !== 'x402') return undefined
  let proof: ReturnType<typeof decodeX402Proof>
  try {
    proof = decodeX402Proof(credential.value.trim())
  } catch (error) {
    if (error instanceof PaymentRejected) return undefined
    throw error
  }
  if (proof.version !== 2) return undefined
  const payload = proof.payload as PaymentPayload
  // Clients echo our declaration as it is when they send no id: that is "no id", not a bad one.
  const info = (payload.extensions?.[PAYMENT_IDENTIFIER] as { info?: { id?: unknown } } | undefined)?.info
  if (info?.id === undefined) return undefined
  const id = typeof info.id === 'string' ? extractPaymentIdentifier(payload, false) : null
  if (id === null || !isValidPaymentId(id)) {
    throw new AppError('payment_identifier_invalid', `The payment identifier must be ${PAYMENT_ID_MIN_LENGTH}-${PAYMENT_ID_MAX_LENGTH} characters of A-Z, a-z, 0-9, "-" and "_"`, {
      field: PAYMENT_ID_FIELD,
    })
  }
  if (payTo !== undefined && proof.authorization.to.toLowerCase() !== payTo.toLowerCase()) return undefined
  const signer = recoverSigner(transferWithAuthorizationDigest(proof.authorization), Buffer.from(proof.signature.slice(2), 'hex'))
  if (signer === null || signer !== proof.authorization.from.toLowerCase()) return undefined
  return { id, payer: signer }
}

/** What makes two requests "the same": operation, concrete path and query, canonical body, price header. */
export function requestFingerprint(request: FastifyRequest, route: string): string {
  const body = request.body
  const canonical = body === undefined || body === null ? 'null' : Buffer.isBuffer(body) ? `b64:${body.toString('base64')}` : canonicalJson(body)
  const amount = credentialsOf(request.headers).payAmount
  const parts = [route, request.url, createHash('sha256').update(canonical).digest('hex'), amount ? (amount.valid ? amount.micros.toString() : amount.raw) : '']
  return createHash('sha256').update(parts.join('\n')).digest('hex')
}

/** The answer kept for replays. `body` is the serialized payload; null = not replayable (not JSON). */
export interface StoredResponse {
  status: number
  headers: Record<string, string>
  body: string | null
}

export type ClaimOutcome =
  | {
      kind: 'claimed'
      /** Keeps the answer; `replayKey`: the payment's spend key (a payment that fails later frees the id). */
      complete(response: StoredResponse, replayKey?: string | null): Promise<void>
      release(): Promise<void>
    }
  | { kind: 'replay'; response: StoredResponse }
  | { kind: 'in_progress' }
  | { kind: 'conflict'; reason: 'other_request' | 'other_payer' }

export interface PaymentIdentifiers {
  claim(input: { id: string; fingerprint: string; payer: string; operationId: string }): Promise<ClaimOutcome>
  /** Deletes expired rows; returns how many. */
  sweep(): Promise<number>
}

export interface PaymentIdentifierOptions {
  db: Db
  /** Secret the stored answers are encrypted under (a key is derived from it). */
  secret: string
  ttlMs?: number
  leaseMs?: number
}

/** Header values of a reply worth replaying. */
export function replayableHeaders(headers: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [name, value] of Object.entries(headers)) {
    const lower = name.toLowerCase()
    // CORS headers answer the retry's own origin, not the first request's.
    if (SKIPPED_HEADERS.has(lower) || lower.startsWith('access-control-') || value === undefined) continue
    out[lower] = Array.isArray(value) ? value.join(', ') : String(value)
  }
  return out
}

export function createPaymentIdentifiers(options: PaymentIdentifierOptions): PaymentIdentifiers {
  const { db } = options
  const ttlSec = (options.ttlMs ?? PAYMENT_ID_TTL_MS) / 1000
  const leaseSec = (options.leaseMs ?? PAYMENT_ID_LEASE_MS) / 1000
  const renewMs = Math.max(50, (options.leaseMs ?? PAYMENT_ID_LEASE_MS) / 3)
  // Stored answers may hold secrets (a task's details, a memory): AES-256-GCM, bound to the id.
  const key = createHmac('sha256', options.secret).update('x402 payment-identifier responses').digest()

  function seal(id: string, response: StoredResponse): string {
    const iv = randomBytes(12)
    const cipher = createCipheriv('aes-256-gcm', key, iv).setAAD(Buffer.from(id))
    const data = Buffer.concat([cipher.update(JSON.stringify(response)), cipher.final()])
    return Buffer.concat([iv, cipher.getAuthTag(), data]).toString('base64')
  }

  function open(id: string, sealed: string): StoredResponse | undefined {
    try {
      const raw = Buffer.from(sealed, 'base64')
      const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, 12)).setAAD(Buffer.from(id))
      decipher.setAuthTag(raw.subarray(12, 28))
      return JSON.parse(Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8')) as StoredResponse
    } catch {
      // Sealed under a secret that was rotated away: the answer is gone, the payment is not.
      return undefined
    }
  }

  async function take(id: string, fingerprint: string, payer: string, operationId: string, token: string): Promise<boolean> {
    // New id, an expired row, or an in-flight claim of the same request whose lease ran out
    // (its request died): taken atomically, so exactly one request holds the id.
    const rows = await db.query(
      `insert into payment_identifiers (payment_id, fingerprint, payer, operation_id, state, claim_token, lease_until, expires_at)
       values ($1, $2, $3, $4, 'in_flight', $5, now() + make_interval(secs => $6), now() + make_interval(secs => $6 + $7))
       on conflict (payment_id) do update set fingerprint = excluded.fingerprint, payer = excluded.payer, operation_id = excluded.operation_id,
           state = 'in_flight', claim_token = excluded.claim_token, lease_until = excluded.lease_until, expires_at = excluded.expires_at,
           response = null, status = null, created_at = now(), completed_at = null
         where payment_identifiers.expires_at < now()
            or (payment_identifiers.state = 'in_flight' and payment_identifiers.lease_until < now()
                and payment_identifiers.fingerprint = excluded.fingerprint and payment_identifiers.payer = excluded.payer)
       returning claim_token`,
      [id, fingerprint, payer, operationId, token, leaseSec, ttlSec],
    )
    return rows.length === 1
  }

  return {
    async claim({ id, fingerprint, payer, operationId }) {
      // A row released between our insert and our read: try again (bounded).
      for (let attempt = 0; attempt < 3; attempt += 1) {
        const token = randomUUID()
        if (await take(id, fingerprint, payer, operationId, token)) {
          let done = false
          // The lease is renewed while this request runs, so only a dead request's claim lapses
          // (a slow one, e.g. a long generation, keeps it and cannot be charged twice).
          const renew = setInterval(() => {
            db.query(`update payment_identifiers set lease_until = now() + make_interval(secs => $3) where payment_id = $1 and claim_token = $2`, [id, token, leaseSec]).catch(
              () => undefined,
            )
          }, renewMs)
          renew.unref()
          return {
            kind: 'claimed',
            async complete(response, replayKey) {
              if (done) return
              done = true
              clearInterval(renew)
              await db.query(
                `update payment_identifiers set state = 'completed', status = $3, response = $4, completed_at = now(),
                        expires_at = now() + make_interval(secs => $5), claim_token = null, replay_key = $6
                  where payment_id = $1 and claim_token = $2`,
                [id, token, response.status, seal(id, response), ttlSec, replayKey ?? null],
              )
            },
            async release() {
              if (done) return
              done = true
              clearInterval(renew)
              await db.query(`delete from payment_identifiers where payment_id = $1 and claim_token = $2`, [id, token])
            },
          }
        }
        const rows = await db.query<{ fingerprint: string; payer: string; state: string; response: string | null; payment_state: string | null }>(
          `select i.fingerprint, i.payer, i.state, i.response, r.state as payment_state
             from payment_identifiers i left join payment_reservations r on r.replay_key = i.replay_key
            where i.payment_id = $1`,
          [id],
        )
        const row = rows[0]
        if (!row) continue
        if (row.payer !== payer) return { kind: 'conflict', reason: 'other_payer' }
        if (row.fingerprint !== fingerprint) return { kind: 'conflict', reason: 'other_request' }
        if (row.state === 'in_flight') return { kind: 'in_progress' }
        if (row.payment_state === 'released' || row.payment_state === 'reversed') {
          // Answered while its settlement was pending (or settled, then dropped by the chain for
          // good), and the payment failed after all (its work was reversed): nothing was bought,
          // so the id is free again.
          await db.query(`delete from payment_identifiers where payment_id = $1 and state = 'completed'`, [id])
          continue
        }
        const response = row.response ? open(id, row.response) : undefined
        return { kind: 'replay', response: response ?? { status: 0, headers: {}, body: null } }
      }
      return { kind: 'in_progress' }
    },
    async sweep() {
      const rows = await db.query(`delete from payment_identifiers where expires_at < now() returning payment_id`)
      return rows.length
    },
  }
}
