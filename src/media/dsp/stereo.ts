// Stereo image of the first two channels: inter-channel correlation and side-to-mid ratio.
import type { Pcm } from '../types.ts'

/** sideToMidRatio when the mid is silent but the side is not (anti-phase): large but finite, JSON-safe. */
export const SIDE_TO_MID_CAP = 1000

export interface StereoImage {
  /** ΣLR / √(ΣL²·ΣR²) in [−1, 1]: 1 = mono, 0 = unrelated (or one side silent), −1 = anti-phase. */
  correlation: number
  /** rms((L − R)/2) / rms((L + R)/2): 0 = mono, ≈ 1 = unrelated, SIDE_TO_MID_CAP = anti-phase. 0 for silence. */
  sideToMidRatio: number
}

/** The image of channels 0 and 1; undefined for mono (or no channels). */
export function stereoImage(pcm: Pcm): StereoImage | undefined {
  const left = pcm.channels[0]
  const right = pcm.channels[1]
  if (left === undefined || right === undefined) return undefined
  let ll = 0
  let rr = 0
  let lr = 0
  let side = 0
  let mid = 0
  const n = Math.min(left.length, right.length)
  for (let i = 0; i < n; i++) {
    const l = left[i]!
    const r = right[i]!
    ll += l * l
    rr += r * r
    lr += l * r
    const s = l - r
    const m = l + r
    side += s * s
    mid += m * m
  }
  // Side and mid are summed directly (not derived from ll, rr, lr) so mono gives exactly 0 and
  // anti-phase exactly a silent mid, without cancellation error.
  const correlation = ll > 0 && rr > 0 ? Math.max(-1, Math.min(1, lr / Math.sqrt(ll * rr))) : 0
  const sideToMidRatio = side === 0 ? 0 : mid === 0 ? SIDE_TO_MID_CAP : Math.min(SIDE_TO_MID_CAP, Math.sqrt(side / mid))
  return { correlation, sideToMidRatio }
}
