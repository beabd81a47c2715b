// Stereo image: correlation and side-to-mid ratio on the exact cases (mono in two channels,
// anti-phase, one side silent) and on independent seeded noise.
import t from 'tap'
import { SIDE_TO_MID_CAP, stereoImage } from '../../src/media/dsp/stereo.ts'

function noise(seed: number, length: number): Float32Array {
  let state = seed >>> 0
  return Float32Array.from({ length }, () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0
    return (state / 2 ** 32) * 2 - 1
  })
}

const rate = 44100
const music = Float32Array.from({ length: rate }, (_, i) => 0.5 * Math.sin(i * 0.05) + 0.2 * Math.sin(i * 0.31))

t.test('mono gives undefined', async (t) => {
  t.equal(stereoImage({ sampleRate: rate, channels: [music] }), undefined)
  t.equal(stereoImage({ sampleRate: rate, channels: [] }), undefined)
})

t.test('mono in two channels: correlation 1, no side', async (t) => {
  t.same(stereoImage({ sampleRate: rate, channels: [music, Float32Array.from(music)] }), { correlation: 1, sideToMidRatio: 0 })
})

t.test('anti-phase: correlation −1, the capped ratio', async (t) => {
  t.same(stereoImage({ sampleRate: rate, channels: [music, music.map((v) => -v)] }), { correlation: -1, sideToMidRatio: SIDE_TO_MID_CAP })
  t.ok(Number.isFinite(SIDE_TO_MID_CAP))
})

t.test('independent noise: correlation ≈ 0, ratio ≈ 1', async (t) => {
  const image = stereoImage({ sampleRate: rate, channels: [noise(1, rate * 2), noise(2, rate * 2)] })!
  t.ok(Math.abs(image.correlation) < 0.01, `correlation ${image.correlation}`)
  t.ok(Math.abs(image.sideToMidRatio - 1) < 0.02, `side/mid ${image.sideToMidRatio}`)
})

t.test('one side silent: correlation 0, ratio 1; both silent: 0, 0', async (t) => {
  const silent = new Float32Array(music.length)
  t.same(stereoImage({ sampleRate: rate, channels: [music, silent] }), { correlation: 0, sideToMidRatio: 1 })
  t.same(stereoImage({ sampleRate: rate, channels: [silent, music] }), { correlation: 0, sideToMidRatio: 1 })
  t.same(stereoImage({ sampleRate: rate, channels: [silent, silent] }), { correlation: 0, sideToMidRatio: 0 })
})

t.test('partial correlation and extra channels', async (t) => {
  // L = s, R = s + n with s, n independent and of equal power; a third channel is ignored.
  const s = noise(3, rate)
  const n = noise(4, rate)
  const left = s
  const right = s.map((v, i) => v + n[i]!)
  const image = stereoImage({ sampleRate: rate, channels: [left, right, n] })!
  t.ok(Math.abs(image.correlation - Math.SQRT1_2) < 0.02, `correlation of s and s + n ≈ 1/√2: ${image.correlation}`)
  t.ok(image.sideToMidRatio > 0.4 && image.sideToMidRatio < 0.5, `side/mid = rms(n/2)/rms(s + n/2) ≈ 0.447: ${image.sideToMidRatio}`)
})
