// The plan the offline composer produces (MusicalPlan: what midi.ts writes and the provider reports)
// and the Style the arrangement and harmony work from. Shared by composer.ts, arrangement.ts,
// harmony.ts and midi.ts; a leaf, so those modules import each other in one direction only.
import type { ExcludedElement, GenreStyle, Mode, MoodStyle, SectionKind } from './vocabulary.ts'

export interface PlanNote {
  /** Onset, in beats from the start (a beat is 60/bpm seconds). */
  beat: number
  /** Length in beats. */
  beats: number
  midi: number
  /** 0..1. */
  velocity: number
}

export type PartName = 'lead' | 'chords' | 'pad' | 'bass' | 'drums' | 'vocal' | 'harmony' | 'response' | 'ad-lib' | 'sustained' | 'ensemble' | 'counter'

export interface PlanPart {
  /** Unique label: the role, with a number when a role repeats ("response 2"). */
  name: string
  role: PartName
  /** GM program (0-based); for drums, the kit. */
  program: number
  instrument: string
  channel: number
  percussion: boolean
  /** Mixer volume and pan (CC7, CC10), 0..1 and -1..1. */
  volume: number
  pan: number
  notes: PlanNote[]
}

export interface PlanSection {
  name: string
  kind: SectionKind
  startSec: number
  endSec: number
  startBar: number
  endBar: number
  /** 1..10: drives density, velocity and which parts play. */
  intensity: number
  /** Parts that play in it. */
  parts: string[]
  /** The request's section, when it came from one. */
  requested: boolean
}

export interface MusicalPlan {
  seed: number
  bpm: number
  beatsPerBar: 4
  /** First beat at 0 s; bars are beatsPerBar beats. */
  beatOffsetSec: 0
  key: { tonic: string; mode: Mode; pitchClass: number }
  genre: string
  moods: string[]
  groove: string
  swing: number
  durationSec: number
  /** No note starts at or after this (durationSec minus the tail reserve). */
  contentEndSec: number
  sections: PlanSection[]
  parts: PlanPart[]
  /** Progressions, roman numerals per section kind. */
  progressions: Record<string, string[]>
  /** What the request excluded (negative prompt, "no …", instrumental). */
  excluded: string[]
  /** Why things are as they are, one line each (tempo source, unknown instrument words, …). */
  decisions: string[]
}

/** Decisions the arrangement works from. */
export interface Style {
  genre: GenreStyle
  moods: MoodStyle[]
  bpm: number
  tonic: number
  mode: Mode
  swing: number
  sevenths: boolean
  density: number
  temperature: number
  drums: boolean
  kit: number
  bass: boolean
  padAlways: boolean
  minimal: boolean
  programs: { lead: number | null; chords: number | null; pad: number | null; bass: number | null; vocal: number | null }
  leadOctave: number
  /** Lead gate and velocity offset (articulation of a mapped lead). */
  leadGate: number
  leadAccent: number
  leadWide: boolean
  /** The prompt or the lead mapping named the lead instrument: it keeps the melody where a voice would sing. */
  leadExplicit: boolean
  persistentLead: boolean
  extras: ExtraPart[]
  excludedElements: Set<ExcludedElement>
}

export interface ExtraPart {
  role: Exclude<PartName, 'lead' | 'chords' | 'pad' | 'bass' | 'drums' | 'vocal'>
  program: number
  octave: number
  gate: number
  accent: number
  wide: boolean
}
