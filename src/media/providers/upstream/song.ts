// The song provider backed by an upstream song model over HTTP.
//
// Wire contract (POST {url}, one request per candidate):
//   Authorization: Bearer <apiKey>   (only when a key is configured; only to {url}'s origin)
//   Content-Type: application/json
//   Accept: audio/*, application/json
//   Idempotency-Key: <uuid>          one per candidate, the same on every retry of it, so an
//                                    upstream that honours it generates once however often we ask
//   { "model": string,                      configured model; omitted when none is configured
//     "prompt": string,
//     "negative_prompt": string,
//     "seed": integer,                      the candidate's seed
//     "top_p": number, "temperature": number,
//     "duration_sec": integer,              30 to 300
//     "instrumental": boolean,
//     "tail_reserve_sec": integer,
//     "sections": [{ "name", "start_sec", "end_sec", "description", "intensity" }],
//     "reference_image_urls": [string],
//     "instrumental_lead_mapping": [{ "role", "instrument", "register", "articulation" }],
//     "instrumental_lead_continuity": "sectional" | "persistent",
//     "target_bpm": number }
//   Members (top-level and nested) whose value is undefined are omitted, never sent as null.
// Answer (2xx), either:
//   - the audio itself, any non-JSON Content-Type (the bytes decide: MP3, WAV, FLAC or Ogg), or
//   - application/json { "audio_base64": string (a data: URL prefix is tolerated)
//                        | "audio_url": http(s) URL, fetched with GET,
//                        "mime_type"?: string (ignored: the bytes decide),
//                        "seed"?: integer (reported instead of ours), "model"?: string }.
//   An audio_url on {url}'s origin is fetched like {url} (with the key). Any other origin gets
//   no key and must resolve to a public address (no loopback, private, link-local/metadata or
//   reserved address; checked after resolution, connection pinned to the checked address, no
//   redirects) unless its host:port is in `audioUrlAllow` or `allowPrivateAudioUrls` (tests) is set.
// Errors: see http.ts (timeout → 'timeout'; 4xx/5xx/network/size → 'upstream', retried per its
// policy); JSON that does not parse or names no audio, or a refused audio_url → 'upstream';
// bytes that are not audio (or base64 that does not decode) → 'invalid_audio'. The POST and the
// audio_url GET share one deadline.
import { randomUUID } from 'node:crypto'
import { egressPolicy, guardedFetch, resolveTarget } from '../../../platform/egress.ts'
import { GenerationError, type GeneratedAudio, type SongGenerationRequest, type SongProvider } from '../../types.ts'
import { callUpstream, hostPort, redact, type UpstreamHttp, type UpstreamHttpOptions, type UpstreamResponse, upstreamHttp } from './http.ts'
import { sniffAudio } from './sniff.ts'

export const DEFAULT_SONG_MODEL = 'songmodel-3-pro'

export interface UpstreamSongOptions extends UpstreamHttpOptions {
  /** The generation endpoint, POSTed as is. */
  url: string
  /** Sent as `model` and reported; default: not sent, reported as songmodel-3-pro (unless the upstream names its model). */
  model?: string | undefined
  /** Fetch audio_url on any address, loopback included (tests); default false. */
  allowPrivateAudioUrls?: boolean | undefined
  /** `host:port` pairs of audio_url exempt from the address rule (an operator's internal file store). */
  audioUrlAllow?: readonly string[] | undefined
}

/** The JSON body for one generation (undefined members are dropped by JSON.stringify). */
export function songRequestBody(request: SongGenerationRequest, model: string | undefined): Record<string, unknown> {
  return {
    model,
    prompt: request.prompt,
    negative_prompt: request.negativePrompt,
    seed: request.seed,
    top_p: request.topP,
    temperature: request.temperature,
    duration_sec: request.durationSec,
    instrumental: request.instrumental,
    tail_reserve_sec: request.tailReserveSec,
    sections: request.sections?.map((s) => ({ name: s.name, start_sec: s.startSec, end_sec: s.endSec, description: s.description, intensity: s.intensity })),
    reference_image_urls: request.referenceImageUrls,
    instrumental_lead_mapping: request.instrumentalLeadMapping?.map((m) => ({ role: m.role, instrument: m.instrument, register: m.register, articulation: m.articulation })),
    instrumental_lead_continuity: request.instrumentalLeadContinuity,
    target_bpm: request.targetBpm,
  }
}

export function createUpstreamSongProvider(options: UpstreamSongOptions): SongProvider {
  const endpoint = new URL(options.url).toString()
  const origin = new URL(endpoint).origin
  const http = upstreamHttp(options)
  const model = options.model || DEFAULT_SONG_MODEL
  const policy = egressPolicy({ allow: options.audioUrlAllow ?? [] })
  const publicFetch = guardedFetch(policy, { timeoutMs: http.timeoutMs, maxResponseBytes: http.maxBytes })

  async function fetchAudioUrl(raw: string, signal: AbortSignal, deadline: number): Promise<UpstreamResponse> {
    let url: URL
    try {
      url = new URL(raw)
    } catch {
      throw new GenerationError('upstream', `${hostPort(endpoint)} returned an audio_url that is not a URL`)
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new GenerationError('upstream', `${hostPort(endpoint)} returned an audio_url with scheme ${url.protocol.slice(0, 16)}; only http and https are fetched`)
    }
    const own = url.origin === origin
    if (!own && !options.allowPrivateAudioUrls) {
      // Refused up front (not retried); guardedFetch checks again and pins the checked address.
      try {
        await resolveTarget(policy, url.hostname, Number(url.port) || (url.protocol === 'https:' ? 443 : 80))
      } catch (err) {
        throw new GenerationError('upstream', `audio_url refused: ${redact((err as Error).message, http.apiKey)}`)
      }
    }
    return callUpstream(http, {
      method: 'GET',
      url: url.toString(),
      headers: { accept: 'audio/*' },
      authorize: own,
      signal,
      deadline,
      ...(own || options.allowPrivateAudioUrls ? {} : { fetch: publicFetch }),
    })
  }

  return {
    kind: 'upstream',
    model,
    async generate(request: SongGenerationRequest): Promise<GeneratedAudio> {
      const deadline = http.now() + http.deadlineMs
      const response = await callUpstream(http, {
        method: 'POST',
        url: endpoint,
        json: songRequestBody(request, options.model || undefined),
        headers: { accept: 'audio/*, application/json', 'idempotency-key': randomUUID() },
        authorize: true,
        signal: request.signal,
        deadline,
      })
      if (!isJson(response)) return { bytes: response.body, mimeType: sniffAudio(response.body, hostPort(endpoint)), model, seed: request.seed }
      const answer = parseAnswer(response.body, hostPort(endpoint), http)
      const seed = answer.seed ?? request.seed
      const reported = answer.model ?? model
      if (answer.audioBase64 !== undefined) {
        const bytes = decodeBase64(answer.audioBase64, hostPort(endpoint))
        return { bytes, mimeType: sniffAudio(bytes, hostPort(endpoint)), model: reported, seed }
      }
      const audio = await fetchAudioUrl(answer.audioUrl!, request.signal, deadline)
      return { bytes: audio.body, mimeType: sniffAudio(audio.body, `audio_url on ${hostPort(answer.audioUrl!)}`), model: reported, seed }
    },
  }
}

function isJson(response: UpstreamResponse): boolean {
  const type = (response.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase()
  return type === 'application/json' || type.endsWith('+json')
}

interface Answer {
  audioBase64?: string
  audioUrl?: string
  seed?: number
  model?: string
}

function parseAnswer(body: Buffer, where: string, http: UpstreamHttp): Answer {
  let value: unknown
  try {
    value = JSON.parse(body.toString('utf8'))
  } catch {
    throw new GenerationError('upstream', `${where} returned JSON that does not parse (${body.length} bytes)`)
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new GenerationError('upstream', `${where} returned JSON that is not an object`)
  const v = value as Record<string, unknown>
  const answer: Answer = {}
  if (typeof v.audio_base64 === 'string' && v.audio_base64 !== '') answer.audioBase64 = v.audio_base64
  else if (typeof v.audio_url === 'string' && v.audio_url !== '') answer.audioUrl = v.audio_url
  else {
    const error = typeof v.error === 'string' ? v.error : typeof (v.error as { message?: unknown })?.message === 'string' ? (v.error as { message: string }).message : ''
    throw new GenerationError('upstream', `${where} returned JSON with neither audio_base64 nor audio_url${error ? `: ${redact(error, http.apiKey).slice(0, 300)}` : ''}`)
  }
  if (Number.isSafeInteger(v.seed)) answer.seed = v.seed as number
  if (typeof v.model === 'string' && v.model.trim() !== '' && v.model.length <= 200) answer.model = v.model.trim()
  return answer
}

function decodeBase64(text: string, where: string): Buffer {
  const payload = text.replace(/^data:[^,]*;base64,/i, '').replace(/\s+/g, '')
  // Buffer.from ignores junk characters; refuse them instead of decoding a fragment.
  if (!/^[A-Za-z0-9+/_-]*={0,2}$/.test(payload) || payload.length % 4 === 1) {
    throw new GenerationError('invalid_audio', `${where} returned audio_base64 that is not base64`)
  }
  return Buffer.from(payload, payload.includes('-') || payload.includes('_') ? 'base64url' : 'base64')
}
