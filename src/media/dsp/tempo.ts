// Tempo, beats and downbeat, librosa style: log-mel spectral-flux onsets → autocorrelation with
// harmonic comb and a log-normal prior (σ = 1 octave around 120 bpm) → metrical-level choice →
// Ellis (2007) dynamic-programming beat tracker → least-squares beat grid → downbeat phase from
// low-band onsets and harmonic change. 4/4 is assumed.
import { type Chroma, type Frames, MEL_BANDS } from './spectrum.ts'

export interface TempoResult {
  bpm: number
  /** First grid beat ≥ 0, seconds. */
  beatOffsetSec: number
  beatIntervalSec: number
  /** Index (0..3) of the first downbeat among the grid beats counted from beatOffsetSec. */
  downbeatOffsetBeats: number
  downbeatConfidence: number
  /** Tracked beat times, seconds (not snapped to the grid). */
  beats: number[]
}

const MIN_BPM = 40
const MAX_BPM = 240
const PRIOR_BPM = 120
const PRIOR_OCTAVES = 1
const TIGHTNESS = 100
/** A metrical level's pulses are "all strong" when its weaker alternate pulses reach this share of the stronger ones. */
const UNIFORM = 0.5
/** The level choice reads a loudness-like envelope (log1p over a 30 dB range), where quiet hats stay small. */
const SALIENCE_RANGE_DB = 30
/** Least periodicity (harmonic comb over AC(0)) for a beat to be reported at all. */
const MIN_CLARITY = 0.25
/** A centred frame sees an attack before its centre: flux peaks lead the attack by ~11 ms (drum fixtures, 16–48 kHz). */
const LATENCY_SEC = 0.011

/** Onset strength envelope: mean half-wave-rectified log-mel difference, minus a 1 s moving average, unit RMS. */
export function onsetStrength(frames: Frames, rangeDb = 0): Float64Array {
  const { count } = frames
  let melLog = frames.melLog
  if (rangeDb > 0) {
    let peak = Number.NEGATIVE_INFINITY
    for (let i = 0; i < melLog.length; i++) if (melLog[i]! > peak) peak = melLog[i]!
    const ref = peak - (rangeDb / 10) * Math.LN10
    const c = new Float32Array(melLog.length)
    for (let i = 0; i < c.length; i++) c[i] = Math.log1p(Math.exp(melLog[i]! - ref))
    melLog = c
  }
  const flux = new Float64Array(count)
  for (let t = 1; t < count; t++) {
    let s = 0
    const a = t * MEL_BANDS
    const b = a - MEL_BANDS
    for (let i = 0; i < MEL_BANDS; i++) {
      const d = melLog[a + i]! - melLog[b + i]!
      if (d > 0) s += d
    }
    flux[t] = s / MEL_BANDS
  }
  return detrend(flux, Math.round(frames.rate))
}

/** Half-wave-rectified difference of the < 150 Hz amplitude (√power, so accents keep their size): kick onsets. */
export function lowBandOnsets(frames: Frames): Float64Array {
  const { count, lowLog } = frames
  const out = new Float64Array(count)
  let prev = 0
  for (let t = 0; t < count; t++) {
    const v = Math.exp(0.5 * lowLog[t]!)
    if (t > 0) out[t] = Math.max(0, v - prev)
    prev = v
  }
  return out
}

function detrend(x: Float64Array, width: number): Float64Array {
  const n = x.length
  const prefix = new Float64Array(n + 1)
  for (let i = 0; i < n; i++) prefix[i + 1] = prefix[i]! + x[i]!
  const half = width >> 1
  const out = new Float64Array(n)
  let sq = 0
  for (let i = 0; i < n; i++) {
    const a = Math.max(0, i - half)
    const b = Math.min(n, i + half + 1)
    const v = Math.max(0, x[i]! - (prefix[b]! - prefix[a]!) / (b - a))
    out[i] = v
    sq += v * v
  }
  const rms = Math.sqrt(sq / Math.max(1, n))
  if (rms > 1e-9) for (let i = 0; i < n; i++) out[i] = out[i]! / rms
  return out
}

/** Autocorrelation of the mean-removed envelope, lags 0..maxLag, unbiased. */
function autocorrelation(env: Float64Array, maxLag: number): Float64Array {
  const n = env.length
  let mean = 0
  for (let i = 0; i < n; i++) mean += env[i]!
  mean /= Math.max(1, n)
  const x = new Float64Array(n)
  for (let i = 0; i < n; i++) x[i] = env[i]! - mean
  const ac = new Float64Array(maxLag + 1)
  for (let lag = 0; lag <= maxLag && lag < n; lag++) {
    let s = 0
    for (let i = lag; i < n; i++) s += x[i]! * x[i - lag]!
    ac[lag] = s / (n - lag)
  }
  return ac
}

function interp(a: Float64Array, x: number): number {
  const i = Math.floor(x)
  if (i + 1 >= a.length) return i < a.length ? a[i]! : 0
  const f = x - i
  return a[i]! * (1 - f) + a[i + 1]! * f
}

/** Harmonic-comb periodicity of a lag (frames): Σ_k AC(k·lag)/k, k = 1..4. */
function comb(ac: Float64Array, lag: number): number {
  let s = 0
  for (let k = 1; k <= 4; k++) if (k * lag < ac.length - 1) s += interp(ac, k * lag) / k
  return s
}

const prior = (bpm: number): number => Math.exp(-0.5 * (Math.log2(bpm / PRIOR_BPM) / PRIOR_OCTAVES) ** 2)

/** Ellis (2007) DP: beats maximising onset strength minus TIGHTNESS·log²(interval/period). Returns frames. */
export function trackBeats(env: Float64Array, period: number): number[] {
  const n = env.length
  if (n === 0) return []
  // Local score: the envelope smoothed by a narrow Gaussian (σ = period/32, cut at 4σ), as librosa does.
  const radius = Math.max(1, Math.ceil(period / 8))
  const kernel: number[] = []
  for (let i = -radius; i <= radius; i++) kernel.push(Math.exp(-0.5 * ((i * 32) / period) ** 2))
  const local = new Float64Array(n)
  let maxLocal = 0
  for (let t = 0; t < n; t++) {
    let s = 0
    for (let i = -radius; i <= radius; i++) {
      const j = t + i
      if (j >= 0 && j < n) s += env[j]! * kernel[i + radius]!
    }
    local[t] = s
    if (s > maxLocal) maxLocal = s
  }
  const cum = new Float64Array(n)
  const back = new Int32Array(n).fill(-1)
  const lo = Math.round(2 * period)
  const hi = Math.max(1, Math.round(period / 2))
  const penalty = new Float64Array(lo + 1)
  for (let d = hi; d <= lo; d++) penalty[d] = -TIGHTNESS * Math.log(d / period) ** 2
  let started = false
  for (let t = 0; t < n; t++) {
    let best = Number.NEGATIVE_INFINITY
    let arg = -1
    for (let d = hi; d <= lo && d <= t; d++) {
      const v = cum[t - d]! + penalty[d]!
      if (v > best) {
        best = v
        arg = t - d
      }
    }
    if (arg < 0) best = 0
    cum[t] = local[t]! + best
    if (!started && local[t]! < 0.01 * maxLocal) back[t] = -1
    else {
      back[t] = arg
      started = true
    }
  }
  // Last beat: the latest local maximum of the cumulative score above half the median of those maxima.
  const peaks: number[] = []
  for (let t = 1; t < n - 1; t++) if (cum[t]! > cum[t - 1]! && cum[t]! >= cum[t + 1]!) peaks.push(t)
  if (peaks.length === 0) return []
  const sorted = peaks.map((t) => cum[t]!).sort((a, b) => a - b)
  const median = sorted[sorted.length >> 1]!
  let tail = peaks[peaks.length - 1]!
  for (let i = peaks.length - 1; i >= 0; i--) {
    if (cum[peaks[i]!]! >= 0.5 * median) {
      tail = peaks[i]!
      break
    }
  }
  const beats: number[] = []
  for (let t = tail; t >= 0; t = back[t]!) beats.push(t)
  beats.reverse()
  // Trim weak beats at both ends (silence, fade in/out).
  let sq = 0
  for (const b of beats) sq += local[b]! ** 2
  const threshold = 0.5 * Math.sqrt(sq / beats.length)
  let first = 0
  let last = beats.length - 1
  while (first <= last && local[beats[first]!]! < threshold) first++
  while (last >= first && local[beats[last]!]! < threshold) last--
  return beats.slice(first, last + 1)
}

/** Strongest envelope value within ±2 frames of a (fractional) frame position. */
function strengthAt(env: Float64Array, pos: number): number {
  const c = Math.round(pos)
  let m = 0
  for (let i = c - 2; i <= c + 2; i++) if (i >= 0 && i < env.length && env[i]! > m) m = env[i]!
  return m
}

/** Weakest / strongest mean strength over the phases (mod `cycle`) of a pulse train: 1 = all pulses alike. */
function uniformity(strengths: number[], cycle = 2): number {
  if (strengths.length < 4 * cycle) return 1
  const sum = new Array<number>(cycle).fill(0)
  const cnt = new Array<number>(cycle).fill(0)
  strengths.forEach((s, j) => {
    sum[j % cycle]! += s
    cnt[j % cycle]!++
  })
  const means = sum.map((s, i) => s / Math.max(1, cnt[i]!))
  const max = Math.max(...means)
  return max > 0 ? Math.min(...means) / max : 0
}

const mean = (a: number[]): number => a.reduce((s, v) => s + v, 0) / Math.max(1, a.length)

/**
 * Syncopated 16th patterns (funk) make the dotted-quarter period (×3/2 the beat) out-score the beat by a
 * little. In 4/4 the beat repeats at 2 and 4 beats (half bar, bar) and the dotted period does not, so a
 * ternary rival within 20 % of the best score wins when its half-bar + bar autocorrelation is higher.
 */
function ternaryRival(ac: Float64Array, rate: number, period: number, bestScore: number): number {
  const bar = (lag: number): number => interp(ac, 2 * lag) + interp(ac, 4 * lag)
  let best = period
  for (const m of [2 / 3, 1.5]) {
    const lag = period * m
    const bpm = (60 * rate) / lag
    if (bpm < MIN_BPM || bpm > MAX_BPM || 4 * lag >= ac.length - 1) continue
    if (Math.max(0, comb(ac, lag)) * prior(bpm) >= 0.8 * bestScore && bar(lag) > bar(best)) best = lag
  }
  return best
}

/**
 * The beat is the fastest metrical level (of ×2, ×1, ×½ the autocorrelation pick) whose pulses are
 * all strong: 8th-note hats do not double a kick/snare beat, and a slow backbeat is not halved.
 */
function chooseLevel(env: Float64Array, rate: number, period: number, beats: number[]): number {
  if (beats.length < 8) return period
  const on = beats.map((b) => strengthAt(env, b))
  const double: number[] = []
  for (let i = 0; i < beats.length; i++) {
    double.push(on[i]!)
    if (i + 1 < beats.length) double.push(strengthAt(env, (beats[i]! + beats[i + 1]!) / 2))
  }
  const even = on.filter((_, i) => i % 2 === 0)
  const odd = on.filter((_, i) => i % 2 === 1)
  const levels = [
    { period: period / 2, pulses: double },
    { period, pulses: on },
    { period: period * 2, pulses: mean(even) >= mean(odd) ? even : odd },
  ]
  for (const level of levels) {
    const bpm = (60 * rate) / level.period
    if (bpm > MAX_BPM * 1.001 || bpm < MIN_BPM * 0.999) continue
    if (uniformity(level.pulses) >= UNIFORM) return level.period
  }
  return period
}

/**
 * A target tempo picks among ×½, ×1, ×2 (octave ambiguity is always possible) and ×⅔, ×3/2 when the
 * envelope supports that period: comb score ≥ half the current one, and pulses laid every 3/2 (or
 * 2/3) tracked beats all strong, e.g. a real triplet feel rather than straight 8th notes.
 */
function applyTarget(ac: Float64Array, salience: Float64Array, rate: number, period: number, targetBpm: number): number {
  const base = comb(ac, period)
  const options = [1, 0.5, 2, 2 / 3, 1.5]
    .map((m) => ({ m, p: period / m, dist: Math.abs(Math.log2((60 * rate) / (period / m) / targetBpm)) }))
    .filter(({ p }) => (60 * rate) / p >= MIN_BPM * 0.999 && (60 * rate) / p <= MAX_BPM * 1.001)
    .sort((a, b) => a.dist - b.dist)
  let beats: number[] | undefined
  for (const { m, p } of options) {
    if (m === 1 || m === 0.5 || m === 2) return p
    if (comb(ac, p) < 0.5 * base) continue
    beats ??= trackBeats(salience, period)
    const step = 1 / m
    const pulses: number[] = []
    for (let x = 0; x <= beats.length - 1; x += step) {
      const i = Math.floor(x)
      const f = x - i
      pulses.push(strengthAt(salience, f > 1e-9 ? beats[i]! * (1 - f) + beats[i + 1]! * f : beats[i]!))
    }
    // ×⅔: on-beat and off-beat pulses alternate (cycle 2); ×3/2: one pulse in 3 is on a beat.
    if (pulses.length >= 12 && uniformity(pulses, m < 1 ? 2 : 3) >= UNIFORM) return p
  }
  return period
}

/** Sub-frame position of the envelope peak near a DP beat (parabolic), or the beat itself when there is none. */
function refinePeak(env: Float64Array, beat: number, floor: number): number {
  let arg = beat
  for (let i = beat - 3; i <= beat + 3; i++) if (i > 0 && i < env.length - 1 && env[i]! > env[arg]!) arg = i
  const y = env[arg]!
  if (y < floor || arg <= 0 || arg >= env.length - 1) return beat
  const a = env[arg - 1]!
  const c = env[arg + 1]!
  const den = a - 2 * y + c
  return den < 0 ? arg + (0.5 * (a - c)) / den : arg
}

const median = (a: number[]): number => {
  const s = [...a].sort((x, y) => x - y)
  return s.length === 0 ? 0 : s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}

/**
 * Least-squares grid t = offset + k·interval through beat times. A median fit comes first, so beats
 * the tracker put on an off-beat (typically at the ends) are dropped (> 20 % of a beat) before the fit.
 */
export function fitGrid(times: number[], approxInterval: number): { offset: number; interval: number } {
  if (times.length < 2) return { offset: times[0] ?? 0, interval: approxInterval }
  const index = [0]
  for (let i = 1; i < times.length; i++) index.push(index[i - 1]! + Math.max(1, Math.round((times[i]! - times[i - 1]!) / approxInterval)))
  let interval = median(times.slice(1).map((t, i) => (t - times[i]!) / (index[i + 1]! - index[i]!)))
  if (!(interval > 0)) interval = approxInterval
  let offset = median(times.map((t, i) => t - index[i]! * interval))
  for (let pass = 0; pass < 2; pass++) {
    let n = 0
    let sk = 0
    let st = 0
    let skk = 0
    let skt = 0
    times.forEach((t, i) => {
      const k = index[i]!
      if (Math.abs(t - (offset + interval * k)) > 0.2 * interval) return
      n++
      sk += k
      st += t
      skk += k * k
      skt += k * t
    })
    const den = n * skk - sk * sk
    if (n < 2 || den <= 0) break
    const slope = (n * skt - sk * st) / den
    if (!(slope > 0)) break
    interval = slope
    offset = (st - interval * sk) / n
  }
  return { offset, interval }
}

/**
 * Downbeat phase over the grid beats: per phase p (0..3) the mean of z(low-band onset) +
 * z(harmonic change) over beats ≡ p (mod 4). Confidence = softmax(3·score)[best].
 */
export function downbeatPhase(grid: { offset: number; interval: number; count: number }, low: Float64Array, rate: number, chroma: Chroma): { phase: number; confidence: number } {
  const { offset, interval, count } = grid
  if (count < 8) return { phase: 0, confidence: 0 }
  const lowAt: number[] = []
  const change: number[] = []
  for (let j = 0; j < count; j++) {
    const t = offset + j * interval
    lowAt.push(strengthAt(low, t * rate))
    // Half-bar windows: the chroma frames (~370 ms) are too long for single beats at fast tempi.
    const before = beatChroma(chroma, t - 2 * interval, t)
    const after = beatChroma(chroma, t, t + 2 * interval)
    change.push(before && after ? 1 - cosine(before, after) : Number.NaN)
  }
  const known = change.filter((c) => !Number.isNaN(c))
  const fill = mean(known)
  for (let j = 0; j < count; j++) if (Number.isNaN(change[j]!)) change[j] = fill
  const zl = zscore(lowAt)
  const zc = zscore(change)
  // Harmonic change counts only when it is bar-periodic beyond chance (drum loops have none).
  const wc = Math.min(1, Math.max(0, (phaseF(zc) - 3) / 6))
  const scores = [0, 1, 2, 3].map((p) => {
    const idx: number[] = []
    for (let j = p; j < count; j += 4) idx.push(j)
    return mean(idx.map((j) => zl[j]! + wc * zc[j]!))
  })
  let phase = 0
  for (let p = 1; p < 4; p++) if (scores[p]! > scores[phase]!) phase = p
  const exps = scores.map((s) => Math.exp(3 * (s - scores[phase]!)))
  const confidence = 1 / exps.reduce((a, b) => a + b, 0)
  return { phase, confidence: Number.isFinite(confidence) ? confidence : 0 }
}

/** One-way ANOVA F of a z-scored series grouped by phase mod 4: ≈ 1 for noise. */
function phaseF(z: number[]): number {
  const n = z.length
  if (n < 8) return 0
  const sum = [0, 0, 0, 0]
  const cnt = [0, 0, 0, 0]
  z.forEach((v, j) => {
    sum[j % 4]! += v
    cnt[j % 4]!++
  })
  const means = sum.map((s, p) => s / Math.max(1, cnt[p]!))
  let between = 0
  let within = 0
  z.forEach((v, j) => {
    within += (v - means[j % 4]!) ** 2
  })
  means.forEach((m, p) => {
    between += cnt[p]! * m * m
  })
  return within > 1e-12 ? between / 3 / (within / (n - 4)) : between > 0 ? 100 : 0
}

function beatChroma(chroma: Chroma, from: number, to: number): number[] | undefined {
  const a = Math.max(0, Math.ceil(from * chroma.rate))
  const b = Math.min(chroma.count - 1, Math.ceil(to * chroma.rate) - 1)
  if (b < a) {
    const c = Math.round(((from + to) / 2) * chroma.rate)
    if (c < 0 || c >= chroma.count) return undefined
    return Array.from(chroma.values.subarray(c * 12, c * 12 + 12))
  }
  const v = new Array<number>(12).fill(0)
  for (let f = a; f <= b; f++) for (let i = 0; i < 12; i++) v[i]! += chroma.values[f * 12 + i]!
  return v
}

export function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let ab = 0
  let aa = 0
  let bb = 0
  for (let i = 0; i < a.length; i++) {
    ab += a[i]! * b[i]!
    aa += a[i]! * a[i]!
    bb += b[i]! * b[i]!
  }
  return aa > 0 && bb > 0 ? ab / Math.sqrt(aa * bb) : 0
}

function zscore(a: number[]): number[] {
  const m = mean(a)
  const sd = Math.sqrt(mean(a.map((v) => (v - m) ** 2)))
  return sd > 1e-9 ? a.map((v) => (v - m) / sd) : a.map(() => 0)
}

export interface TempoOptions {
  targetBpm?: number | undefined
}

export function estimateTempo(frames: Frames, chroma: Chroma, durationSec: number, options: TempoOptions = {}): TempoResult {
  const rate = frames.rate
  const fallbackBpm = options.targetBpm && options.targetBpm > 0 ? options.targetBpm : PRIOR_BPM
  const fallback: TempoResult = { bpm: fallbackBpm, beatOffsetSec: 0, beatIntervalSec: 60 / fallbackBpm, downbeatOffsetBeats: 0, downbeatConfidence: 0, beats: [] }
  const env = onsetStrength(frames)
  const minLag = (60 * rate) / MAX_BPM
  const maxLag = (60 * rate) / MIN_BPM
  if (env.length < 2 * maxLag || !env.some((v) => v > 0)) return fallback
  const ac = autocorrelation(env, Math.min(env.length - 1, Math.ceil(4 * maxLag) + 2))
  let period = 0
  let bestScore = 0
  for (let lag = minLag; lag <= maxLag; lag += 0.25) {
    const s = Math.max(0, comb(ac, lag)) * prior((60 * rate) / lag)
    if (s > bestScore) {
      bestScore = s
      period = lag
    }
  }
  // Noise has a flat autocorrelation (comb/AC(0) ≈ 0.06); drum loops and songs score > 1.
  if (period === 0 || !(comb(ac, period) >= MIN_CLARITY * ac[0]!)) return fallback
  period = ternaryRival(ac, rate, period, bestScore)
  const salience = onsetStrength(frames, SALIENCE_RANGE_DB)
  period = chooseLevel(salience, rate, period, trackBeats(env, period))
  if (options.targetBpm && options.targetBpm > 0) period = applyTarget(ac, salience, rate, period, options.targetBpm)
  const beatFrames = trackBeats(env, period)
  if (beatFrames.length < 2) return fallback
  const floor = 0.25 * mean(beatFrames.map((b) => env[b]!))
  const beats = beatFrames.map((b) => refinePeak(env, b, floor) / rate + LATENCY_SEC)
  const { offset, interval } = fitGrid(beats, period / rate)
  const first = offset - Math.floor(offset / interval) * interval
  const count = Math.max(0, Math.floor((durationSec - first) / interval) + 1)
  const down = downbeatPhase({ offset: first, interval, count }, lowBandOnsets(frames), rate, chroma)
  return {
    bpm: 60 / interval,
    beatOffsetSec: first,
    beatIntervalSec: interval,
    downbeatOffsetBeats: down.phase,
    downbeatConfidence: Math.min(1, Math.max(0, down.confidence)),
    beats: beats.filter((t) => t >= 0),
  }
}
