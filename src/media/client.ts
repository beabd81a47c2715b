// The gateway's way to the media role when it runs in another process (MEDIA_URL): the same
// MediaClient over HTTP, authenticated by a shared bearer (MEDIA_INTERNAL_TOKEN). The media role's
// problem answers (400 naming a field, 502/503/504, with their Retry-After) come back as the same AppError.
import { AppError, errorCatalogue, type ErrorCode } from '../platform/errors.ts'
import type { MediaClient } from './service.ts'
import type { SongOutcome } from './songs.ts'
import type { SpeechDelivery } from './speech.ts'

export const MEDIA_SONGS_PATH = '/internal/v1/songs'
export const MEDIA_SPEECH_PATH = '/internal/v1/speech'
/** `…/song` or `…/speech`: `{missing}`, why that kind cannot be made right now, or null. */
export const MEDIA_TOOLS_PATH = '/internal/v1/tools'
/** How long the gateway trusts the media role's answer about its tools. */
const TOOLS_TTL_MS = 10_000

export function createHttpMediaClient(options: { url: string; token: string; fetch?: typeof fetch }): MediaClient {
  const base = options.url.replace(/\/+$/, '')
  const send = options.fetch ?? fetch
  async function call<T>(path: string, body: unknown, signal: AbortSignal): Promise<T> {
    let response: Response
    try {
      response = await send(base + path, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${options.token}` },
        body: JSON.stringify(body),
        signal,
      })
    } catch (error) {
      signal.throwIfAborted()
      throw new AppError('media_unavailable', `the media role at ${base} cannot be reached; nothing was charged`, { cause: error })
    }
    const text = await response.text()
    if (response.ok) return JSON.parse(text) as T
    let problem: { code?: string; detail?: string; field?: string } = {}
    try {
      problem = JSON.parse(text) as typeof problem
    } catch {}
    const code = problem.code !== undefined && problem.code in errorCatalogue ? (problem.code as ErrorCode) : 'media_unavailable'
    const retryAfter = response.headers.get('retry-after')
    throw new AppError(code, problem.detail ?? `the media role answered ${response.status}; nothing was charged`, {
      ...(problem.field ? { field: problem.field } : {}),
      ...(retryAfter ? { headers: { 'retry-after': retryAfter } } : {}),
      status: code === 'media_unavailable' && response.status !== 503 ? 502 : response.status,
    })
  }
  const tools = new Map<string, { at: number; missing: Promise<string | undefined> }>()
  async function askTools(kind: 'song' | 'speech'): Promise<string | undefined> {
    try {
      const response = await send(`${base}${MEDIA_TOOLS_PATH}/${kind}`, { headers: { authorization: `Bearer ${options.token}` }, signal: AbortSignal.timeout(2_000) })
      if (!response.ok) return undefined
      return ((await response.json()) as { missing?: string | null }).missing ?? undefined
    } catch {
      // Unreachable now: the generation call itself answers 503 with nothing charged.
      return undefined
    }
  }
  return {
    songs: (order, signal) => call<SongOutcome>(MEDIA_SONGS_PATH, order, signal),
    speech: (order, signal) => call<SpeechDelivery>(MEDIA_SPEECH_PATH, order, signal),
    unavailable(kind) {
      const cached = tools.get(kind)
      if (cached && Date.now() - cached.at < TOOLS_TTL_MS) return cached.missing
      const missing = askTools(kind)
      tools.set(kind, { at: Date.now(), missing })
      return missing
    },
  }
}
