// The media role's assembly: which providers generate (an upstream model when configured, else
// the offline composer and espeak-ng), the analysis threads, the generation limit, the blob store
// the audio lands in. The gateway reaches it through a MediaClient (client.ts).
import type { BlobStore } from '../platform/blobs.ts'
import type { Logger } from '../platform/logger.ts'
import { createAnalysisPool, type AnalysisPool } from './analysis-pool.ts'
import { checkMediaPrerequisites, type MediaPrerequisiteReport } from './prerequisites.ts'
import { createSlots } from './slots.ts'
import { createOfflineSpeechProvider } from './providers/offline/espeak.ts'
import { createOfflineSongProvider } from './providers/offline/song-provider.ts'
import { createUpstreamSongProvider } from './providers/upstream/song.ts'
import { createUpstreamSpeechProvider } from './providers/upstream/speech.ts'
import { createSongPipeline, type SongOrder, type SongOutcome } from './songs.ts'
import { createSpeechPipeline, type SpeechDelivery, type SpeechOrder } from './speech.ts'
import type { SongProvider, SpeechProvider } from './types.ts'

/** What the gateway asks of the media role, in-process or over HTTP. */
export interface MediaClient {
  songs(order: SongOrder, signal: AbortSignal): Promise<SongOutcome>
  speech(order: SpeechOrder, signal: AbortSignal): Promise<SpeechDelivery>
  /** Why `kind` cannot be made right now (a missing tool), or undefined: asked before the 402. */
  unavailable?(kind: 'song' | 'speech'): Promise<string | undefined>
}

export interface MediaService extends MediaClient {
  readonly providers: { song: SongProvider; speech: SpeechProvider }
  /** Missing system tools the offline providers and the DSP need (undefined = all present). */
  prerequisites(): Promise<Record<string, unknown> | undefined>
  close(): Promise<void>
}

export interface MediaOptions {
  blobs: BlobStore
  logger: Logger
  publicMediaUrl: string
  /** Generations at once in this process. */
  concurrency: number
  analysisThreads?: number | undefined
  soundfont?: string | undefined
  song?: { url: string; apiKey?: string | undefined; model?: string | undefined } | undefined
  speech?: { url: string; apiKey?: string | undefined; model?: string | undefined } | undefined
  upstreamTimeoutMs?: number | undefined
  upstreamRetries?: number | undefined
  /** Injected providers (tests); otherwise chosen from the options above. */
  providers?: { song?: SongProvider; speech?: SpeechProvider } | undefined
  pool?: AnalysisPool | undefined
  /** A tool check already under way (started before the database opened, while forking is cheap): the first report. */
  toolCheck?: Promise<MediaPrerequisiteReport> | undefined
}

export function createMediaService(options: MediaOptions): MediaService {
  const upstream = { timeoutMs: options.upstreamTimeoutMs, retries: options.upstreamRetries }
  const song =
    options.providers?.song ??
    (options.song
      ? createUpstreamSongProvider({ url: options.song.url, apiKey: options.song.apiKey, model: options.song.model, ...upstream })
      : createOfflineSongProvider({ soundfont: options.soundfont }))
  const speech =
    options.providers?.speech ??
    (options.speech
      ? createUpstreamSpeechProvider({ url: options.speech.url, apiKey: options.speech.apiKey, model: options.speech.model, ...upstream })
      : createOfflineSpeechProvider())
  const pool = options.pool ?? createAnalysisPool({ threads: options.analysisThreads })
  const generations = createSlots(options.concurrency)
  const songs = createSongPipeline({ provider: song, pool, blobs: options.blobs, publicMediaUrl: options.publicMediaUrl, generations, logger: options.logger })
  const speeches = createSpeechPipeline({ provider: speech, blobs: options.blobs, publicMediaUrl: options.publicMediaUrl, generations })
  // ffmpeg is needed by every path (decode, MP3); fluidsynth and its soundfont by the offline
  // composer, espeak-ng by offline speech. Checked at most every 30 s (an install is noticed).
  const TOOLS_OF = { song: song.kind === 'offline' ? ['fluidsynth', 'soundfont'] : [], speech: speech.kind === 'offline' ? ['espeak-ng'] : [] }
  let checked: { at: number; report: Promise<MediaPrerequisiteReport> } | undefined = options.toolCheck ? { at: Date.now(), report: options.toolCheck } : undefined
  const report = () => {
    if (checked === undefined || Date.now() - checked.at > 30_000) checked = { at: Date.now(), report: checkMediaPrerequisites({ soundfont: options.soundfont }) }
    return checked.report
  }
  const missing = async (kinds: ('song' | 'speech')[]) => {
    const needed = new Set(['ffmpeg', 'ffprobe', ...kinds.flatMap((kind) => TOOLS_OF[kind])])
    return (await report()).problems.filter((problem) => needed.has(problem.tool))
  }
  return {
    providers: { song, speech },
    songs: (order, signal) => songs.generate(order, signal),
    speech: (order, signal) => speeches.synthesize(order, signal),
    async unavailable(kind) {
      const problems = await missing([kind])
      return problems.length === 0 ? undefined : problems.map((problem) => `${problem.reason} (fix: ${problem.fix})`).join('; ')
    },
    async prerequisites() {
      const problems = await missing(['song', 'speech'])
      return problems.length === 0 ? undefined : { problems }
    },
    close: () => pool.close(),
  }
}
