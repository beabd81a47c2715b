// Shared spectral front end of the music analysis: a typed real-FFT wrapper, Hann windows, a
// half-band decimator to ~22.05 kHz, a DC blocker, and the two STFT passes the analysers share: a
// 1024/256 pass (log-mel onsets, the < 150 Hz kick band, centroid, RMS) and a chroma pass (whitened
// log-magnitude, 55–2000 Hz, at ~5.5 kHz: 2048/1024, the resolution and hop of 8192/4096 at 22.05 kHz).
import FFT from 'fft.js'

/** Real FFT of one fixed power-of-two size, returning the one-sided power spectrum. */
export class RealFft {
  readonly size: number
  readonly #fft: FFT
  readonly #out: Float64Array

  constructor(size: number) {
    this.size = size
    this.#fft = new FFT(size)
    this.#out = new Float64Array(2 * size)
  }

  /** |X[k]|² for k = 0..size/2 into `power` (length size/2 + 1). */
  power(frame: Float64Array, power: Float64Array): void {
    this.#fft.realTransform(this.#out, frame)
    const out = this.#out
    for (let k = 0; k <= this.size >> 1; k++) {
      const re = out[2 * k]!
      const im = out[2 * k + 1]!
      power[k] = re * re + im * im
    }
  }
}

/** Periodic Hann window (the STFT convention). */
export function hann(n: number): Float64Array {
  const w = new Float64Array(n)
  for (let i = 0; i < n; i++) w[i] = 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / n)
  return w
}

// Half-band low-pass (31 taps, Blackman-windowed sinc at fs/4): every even offset but the centre is 0.
const HALF_TAPS = 15
const HALF_BAND: Float64Array = (() => {
  const h = new Float64Array(HALF_TAPS + 1)
  let sum = 0
  for (let k = -HALF_TAPS; k <= HALF_TAPS; k++) {
    const x = k / 2
    const sinc = k === 0 ? 1 : Math.sin(Math.PI * x) / (Math.PI * x)
    const n = (k + HALF_TAPS) / (2 * HALF_TAPS)
    const w = 0.42 - 0.5 * Math.cos(2 * Math.PI * n) + 0.08 * Math.cos(4 * Math.PI * n)
    const v = 0.5 * sinc * w
    if (k >= 0) h[k] = v
    sum += v
  }
  for (let k = 0; k <= HALF_TAPS; k++) h[k] = h[k]! / sum
  return h
})()

function halfBandDecimate(x: Float32Array): Float32Array {
  const n = x.length >> 1
  const y = new Float32Array(n)
  const h = HALF_BAND
  const h0 = h[0]!
  const last = x.length - 1
  // Edges with bounds checks; the interior (the bulk) without.
  const edge = (i: number): number => {
    const c = 2 * i
    let acc = h0 * x[c]!
    for (let k = 1; k <= HALF_TAPS; k += 2) acc += h[k]! * ((c - k >= 0 ? x[c - k]! : 0) + (c + k <= last ? x[c + k]! : 0))
    return acc
  }
  const lo = Math.min(n, (HALF_TAPS + 1) >> 1)
  const hi = Math.max(lo, Math.min(n, Math.floor((last - HALF_TAPS) / 2) + 1))
  for (let i = 0; i < lo; i++) y[i] = edge(i)
  const [h1, h3, h5, h7, h9, h11, h13, h15] = [h[1]!, h[3]!, h[5]!, h[7]!, h[9]!, h[11]!, h[13]!, h[15]!]
  for (let i = lo; i < hi; i++) {
    const c = 2 * i
    y[i] =
      h0 * x[c]! +
      h1 * (x[c - 1]! + x[c + 1]!) +
      h3 * (x[c - 3]! + x[c + 3]!) +
      h5 * (x[c - 5]! + x[c + 5]!) +
      h7 * (x[c - 7]! + x[c + 7]!) +
      h9 * (x[c - 9]! + x[c + 9]!) +
      h11 * (x[c - 11]! + x[c + 11]!) +
      h13 * (x[c - 13]! + x[c + 13]!) +
      h15 * (x[c - 15]! + x[c + 15]!)
  }
  for (let i = hi; i < n; i++) y[i] = edge(i)
  return y
}

/** Halves the rate while the result stays ≥ minRate (default 22.05 kHz: 44.1 → 22.05, 48 → 24, 96 → 24). */
export function decimate(samples: Float32Array, sampleRate: number, minRate = 22050): { samples: Float32Array; sampleRate: number } {
  let x = samples
  let sr = sampleRate
  while (sr >= 2 * minRate && x.length >= 2) {
    x = halfBandDecimate(x)
    sr /= 2
  }
  return { samples: x, sampleRate: sr }
}

/** One-pole DC blocker (corner ≈ 5 Hz): an offset is not sound, and its window leakage would reach the chroma range. */
export function dcBlock(x: Float32Array, sampleRate: number): Float32Array {
  const r = Math.exp((-2 * Math.PI * 5) / sampleRate)
  const y = new Float32Array(x.length)
  let prevX = x[0] ?? 0
  let prevY = 0
  for (let i = 0; i < x.length; i++) {
    const v = x[i]! - prevX + r * prevY
    prevX = x[i]!
    prevY = v
    y[i] = v
  }
  return y
}

const hzToMel = (f: number): number => 2595 * Math.log10(1 + f / 700)
const melToHz = (m: number): number => 700 * (10 ** (m / 2595) - 1)

/** Triangular mel filters as (first bin, weights) pairs over a one-sided spectrum of nFft/2 + 1 bins. */
export function melFilters(bands: number, nFft: number, sampleRate: number, fMin: number, fMax: number): { start: number; weights: Float64Array }[] {
  const edges: number[] = []
  const lo = hzToMel(fMin)
  const hi = hzToMel(Math.min(fMax, sampleRate / 2))
  for (let i = 0; i < bands + 2; i++) edges.push(melToHz(lo + ((hi - lo) * i) / (bands + 1)))
  const binHz = sampleRate / nFft
  const filters: { start: number; weights: Float64Array }[] = []
  for (let b = 0; b < bands; b++) {
    const f0 = edges[b]!
    const f1 = edges[b + 1]!
    const f2 = edges[b + 2]!
    // At least the nearest bin, so narrow low bands are never empty.
    const start = Math.min(Math.ceil(f0 / binHz), Math.round(f1 / binHz))
    const end = Math.max(Math.floor(f2 / binHz), Math.round(f1 / binHz))
    const weights = new Float64Array(end - start + 1)
    for (let k = start; k <= end; k++) {
      const f = k * binHz
      const w = f <= f1 ? (f - f0) / (f1 - f0) : (f2 - f) / (f2 - f1)
      weights[k - start] = Math.max(w, 0)
    }
    if (weights.every((w) => w === 0)) weights[Math.round(f1 / binHz) - start] = 1
    filters.push({ start, weights })
  }
  return filters
}

/** Centered framing: frame f covers samples [f·hop − n/2, f·hop + n/2), zero outside the signal. */
function fillFrame(x: Float32Array, center: number, window: Float64Array, frame: Float64Array): void {
  const n = window.length
  const start = center - (n >> 1)
  if (start >= 0 && start + n <= x.length) {
    for (let i = 0; i < n; i++) frame[i] = x[start + i]! * window[i]!
    return
  }
  for (let i = 0; i < n; i++) {
    const j = start + i
    frame[i] = j >= 0 && j < x.length ? x[j]! * window[i]! : 0
  }
}

export const MEL_BANDS = 64
export const COARSE_BANDS = 16

/** Per-frame features of the 1024/256 pass. Frame f is centered at f·hop samples. */
export interface Frames {
  count: number
  /** Frames per second. */
  rate: number
  /** Mel band log power (natural log, floored 80 dB under the loudest band), count × MEL_BANDS. */
  melLog: Float32Array
  /** Log power below 150 Hz (kick band), same floor. */
  lowLog: Float32Array
  /** Magnitude-weighted spectral centroid, Hz (0 for a silent frame). */
  centroid: Float32Array
  /** RMS of the hop around the frame center, linear. */
  rms: Float32Array
}

export function analyzeFrames(x: Float32Array, sampleRate: number, nFft = 1024, hop = 256): Frames {
  const count = x.length > 0 ? Math.floor(x.length / hop) + 1 : 0
  const fft = new RealFft(nFft)
  const window = hann(nFft)
  const frame = new Float64Array(nFft)
  const power = new Float64Array(nFft / 2 + 1)
  // Flattened filters: the inner loop runs over typed arrays only.
  const filters = melFilters(MEL_BANDS, nFft, sampleRate, 0, sampleRate / 2)
  const fStart = Int32Array.from(filters, (f) => f.start)
  const fOffset = new Int32Array(MEL_BANDS + 1)
  filters.forEach((f, b) => {
    fOffset[b + 1] = fOffset[b]! + f.weights.length
  })
  const fWeights = new Float64Array(fOffset[MEL_BANDS]!)
  filters.forEach((f, b) => {
    fWeights.set(f.weights, fOffset[b]!)
  })
  const binHz = sampleRate / nFft
  const lowTop = Math.max(1, Math.floor(150 / binHz))
  // Power of a full-scale sine lands near 1.
  const norm = 4 / (nFft * nFft)
  const mel = new Float32Array(count * MEL_BANDS)
  const low = new Float32Array(count)
  const centroid = new Float32Array(count)
  const rms = new Float32Array(count)
  let peak = 0
  for (let f = 0; f < count; f++) {
    fillFrame(x, f * hop, window, frame)
    fft.power(frame, power)
    let num = 0
    let den = 0
    for (let k = 1; k < power.length; k++) {
      const m = Math.sqrt(power[k]!)
      num += m * k
      den += m
    }
    centroid[f] = den > 1e-9 ? (num / den) * binHz : 0
    let lowSum = 0
    for (let k = 1; k <= lowTop; k++) lowSum += power[k]!
    low[f] = lowSum * norm
    const base = f * MEL_BANDS
    for (let b = 0; b < MEL_BANDS; b++) {
      const shift = fStart[b]! - fOffset[b]!
      let e = 0
      for (let i = fOffset[b]!; i < fOffset[b + 1]!; i++) e += fWeights[i]! * power[shift + i]!
      e *= norm
      mel[base + b] = e
      if (e > peak) peak = e
    }
    const a = Math.max(0, f * hop - (hop >> 1))
    const b = Math.min(x.length, a + hop)
    let s = 0
    for (let i = a; i < b; i++) s += x[i]! * x[i]!
    rms[f] = b > a ? Math.sqrt(s / (b - a)) : 0
  }
  const floor = Math.max(peak * 1e-8, 1e-20)
  const logFloor = Math.log(floor)
  for (let i = 0; i < mel.length; i++) mel[i] = mel[i]! > floor ? Math.log(mel[i]!) : logFloor
  for (let i = 0; i < low.length; i++) low[i] = low[i]! > floor ? Math.log(low[i]!) : logFloor
  return { count, rate: sampleRate / hop, melLog: mel, lowLog: low, centroid, rms }
}

/** Pitch-class frames (~2.7 Hz bins, ~186 ms hop). Frame f is centered at f·hop samples. */
export interface Chroma {
  count: number
  rate: number
  /** count × 12, pitch class 0 = C; whitened log-magnitude, so ≥ 0 and scale-free. */
  values: Float32Array
}

const CHROMA_LO = 55
const CHROMA_HI = 2000
const WHITEN_BINS = 40

export function chromagram(input: Float32Array, inputRate: number): Chroma {
  // Nothing above 2 kHz is needed: decimate to ≥ 4.4 kHz (22.05 → 5.5 kHz), then ~2.7 Hz bins
  // (55 Hz semitones are 3.3 Hz apart) cost a 2048-point FFT instead of 8192; hop ≈ 186 ms.
  const { samples: x, sampleRate } = decimate(input, inputRate, 4400)
  let nFft = 256
  while (nFft < 16384 && sampleRate / nFft > 3) nFft *= 2
  const hop = nFft / 2
  const count = x.length > 0 ? Math.floor(x.length / hop) + 1 : 0
  const fft = new RealFft(nFft)
  const window = hann(nFft)
  const frame = new Float64Array(nFft)
  const power = new Float64Array(nFft / 2 + 1)
  const binHz = sampleRate / nFft
  const k0 = Math.max(1, Math.ceil(CHROMA_LO / binHz))
  const k1 = Math.min(nFft / 2, Math.floor(Math.min(CHROMA_HI, sampleRate / 2) / binHz))
  // Whitening context on both sides of the analysed range.
  const w0 = Math.max(1, k0 - WHITEN_BINS / 2)
  const w1 = Math.min(nFft / 2, k1 + WHITEN_BINS / 2)
  const pcOf = new Int8Array(k1 + 1).fill(-1)
  const weightOf = new Float64Array(k1 + 1)
  for (let k = k0; k <= k1; k++) {
    const midi = 69 + 12 * Math.log2((k * binHz) / 440)
    const nearest = Math.round(midi)
    const w = 1 - 2 * Math.abs(midi - nearest)
    if (w <= 0) continue
    pcOf[k] = ((nearest % 12) + 12) % 12
    weightOf[k] = w
  }
  const logMag = new Float64Array(w1 + 1)
  const prefix = new Float64Array(w1 + 2)
  const values = new Float32Array(count * 12)
  const half = WHITEN_BINS / 2
  // |X|² of a −60 dBFS sine through the Hann window (peak |X| = A·n/4).
  const gate = (1e-3 * (nFft / 4)) ** 2
  for (let f = 0; f < count; f++) {
    fillFrame(x, f * hop, window, frame)
    fft.power(frame, power)
    let max = 0
    let inRange = 0
    for (let k = w0; k <= w1; k++) if (power[k]! > max) max = power[k]!
    for (let k = k0; k <= k1; k++) if (power[k]! > inRange) inRange = power[k]!
    // Nothing pitched in 55–2000 Hz louder than a −60 dBFS sine: silence, DC or rumble, no chroma.
    if (inRange < gate) continue
    // A floor 60 dB under the frame's peak keeps window leakage and rounding noise out of the log.
    const floor = max * 1e-6
    for (let k = w0; k <= w1; k++) {
      logMag[k] = 0.5 * Math.log(power[k]! + floor)
      prefix[k + 1] = prefix[k]! + logMag[k]!
    }
    const base = f * 12
    for (let k = k0; k <= k1; k++) {
      const pc = pcOf[k]!
      if (pc < 0) continue
      const a = Math.max(w0, k - half)
      const b = Math.min(w1, k + half)
      const avg = (prefix[b + 1]! - prefix[a]!) / (b - a + 1)
      const v = logMag[k]! - avg
      if (v > 0) values[base + pc] = values[base + pc]! + v * weightOf[k]!
    }
  }
  return { count, rate: sampleRate / hop, values }
}
