// Speech: the provider's audio (any rate, any channels) delivered as WAV, 24 kHz mono 16-bit,
// stored before the answer names it. `seconds` is counted from the delivered samples.
import type { Static } from '@sinclair/typebox'
import type { SpeechRequest, SpeechResult } from '../catalog/schemas/speech.ts'
import type { Slots } from './slots.ts'
import type { BlobStore } from '../platform/blobs.ts'
import { AppError } from '../platform/errors.ts'
import { decodeToPcm, encodeWav16 } from './audio-io/ffmpeg.ts'
import { audioKeyFor, audioUrl } from './hosting.ts'
import { GenerationError, type SpeechProvider } from './types.ts'

export type SpeechOrder = Static<typeof SpeechRequest>
export type SpeechDelivery = Omit<Static<typeof SpeechResult>, 'price_usdc'>

export const SPEECH_SAMPLE_RATE = 24_000
const WAV_HEADER_BYTES = 44

export function createSpeechPipeline(deps: { provider: SpeechProvider; blobs: BlobStore; publicMediaUrl: string; generations: Slots }) {
  const { provider, blobs } = deps
  return {
    async synthesize(order: SpeechOrder, signal: AbortSignal): Promise<SpeechDelivery> {
      const voice = order.voice ?? provider.voices[0]
      if (voice === undefined || !provider.voices.includes(voice)) {
        throw new AppError('validation_error', `voice must be one of ${provider.voices.join(', ')}`, { field: 'body.voice' })
      }
      let wav: Buffer
      let model: string
      try {
        const audio = await deps.generations.run(signal, () => provider.synthesize({ text: order.input, voice, speed: order.speed ?? 1, signal }))
        model = audio.model
        const pcm = await decodeToPcm(audio.bytes, { signal })
        wav = await encodeWav16(pcm, { sampleRate: SPEECH_SAMPLE_RATE, channels: 1, signal })
      } catch (error) {
        signal.throwIfAborted()
        if (!(error instanceof GenerationError)) throw error
        const detail = `speech generation failed (${error.kind}): ${error.message}; nothing was charged`
        if (error.kind === 'timeout') throw new AppError('generation_timeout', detail)
        if (error.kind === 'unavailable') throw new AppError('media_unavailable', detail)
        throw new AppError('generation_failed', detail)
      }
      const key = audioKeyFor(wav, 'wav')
      await blobs.put(key, wav, 'audio/wav')
      const samples = (wav.length - WAV_HEADER_BYTES) / 2
      return {
        url: audioUrl(deps.publicMediaUrl, key),
        mimeType: 'audio/wav',
        sizeBytes: wav.length,
        seconds: Math.round((samples / SPEECH_SAMPLE_RATE) * 1000) / 1000,
        model,
        sampleRate: SPEECH_SAMPLE_RATE,
        channels: 1,
        voice,
        characters: [...order.input].length,
      }
    },
  }
}
