// Cross-check of our BS.1770 meter against ffmpeg's ebur128 filter (the test oracle) on a tone,
// seeded pink-ish noise and a synthetic music-like mix, at 48 and 44.1 kHz.
import { spawn, spawnSync } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { measureLoudness } from '../../src/media/dsp/loudness.ts'
import type { Pcm } from '../../src/media/types.ts'
import { musicLike, signedNoise } from '../helpers/signals.ts'

const hasFfmpeg = spawnSync('ffmpeg', ['-hide_banner', '-version'], { stdio: 'ignore' }).status === 0

function sine(rate: number, seconds: number, db: number): Pcm {
  const amplitude = 10 ** (db / 20)
  const x = Float32Array.from({ length: Math.round(rate * seconds) }, (_, i) => amplitude * Math.sin((2 * Math.PI * 1000 * i) / rate))
  return { sampleRate: rate, channels: [x, x] }
}

/** Pink-ish noise (Paul Kellet's economy filter), independent per channel, in three levels. */
function pink(rate: number, seconds: number, seed: number): Pcm {
  const random = signedNoise(seed)
  const n = Math.round(rate * seconds)
  const channels = [0, 1].map(() => {
    const x = new Float32Array(n)
    let b0 = 0
    let b1 = 0
    let b2 = 0
    for (let i = 0; i < n; i++) {
      const white = random()
      b0 = 0.99765 * b0 + white * 0.099046
      b1 = 0.963 * b1 + white * 0.2965164
      b2 = 0.57 * b2 + white * 1.0526913
      const level = i < n / 3 ? 0.05 : i < (2 * n) / 3 ? 0.015 : 0.03
      x[i] = level * (b0 + b1 + b2 + white * 0.1848)
    }
    return x
  })
  return { sampleRate: rate, channels }
}

interface Ebur128Summary {
  integrated: number
  range: number
  truePeak: number
}

/** Runs ffmpeg's ebur128 on raw interleaved f32le and parses the block after "Summary:". */
async function ffmpegEbur128(pcm: Pcm, dir: string): Promise<Ebur128Summary> {
  const channels = pcm.channels.length
  const n = pcm.channels[0]!.length
  const interleaved = new Float32Array(n * channels)
  pcm.channels.forEach((x, c) => {
    for (let i = 0; i < n; i++) interleaved[i * channels + c] = x[i]!
  })
  const file = path.join(dir, `in-${pcm.sampleRate}-${channels}.f32`)
  await writeFile(file, new Uint8Array(interleaved.buffer))
  const args = ['-nostdin', '-hide_banner', '-f', 'f32le', '-ar', String(pcm.sampleRate), '-ac', String(channels), '-i', file]
  // framelog=verbose keeps the per-frame lines out of stderr; the summary is still logged.
  args.push('-af', 'ebur128=peak=true:framelog=verbose', '-f', 'null', '-')
  const stderr = await new Promise<string>((resolve, reject) => {
    const child = spawn('ffmpeg', args, { stdio: ['ignore', 'ignore', 'pipe'] })
    let text = ''
    child.stderr.setEncoding('utf8')
    child.stderr.on('data', (chunk: string) => {
      text += chunk
    })
    child.on('error', reject)
    child.on('close', (code) => (code === 0 ? resolve(text) : reject(new Error(`ffmpeg exited ${code}: ${text.slice(-500)}`))))
  })
  const summary = stderr.slice(stderr.lastIndexOf('Summary:'))
  const field = (pattern: RegExp): number => {
    const match = pattern.exec(summary)
    if (!match?.[1]) throw new Error(`no ${pattern} in ffmpeg summary:\n${summary}`)
    return Number(match[1])
  }
  return { integrated: field(/\bI:\s+(-?[\d.]+|-inf) LUFS/), range: field(/\bLRA:\s+(-?[\d.]+) LU/), truePeak: field(/\bPeak:\s+(-?[\d.]+|-inf) dBFS/) }
}

t.test('our meter agrees with ffmpeg ebur128', { skip: hasFfmpeg ? false : 'ffmpeg is not installed (apt-get install ffmpeg)' }, async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-loudness-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const signals: [string, Pcm][] = [
    ['1 kHz sine, −18 dBFS, 48 kHz', sine(48000, 10, -18)],
    ['pink-ish noise in three levels, 48 kHz', pink(48000, 30, 11)],
    ['music-like mix, 48 kHz', musicLike(48000, 20, 12)],
    ['music-like mix, 44.1 kHz', musicLike(44100, 20, 13)],
  ]
  for (const [name, pcm] of signals) {
    const ours = measureLoudness(pcm)
    const theirs = await ffmpegEbur128(pcm, dir)
    const what = (label: string, a: number, b: number) => `${name}: ${label} ours ${a.toFixed(2)}, ffmpeg ${b.toFixed(1)}`
    // ffmpeg prints one decimal, so its own rounding is up to 0.05 of these tolerances.
    t.ok(Math.abs(ours.integratedLufs - theirs.integrated) <= 0.2, what('I', ours.integratedLufs, theirs.integrated))
    t.ok(Math.abs(ours.rangeLu - theirs.range) <= 1, what('LRA', ours.rangeLu, theirs.range))
    t.ok(Math.abs(ours.truePeakDb - theirs.truePeak) <= 0.3, what('TP', ours.truePeakDb, theirs.truePeak))
  }
})
