// Musical analysis of one mono signal (run in a worker thread): tempo/beat/downbeat, key, sections,
// mix cues and the brightness curve. Any input rate; audio at ≥ 44.1 kHz is decimated to ~22 kHz first.
import { estimateKey, type KeyResult } from './key.ts'
import { analyzeSections, type Cues, type Section } from './sections.ts'
import { analyzeFrames, chromagram, dcBlock, decimate, type Frames } from './spectrum.ts'
import { estimateTempo } from './tempo.ts'

export interface MusicAnalysis {
  tempo: { bpm: number; beatOffsetSec: number; beatIntervalSec: number; downbeatOffsetBeats: number; downbeatConfidence: number }
  key?: KeyResult
  sections: Section[]
  cues: Cues
  /** One value per second of audio (ceil(duration) points), 0..1. */
  brightness: number[]
}

const BRIGHT_LO_HZ = 200
const BRIGHT_HI_HZ = 8000

/** Per second, the mean of the frames' centroids log-mapped 200 Hz → 0 … 8 kHz → 1 (clamped); silent frames skipped, a silent second is 0. */
export function brightnessCurve(frames: Frames, durationSec: number): number[] {
  const points = Math.ceil(durationSec - 1e-9)
  const sum = new Float64Array(points)
  const count = new Float64Array(points)
  for (let f = 0; f < frames.count; f++) {
    const c = frames.centroid[f]!
    if (!(c > 0) || frames.rms[f]! < 1e-5) continue
    const s = Math.min(points - 1, Math.floor(f / frames.rate))
    if (s < 0) continue
    sum[s] = sum[s]! + Math.min(1, Math.max(0, Math.log(c / BRIGHT_LO_HZ) / Math.log(BRIGHT_HI_HZ / BRIGHT_LO_HZ)))
    count[s] = count[s]! + 1
  }
  const out: number[] = []
  for (let s = 0; s < points; s++) out.push(count[s]! > 0 ? sum[s]! / count[s]! : 0)
  return out
}

/** The input itself when every sample is finite, else a copy with NaN/±Infinity as 0 (one bad sample must not poison every result). */
function finite(x: Float32Array): Float32Array {
  for (let i = 0; i < x.length; i++) {
    if (!Number.isFinite(x[i]!)) return x.map((v) => (Number.isFinite(v) ? v : 0))
  }
  return x
}

export function analyzeMusic(mono: Float32Array, sampleRate: number, options: { targetBpm?: number | undefined } = {}): MusicAnalysis {
  const durationSec = sampleRate > 0 ? mono.length / sampleRate : 0
  const decimated = decimate(finite(mono), sampleRate > 0 ? sampleRate : 22050)
  const rate = decimated.sampleRate
  const samples = dcBlock(decimated.samples, rate)
  const frames = analyzeFrames(samples, rate)
  const chroma = chromagram(samples, rate)
  const t = estimateTempo(frames, chroma, durationSec, options)
  const tempo = {
    bpm: t.bpm,
    beatOffsetSec: t.beatOffsetSec,
    beatIntervalSec: t.beatIntervalSec,
    downbeatOffsetBeats: t.downbeatOffsetBeats,
    downbeatConfidence: t.downbeatConfidence,
  }
  const key = estimateKey(chroma)
  const { sections, cues } = analyzeSections(frames, chroma, tempo, durationSec)
  const brightness = brightnessCurve(frames, durationSec)
  return { tempo, ...(key ? { key } : {}), sections, cues, brightness }
}
