// The access layer's side of x402 payment-identifier (payment-identifier.ts is the store):
// claim the request's id before its payment is verified, answer a replay with the stored first
// answer, and capture a delivered paid answer for later retries.
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { CatalogOperation } from '../../catalog/openapi.ts'
import { AppError } from '../../platform/errors.ts'
import {
  PAYMENT_ID_FIELD,
  readPaymentIdentifier,
  replayableHeaders,
  requestFingerprint,
  type ClaimOutcome,
  type PaymentIdentifiers,
  type StoredResponse,
} from './payment-identifier.ts'

/**
 * Claims the request's x402 payment identifier, if it has one, before anything is reserved:
 * answers a replay (the stored first answer), 409 while the first is in flight or for another
 * request, or returns the claim this request must complete or release.
 */
export async function claimIdentifier(
  identifiers: PaymentIdentifiers | undefined,
  request: FastifyRequest,
  entry: CatalogOperation,
  payTo: string,
): Promise<ClaimOutcome | undefined> {
  if (!identifiers) return undefined
  const read = readPaymentIdentifier(request.headers, payTo)
  if (!read) return undefined
  const route = `${entry.spec.method} ${entry.spec.path}`
  const outcome = await identifiers.claim({ id: read.id, payer: read.payer, fingerprint: requestFingerprint(request, route), operationId: entry.spec.operationId })
  if (outcome.kind === 'in_progress') throw inProgress(outcome.deciding)
  if (outcome.kind === 'conflict') {
    throw new AppError(
      'payment_identifier_conflict',
      outcome.reason === 'other_payer'
        ? 'This payment identifier was used by another payer; generate a new one'
        : 'This payment identifier was used for a different request (route, path, query or body); generate a new one',
      { field: PAYMENT_ID_FIELD },
    )
  }
  return outcome
}

/** 409 to a retry while the request holding its id runs, or while the payment of one that died is decided. */
export function inProgress(deciding: boolean): AppError {
  return new AppError(
    'payment_in_progress',
    deciding
      ? 'The request that first used this payment identifier stopped while its payment was settling; the payment is being decided from the chain. Retry shortly: you get its answer if it was paid, or may pay again if it was not'
      : 'A request with this payment identifier is still being processed; retry shortly to get its answer',
    { field: PAYMENT_ID_FIELD, headers: { 'retry-after': '2' }, extensions: { retryable: true } },
  )
}

/** Sends the stored answer of an earlier paid request again: no payment is verified or taken. */
export function replayAnswer(reply: FastifyReply, response: StoredResponse): unknown {
  if (response.body === null || response.status === 0) {
    throw new AppError('payment_identifier_conflict', 'This payment identifier was already paid for, but its answer cannot be replayed; nothing was charged now', {
      field: PAYMENT_ID_FIELD,
    })
  }
  reply.code(response.status)
  for (const [name, value] of Object.entries(response.headers)) reply.header(name, value)
  if (reply.getHeader('content-type') === undefined) reply.header('content-type', 'application/json; charset=utf-8')
  reply.header('x-payment-identifier-replay', 'true')
  return response.body
}

/** What a later retry with the same payment identifier gets: this answer, serialized as sent. */
export function capturedAnswer(reply: FastifyReply, result: unknown): StoredResponse {
  let body: string | null = null
  if (typeof result === 'string') body = result
  else if (result !== undefined && !Buffer.isBuffer(result) && typeof (result as { pipe?: unknown } | null)?.pipe !== 'function') {
    try {
      const serialized = reply.serialize(result)
      body = typeof serialized === 'string' ? serialized : null
    } catch {
      body = null
    }
  }
  return { status: reply.statusCode, headers: replayableHeaders(reply.getHeaders()), body }
}
