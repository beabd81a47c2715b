// Decides what an upstream's bytes are from their structure, never from its Content-Type: a proxy's
// HTML error page served as audio/mpeg, a JSON error, an empty or truncated body must fail here as
// invalid_audio rather than deep in the decoder. Recognised: MP3 (ID3v2 tag followed by MPEG
// frames, or two consecutive valid MPEG audio frames), RIFF/WAVE (fmt + data with samples), FLAC
// (STREAMINFO, metadata, a frame sync) and Ogg (a complete first page with a second page after it).
import { GenerationError } from '../../types.ts'

export type AudioMimeType = 'audio/mpeg' | 'audio/wav' | 'audio/flac' | 'audio/ogg'

/** The mime type of `bytes`, or GenerationError('invalid_audio') saying what they look like instead. */
export function sniffAudio(bytes: Uint8Array, source = 'upstream'): AudioMimeType {
  const kind = detectAudio(bytes)
  if (kind) return kind
  throw new GenerationError('invalid_audio', `${source} returned ${describe(bytes)}, not MP3, WAV, FLAC or Ogg audio`)
}

/** The mime type of `bytes`, or undefined when they are not complete audio of a known format. */
export function detectAudio(bytes: Uint8Array): AudioMimeType | undefined {
  if (ascii(bytes, 0, 4) === 'RIFF') return isWave(bytes) ? 'audio/wav' : undefined
  if (ascii(bytes, 0, 4) === 'fLaC') return isFlac(bytes) ? 'audio/flac' : undefined
  if (ascii(bytes, 0, 4) === 'OggS') return isOgg(bytes) ? 'audio/ogg' : undefined
  if (ascii(bytes, 0, 3) === 'ID3') return isId3Mp3(bytes) ? 'audio/mpeg' : undefined
  return mpegFramesAt(bytes, 0) ? 'audio/mpeg' : undefined
}

// What the bytes look like, for the error message (never their content: an error page may echo headers).
function describe(bytes: Uint8Array): string {
  if (bytes.length === 0) return 'an empty body'
  let i = 0
  while (
    i < bytes.length &&
    i < 64 &&
    (bytes[i] === 0x20 || bytes[i] === 0x09 || bytes[i] === 0x0a || bytes[i] === 0x0d || bytes[i] === 0xef || bytes[i] === 0xbb || bytes[i] === 0xbf)
  )
    i++
  const first = bytes[i]
  const size = `${bytes.length} bytes`
  if (first === 0x3c) return `${size} of HTML/XML`
  if (first === 0x7b || first === 0x5b) return `${size} of JSON`
  for (const magic of ['RIFF', 'fLaC', 'OggS', 'ID3']) {
    if (ascii(bytes, 0, magic.length) === magic) return `${size} of truncated or malformed ${magic === 'ID3' ? 'MP3' : magic} data`
  }
  return `${size} of unrecognised data`
}

function ascii(bytes: Uint8Array, start: number, length: number): string {
  if (start + length > bytes.length) return ''
  return String.fromCharCode(...bytes.subarray(start, start + length))
}

function u16le(b: Uint8Array, at: number): number {
  return b[at]! | (b[at + 1]! << 8)
}

function u32le(b: Uint8Array, at: number): number {
  return (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >>> 0
}

// ------------------------------------------------------------------------------------------- WAV

const WAVE_FORMATS = new Set([1, 3, 6, 7, 0xfffe]) // PCM, IEEE float, A-law, µ-law, extensible

function isWave(b: Uint8Array): boolean {
  if (b.length < 12 || ascii(b, 8, 4) !== 'WAVE') return false
  let at = 12
  let blockAlign = 0
  while (at + 8 <= b.length) {
    const id = ascii(b, at, 4)
    const size = u32le(b, at + 4)
    const body = at + 8
    if (id === 'fmt ') {
      if (size < 16 || body + 16 > b.length) return false
      const format = u16le(b, body)
      const channels = u16le(b, body + 2)
      const rate = u32le(b, body + 4)
      blockAlign = u16le(b, body + 12)
      const bits = u16le(b, body + 14)
      if (!WAVE_FORMATS.has(format) || channels < 1 || rate < 1 || bits < 1 || blockAlign < 1) return false
    } else if (id === 'data') {
      if (blockAlign === 0) return false // data before fmt
      const available = b.length - body
      // Streaming writers (OpenAI's TTS among them) leave the size unknown: 0 or 0xFFFFFFFF.
      const declared = size === 0 || size === 0xffffffff ? available : size
      return available >= blockAlign && available >= declared - (declared % blockAlign)
    }
    at = body + size + (size & 1)
  }
  return false
}

// ------------------------------------------------------------------------------------------ FLAC

function isFlac(b: Uint8Array): boolean {
  // The first metadata block must be a 34-byte STREAMINFO with a non-zero sample rate.
  if (b.length < 8 + 34 || (b[4]! & 0x7f) !== 0 || (b[5]! << 16) + (b[6]! << 8) + b[7]! !== 34) return false
  const rate = (b[18]! << 12) | (b[19]! << 4) | (b[20]! >> 4)
  if (rate === 0) return false
  let at = 4
  for (;;) {
    if (at + 4 > b.length) return false
    const last = (b[at]! & 0x80) !== 0
    at += 4 + ((b[at + 1]! << 16) | (b[at + 2]! << 8) | b[at + 3]!)
    if (last) break
  }
  // Audio follows the metadata: a frame header starts with the 14-bit sync 0b11111111111110.
  return at + 2 <= b.length && b[at] === 0xff && (b[at + 1]! & 0xfe) === 0xf8
}

// ------------------------------------------------------------------------------------------- Ogg

/** End offset of a complete Ogg page at `at`, or -1. */
function oggPageEnd(b: Uint8Array, at: number): number {
  if (ascii(b, at, 4) !== 'OggS' || b[at + 4] !== 0 || at + 27 > b.length) return -1
  const segments = b[at + 26]!
  if (at + 27 + segments > b.length) return -1
  let size = 0
  for (let i = 0; i < segments; i++) size += b[at + 27 + i]!
  const end = at + 27 + segments + size
  return end <= b.length ? end : -1
}

function isOgg(b: Uint8Array): boolean {
  if ((b[5]! & 0x02) === 0) return false // the first page must begin a stream
  const end = oggPageEnd(b, 0)
  // Headers alone are not audio: a second page must follow.
  return end > 0 && ascii(b, end, 4) === 'OggS' && b[end + 4] === 0
}

// ------------------------------------------------------------------------------------------- MP3

// kbit/s per [version group][layer], bitrate index 1..14 (0 "free" and 15 are refused).
const BITRATES: Record<string, number[]> = {
  '1-1': [32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448],
  '1-2': [32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384],
  '1-3': [32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320],
  '2-1': [32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256],
  '2-2': [8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
  '2-3': [8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
}
const SAMPLE_RATES: Record<number, number[]> = { 3: [44100, 48000, 32000], 2: [22050, 24000, 16000], 0: [11025, 12000, 8000] }

interface MpegFrame {
  /** Version, layer and sample rate bits: consecutive frames of one stream agree on them. */
  signature: number
  length: number
}

/** The MPEG audio frame header at `at`, or undefined. */
export function mpegFrameAt(b: Uint8Array, at: number): MpegFrame | undefined {
  if (at + 4 > b.length) return undefined
  const h1 = b[at + 1]!
  const h2 = b[at + 2]!
  if (b[at] !== 0xff || (h1 & 0xe0) !== 0xe0) return undefined
  const version = (h1 >> 3) & 3 // 0 = 2.5, 1 reserved, 2 = 2, 3 = 1
  const layerBits = (h1 >> 1) & 3 // 1 = III, 2 = II, 3 = I
  const bitrateIndex = h2 >> 4
  const rateIndex = (h2 >> 2) & 3
  if (version === 1 || layerBits === 0 || bitrateIndex === 0 || bitrateIndex === 15 || rateIndex === 3 || (b[at + 3]! & 3) === 2) return undefined
  const layer = 4 - layerBits
  const bitrate = BITRATES[`${version === 3 ? 1 : 2}-${layer}`]![bitrateIndex - 1]! * 1000
  const rate = SAMPLE_RATES[version]![rateIndex]!
  const padding = (h2 >> 1) & 1
  let length: number
  if (layer === 1) length = (Math.floor((12 * bitrate) / rate) + padding) * 4
  else if (layer === 3 && version !== 3) length = Math.floor((72 * bitrate) / rate) + padding
  else length = Math.floor((144 * bitrate) / rate) + padding
  return { signature: (h1 & 0x1e) | (rateIndex << 5), length }
}

/** Two consecutive frames of one stream start at `at` (one frame alone may be noise that looks like a header). */
function mpegFramesAt(b: Uint8Array, at: number): boolean {
  const first = mpegFrameAt(b, at)
  if (!first) return false
  const second = mpegFrameAt(b, at + first.length)
  return second !== undefined && second.signature === first.signature
}

function isId3Mp3(b: Uint8Array): boolean {
  if (b.length < 10 || b[3]! < 2 || b[3]! > 4 || b[3] === 0xff) return false
  for (let i = 6; i < 10; i++) if (b[i]! >= 0x80) return false // syncsafe size
  const size = (b[6]! << 21) | (b[7]! << 14) | (b[8]! << 7) | b[9]!
  let at = 10 + size + ((b[5]! & 0x10) !== 0 ? 10 : 0)
  // Encoders may pad after the tag; the audio must start within a short distance of it.
  const limit = Math.min(b.length, at + 4096)
  while (at < limit && b[at] !== 0xff) at++
  return mpegFramesAt(b, at)
}
