// ITU-R BS.1770-4 / EBU R128 loudness: K-weighting, gated integrated loudness, the momentary and
// short-term series, loudness range (EBU Tech 3342) and true peak (./true-peak.ts).
import type { Pcm } from '../types.ts'
import { truePeakLinear } from './true-peak.ts'

export interface LoudnessReport {
  /**
   * Gated integrated loudness, LUFS. −Infinity when no 400 ms block passes the −70 LUFS gate
   * (silence): callers must handle it (skip mastering, report "silent"). A signal shorter than
   * one 400 ms block is measured as a single block over its whole length.
   */
  integratedLufs: number
  /** Loudness range, LU (EBU Tech 3342); 0 with fewer than two gated 3 s windows. */
  rangeLu: number
  /** dBTP over all channels (4× oversampled, BS.1770-4 Annex 2); −Infinity for silence. */
  truePeakDb: number
  /** dBFS of the largest |sample| over all channels; −Infinity for silence. */
  samplePeakDb: number
  /** 400 ms windows every 100 ms; value k covers [k·0.1 s, k·0.1 s + 0.4 s). −Infinity where silent. */
  momentaryLufs: Float64Array
  /** 3 s windows every 100 ms; value k covers [k·0.1 s, k·0.1 s + 3 s). −Infinity where silent. */
  shortTermLufs: Float64Array
}

/** Biquad coefficients, a0 normalised to 1. */
interface Biquad {
  b0: number
  b1: number
  b2: number
  a1: number
  a2: number
}

/**
 * The two K-weighting stages for any rate, by bilinear transform from the libebur128 analogue
 * parameters; at 48 kHz they reproduce the BS.1770 table to the printed digits.
 */
export function kWeighting(sampleRate: number): { shelf: Biquad; highPass: Biquad } {
  let f0 = 1681.974450955533
  const gainDb = 3.999843853973347
  let q = 0.7071752369554196
  let k = Math.tan((Math.PI * f0) / sampleRate)
  const vh = 10 ** (gainDb / 20)
  const vb = vh ** 0.4996667741545416
  let a0 = 1 + k / q + k * k
  const shelf = {
    b0: (vh + (vb * k) / q + k * k) / a0,
    b1: (2 * (k * k - vh)) / a0,
    b2: (vh - (vb * k) / q + k * k) / a0,
    a1: (2 * (k * k - 1)) / a0,
    a2: (1 - k / q + k * k) / a0,
  }
  f0 = 38.13547087602444
  q = 0.5003270373238773
  k = Math.tan((Math.PI * f0) / sampleRate)
  a0 = 1 + k / q + k * k
  const highPass = { b0: 1, b1: -2, b2: 1, a1: (2 * (k * k - 1)) / a0, a2: (1 - k / q + k * k) / a0 }
  return { shelf, highPass }
}

/**
 * BS.1770 channel weights by count: mono/stereo 1; 3 = L,R,C; 4 = L,R,Ls,Rs; 5 = L,R,C,Ls,Rs;
 * 6 = L,R,C,LFE,Ls,Rs (LFE excluded); 8 = 7.1 (L,R,C,LFE,Lb,Rb,Ls,Rs). Anything else: all 1.
 */
export function channelWeights(channels: number): number[] {
  const s = 1.41
  switch (channels) {
    case 4:
      return [1, 1, s, s]
    case 5:
      return [1, 1, 1, s, s]
    case 6:
      return [1, 1, 1, 0, s, s]
    case 8:
      return [1, 1, 1, 0, s, s, s, s]
    default:
      return Array.from({ length: channels }, () => 1)
  }
}

/**
 * Adds the weighted K-filtered energy of `x` per 100 ms hop into `hops` (hop h spans samples
 * [edges[h], edges[h + 1])). Returns the energy of the samples after the last whole hop and the
 * channel's sample peak (taken here: the filter is latency-bound, so the compare is free).
 */
function accumulateHops(x: Float32Array, weight: number, f: { shelf: Biquad; highPass: Biquad }, edges: Float64Array, hops: Float64Array): { tail: number; peak: number } {
  const { b0, b1, b2, a1, a2 } = f.shelf
  const c1 = f.highPass.a1
  const c2 = f.highPass.a2
  // Transposed direct form II, double-precision state carried across hops.
  let s1 = 0
  let s2 = 0
  let t1 = 0
  let t2 = 0
  let tail = 0
  let peak = 0
  const n = x.length
  for (let h = 0; h <= hops.length; h++) {
    const start = edges[h]!
    const end = h < hops.length ? edges[h + 1]! : n
    let sum = 0
    for (let i = start; i < end; i++) {
      const v = x[i]!
      if (v > peak) peak = v
      else if (-v > peak) peak = -v
      const y = b0 * v + s1
      s1 = b1 * v - a1 * y + s2
      s2 = b2 * v - a2 * y
      const z = y + t1
      t1 = -2 * y - c1 * z + t2
      t2 = y - c2 * z
      sum += z * z
    }
    if (h < hops.length) hops[h] = hops[h]! + weight * sum
    else tail = weight * sum
  }
  return { tail, peak }
}

function lufs(meanSquare: number): number {
  return meanSquare > 0 ? -0.691 + 10 * Math.log10(meanSquare) : Number.NEGATIVE_INFINITY
}

/** Mean-square energies of windows of `span` hops, one per hop start. */
function windows(prefix: Float64Array, edges: Float64Array, span: number): Float64Array {
  const count = Math.max(0, prefix.length - span)
  const out = new Float64Array(count)
  for (let k = 0; k < count; k++) out[k] = (prefix[k + span]! - prefix[k]!) / (edges[k + span]! - edges[k]!)
  return out
}

/** BS.1770 gating: the energy mean of blocks above −70 LUFS and then above (that mean − relativeLu). */
function gatedMean(energies: Float64Array, relativeLu: number): { mean: number; kept: number[] } {
  const absolute = 10 ** ((-70 + 0.691) / 10)
  let sum = 0
  let count = 0
  for (const z of energies) {
    if (z > absolute) {
      sum += z
      count++
    }
  }
  if (count === 0) return { mean: 0, kept: [] }
  const relative = (sum / count) * 10 ** (-relativeLu / 10)
  const kept: number[] = []
  sum = 0
  for (const z of energies) {
    if (z > absolute && z > relative) {
      kept.push(z)
      sum += z
    }
  }
  return { mean: kept.length > 0 ? sum / kept.length : 0, kept }
}

/**
 * EBU Tech 3342: short-term energies gated at −70 LUFS and −20 LU, then P95 − P10, each the
 * nearest rank at index round((n − 1)·p) of the sorted values (as libebur128 does).
 */
function loudnessRange(shortTerm: Float64Array): number {
  const kept = gatedMean(shortTerm, 20).kept.sort((a, b) => a - b)
  if (kept.length < 2) return 0
  const at = (p: number) => kept[Math.round((kept.length - 1) * p)]!
  return Math.max(0, lufs(at(0.95)) - lufs(at(0.1)))
}

/**
 * Measures BS.1770-4 loudness. `truePeak: false` skips the oversampling (truePeakDb then equals
 * samplePeakDb), for loops that only need the integrated value.
 */
export function measureLoudness(pcm: Pcm, options: { truePeak?: boolean } = {}): LoudnessReport {
  const { sampleRate } = pcm
  const n = pcm.channels[0]?.length ?? 0
  // 100 ms hops; edges are rounded so rates that are not a multiple of 10 Hz stay exact on average.
  const hopCount = Math.floor((n * 10) / sampleRate + 1e-9)
  const edges = new Float64Array(hopCount + 1)
  for (let h = 0; h <= hopCount; h++) edges[h] = Math.min(n, Math.round((h * sampleRate) / 10))
  const hops = new Float64Array(hopCount)
  const filters = kWeighting(sampleRate)
  const weights = channelWeights(pcm.channels.length)
  let tail = 0
  let samplePeak = 0
  pcm.channels.forEach((x, c) => {
    // An LFE (weight 0) still goes through: its sample peak counts.
    const hop = accumulateHops(x, weights[c] ?? 1, filters, edges, hops)
    tail += hop.tail
    samplePeak = Math.max(samplePeak, hop.peak)
  })
  const prefix = new Float64Array(hopCount + 1)
  for (let h = 0; h < hopCount; h++) prefix[h + 1] = prefix[h]! + hops[h]!
  const momentary = windows(prefix, edges, 4)
  const shortTerm = windows(prefix, edges, 30)

  let integratedLufs: number
  if (momentary.length > 0) integratedLufs = lufs(gatedMean(momentary, 10).mean)
  else {
    // Shorter than one block: the whole signal is the one block, still under the absolute gate.
    const whole = n > 0 ? (prefix[hopCount]! + tail) / n : 0
    integratedLufs = lufs(gatedMean(Float64Array.of(whole), 10).mean)
  }
  const samplePeakDb = 20 * Math.log10(samplePeak)
  const truePeakDb = options.truePeak === false ? samplePeakDb : 20 * Math.log10(truePeakLinear(pcm))
  return {
    integratedLufs,
    rangeLu: loudnessRange(shortTerm),
    truePeakDb,
    samplePeakDb,
    momentaryLufs: momentary.map(lufs),
    shortTermLufs: shortTerm.map(lufs),
  }
}
