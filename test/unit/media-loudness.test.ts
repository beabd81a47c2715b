// BS.1770-4 / EBU R128 meter against the synthesizable EBU Tech 3341 (cases 1–6, 15–19) and
// Tech 3342 (cases 1–4) signals, plus silence and too-short input. "dBFS" is the sine's peak.
import t, { type Test } from 'tap'
import { channelWeights, kWeighting, measureLoudness } from '../../src/media/dsp/loudness.ts'
import { truePeakDb, truePeakEnvelope } from '../../src/media/dsp/true-peak.ts'
import type { Pcm } from '../../src/media/types.ts'

/** 1 kHz sine segments [dBFS, seconds], continuous phase (one period table per rate). */
function tone(sampleRate: number, segments: [number, number][]): Float32Array {
  const period = sampleRate / 1000 === Math.round(sampleRate / 1000) ? sampleRate / 1000 : sampleRate / 100
  const table = Float64Array.from({ length: period }, (_, i) => Math.sin((2 * Math.PI * 1000 * i) / sampleRate))
  const total = segments.reduce((sum, [, seconds]) => sum + Math.round(seconds * sampleRate), 0)
  const x = new Float32Array(total)
  let i = 0
  for (const [db, seconds] of segments) {
    const amplitude = 10 ** (db / 20)
    for (let end = i + Math.round(seconds * sampleRate); i < end; i++) x[i] = amplitude * table[i % period]!
  }
  return x
}

function stereo(sampleRate: number, x: Float32Array): Pcm {
  return { sampleRate, channels: [x, x] }
}

function within(t: Test, actual: number, expected: number, below: number, above: number, what: string): void {
  t.ok(actual >= expected - below && actual <= expected + above, `${what}: ${actual.toFixed(3)} (expected ${expected} −${below}/+${above})`)
}

function noNaN(t: Test, report: ReturnType<typeof measureLoudness>): void {
  const values = [report.integratedLufs, report.rangeLu, report.truePeakDb, report.samplePeakDb, ...report.momentaryLufs, ...report.shortTermLufs]
  t.notOk(values.some(Number.isNaN), 'no NaN anywhere')
}

t.test('K-weighting at 48 kHz reproduces the BS.1770 table', async (t) => {
  const { shelf, highPass } = kWeighting(48000)
  const close = (a: number, b: number) => Math.abs(a - b) < 1e-12
  t.ok(close(shelf.b0, 1.53512485958697) && close(shelf.b1, -2.69169618940638) && close(shelf.b2, 1.19839281085285), 'shelf b')
  t.ok(close(shelf.a1, -1.69065929318241) && close(shelf.a2, 0.73248077421585), 'shelf a')
  t.ok(close(highPass.a1, -1.99004745483398) && close(highPass.a2, 0.99007225036621), 'high-pass a')
  t.same([highPass.b0, highPass.b1, highPass.b2], [1, -2, 1])
  t.same(channelWeights(6), [1, 1, 1, 0, 1.41, 1.41])
  t.same(channelWeights(2), [1, 1])
})

const tech3341: [string, [number, number][]][] = [
  ['case 1: −23 dBFS, 20 s', [[-23, 20]]],
  ['case 2: −33 dBFS, 20 s', [[-33, 20]]],
  [
    'case 3: −36/−23/−36',
    [
      [-36, 10],
      [-23, 60],
      [-36, 10],
    ],
  ],
  [
    'case 4: −72/−36/−23/−36/−72',
    [
      [-72, 10],
      [-36, 10],
      [-23, 60],
      [-36, 10],
      [-72, 10],
    ],
  ],
  [
    'case 5: −26/−20/−26',
    [
      [-26, 20],
      [-20, 20.1],
      [-26, 20],
    ],
  ],
]

for (const rate of [48000, 44100]) {
  t.test(`EBU Tech 3341 cases 1–6 at ${rate} Hz: integrated ±0.1 LU`, async (t) => {
    for (const [name, segments] of tech3341) {
      const expected = name.startsWith('case 2') ? -33 : -23
      const report = measureLoudness(stereo(rate, tone(rate, segments)), { truePeak: false })
      within(t, report.integratedLufs, expected, 0.1, 0.1, name)
      noNaN(t, report)
    }
    const l = tone(rate, [[-28, 20]])
    const c = tone(rate, [[-24, 20]])
    const s = tone(rate, [[-30, 20]])
    within(t, measureLoudness({ sampleRate: rate, channels: [l, l, c, s, s] }).integratedLufs, -23, 0.1, 0.1, 'case 6, 5.0 (L,R,C,Ls,Rs)')
    // 5.1: a loud LFE must not count.
    const lfe = tone(rate, [[-6, 20]])
    within(t, measureLoudness({ sampleRate: rate, channels: [l, l, c, lfe, s, s] }).integratedLufs, -23, 0.1, 0.1, 'case 6, 5.1 with a loud LFE')
  })
}

t.test('EBU Tech 3341 cases 1 at 48 kHz: the momentary and short-term series', async (t) => {
  const report = measureLoudness(stereo(48000, tone(48000, [[-23, 20]])))
  t.equal(report.momentaryLufs.length, 197, '400 ms windows every 100 ms over 20 s')
  t.equal(report.shortTermLufs.length, 171, '3 s windows every 100 ms over 20 s')
  t.ok(
    report.momentaryLufs.every((v) => Math.abs(v + 23) < 0.1),
    'every momentary value ≈ −23',
  )
  t.ok(
    report.shortTermLufs.every((v) => Math.abs(v + 23) < 0.1),
    'every short-term value ≈ −23',
  )
  t.ok(report.rangeLu < 0.1, 'a steady tone has no range')
  within(t, report.samplePeakDb, -23, 0.01, 0.01, 'sample peak')
})

t.test('EBU Tech 3341 cases 15–19 at 48 kHz: true peak', async (t) => {
  const rate = 48000
  const cases: [string, number, number, number][] = [
    ['case 15: fs/4, 0°', rate / 4, 0, -6],
    ['case 16: fs/4, 45°', rate / 4, 45, -6],
    ['case 17: fs/6, 60°', rate / 6, 60, -6],
    ['case 18: fs/8, 67.5°', rate / 8, 67.5, -6],
    ['case 19: fs/4, 45°, +3 dBFS', rate / 4, 45, 3],
  ]
  for (const [name, frequency, phase, db] of cases) {
    const amplitude = 10 ** (db / 20)
    const x = Float32Array.from({ length: rate }, (_, i) => amplitude * Math.sin((2 * Math.PI * frequency * i) / rate + (phase * Math.PI) / 180))
    within(t, truePeakDb(stereo(rate, x)), db, 0.4, 0.2, name)
    within(t, measureLoudness(stereo(rate, x)).truePeakDb, db, 0.4, 0.2, `${name} via measureLoudness`)
    t.equal(measureLoudness(stereo(rate, x), { truePeak: false }).truePeakDb, 20 * Math.log10(Math.max(...x.map(Math.abs))), 'truePeak: false reads the sample peak')
  }
})

t.test('the envelope bounds every interpolated value and equals the true peak at its maximum', async (t) => {
  const rate = 48000
  const x = Float32Array.from({ length: 4800 }, (_, i) => 0.5 * Math.sin((2 * Math.PI * 12000 * i) / rate + Math.PI / 4) * (i > 100 && i < 4700 ? 1 : 0))
  const env = truePeakEnvelope(x)
  t.equal(env.length, x.length)
  t.ok(
    env.every((e, i) => e >= Math.abs(x[i]!)),
    'never below |x|',
  )
  const peak = 20 * Math.log10(Math.max(...env))
  t.ok(peak >= truePeakDb(stereo(rate, x)) - 1e-6, `the envelope (edges included) reaches the true peak: ${peak.toFixed(3)}`)
  t.same(truePeakEnvelope(x, 10), x.map(Math.abs), 'above a threshold nothing can reach, only |x| is read')
})

const tech3342: [string, [number, number][], number][] = [
  [
    'case 1: −20 then −30',
    [
      [-20, 20],
      [-30, 20],
    ],
    10,
  ],
  [
    'case 2: −20 then −15',
    [
      [-20, 20],
      [-15, 20],
    ],
    5,
  ],
  [
    'case 3: −40 then −20',
    [
      [-40, 20],
      [-20, 20],
    ],
    20,
  ],
  [
    'case 4: −50/−35/−20/−35/−50',
    [
      [-50, 20],
      [-35, 20],
      [-20, 20],
      [-35, 20],
      [-50, 20],
    ],
    15,
  ],
]

t.test('EBU Tech 3342 cases 1–4 at 48 kHz: loudness range ±1 LU', async (t) => {
  for (const [name, segments, expected] of tech3342) {
    within(t, measureLoudness(stereo(48000, tone(48000, segments)), { truePeak: false }).rangeLu, expected, 1, 1, name)
  }
})

t.test('silence: −Infinity, no NaN', async (t) => {
  const report = measureLoudness(stereo(44100, new Float32Array(44100 * 5)))
  t.equal(report.integratedLufs, Number.NEGATIVE_INFINITY)
  t.equal(report.truePeakDb, Number.NEGATIVE_INFINITY)
  t.equal(report.samplePeakDb, Number.NEGATIVE_INFINITY)
  t.equal(report.rangeLu, 0)
  t.ok(
    report.momentaryLufs.every((v) => v === Number.NEGATIVE_INFINITY),
    'momentary −∞',
  )
  t.equal(report.shortTermLufs.length, 21)
  noNaN(t, report)
  // Below the absolute gate is as good as silence.
  t.equal(measureLoudness(stereo(48000, tone(48000, [[-80, 5]]))).integratedLufs, Number.NEGATIVE_INFINITY, '−80 dBFS is gated out')
})

t.test('a signal shorter than one 400 ms block is measured as one block', async (t) => {
  const report = measureLoudness(stereo(48000, tone(48000, [[-20, 0.25]])))
  within(t, report.integratedLufs, -20, 0.3, 0.3, '250 ms at −20 dBFS')
  t.equal(report.momentaryLufs.length, 0)
  t.equal(report.shortTermLufs.length, 0)
  t.equal(report.rangeLu, 0)
  noNaN(t, report)
  // Mono reads ~3 LU below the same signal in both channels.
  within(t, measureLoudness({ sampleRate: 48000, channels: [tone(48000, [[-20, 0.25]])] }).integratedLufs, -23, 0.3, 0.3, 'mono')
  for (const length of [0, 1, 11, 12, 100]) {
    const x = Float32Array.from({ length }, (_, i) => (i % 2 ? 0.5 : -0.5))
    const r = measureLoudness(stereo(44100, x))
    noNaN(t, r)
    t.ok(length === 0 ? r.truePeakDb === Number.NEGATIVE_INFINITY : r.truePeakDb >= r.samplePeakDb, `${length} samples: TP ${r.truePeakDb}`)
  }
  t.equal(measureLoudness({ sampleRate: 44100, channels: [] }).integratedLufs, Number.NEGATIVE_INFINITY, 'no channels')
})
