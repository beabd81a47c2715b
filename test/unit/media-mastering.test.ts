// The true-peak limiter (ceiling held, no delay) and the mastering chain (loudness targets reached
// or honestly not, the fade, silence untouched) on seeded synthetic signals.
import t from 'tap'
import { limitTruePeak } from '../../src/media/dsp/limiter.ts'
import { measureLoudness } from '../../src/media/dsp/loudness.ts'
import { masterPcm } from '../../src/media/dsp/mastering.ts'
import { truePeakDb } from '../../src/media/dsp/true-peak.ts'
import type { Pcm } from '../../src/media/types.ts'
import { musicLike as musicLikeAt, signedNoise } from '../helpers/signals.ts'

const rate = 44100

/** Equal sample for sample (a boolean: tap's diff of large typed arrays is very slow). */
function identical(a: Float32Array, b: Float32Array): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i])
}

/** Sine + noise with 30 ms bursts every 0.4 s that peak about 6 dB over full scale. */
function hot(seconds: number, seed: number): Pcm {
  const random = signedNoise(seed)
  const n = Math.round(seconds * rate)
  const channels = [0, 1].map((c) => {
    const x = new Float32Array(n)
    for (let i = 0; i < n; i++) {
      const burst = i % Math.round(0.4 * rate) < 0.03 * rate ? 3.3 : 1
      x[i] = burst * (0.45 * Math.sin((2 * Math.PI * (330 + 7 * c) * i) / rate) + 0.15 * random())
    }
    return x
  })
  return { sampleRate: rate, channels }
}

const musicLike = (seconds: number, seed: number) => musicLikeAt(rate, seconds, seed, 0.3)

t.test('the limiter holds the true-peak ceiling on a hot signal', async (t) => {
  const input = hot(4, 1)
  t.ok(truePeakDb(input) > 5, `input peaks ~+6 dBTP: ${truePeakDb(input).toFixed(2)}`)
  const settings = [{ ceilingDb: -1 }, { ceilingDb: -0.1, lookaheadMs: 1.5, releaseMs: 50 }, { ceilingDb: -3, lookaheadMs: 5, releaseMs: 150 }]
  for (const options of settings) {
    const result = limitTruePeak(input, options)
    const peak = truePeakDb(result.pcm)
    t.ok(peak <= options.ceilingDb, `ceiling ${options.ceilingDb}: output ${peak.toFixed(4)} dBTP`)
    t.ok(peak > options.ceilingDb - 0.1, 'and the limiter does not overshoot downward')
    t.ok(result.maxGainReductionDb > 5 && result.maxGainReductionDb < 12, `gain reduction ${result.maxGainReductionDb.toFixed(2)} dB`)
    // Bursts every 0.4 s and a release that takes longer than that to settle: may be always on.
    t.ok(result.activePercent > 50 && result.activePercent <= 100, `active ${result.activePercent.toFixed(1)} %`)
    t.equal(result.pcm.sampleRate, rate)
    t.same(
      result.pcm.channels.map((c) => c.length),
      [input.channels[0]!.length, input.channels[1]!.length],
    )
    t.notOk(
      result.pcm.channels.some((c) => c.some(Number.isNaN)),
      'no NaN',
    )
  }
})

t.test('the limiter keeps samples aligned: a click stays at its index', async (t) => {
  const n = rate
  const click = 20000
  const silent = new Float32Array(n)
  silent[click] = 1.5
  const out = limitTruePeak({ sampleRate: rate, channels: [silent, Float32Array.from(silent)] }, { ceilingDb: -1 }).pcm
  for (const channel of out.channels) {
    const nonZero = [...channel.keys()].filter((i) => channel[i] !== 0)
    t.same(nonZero, [click], 'only the click sample is non-zero')
    t.ok(channel[click]! > 0.5 && 20 * Math.log10(channel[click]!) <= -1, `click at ${20 * Math.log10(channel[click]!)} dB`)
  }
  // Over a quiet tone: untouched well before the click, ducked around it, the peak where it was.
  const tone = Float32Array.from({ length: n }, (_, i) => 0.05 * Math.sin((2 * Math.PI * 440 * i) / rate))
  tone[click] = 1.5
  const limited = limitTruePeak({ sampleRate: rate, channels: [tone] }, { ceilingDb: -1, lookaheadMs: 5 }).pcm.channels[0]!
  const before = click - Math.round(0.005 * rate) - 16
  t.ok(identical(limited.subarray(0, before), tone.subarray(0, before)), 'identical before the look-ahead')
  let argmax = 0
  for (let i = 0; i < n; i++) if (Math.abs(limited[i]!) > Math.abs(limited[argmax]!)) argmax = i
  t.equal(argmax, click, 'the loudest sample is still the click')
})

t.test('a signal under the ceiling passes unchanged', async (t) => {
  const quiet = musicLike(3, 2)
  const result = limitTruePeak(quiet, { ceilingDb: -1 })
  t.equal(result.maxGainReductionDb, 0)
  t.equal(result.activePercent, 0)
  t.ok(
    result.pcm.channels.every((c, i) => identical(c, quiet.channels[i]!)),
    'identical samples',
  )
})

t.test('masterPcm reaches −14 LUFS / −1 dBTP', async (t) => {
  const input = musicLike(12, 3)
  const before = measureLoudness(input)
  const pass = masterPcm(input, { targetLufs: -14, truePeakDb: -1, fadeOutSec: 1 })
  t.ok(pass.targetReached, 'target reached')
  t.ok(Math.abs(pass.integratedLufs + 14) < 0.1, `I ${pass.integratedLufs.toFixed(3)}`)
  t.ok(pass.truePeakDb <= -1.3 + 1e-9, `TP ${pass.truePeakDb.toFixed(3)} ≤ ceiling − 0.3 dB margin`)
  t.ok(pass.iterations >= 1 && pass.iterations <= 6, `${pass.iterations} passes`)
  t.ok(pass.gainAppliedDb > -14 - before.integratedLufs - 0.5, `gain ${pass.gainAppliedDb.toFixed(2)} dB from I ${before.integratedLufs.toFixed(2)}`)
  t.ok(pass.limiterMaxGainReductionDb > 0, `GR ${pass.limiterMaxGainReductionDb.toFixed(2)} dB`)
  const again = measureLoudness(pass.pcm)
  t.equal(again.integratedLufs, pass.integratedLufs, 'the reported loudness is the returned audio’s')
  t.equal(again.truePeakDb, pass.truePeakDb)
  t.equal(again.rangeLu, pass.rangeLu)
  t.equal(pass.pcm.channels[0]!.length, input.channels[0]!.length, 'same length')
})

t.test('masterPcm at −9 / −1 reports honestly whether it got there', async (t) => {
  const pass = masterPcm(musicLike(12, 4), { targetLufs: -9, truePeakDb: -1, fadeOutSec: 1 })
  t.equal(pass.targetReached, Math.abs(pass.integratedLufs + 9) < 0.1, `I ${pass.integratedLufs.toFixed(3)}, reached ${pass.targetReached}`)
  if (!pass.targetReached) t.ok(pass.limiterMaxGainReductionDb > 9.5 || pass.iterations === 6, `stopped at GR ${pass.limiterMaxGainReductionDb.toFixed(2)} dB`)
  t.ok(pass.limiterMaxGainReductionDb <= 10.01, 'never beyond the 10 dB default')
  t.ok(pass.truePeakDb <= -1.3 + 1e-9, `TP ${pass.truePeakDb.toFixed(3)}`)
  // A tighter gain-reduction budget stops earlier, and says so.
  const tight = masterPcm(musicLike(12, 4), { targetLufs: -9, truePeakDb: -1, fadeOutSec: 1 }, { maxGainReductionDb: 3 })
  t.notOk(tight.targetReached, `with 3 dB of GR: I ${tight.integratedLufs.toFixed(2)}`)
  t.ok(tight.limiterMaxGainReductionDb <= 3.01, `GR ${tight.limiterMaxGainReductionDb.toFixed(2)} dB`)
  t.ok(tight.integratedLufs < pass.integratedLufs)
})

t.test('masterPcm reaches −23 / −2 and honours the loudness offset', async (t) => {
  const input = musicLike(12, 5)
  const pass = masterPcm(input, { targetLufs: -23, truePeakDb: -2, fadeOutSec: 1 })
  t.ok(pass.targetReached && Math.abs(pass.integratedLufs + 23) < 0.1, `I ${pass.integratedLufs.toFixed(3)}`)
  t.ok(pass.truePeakDb <= -2.3 + 1e-9, `TP ${pass.truePeakDb.toFixed(3)}`)
  const offset = masterPcm(input, { targetLufs: -14, truePeakDb: -1, fadeOutSec: 1 }, { loudnessOffsetLu: -0.5, ceilingMarginDb: 0.5 })
  t.ok(offset.targetReached && Math.abs(offset.integratedLufs + 14.5) < 0.1, `offset −0.5 LU: I ${offset.integratedLufs.toFixed(3)}`)
  t.ok(offset.truePeakDb <= -1.5 + 1e-9, `margin 0.5 dB: TP ${offset.truePeakDb.toFixed(3)}`)
})

t.test('the fade-out ends in silence', async (t) => {
  const pass = masterPcm(musicLike(8, 6), { targetLufs: -14, truePeakDb: -1, fadeOutSec: 2 })
  const rms = (x: Float32Array, from: number, to: number) => Math.sqrt(x.subarray(from, to).reduce((s, v) => s + v * v, 0) / (to - from))
  for (const channel of pass.pcm.channels) {
    const n = channel.length
    t.ok(Math.abs(channel[n - 1]!) < 1e-6, `last sample ${channel[n - 1]}`)
    const tail = rms(channel, n - rate / 4, n)
    const body = rms(channel, n - 3 * rate, n - 2 * rate)
    t.ok(tail < body / 10, `last 250 ms ${tail.toFixed(4)} vs before the fade ${body.toFixed(4)}`)
  }
})

t.test('silence is returned unchanged', async (t) => {
  const silent: Pcm = { sampleRate: rate, channels: [new Float32Array(rate * 2), new Float32Array(rate * 2)] }
  const pass = masterPcm(silent, { targetLufs: -14, truePeakDb: -1, fadeOutSec: 1 })
  t.equal(pass.pcm, silent, 'the same audio')
  t.equal(pass.targetReached, false)
  t.equal(pass.integratedLufs, Number.NEGATIVE_INFINITY)
  t.equal(pass.iterations, 0)
  t.equal(pass.gainAppliedDb, 0)
})
