// Song generation (SPEC "POST /api/v1/audio/songs/songmodel-3-pro" and "Song result").
import { Type } from '@sinclair/typebox'
import { MAX_SAFE_INTEGER, StringEnum, UsdcAmount } from './common.ts'

const Seed = (description?: string) => Type.Integer({ minimum: -MAX_SAFE_INTEGER, maximum: MAX_SAFE_INTEGER, ...(description ? { description } : {}) })
const Unit = (description?: string) => Type.Number({ minimum: 0, maximum: 1, ...(description ? { description } : {}) })

export const SongSection = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 64, description: 'Section name, e.g. intro, verse, chorus' }),
    startSec: Type.Integer({ minimum: 0, maximum: 300, description: 'Inclusive start, seconds' }),
    endSec: Type.Integer({ minimum: 1, maximum: 300, description: 'Exclusive end, seconds' }),
    description: Type.String({ minLength: 1, maxLength: 500 }),
    intensity: Type.Optional(Type.Integer({ minimum: 1, maximum: 10 })),
  },
  { additionalProperties: false },
)

export const Mastering = Type.Object(
  {
    targetLufs: Type.Number({ minimum: -24, maximum: -8, default: -14, description: 'Integrated loudness target, LUFS' }),
    truePeakDb: Type.Number({ minimum: -6, maximum: -0.1, default: -1, description: 'True-peak ceiling, dBTP' }),
    fadeOutSec: Type.Number({ minimum: 0, maximum: 10, default: 1, description: 'Fade-out length, seconds' }),
  },
  { additionalProperties: false, description: 'Master the audio; omit to return it unchanged. Missing members take their defaults.' },
)

const Weight = Type.Integer({ minimum: 1, maximum: 5 })

export const SelectionTarget = Type.Object(
  {
    bpm: Type.Optional(Type.Number({ minimum: 40, maximum: 240, description: 'Preferred tempo' })),
    matchPriorities: Type.Optional(
      Type.Object(
        {
          groove: Type.Optional(Weight),
          harmony: Type.Optional(Weight),
          structure: Type.Optional(Weight),
          production: Type.Optional(Weight),
          instrumentation: Type.Optional(Weight),
        },
        { additionalProperties: false, description: 'Integer weights 1 to 5' },
      ),
    ),
  },
  { additionalProperties: false, description: 'Ranking hints for choosing among candidates' },
)

export const InstrumentalLead = Type.Object(
  {
    role: StringEnum(['lead', 'harmony', 'response', 'ad-lib', 'sustained', 'ensemble'] as const),
    instrument: Type.String({ minLength: 1, maxLength: 80 }),
    register: Type.Optional(StringEnum(['low', 'mid', 'high', 'wide'] as const)),
    articulation: Type.Optional(Type.String({ minLength: 1, maxLength: 160 })),
  },
  { additionalProperties: false },
)

export const SongRequest = Type.Object(
  {
    prompt: Type.String({ minLength: 1, maxLength: 4000, description: 'What to make: genre, mood, instruments, lyrics or theme' }),
    // Required, as SPEC has it: no default is filled in, so an order always says how many songs it buys.
    candidateCount: Type.Integer({
      minimum: 1,
      maximum: 3,
      description: 'Songs to generate and rank (1 to 3; required: send 1 for a single song); each one is billed at the per-song price',
    }),
    seed: Type.Optional(Seed('Best-effort repeatability')),
    topP: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
    durationSec: Type.Optional(Type.Integer({ minimum: 30, maximum: 300, description: 'Target length in seconds, best effort' })),
    instrumental: Type.Optional(Type.Boolean({ description: 'true excludes vocals, speech, vocal chops and choir' })),
    negativePrompt: Type.Optional(Type.String({ minLength: 1, maxLength: 1000, description: 'Appended as exclusions' })),
    tailReserveSec: Type.Optional(Type.Integer({ minimum: 0, maximum: 15, description: 'Reserves the final seconds for non-essential decay' })),
    sections: Type.Optional(Type.Array(SongSection, { maxItems: 20, description: 'Ordered, non-overlapping arrangement sections (at most 20)' })),
    mastering: Type.Optional(Mastering),
    selectionTarget: Type.Optional(SelectionTarget),
    referenceImageUrls: Type.Optional(Type.Array(Type.String({ format: 'uri', maxLength: 2048 }), { maxItems: 10, description: 'Up to 10 public image URLs' })),
    instrumentalLeadMapping: Type.Optional(Type.Array(InstrumentalLead, { minItems: 1, maxItems: 8, description: 'Maps vocal functions onto instruments (1 to 8 items)' })),
    instrumentalLeadContinuity: Type.Optional(StringEnum(['sectional', 'persistent'] as const, { description: 'persistent reasserts the mapped lead after every transition' })),
  },
  { additionalProperties: false },
)

export const SongScore = Type.Object(
  {
    overall: Unit(),
    duration: Unit(),
    production: Unit(),
    groove: Type.Union([Unit(), Type.Null()]),
    structure: Type.Union([Unit(), Type.Null()]),
  },
  { additionalProperties: false },
)

export const SongAnalysis = Type.Object(
  {
    durationSec: Type.Number({ exclusiveMinimum: 0 }),
    tempo: Type.Object(
      {
        bpm: Type.Number({ exclusiveMinimum: 0 }),
        beatOffsetSec: Type.Number({ minimum: 0 }),
        beatIntervalSec: Type.Number({ exclusiveMinimum: 0 }),
        downbeatOffsetBeats: Type.Integer({ minimum: 0, maximum: 3 }),
        downbeatConfidence: Unit(),
      },
      { additionalProperties: false },
    ),
    brightness: Type.Array(Unit()),
    energy: Type.Array(Unit()),
    sections: Type.Array(
      Type.Object({ kind: Type.String(), startSec: Type.Number({ minimum: 0 }), endSec: Type.Number({ exclusiveMinimum: 0 }) }, { additionalProperties: false }),
    ),
    cues: Type.Object({ mixInSec: Type.Number({ minimum: 0 }), mixOutSec: Type.Number({ minimum: 0 }) }, { additionalProperties: false }),
    key: Type.Optional(
      Type.Object({ tonic: Type.String(), mode: StringEnum(['major', 'minor'] as const), camelot: Type.String(), confidence: Unit() }, { additionalProperties: false }),
    ),
    stereo: Type.Optional(Type.Object({ correlation: Type.Number({ minimum: -1, maximum: 1 }), sideToMidRatio: Type.Number({ minimum: 0 }) }, { additionalProperties: false })),
    loudness: Type.Optional(Type.Object({ integratedLufs: Type.Number(), rangeLu: Type.Number(), truePeakDb: Type.Number() }, { additionalProperties: false })),
  },
  { additionalProperties: false },
)

export const SongCandidate = Type.Object(
  {
    index: Type.Integer({ minimum: 0 }),
    url: Type.String(),
    sizeBytes: Type.Integer({ exclusiveMinimum: 0 }),
    seconds: Type.Number({ exclusiveMinimum: 0 }),
    seed: Type.Optional(Seed()),
    score: SongScore,
    diagnostics: SongAnalysis,
  },
  { additionalProperties: false },
)

export const SongResult = Type.Object(
  {
    url: Type.String({ description: 'Hosted MP3 of the selected song (the candidate judged objectively closest)' }),
    mimeType: Type.String({ description: 'Content type, audio/mpeg' }),
    sizeBytes: Type.Number(),
    seconds: Type.Number({ description: 'Approximate duration' }),
    model: Type.String(),
    price_usdc: UsdcAmount,
    candidates: Type.Optional(Type.Array(SongCandidate)),
    diagnostics: Type.Optional(Type.Object({ final: SongAnalysis, beforeMastering: Type.Optional(SongAnalysis) }, { additionalProperties: false })),
    selectionNotes: Type.Optional(Type.Array(Type.String())),
    selectionMethod: Type.Optional(Type.Literal('local-dsp')),
    selectedCandidate: Type.Optional(Type.Integer({ minimum: 0, description: 'Zero-based index of the selected candidate' })),
    generationFailures: Type.Optional(Type.Integer({ minimum: 0 })),
  },
  { additionalProperties: false },
)
