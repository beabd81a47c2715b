// Offline speech with espeak-ng: robotic but clear, fast and deterministic, no network. The text
// goes through stdin (never argv: no option injection, no length limit of the command line), and
// espeak's streaming WAV (sizes 0x7fff…) comes back re-headed with its real sizes, 22.05 kHz
// mono; the speech pipeline converts it to 24 kHz.
import { parseWav, writeWav16 } from '../../audio-io/wav.ts'
import { runTool } from '../../audio-io/process.ts'
import { GenerationError, type GeneratedAudio, type SpeechGenerationRequest, type SpeechProvider } from '../../types.ts'

export const OFFLINE_SPEECH_MODEL = 'speechmodel-3.1-flash-tts (offline espeak-ng)'

export interface OfflineVoice {
  /** The name requests use. */
  name: string
  /** espeak-ng voice and variant (`-v`). */
  espeak: string
  /** espeak-ng pitch, 0..99 (`-p`, 50 is its default). */
  pitch: number
  description: string
}

/** The voices, the first being the default. */
export const OFFLINE_VOICES: readonly OfflineVoice[] = [
  { name: 'alloy', espeak: 'en-us', pitch: 50, description: 'American English, neutral' },
  { name: 'nova', espeak: 'en-us+f3', pitch: 55, description: 'American English, female' },
  { name: 'echo', espeak: 'en-gb+m3', pitch: 45, description: 'British English, male' },
  { name: 'shimmer', espeak: 'en-us+f4', pitch: 62, description: 'American English, female, higher' },
  { name: 'onyx', espeak: 'en-us+m7', pitch: 30, description: 'American English, male, deep' },
  { name: 'fable', espeak: 'en-gb-x-rp+m1', pitch: 50, description: 'British English (received pronunciation), male' },
  { name: 'sage', espeak: 'en-gb-scotland+f2', pitch: 52, description: 'Scottish English, female' },
  { name: 'coral', espeak: 'en-029+f5', pitch: 58, description: 'Caribbean English, female' },
  { name: 'ash', espeak: 'en-us-nyc+m2', pitch: 46, description: 'New York English, male' },
  { name: 'ballad', espeak: 'en-gb-x-rp+f2', pitch: 48, description: 'British English (received pronunciation), female, soft' },
]

/** espeak-ng's accepted rate range, words per minute. */
const MIN_WPM = 80
const MAX_WPM = 450

export interface OfflineSpeechOptions {
  /** espeak-ng binary; default `espeak-ng` on PATH. */
  espeak?: string | undefined
  /** Per synthesis. Default 60 s. */
  timeoutMs?: number | undefined
}

/** espeak-ng's `-s` for a speed of 0.5..2 (1 = its default 175 wpm). */
export function wordsPerMinute(speed: number): number {
  const safe = Number.isFinite(speed) ? speed : 1
  return Math.round(Math.min(MAX_WPM, Math.max(MIN_WPM, 175 * safe)))
}

export function createOfflineSpeechProvider(options: OfflineSpeechOptions = {}): SpeechProvider {
  return {
    kind: 'offline',
    model: OFFLINE_SPEECH_MODEL,
    voices: OFFLINE_VOICES.map((v) => v.name),
    async synthesize(request: SpeechGenerationRequest): Promise<GeneratedAudio> {
      request.signal.throwIfAborted()
      const voice = OFFLINE_VOICES.find((v) => v.name === request.voice)
      if (!voice) throw new Error(`unknown voice "${request.voice}" (voices: ${OFFLINE_VOICES.map((v) => v.name).join(', ')})`)
      // Control characters are not speech; espeak would spell some of them out.
      const text = request.text.replace(/(?![\t\n\r])\p{Cc}/gu, ' ')
      const args = ['-v', voice.espeak, '-s', String(wordsPerMinute(request.speed)), '-p', String(voice.pitch), '-b', '1', '--stdin', '--stdout']
      let stdout: Buffer
      try {
        ;({ stdout } = await runTool(options.espeak ?? 'espeak-ng', args, {
          stdin: Buffer.from(text, 'utf8'),
          signal: request.signal,
          timeoutMs: options.timeoutMs ?? 60_000,
          maxStdoutBytes: 128 * 1024 * 1024,
        }))
      } catch (error) {
        if (error instanceof GenerationError || request.signal.aborted) throw error
        throw new GenerationError('upstream', `espeak-ng failed: ${(error as Error).message}`, { cause: error })
      }
      let wav: Buffer
      try {
        const pcm = parseWav(stdout)
        if (!pcm.channels[0]?.some((x) => x !== 0)) throw new Error('only silence (nothing speakable in the text)')
        wav = writeWav16(pcm)
      } catch (error) {
        throw new GenerationError('invalid_audio', `espeak-ng produced no speech: ${(error as Error).message}`, { cause: error })
      }
      return { bytes: wav, mimeType: 'audio/wav', model: OFFLINE_SPEECH_MODEL, seed: 0 }
    },
  }
}
