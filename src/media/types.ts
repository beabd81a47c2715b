// The media module's shared vocabulary: decoded audio, the Analysis object of the song result, and
// the provider ports that generate audio. DSP, providers, ranking and the pipeline all speak these.
import type { Static } from '@sinclair/typebox'
import type { InstrumentalLead, SongAnalysis, SongScore, SongSection } from '../catalog/schemas/songs.ts'

/** Decoded audio: planar float samples in [-1, 1], one array per channel, all the same length. */
export interface Pcm {
  sampleRate: number
  channels: Float32Array[]
}

/** The `Analysis` object of SPEC "Song result" (no extra properties). */
export type Analysis = Static<typeof SongAnalysis>
/** The `Score` object of SPEC "Song result". */
export type Score = Static<typeof SongScore>
export type SectionRequest = Static<typeof SongSection>
export type LeadMapping = Static<typeof InstrumentalLead>

/** Audio a provider produced, before any analysis. */
export interface GeneratedAudio {
  bytes: Buffer
  /** What the bytes are: audio/mpeg, audio/wav, audio/flac, audio/ogg. */
  mimeType: string
  /** Model that produced it (reported as the song result's `model`). */
  model: string
  /** Seed actually used (reported per candidate). */
  seed: number
}

/** One song generation as a provider sees it: our request, with the candidate's own seed. */
export interface SongGenerationRequest {
  prompt: string
  negativePrompt?: string | undefined
  seed: number
  topP?: number | undefined
  temperature?: number | undefined
  /** Target length, seconds (30 to 300). */
  durationSec: number
  instrumental: boolean
  tailReserveSec?: number | undefined
  sections?: SectionRequest[] | undefined
  referenceImageUrls?: string[] | undefined
  instrumentalLeadMapping?: LeadMapping[] | undefined
  instrumentalLeadContinuity?: 'sectional' | 'persistent' | undefined
  /** selectionTarget.bpm: a tempo the composer aims for (an upstream model may ignore it). */
  targetBpm?: number | undefined
  signal: AbortSignal
}

export interface SongProvider {
  /** 'offline' (the embedded composer) or 'upstream'. */
  readonly kind: 'offline' | 'upstream'
  readonly model: string
  generate(request: SongGenerationRequest): Promise<GeneratedAudio>
}

export interface SpeechGenerationRequest {
  text: string
  voice: string
  /** 0.5 to 2, 1 = normal. */
  speed: number
  signal: AbortSignal
}

export interface SpeechProvider {
  readonly kind: 'offline' | 'upstream'
  readonly model: string
  /** Voice names accepted in `voice`; the first is the default. */
  readonly voices: readonly string[]
  /** Audio of any rate and channel count; the pipeline delivers it as WAV 24 kHz mono 16-bit. */
  synthesize(request: SpeechGenerationRequest): Promise<GeneratedAudio>
}

/**
 * A generation that did not produce usable audio. `kind` decides the answer when every attempt
 * failed: timeout → 504, upstream/invalid_audio → 502, unavailable (a missing tool) → 503.
 */
export class GenerationError extends Error {
  readonly kind: 'timeout' | 'upstream' | 'invalid_audio' | 'unavailable'
  constructor(kind: GenerationError['kind'], message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'GenerationError'
    this.kind = kind
  }
}
