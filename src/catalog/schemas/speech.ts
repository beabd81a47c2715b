// Speech generation (SPEC "POST /api/v1/audio/speech/speechmodel-3.1-flash-tts"; body and
// remaining result fields are "not shown" there and designed here, see docs).
import { Type } from '@sinclair/typebox'
import { StringEnum, UsdcAmount } from './common.ts'

export const SpeechRequest = Type.Object(
  {
    text: Type.String({ minLength: 1, maxLength: 5000, description: 'Text to speak, 1 to 5000 characters' }),
    voice: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'Voice name; the model default when omitted' })),
    speed: Type.Optional(Type.Number({ minimum: 0.5, maximum: 2, description: 'Speaking rate, 0.5 to 2 (1 = normal)' })),
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
    sampleRate: Type.Optional(Type.Literal(24000)),
    channels: Type.Optional(Type.Literal(1)),
  },
  { additionalProperties: false },
)
