// Speech generation (SPEC "POST /api/v1/audio/speech/speechmodel-3.1-flash-tts"; body and
// remaining result fields are "not shown" there and designed here, see docs).
import { Type } from '@sinclair/typebox'
import { StringEnum, UsdcAmount } from './common.ts'

/** Longest input, in characters (Unicode code points), as OpenAI-compatible speech APIs take. */
export const SPEECH_MAX_CHARACTERS = 4096
/** Voices, named as OpenAI-compatible speech APIs name them; the first is the default. */
export const SPEECH_VOICES = ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'nova', 'onyx', 'sage', 'shimmer'] as const

export const SpeechRequest = Type.Object(
  {
    input: Type.String({ minLength: 1, maxLength: SPEECH_MAX_CHARACTERS, description: `Text to speak, 1 to ${SPEECH_MAX_CHARACTERS} characters` }),
    voice: Type.Optional(StringEnum(SPEECH_VOICES, { default: 'alloy', description: 'Voice; alloy when omitted' })),
    speed: Type.Optional(Type.Number({ minimum: 0.5, maximum: 2, default: 1, description: 'Speaking rate, 0.5 to 2 (1 = normal)' })),
    format: Type.Optional(StringEnum(['wav'] as const, { default: 'wav', description: 'Audio container; only wav (24 kHz mono)' })),
  },
  { additionalProperties: false },
)

export const SpeechResult = Type.Object(
  {
    url: Type.String({ description: 'Hosted audio, WAV, 24 kHz mono' }),
    mimeType: Type.String({ description: 'audio/wav' }),
    sizeBytes: Type.Number(),
    seconds: Type.Number({ description: 'Duration in seconds' }),
    model: Type.String(),
    price_usdc: UsdcAmount,
    sampleRate: Type.Literal(24000),
    channels: Type.Literal(1),
    voice: Type.String({ description: 'Voice used' }),
    characters: Type.Integer({ minimum: 1, description: 'Characters spoken (the billed quantity)' }),
  },
  { additionalProperties: false },
)
