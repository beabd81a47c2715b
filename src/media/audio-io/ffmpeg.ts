// Decode, probe and encode through ffmpeg/ffprobe child processes (Debian ffmpeg 5.1). Inputs go
// through a temp file, not stdin: on a non-seekable input ffmpeg leaves the MP3 encoder padding
// untrimmed (+479 samples). MP3 output also goes to a file, so the muxer can write the LAME/Xing
// tag that lets decoders trim the encoder delay. Temp dirs are removed whatever happens. Raw
// sample buffers are host-endian typed arrays read as little-endian (every platform we run on).
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { GenerationError, type Pcm } from '../types.ts'
import { runFfmpeg, runFfprobe, runTool } from './process.ts'
import { parseWav, wavHeader16, toInt16 } from './wav.ts'

export interface FfmpegTools {
  /** ffmpeg binary; default `ffmpeg` on PATH. */
  ffmpeg?: string
  /** ffprobe binary; default `ffprobe` on PATH. */
  ffprobe?: string
}

export interface AudioProbe {
  sampleRate: number
  channels: number
  /** Container or stream duration; NaN when the file does not say. */
  durationSec: number
  codec: string
}

export interface DecodeOptions extends FfmpegTools {
  /** Output rate; default the file's own. */
  sampleRate?: number
  /** Output channel count (ffmpeg down/up-mixes); default the file's own. */
  channels?: number
  signal?: AbortSignal
  /** Longest audio decoded; more is an error, so hostile input cannot fill memory. Default 660 s. */
  maxDurationSec?: number
  timeoutMs?: number
}

export interface EncodeOptions extends FfmpegTools {
  signal?: AbortSignal
  timeoutMs?: number
}

/** Rates libmp3lame encodes (MPEG-1, 2 and 2.5). */
const MP3_RATES = [8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000]

async function withTempDir<T>(work: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-media-'))
  try {
    return await work(dir)
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

/** Interleaved little-endian float32 of planar samples (ffmpeg's `-f f32le`). */
export function interleaveF32(pcm: Pcm): Buffer {
  const count = pcm.channels.length
  const frames = pcm.channels[0]?.length ?? 0
  const out = new Float32Array(frames * count)
  for (let c = 0; c < count; c++) {
    const channel = pcm.channels[c]!
    for (let i = 0; i < frames; i++) out[i * count + c] = channel[i]!
  }
  return Buffer.from(out.buffer, out.byteOffset, out.byteLength)
}

/** Planar samples of interleaved little-endian float32. */
export function deinterleaveF32(bytes: Buffer, channelCount: number, sampleRate: number): Pcm {
  const frames = Math.floor(bytes.length / (4 * channelCount))
  // Copy into an aligned buffer: a Buffer from a pipe may start at any byte offset.
  const aligned = new Float32Array(frames * channelCount)
  new Uint8Array(aligned.buffer).set(bytes.subarray(0, aligned.byteLength))
  const channels = Array.from({ length: channelCount }, () => new Float32Array(frames))
  for (let c = 0; c < channelCount; c++) {
    const channel = channels[c]!
    for (let i = 0; i < frames; i++) channel[i] = aligned[i * channelCount + c]!
  }
  return { sampleRate, channels }
}

function checkPcm(pcm: Pcm, what: string): void {
  if (!Number.isInteger(pcm.sampleRate) || pcm.sampleRate < 1) throw new Error(`${what}: invalid sample rate ${pcm.sampleRate}`)
  if (pcm.channels.length < 1) throw new Error(`${what}: no channels`)
  const frames = pcm.channels[0]!.length
  if (pcm.channels.some((channel) => channel.length !== frames)) throw new Error(`${what}: channels differ in length`)
}

/** ffprobe of a file: the first audio stream's rate, channels, duration and codec. */
export async function probeFile(file: string, options: Pick<DecodeOptions, 'ffprobe' | 'signal' | 'timeoutMs'> = {}): Promise<AudioProbe> {
  let stdout: Buffer
  try {
    ;({ stdout } = await runFfprobe(
      options.ffprobe ?? 'ffprobe',
      ['-select_streams', 'a:0', '-show_entries', 'stream=codec_name,sample_rate,channels,duration:format=duration', '-of', 'json', file],
      { timeoutMs: options.timeoutMs ?? 30_000, maxStdoutBytes: 1024 * 1024, ...(options.signal ? { signal: options.signal } : {}) },
    ))
  } catch (error) {
    if (error instanceof GenerationError || options.signal?.aborted) throw error
    throw new GenerationError('invalid_audio', `not decodable audio: ${(error as Error).message}`, { cause: error })
  }
  const json = JSON.parse(stdout.toString('utf8')) as {
    streams?: Array<{ codec_name?: string; sample_rate?: string; channels?: number; duration?: string }>
    format?: { duration?: string }
  }
  const stream = json.streams?.[0]
  const sampleRate = Number(stream?.sample_rate)
  const channels = Number(stream?.channels)
  if (!stream || !(sampleRate > 0) || !(channels > 0)) throw new GenerationError('invalid_audio', 'not decodable audio: no audio stream')
  const durationSec = Number(stream.duration ?? json.format?.duration)
  return { sampleRate, channels, durationSec: Number.isFinite(durationSec) ? durationSec : Number.NaN, codec: stream.codec_name ?? 'unknown' }
}

/** ffprobe of bytes (through a temp file) or of a file path. */
export async function probeAudio(input: Buffer | { file: string }, options: Pick<DecodeOptions, 'ffprobe' | 'signal' | 'timeoutMs'> = {}): Promise<AudioProbe> {
  if (!Buffer.isBuffer(input)) return probeFile(input.file, options)
  return withTempDir(async (dir) => {
    const file = path.join(dir, 'in')
    await writeFile(file, input)
    return probeFile(file, options)
  })
}

/**
 * Decodes any audio ffmpeg reads to planar float32, at the file's own rate and channel count
 * unless asked otherwise. Zero samples or an undecodable file → GenerationError('invalid_audio').
 * Plain 8–32-bit PCM/float WAV that needs no conversion is parsed in process.
 */
export async function decodeToPcm(bytes: Buffer, options: DecodeOptions = {}): Promise<Pcm> {
  const fast = tryParseWav(bytes, options)
  if (fast) return fast
  return withTempDir(async (dir) => {
    const file = path.join(dir, 'in')
    await writeFile(file, bytes)
    const probe = await probeFile(file, options)
    const sampleRate = options.sampleRate ?? probe.sampleRate
    const channels = options.channels ?? probe.channels
    const maxBytes = Math.ceil((options.maxDurationSec ?? 660) * sampleRate) * channels * 4
    const args = ['-i', file, '-vn', '-map', '0:a:0', '-f', 'f32le', '-acodec', 'pcm_f32le', '-ar', String(sampleRate), '-ac', String(channels), 'pipe:1']
    let stdout: Buffer
    try {
      ;({ stdout } = await runFfmpeg(options.ffmpeg ?? 'ffmpeg', args, {
        maxStdoutBytes: maxBytes,
        timeoutMs: options.timeoutMs ?? 120_000,
        ...(options.signal ? { signal: options.signal } : {}),
      }))
    } catch (error) {
      if (error instanceof GenerationError || options.signal?.aborted) throw error
      throw new GenerationError('invalid_audio', `decode failed: ${(error as Error).message}`, { cause: error })
    }
    const pcm = deinterleaveF32(stdout, channels, sampleRate)
    if ((pcm.channels[0]?.length ?? 0) === 0) throw new GenerationError('invalid_audio', 'decode produced no samples')
    return pcm
  })
}

/** The in-process path of decodeToPcm: a WAV we can parse whose rate and channels already fit. */
function tryParseWav(bytes: Buffer, options: DecodeOptions): Pcm | undefined {
  if (bytes.length < 12 || bytes.toString('latin1', 0, 4) !== 'RIFF') return undefined
  let parsed: ReturnType<typeof parseWav>
  try {
    parsed = parseWav(bytes)
  } catch {
    return undefined // ADPCM, µ-law, …: ffmpeg's job
  }
  if (options.sampleRate !== undefined && options.sampleRate !== parsed.sampleRate) return undefined
  if (options.channels !== undefined && options.channels !== parsed.channels.length) return undefined
  const frames = parsed.channels[0]?.length ?? 0
  if (frames === 0) throw new GenerationError('invalid_audio', 'the WAV holds no samples')
  if (frames > (options.maxDurationSec ?? 660) * parsed.sampleRate) throw new GenerationError('invalid_audio', 'the WAV is longer than allowed')
  return { sampleRate: parsed.sampleRate, channels: parsed.channels }
}

/**
 * MP3 (libmp3lame, CBR, default 192 kb/s) of `pcm`, with the LAME/Xing tag so decoders trim the
 * encoder delay, and no metadata. Rates libmp3lame lacks are resampled to 44.1 kHz; more than two
 * channels are mixed down to stereo.
 */
export async function encodeMp3(pcm: Pcm, options: EncodeOptions & { bitrateKbps?: number } = {}): Promise<Buffer> {
  checkPcm(pcm, 'encodeMp3')
  const bitrate = options.bitrateKbps ?? 192
  const outRate = MP3_RATES.includes(pcm.sampleRate) ? pcm.sampleRate : 44100
  const outChannels = Math.min(2, pcm.channels.length)
  return withTempDir(async (dir) => {
    const out = path.join(dir, 'out.mp3')
    const args = [
      ...['-f', 'f32le', '-ar', String(pcm.sampleRate), '-ac', String(pcm.channels.length), '-i', 'pipe:0'],
      ...['-ar', String(outRate), '-ac', String(outChannels), '-c:a', 'libmp3lame', '-b:a', `${bitrate}k`],
      ...['-map_metadata', '-1', '-id3v2_version', '3', '-write_xing', '1', '-f', 'mp3', out],
    ]
    await runFfmpeg(options.ffmpeg ?? 'ffmpeg', args, {
      stdin: interleaveF32(pcm),
      maxStdoutBytes: 1024 * 1024,
      timeoutMs: options.timeoutMs ?? 120_000,
      ...(options.signal ? { signal: options.signal } : {}),
    })
    return readFile(out)
  })
}

const soxrSupport = new Map<string, Promise<boolean>>()

/** Whether this ffmpeg was built with libsoxr (checked once per binary). */
export function hasSoxr(ffmpeg = 'ffmpeg'): Promise<boolean> {
  let known = soxrSupport.get(ffmpeg)
  if (!known) {
    known = runTool(ffmpeg, ['-hide_banner', '-version'], { timeoutMs: 10_000, maxStdoutBytes: 1024 * 1024 }).then(
      ({ stdout }) => stdout.toString('utf8').includes('--enable-libsoxr'),
      () => false,
    )
    soxrSupport.set(ffmpeg, known)
  }
  return known
}

/**
 * 16-bit PCM WAV (our own 44-byte header) at `sampleRate`/`channels`, resampled by ffmpeg (soxr
 * when built in). Defaults to speech delivery: 24 kHz mono. Audio already in that shape is written
 * directly, without ffmpeg.
 */
export async function encodeWav16(pcm: Pcm, options: EncodeOptions & { sampleRate?: number; channels?: number } = {}): Promise<Buffer> {
  checkPcm(pcm, 'encodeWav16')
  const sampleRate = options.sampleRate ?? 24000
  const channels = options.channels ?? 1
  let samples: Int16Array
  if (pcm.sampleRate === sampleRate && pcm.channels.length === channels) {
    const frames = pcm.channels[0]!.length
    samples = new Int16Array(frames * channels)
    for (let c = 0; c < channels; c++) {
      const channel = pcm.channels[c]!
      for (let i = 0; i < frames; i++) samples[i * channels + c] = toInt16(channel[i]!)
    }
  } else {
    const ffmpeg = options.ffmpeg ?? 'ffmpeg'
    const resampler = (await hasSoxr(ffmpeg)) ? ['-af', 'aresample=resampler=soxr'] : []
    const inFrames = pcm.channels[0]!.length
    const maxBytes = (Math.ceil((inFrames / pcm.sampleRate) * sampleRate) + sampleRate) * channels * 2
    const args = [
      ...['-f', 'f32le', '-ar', String(pcm.sampleRate), '-ac', String(pcm.channels.length), '-i', 'pipe:0'],
      ...[...resampler, '-ar', String(sampleRate), '-ac', String(channels), '-c:a', 'pcm_s16le', '-f', 's16le', 'pipe:1'],
    ]
    const { stdout } = await runFfmpeg(ffmpeg, args, {
      stdin: interleaveF32(pcm),
      maxStdoutBytes: maxBytes,
      timeoutMs: options.timeoutMs ?? 120_000,
      ...(options.signal ? { signal: options.signal } : {}),
    })
    const usable = stdout.length - (stdout.length % (2 * channels))
    samples = new Int16Array(usable / 2)
    new Uint8Array(samples.buffer).set(stdout.subarray(0, usable))
  }
  const data = Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength)
  return Buffer.concat([wavHeader16(data.length, sampleRate, channels), data])
}
