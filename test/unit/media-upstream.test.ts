// The upstream song and speech providers against a scripted upstream (a real HTTP server): the
// request mapping, the key's confinement to the Authorization header, the retry policy (through an
// injected sleep, so no real back-off), timeouts, resets, size caps, audio_url's address guard,
// and the audio sniffer on real encoder output and on garbage.
import { execFile } from 'node:child_process'
import { inspect, promisify } from 'node:util'
import t, { type Test } from 'tap'
import { createUpstreamSongProvider, type UpstreamSongOptions } from '../../src/media/providers/upstream/song.ts'
import { createUpstreamSpeechProvider, OPENAI_VOICES } from '../../src/media/providers/upstream/speech.ts'
import { detectAudio, sniffAudio } from '../../src/media/providers/upstream/sniff.ts'
import { retryAfterMs } from '../../src/media/providers/upstream/http.ts'
import { GenerationError, type SongGenerationRequest } from '../../src/media/types.ts'
import { mp3Bytes, type ScriptedUpstream, startScriptedUpstream, wavBytes } from '../helpers/scripted-upstream.ts'

const KEY = 'sk-test-0123456789abcdefSECRET'

async function upstream(t: Test): Promise<ScriptedUpstream> {
  const server = await startScriptedUpstream()
  t.teardown(() => server.close())
  return server
}

/** A sleep that records the waits instead of waiting. */
function fakeSleep(): { sleeps: number[]; sleep: (ms: number) => Promise<void> } {
  const sleeps: number[] = []
  return { sleeps, sleep: async (ms) => void sleeps.push(ms) }
}

function song(server: ScriptedUpstream, extra: Partial<UpstreamSongOptions> = {}) {
  const { sleeps, sleep } = fakeSleep()
  const provider = createUpstreamSongProvider({ url: `${server.url}/generate`, apiKey: KEY, sleep, random: () => 0.5, ...extra })
  return { provider, sleeps }
}

function request(extra: Partial<SongGenerationRequest> = {}): SongGenerationRequest {
  return { prompt: 'lofi beat', seed: 42, durationSec: 60, instrumental: true, signal: new AbortController().signal, ...extra }
}

async function failure(t: Test, promise: Promise<unknown>, kind: GenerationError['kind']): Promise<GenerationError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  )
  t.ok(err instanceof GenerationError, 'fails with a GenerationError')
  const error = err as GenerationError
  t.equal(error.kind, kind, `kind ${kind}: ${error.message}`)
  t.notMatch(error.message, KEY, 'the key is not in the message')
  t.notMatch(inspect(error, { depth: 8 }), KEY, 'nor anywhere in the error')
  return error
}

t.test('every request field is mapped, and undefined members are omitted', async (t) => {
  const server = await upstream(t)
  server.script({ audio: wavBytes() }, { audio: wavBytes() })
  const { provider } = song(server, { model: 'song-xl' })
  const full = request({
    negativePrompt: 'no vocals',
    topP: 0.9,
    temperature: 1.1,
    tailReserveSec: 4,
    sections: [
      { name: 'intro', startSec: 0, endSec: 10, description: 'soft pads', intensity: 3 },
      { name: 'drop', startSec: 10, endSec: 60, description: 'full band' },
    ],
    referenceImageUrls: ['https://example.com/a.png'],
    instrumentalLeadMapping: [
      { role: 'lead', instrument: 'saxophone', register: 'mid', articulation: 'legato' },
      { role: 'harmony', instrument: 'strings' },
    ],
    instrumentalLeadContinuity: 'persistent',
    targetBpm: 96,
  })
  const audio = await provider.generate(full)
  t.same(audio, { bytes: wavBytes(), mimeType: 'audio/wav', model: 'song-xl', seed: 42 })
  const [first] = server.requests
  t.equal(first!.method, 'POST')
  t.equal(first!.path, '/generate')
  t.equal(first!.headers['content-type'], 'application/json')
  t.match(first!.headers.accept, /audio\/\*/)
  t.strictSame(first!.json, {
    model: 'song-xl',
    prompt: 'lofi beat',
    negative_prompt: 'no vocals',
    seed: 42,
    top_p: 0.9,
    temperature: 1.1,
    duration_sec: 60,
    instrumental: true,
    tail_reserve_sec: 4,
    sections: [
      { name: 'intro', start_sec: 0, end_sec: 10, description: 'soft pads', intensity: 3 },
      { name: 'drop', start_sec: 10, end_sec: 60, description: 'full band' },
    ],
    reference_image_urls: ['https://example.com/a.png'],
    instrumental_lead_mapping: [
      { role: 'lead', instrument: 'saxophone', register: 'mid', articulation: 'legato' },
      { role: 'harmony', instrument: 'strings' },
    ],
    instrumental_lead_continuity: 'persistent',
    target_bpm: 96,
  })
  const { provider: unnamed } = song(server)
  t.equal(unnamed.kind, 'upstream')
  t.equal(unnamed.model, 'songmodel-3-pro')
  await unnamed.generate(request({ seed: -7, instrumental: false }))
  t.strictSame(server.requests[1]!.json, { prompt: 'lofi beat', seed: -7, duration_sec: 60, instrumental: false }, 'no model, no nulls')
})

t.test('the key travels only in the Authorization header and never in errors', async (t) => {
  const server = await upstream(t)
  server.script({ audio: mp3Bytes(), contentType: 'audio/mpeg' }, { status: 401, text: `invalid api key ${KEY}\r\nrejected` })
  const { provider } = song(server)
  t.equal((await provider.generate(request())).mimeType, 'audio/mpeg')
  const sent = server.requests[0]!
  t.equal(sent.headers.authorization, `Bearer ${KEY}`)
  const elsewhere = { ...sent.headers, authorization: undefined }
  t.notMatch(JSON.stringify(elsewhere) + sent.path + sent.body.toString(), KEY, 'not in other headers, the path or the body')
  const error = await failure(t, provider.generate(request()), 'upstream')
  t.match(error.message, /127\.0\.0\.1:\d+ answered 401: invalid api key \[redacted\] rejected/)
  t.equal(server.requests.length, 2, '401 is not retried')
  const { provider: keyless } = song(server, { apiKey: undefined })
  server.script({ audio: wavBytes() })
  await keyless.generate(request())
  t.equal(server.requests[2]!.headers.authorization, undefined, 'no key, no header')
})

t.test('503 twice then success: retried with jittered exponential back-off', async (t) => {
  const server = await upstream(t)
  server.script({ status: 503 }, { status: 502, text: 'bad gateway' }, { audio: wavBytes() })
  const { provider, sleeps } = song(server)
  t.equal((await provider.generate(request())).mimeType, 'audio/wav')
  t.equal(server.requests.length, 3)
  t.same(sleeps, [250, 500], 'random 0.5 × 500 ms, then × 1000 ms')
  t.same(server.requests[2]!.json, server.requests[0]!.json, 'the same request each time')
  const keys = server.requests.map((recorded) => recorded.headers['idempotency-key'])
  t.match(keys[0], /^[0-9a-f-]{36}$/, 'an Idempotency-Key names the generation')
  t.same(new Set(keys).size, 1, 'every retry carries the same Idempotency-Key')
  server.script({ audio: wavBytes() })
  await provider.generate(request())
  t.not(server.requests[3]!.headers['idempotency-key'], keys[0], 'another generation, another key')
})

t.test('retries exhausted on 500 → upstream; 400 and 404 are not retried', async (t) => {
  const server = await upstream(t)
  server.script({ status: 500 }, { status: 500 }, { status: 500 })
  const { provider } = song(server)
  const error = await failure(t, provider.generate(request()), 'upstream')
  t.match(error.message, /answered 500 \(gave up after 3 attempts\)/)
  for (const status of [400, 404, 422]) {
    server.requests.length = 0
    server.script({ status, text: 'bad request' }, { audio: wavBytes() })
    await failure(t, provider.generate(request()), 'upstream')
    t.equal(server.requests.length, 1, `${status} is final`)
    await provider.generate(request()) // drain the queued success
  }
})

t.test('429 Retry-After is honoured through the sleep; beyond the cap we stop', async (t) => {
  const server = await upstream(t)
  server.script({ status: 429, headers: { 'retry-after': '2' } }, { status: 408 }, { audio: wavBytes() })
  const { provider, sleeps } = song(server)
  await provider.generate(request())
  t.same(sleeps, [2000, 500], 'Retry-After 2 s, then back-off for the 408')
  server.requests.length = 0
  server.script({ status: 429, headers: { 'retry-after': '3600' } })
  const error = await failure(t, provider.generate(request()), 'upstream')
  t.match(error.message, /Retry-After 3600 s exceeds/)
  t.equal(server.requests.length, 1)
  t.equal(retryAfterMs('Thu, 01 Jan 1970 00:00:05 GMT', 1000), 4000, 'an HTTP date works too')
  t.equal(retryAfterMs('soon', 0), undefined)
})

t.test('an attempt longer than timeoutMs → timeout', async (t) => {
  const server = await upstream(t)
  server.script({ delayMs: 5000 })
  const { provider } = song(server, { timeoutMs: 200, retries: 0 })
  const error = await failure(t, provider.generate(request()), 'timeout')
  t.match(error.message, /did not answer within 200 ms/)
})

t.test('the total deadline stops retries', async (t) => {
  const server = await upstream(t)
  let clock = 0
  const sleeps: number[] = []
  server.route('/generate', { status: 503, headers: { 'retry-after': '1' } })
  const provider = createUpstreamSongProvider({
    url: `${server.url}/generate`,
    retries: 10,
    deadlineMs: 1500,
    now: () => clock,
    sleep: async (ms) => {
      sleeps.push(ms)
      clock += ms
    },
  })
  await failure(t, provider.generate(request()), 'upstream')
  t.equal(server.requests.length, 2, 'a third attempt would start after the deadline')
})

t.test('connection reset, refused and truncated bodies → upstream, naming host:port', async (t) => {
  const server = await upstream(t)
  server.script({ reset: true }, { reset: true })
  const { provider } = song(server, { retries: 1 })
  const reset = await failure(t, provider.generate(request()), 'upstream')
  t.match(reset.message, `127.0.0.1:${server.port}`)
  t.equal(server.requests.length, 2, 'a reset is retried')
  server.script({ truncate: wavBytes().subarray(0, 100), missing: 1000 }, { audio: wavBytes() })
  t.equal((await provider.generate(request())).mimeType, 'audio/wav', 'a truncated body is retried like a reset')

  const gone = await startScriptedUpstream()
  await gone.close()
  const refused = await failure(t, createUpstreamSongProvider({ url: `${gone.url}/generate`, apiKey: KEY, retries: 0 }).generate(request()), 'upstream')
  t.match(refused.message, `127.0.0.1:${gone.port}`)
  t.match(refused.message, /refused/)
})

t.test('bodies over maxBytes are cut off, announced or streamed', async (t) => {
  const server = await upstream(t)
  server.script(
    { audio: wavBytes({ samples: 4000 }) },
    {
      handler: (_req, res) => {
        res.writeHead(200, { 'content-type': 'audio/wav' }) // chunked: no length announced
        res.write(wavBytes({ samples: 400 }))
        res.end(Buffer.alloc(4000))
      },
    },
  )
  const { provider } = song(server, { maxBytes: 2000 })
  t.match((await failure(t, provider.generate(request()), 'upstream')).message, /announced 8044 bytes/)
  t.match((await failure(t, provider.generate(request()), 'upstream')).message, /more than the 2000 byte cap/)
  t.equal(server.requests.length, 2, 'not retried')
})

t.test('garbage with an audio content type → invalid_audio', async (t) => {
  const server = await upstream(t)
  const html = Buffer.from('<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>')
  const noise = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919 + 13) % 251))
  server.script({ audio: html, contentType: 'audio/mpeg' }, { audio: noise, contentType: 'audio/mpeg' }, { audio: Buffer.alloc(0) }, { audio: wavBytes().subarray(0, 40) })
  const { provider } = song(server)
  t.match((await failure(t, provider.generate(request()), 'invalid_audio')).message, /of HTML/)
  t.match((await failure(t, provider.generate(request()), 'invalid_audio')).message, /unrecognised/)
  t.match((await failure(t, provider.generate(request()), 'invalid_audio')).message, /empty body/)
  t.match((await failure(t, provider.generate(request()), 'invalid_audio')).message, /truncated or malformed RIFF/)
  t.equal(server.requests.length, 4, 'not retried: the pipeline decides about another candidate')
})

t.test('JSON answers: audio_base64, upstream seed and model, malformed JSON', async (t) => {
  const server = await upstream(t)
  const mp3 = mp3Bytes({ id3: true })
  server.script(
    { json: { audio_base64: mp3.toString('base64'), mime_type: 'audio/wav', seed: 777, model: 'song-v9' } },
    { json: { audio_base64: `data:audio/wav;base64,${wavBytes().toString('base64')}` } },
    { json: { audio_base64: '%%% not base64 %%%' } },
    { json: { error: { message: `quota exceeded for ${KEY}` } } },
    { audio: Buffer.from('{"audio_base64": "tru'), contentType: 'application/json' },
  )
  const { provider } = song(server)
  t.same(await provider.generate(request()), { bytes: mp3, mimeType: 'audio/mpeg', model: 'song-v9', seed: 777 }, 'the bytes decide the type')
  t.same(await provider.generate(request()), { bytes: wavBytes(), mimeType: 'audio/wav', model: 'songmodel-3-pro', seed: 42 })
  await failure(t, provider.generate(request()), 'invalid_audio')
  t.match((await failure(t, provider.generate(request()), 'upstream')).message, /neither audio_base64 nor audio_url: quota exceeded for \[redacted\]/)
  t.match((await failure(t, provider.generate(request()), 'upstream')).message, /does not parse/)
})

t.test('audio_url: same origin fetched with the key; private addresses refused by default', async (t) => {
  const server = await upstream(t)
  const files = await upstream(t) // another origin on loopback
  server.route('/files/song.mp3', { audio: mp3Bytes(), contentType: 'audio/mpeg' })
  files.route('/song.mp3', { audio: mp3Bytes({ id3: true }), contentType: 'audio/mpeg' })
  server.script({ json: { audio_url: `${server.url}/files/song.mp3`, seed: 5 } })
  const { provider } = song(server)
  t.same(await provider.generate(request()), { bytes: mp3Bytes(), mimeType: 'audio/mpeg', model: 'songmodel-3-pro', seed: 5 })
  t.same(
    server.requests.map((r) => [r.method, r.path, r.headers.authorization]),
    [
      ['POST', '/generate', `Bearer ${KEY}`],
      ['GET', '/files/song.mp3', `Bearer ${KEY}`],
    ],
  )
  const foreign = [
    `${files.url}/song.mp3`,
    `http://localhost:${server.port}/files/song.mp3`,
    'http://169.254.169.254/latest/meta-data',
    'http://10.1.2.3/a.mp3',
    'http://[::1]:9/a',
  ]
  for (const url of foreign) {
    server.script({ json: { audio_url: url } })
    t.match((await failure(t, provider.generate(request()), 'upstream')).message, /audio_url refused/, url)
  }
  server.script({ json: { audio_url: 'file:///etc/passwd' } })
  t.match((await failure(t, provider.generate(request()), 'upstream')).message, /scheme file:/)
  t.equal(server.requests.filter((r) => r.method === 'GET').length + files.requests.length, 1, 'no refused URL was fetched')

  for (const extra of [{ audioUrlAllow: [`127.0.0.1:${files.port}`] }, { allowPrivateAudioUrls: true }]) {
    files.requests.length = 0
    server.script({ json: { audio_url: `${files.url}/song.mp3` } })
    const { provider: allowing } = song(server, extra)
    t.same(await allowing.generate(request()), { bytes: mp3Bytes({ id3: true }), mimeType: 'audio/mpeg', model: 'songmodel-3-pro', seed: 42 }, Object.keys(extra)[0]!)
    t.equal(files.requests.length, 1)
    t.equal(files.requests[0]!.headers.authorization, undefined, 'another origin never gets the key')
  }
})

t.test('a caller abort stops the retries', async (t) => {
  const server = await upstream(t)
  server.route('/generate', { status: 503 })
  const controller = new AbortController()
  const provider = createUpstreamSongProvider({
    url: `${server.url}/generate`,
    sleep: async () => controller.abort(new Error('client went away')),
  })
  const error = await failure(t, provider.generate(request({ signal: controller.signal })), 'timeout')
  t.match(error.message, /cancelled/)
  t.equal(server.requests.length, 1)
  await failure(t, provider.generate(request({ signal: AbortSignal.abort() })), 'timeout')
  t.equal(server.requests.length, 1, 'an aborted signal sends nothing')
})

t.test('speech: OpenAI-compatible request, voices, sniffed answer', async (t) => {
  const server = await upstream(t)
  server.script({ audio: wavBytes({ sampleRate: 24000 }), contentType: 'application/octet-stream' }, { status: 503 }, { audio: wavBytes() })
  const { sleeps, sleep } = fakeSleep()
  const provider = createUpstreamSpeechProvider({ url: `${server.url}/v1/`, apiKey: KEY, sleep, random: () => 0 })
  t.equal(provider.kind, 'upstream')
  t.equal(provider.model, 'tts-1')
  t.same(provider.voices, OPENAI_VOICES)
  const audio = await provider.synthesize({ text: 'Hello there.', voice: 'nova', speed: 1.25, signal: new AbortController().signal })
  t.same(audio, { bytes: wavBytes({ sampleRate: 24000 }), mimeType: 'audio/wav', model: 'tts-1', seed: 0 })
  const sent = server.requests[0]!
  t.equal(sent.path, '/v1/audio/speech')
  t.equal(sent.headers.authorization, `Bearer ${KEY}`)
  t.strictSame(sent.json, { model: 'tts-1', input: 'Hello there.', voice: 'nova', speed: 1.25, response_format: 'wav' })
  await provider.synthesize({ text: 'Again.', voice: 'onyx', speed: 0.5, signal: new AbortController().signal })
  t.same(sleeps, [0], 'retried after the 503')
  server.script({ audio: Buffer.from('<html>oops</html>'), contentType: 'audio/wav' })
  await failure(t, provider.synthesize({ text: 'x', voice: 'nova', speed: 1, signal: new AbortController().signal }), 'invalid_audio')
  const custom = createUpstreamSpeechProvider({ url: server.url, model: 'kokoro', voices: ['af_bella', 'am_adam'] })
  t.same([custom.model, custom.voices], ['kokoro', ['af_bella', 'am_adam']])
})

const run = promisify(execFile)

async function encode(args: string[]): Promise<Buffer> {
  const argv = ['-hide_banner', '-loglevel', 'error', '-f', 'lavfi', '-i', 'sine=frequency=440:duration=0.3', ...args, 'pipe:1']
  return (await run('ffmpeg', argv, { encoding: 'buffer', maxBuffer: 16 * 1024 * 1024 })).stdout
}

t.test('the sniffer: real encoder output, hand-made frames, and everything else', async (t) => {
  let real: Record<string, Buffer>
  try {
    const [mp3, flac, ogg, wav] = await Promise.all([
      encode(['-c:a', 'libmp3lame', '-f', 'mp3']),
      encode(['-c:a', 'flac', '-f', 'flac']),
      encode(['-c:a', 'libvorbis', '-f', 'ogg']),
      encode(['-c:a', 'pcm_s16le', '-f', 'wav']),
    ])
    real = { 'audio/mpeg': mp3, 'audio/flac': flac, 'audio/ogg': ogg, 'audio/wav': wav }
  } catch (err) {
    real = {}
    t.comment(`ffmpeg unavailable (${(err as Error).message}); encoder output not checked`)
  }
  for (const [type, bytes] of Object.entries(real)) {
    t.equal(detectAudio(bytes), type, `ffmpeg ${type}`)
    t.equal(detectAudio(bytes.subarray(0, 30)), undefined, `${type} cut to 30 bytes`)
  }
  if (real['audio/ogg']) t.equal(detectAudio(real['audio/ogg'].subarray(0, 60)), undefined, 'an Ogg header page alone')
  t.equal(detectAudio(mp3Bytes()), 'audio/mpeg')
  t.equal(detectAudio(mp3Bytes({ id3: true })), 'audio/mpeg')
  t.equal(detectAudio(mp3Bytes({ frames: 1 })), undefined, 'one frame could be noise')
  t.equal(detectAudio(mp3Bytes({ id3: true, frames: 0 })), undefined, 'an ID3 tag with no audio')
  const stream = wavBytes()
  stream.writeUInt32LE(0xffffffff, 40)
  t.equal(detectAudio(stream), 'audio/wav', 'a streamed WAV with an unknown data size')
  t.equal(detectAudio(wavBytes().subarray(0, 44)), undefined, 'a WAV header without samples')
  t.equal(detectAudio(wavBytes().subarray(0, 600)), undefined, 'a WAV shorter than its data chunk says')
  for (const text of ['', '{"error":"nope"}', '   <html></html>', 'ID3', 'RIFF', 'OggS', 'fLaC']) {
    t.equal(detectAudio(Buffer.from(text)), undefined, JSON.stringify(text))
  }
  t.throws(() => sniffAudio(Buffer.from('[1,2]'), 'tts'), new GenerationError('invalid_audio', 'tts returned 5 bytes of JSON, not MP3, WAV, FLAC or Ogg audio'))
})
