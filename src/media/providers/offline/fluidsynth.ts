// MIDI → audio with FluidSynth's fast (faster than real time, no audio device) renderer and a GM
// soundfont. The render is deterministic for the same MIDI: the synth has no random parts, and
// the only varying bytes in its float WAV are the PEAK chunk's timestamp, which parseWav skips.
// Float output so a loud mix cannot clip; chorus off (every part sends 0 to it anyway).
import { access, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { runTool } from '../../audio-io/process.ts'
import { parseWav } from '../../audio-io/wav.ts'
import { GenerationError, type Pcm } from '../../types.ts'

export const DEFAULT_SOUNDFONT = '/usr/share/sounds/sf2/FluidR3_GM.sf2'
export const RENDER_SAMPLE_RATE = 44100

export interface RenderOptions {
  /** The rendered audio is cut or padded with silence to exactly this many seconds. */
  durationSec: number
  soundfont?: string
  /** fluidsynth binary; default `fluidsynth` on PATH. */
  fluidsynth?: string
  /** Master gain (fluidsynth -g, 0..10). Default 0.5: headroom for a dense GM mix. */
  gain?: number
  signal?: AbortSignal
  /** Default 120 s (a 300 s song renders in a few seconds). */
  timeoutMs?: number
}

/** Renders a Standard MIDI File to 44.1 kHz stereo, exactly `durationSec` long. */
export async function renderMidi(midi: Uint8Array, options: RenderOptions): Promise<Pcm> {
  const soundfont = options.soundfont ?? DEFAULT_SOUNDFONT
  try {
    await access(soundfont)
  } catch {
    throw new GenerationError('unavailable', `the soundfont ${soundfont} is missing; fix: apt-get install -y fluid-soundfont-gm (or configure another GM soundfont)`)
  }
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-fluidsynth-'))
  try {
    const song = path.join(dir, 'song.mid')
    const out = path.join(dir, 'out.wav')
    await writeFile(song, midi)
    const args = [
      ...['-n', '-i', '-q'],
      ...['-g', String(options.gain ?? 0.5), '-r', String(RENDER_SAMPLE_RATE), '-C', '0', '-R', '1'],
      ...['-T', 'wav', '-O', 'float', '-F', out, soundfont, song],
    ]
    try {
      await runTool(options.fluidsynth ?? 'fluidsynth', args, {
        timeoutMs: options.timeoutMs ?? 120_000,
        maxStdoutBytes: 1024 * 1024,
        cwd: dir,
        ...(options.signal ? { signal: options.signal } : {}),
      })
    } catch (error) {
      if (error instanceof GenerationError || options.signal?.aborted) throw error
      throw new GenerationError('upstream', `fluidsynth failed: ${(error as Error).message}`, { cause: error })
    }
    let rendered: Pcm
    try {
      rendered = parseWav(await readFile(out))
    } catch (error) {
      throw new GenerationError('invalid_audio', `fluidsynth wrote no usable audio: ${(error as Error).message}`, { cause: error })
    }
    return fitDuration(rendered, options.durationSec)
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

/** Stereo (mono is duplicated), cut or padded to exactly `durationSec`. */
export function fitDuration(pcm: Pcm, durationSec: number): Pcm {
  const frames = Math.round(durationSec * pcm.sampleRate)
  const source = pcm.channels.length === 1 ? [pcm.channels[0]!, pcm.channels[0]!] : pcm.channels.slice(0, 2)
  const channels = source.map((channel) => {
    const out = new Float32Array(frames)
    out.set(channel.subarray(0, frames))
    return out
  })
  return { sampleRate: pcm.sampleRate, channels }
}
