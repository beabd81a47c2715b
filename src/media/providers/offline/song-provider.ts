// The embedded song model: compose (prompt + seed → plan) → MIDI → fluidsynth → WAV. Needs no
// configuration and no network, so `npm start` makes real music. Same request and seed → the same
// bytes. The plan rides along on the result for diagnostics and tests.
import os from 'node:os'
import { writeWav16 } from '../../audio-io/wav.ts'
import type { GeneratedAudio, Pcm, SongGenerationRequest, SongProvider } from '../../types.ts'
import { compose, type MusicalPlan } from './composer.ts'
import { DEFAULT_SOUNDFONT, renderMidi } from './fluidsynth.ts'
import { planToMidi } from './midi.ts'
import { createSlots } from '../../slots.ts'

export const OFFLINE_SONG_MODEL = 'songmodel-3-pro (offline composer)'

export interface OfflineSongOptions {
  /** GM soundfont; default /usr/share/sounds/sf2/FluidR3_GM.sf2 (Debian fluid-soundfont-gm). */
  soundfont?: string | undefined
  /** fluidsynth binary; default `fluidsynth` on PATH. */
  fluidsynth?: string | undefined
  /** Renders at once (each is one fluidsynth process, one core). Default the core count. */
  concurrency?: number | undefined
  /** Per render. Default 120 s. */
  timeoutMs?: number | undefined
}

export interface OfflineGeneratedAudio extends GeneratedAudio {
  /** What was composed: the exact bpm, key, sections and parts of the audio. */
  plan: MusicalPlan
}

/** Peak of the delivered audio, dBFS: headroom for mastering, and every genre equally loud-ish. */
const PEAK_DBFS = -1
const END_FADE_SEC = 0.05

export interface OfflineSongProvider extends SongProvider {
  generate(request: SongGenerationRequest): Promise<OfflineGeneratedAudio>
}

export function createOfflineSongProvider(options: OfflineSongOptions = {}): OfflineSongProvider {
  const slots = createSlots(Math.max(1, options.concurrency ?? os.availableParallelism()))
  return {
    kind: 'offline',
    model: OFFLINE_SONG_MODEL,
    async generate(request) {
      request.signal.throwIfAborted()
      const plan = compose(request)
      const midi = planToMidi(plan)
      const pcm = await slots.run(request.signal, () =>
        renderMidi(midi, {
          durationSec: plan.durationSec,
          soundfont: options.soundfont ?? DEFAULT_SOUNDFONT,
          signal: request.signal,
          ...(options.fluidsynth ? { fluidsynth: options.fluidsynth } : {}),
          ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}),
        }),
      )
      finish(pcm)
      return { bytes: writeWav16(pcm), mimeType: 'audio/wav', model: OFFLINE_SONG_MODEL, seed: request.seed, plan }
    },
  }
}

/** Peak-normalises to PEAK_DBFS and fades the last 50 ms (the cut at the plan's length must not click). */
export function finish(pcm: Pcm): void {
  let peak = 0
  for (const channel of pcm.channels) for (let i = 0; i < channel.length; i++) peak = Math.max(peak, Math.abs(channel[i]!))
  const gain = peak > 1e-6 ? 10 ** (PEAK_DBFS / 20) / peak : 1
  const fade = Math.min(Math.round(END_FADE_SEC * pcm.sampleRate), pcm.channels[0]?.length ?? 0)
  for (const channel of pcm.channels) {
    const n = channel.length
    for (let i = 0; i < n; i++) channel[i]! *= gain
    for (let k = 0; k < fade; k++) channel[n - 1 - k]! *= 0.5 - 0.5 * Math.cos((Math.PI * k) / fade)
  }
}
