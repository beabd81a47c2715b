// client-node's API errors (ApiException: the HTTP code, the metav1.Status as raw text) as the
// ResourceStore port's errors: 404 → NotFoundError, 409 → ConflictError('AlreadyExists' |
// 'Conflict'), 410 → GoneError, the mapping the Postgres backend makes too.
import { ConflictError, GoneError, NotFoundError } from '../../src/scheduler/contract/index.ts'
import { isRecord, type Json } from './json.ts'

/** The HTTP status and metav1.Status of a client-node ApiException (its body is the raw text). */
export function apiStatus(err: unknown): { code: number; reason?: string; message?: string } | undefined {
  if (!isRecord(err) || typeof err.code !== 'number') return undefined
  let body: Json = err.body
  if (typeof body === 'string') {
    try {
      body = JSON.parse(body)
    } catch {
      body = undefined
    }
  }
  const status = isRecord(body) ? body : {}
  return {
    code: err.code,
    ...(typeof status.reason === 'string' ? { reason: status.reason } : {}),
    ...(typeof status.message === 'string' ? { message: status.message } : {}),
  }
}

/** Maps 404/409/410 to the port's errors; anything else is returned unchanged. */
export function toStoreError(err: unknown): unknown {
  const status = apiStatus(err)
  if (status === undefined) return err
  if (status.code === 404) return new NotFoundError(status.message ?? 'not found')
  if (status.code === 409) return new ConflictError(status.reason === 'AlreadyExists' ? 'AlreadyExists' : 'Conflict', status.message)
  if (status.code === 410) return new GoneError(status.message)
  return err
}

export function isNotFound(err: unknown): boolean {
  return apiStatus(err)?.code === 404 || err instanceof NotFoundError
}

/** `call`, rejecting with the port's error (toStoreError) instead of the ApiException. */
export async function mapped<T>(call: Promise<T>): Promise<T> {
  try {
    return await call
  } catch (err) {
    throw toStoreError(err)
  }
}
