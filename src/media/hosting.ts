// Public hosting of generated audio: GET/HEAD <prefix>/audio/<sha256>.<mp3|wav> answers the blob
// of that key. Keys are content addresses (audioKeyFor), so a URL's bytes never change: the ETag is
// the hash itself and responses are cacheable forever. Only the audio/ namespace of the blob store
// is reachable; anything else (other namespaces, traversal attempts, NUL, names that are not a
// content address) is a 404 problem+json.
//
// Ranges (RFC 9110 §14): one `bytes=a-b`, `bytes=a-` or `bytes=-n` range of a GET is a 206 with
// Content-Range; a range that starts past the end (or any range of an empty file) is a 416 with
// `Content-Range: bytes */<size>`. A Range header we do not honour is ignored, as the RFC allows,
// and the whole file is a 200: several ranges (players ask for one), malformed values (`bytes=5-2`,
// `items=0-1`, junk), a Range on HEAD, or an If-Range that is not our ETag. If-None-Match wins over
// Range (304). Invalid percent-encoding in the URL is refused by the router before any route (400).
import { createHash } from 'node:crypto'
import { Type, type Static } from '@sinclair/typebox'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ProblemSchema } from '../catalog/schemas/common.ts'
import type { BlobStore } from '../platform/blobs.ts'
import { AppError } from '../platform/errors.ts'

export type AudioExtension = 'mp3' | 'wav'

/** The hosted keys: `audio/<sha256 hex of the bytes>.<extension>`. */
export const AUDIO_KEY_PATTERN = /^audio\/([0-9a-f]{64})\.(mp3|wav)$/

/** Content-addressed blob key of audio bytes. */
export function audioKeyFor(bytes: Buffer, extension: AudioExtension): string {
  return `audio/${createHash('sha256').update(bytes).digest('hex')}.${extension}`
}

/** Public URL of a hosted audio key (`<publicMediaUrl>/media/audio/<sha256>.<ext>`). */
export function audioUrl(publicMediaUrl: string, key: string, prefix = '/media'): string {
  if (!AUDIO_KEY_PATTERN.test(key)) throw new RangeError(`${JSON.stringify(key)} is not a hosted audio key (audio/<sha256>.<mp3|wav>)`)
  return `${publicMediaUrl.replace(/\/+$/, '')}${normalizePrefix(prefix)}/${key}`
}

export interface AudioHostingDeps {
  blobs: BlobStore
  /** URL path the audio is served under; default `/media`. */
  prefix?: string
}

const CACHE_CONTROL = 'public, max-age=31536000, immutable'
/** Longest Range value parsed; a longer one is ignored (a 200), never an error. */
const MAX_RANGE_HEADER = 200

const HostingParams = Type.Object({ '*': Type.String() })
const HostingHeaders = Type.Object(
  {
    range: Type.Optional(Type.String({ description: 'One byte range: bytes=a-b, bytes=a- or bytes=-n' })),
    'if-none-match': Type.Optional(Type.String()),
    'if-range': Type.Optional(Type.String()),
  },
  { additionalProperties: true },
)
const AudioBytes = Type.String({ description: 'The audio bytes (audio/mpeg or audio/wav)' })
const NotModified = Type.Null({ description: 'Not modified: no body' })

function normalizePrefix(prefix: string): string {
  const trimmed = prefix.replace(/\/+$/, '')
  if (!/^(\/[A-Za-z0-9._-]+)+$/.test(trimmed)) throw new RangeError(`hosting prefix ${JSON.stringify(prefix)} must be a path such as /media`)
  return trimmed
}

/** The blob key of a wildcard path, or undefined when it is not a hosted audio key. */
function audioKeyOf(path: unknown): string | undefined {
  return typeof path === 'string' && AUDIO_KEY_PATTERN.test(path) ? path : undefined
}

function notFound(prefix: string): AppError {
  return new AppError('not_found', `No hosted audio at this URL (audio lives at ${prefix}/audio/<sha256>.<mp3|wav>)`)
}

export type ByteRange = { start: number; end: number } | 'unsatisfiable' | undefined

/**
 * The range a Range header asks of a `size`-byte file: `{ start, end }` (end inclusive),
 * 'unsatisfiable' (416), or undefined when the header is to be ignored (200 with the whole file).
 */
export function parseRange(header: string | undefined, size: number): ByteRange {
  if (header === undefined || header.length > MAX_RANGE_HEADER) return undefined
  const match = /^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header)
  if (!match) return undefined // several ranges, another unit, or not a range at all
  const [, first = '', last = ''] = match
  if (first === '' && last === '') return undefined
  if (first === '') {
    // bytes=-n: the last n bytes; a suffix of 0 bytes (or any range of an empty file) is unsatisfiable.
    const suffix = Number(last)
    if (suffix === 0 || size === 0) return 'unsatisfiable'
    return { start: Math.max(0, size - suffix), end: size - 1 }
  }
  const start = Number(first)
  const end = last === '' ? Number.POSITIVE_INFINITY : Number(last)
  if (end < start) return undefined // invalid syntax: ignored
  if (start >= size) return 'unsatisfiable'
  return { start, end: Math.min(end, size - 1) }
}

/** If-None-Match against our strong ETag (weak comparison, RFC 9110 §13.1.2). */
function noneMatch(header: string, etag: string): boolean {
  return header.split(',').some((candidate) => {
    const tag = candidate.trim()
    return tag === '*' || tag === etag || tag === `W/${etag}`
  })
}

type HostingRequest = FastifyRequest<{ Params: Static<typeof HostingParams>; Headers: Static<typeof HostingHeaders> }>

export function registerAudioHosting(app: FastifyInstance, deps: AudioHostingDeps): void {
  const { blobs } = deps
  const prefix = normalizePrefix(deps.prefix ?? '/media')
  app.route<{ Params: Static<typeof HostingParams>; Headers: Static<typeof HostingHeaders> }>({
    method: ['GET', 'HEAD'],
    url: `${prefix}/*`,
    schema: {
      hide: true,
      params: HostingParams,
      headers: HostingHeaders,
      response: { 200: AudioBytes, 206: AudioBytes, 304: NotModified, 404: ProblemSchema, 416: ProblemSchema },
    } as object,
    // The key is checked before the platform's text checks (preValidation), so every path that
    // is not a hosted key, a NUL in it included, is the same 404.
    onRequest: async (request) => {
      if (audioKeyOf(request.params['*']) === undefined) throw notFound(prefix)
    },
    handler: (request, reply) => serve(blobs, prefix, request, reply),
  })
}

async function serve(blobs: BlobStore, prefix: string, request: HostingRequest, reply: FastifyReply): Promise<FastifyReply> {
  const key = audioKeyOf(request.params['*'])
  const hash = key === undefined ? undefined : AUDIO_KEY_PATTERN.exec(key)?.[1]
  if (key === undefined || hash === undefined) throw notFound(prefix)
  // Without stat (an adapter that lacks it) the whole blob is read once and sliced here.
  const whole = blobs.stat ? undefined : await blobs.get(key)
  const stat = blobs.stat ? await blobs.stat(key) : whole
  if (stat === undefined) throw notFound(prefix)
  const size = stat.bytes
  const etag = `"${hash}"`
  // Set on the answers below only, so a 404 or 416 problem never carries them.
  const cacheable = { etag, 'cache-control': CACHE_CONTROL, 'x-content-type-options': 'nosniff' }

  const ifNoneMatch = request.headers['if-none-match']
  if (ifNoneMatch !== undefined && noneMatch(ifNoneMatch, etag)) return reply.code(304).headers(cacheable).send()

  const ifRange = request.headers['if-range']
  const range = request.method === 'GET' && (ifRange === undefined || ifRange.trim() === etag) ? parseRange(request.headers.range, size) : undefined
  if (range === 'unsatisfiable') {
    throw new AppError('range_not_satisfiable', `The range is outside the file (${size} bytes)`, {
      field: 'header.range',
      headers: { 'content-range': `bytes */${size}`, 'accept-ranges': 'bytes' },
    })
  }
  const entity = { ...cacheable, 'accept-ranges': 'bytes', 'content-type': stat.contentType, 'content-disposition': 'inline' }
  if (range !== undefined) {
    const part = blobs.getRange ? await blobs.getRange(key, range.start, range.end) : whole && { data: whole.data.subarray(range.start, range.end + 1) }
    if (part === undefined) throw notFound(prefix)
    const end = range.start + part.data.length - 1
    return reply
      .code(206)
      .headers({ ...entity, 'content-range': `bytes ${range.start}-${end}/${size}`, 'content-length': String(part.data.length) })
      .send(part.data)
  }
  if (request.method === 'HEAD')
    return reply
      .code(200)
      .headers({ ...entity, 'content-length': String(size) })
      .send()
  const blob = whole ?? (await blobs.get(key))
  if (blob === undefined) throw notFound(prefix)
  return reply
    .code(200)
    .headers({ ...entity, 'content-length': String(blob.bytes) })
    .send(blob.data)
}
