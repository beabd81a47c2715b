// The speech provider backed by an OpenAI-compatible text-to-speech API.
//
// Wire contract: POST {url}/audio/speech ({url} is the API base, e.g. https://api.openai.com/v1)
//   Authorization: Bearer <apiKey> (when configured), Content-Type: application/json
//   { "model": string, "input": string, "voice": string, "speed": number, "response_format": "wav" }
// Answer (2xx): the audio bytes. Whatever the Content-Type, the bytes decide (WAV expected; MP3,
// FLAC, Ogg accepted); anything else → 'invalid_audio'. Errors and retries: see http.ts.
import { SPEECH_VOICES } from '../../../catalog/schemas/speech.ts'
import type { GeneratedAudio, SpeechGenerationRequest, SpeechProvider } from '../../types.ts'
import { callUpstream, hostPort, type UpstreamHttpOptions, upstreamHttp } from './http.ts'
import { sniffAudio } from './sniff.ts'

/** The voices of OpenAI-compatible speech APIs, as our request schema lists them. */
export const OPENAI_VOICES: readonly string[] = SPEECH_VOICES

export interface UpstreamSpeechOptions extends UpstreamHttpOptions {
  /** API base (…/v1); the provider POSTs to {url}/audio/speech. */
  url: string
  /** Default 'tts-1'. */
  model?: string | undefined
  /** Voices the upstream accepts, the first being the default; default OpenAI's. */
  voices?: readonly string[] | undefined
}

export function createUpstreamSpeechProvider(options: UpstreamSpeechOptions): SpeechProvider {
  const base = new URL(options.url).toString().replace(/\/+$/, '')
  const endpoint = `${base}/audio/speech`
  const http = upstreamHttp({ timeoutMs: 60_000, ...definedOnly(options) })
  const model = options.model || 'tts-1'
  const voices = Object.freeze([...(options.voices && options.voices.length > 0 ? options.voices : OPENAI_VOICES)])
  return {
    kind: 'upstream',
    model,
    voices,
    async synthesize(request: SpeechGenerationRequest): Promise<GeneratedAudio> {
      const response = await callUpstream(http, {
        method: 'POST',
        url: endpoint,
        json: { model, input: request.text, voice: request.voice, speed: request.speed, response_format: 'wav' },
        headers: { accept: 'audio/wav, audio/*' },
        authorize: true,
        signal: request.signal,
        deadline: http.now() + http.deadlineMs,
      })
      // Speech has no seed; 0 keeps GeneratedAudio's shape.
      return { bytes: response.body, mimeType: sniffAudio(response.body, hostPort(endpoint)), model, seed: 0 }
    },
  }
}

// So an explicit `timeoutMs: undefined` does not erase the speech default.
function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>
}
