// Tempo, beat phase and downbeat of synthetic drum tracks (kick on 1 and 3, snare on 2 and 4, 8th
// hats, accented downbeats) from 60 to 200 bpm, with no target bpm; the 90 bpm octave trap (loud 8th
// hats) is the one case that needs the target to pick its octave.
import t from 'tap'
import { analyzeMusic } from '../../src/media/dsp/music.ts'
import { seededRandom } from '../helpers/signals.ts'

interface Drums {
  bpm: number
  seconds: number
  /** Time of beat 0, seconds. */
  offset: number
  /** Index of the first downbeat among the beats (0..3). */
  downbeat: number
  seed: number
  sampleRate?: number
  hatGain?: number
}

/** A drum loop: swept-sine kick, noise snare, differentiated-noise hats; the downbeat kick and hat louder. */
function drums(o: Drums): Float32Array {
  const sr = o.sampleRate ?? 22050
  const x = new Float32Array(Math.round(o.seconds * sr))
  const random = seededRandom(o.seed)
  const beat = 60 / o.bpm
  const add = (t0: number, seconds: number, f: (t: number) => number): void => {
    const s0 = Math.round(t0 * sr)
    for (let i = 0; i < Math.round(seconds * sr) && s0 + i < x.length; i++) x[s0 + i]! += f(i / sr)
  }
  const kick = (t0: number, gain: number): void => {
    let phase = 0
    add(t0, 0.35, (t) => {
      phase += (2 * Math.PI * (50 + 90 * Math.exp(-t / 0.04))) / sr
      return gain * Math.sin(phase) * Math.exp(-t / 0.12)
    })
  }
  const snare = (t0: number): void => add(t0, 0.25, (t) => 0.35 * ((random() * 2 - 1) * 0.7 * Math.exp(-t / 0.07) + 0.4 * Math.sin(2 * Math.PI * 190 * t) * Math.exp(-t / 0.05)))
  let previous = 0
  const hat = (t0: number, gain: number): void =>
    add(t0, 0.06, (t) => {
      const white = random() * 2 - 1
      const v = white - previous
      previous = white
      return gain * v * Math.exp(-t / 0.015)
    })
  const hatGain = o.hatGain ?? 0.12
  for (let j = 0; o.offset + j * beat < o.seconds; j++) {
    const t0 = o.offset + j * beat
    const position = (((j - o.downbeat) % 4) + 4) % 4
    if (position % 2 === 0) kick(t0, position === 0 ? 0.8 : 0.5)
    else snare(t0)
    hat(t0, position === 0 ? 1.5 * hatGain : hatGain)
    hat(t0 + beat / 2, hatGain)
  }
  return x
}

/** Compares a detected grid with the truth: tempo ratio, phase error (mod one beat) and the downbeat index it implies. */
function judge(tempo: { bpm: number; beatOffsetSec: number }, truth: { bpm: number; offset: number; downbeat: number }) {
  const interval = 60 / truth.bpm
  const shift = Math.round((tempo.beatOffsetSec - truth.offset) / interval)
  return {
    tempoError: tempo.bpm / truth.bpm - 1,
    phaseError: tempo.beatOffsetSec - truth.offset - shift * interval,
    downbeat: (((truth.downbeat - shift) % 4) + 4) % 4,
  }
}

const TEMPI = [60, 72, 85, 90, 100, 110, 120, 128, 140, 150, 160, 174, 185, 200]

t.test('tempo within 1 %, beat phase within 30 ms and the downbeat at 60–200 bpm, no target', async (t) => {
  const random = seededRandom(2024)
  const rows: string[] = []
  for (const [i, bpm] of TEMPI.entries()) {
    const interval = 60 / bpm
    const truth = { bpm, offset: 0.05 + random() * (interval - 0.1), downbeat: Math.floor(random() * 4) }
    const seconds = 20 + random() * 10
    const { tempo } = analyzeMusic(drums({ ...truth, seconds, seed: i + 1 }), 22050)
    const j = judge(tempo, truth)
    rows.push(
      `${bpm}: ${tempo.bpm.toFixed(2)} bpm (${(j.tempoError * 100).toFixed(2)} %), phase ${(j.phaseError * 1000).toFixed(1)} ms, downbeat conf ${tempo.downbeatConfidence.toFixed(2)}`,
    )
    t.ok(Math.abs(j.tempoError) < 0.01, `${bpm} bpm: got ${tempo.bpm.toFixed(2)}`)
    t.ok(Math.abs(j.phaseError) < 0.03, `${bpm} bpm: phase error ${(j.phaseError * 1000).toFixed(1)} ms`)
    t.equal(tempo.downbeatOffsetBeats, j.downbeat, `${bpm} bpm: downbeat index`)
    t.ok(tempo.downbeatConfidence > 0 && tempo.downbeatConfidence <= 1, `${bpm} bpm: downbeat confidence in (0, 1]`)
    t.ok(tempo.beatOffsetSec >= 0 && tempo.beatOffsetSec < tempo.beatIntervalSec + 1e-9, 'the offset is the first grid beat ≥ 0')
    t.ok(Math.abs(tempo.beatIntervalSec * tempo.bpm - 60) < 1e-6, 'bpm = 60 / interval')
  }
  t.comment(rows.join('\n'))
})

t.test('44.1 and 48 kHz input is decimated internally with the same result', async (t) => {
  for (const sampleRate of [44100, 48000]) {
    const truth = { bpm: 128, offset: 0.21, downbeat: 2 }
    const { tempo } = analyzeMusic(drums({ ...truth, seconds: 20, seed: 9, sampleRate }), sampleRate)
    const j = judge(tempo, truth)
    t.ok(Math.abs(j.tempoError) < 0.01, `${sampleRate} Hz: ${tempo.bpm.toFixed(2)} bpm`)
    t.ok(Math.abs(j.phaseError) < 0.03, `${sampleRate} Hz: phase error ${(j.phaseError * 1000).toFixed(1)} ms`)
    t.equal(tempo.downbeatOffsetBeats, j.downbeat, `${sampleRate} Hz: downbeat`)
  }
})

t.test('octave trap: loud 8th hats at 90 bpm; the target bpm picks the octave', async (t) => {
  const truth = { bpm: 90, offset: 0.3, downbeat: 1 }
  const x = drums({ ...truth, seconds: 24, seed: 77, hatGain: 0.5 })
  const free = analyzeMusic(x, 22050).tempo
  const ratio = free.bpm / 90
  t.ok(Math.abs(ratio - 1) < 0.01 || Math.abs(ratio - 2) < 0.02, `without a target: one of the octave pair (got ${free.bpm.toFixed(2)})`)
  t.comment(`90 bpm with loud 8th hats, no target: ${free.bpm.toFixed(2)} bpm`)
  for (const target of [90, 180]) {
    const { tempo } = analyzeMusic(x, 22050, { targetBpm: target })
    const j = judge(tempo, { ...truth, bpm: target })
    t.ok(Math.abs(j.tempoError) < 0.01, `target ${target}: ${tempo.bpm.toFixed(2)} bpm`)
    t.ok(Math.abs(j.phaseError) < 0.03, `target ${target}: phase error ${(j.phaseError * 1000).toFixed(1)} ms`)
  }
  const downbeats = analyzeMusic(x, 22050, { targetBpm: 90 }).tempo
  t.equal(downbeats.downbeatOffsetBeats, judge(downbeats, truth).downbeat, 'the downbeat at the target octave')
})

t.test('a target only chooses among metrical levels the audio supports', async (t) => {
  const x = drums({ bpm: 120, offset: 0.1, downbeat: 0, seconds: 20, seed: 5 })
  t.ok(Math.abs(analyzeMusic(x, 22050, { targetBpm: 100 }).tempo.bpm / 120 - 1) < 0.01, 'a near target keeps the detected 120')
  t.ok(Math.abs(analyzeMusic(x, 22050, { targetBpm: 60 }).tempo.bpm / 60 - 1) < 0.01, 'a half-time target halves it')
  const straight = drums({ bpm: 90, offset: 0.1, downbeat: 0, seconds: 20, seed: 6 })
  const bpm = analyzeMusic(straight, 22050, { targetBpm: 135 }).tempo.bpm
  t.ok(Math.abs(bpm / 135 - 1) > 0.05, `straight 8ths are not pulled to ×3/2 (got ${bpm.toFixed(2)})`)
})

t.test('no beat in silence or noise: a placeholder grid with confidence 0', async (t) => {
  const random = seededRandom(3)
  const noise = Float32Array.from({ length: 22050 * 10 }, () => 0.1 * (random() * 2 - 1))
  for (const [name, x] of [
    ['silence', new Float32Array(22050 * 10)],
    ['white noise', noise],
    ['one second', drums({ bpm: 120, offset: 0, downbeat: 0, seconds: 1, seed: 1 })],
  ] as const) {
    const { tempo } = analyzeMusic(x, 22050, { targetBpm: 100 })
    t.equal(tempo.downbeatConfidence, 0, `${name}: confidence 0`)
    t.equal(tempo.bpm, 100, `${name}: the target stands in for the tempo`)
    t.ok(tempo.beatIntervalSec > 0 && tempo.beatOffsetSec >= 0, `${name}: a valid grid`)
  }
})
