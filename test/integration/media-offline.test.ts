// The offline generators and audio I/O against the real tools (ffmpeg/ffprobe, fluidsynth with
// the GM soundfont, espeak-ng): deterministic songs of the planned length, gapless MP3 round
// trips, speech delivered as 24 kHz mono WAV, and the errors (invalid audio, a missing tool, an
// abort, a timeout) the pipelines turn into answers. Skips only what a missing tool prevents.
import { mkdtemp, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import t from 'tap'
import { decodeToPcm, encodeMp3, encodeWav16, probeAudio } from '../../src/media/audio-io/ffmpeg.ts'
import { runTool } from '../../src/media/audio-io/process.ts'
import { parseWav } from '../../src/media/audio-io/wav.ts'
import { checkMediaPrerequisites } from '../../src/media/prerequisites.ts'
import { createOfflineSpeechProvider, OFFLINE_VOICES, wordsPerMinute } from '../../src/media/providers/offline/espeak.ts'
import { createOfflineSongProvider } from '../../src/media/providers/offline/song-provider.ts'
import { GenerationError, type SongGenerationRequest } from '../../src/media/types.ts'

const report = await checkMediaPrerequisites()
const missing = (...tools: string[]) => {
  const absent = tools.filter((tool) => report.tools[tool] === null)
  return absent.length > 0 ? `not installed: ${absent.join(', ')} (${report.problems.map((p) => p.fix)[0]})` : false
}
const signal = new AbortController().signal
const song = (overrides: Partial<SongGenerationRequest> = {}): SongGenerationRequest => ({
  prompt: 'upbeat funk with slap bass and brass',
  seed: 7,
  durationSec: 30,
  instrumental: true,
  tailReserveSec: 2,
  signal,
  ...overrides,
})

t.test('offline songs: deterministic by seed, of the planned length, gapless through MP3', { skip: missing('ffmpeg', 'ffprobe', 'fluidsynth', 'soundfont') }, async (t) => {
  const provider = createOfflineSongProvider()
  t.equal(provider.kind, 'offline')
  const [a, b, c] = await Promise.all([provider.generate(song()), provider.generate(song()), provider.generate(song({ seed: 8 }))])
  t.equal(a.mimeType, 'audio/wav')
  t.equal(a.model, provider.model)
  t.equal(a.seed, 7)
  t.ok(a.bytes.equals(b.bytes), 'same seed: identical WAV bytes')
  t.notOk(a.bytes.equals(c.bytes), 'another seed: different audio')
  t.equal(c.seed, 8)

  const header = parseWav(a.bytes)
  t.same([header.format.format, header.format.channels, header.format.sampleRate, header.format.bitsPerSample], [1, 2, 44100, 16])
  t.equal(a.bytes.readUInt32LE(4), a.bytes.length - 8, 'exact RIFF size')

  const pcm = await decodeToPcm(a.bytes, { signal })
  const seconds = pcm.channels[0]!.length / pcm.sampleRate
  t.ok(Math.abs(seconds - a.plan.durationSec) <= 0.5, `decoded ${seconds} s for a ${a.plan.durationSec} s plan`)
  t.equal(pcm.sampleRate, 44100)
  let peak = 0
  for (const x of pcm.channels[0]!) peak = Math.max(peak, Math.abs(x))
  t.ok(peak > 0.5 && peak < 1, `audible and unclipped (peak ${peak.toFixed(3)})`)
  const tail = pcm.channels[0]!.subarray(pcm.channels[0]!.length - 100)
  t.ok(
    tail.every((x) => Math.abs(x) < 0.01),
    'the cut at the plan length is faded',
  )

  const mono = await decodeToPcm(a.bytes, { channels: 1, signal })
  t.equal(mono.channels.length, 1, 'through ffmpeg when a conversion is asked')
  t.ok(Math.abs(mono.channels[0]!.length - pcm.channels[0]!.length) <= 1)

  const mp3 = await encodeMp3(pcm, { signal })
  t.ok(mp3.includes(Buffer.from('Info')) || mp3.includes(Buffer.from('Xing')), 'the LAME/Xing tag is there')
  const probe = await probeAudio(mp3)
  t.same([probe.codec, probe.sampleRate, probe.channels], ['mp3', 44100, 2])
  t.ok(Math.abs(probe.durationSec - 30) < 0.1, `probed ${probe.durationSec} s`)
  const back = await decodeToPcm(mp3, { signal })
  t.equal(back.sampleRate, 44100)
  t.ok(Math.abs(back.channels[0]!.length - pcm.channels[0]!.length) <= 1152, `MP3 round trip: ${back.channels[0]!.length} vs ${pcm.channels[0]!.length} samples`)
})

t.test('offline speech: espeak-ng → 24 kHz mono 16-bit WAV of the right length', { skip: missing('ffmpeg', 'ffprobe', 'espeak-ng') }, async (t) => {
  const provider = createOfflineSpeechProvider()
  t.same(
    provider.voices,
    OFFLINE_VOICES.map((v) => v.name),
  )
  t.equal(provider.voices[0], 'alloy')
  const text = 'The quick brown fox jumps over the lazy dog. --help; $(rm -rf /) is just text here.'
  const [normal, again, fast, slow] = await Promise.all([
    provider.synthesize({ text, voice: 'alloy', speed: 1, signal }),
    provider.synthesize({ text, voice: 'alloy', speed: 1, signal }),
    provider.synthesize({ text, voice: 'nova', speed: 2, signal }),
    provider.synthesize({ text, voice: 'onyx', speed: 0.5, signal }),
  ])
  t.ok(normal.bytes.equals(again.bytes), 'deterministic')
  t.equal(normal.bytes.readUInt32LE(40), normal.bytes.length - 44, 'espeak streaming sizes replaced by the real ones')
  const pcm = await decodeToPcm(normal.bytes, { signal })
  const wav = await encodeWav16(pcm, { sampleRate: 24000, channels: 1, signal })
  t.equal(wav.toString('ascii', 0, 4), 'RIFF')
  t.equal(wav.toString('ascii', 8, 12), 'WAVE')
  t.equal(wav.readUInt16LE(20), 1, 'PCM')
  t.equal(wav.readUInt16LE(22), 1, 'mono')
  t.equal(wav.readUInt32LE(24), 24000)
  t.equal(wav.readUInt16LE(34), 16)
  t.equal(wav.readUInt32LE(40), wav.length - 44)
  const seconds = wav.readUInt32LE(40) / 48000
  const sourceSeconds = pcm.channels[0]!.length / pcm.sampleRate
  t.ok(Math.abs(seconds - sourceSeconds) < 0.01 && seconds > 2, `${seconds} s of speech (source ${sourceSeconds} s)`)
  const length = async (audio: { bytes: Buffer }) => (await decodeToPcm(audio.bytes, { signal })).channels[0]!.length
  t.ok((await length(fast)) < (await length(normal)) && (await length(normal)) < (await length(slow)), 'speed changes the length')
  t.same([wordsPerMinute(0.5), wordsPerMinute(1), wordsPerMinute(2), wordsPerMinute(3)], [88, 175, 350, 450])
  await t.rejects(provider.synthesize({ text: ' ', voice: 'alloy', speed: 1, signal }), { name: 'GenerationError', kind: 'invalid_audio' })
  await t.rejects(provider.synthesize({ text, voice: 'nobody', speed: 1, signal }), /unknown voice/)
})

t.test('undecodable bytes are invalid_audio', { skip: missing('ffmpeg', 'ffprobe') }, async (t) => {
  const error = await decodeToPcm(randomBytes(4096), { signal }).catch((e: unknown) => e)
  t.ok(error instanceof GenerationError && error.kind === 'invalid_audio', `random bytes: ${String(error)}`)
  await t.rejects(probeAudio(randomBytes(512)), { name: 'GenerationError', kind: 'invalid_audio' })
  await t.rejects(decodeToPcm(Buffer.alloc(0), { signal }), { name: 'GenerationError', kind: 'invalid_audio' })
  // A header-only WAV: nothing to decode.
  const empty = Buffer.from('RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x40\x1f\x00\x00\x80\x3e\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00', 'latin1')
  await t.rejects(decodeToPcm(empty, { signal }), { name: 'GenerationError', kind: 'invalid_audio' })
})

t.test('a missing tool is GenerationError unavailable, with the fix', async (t) => {
  const nowhere = '/nonexistent/agw-media-test'
  const pcm = { sampleRate: 8000, channels: [new Float32Array(800)] }
  await t.rejects(decodeToPcm(randomBytes(64), { ffprobe: `${nowhere}/ffprobe`, ffmpeg: `${nowhere}/ffmpeg` }), {
    name: 'GenerationError',
    kind: 'unavailable',
    message: /apt-get install -y ffmpeg/,
  })
  await t.rejects(encodeMp3(pcm, { ffmpeg: `${nowhere}/ffmpeg` }), { name: 'GenerationError', kind: 'unavailable' })
  await t.rejects(encodeWav16(pcm, { sampleRate: 24000, ffmpeg: `${nowhere}/ffmpeg` }), { name: 'GenerationError', kind: 'unavailable' })
  await t.rejects(createOfflineSongProvider({ fluidsynth: `${nowhere}/fluidsynth` }).generate(song()), { name: 'GenerationError', kind: 'unavailable', message: /fluidsynth/ })
  await t.rejects(createOfflineSongProvider({ soundfont: `${nowhere}/gm.sf2` }).generate(song()), { name: 'GenerationError', kind: 'unavailable', message: /fluid-soundfont-gm/ })
  await t.rejects(createOfflineSpeechProvider({ espeak: `${nowhere}/espeak-ng` }).synthesize({ text: 'hi', voice: 'alloy', speed: 1, signal }), {
    kind: 'unavailable',
    message: /espeak-ng/,
  })

  const broken = await checkMediaPrerequisites({ ffmpeg: `${nowhere}/ffmpeg`, fluidsynth: `${nowhere}/fluidsynth`, soundfont: `${nowhere}/gm.sf2` })
  t.equal(broken.ok, false)
  t.same(broken.problems.map((p) => p.tool).sort(), ['ffmpeg', 'fluidsynth', 'soundfont'])
  t.equal(broken.tools.ffmpeg, null)
  for (const problem of broken.problems) t.match(problem.fix, /apt-get install -y|soundfont setting/, `${problem.tool}: ${problem.fix}`)
  // A tool that exists but is slow to answer (a loaded machine) is not reported missing.
  const slowTool = path.join(await mkdtemp(path.join(os.tmpdir(), 'agw-slow-tool-')), 'espeak-ng')
  await writeFile(slowTool, '#!/bin/sh\nsleep 5\n', { mode: 0o755 })
  const slow = await checkMediaPrerequisites({ espeak: slowTool, timeoutMs: 100 })
  t.notOk(
    slow.problems.some((p) => p.tool === 'espeak-ng'),
    'a slow tool is not a missing one',
  )
  t.match(slow.tools['espeak-ng'], /did not print its version within 100 ms/)
  t.match(broken.problems.find((p) => p.tool === 'fluidsynth')!.fix, /apt-get install -y fluidsynth/)
})

t.test('the prerequisites of this host', { skip: missing('ffmpeg', 'ffprobe', 'fluidsynth', 'soundfont', 'espeak-ng') }, async (t) => {
  t.equal(report.ok, true)
  t.match(report.tools.ffmpeg, /ffmpeg version/)
  t.match(report.tools.fluidsynth, /FluidSynth/)
  t.match(report.tools['espeak-ng'], /eSpeak NG/)
})

t.test('the process helper: stdin, stdout cap, stderr tail, timeout, abort', async (t) => {
  const echoed = await runTool('cat', [], { stdin: Buffer.from('hello\nworld') })
  t.equal(echoed.stdout.toString(), 'hello\nworld')
  await t.rejects(runTool('head', ['-c', '100000', '/dev/zero'], { maxStdoutBytes: 1000 }), /more than 1000 bytes/)
  await t.rejects(runTool('sh', ['-c', 'echo first >&2; echo boom >&2; exit 3']), /sh exited with code 3: first\nboom/)
  await t.rejects(runTool('sh', ['-c', 'printf "%04000d" 0 >&2; echo last-words >&2; exit 1'], { stderrTailBytes: 100 }), /exited with code 1: 0{80,}last-words$/)
  await t.rejects(runTool('sleep', ['30'], { timeoutMs: 50 }), { name: 'GenerationError', kind: 'timeout' })
  // SIGTERM ignored: SIGKILL after the grace.
  await t.rejects(runTool('sh', ['-c', 'trap "" TERM; sleep 30'], { timeoutMs: 50, killGraceMs: 50 }), { name: 'GenerationError', kind: 'timeout' })
  const controller = new AbortController()
  const running = runTool('sleep', ['30'], { signal: controller.signal })
  controller.abort(new Error('client went away'))
  await t.rejects(running, /client went away/)
  await t.rejects(runTool('sleep', ['30'], { signal: AbortSignal.abort(new Error('already gone')) }), /already gone/)
  await t.rejects(runTool('/nonexistent/agw-media-test/tool', []), { name: 'GenerationError', kind: 'unavailable' })
})

t.test('an aborted song generation stops its render', { skip: missing('fluidsynth', 'soundfont') }, async (t) => {
  const provider = createOfflineSongProvider({ concurrency: 1 })
  const controller = new AbortController()
  const first = provider.generate(song({ durationSec: 300, signal: controller.signal }))
  const queued = provider.generate(song({ durationSec: 300, signal: controller.signal }))
  setTimeout(() => controller.abort(new Error('deadline')), 50)
  await Promise.all([t.rejects(first, /deadline/), t.rejects(queued, /deadline/, 'a queued render leaves the queue')])
  await t.rejects(provider.generate(song({ signal: AbortSignal.abort(new Error('never started')) })), /never started/)
})
