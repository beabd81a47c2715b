// Turning chosen audio into the delivered file. Without mastering: the MP3 of the audio as it
// is. With mastering: our chain (gain → oversampled look-ahead true-peak limiter → fade, in a
// worker), then MP3, then the MP3 is decoded and measured again, because encoding moves both the
// loudness (its low-pass) and the true peak (+0.1…0.4 dB). The next round corrects for what the
// last one measured, until the delivered bytes are within tolerance of the target.
import { decodeToPcm, encodeMp3 } from './audio-io/ffmpeg.ts'
import type { AnalysisPool, LoudnessReading } from './analysis-pool.ts'
import type { MasteringTarget } from './dsp/mastering.ts'
import type { Pcm } from './types.ts'

/** The delivered loudness must land within this of the target (the product promises ±0.5 LU). */
const LOUDNESS_TOLERANCE_LU = 0.3
/**
 * The delivered true peak must sit this far under the ceiling: BS.1770's 4× interpolation may
 * under-read a sharp transient by a few tenths of a dB against finer meters (ffmpeg reads at
 * 192 kHz), and the promise is that nobody's meter finds the ceiling exceeded.
 */
const TRUE_PEAK_SAFETY_DB = 0.2
const MAX_ROUNDS = 4

export interface Delivered {
  mp3: Buffer
  /** The delivered MP3, decoded: what the final analysis describes. */
  decoded: Pcm
  mastering?: {
    rounds: number
    targetReached: boolean
    measured: LoudnessReading
    gainAppliedDb: number
    limiterMaxGainReductionDb: number
  }
}

/** `song`: the chosen audio and its MP3 as generated (delivered as it is without mastering). */
export async function deliverSong(
  song: { pcm: Pcm; mp3: Buffer },
  mastering: MasteringTarget | undefined,
  deps: { pool: AnalysisPool; signal?: AbortSignal | undefined },
): Promise<Delivered> {
  const { pool, signal } = deps
  const { pcm } = song
  if (mastering === undefined) return { mp3: song.mp3, decoded: await decodeToPcm(song.mp3, { signal }) }
  let ceilingMarginDb = 0.3
  let loudnessOffsetLu = 0
  let best: (Delivered & { error: number }) | undefined
  for (let round = 1; round <= MAX_ROUNDS; round += 1) {
    signal?.throwIfAborted()
    const pass = await pool.master(pcm, mastering, { ceilingMarginDb, loudnessOffsetLu })
    if (!Number.isFinite(pass.integratedLufs)) {
      // Silence cannot be brought to a loudness: delivered as it is, and said so.
      const { mp3 } = song
      const decoded = await decodeToPcm(mp3, { signal })
      const measured = await pool.loudness(decoded)
      return { mp3, decoded, mastering: { rounds: round, targetReached: false, measured, gainAppliedDb: 0, limiterMaxGainReductionDb: 0 } }
    }
    const mp3 = await encodeMp3(pass.pcm, { signal })
    const decoded = await decodeToPcm(mp3, { signal })
    const measured = await pool.loudness(decoded)
    const loudnessError = mastering.targetLufs - measured.integratedLufs
    const peakExcess = measured.truePeakDb - (mastering.truePeakDb - TRUE_PEAK_SAFETY_DB)
    const reached = Math.abs(loudnessError) <= LOUDNESS_TOLERANCE_LU && peakExcess <= 0
    const candidate = {
      mp3,
      decoded,
      error: Math.abs(loudnessError) + Math.max(0, peakExcess) * 10,
      mastering: {
        rounds: round,
        targetReached: reached && pass.targetReached,
        measured,
        gainAppliedDb: pass.gainAppliedDb,
        limiterMaxGainReductionDb: pass.limiterMaxGainReductionDb,
      },
    }
    if (best === undefined || candidate.error < best.error) best = candidate
    if (reached) break
    loudnessOffsetLu += loudnessError
    if (peakExcess > 0) ceilingMarginDb += peakExcess + 0.1
  }
  const { error: _error, ...delivered } = best!
  return delivered
}
