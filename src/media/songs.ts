// Song generation, start to finish: candidates generate in parallel (within the process's
// generation limit), each is decoded, analysed in a worker and stored as MP3; the candidates are
// ranked against the request; the best is mastered when asked and measured again as delivered.
// Everything the answer names is in the blob store before the answer exists, so the gateway
// never settles a payment for audio that is not there.
import { randomInt } from 'node:crypto'
import type { Static } from '@sinclair/typebox'
import type { SongRequest, SongResult } from '../catalog/schemas/songs.ts'
import type { Slots } from './slots.ts'
import type { BlobStore } from '../platform/blobs.ts'
import { AppError } from '../platform/errors.ts'
import { unavailableDependency } from '../platform/dependency-errors.ts'
import type { Logger } from '../platform/logger.ts'
import type { AnalysisPool } from './analysis-pool.ts'
import { decodeToPcm, encodeMp3 } from './audio-io/ffmpeg.ts'
import { deliverSong } from './delivery.ts'
import { audioKeyFor, audioUrl } from './hosting.ts'
import { rankCandidates } from './ranking.ts'
import { checkSongRequest } from './request-rules.ts'
import { GenerationError, type Analysis, type Pcm, type Score, type SongProvider } from './types.ts'

export type SongOrder = Static<typeof SongRequest>
/** The song result without what the gateway adds (the price). */
export type SongDelivery = Omit<Static<typeof SongResult>, 'price_usdc'>

export interface SongOutcome {
  result: SongDelivery
  ordered: number
  delivered: number
}

export interface SongPipelineDeps {
  provider: SongProvider
  pool: AnalysisPool
  blobs: BlobStore
  /** Base URL hosted audio is served under (…/media/audio/<key>). */
  publicMediaUrl: string
  /** Generations at once in this process, across requests and candidates. */
  generations: Slots
  logger: Logger
}

interface Made {
  index: number
  seed: number
  model: string
  analysis: Analysis
  url: string
  sizeBytes: number
}

const MAX_SEED = Number.MAX_SAFE_INTEGER

/** Candidate i's seed: the request's seed + i (wrapping inside the safe-integer range), else random. */
export function candidateSeed(seed: number | undefined, index: number): number {
  if (seed === undefined) return randomInt(0, 2 ** 31)
  const next = seed + index
  return next > MAX_SEED ? next - 2 * MAX_SEED - 1 : next
}

/**
 * Every candidate failed: a dependency's outage (the blob volume full, …) as itself (503 with
 * Retry-After: the generation did not fail), else 504 if one timed out, 503 if a tool or upstream
 * was missing, else 502.
 */
function allFailed(errors: unknown[]): unknown {
  const outage = errors.find((error) => unavailableDependency(error) !== undefined)
  if (outage !== undefined) return outage
  const kinds = errors.map((error) => (error instanceof GenerationError ? error.kind : 'upstream'))
  const detail = `all ${errors.length} generation${errors.length === 1 ? '' : 's'} failed (${[...new Set(kinds)].join(', ')}); nothing was charged`
  if (kinds.includes('timeout')) return new AppError('generation_timeout', detail, { extensions: { generationFailures: errors.length } })
  if (kinds.every((kind) => kind === 'unavailable')) return new AppError('media_unavailable', detail, { extensions: { generationFailures: errors.length } })
  return new AppError('generation_failed', detail, { extensions: { generationFailures: errors.length } })
}

export function createSongPipeline(deps: SongPipelineDeps) {
  const { provider, pool, blobs, logger } = deps

  async function store(mp3: Buffer): Promise<string> {
    const key = audioKeyFor(mp3, 'mp3')
    await blobs.put(key, mp3, 'audio/mpeg')
    return audioUrl(deps.publicMediaUrl, key)
  }

  /** `audio`: each candidate's decoded audio and MP3, kept only until the best is chosen (up to 3 × 300 s of PCM). */
  async function makeCandidate(order: SongOrder, durationSec: number, index: number, signal: AbortSignal, audio: Map<number, { pcm: Pcm; mp3: Buffer }>): Promise<Made> {
    const seed = candidateSeed(order.seed, index)
    const generated = await deps.generations.run(signal, () =>
      provider.generate({
        prompt: order.prompt,
        negativePrompt: order.negativePrompt,
        seed,
        topP: order.topP,
        temperature: order.temperature,
        durationSec,
        instrumental: order.instrumental ?? false,
        tailReserveSec: order.tailReserveSec,
        sections: order.sections,
        referenceImageUrls: order.referenceImageUrls,
        instrumentalLeadMapping: order.instrumentalLeadMapping,
        instrumentalLeadContinuity: order.instrumentalLeadContinuity,
        targetBpm: order.selectionTarget?.bpm,
        signal,
      }),
    )
    const pcm = await decodeToPcm(generated.bytes, { signal })
    const analysis = await pool.analyze(pcm, { targetBpm: order.selectionTarget?.bpm })
    const mp3 = await encodeMp3(pcm, { signal })
    audio.set(index, { pcm, mp3 })
    return { index, seed: generated.seed, model: generated.model, analysis, url: await store(mp3), sizeBytes: mp3.length }
  }

  return {
    async generate(order: SongOrder, signal: AbortSignal): Promise<SongOutcome> {
      const { durationSec } = checkSongRequest(order)
      const ordered = order.candidateCount ?? 1
      const audio = new Map<number, { pcm: Pcm; mp3: Buffer }>()
      const settled = await Promise.allSettled(Array.from({ length: ordered }, (_, index) => makeCandidate(order, durationSec, index, signal, audio)))
      const made: Made[] = []
      const errors: unknown[] = []
      settled.forEach((outcome, index) => {
        if (outcome.status === 'fulfilled') made.push(outcome.value)
        else {
          errors.push(outcome.reason)
          logger.warn({ err: outcome.reason, candidate: index }, 'song candidate failed')
        }
      })
      signal.throwIfAborted()
      if (made.length === 0) throw allFailed(errors)

      const ranking = rankCandidates(
        made.map((candidate) => ({ index: candidate.index, analysis: candidate.analysis, seconds: candidate.analysis.durationSec })),
        {
          durationSec,
          targetBpm: order.selectionTarget?.bpm,
          matchPriorities: order.selectionTarget?.matchPriorities,
          sections: order.sections,
        },
      )
      const selected = made.find((candidate) => candidate.index === ranking.selected) ?? made[0]!
      const scoreOf = (index: number): Score => ranking.scores[made.findIndex((candidate) => candidate.index === index)]!

      // Missing members took their schema defaults (−14 LUFS, −1 dBTP, 1 s) when the body was validated.
      const mastering = order.mastering
      const chosen = audio.get(selected.index)!
      audio.clear()
      const delivered = await deliverSong(chosen, mastering, { pool, signal })
      const final = await pool.analyze(delivered.decoded, { targetBpm: order.selectionTarget?.bpm })
      const url = mastering === undefined ? selected.url : await store(delivered.mp3)
      const notes = [...ranking.notes]
      if (delivered.mastering) {
        const { measured, rounds, targetReached } = delivered.mastering
        notes.push(
          `mastered to ${measured.integratedLufs.toFixed(2)} LUFS / ${measured.truePeakDb.toFixed(2)} dBTP as delivered (target ${mastering!.targetLufs} LUFS, ceiling ${mastering!.truePeakDb} dBTP) in ${rounds} round${rounds === 1 ? '' : 's'}` +
            (targetReached ? '' : '; target not fully reached'),
        )
      }
      if (errors.length > 0) notes.push(`${errors.length} of ${ordered} candidates failed to generate and are not charged`)

      return {
        ordered,
        delivered: made.length,
        result: {
          url,
          mimeType: 'audio/mpeg',
          sizeBytes: delivered.mp3.length,
          seconds: final.durationSec,
          model: selected.model,
          candidates: made.map((candidate) => ({
            index: candidate.index,
            url: candidate.url,
            sizeBytes: candidate.sizeBytes,
            seconds: candidate.analysis.durationSec,
            seed: candidate.seed,
            score: scoreOf(candidate.index),
            diagnostics: candidate.analysis,
          })),
          diagnostics: { final, ...(mastering === undefined ? {} : { beforeMastering: selected.analysis }) },
          selectionNotes: notes,
          selectionMethod: 'local-dsp',
          ...(ordered > 1 ? { selectedCandidate: selected.index } : {}),
          generationFailures: errors.length,
        },
      }
    },
  }
}
