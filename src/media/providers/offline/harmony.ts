// Harmony of the offline composer: cadencing progressions per section group (so the key is
// unambiguous: the tonic and a major V are in them), chords with sevenths where the style wants
// them, harmonic minor over V, and pitch helpers (nearest chord tone, scale steps).
import type { Style } from './plan.ts'
import type { SectionKind } from './vocabulary.ts'

export type Group = 'verse' | 'chorus' | 'bridge' | 'build'
export const NUMERALS: Record<string, [number, 'maj' | 'min' | 'dim']> = {
  I: [0, 'maj'],
  ii: [2, 'min'],
  iii: [4, 'min'],
  IV: [5, 'maj'],
  V: [7, 'maj'],
  vi: [9, 'min'],
  i: [0, 'min'],
  'ii°': [2, 'dim'],
  III: [3, 'maj'],
  iv: [5, 'min'],
  VI: [8, 'maj'],
  VII: [10, 'maj'],
}
export const PROGRESSIONS: Record<'major' | 'minor', Record<Group, string[][]>> = {
  major: {
    verse: [
      ['I', 'IV', 'V', 'I'],
      ['I', 'vi', 'IV', 'V'],
      ['I', 'V', 'vi', 'V'],
      ['I', 'IV', 'I', 'V'],
    ],
    chorus: [
      ['I', 'V', 'vi', 'IV'],
      ['IV', 'V', 'I', 'I'],
      ['vi', 'IV', 'V', 'I'],
      ['I', 'IV', 'V', 'V'],
    ],
    bridge: [
      ['IV', 'V', 'iii', 'vi'],
      ['vi', 'IV', 'ii', 'V'],
      ['ii', 'V', 'IV', 'V'],
    ],
    build: [
      ['IV', 'V', 'IV', 'V'],
      ['ii', 'IV', 'V', 'V'],
    ],
  },
  minor: {
    verse: [
      ['i', 'iv', 'V', 'i'],
      ['i', 'VI', 'VII', 'V'],
      ['i', 'VI', 'iv', 'V'],
      ['i', 'iv', 'i', 'V'],
    ],
    chorus: [
      ['VI', 'VII', 'i', 'i'],
      ['i', 'VI', 'III', 'V'],
      ['iv', 'V', 'i', 'i'],
      ['i', 'VII', 'VI', 'V'],
    ],
    bridge: [
      ['VI', 'III', 'VII', 'V'],
      ['iv', 'VI', 'V', 'V'],
      ['III', 'VII', 'iv', 'V'],
    ],
    build: [
      ['iv', 'V', 'iv', 'V'],
      ['VI', 'VII', 'V', 'V'],
    ],
  },
}
export const JAZZ = { major: ['ii', 'V', 'I', 'I'], minor: ['ii°', 'V', 'i', 'i'] }
export const BLUES = { major: ['I', 'IV', 'I', 'I', 'IV', 'IV', 'I', 'I', 'V', 'IV', 'I', 'V'], minor: ['i', 'iv', 'i', 'i', 'iv', 'iv', 'i', 'i', 'V', 'iv', 'i', 'V'] }

export interface Chord {
  /** Root pitch class. */
  root: number
  /** Pitch classes, root first. */
  tones: number[]
  /** Scale pitch classes to melodise over it (harmonic minor over V). */
  scale: number[]
}

export function groupOf(kind: SectionKind): Group {
  if (kind === 'chorus' || kind === 'drop' || kind === 'solo' || kind === 'outro') return 'chorus'
  if (kind === 'bridge' || kind === 'breakdown' || kind === 'interlude') return 'bridge'
  if (kind === 'pre-chorus') return 'build'
  return 'verse'
}

export function makeChord(numeral: string, style: Style): Chord {
  const [offset, quality] = NUMERALS[numeral] ?? [0, 'maj']
  const root = (style.tonic + offset) % 12
  const blues = style.genre.progression === 'blues'
  let intervals = quality === 'maj' ? [0, 4, 7] : quality === 'min' ? [0, 3, 7] : [0, 3, 6]
  if (style.sevenths || blues) {
    if (quality === 'dim') intervals = [0, 3, 6, 10]
    else if (quality === 'min') intervals = [0, 3, 7, 10]
    else intervals = [0, 4, 7, blues || offset === 7 || (style.mode === 'minor' && offset === 10) ? 10 : 11]
  }
  const base = style.mode === 'major' ? [0, 2, 4, 5, 7, 9, 11] : [0, 2, 3, 5, 7, 8, offset === 7 && quality === 'maj' ? 11 : 10]
  return { root, tones: intervals.map((i) => (root + i) % 12), scale: base.map((i) => (style.tonic + i) % 12) }
}

// ---------------------------------------------------------------------------------------------
// Pitch helpers

export const nearestWithPc = (pcs: number[], around: number) => {
  let best = around
  let bestDistance = Number.POSITIVE_INFINITY
  for (let p = around - 12; p <= around + 12; p++) {
    if (!pcs.includes(((p % 12) + 12) % 12)) continue
    const distance = Math.abs(p - around)
    if (distance < bestDistance) {
      best = p
      bestDistance = distance
    }
  }
  return best
}

/** `pitch` moved `steps` scale degrees (snapped onto the scale first). */
export function scaleStep(pitch: number, steps: number, scale: number[]): number {
  let p = nearestWithPc(scale, pitch)
  const dir = Math.sign(steps)
  for (let k = 0; k < Math.abs(steps); k++) {
    do p += dir
    while (!scale.includes(((p % 12) + 12) % 12))
  }
  return p
}

export const clampMidi = (p: number) => {
  let q = p
  while (q > 120) q -= 12
  while (q < 24) q += 12
  return q
}
