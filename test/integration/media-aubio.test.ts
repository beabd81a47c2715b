// Cross-check of our tempo against Debian's aubio (`aubio tempo -i file.wav` prints "<bpm> bpm") on
// synthetic drum tracks written as 16-bit WAV. aubio's tracker loses the beat in digital silence
// between hits (it reported 40–90 bpm for these loops at 120–140), so the loops carry a faint noise
// floor (≈ −50 dBFS); aubio also reads 90–100 bpm loops 7–8 % fast, hence the tempi 120–160.
import { execFile, spawnSync } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { analyzeMusic } from '../../src/media/dsp/music.ts'
import { seededRandom } from '../helpers/signals.ts'

const hasAubio = spawnSync('aubio', ['--version'], { stdio: 'ignore' }).status === 0
const SR = 44100

/** Kick on 1 and 3 (accented 1), noise snare on 2 and 4, 8th hats, over a faint noise floor. */
function drums(bpm: number, seconds: number, seed: number): Float32Array {
  const random = seededRandom(seed)
  const x = Float32Array.from({ length: Math.round(seconds * SR) }, () => 0.003 * (random() * 2 - 1))
  const beat = 60 / bpm
  const add = (t0: number, len: number, f: (t: number) => number): void => {
    const s0 = Math.round(t0 * SR)
    for (let i = 0; i < Math.round(len * SR) && s0 + i < x.length; i++) x[s0 + i]! += f(i / SR)
  }
  let previous = 0
  for (let j = 0; 0.1 + j * beat < seconds; j++) {
    const t0 = 0.1 + j * beat
    if (j % 2 === 0) {
      let phase = 0
      add(t0, 0.35, (t) => {
        phase += (2 * Math.PI * (50 + 90 * Math.exp(-t / 0.04))) / SR
        return (j % 4 === 0 ? 0.8 : 0.5) * Math.sin(phase) * Math.exp(-t / 0.12)
      })
    } else add(t0, 0.25, (t) => 0.25 * (random() * 2 - 1) * Math.exp(-t / 0.07))
    for (const h of [0, 0.5]) {
      add(t0 + h * beat, 0.06, (t) => {
        const white = random() * 2 - 1
        const v = white - previous
        previous = white
        return 0.12 * v * Math.exp(-t / 0.015)
      })
    }
  }
  return x
}

/** Mono 16-bit PCM WAV. */
function wav16(x: Float32Array): Buffer {
  const b = Buffer.alloc(44 + 2 * x.length)
  b.write('RIFF', 0)
  b.writeUInt32LE(36 + 2 * x.length, 4)
  b.write('WAVEfmt ', 8)
  b.writeUInt32LE(16, 16)
  b.writeUInt16LE(1, 20)
  b.writeUInt16LE(1, 22)
  b.writeUInt32LE(SR, 24)
  b.writeUInt32LE(2 * SR, 28)
  b.writeUInt16LE(2, 32)
  b.writeUInt16LE(16, 34)
  b.write('data', 36)
  b.writeUInt32LE(2 * x.length, 40)
  for (let i = 0; i < x.length; i++) b.writeInt16LE(Math.round(Math.max(-1, Math.min(1, x[i]!)) * 32767), 44 + 2 * i)
  return b
}

t.test('our tempo agrees with aubio within 2 %', { skip: hasAubio ? false : 'aubio is not installed (apt-get install aubio-tools)' }, async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-aubio-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  for (const bpm of [120, 128, 140, 160]) {
    const x = drums(bpm, 30, bpm)
    const file = path.join(dir, `drums-${bpm}.wav`)
    await writeFile(file, wav16(x))
    const { stdout } = await promisify(execFile)('aubio', ['tempo', '-i', file])
    const match = /(\d+(?:\.\d+)?)\s*bpm/.exec(stdout)
    t.ok(match, `aubio printed a tempo: ${stdout.trim()}`)
    const theirs = Number(match?.[1])
    const ours = analyzeMusic(x, SR).tempo.bpm
    t.ok(Math.abs(ours / theirs - 1) < 0.02, `${bpm} bpm: ours ${ours.toFixed(2)}, aubio ${theirs.toFixed(2)}`)
    t.ok(Math.abs(ours / bpm - 1) < 0.01, `${bpm} bpm: ours within 1 % of the truth`)
  }
})
