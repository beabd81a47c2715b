// Scripted song and speech providers for tests of the selling side: real audio (a WAV of a kick
// pattern over held chords, made in JS in milliseconds), with failures, timeouts and garbage
// chosen per candidate seed. The media pipeline around them (decode, analysis workers, MP3,
// blob store) is the real one.
import { SPEECH_VOICES } from '../../src/catalog/schemas/speech.ts'
import { writeWav16 } from '../../src/media/audio-io/wav.ts'
import { GenerationError, type GeneratedAudio, type SongGenerationRequest, type SongProvider, type SpeechProvider } from '../../src/media/types.ts'

/** A stereo WAV: kick on every beat at `bpm`, an A-minor triad held underneath. */
export function syntheticSong(options: { seconds: number; bpm: number; sampleRate?: number }): Buffer {
  const rate = options.sampleRate ?? 22_050
  const length = Math.round(options.seconds * rate)
  const left = new Float32Array(length)
  const right = new Float32Array(length)
  const beat = (60 / options.bpm) * rate
  const chord = [220, 261.63, 329.63]
  for (let i = 0; i < length; i += 1) {
    const sinceBeat = i % beat
    const kick = sinceBeat < rate * 0.12 ? Math.sin((2 * Math.PI * 60 * sinceBeat) / rate) * Math.exp(-sinceBeat / (rate * 0.03)) * 0.6 : 0
    let pad = 0
    for (const f of chord) pad += Math.sin((2 * Math.PI * f * i) / rate) * 0.08
    left[i] = kick + pad
    right[i] = kick + pad * 0.9
  }
  return writeWav16({ sampleRate: rate, channels: [left, right] })
}

export type Behaviour = 'ok' | 'fail' | 'timeout' | 'garbage' | 'unavailable'

/** A song provider whose candidate with seed `s` behaves as `behaviour(s)`; records every request. */
export function scriptedSongProvider(behaviour: (seed: number) => Behaviour = () => 'ok'): SongProvider & { requests: SongGenerationRequest[] } {
  const requests: SongGenerationRequest[] = []
  return {
    kind: 'upstream',
    model: 'scripted-song',
    requests,
    async generate(request): Promise<GeneratedAudio> {
      requests.push(request)
      switch (behaviour(request.seed)) {
        case 'fail':
          throw new GenerationError('upstream', 'the scripted upstream answered 503')
        case 'timeout':
          throw new GenerationError('timeout', 'the scripted upstream did not answer in time')
        case 'unavailable':
          throw new GenerationError('unavailable', 'fluidsynth is not installed (scripted)')
        case 'garbage':
          return { bytes: Buffer.from('<html>oops</html>'), mimeType: 'audio/mpeg', model: 'scripted-song', seed: request.seed }
        default:
          return { bytes: syntheticSong({ seconds: request.durationSec, bpm: request.targetBpm ?? 120 }), mimeType: 'audio/wav', model: 'scripted-song', seed: request.seed }
      }
    },
  }
}

export const scriptedSpeechProvider: SpeechProvider = {
  kind: 'upstream',
  model: 'scripted-speech',
  voices: SPEECH_VOICES,
  async synthesize(request) {
    const seconds = Math.max(0.5, request.text.length / 15)
    return { bytes: syntheticSong({ seconds, bpm: 90, sampleRate: 16_000 }), mimeType: 'audio/wav', model: 'scripted-speech', seed: 0 }
  },
}
