// The Analysis object of one piece of audio (SPEC "Song result"), from decoded PCM: loudness and
// stereo image (BS.1770), and the musical reading (tempo, key, sections, cues, brightness).
// Pure and synchronous: it runs inside an analysis worker thread (analysis-pool.ts).
import { measureLoudness, type LoudnessReport } from './dsp/loudness.ts'
import { analyzeMusic } from './dsp/music.ts'
import { stereoImage } from './dsp/stereo.ts'
import type { Analysis, Pcm } from './types.ts'

export interface AnalysisOptions {
  /** selectionTarget.bpm: settles octave ambiguity (half or double time) only. */
  targetBpm?: number | undefined
}

/** Energy curve bounds: momentary loudness mapped linearly from −40 LUFS (0) to −5 LUFS (1). */
const ENERGY_FLOOR_LUFS = -40
const ENERGY_CEILING_LUFS = -5

const round = (value: number, digits = 3) => {
  const scale = 10 ** digits
  return Math.round(value * scale) / scale
}
const unit = (value: number) => (Number.isFinite(value) ? Math.min(1, Math.max(0, value)) : 0)

/** Mono mix for the musical reading (channels averaged). */
export function downmix(pcm: Pcm): Float32Array {
  const [first, ...rest] = pcm.channels
  if (first === undefined) return new Float32Array(0)
  if (rest.length === 0) return first
  const mono = new Float32Array(first.length)
  const gain = 1 / pcm.channels.length
  for (const channel of pcm.channels) for (let i = 0; i < mono.length; i += 1) mono[i]! += channel[i]! * gain
  return mono
}

/**
 * One energy value per second: the energy mean of the momentary (400 ms) loudness values whose
 * window ends in that second, mapped to 0..1. Absolute, so candidates compare with each other.
 */
export function energyCurve(momentaryLufs: Float64Array, seconds: number): number[] {
  const points = Math.max(1, Math.ceil(seconds))
  const sums = new Float64Array(points)
  const counts = new Uint32Array(points)
  for (let hop = 0; hop < momentaryLufs.length; hop += 1) {
    const second = Math.min(points - 1, Math.floor(((hop + 4) * 100) / 1000))
    const lufs = momentaryLufs[hop]!
    sums[second]! += Number.isFinite(lufs) ? 10 ** (lufs / 10) : 0
    counts[second]! += 1
  }
  const curve: number[] = []
  for (let second = 0; second < points; second += 1) {
    const power = counts[second]! > 0 ? sums[second]! / counts[second]! : 0
    const lufs = power > 0 ? 10 * Math.log10(power) : -Infinity
    curve.push(round(unit((lufs - ENERGY_FLOOR_LUFS) / (ENERGY_CEILING_LUFS - ENERGY_FLOOR_LUFS))))
  }
  return curve
}

/** Loudness as the Analysis reports it, or undefined for silence (integrated −∞). */
export function loudnessOf(report: LoudnessReport): Analysis['loudness'] {
  if (!Number.isFinite(report.integratedLufs)) return undefined
  return { integratedLufs: round(report.integratedLufs, 2), rangeLu: round(Number.isFinite(report.rangeLu) ? report.rangeLu : 0, 2), truePeakDb: round(report.truePeakDb, 2) }
}

export function analyzePcm(pcm: Pcm, options: AnalysisOptions = {}): Analysis {
  const samples = pcm.channels[0]?.length ?? 0
  const durationSec = samples / pcm.sampleRate
  const loudness = measureLoudness(pcm)
  const music = analyzeMusic(downmix(pcm), pcm.sampleRate, options.targetBpm === undefined ? {} : { targetBpm: options.targetBpm })
  const stereo = stereoImage(pcm)
  const measured = loudnessOf(loudness)
  return {
    durationSec: round(Math.max(durationSec, 0.001)),
    tempo: {
      bpm: round(music.tempo.bpm, 2),
      beatOffsetSec: round(music.tempo.beatOffsetSec),
      beatIntervalSec: round(music.tempo.beatIntervalSec, 4),
      downbeatOffsetBeats: music.tempo.downbeatOffsetBeats,
      downbeatConfidence: round(unit(music.tempo.downbeatConfidence)),
    },
    brightness: music.brightness.map((value) => round(unit(value))),
    energy: energyCurve(loudness.momentaryLufs, durationSec),
    sections: music.sections.map((section) => ({ kind: section.kind, startSec: round(section.startSec, 2), endSec: round(section.endSec, 2) })),
    cues: { mixInSec: round(music.cues.mixInSec, 2), mixOutSec: round(music.cues.mixOutSec, 2) },
    ...(music.key ? { key: { ...music.key, confidence: round(unit(music.key.confidence)) } } : {}),
    ...(stereo ? { stereo: { correlation: round(Math.max(-1, Math.min(1, stereo.correlation))), sideToMidRatio: round(stereo.sideToMidRatio) } } : {}),
    ...(measured ? { loudness: measured } : {}),
  }
}
