// Key detection on cadences in all 24 keys (I–IV–V–I major; i–iv–V–i minor with the harmonic-minor V),
// synthesized with sawtooth-like harmonic tones over a bass root, plus Camelot codes and the atonal cases.
import t from 'tap'
import { camelot, estimateKey, TONICS } from '../../src/media/dsp/key.ts'
import { analyzeMusic } from '../../src/media/dsp/music.ts'
import { chromagram } from '../../src/media/dsp/spectrum.ts'

const SR = 22050

/** Adds a harmonic tone (partials k = 1.. with amplitude 1/k) with a 10 ms attack and exponential decay. */
function tone(x: Float32Array, start: number, seconds: number, hz: number, partials: number, amplitude: number): void {
  const s0 = Math.round(start * SR)
  const n = Math.min(Math.round(seconds * SR), x.length - s0)
  const decay = Math.exp(-1 / (0.8 * SR))
  for (let k = 1; k <= partials && k * hz < SR / 2; k++) {
    // Sine by recurrence: s[i+1] = 2cos(w)·s[i] − s[i−1].
    const w = (2 * Math.PI * k * hz) / SR
    const c = 2 * Math.cos(w)
    let s1 = Math.sin(k * 0.7)
    let s0v = Math.sin(k * 0.7 - w)
    let env = amplitude / k
    for (let i = 0; i < n; i++) {
      const attack = i < 0.01 * SR ? i / (0.01 * SR) : 1
      x[s0 + i]! += env * attack * s1
      const next = c * s1 - s0v
      s0v = s1
      s1 = next
      env *= decay
    }
  }
}

const midiHz = (m: number): number => 440 * 2 ** ((m - 69) / 12)

/** Three rounds of the cadence, one chord per second, triads around C4 + the root two octaves down. */
function cadence(tonic: number, mode: 'major' | 'minor', partials = 8): Float32Array {
  const third = mode === 'major' ? 4 : 3
  const sixth = mode === 'major' ? 9 : 8
  const chords = [
    [0, third, 7],
    [5, sixth, 12],
    [7, 11, 14],
    [0, third, 7],
  ]
  const x = new Float32Array(12 * SR)
  const base = 60 + tonic
  for (let bar = 0; bar < 12; bar++) {
    const chord = chords[bar % 4]!
    for (const s of chord) tone(x, bar, 1, midiHz(base + s), partials, 0.08)
    tone(x, bar, 1, midiHz(base - 24 + chord[0]!), partials, 0.08)
  }
  return x
}

t.test('Camelot codes follow the wheel', async (t) => {
  const major = ['8B', '3B', '10B', '5B', '12B', '7B', '2B', '9B', '4B', '11B', '6B', '1B']
  const minor = ['5A', '12A', '7A', '2A', '9A', '4A', '11A', '6A', '1A', '8A', '3A', '10A']
  for (let pc = 0; pc < 12; pc++) {
    t.equal(camelot(pc, 'major'), major[pc], `${TONICS[pc]} major`)
    t.equal(camelot(pc, 'minor'), minor[pc], `${TONICS[pc]} minor`)
  }
})

t.test('cadences in all 24 keys', async (t) => {
  let right = 0
  for (const mode of ['major', 'minor'] as const) {
    for (let pc = 0; pc < 12; pc++) {
      const { key } = analyzeMusic(cadence(pc, mode), SR)
      const ok = key !== undefined && key.tonic === TONICS[pc] && key.mode === mode
      if (ok) right++
      t.ok(ok, `${TONICS[pc]} ${mode}: got ${key ? `${key.tonic} ${key.mode}` : 'none'}`)
      t.equal(key?.camelot, camelot(pc, mode), `${TONICS[pc]} ${mode}: Camelot`)
      t.ok(key && key.confidence > 0.3 && key.confidence <= 1, `${TONICS[pc]} ${mode}: confidence ${key?.confidence.toFixed(2)}`)
    }
  }
  t.comment(`${right}/24 keys right`)
})

t.test('pure tones and bright timbres: still the right key', async (t) => {
  for (const [pc, mode, partials] of [
    [2, 'major', 1],
    [9, 'minor', 1],
    [7, 'major', 20],
    [4, 'minor', 20],
  ] as const) {
    const key = estimateKey(chromagram(cadence(pc, mode, partials), SR))
    t.equal(`${key?.tonic} ${key?.mode}`, `${TONICS[pc]} ${mode}`, `${partials} partial(s)`)
  }
})

t.test('silence and noise have no key', async (t) => {
  let state = 5
  const noise = Float32Array.from({ length: 10 * SR }, () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0
    return (state / 2 ** 32 - 0.5) * 0.2
  })
  t.equal(analyzeMusic(new Float32Array(10 * SR), SR).key, undefined, 'silence')
  t.equal(analyzeMusic(noise, SR).key, undefined, 'white noise')
  t.equal(analyzeMusic(new Float32Array(0), SR).key, undefined, 'empty')
})
