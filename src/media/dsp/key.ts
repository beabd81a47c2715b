// Key by template matching: the song's summed whitened chroma against the 24 rotations of the
// Albrecht–Shanahan (2013) major and minor profiles, Pearson correlation. Confidence grows with the
// best correlation and its margin over the runner-up, and drops when the runner-up is the key a fifth
// away or the relative key (the usual confusions of template methods).
import type { Chroma } from './spectrum.ts'

/**
 * Tonic spelling, one name per pitch class (0 = C): sharps for C#/F#, flats for Eb/Ab/Bb, the
 * spellings most common in key listings whatever the mode.
 */
export const TONICS = ['C', 'C#', 'D', 'Eb', 'E', 'F', 'F#', 'G', 'Ab', 'A', 'Bb', 'B'] as const

export type Mode = 'major' | 'minor'

export interface KeyResult {
  tonic: (typeof TONICS)[number]
  mode: Mode
  camelot: string
  confidence: number
}

// Albrecht & Shanahan (Music Perception 31(1), 2013), index 0 = tonic.
const MAJOR = [0.238, 0.006, 0.111, 0.006, 0.137, 0.094, 0.016, 0.214, 0.009, 0.08, 0.008, 0.081]
const MINOR = [0.22, 0.006, 0.104, 0.123, 0.019, 0.103, 0.012, 0.214, 0.062, 0.022, 0.061, 0.052]

/** Camelot wheel code: major pc → ((7·pc) mod 12 + 7) mod 12 + 1 + "B"; minor → its relative major's number + "A". */
export function camelot(pc: number, mode: Mode): string {
  const major = mode === 'major' ? pc : (pc + 3) % 12
  return `${((((7 * major) % 12) + 7) % 12) + 1}${mode === 'major' ? 'B' : 'A'}`
}

function pearson(x: ArrayLike<number>, profile: readonly number[], rotation: number): number {
  let mx = 0
  let my = 0
  for (let i = 0; i < 12; i++) {
    mx += x[i]!
    my += profile[i]!
  }
  mx /= 12
  my /= 12
  let sxy = 0
  let sxx = 0
  let syy = 0
  for (let i = 0; i < 12; i++) {
    const a = x[(i + rotation) % 12]! - mx
    const b = profile[i]! - my
    sxy += a * b
    sxx += a * a
    syy += b * b
  }
  return sxx > 0 && syy > 0 ? sxy / Math.sqrt(sxx * syy) : 0
}

/** True when two keys are a fifth apart in the same mode or relative major/minor. */
function related(a: { pc: number; mode: Mode }, b: { pc: number; mode: Mode }): boolean {
  if (a.mode === b.mode) {
    const d = (b.pc - a.pc + 12) % 12
    return d === 5 || d === 7
  }
  const major = a.mode === 'major' ? a : b
  const minor = a.mode === 'major' ? b : a
  return (minor.pc + 3) % 12 === major.pc
}

/** Correlations of a 12-bin pitch-class vector with all 24 keys, best first. */
export function rankKeys(pcp: ArrayLike<number>): { pc: number; mode: Mode; r: number }[] {
  const all: { pc: number; mode: Mode; r: number }[] = []
  for (let pc = 0; pc < 12; pc++) {
    all.push({ pc, mode: 'major', r: pearson(pcp, MAJOR, pc) })
    all.push({ pc, mode: 'minor', r: pearson(pcp, MINOR, pc) })
  }
  return all.sort((a, b) => b.r - a.r)
}

/** Below this confidence the signal is treated as atonal (no key reported). */
export const MIN_KEY_CONFIDENCE = 0.1

/** The key of a chromagram, or undefined when it is silent or too flat to call. */
export function estimateKey(chroma: Chroma): KeyResult | undefined {
  const pcp = new Float64Array(12)
  for (let f = 0; f < chroma.count; f++) for (let i = 0; i < 12; i++) pcp[i] = pcp[i]! + chroma.values[f * 12 + i]!
  let sum = 0
  let max = 0
  for (const v of pcp) {
    sum += v
    if (v > max) max = v
  }
  // Noise and silence give a flat (or empty) profile: no tonal centre to report.
  if (sum <= 0 || max / (sum / 12) < 1.3) return undefined
  const [first, second] = rankKeys(pcp)
  if (!first || !second) return undefined
  const margin = Math.max(0, first.r - second.r)
  let confidence = Math.max(0, first.r) * (0.5 + 0.5 * (1 - Math.exp(-margin / 0.05)))
  if (related(first, second)) confidence *= 0.8
  confidence = Math.min(1, Math.max(0, confidence))
  if (!(confidence >= MIN_KEY_CONFIDENCE)) return undefined
  return { tonic: TONICS[first.pc]!, mode: first.mode, camelot: camelot(first.pc, first.mode), confidence }
}
