// The one outbound call of the upstream providers (global fetch, like the rest of the repo).
// - Each attempt runs under the caller's signal, a per-attempt timeout and the total deadline.
// - Retried, with exponential back-off and full jitter: network errors (refused, reset, truncated
//   body), attempt timeouts, 408, 429, 500, 502, 503, 504. A Retry-After on those is honoured when
//   it is within `retryAfterCapMs`; beyond the cap (a quota, not a blip) we stop. Other 4xx are
//   final: retrying cannot fix them. Redirects are followed (fetch drops Authorization across
//   origins).
// - No retry when a wait would end past the total deadline: the last failure is reported.
// - The body is streamed and cut off beyond `maxBytes`.
// - The API key travels only in the Authorization header; messages name the host:port, never the
//   URL (it may hold credentials) and never the key (redacted from anything the upstream echoes).
// Failures map to GenerationError: time ran out (attempt or deadline; also the caller's abort) →
// 'timeout'; anything else the upstream did → 'upstream'.
import { setTimeout as delay } from 'node:timers/promises'
import { GenerationError } from '../../types.ts'

export type Sleep = (ms: number, signal: AbortSignal) => Promise<void>

export interface UpstreamHttpOptions {
  apiKey?: string | undefined
  /** One attempt, including reading the body (default 120 s). */
  timeoutMs?: number | undefined
  /** Retries after the first attempt (default 2). */
  retries?: number | undefined
  /** All attempts and waits of one generation (default timeoutMs × attempts). */
  deadlineMs?: number | undefined
  /** Larger responses fail as 'upstream' (default 64 MiB). */
  maxBytes?: number | undefined
  /** Longest Retry-After we wait for (default 30 s). */
  retryAfterCapMs?: number | undefined
  /** First back-off ceiling (default 500 ms), doubled per retry up to `maxBackoffMs` (default 10 s). */
  baseBackoffMs?: number | undefined
  maxBackoffMs?: number | undefined
  fetch?: typeof fetch | undefined
  /** Back-off wait; tests inject one that does not wait. Must reject or return early when the signal aborts. */
  sleep?: Sleep | undefined
  /** Jitter source in [0, 1). */
  random?: (() => number) | undefined
  /** Clock for the total deadline (ms). */
  now?: (() => number) | undefined
}

export interface UpstreamHttp {
  readonly apiKey: string | undefined
  readonly timeoutMs: number
  readonly retries: number
  readonly deadlineMs: number
  readonly maxBytes: number
  readonly retryAfterCapMs: number
  readonly baseBackoffMs: number
  readonly maxBackoffMs: number
  readonly fetch: typeof fetch
  readonly sleep: Sleep
  readonly random: () => number
  readonly now: () => number
}

export interface UpstreamRequest {
  method: 'GET' | 'POST'
  url: string
  /** Serialized as the JSON body. */
  json?: unknown
  headers?: Record<string, string>
  /** Send the API key (only to the configured upstream, never to a URL it hands us). */
  authorize: boolean
  signal: AbortSignal
  /** Absolute time (per `now`) after which no attempt starts or continues; shared by the calls of one generation. */
  deadline: number
  /** Replaces the client's fetch for this call (the egress-guarded fetch of audio URLs). */
  fetch?: typeof fetch
}

export interface UpstreamResponse {
  status: number
  headers: Headers
  body: Buffer
}

const RETRYABLE_STATUSES = new Set([408, 429, 500, 502, 503, 504])
const ERROR_SNIPPET_BYTES = 2048

export function upstreamHttp(options: UpstreamHttpOptions = {}): UpstreamHttp {
  const timeoutMs = positive(options.timeoutMs, 120_000)
  const retries = Math.max(0, Math.floor(options.retries ?? 2))
  return {
    apiKey: options.apiKey || undefined,
    timeoutMs,
    retries,
    deadlineMs: positive(options.deadlineMs, timeoutMs * (retries + 1)),
    maxBytes: positive(options.maxBytes, 64 * 1024 * 1024),
    retryAfterCapMs: Math.max(0, options.retryAfterCapMs ?? 30_000),
    baseBackoffMs: Math.max(0, options.baseBackoffMs ?? 500),
    maxBackoffMs: Math.max(0, options.maxBackoffMs ?? 10_000),
    fetch: options.fetch ?? ((input, init) => fetch(input, init)),
    sleep: options.sleep ?? ((ms, signal) => delay(ms, undefined, { signal })),
    random: options.random ?? Math.random,
    now: options.now ?? Date.now,
  }
}

function positive(value: number | undefined, fallback: number): number {
  return value !== undefined && Number.isFinite(value) && value > 0 ? value : fallback
}

/** `host:port` of a URL: what messages may say about where a call went. */
export function hostPort(url: string): string {
  try {
    const u = new URL(url)
    return `${u.hostname}:${u.port || (u.protocol === 'https:' ? '443' : '80')}`
  } catch {
    return 'an invalid URL'
  }
}

/** `text` without the secret (and without control characters, so it stays one log line). */
export function redact(text: string, secret: string | undefined): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: stripping them is the point
  const flat = text.replace(/[\u0000-\u001f\u007f]+/g, ' ')
  return secret ? flat.split(secret).join('[redacted]') : flat
}

/** Milliseconds a Retry-After header asks for (delta-seconds or an HTTP date), or undefined. */
export function retryAfterMs(value: string | null, now: number): number | undefined {
  if (value === null || value.trim() === '') return undefined
  const trimmed = value.trim()
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000
  const at = Date.parse(trimmed)
  return Number.isNaN(at) ? undefined : Math.max(0, at - now)
}

interface Failure {
  error: GenerationError
  retry: boolean
  /** The upstream asked for this wait (Retry-After). */
  waitMs?: number | undefined
}

/** The call, retried per the policy above; resolves with a 2xx response and its whole body. */
export async function callUpstream(http: UpstreamHttp, request: UpstreamRequest): Promise<UpstreamResponse> {
  const where = hostPort(request.url)
  const headers: Record<string, string> = { 'user-agent': 'agent-gateway-media', ...request.headers }
  if (request.json !== undefined) headers['content-type'] = 'application/json'
  if (request.authorize && http.apiKey) headers.authorization = `Bearer ${http.apiKey}`
  const body = request.json === undefined ? undefined : JSON.stringify(request.json)
  const fetchImpl = request.fetch ?? http.fetch
  const attempts = http.retries + 1
  let last: Failure | undefined
  let made = 0
  for (let attempt = 1; attempt <= attempts; attempt++) {
    if (request.signal.aborted) throw aborted(request.signal, where)
    const remaining = request.deadline - http.now()
    if (remaining <= 0) throw last?.error.kind === 'upstream' ? last.error : new GenerationError('timeout', `${where}: the ${http.deadlineMs} ms deadline passed`)
    const attemptMs = Math.min(http.timeoutMs, remaining)
    made++
    const outcome = await attemptOnce(http, fetchImpl, request, { headers, body, where, attemptMs })
    if (!('error' in outcome)) return outcome
    last = outcome
    if (!outcome.retry || attempt === attempts) break
    const wait = backoff(http, attempt, outcome)
    if (wait instanceof GenerationError) throw wait
    if (http.now() + wait >= request.deadline) break
    try {
      await http.sleep(wait, request.signal)
    } catch {
      // An aborted wait: the check at the top of the loop reports it.
    }
  }
  if (request.signal.aborted) throw aborted(request.signal, where)
  const error = last!.error
  if (!last!.retry || made === 1) throw error
  throw new GenerationError(error.kind, `${error.message} (gave up after ${made} attempts)`, { cause: error.cause })
}

function backoff(http: UpstreamHttp, attempt: number, failure: Failure): number | GenerationError {
  if (failure.waitMs !== undefined) {
    if (failure.waitMs > http.retryAfterCapMs) {
      return new GenerationError('upstream', `${failure.error.message}; Retry-After ${Math.ceil(failure.waitMs / 1000)} s exceeds our ${http.retryAfterCapMs} ms cap`)
    }
    return failure.waitMs
  }
  const ceiling = Math.min(http.maxBackoffMs, http.baseBackoffMs * 2 ** (attempt - 1))
  return Math.floor(http.random() * ceiling)
}

function aborted(signal: AbortSignal, where: string): GenerationError {
  if (signal.reason instanceof GenerationError) return signal.reason
  return new GenerationError('timeout', `call to ${where} cancelled by the caller`, { cause: signal.reason })
}

interface Prepared {
  headers: Record<string, string>
  body: string | undefined
  where: string
  attemptMs: number
}

async function attemptOnce(http: UpstreamHttp, fetchImpl: typeof fetch, request: UpstreamRequest, p: Prepared): Promise<UpstreamResponse | Failure> {
  const timer = new AbortController()
  const timeout = setTimeout(() => timer.abort(), p.attemptMs)
  const signal = AbortSignal.any([request.signal, timer.signal])
  // Which signal fired decides the kind; the error fetch throws does not say.
  const failed = (err: unknown, what: string): Failure => {
    if (request.signal.aborted) return { error: aborted(request.signal, p.where), retry: false }
    if (timer.signal.aborted) return { error: new GenerationError('timeout', `${p.where} did not answer within ${p.attemptMs} ms`), retry: true }
    return { error: new GenerationError('upstream', `${what} ${p.where} failed: ${redact(networkReason(err), http.apiKey)}`, { cause: err }), retry: true }
  }
  try {
    let response: Response
    try {
      response = await fetchImpl(request.url, { method: request.method, headers: p.headers, body: p.body ?? null, signal })
    } catch (err) {
      return failed(err, 'connection to')
    }
    const ok = response.status >= 200 && response.status < 300
    const limit = ok ? http.maxBytes : ERROR_SNIPPET_BYTES
    const length = Number(response.headers.get('content-length'))
    if (ok && Number.isFinite(length) && length > limit) {
      await response.body?.cancel().catch(() => {})
      return { error: new GenerationError('upstream', `${p.where} announced ${length} bytes, more than the ${limit} byte cap`), retry: false }
    }
    let body: Buffer
    try {
      const read = await readCapped(response, limit, !ok)
      if (read === 'too-large') return { error: new GenerationError('upstream', `${p.where} sent more than the ${limit} byte cap`), retry: false }
      body = read
    } catch (err) {
      return failed(err, 'reading the response of')
    }
    if (ok) return { status: response.status, headers: response.headers, body }
    const snippet = redact(body.toString('utf8'), http.apiKey).trim().slice(0, 300)
    const error = new GenerationError('upstream', `${p.where} answered ${response.status}${snippet ? `: ${snippet}` : ''}`)
    if (!RETRYABLE_STATUSES.has(response.status)) return { error, retry: false }
    return { error, retry: true, waitMs: retryAfterMs(response.headers.get('retry-after'), http.now()) }
  } finally {
    clearTimeout(timeout)
  }
}

/** The body, or 'too-large' past `limit` (or its first `limit` bytes when `truncate`, for error snippets). */
async function readCapped(response: Response, limit: number, truncate: boolean): Promise<Buffer | 'too-large'> {
  if (!response.body) return Buffer.alloc(0)
  const reader = response.body.getReader()
  const chunks: Uint8Array[] = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    chunks.push(value)
    if (size > limit) {
      await reader.cancel().catch(() => {})
      if (!truncate) return 'too-large'
      return Buffer.concat(chunks).subarray(0, limit)
    }
  }
  return Buffer.concat(chunks)
}

/** The most specific reason of a fetch failure (undici wraps it: TypeError('fetch failed').cause). */
function networkReason(err: unknown): string {
  let current: unknown = err
  let reason = 'network error'
  for (let depth = 0; depth < 4 && current; depth++) {
    const e = current as { code?: unknown; message?: unknown; cause?: unknown }
    if (typeof e.code === 'string') {
      if (e.code === 'ECONNREFUSED') return 'connection refused (ECONNREFUSED)'
      if (e.code === 'ECONNRESET' || e.code === 'UND_ERR_SOCKET') return `connection reset (${e.code})`
      reason = typeof e.message === 'string' && e.message ? `${e.message} (${e.code})` : e.code
    } else if (typeof e.message === 'string' && e.message && e.message !== 'fetch failed') reason = e.message
    current = e.cause
  }
  return reason
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/** An upstream answer's body as a JSON object; anything else is `invalid(what it was)`. */
export function jsonObjectOf(body: Buffer, invalid: (what: string) => Error): Record<string, unknown> {
  let parsed: unknown
  try {
    parsed = JSON.parse(body.toString('utf8'))
  } catch {
    throw invalid(`a body that is not JSON (${body.length} bytes)`)
  }
  if (!isRecord(parsed)) throw invalid('JSON that is not an object')
  return parsed
}

/**
 * POSTs `json` to `url` with the upstream's key, under its retries and deadline, and returns the
 * body. A failed call (status, timeout, reset, size cap) reaches the caller as `failure(kind,
 * message)`, so each client keeps its own error type.
 */
export async function postJson(
  http: UpstreamHttp,
  request: { url: string; json: unknown; userAgent: string; signal: AbortSignal },
  failure: (kind: 'timeout' | 'upstream', message: string, cause: GenerationError) => Error,
): Promise<Buffer> {
  try {
    const response = await callUpstream(http, {
      method: 'POST',
      url: request.url,
      json: request.json,
      headers: { accept: 'application/json', 'user-agent': request.userAgent },
      authorize: true,
      signal: request.signal,
      deadline: http.now() + http.deadlineMs,
    })
    return response.body
  } catch (err) {
    if (err instanceof GenerationError) throw failure(err.kind === 'timeout' ? 'timeout' : 'upstream', err.message, err)
    throw err
  }
}
