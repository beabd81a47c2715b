// Signals the DSP tests synthesise: seeded noise sources and a music-like mix.
import type { Pcm } from '../../src/media/types.ts'

/** Seeded noise in [−1, 1) (a linear congruential generator: fast, and the same on every run). */
export function signedNoise(seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0
    return (state / 2 ** 32) * 2 - 1
  }
}

/** Seeded uniform numbers in [0, 1) (mulberry32). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let x = a
    x = Math.imul(x ^ (x >>> 15), x | 1)
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61)
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

/**
 * 120 BPM kick/snare/hats, bass and chords, with a quieter middle section; `gain` 0.5 reads about
 * −18 LUFS, 0.3 about −22 LUFS with −6 dBTP peaks. The drum noise is
 * low-passed (two poles at 6 kHz) and its hits have a 1–2 ms attack, as in recorded music: with
 * full-band noise switched on instantly, peaks fall between samples with so much energy near
 * Nyquist that the BS.1770 4× filter reads up to 0.5 dB under ffmpeg's 192 kHz resampler (both
 * within the standard's tolerance), which is not what this cross-check is about.
 */
export function musicLike(rate: number, seconds: number, seed: number, gain = 0.5): Pcm {
  const white = signedNoise(seed)
  const smoothing = 1 - Math.exp((-2 * Math.PI * 6000) / rate)
  let pole1 = 0
  let pole2 = 0
  const random = () => {
    pole1 += smoothing * (2 * white() - pole1)
    pole2 += smoothing * (pole1 - pole2)
    return pole2
  }
  const n = Math.round(seconds * rate)
  const left = new Float32Array(n)
  const right = new Float32Array(n)
  const roots = [110, 87.31, 130.81, 98]
  for (let i = 0; i < n; i++) {
    const time = i / rate
    const beat = time / 0.5
    const inBeat = (beat % 1) * 0.5
    const inEighth = ((beat * 2) % 1) * 0.25
    const root = roots[Math.floor(time / 2) % 4]!
    const level = time > seconds / 3 && time < (2 * seconds) / 3 ? 0.35 : 1
    const kick = 0.8 * Math.exp(-inBeat / 0.12) * Math.sin(2 * Math.PI * (45 + 75 * Math.exp(-inBeat / 0.03)) * inBeat)
    const noise = random()
    const snareEnvelope = Math.min(1, inBeat / 0.002) * Math.exp(-inBeat / 0.07)
    const snare = Math.floor(beat) % 2 === 1 ? snareEnvelope * (0.35 * noise + 0.2 * Math.sin(2 * Math.PI * 185 * inBeat)) : 0
    const hat = 0.12 * Math.min(1, inEighth / 0.001) * Math.exp(-inEighth / 0.015) * noise
    const bass = 0.25 * Math.sin(2 * Math.PI * root * time) + 0.08 * Math.sin(4 * Math.PI * root * time)
    let chordL = 0
    let chordR = 0
    for (const ratio of [2, 2.52, 3]) {
      for (let k = 1; k <= 3; k++) {
        chordL += (0.05 / k) * Math.sin(2 * Math.PI * root * ratio * k * time)
        chordR += (0.05 / k) * Math.sin(2 * Math.PI * root * ratio * k * 1.003 * time)
      }
    }
    const centre = kick + snare + bass
    left[i] = gain * level * (centre + 0.4 * hat + chordL)
    right[i] = gain * level * (centre + 0.8 * hat + chordR)
  }
  return { sampleRate: rate, channels: [left, right] }
}
