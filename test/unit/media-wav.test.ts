// The in-process RIFF/WAVE parser and writer: exact round trips, every supported sample format,
// and hostile headers (bogus sizes, truncation, zero channels, odd block align) that must end in
// a clear Error, never a huge allocation or a crash.
import t from 'tap'
import { parseWav, wavHeader16, writeWav16 } from '../../src/media/audio-io/wav.ts'

interface Fmt {
  format: number
  channels: number
  sampleRate: number
  bits: number
  blockAlign?: number
  extensibleFormat?: number
}

function fmtChunk(f: Fmt): Buffer {
  const extensible = f.extensibleFormat !== undefined
  const body = Buffer.alloc(extensible ? 40 : 16)
  body.writeUInt16LE(extensible ? 0xfffe : f.format, 0)
  body.writeUInt16LE(f.channels, 2)
  body.writeUInt32LE(f.sampleRate, 4)
  body.writeUInt32LE(f.sampleRate * f.channels * (f.bits / 8), 8)
  body.writeUInt16LE(f.blockAlign ?? f.channels * (f.bits / 8), 12)
  body.writeUInt16LE(f.bits, 14)
  if (extensible) {
    body.writeUInt16LE(22, 16)
    body.writeUInt16LE(f.bits, 18)
    body.writeUInt32LE(f.channels === 2 ? 3 : 4, 20)
    body.writeUInt16LE(f.extensibleFormat!, 24)
    Buffer.from('000000001000800000aa00389b71', 'hex').copy(body, 26)
  }
  return chunk('fmt ', body)
}

function chunk(id: string, body: Buffer, declared = body.length): Buffer {
  const head = Buffer.alloc(8)
  head.write(id, 0, 'ascii')
  head.writeUInt32LE(declared, 4)
  return Buffer.concat([head, body, body.length % 2 ? Buffer.alloc(1) : Buffer.alloc(0)])
}

function riff(...chunks: Buffer[]): Buffer {
  const body = Buffer.concat([Buffer.from('WAVE', 'ascii'), ...chunks])
  const head = Buffer.alloc(8)
  head.write('RIFF', 0, 'ascii')
  head.writeUInt32LE(body.length, 4)
  return Buffer.concat([head, body])
}

/** Interleaved samples encoded in a format, with the values a parser must return. */
function encode(bits: number, float: boolean, values: number[]): Buffer {
  const bytes = bits / 8
  const out = Buffer.alloc(values.length * bytes)
  values.forEach((v, k) => {
    const at = k * bytes
    if (float) out.writeFloatLE(v, at)
    else if (bits === 8) out.writeUInt8(Math.round(v * 128) + 128, at)
    else if (bits === 16) out.writeInt16LE(Math.round(v * 32768), at)
    else if (bits === 24) out.writeIntLE(Math.round(v * 8388608), at, 3)
    else out.writeInt32LE(Math.round(v * 2147483648), at)
  })
  return out
}

const VALUES = [0, 0.5, -0.5, -1, 0.25, -0.25, 0.125, 0.75]

t.test('writeWav16 → parseWav is exact, and the header states exact sizes', async (t) => {
  const left = Float32Array.from({ length: 1000 }, (_, k) => Math.round(Math.sin(k / 7) * 30000) / 32768)
  const right = Float32Array.from({ length: 1000 }, (_, k) => Math.round(Math.cos(k / 5) * -20000) / 32768)
  const bytes = writeWav16({ sampleRate: 22050, channels: [left, right] })
  t.equal(bytes.length, 44 + 1000 * 2 * 2)
  t.equal(bytes.toString('ascii', 0, 4), 'RIFF')
  t.equal(bytes.readUInt32LE(4), bytes.length - 8)
  t.equal(bytes.readUInt16LE(20), 1, 'PCM')
  t.equal(bytes.readUInt16LE(22), 2)
  t.equal(bytes.readUInt32LE(24), 22050)
  t.equal(bytes.readUInt32LE(28), 22050 * 4)
  t.equal(bytes.readUInt16LE(32), 4)
  t.equal(bytes.readUInt16LE(34), 16)
  t.equal(bytes.readUInt32LE(40), 4000)
  const back = parseWav(bytes)
  t.equal(back.sampleRate, 22050)
  t.same([...back.channels[0]!], [...left])
  t.same([...back.channels[1]!], [...right])
})

t.test('writeWav16 clamps out-of-range samples and writes NaN as silence', async (t) => {
  const bytes = writeWav16({ sampleRate: 8000, channels: [Float32Array.from([2, -2, Number.NaN, 1, -1])] })
  t.same(
    [0, 1, 2, 3, 4].map((k) => bytes.readInt16LE(44 + 2 * k)),
    [32767, -32768, 0, 32767, -32768],
  )
  t.throws(() => writeWav16({ sampleRate: 8000, channels: [] }), /no channels/)
  t.throws(() => writeWav16({ sampleRate: 8000, channels: [new Float32Array(2), new Float32Array(3)] }), /differ in length/)
  t.throws(() => wavHeader16(0xffffffff, 44100, 2), /does not fit/)
})

t.test('every supported format decodes to the same values', async (t) => {
  const cases: Array<[string, Fmt, boolean]> = [
    ['PCM 8-bit', { format: 1, channels: 2, sampleRate: 8000, bits: 8 }, false],
    ['PCM 16-bit', { format: 1, channels: 2, sampleRate: 44100, bits: 16 }, false],
    ['PCM 24-bit', { format: 1, channels: 2, sampleRate: 48000, bits: 24 }, false],
    ['PCM 32-bit', { format: 1, channels: 2, sampleRate: 96000, bits: 32 }, false],
    ['float 32-bit', { format: 3, channels: 2, sampleRate: 44100, bits: 32 }, true],
    ['extensible PCM 24-bit', { format: 0, channels: 2, sampleRate: 48000, bits: 24, extensibleFormat: 1 }, false],
    ['extensible float', { format: 0, channels: 2, sampleRate: 44100, bits: 32, extensibleFormat: 3 }, true],
  ]
  for (const [name, fmt, float] of cases) {
    const pcm = parseWav(riff(fmtChunk(fmt), chunk('data', encode(fmt.bits, float, VALUES))))
    t.equal(pcm.sampleRate, fmt.sampleRate, `${name}: rate`)
    t.equal(pcm.channels.length, 2, `${name}: channels`)
    const tolerance = fmt.bits === 8 ? 1 / 128 : 1e-6
    const left = VALUES.filter((_, k) => k % 2 === 0)
    const right = VALUES.filter((_, k) => k % 2 === 1)
    t.ok(
      [...pcm.channels[0]!].every((v, k) => Math.abs(v - left[k]!) <= tolerance) && [...pcm.channels[1]!].every((v, k) => Math.abs(v - right[k]!) <= tolerance),
      `${name}: samples`,
    )
  }
})

t.test('chunks around the data: LIST before, odd-sized chunks padded, data before fmt', async (t) => {
  const fmt = fmtChunk({ format: 1, channels: 1, sampleRate: 16000, bits: 16 })
  const data = chunk('data', encode(16, false, [0.5, -0.5, 0.25]))
  const list = chunk('LIST', Buffer.from('INFOISFT\x05\x00\x00\x00Lavf\x00', 'latin1'))
  t.same([...parseWav(riff(fmt, list, data)).channels[0]!], [0.5, -0.5, 0.25])
  t.same([...parseWav(riff(chunk('odd ', Buffer.from([1, 2, 3])), fmt, data)).channels[0]!], [0.5, -0.5, 0.25], 'a 3-byte chunk and its pad byte')
  t.same([...parseWav(riff(data, fmt)).channels[0]!], [0.5, -0.5, 0.25], 'data first')
})

t.test('hostile sizes are clamped to the bytes present', async (t) => {
  const fmt = fmtChunk({ format: 1, channels: 1, sampleRate: 22050, bits: 16 })
  const samples = encode(16, false, [0.5, 0.25, -0.25])
  for (const declared of [0xffffffff, 0x7ffff024, 0x7fffffff]) {
    const bytes = riff(fmt, chunk('data', samples, declared))
    bytes.writeUInt32LE(declared, 4) // the RIFF size lies too, as streaming writers do
    const pcm = parseWav(bytes)
    t.equal(pcm.channels[0]!.length, 3, `data size 0x${declared.toString(16)}: three samples, no more`)
  }
  // A data chunk cut mid-sample: whole frames only.
  const cut = riff(fmt, chunk('data', encode(16, false, [0.5, 0.25])))
  t.equal(parseWav(cut.subarray(0, cut.length - 1)).channels[0]!.length, 1)
  // An empty data chunk is a valid, empty file.
  t.equal(parseWav(riff(fmt, chunk('data', Buffer.alloc(0)))).channels[0]!.length, 0)
})

t.test('broken or unsupported files throw a clear Error', async (t) => {
  const good = riff(fmtChunk({ format: 1, channels: 2, sampleRate: 44100, bits: 16 }), chunk('data', Buffer.alloc(16)))
  const cases: Array<[string, Buffer, RegExp]> = [
    ['an empty buffer', Buffer.alloc(0), /too short/],
    ['a 1-byte file', Buffer.from([0x52]), /too short/],
    ['not RIFF', Buffer.from('OggS0000WAVEfmt ', 'ascii'), /no RIFF/],
    ['RIFF but not WAVE', Buffer.from('RIFF\x04\x00\x00\x00AVI ', 'latin1'), /not a WAVE/],
    ['the header only', good.subarray(0, 12), /no fmt/],
    ['a truncated fmt chunk', good.subarray(0, 24), /fmt chunk of 4 bytes/],
    ['no data chunk', riff(fmtChunk({ format: 1, channels: 1, sampleRate: 8000, bits: 16 })), /no data chunk/],
    ['zero channels', riff(fmtChunk({ format: 1, channels: 0, sampleRate: 8000, bits: 16, blockAlign: 2 }), chunk('data', Buffer.alloc(4))), /0 channels/],
    ['65535 channels', riff(fmtChunk({ format: 1, channels: 65535, sampleRate: 8000, bits: 16, blockAlign: 2 }), chunk('data', Buffer.alloc(4))), /65535 channels/],
    ['a zero sample rate', riff(fmtChunk({ format: 1, channels: 1, sampleRate: 0, bits: 16 }), chunk('data', Buffer.alloc(4))), /sample rate 0/],
    ['an odd block align', riff(fmtChunk({ format: 1, channels: 2, sampleRate: 8000, bits: 16, blockAlign: 3 }), chunk('data', Buffer.alloc(6))), /block align 3/],
    ['12-bit PCM', riff(fmtChunk({ format: 1, channels: 1, sampleRate: 8000, bits: 12, blockAlign: 2 }), chunk('data', Buffer.alloc(4))), /12-bit PCM/],
    ['64-bit float', riff(fmtChunk({ format: 3, channels: 1, sampleRate: 8000, bits: 64 }), chunk('data', Buffer.alloc(16))), /64-bit float/],
    ['ADPCM', riff(fmtChunk({ format: 2, channels: 1, sampleRate: 8000, bits: 4, blockAlign: 1 }), chunk('data', Buffer.alloc(4))), /format tag 0x2/],
    ['µ-law in an extensible header', riff(fmtChunk({ format: 0, channels: 1, sampleRate: 8000, bits: 8, extensibleFormat: 7 }), chunk('data', Buffer.alloc(4))), /format tag 0x7/],
    ['a huge LIST chunk hiding the data', riff(fmtChunk({ format: 1, channels: 1, sampleRate: 8000, bits: 16 }), chunk('LIST', Buffer.alloc(4), 0xfffffff0)), /no data chunk/],
  ]
  for (const [name, bytes, message] of cases) {
    t.throws(() => parseWav(bytes), { message: /^invalid WAV: / }, name)
    t.throws(() => parseWav(bytes), message, `${name}: says why`)
  }
})

t.test('random corruption of a valid file never throws anything but a clear Error nor decodes more than the bytes hold', async (t) => {
  const base = riff(fmtChunk({ format: 1, channels: 2, sampleRate: 44100, bits: 16 }), chunk('LIST', Buffer.alloc(10)), chunk('data', Buffer.alloc(400)))
  let state = 12345
  const rand = () => (state = (Math.imul(state, 1664525) + 1013904223) >>> 0) / 2 ** 32
  let parsed = 0
  let rejected = 0
  for (let round = 0; round < 2000; round++) {
    const bytes = Buffer.from(base.subarray(0, 1 + Math.floor(rand() * base.length)))
    for (let k = 0; k < 1 + rand() * 4; k++) bytes[Math.floor(rand() * bytes.length)] = Math.floor(rand() * 256)
    try {
      const pcm = parseWav(bytes)
      const samples = pcm.channels.reduce((sum, c) => sum + c.length, 0)
      if (samples > bytes.length) t.fail(`round ${round}: ${samples} samples from ${bytes.length} bytes`)
      parsed += 1
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('invalid WAV: ')) t.fail(`round ${round}: ${String(error)}`)
      rejected += 1
    }
  }
  t.ok(parsed > 0 && rejected > 0, `both outcomes seen (${parsed} parsed, ${rejected} rejected)`)
})
