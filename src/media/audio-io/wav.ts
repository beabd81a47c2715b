// RIFF/WAVE in and out, in process. The parser trusts nothing in the header: streaming writers
// (espeak-ng --stdout, ffmpeg to a pipe) put 0x7fffffff or 0xffffffff in the sizes, so every
// chunk is clamped to the bytes actually present and nothing is allocated beyond what they imply.
import type { Pcm } from '../types.ts'

const FORMAT_PCM = 1
const FORMAT_FLOAT = 3
const FORMAT_EXTENSIBLE = 0xfffe
/** More channels than this is a hostile or broken header, not audio we generate or accept. */
const MAX_CHANNELS = 32
const MAX_SAMPLE_RATE = 768_000

export interface WavFormat {
  /** 1 (integer PCM) or 3 (IEEE float), after resolving WAVE_FORMAT_EXTENSIBLE. */
  format: 1 | 3
  channels: number
  sampleRate: number
  bitsPerSample: number
}

export interface ParsedWav extends Pcm {
  format: WavFormat
}

function fail(message: string): never {
  throw new Error(`invalid WAV: ${message}`)
}

function readFormat(view: DataView, offset: number, size: number): WavFormat {
  if (size < 16) fail(`fmt chunk of ${size} bytes (at least 16 needed)`)
  let format = view.getUint16(offset, true)
  const channels = view.getUint16(offset + 2, true)
  const sampleRate = view.getUint32(offset + 4, true)
  const blockAlign = view.getUint16(offset + 12, true)
  const bitsPerSample = view.getUint16(offset + 14, true)
  if (format === FORMAT_EXTENSIBLE) {
    // cbSize(2) validBits(2) channelMask(4) then the sub-format GUID, whose first 2 bytes are the format.
    if (size < 40) fail(`WAVE_FORMAT_EXTENSIBLE fmt chunk of ${size} bytes (40 needed)`)
    format = view.getUint16(offset + 24, true)
  }
  if (format !== FORMAT_PCM && format !== FORMAT_FLOAT) fail(`unsupported format tag 0x${format.toString(16)} (only PCM and IEEE float)`)
  if (channels < 1 || channels > MAX_CHANNELS) fail(`${channels} channels (1 to ${MAX_CHANNELS} supported)`)
  if (sampleRate < 1 || sampleRate > MAX_SAMPLE_RATE) fail(`sample rate ${sampleRate}`)
  const supported = format === FORMAT_FLOAT ? bitsPerSample === 32 : [8, 16, 24, 32].includes(bitsPerSample)
  if (!supported) fail(`${bitsPerSample}-bit ${format === FORMAT_FLOAT ? 'float' : 'PCM'} is not supported (PCM 8/16/24/32, float 32)`)
  const frameBytes = channels * (bitsPerSample / 8)
  if (blockAlign !== frameBytes) fail(`block align ${blockAlign} does not match ${channels} × ${bitsPerSample} bits`)
  return { format, channels, sampleRate, bitsPerSample }
}

/** Parses a RIFF/WAVE file into planar float samples; throws a clear Error for anything it cannot read. */
export function parseWav(bytes: Uint8Array): ParsedWav {
  if (bytes.length < 12) fail(`${bytes.length} bytes is too short for a RIFF header`)
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const tag = (at: number) => String.fromCharCode(bytes[at]!, bytes[at + 1]!, bytes[at + 2]!, bytes[at + 3]!)
  const riff = tag(0)
  if (riff !== 'RIFF' && riff !== 'RF64') fail('no RIFF header')
  if (tag(8) !== 'WAVE') fail('not a WAVE file')

  let format: WavFormat | undefined
  let data: { offset: number; size: number } | undefined
  let offset = 12
  while (offset + 8 <= bytes.length) {
    const id = tag(offset)
    const declared = view.getUint32(offset + 4, true)
    const body = offset + 8
    const size = Math.min(declared, bytes.length - body)
    if (id === 'fmt ') format = readFormat(view, body, size)
    else if (id === 'data') {
      data = { offset: body, size }
      // A streaming writer's data size runs to the end of the file: nothing after it can be trusted.
      if (size < declared || format) break
    }
    if (size < declared) break
    offset = body + size + (size % 2)
  }
  if (!format) fail('no fmt chunk')
  if (!data) fail('no data chunk')

  const { channels: count, bitsPerSample } = format
  const bytesPerSample = bitsPerSample / 8
  const frames = Math.floor(data.size / (count * bytesPerSample))
  const channels = Array.from({ length: count }, () => new Float32Array(frames))
  let at = data.offset
  for (let i = 0; i < frames; i++) {
    for (let c = 0; c < count; c++) {
      let value: number
      if (format.format === FORMAT_FLOAT) value = view.getFloat32(at, true)
      else if (bitsPerSample === 16) value = view.getInt16(at, true) / 32768
      else if (bitsPerSample === 24) value = ((view.getUint8(at + 2) << 24) | (view.getUint8(at + 1) << 16) | (view.getUint8(at) << 8)) / 2147483648
      else if (bitsPerSample === 32) value = view.getInt32(at, true) / 2147483648
      else value = (view.getUint8(at) - 128) / 128
      channels[c]![i] = value
      at += bytesPerSample
    }
  }
  return { sampleRate: format.sampleRate, channels, format }
}

/** The canonical 44-byte header of 16-bit PCM with `dataBytes` of samples. */
export function wavHeader16(dataBytes: number, sampleRate: number, channels: number): Buffer {
  if (dataBytes > 0xffffffff - 36) throw new Error(`WAV data of ${dataBytes} bytes does not fit a RIFF file`)
  const header = Buffer.alloc(44)
  header.write('RIFF', 0, 'ascii')
  header.writeUInt32LE(36 + dataBytes, 4)
  header.write('WAVE', 8, 'ascii')
  header.write('fmt ', 12, 'ascii')
  header.writeUInt32LE(16, 16)
  header.writeUInt16LE(FORMAT_PCM, 20)
  header.writeUInt16LE(channels, 22)
  header.writeUInt32LE(sampleRate, 24)
  header.writeUInt32LE(sampleRate * channels * 2, 28)
  header.writeUInt16LE(channels * 2, 32)
  header.writeUInt16LE(16, 34)
  header.write('data', 36, 'ascii')
  header.writeUInt32LE(dataBytes, 40)
  return header
}

/** Float sample → signed 16-bit, the exact inverse of parseWav's /32768 (clamped, NaN → 0). */
export function toInt16(sample: number): number {
  const scaled = Math.round(sample * 32768)
  return scaled > 32767 ? 32767 : scaled < -32768 ? -32768 : scaled || 0
}

/** 16-bit PCM WAV of `pcm` (44-byte header, exact sizes). */
export function writeWav16(pcm: Pcm): Buffer {
  const count = pcm.channels.length
  if (count < 1) throw new Error('writeWav16: no channels')
  const frames = pcm.channels[0]!.length
  if (pcm.channels.some((channel) => channel.length !== frames)) throw new Error('writeWav16: channels differ in length')
  const dataBytes = frames * count * 2
  const header = wavHeader16(dataBytes, pcm.sampleRate, count)
  // Samples through an Int16Array (host order: little-endian on every platform we run on).
  const storage = new ArrayBuffer(44 + dataBytes)
  new Uint8Array(storage).set(header)
  const samples = new Int16Array(storage, 44, frames * count)
  for (let c = 0; c < count; c++) {
    const channel = pcm.channels[c]!
    for (let i = 0; i < frames; i++) samples[i * count + c] = toInt16(channel[i]!)
  }
  return Buffer.from(storage)
}
