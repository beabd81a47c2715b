// End to end through the real CLI (`agent-gateway serve`, every role in one process, the offline
// composer, fluidsynth, espeak-ng, ffmpeg): a real x402 client (@x402/fetch) buys a 2-candidate
// mastered song and a speech clip on the local EVM. The song result is checked against a JSON
// Schema transcribed here from SPEC "Song result" (not generated from our own schema), the MP3 is
// probed and measured by ffmpeg itself, the replayed proof is refused, and the buyer's balance
// moves by exactly the price. The hosted audio answers ranges and revalidation.
import { spawn } from 'node:child_process'
import { mkdtempSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { Ajv } from 'ajv'
import t from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { type CliProcess, startCli } from '../helpers/cli.ts'
import { balanceOf, faucet } from '../helpers/dev-chain.ts'

const PAYEE = '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266'
const SONG_PRICE = 80_000n

// SPEC "Song result", transcribed: Score and Analysis admit no extra properties.
const unit = { type: 'number', minimum: 0, maximum: 1 }
const Analysis = {
  type: 'object',
  additionalProperties: false,
  required: ['durationSec', 'tempo', 'brightness', 'energy', 'sections', 'cues'],
  properties: {
    durationSec: { type: 'number', exclusiveMinimum: 0 },
    tempo: {
      type: 'object',
      required: ['bpm', 'beatOffsetSec', 'beatIntervalSec', 'downbeatOffsetBeats', 'downbeatConfidence'],
      properties: {
        bpm: { type: 'number', exclusiveMinimum: 0 },
        beatOffsetSec: { type: 'number', minimum: 0 },
        beatIntervalSec: { type: 'number', exclusiveMinimum: 0 },
        downbeatOffsetBeats: { type: 'integer', minimum: 0, maximum: 3 },
        downbeatConfidence: unit,
      },
    },
    brightness: { type: 'array', items: unit },
    energy: { type: 'array', items: unit },
    sections: {
      type: 'array',
      items: {
        type: 'object',
        required: ['kind', 'startSec', 'endSec'],
        properties: { kind: { type: 'string' }, startSec: { type: 'number', minimum: 0 }, endSec: { type: 'number', exclusiveMinimum: 0 } },
      },
    },
    cues: { type: 'object', required: ['mixInSec', 'mixOutSec'], properties: { mixInSec: { type: 'number', minimum: 0 }, mixOutSec: { type: 'number', minimum: 0 } } },
    key: {
      type: 'object',
      required: ['tonic', 'mode', 'camelot', 'confidence'],
      properties: { tonic: { type: 'string' }, mode: { enum: ['major', 'minor'] }, camelot: { type: 'string' }, confidence: unit },
    },
    stereo: {
      type: 'object',
      required: ['correlation', 'sideToMidRatio'],
      properties: { correlation: { type: 'number', minimum: -1, maximum: 1 }, sideToMidRatio: { type: 'number', minimum: 0 } },
    },
    loudness: {
      type: 'object',
      required: ['integratedLufs', 'rangeLu', 'truePeakDb'],
      properties: { integratedLufs: { type: 'number' }, rangeLu: { type: 'number' }, truePeakDb: { type: 'number' } },
    },
  },
}
const Score = {
  type: 'object',
  additionalProperties: false,
  required: ['overall', 'duration', 'production', 'groove', 'structure'],
  properties: { overall: unit, duration: unit, production: unit, groove: { anyOf: [unit, { type: 'null' }] }, structure: { anyOf: [unit, { type: 'null' }] } },
}
const SongResult = {
  type: 'object',
  required: ['url', 'mimeType', 'sizeBytes', 'seconds', 'model', 'price_usdc'],
  properties: {
    url: { type: 'string' },
    mimeType: { type: 'string' },
    sizeBytes: { type: 'number' },
    seconds: { type: 'number' },
    model: { type: 'string' },
    price_usdc: { type: 'string' },
    candidates: {
      type: 'array',
      items: {
        type: 'object',
        required: ['index', 'url', 'sizeBytes', 'seconds', 'score', 'diagnostics'],
        properties: {
          index: { type: 'integer', minimum: 0 },
          url: { type: 'string' },
          sizeBytes: { type: 'integer', exclusiveMinimum: 0 },
          seconds: { type: 'number', exclusiveMinimum: 0 },
          seed: { type: 'integer', minimum: -9007199254740991, maximum: 9007199254740991 },
          score: Score,
          diagnostics: Analysis,
        },
      },
    },
    diagnostics: { type: 'object', required: ['final'], properties: { final: Analysis, beforeMastering: Analysis } },
    selectionNotes: { type: 'array', items: { type: 'string' } },
    selectionMethod: { const: 'local-dsp' },
    selectedCandidate: { type: 'integer', minimum: 0 },
    generationFailures: { type: 'integer', minimum: 0 },
  },
}

let cli: CliProcess
const dataDir = mkdtempSync(path.join(os.tmpdir(), 'agw-media-'))

t.before(async () => {
  cli = await startCli({ dataDir })
})
t.teardown(async () => {
  await cli?.stop('SIGKILL')
})

/** A fetch that remembers the payment headers it sent, so the test can replay them. */
function recording(): { fetch: typeof fetch; sent: Headers[] } {
  const sent: Headers[] = []
  return {
    sent,
    fetch: async (input, init) => {
      const request = new Request(input, init)
      sent.push(new Headers(request.headers))
      return fetch(request)
    },
  }
}

function run(command: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => (stdout += chunk))
    child.stderr.on('data', (chunk) => (stderr += chunk))
    child.on('error', reject)
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }))
  })
}

/** ffmpeg's own EBU R128 reading of a file: integrated loudness and true peak. */
async function ebur128(file: string): Promise<{ integrated: number; truePeak: number }> {
  const { stderr } = await run('ffmpeg', ['-nostdin', '-hide_banner', '-i', file, '-af', 'ebur128=peak=true', '-f', 'null', '-'])
  const summary = stderr.slice(stderr.lastIndexOf('Summary:'))
  const integrated = Number(/I:\s+(-?[\d.]+) LUFS/.exec(summary)?.[1])
  const truePeak = Number(/Peak:\s+(-?[\d.]+) dBFS/.exec(summary)?.[1])
  return { integrated, truePeak }
}

t.test('@x402/fetch buys a 2-candidate mastered song; ffmpeg agrees with the mastering; the replay is refused', async (t) => {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, 1_000_000n)
  const payeeBefore = await balanceOf(cli.gateway, PAYEE)
  const { fetch: tracked, sent } = recording()
  const payFetch = wrapFetchWithPayment(tracked, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))
  const order = {
    prompt: 'uplifting synthwave with a warm bass, 112 bpm',
    candidateCount: 2,
    seed: 7,
    durationSec: 30,
    mastering: { targetLufs: -14, truePeakDb: -1, fadeOutSec: 1 },
    selectionTarget: { bpm: 112 },
  }
  const response = await payFetch(`${cli.gateway}/api/v1/audio/songs/songmodel-3-pro`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(order),
  })
  const text = await response.text()
  t.equal(response.status, 200, text.slice(0, 500))
  const song = JSON.parse(text) as {
    url: string
    sizeBytes: number
    seconds: number
    price_usdc: string
    mimeType: string
    candidates: { index: number; seed: number; url: string }[]
    selectedCandidate: number
    selectionMethod: string
  }
  const ajv = new Ajv({ strict: false, allErrors: true })
  const valid = ajv.validate(SongResult, song)
  t.ok(valid, `valid against SPEC "Song result": ${ajv.errorsText()}`)
  t.equal(song.price_usdc, '0.160000', 'two candidates at 0.08')
  t.equal(song.mimeType, 'audio/mpeg')
  t.equal(song.candidates.length, 2)
  t.same(
    song.candidates.map((candidate) => candidate.seed),
    [7, 8],
    'each candidate reports its seed',
  )
  t.ok(song.candidates.some((candidate) => candidate.index === song.selectedCandidate))
  t.equal(await balanceOf(cli.gateway, buyer.address), 1_000_000n - 2n * SONG_PRICE, 'the buyer paid exactly the price')
  t.equal((await balanceOf(cli.gateway, PAYEE)) - payeeBefore, 2n * SONG_PRICE, 'the payee received it')

  const audio = await fetch(song.url)
  t.equal(audio.status, 200)
  t.equal(audio.headers.get('content-type'), 'audio/mpeg')
  const bytes = Buffer.from(await audio.arrayBuffer())
  t.equal(bytes.length, song.sizeBytes, 'sizeBytes is the size served')
  const file = path.join(dataDir, 'delivered.mp3')
  writeFileSync(file, bytes)
  const probe = await run('ffprobe', ['-v', 'error', '-show_entries', 'stream=codec_name,sample_rate,channels:format=duration', '-of', 'json', file])
  t.equal(probe.code, 0, 'ffprobe reads it')
  const probed = JSON.parse(probe.stdout) as { streams: { codec_name: string }[]; format: { duration: string } }
  t.equal(probed.streams[0]?.codec_name, 'mp3')
  t.ok(Math.abs(Number(probed.format.duration) - song.seconds) < 0.1, `seconds ${song.seconds} match ffprobe's ${probed.format.duration}`)
  const measured = await ebur128(file)
  t.ok(Math.abs(measured.integrated - -14) <= 0.5, `ffmpeg measures ${measured.integrated} LUFS (target −14 ±0.5)`)
  t.ok(measured.truePeak <= -1 + 0.05, `ffmpeg measures a true peak of ${measured.truePeak} dBTP (ceiling −1; ffmpeg reads 0.1 dB scale)`)

  const ranged = await fetch(song.url, { headers: { range: 'bytes=0-99' } })
  t.equal(ranged.status, 206)
  t.equal((await ranged.arrayBuffer()).byteLength, 100)
  const etag = audio.headers.get('etag') ?? ''
  t.equal((await fetch(song.url, { headers: { 'if-none-match': etag } })).status, 304)

  const proof = sent.map((headers) => headers.get('payment-signature')).find(Boolean)
  t.ok(proof, 'the client sent PAYMENT-SIGNATURE')
  const replay = await fetch(`${cli.gateway}/api/v1/audio/songs/songmodel-3-pro`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'payment-signature': proof ?? '' },
    body: JSON.stringify(order),
  })
  t.equal(replay.status, 402, 'the replayed proof is refused')
  t.equal(await balanceOf(cli.gateway, buyer.address), 1_000_000n - 2n * SONG_PRICE, 'and nothing more was taken')
})

t.test('@x402/fetch buys speech: a RIFF PCM mono 24 kHz WAV whose seconds match its samples', async (t) => {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, 100_000n)
  const payFetch = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))
  const response = await payFetch(`${cli.gateway}/api/v1/audio/speech/speechmodel-3.1-flash-tts`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input: 'Your song is ready. It runs thirty seconds at one hundred and twelve beats per minute.', voice: 'nova' }),
  })
  const text = await response.text()
  t.equal(response.status, 200, text.slice(0, 500))
  const speech = JSON.parse(text) as { url: string; seconds: number; sizeBytes: number; price_usdc: string; mimeType: string }
  t.equal(speech.price_usdc, '0.015000')
  t.equal(speech.mimeType, 'audio/wav')
  t.equal(await balanceOf(cli.gateway, buyer.address), 100_000n - 15_000n)
  const wav = Buffer.from(await (await fetch(speech.url)).arrayBuffer())
  t.equal(wav.length, speech.sizeBytes)
  t.equal(wav.toString('latin1', 0, 4), 'RIFF')
  t.equal(wav.toString('latin1', 8, 12), 'WAVE')
  t.equal(wav.readUInt16LE(20), 1, 'PCM')
  t.equal(wav.readUInt16LE(22), 1, 'mono')
  t.equal(wav.readUInt32LE(24), 24_000, '24 kHz')
  t.equal(wav.readUInt16LE(34), 16, '16-bit')
  const dataBytes = wav.readUInt32LE(40)
  t.equal(dataBytes, wav.length - 44)
  t.ok(Math.abs(dataBytes / 2 / 24_000 - speech.seconds) < 0.001, 'seconds = samples / 24000')
})

t.test('bad song requests are 400s naming the field, and cost nothing', async (t) => {
  const cases: [Record<string, unknown>, string][] = [
    [
      {
        prompt: 'x',
        candidateCount: 1,
        sections: [
          { name: 'a', startSec: 0, endSec: 20, description: 'a' },
          { name: 'b', startSec: 10, endSec: 40, description: 'b' },
        ],
      },
      'body.sections.1.startSec',
    ],
    [{ prompt: 'x', candidateCount: 1, sections: [{ name: 'a', startSec: 20, endSec: 20, description: 'a' }] }, 'body.sections.0.endSec'],
    [{ prompt: 'x', candidateCount: 1, durationSec: 30, sections: [{ name: 'a', startSec: 0, endSec: 40, description: 'a' }] }, 'body.sections.0.endSec'],
    [{ prompt: 'x', candidateCount: 1, referenceImageUrls: ['http://127.0.0.1/a.png'] }, 'body.referenceImageUrls.0'],
    [{ prompt: 'x', candidateCount: 1, referenceImageUrls: ['http://2130706433/a.png'] }, 'body.referenceImageUrls.0'],
    [{ prompt: 'x', candidateCount: 1, referenceImageUrls: ['file:///etc/passwd'] }, 'body.referenceImageUrls.0'],
    [{ prompt: 'x', candidateCount: 4 }, 'body.candidateCount'],
  ]
  for (const [body, field] of cases) {
    const response = await fetch(`${cli.gateway}/api/v1/audio/songs/songmodel-3-pro`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    })
    t.equal(response.status, 400, `${field}: ${response.status}`)
    t.match(await response.json(), { field }, field)
  }
})
