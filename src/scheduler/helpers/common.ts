// Small pieces the helpers and siblings share: ids, strict base64, TypeBox checks that name the
// offending field, public file storage and serving.
import { randomBytes } from 'node:crypto'
import type { TSchema } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import type { FastifyReply } from 'fastify'
import type { BlobStore } from '../../platform/blobs.ts'
import type { Clock } from '../../platform/clock.ts'
import type { Db, Queryable } from '../../platform/db/index.ts'
import { AppError } from '../../platform/errors.ts'

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567'
const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789'

/** `prefix` + `length` random lowercase base32 characters (URL-, file- and DNS-safe). */
export function randomId(prefix: string, length = 20): string {
  let out = prefix
  for (const byte of randomBytes(length)) out += BASE32[byte & 31]
  return out
}

/** A short case-sensitive code (62^8 ≈ 2.2e14 values). */
export function shortCode(length = 8): string {
  let out = ''
  // 248 = 4 x 62: rejecting bytes above keeps every character equally likely.
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < 248 && out.length < length) out += BASE62[byte % 62]
    }
  }
  return out
}

/** Strict standard base64 (padding optional) → bytes, or undefined when it is not base64. */
export function decodeBase64(value: string): Buffer | undefined {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(value)) return undefined
  const padded = value.length % 4 === 0 ? value : value + '='.repeat(4 - (value.length % 4))
  if (padded.length % 4 !== 0 || value.length % 4 === 1) return undefined
  const bytes = Buffer.from(padded, 'base64')
  return bytes.toString('base64') === padded ? bytes : undefined
}

/**
 * Checks `value` against a TypeBox schema; the first problem is a VALIDATION_ERROR naming the
 * field as `${prefix}.a.b` (the way the HTTP layer names fields).
 */
export function check<T extends TSchema>(schema: T, value: unknown, prefix = 'body'): asserts value is import('@sinclair/typebox').Static<T> {
  if (Value.Check(schema, value)) return
  const first = Value.Errors(schema, value).First()
  const field = prefix + (first?.path ?? '').replaceAll('/', '.')
  throw new AppError('VALIDATION_ERROR', `${field} ${first?.message ?? 'is invalid'}`, { field })
}

export const CONTENT_TYPE_PATTERN = '^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,63}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,63}( *; *[A-Za-z0-9_.-]+=[A-Za-z0-9_.\\-"]+){0,4}$'
const CONTENT_TYPE = new RegExp(CONTENT_TYPE_PATTERN)

export function isContentType(value: string): boolean {
  return value.length <= 255 && CONTENT_TYPE.test(value)
}

/** One file name segment: letters, digits, `.`, `_`, `-`, starting with a letter or digit. */
export const FILE_NAME_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'

export function publicUrl(base: string, path: string): string {
  return `${base.replace(/\/+$/, '')}/${path}`
}

export interface PublicFileDeps {
  db: Db | Queryable
  blobs: BlobStore
  clock: Clock
  publicSchedulerUrl: string
}

export interface PublishedFile {
  path: string
  url: string
  bytes: number
  content_type: string
}

/**
 * Stores `data` under `path` (the blob key and the URL path below {scheduler_url}) and records it
 * as public. Re-publishing a path replaces the file.
 */
export async function publishFile(
  deps: PublicFileDeps,
  file: { path: string; taskId: string; runId: string | null; kind: 'cdn' | 'artifact' | 'screenshot'; name: string; contentType: string; data: Buffer; stable?: boolean },
): Promise<PublishedFile> {
  await deps.blobs.put(file.path, file.data, file.contentType)
  const now = deps.clock.now()
  await deps.db.query(
    `insert into scheduler_public_files (path, task_id, run_id, kind, name, content_type, bytes, stable, created_at, updated_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)
     on conflict (path) do update set run_id = excluded.run_id, content_type = excluded.content_type, bytes = excluded.bytes, updated_at = excluded.updated_at`,
    [file.path, file.taskId, file.runId, file.kind, file.name, file.contentType, file.data.length, file.stable === true, now],
  )
  return { path: file.path, url: publicUrl(deps.publicSchedulerUrl, file.path), bytes: file.data.length, content_type: file.contentType }
}

/**
 * Answers GET of a public file: 404 unless a row makes `path` public and its blob exists. User
 * content is served with nosniff and a sandbox CSP: an uploaded HTML page cannot run script on
 * the scheduler's origin.
 */
export async function sendPublicFile(deps: Pick<PublicFileDeps, 'db' | 'blobs'>, reply: FastifyReply, path: string, cacheControl: string): Promise<FastifyReply> {
  const rows = await deps.db.query('select 1 from scheduler_public_files where path = $1', [path])
  const blob = rows.length === 0 ? undefined : await deps.blobs.get(path)
  if (blob === undefined) throw new AppError('not_found', `No file at /${path}`)
  return reply
    .code(200)
    .header('content-type', blob.contentType)
    .header('content-length', String(blob.bytes))
    .header('x-content-type-options', 'nosniff')
    .header('content-security-policy', 'sandbox')
    .header('cache-control', cacheControl)
    .send(blob.data)
}
