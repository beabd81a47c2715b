// Mastering to a loudness and true-peak target: gain, the look-ahead true-peak limiter, an
// iterative gain correction, then a fade. No ffmpeg loudnorm: for music at −14/−1 it silently
// switches to dynamic mode, squashes the range and misses the target (see the audio note §4).
import type { Pcm } from '../types.ts'
import { limitWithEnvelope } from './limiter.ts'
import { measureLoudness } from './loudness.ts'
import { linkedTruePeakEnvelope } from './true-peak.ts'

export interface MasteringTarget {
  /** Integrated loudness to reach, LUFS. */
  targetLufs: number
  /** True-peak ceiling, dBTP (the limiter runs ceilingMarginDb below it). */
  truePeakDb: number
  /** Raised-cosine fade-out over the last seconds, after limiting; 0 = none. */
  fadeOutSec: number
}

export interface MasteringPass {
  pcm: Pcm
  /** Gain before the limiter, dB. */
  gainAppliedDb: number
  limiterMaxGainReductionDb: number
  limiterActivePercent: number
  /** Limiter + measure passes run to settle the gain (0 for silence). */
  iterations: number
  /** |integratedLufs − (targetLufs + loudnessOffsetLu)| < 0.1 LU. */
  targetReached: boolean
  /** Measured on the returned pcm (after the fade). */
  integratedLufs: number
  truePeakDb: number
  rangeLu: number
}

export interface MasteringOptions {
  /** The limiter's ceiling sits this far below target.truePeakDb; default 0.3 dB. */
  ceilingMarginDb?: number
  /** Added to targetLufs, so the caller can pre-compensate what MP3 encoding changes; default 0. */
  loudnessOffsetLu?: number
  /** Never push the limiter beyond this gain reduction, dB; default 10. */
  maxGainReductionDb?: number
}

const TOLERANCE_LU = 0.1
const MAX_ITERATIONS = 6

/** Raised-cosine fade over the last `seconds`, in place; the last sample becomes 0. */
function fadeOut(pcm: Pcm, seconds: number): void {
  for (const x of pcm.channels) {
    const length = Math.min(x.length, Math.round(seconds * pcm.sampleRate))
    const start = x.length - length
    for (let i = 0; i < length; i++) x[start + i] = x[start + i]! * 0.5 * (1 + Math.cos((Math.PI * (i + 1)) / length))
  }
}

/**
 * Masters `pcm` to the target. The true-peak envelope is linear in gain, so it is computed once
 * and scaled per pass. Passes correct the gain by the remaining error (gain += target − measured,
 * secant-scaled from the second step) until within 0.1 LU, at most 6 passes; the fade is inside each
 * pass, so its cost is compensated.
 * The gain is capped where the limiter would reduce more than maxGainReductionDb: the pass then
 * stops short and reports targetReached false with what it achieved. Silence (integrated −∞) is
 * returned unchanged, targetReached false.
 */
export function masterPcm(pcm: Pcm, target: MasteringTarget, options: MasteringOptions = {}): MasteringPass {
  const before = measureLoudness(pcm, { truePeak: false })
  if (!Number.isFinite(before.integratedLufs)) {
    const unchanged = measureLoudness(pcm)
    return {
      pcm,
      gainAppliedDb: 0,
      limiterMaxGainReductionDb: 0,
      limiterActivePercent: 0,
      iterations: 0,
      targetReached: false,
      integratedLufs: unchanged.integratedLufs,
      truePeakDb: unchanged.truePeakDb,
      rangeLu: unchanged.rangeLu,
    }
  }
  const goal = target.targetLufs + (options.loudnessOffsetLu ?? 0)
  const ceilingDb = target.truePeakDb - (options.ceilingMarginDb ?? 0.3)
  const envelope = linkedTruePeakEnvelope(pcm)
  let envelopePeak = 0
  for (let i = 0; i < envelope.length; i++) envelopePeak = Math.max(envelopePeak, envelope[i]!)
  // The limiter's deepest reduction is gain + envelope peak − ceiling (dB), so the cap is known up
  // front (a hair under, for the limiter's 0.002 dB float safety margin).
  const gainCap = (options.maxGainReductionDb ?? 10) + ceilingDb - 20 * Math.log10(envelopePeak) - 0.005

  const limited = (gainDb: number, verify: boolean) => {
    const result = limitWithEnvelope(pcm, envelope, 10 ** (gainDb / 20), { ceilingDb, verify })
    fadeOut(result.pcm, target.fadeOutSec)
    return result
  }
  let gainDb = Math.min(gainCap, goal - before.integratedLufs)
  let previous: { gainDb: number; lufs: number } | undefined
  let result = limited(gainDb, false)
  let iterations = 1
  for (;;) {
    const lufs = measureLoudness(result.pcm, { truePeak: false }).integratedLufs
    const error = goal - lufs
    if (Math.abs(error) < TOLERANCE_LU || (error > 0 && gainDb >= gainCap) || iterations === MAX_ITERATIONS) break
    // gain += error, divided by the measured slope once two passes exist: under heavy limiting a
    // dB of gain buys well under a LU, and plain steps would crawl.
    let step = error
    if (previous !== undefined && gainDb !== previous.gainDb) {
      const slope = (lufs - previous.lufs) / (gainDb - previous.gainDb)
      if (slope > 0) step = error / Math.min(1, Math.max(0.2, slope))
    }
    previous = { gainDb, lufs }
    gainDb = Math.min(gainCap, gainDb + step)
    result = limited(gainDb, false)
    iterations++
  }
  // The final measurement checks the true peak; only if interpolation across the gain ramp poked
  // over the ceiling does the limiter run again, verifying and tightening its own output.
  let after = measureLoudness(result.pcm)
  if (after.truePeakDb > ceilingDb) {
    result = limited(gainDb, true)
    after = measureLoudness(result.pcm)
  }
  return {
    pcm: result.pcm,
    gainAppliedDb: gainDb,
    limiterMaxGainReductionDb: result.maxGainReductionDb,
    limiterActivePercent: result.activePercent,
    iterations,
    targetReached: Math.abs(after.integratedLufs - goal) < TOLERANCE_LU,
    integratedLufs: after.integratedLufs,
    truePeakDb: after.truePeakDb,
    rangeLu: after.rangeLu,
  }
}
