// Structure, cues and brightness of synthetic songs (intro pad, verse, louder and brighter chorus with
// other chords, verse, chorus, pad outro; optionally a bridge), and minimal results for short or
// silent input. Results are checked against the SPEC's Analysis schema.
import { Ajv } from 'ajv'
import t, { type Test } from 'tap'
import { SongAnalysis } from '../../src/catalog/schemas/songs.ts'
import { analyzeMusic, type MusicAnalysis } from '../../src/media/dsp/music.ts'
import { labelSegments } from '../../src/media/dsp/sections.ts'
import { seededRandom } from '../helpers/signals.ts'

const SR = 22050

interface Part {
  kind: string
  bars: number
  drums: boolean
  gain: number
  /** Semitones above the tonic, one chord per bar, looped. */
  chords: number[][]
  /** Harmonic partials of the chord tones: more is brighter. */
  partials: number
}

/** Adds a harmonic tone (1/k partials; sine recurrence) with a 20 ms attack and exponential decay. */
function tone(x: Float32Array, start: number, seconds: number, hz: number, partials: number, amplitude: number, decaySec: number): void {
  const s0 = Math.round(start * SR)
  const n = Math.min(Math.round(seconds * SR), x.length - s0)
  const decay = Math.exp(-1 / (decaySec * SR))
  for (let k = 1; k <= partials && k * hz < SR / 2; k++) {
    const w = (2 * Math.PI * k * hz) / SR
    const c = 2 * Math.cos(w)
    let s1 = 0
    let s2 = -Math.sin(w)
    let env = amplitude / k
    for (let i = 0; i < n; i++) {
      x[s0 + i]! += env * (i < 0.02 * SR ? i / (0.02 * SR) : 1) * s1
      const next = c * s1 - s2
      s2 = s1
      s1 = next
      env *= decay
    }
  }
}

function song(bpm: number, tonic: number, lead: number, parts: Part[], seed: number): { x: Float32Array; starts: number[]; end: number } {
  const beat = 60 / bpm
  const bar = 4 * beat
  const bars = parts.reduce((s, p) => s + p.bars, 0)
  const x = new Float32Array(Math.round((lead + bars * bar + 1) * SR))
  const random = seededRandom(seed)
  const hz = (m: number): number => 440 * 2 ** ((m - 69) / 12)
  const noise = (start: number, seconds: number, gain: number, decaySec: number, highPass: boolean): void => {
    const s0 = Math.round(start * SR)
    let previous = 0
    for (let i = 0; i < Math.round(seconds * SR) && s0 + i < x.length; i++) {
      const white = random() * 2 - 1
      x[s0 + i]! += gain * (highPass ? white - previous : white) * Math.exp(-i / (decaySec * SR))
      previous = white
    }
  }
  const starts: number[] = []
  let time = lead
  for (const part of parts) {
    starts.push(time)
    for (let b = 0; b < part.bars; b++) {
      const t0 = time + b * bar
      const chord = part.chords[b % part.chords.length]!
      for (const s of chord) tone(x, t0, bar, hz(60 + tonic + s), part.partials, 0.06 * part.gain, 0.8 * bar)
      tone(x, t0, 0.9 * bar, hz(36 + tonic + chord[0]!), 1, 0.15 * part.gain, 1.5)
      if (!part.drums) continue
      for (let k = 0; k < 4; k++) {
        const tk = t0 + k * beat
        if (k % 2 === 0) {
          const s0 = Math.round(tk * SR)
          let phase = 0
          for (let i = 0; i < 0.3 * SR && s0 + i < x.length; i++) {
            phase += (2 * Math.PI * (50 + 90 * Math.exp(-i / (0.04 * SR)))) / SR
            x[s0 + i]! += part.gain * (k === 0 ? 0.63 : 0.45) * Math.sin(phase) * Math.exp(-i / (0.12 * SR))
          }
        } else noise(tk, 0.2, 0.3 * part.gain, 0.07, false)
        noise(tk, 0.05, 0.08 * part.gain, 0.015, true)
        noise(tk + beat / 2, 0.05, 0.08 * part.gain, 0.015, true)
      }
    }
    time += part.bars * bar
  }
  return { x, starts, end: time }
}

const VERSE = [
  [0, 4, 7],
  [9, 12, 16],
  [2, 5, 9],
  [7, 11, 14],
]
const CHORUS = [
  [5, 9, 12],
  [7, 11, 14],
  [4, 7, 11],
  [9, 12, 16],
]
const PAD = [
  [0, 4, 7],
  [5, 9, 12],
]
const intro: Part = { kind: 'intro', bars: 8, drums: false, gain: 0.35, chords: PAD, partials: 3 }
const verse: Part = { kind: 'verse', bars: 8, drums: true, gain: 0.5, chords: VERSE, partials: 5 }
const chorus: Part = { kind: 'chorus', bars: 8, drums: true, gain: 1, chords: CHORUS, partials: 12 }
const bridge: Part = {
  kind: 'bridge',
  bars: 8,
  drums: false,
  gain: 0.45,
  chords: [
    [2, 5, 9],
    [4, 7, 11],
  ],
  partials: 6,
}
const outro: Part = { ...intro, kind: 'outro' }

const validate = new Ajv({ strict: false }).compile(SongAnalysis)

function checkShape(t: Test, r: MusicAnalysis, durationSec: number): void {
  const analysis = { durationSec, ...r, energy: [] }
  t.ok(validate(analysis), `SPEC Analysis schema: ${JSON.stringify(validate.errors)}`)
  t.equal(r.brightness.length, Math.ceil(durationSec), 'one brightness value per started second')
  t.ok(
    r.brightness.every((v) => v >= 0 && v <= 1),
    'brightness within 0..1',
  )
  t.ok(r.sections.length >= 1, 'at least one section')
  t.equal(r.sections[0]?.startSec, 0, 'sections start at 0')
  t.equal(r.sections.at(-1)?.endSec, durationSec, 'and end at the duration')
  t.ok(
    r.sections.every((s, i) => s.startSec < s.endSec && (i === 0 || s.startSec === r.sections[i - 1]!.endSec)),
    'sections tile the audio in order',
  )
  t.ok(r.cues.mixInSec >= 0 && r.cues.mixInSec <= r.cues.mixOutSec && r.cues.mixOutSec <= durationSec, 'cues within the piece, mixIn ≤ mixOut')
}

const TONICS = ['C', 'C#', 'D', 'Eb', 'E', 'F', 'F#', 'G', 'Ab', 'A', 'Bb', 'B']

for (const { bpm, tonic, lead, parts } of [
  { bpm: 120, tonic: 2, lead: 0.3, parts: [intro, verse, chorus, verse, chorus, outro] },
  { bpm: 140, tonic: 9, lead: 0.9, parts: [intro, verse, chorus, verse, chorus, outro] },
  { bpm: 96, tonic: 5, lead: 0, parts: [intro, verse, chorus, verse, chorus, bridge, chorus, outro] },
]) {
  t.test(`${bpm} bpm in ${TONICS[tonic]} major: ${parts.map((p) => p.kind).join(', ')}`, async (t) => {
    const { x, starts, end } = song(bpm, tonic, lead, parts, bpm)
    const durationSec = x.length / SR
    const r = analyzeMusic(x, SR)
    checkShape(t, r, durationSec)
    t.ok(Math.abs(r.tempo.bpm / bpm - 1) < 0.01, `tempo ${r.tempo.bpm.toFixed(2)}`)
    t.equal(`${r.key?.tonic} ${r.key?.mode}`, `${TONICS[tonic]} major`, 'key')
    const found = r.sections.slice(1).map((s) => s.startSec)
    const truth = starts.slice(1)
    const errors = truth.map((b) => Math.min(...found.map((f) => Math.abs(f - b))))
    t.equal(found.length, truth.length, `${truth.length} boundaries (found ${found.map((f) => f.toFixed(1)).join(', ')})`)
    t.ok(
      errors.every((e) => e < 1),
      `every boundary within 1 s (errors ${errors.map((e) => e.toFixed(2)).join(', ')} s)`,
    )
    t.same(
      r.sections.map((s) => s.kind),
      parts.map((p) => p.kind),
      'kinds: the loud repeated part is the chorus',
    )
    t.ok(Math.abs(r.cues.mixInSec - lead) < 0.1, `mix-in on the first downbeat (${r.cues.mixInSec.toFixed(2)} s)`)
    t.ok(Math.abs(r.cues.mixOutSec - starts.at(-1)!) < 1, `mix-out at the outro (${r.cues.mixOutSec.toFixed(2)} s)`)
    t.ok(r.cues.mixOutSec < end, 'mix-out before the music ends')
    // Brightness: the chorus seconds are brighter than the verse seconds.
    const mean = (kind: string): number => {
      const values = parts.flatMap((p, i) => {
        if (p.kind !== kind) return []
        const from = Math.ceil(starts[i]!) + 1
        const to = Math.floor(starts[i + 1] ?? end) - 1
        return r.brightness.slice(from, to)
      })
      return values.reduce((s, v) => s + v, 0) / values.length
    }
    t.ok(mean('chorus') > mean('verse') + 0.05, `chorus brighter than verse (${mean('chorus').toFixed(2)} vs ${mean('verse').toFixed(2)})`)
  })
}

t.test('a plain loop is one section; its mix-out is 16 bars before the last full bar', async (t) => {
  const loop: Part = { ...verse, bars: 32, gain: 0.6 }
  const { x } = song(120, 0, 0.5, [loop], 3)
  const r = analyzeMusic(x, SR)
  const durationSec = x.length / SR
  checkShape(t, r, durationSec)
  t.same(
    r.sections.map((s) => s.kind),
    ['verse'],
  )
  // 32 bars of 2 s from 0.5 s: the last full bar ends at 64.5 s.
  t.ok(Math.abs(r.cues.mixOutSec - (64.5 - 32)) < 0.05, `mix-out ${r.cues.mixOutSec.toFixed(2)} s`)
  t.ok(Math.abs(r.cues.mixInSec - 0.5) < 0.05, `mix-in ${r.cues.mixInSec.toFixed(2)} s`)
})

t.test('short, silent and odd-rate input gives a minimal valid result', async (t) => {
  const random = seededRandom(1)
  const cases: [string, Float32Array, number][] = [
    ['100 samples', Float32Array.from({ length: 100 }, () => random() - 0.5), SR],
    ['1 s silence', new Float32Array(SR), SR],
    ['0.5 s tone at 8 kHz', Float32Array.from({ length: 4000 }, (_, i) => 0.5 * Math.sin(i / 3)), 8000],
    ['20 s silence at 44.1 kHz', new Float32Array(20 * 44100), 44100],
    ['3 s noise at 96 kHz', Float32Array.from({ length: 3 * 96000 }, () => 0.2 * (random() - 0.5)), 96000],
  ]
  for (const [name, x, rate] of cases) {
    t.test(name, async (t) => {
      const r = analyzeMusic(x, rate)
      checkShape(t, r, x.length / rate)
      t.equal(r.sections.length, 1, 'one section spanning the audio')
      t.equal(r.tempo.downbeatConfidence, 0, 'no beat')
      if (name.includes('silence')) t.equal(r.key, undefined, 'no key')
    })
  }
  const empty = analyzeMusic(new Float32Array(0), SR)
  t.same(empty.sections, [], 'empty input: no sections')
  t.same(empty.brightness, [], 'empty input: no brightness')
  t.ok(empty.tempo.bpm > 0 && empty.tempo.beatIntervalSec > 0, 'empty input: a valid placeholder tempo')
})

t.test('labels from repetition and energy', async (t) => {
  // Segments as [energy dB, bars, cluster]: equal clusters repeat each other.
  const label = (rows: [number, number, string][]): string[] =>
    labelSegments(
      rows.map(([energyDb, bars]) => ({ energyDb, bars })),
      (i, j) => rows[i]![2] === rows[j]![2],
    )
  t.same(
    label([
      [-30, 8, 'a'],
      [-20, 8, 'v'],
      [-14, 8, 'c'],
      [-20, 8, 'v'],
      [-26, 4, 'b'],
      [-14, 8, 'c'],
      [-30, 8, 'o'],
    ]),
    ['intro', 'verse', 'chorus', 'verse', 'break', 'chorus', 'outro'],
    'loudest repeat is the chorus, a short quiet unique part a break',
  )
  t.same(
    label([
      [-28, 8, 'p'],
      [-18, 8, 'v'],
      [-14, 8, 'c'],
      [-28, 8, 'p'],
    ]),
    ['intro', 'verse', 'chorus', 'outro'],
    'intro and outro on the same material are bookends, not a chorus',
  )
  t.same(
    label([
      [-17, 8, 'a'],
      [-16, 16, 'b'],
    ]),
    ['verse', 'verse'],
    'two different parts of similar level',
  )
  t.same(
    label([
      [-26, 8, 'a'],
      [-16, 16, 'b'],
    ]),
    ['intro', 'verse'],
    'a quiet start is an intro',
  )
  t.same(label([[-20, 8, 'a']]), ['verse'], 'one segment')
})
