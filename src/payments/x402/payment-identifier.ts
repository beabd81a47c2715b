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
import { decodeX402Proof, x402ProofOf, type X402Proof } from './decode.ts'

export const PAYMENT_ID_FIELD = `header.payment-signature.extensions.${PAYMENT_IDENTIFIER}.info.id`
/** How long a completed id is remembered (the extension asks for "at least 24 hours"). */
export const PAYMENT_ID_TTL_MS = 24 * 60 * 60_000
/**
 * An in-flight claim not renewed for this long belongs to a dead request and may be taken over. A
 * takeover never charges twice whatever the lease (it asks the dead request's payment first), so
 * it is short: a buyer whose request died waits seconds, not the guard's stale windows.
 */
export const PAYMENT_ID_LEASE_MS = 30_000
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
  // Read leniently (trimmed); verification refuses a padded value, which no HTTP parser delivers.
  const value = credential.value.trim()
  let proof: X402Proof
  try {
    proof = value === credential.value ? x402ProofOf(credential) : decodeX402Proof(value)
  } catch (error) {
    if (error instanceof PaymentRejected) return undefined
    throw error
  }
  if (proof.version !== 2) return undefined
  const payload = proof.payload as PaymentPayload
  const extensions = payload.extensions as unknown
  if (extensions === undefined || extensions === null) return undefined
  if (!isRecord(extensions)) throw malformedExtension('header.payment-signature.extensions', 'extensions must be an object')
  const extension = extensions[PAYMENT_IDENTIFIER]
  if (extension === undefined) return undefined
  // A malformed extension is refused rather than read as "no id": the client meant one, and
  // charging it again on every retry is what the extension exists to prevent.
  if (!isRecord(extension)) throw malformedExtension(`header.payment-signature.extensions.${PAYMENT_IDENTIFIER}`, 'the payment-identifier extension must be an object')
  if (extension.info !== undefined && !isRecord(extension.info)) {
    throw malformedExtension(`header.payment-signature.extensions.${PAYMENT_IDENTIFIER}.info`, "the payment-identifier extension's info must be an object")
  }
  // Clients echo our declaration as it is when they send no id: that is "no id", not a bad one.
  const info = extension.info as { id?: unknown } | undefined
  if (info?.id === undefined) return undefined
  const id = typeof info.id === 'string' ? extractPaymentIdentifier(payload, false) : null
  if (id === null || !isValidPaymentId(id)) {
    throw new AppError('payment_identifier_invalid', `The payment identifier must be ${PAYMENT_ID_MIN_LENGTH}-${PAYMENT_ID_MAX_LENGTH} characters of A-Z, a-z, 0-9, "-" and "_"`, {
      field: PAYMENT_ID_FIELD,
    })
  }
  if (payTo !== undefined && proof.authorization.to.toLowerCase() !== payTo.toLowerCase()) return undefined
  const signer = proof.signer()
  if (signer === null || signer !== proof.authorization.from.toLowerCase()) return undefined
  return { id, payer: signer }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function malformedExtension(field: string, detail: string): AppError {
  return new AppError('payment_identifier_invalid', `${detail} (see the 402's extensions["${PAYMENT_IDENTIFIER}"])`, { field })
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

export interface HeldIdentifier {
  kind: 'claimed'
  /**
   * Binds the claim to the payment it reserved (its spend key), before any work: whoever takes a
   * dead claim over then asks that payment, so a retry never pays for what was bought already.
   * False when the claim was taken over meanwhile (this request no longer owns the id).
   */
  link(replayKey: string): Promise<boolean>
  /** Keeps the answer about to be delivered, before the payment settles: a takeover after a crash replays it. */
  prepare(response: StoredResponse): Promise<void>
  /** Keeps the answer; `replayKey`: the payment's spend key (a payment that fails later frees the id). */
  complete(response: StoredResponse, replayKey?: string | null): Promise<void>
  /** The request is over without a delivered paid answer: the id is free once its payment is known not to go through. */
  release(): Promise<void>
}

export type ClaimOutcome =
  | HeldIdentifier
  | { kind: 'replay'; response: StoredResponse }
  /** `deciding`: the request that held the id died with its payment in flight; the reconciler decides it. */
  | { kind: 'in_progress'; deciding: boolean }
  | { kind: 'conflict'; reason: 'other_request' | 'other_payer' }

export interface PaymentIdentifiers {
  claim(input: { id: string; fingerprint: string; payer: string; operationId: string }): Promise<ClaimOutcome>
  /**
   * Deletes expired rows; returns how many. `orphanedBefore`: every request before this instant is
   * known dead (the embedded default's data-dir lock), so its in-flight claims lapse now.
   */
  sweep(options?: { orphanedBefore?: Date | undefined }): Promise<number>
}

/** A paid answer that cannot be given again (not JSON, sealed under a rotated key, or never prepared). */
const NOT_REPLAYABLE: StoredResponse = { status: 0, headers: {}, body: null }
/** Reservation states whose payment failed or never left: the id is free again. */
const UNPAID = new Set(['released', 'reversed'])
/**
 * A lease that has ended for every later reading: `now()` is the transaction's start and PGlite's
 * clock ticks in milliseconds, so a lease set to `now()` could still read as live in the next query.
 */
const LAPSED = "now() - interval '1 second'"
/** Reservation states still being decided (settling, broadcast, dropped and being re-landed). */
const DECIDING = new Set(['settling', 'pending', 'reorged'])

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
    // A new id or an expired row: taken atomically, so exactly one request holds the id.
    const rows = await db.query(
      `insert into payment_identifiers (payment_id, fingerprint, payer, operation_id, state, claim_token, lease_until, expires_at)
       values ($1, $2, $3, $4, 'in_flight', $5, now() + make_interval(secs => $6), now() + make_interval(secs => $6 + $7))
       on conflict (payment_id) do update set fingerprint = excluded.fingerprint, payer = excluded.payer, operation_id = excluded.operation_id,
           state = 'in_flight', claim_token = excluded.claim_token, lease_until = excluded.lease_until, expires_at = excluded.expires_at,
           response = null, status = null, replay_key = null, created_at = now(), completed_at = null
         where payment_identifiers.expires_at < now()
       returning claim_token`,
      [id, fingerprint, payer, operationId, token, leaseSec, ttlSec],
    )
    return rows.length === 1
  }

  type Takeover = { kind: 'claimed' } | { kind: 'replay'; response: StoredResponse } | { kind: 'deciding' } | { kind: 'changed' }

  /**
   * The claim of a request that died (its lease lapsed), taken over by a retry of the same request
   * only after asking the payment the dead request linked: one that never left or failed frees the
   * id; one still reserved is released first (the dead request can no longer bind work to it); one
   * being decided waits for the reconciler; one that went through completes the id with the answer
   * the dead request prepared, which the retry gets instead of paying again.
   */
  async function takeOver(id: string, fingerprint: string, payer: string, token: string): Promise<Takeover> {
    return db.transaction(async (tx) => {
      const [row] = await tx.query<{ state: string; lapsed: boolean; fingerprint: string; payer: string; replay_key: string | null; response: string | null }>(
        `select state, lease_until < now() as lapsed, fingerprint, payer, replay_key, response from payment_identifiers where payment_id = $1 for update`,
        [id],
      )
      if (row?.state !== 'in_flight' || !row.lapsed || row.fingerprint !== fingerprint || row.payer !== payer) return { kind: 'changed' }
      let paymentState: string | undefined
      if (row.replay_key !== null) {
        const [payment] = await tx.query<{ state: string }>(`select state from payment_reservations where replay_key = $1 for update`, [row.replay_key])
        paymentState = payment?.state
        if (paymentState === 'reserved') {
          await tx.query(`update payment_reservations set state = 'released', updated_at = now() where replay_key = $1 and state = 'reserved'`, [row.replay_key])
          paymentState = 'released'
        }
      }
      if (paymentState === undefined || UNPAID.has(paymentState)) {
        await tx.query(
          `update payment_identifiers set claim_token = $2, lease_until = now() + make_interval(secs => $3), replay_key = null, response = null, status = null
            where payment_id = $1`,
          [id, token, leaseSec],
        )
        return { kind: 'claimed' }
      }
      if (DECIDING.has(paymentState)) return { kind: 'deciding' }
      // Paid: the work was bought. Its prepared answer is replayed from now on (none: not replayable).
      const response = row.response ? open(id, row.response) : undefined
      await tx.query(
        `update payment_identifiers set state = 'completed', status = $2, claim_token = null, completed_at = now(), expires_at = now() + make_interval(secs => $3)
          where payment_id = $1`,
        [id, response?.status ?? null, ttlSec],
      )
      return { kind: 'replay', response: response ?? NOT_REPLAYABLE }
    })
  }

  return {
    async claim({ id, fingerprint, payer, operationId }) {
      // A row released between our insert and our read: try again (bounded).
      for (let attempt = 0; attempt < 3; attempt += 1) {
        const token = randomUUID()
        if (await take(id, fingerprint, payer, operationId, token)) return held(id, token)
        const rows = await db.query<{ fingerprint: string; payer: string; state: string; lapsed: boolean; response: string | null; payment_state: string | null }>(
          `select i.fingerprint, i.payer, i.state, i.lease_until < now() as lapsed, i.response, r.state as payment_state
             from payment_identifiers i left join payment_reservations r on r.replay_key = i.replay_key
            where i.payment_id = $1`,
          [id],
        )
        const row = rows[0]
        if (!row) continue
        if (row.payer !== payer) return { kind: 'conflict', reason: 'other_payer' }
        if (row.fingerprint !== fingerprint) return { kind: 'conflict', reason: 'other_request' }
        if (row.state === 'in_flight') {
          if (!row.lapsed) return { kind: 'in_progress', deciding: false }
          const takeover = await takeOver(id, fingerprint, payer, token)
          if (takeover.kind === 'claimed') return held(id, token)
          if (takeover.kind === 'replay') return takeover
          if (takeover.kind === 'deciding') return { kind: 'in_progress', deciding: true }
          continue
        }
        if (row.payment_state !== null && UNPAID.has(row.payment_state)) {
          // Answered while its settlement was pending (or settled, then dropped by the chain for
          // good), and the payment failed after all (its work was reversed): nothing was bought,
          // so the id is free again.
          await db.query(`delete from payment_identifiers where payment_id = $1 and state = 'completed'`, [id])
          continue
        }
        const response = row.response ? open(id, row.response) : undefined
        return { kind: 'replay', response: response ?? NOT_REPLAYABLE }
      }
      return { kind: 'in_progress', deciding: false }
    },
    async sweep(options = {}) {
      if (options.orphanedBefore !== undefined) {
        // A claim renewed before the instant every earlier request died lapses at once.
        await db.query(
          `update payment_identifiers set lease_until = ${LAPSED} where state = 'in_flight' and lease_until < $1::timestamptz + make_interval(secs => $2) and lease_until > now()`,
          [options.orphanedBefore, leaseSec],
        )
      }
      const rows = await db.query(`delete from payment_identifiers where expires_at < now() returning payment_id`)
      return rows.length
    },
  }

  /** The claim this request holds: its lease renewed while it runs, so only a dead request's lapses. */
  function held(id: string, token: string): HeldIdentifier {
    let done = false
    // A slow request (e.g. a long generation) keeps its claim and cannot be charged twice.
    // The last renewal is awaited before the claim ends, so one still in flight cannot land after
    // a release and hold the id for another lease.
    let renewal: Promise<unknown> = Promise.resolve()
    const renew = setInterval(() => {
      renewal = db
        .query(`update payment_identifiers set lease_until = now() + make_interval(secs => $3) where payment_id = $1 and claim_token = $2`, [id, token, leaseSec])
        .catch(() => undefined)
    }, renewMs)
    renew.unref()
    const stopRenewing = async () => {
      clearInterval(renew)
      await renewal
    }
    return {
      kind: 'claimed',
      async link(replayKey) {
        const rows = await db.query(`update payment_identifiers set replay_key = $3 where payment_id = $1 and claim_token = $2 returning 1`, [id, token, replayKey])
        return rows.length === 1
      },
      async prepare(response) {
        await db.query(`update payment_identifiers set response = $3, status = $4 where payment_id = $1 and claim_token = $2`, [id, token, seal(id, response), response.status])
      },
      async complete(response, replayKey) {
        if (done) return
        done = true
        await stopRenewing()
        await db.query(
          `update payment_identifiers set state = 'completed', status = $3, response = $4, completed_at = now(),
                  expires_at = now() + make_interval(secs => $5), claim_token = null, replay_key = coalesce($6, replay_key)
            where payment_id = $1 and claim_token = $2`,
          [id, token, response.status, seal(id, response), ttlSec, replayKey ?? null],
        )
      },
      async release() {
        if (done) return
        done = true
        await stopRenewing()
        // Unlinked, nothing was paid: the id is free. Linked, the request failed (a dependency
        // down mid-request) with its payment perhaps already settling, which the reconciler may
        // still land: the claim lapses instead, and a retry takes it over as from a dead request
        // (a payment that never left frees the id, one being decided waits, a paid one replays).
        await db.query(`delete from payment_identifiers where payment_id = $1 and claim_token = $2 and replay_key is null`, [id, token])
        await db.query(`update payment_identifiers set lease_until = ${LAPSED} where payment_id = $1 and claim_token = $2`, [id, token])
      },
    }
  }
}
