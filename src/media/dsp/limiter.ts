// Look-ahead true-peak limiter. The gain is computed from the 4×-oversampled envelope with the
// whole signal at hand, so the look-ahead costs no delay: the output stays sample-aligned.
//
// g = min(1, c / env) → forward sliding minimum over the look-ahead → instant attack, exponential
// release → moving average over the look-ahead. Every sample within L before a peak already holds
// a value ≤ the peak's requirement, so the average is too: the smoothed gain is ≤ the required gain
// at every peak while ramping down linearly over L.
import type { Pcm } from '../types.ts'
import { linkedTruePeakEnvelope } from './true-peak.ts'

export interface LimiterOptions {
  /** Ceiling, dBTP. */
  ceilingDb: number
  /** Look-ahead (and attack ramp), ms; default 5. */
  lookaheadMs?: number
  /** Release time constant, ms; default 100. */
  releaseMs?: number
}

export interface LimiterResult {
  pcm: Pcm
  /** Largest gain reduction, dB (≥ 0). */
  maxGainReductionDb: number
  /** Share of samples with more than 0.01 dB of gain reduction, percent. */
  activePercent: number
}

/**
 * The gain aims 0.002 dB under the ceiling: float32 rounding and interpolation across the gain
 * ramp then (nearly always) stay under it, and verification only checks against the real ceiling.
 */
const SAFETY = 10 ** (-0.002 / 20)
/** Rounds of "measure the output, tighten where it still pokes over". */
const VERIFY_ROUNDS = 4
/** 0.01 dB: below this the limiter counts as idle. */
const ACTIVE_BELOW = 10 ** (-0.01 / 20)

/** Required gain per sample, min(1, c / (preGain · env)), and its minimum. */
function requiredGain(envelope: Float32Array, preGain: number, ceiling: number): { required: Float32Array; least: number } {
  const required = new Float32Array(envelope.length)
  let least = 1
  for (let i = 0; i < envelope.length; i++) {
    const e = envelope[i]! * preGain
    const g = e > ceiling ? ceiling / e : 1
    required[i] = g
    if (g < least) least = g
  }
  return { required, least }
}

/** The smoothed gain curve for the required gains (see the file comment). */
function gainCurve(required: Float32Array, lookahead: number, releaseCoeff: number): Float32Array {
  const n = required.length
  // Forward sliding minimum over [i, i + lookahead] (van Herk / Gil-Werman): with blocks of the
  // window's length, min = min(suffix-min from i, prefix-min up to i + lookahead).
  const span = lookahead + 1
  const prefix = new Float32Array(n)
  const held = new Float32Array(n)
  for (let start = 0; start < n; start += span) {
    const end = Math.min(n, start + span)
    let p = 1
    for (let i = start; i < end; i++) {
      const v = required[i]!
      if (v < p) p = v
      prefix[i] = p
    }
    let s = 1
    for (let i = end - 1; i >= start; i--) {
      const v = required[i]!
      if (v < s) s = v
      held[i] = s
    }
  }
  for (let i = 0; i < n; i++) {
    const p = prefix[Math.min(n - 1, i + lookahead)]!
    if (p < held[i]!) held[i] = p
  }
  // Instant attack, exponential release toward 1 (in place).
  let r = 1
  for (let i = 0; i < n; i++) {
    const released = 1 - (1 - r) * releaseCoeff
    const h = held[i]!
    r = h < released ? h : released
    held[i] = r
  }
  // Backward-looking moving average over lookahead + 1 samples, into `prefix`; before the start
  // the curve holds its first value, which is ≤ every requirement within the first look-ahead.
  const gain = prefix
  const first = held[0] ?? 1
  let sum = first * span
  for (let i = 0; i < n; i++) {
    sum += held[i]! - (i >= span ? held[i - span]! : first)
    gain[i] = sum / span
  }
  return gain
}

function applyGain(pcm: Pcm, preGain: number, gain: Float32Array): Pcm {
  return {
    sampleRate: pcm.sampleRate,
    channels: pcm.channels.map((x) => {
      const out = new Float32Array(x.length)
      for (let i = 0; i < x.length; i++) out[i] = x[i]! * preGain * gain[i]!
      return out
    }),
  }
}

/**
 * Limits `pcm × preGain` to the ceiling using a linked true-peak envelope of the unscaled input
 * (the envelope is linear in gain, so mastering computes it once). With `verify` (default), the
 * output's own envelope is measured and the gain tightened where interpolation across the gain
 * ramp still exceeds the ceiling, until the output's true peak is ≤ the ceiling.
 */
export function limitWithEnvelope(pcm: Pcm, envelope: Float32Array, preGain: number, options: LimiterOptions & { verify?: boolean }): LimiterResult {
  const n = envelope.length
  const rate = pcm.sampleRate
  const limit = 10 ** (options.ceilingDb / 20)
  const ceiling = limit * SAFETY
  const lookahead = Math.max(1, Math.round(((options.lookaheadMs ?? 5) * rate) / 1000))
  const releaseCoeff = Math.exp(-1000 / (Math.max(1, options.releaseMs ?? 100) * rate))
  const { required, least: deepest } = requiredGain(envelope, preGain, ceiling)
  // Nothing to limit: the output's envelope is exactly preGain × the input's, under the ceiling.
  if (deepest === 1) return { pcm: applyGain(pcm, preGain, required), maxGainReductionDb: 0, activePercent: 0 }
  let gain = gainCurve(required, lookahead, releaseCoeff)
  let out = applyGain(pcm, preGain, gain)
  for (let round = 0; options.verify !== false && round < VERIFY_ROUNDS; round++) {
    const measured = linkedTruePeakEnvelope(out, limit)
    let over = false
    for (let i = 0; i < n; i++) {
      const e = measured[i]!
      if (e > limit) {
        over = true
        const tighter = (gain[i]! * ceiling) / e
        if (tighter < required[i]!) required[i] = tighter
      }
    }
    if (!over) break
    gain = gainCurve(required, lookahead, releaseCoeff)
    out = applyGain(pcm, preGain, gain)
  }
  let least = 1
  let active = 0
  for (let i = 0; i < n; i++) {
    const g = gain[i]!
    if (g < least) least = g
    if (g < ACTIVE_BELOW) active++
  }
  return { pcm: out, maxGainReductionDb: least < 1 ? -20 * Math.log10(least) : 0, activePercent: n > 0 ? (100 * active) / n : 0 }
}

/** Look-ahead true-peak limiter: output true peak ≤ ceilingDb, same length and alignment as the input. */
export function limitTruePeak(pcm: Pcm, options: LimiterOptions): LimiterResult {
  return limitWithEnvelope(pcm, linkedTruePeakEnvelope(pcm), 1, options)
}
