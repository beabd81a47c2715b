// Candidate ranking: the candidate nearest the target tempo and length wins, match priorities can
// change the choice, null members, ties (lower index), every score member within 0..1.
import t, { type Test } from 'tap'
import { durationScore, productionScore, rankCandidates, tempoCloseness } from '../../src/media/ranking.ts'
import type { Analysis, Score } from '../../src/media/types.ts'

function analysis(over: Partial<Analysis> & { bpm?: number; confidence?: number } = {}): Analysis {
  const { bpm = 120, confidence = 0.9, ...rest } = over
  return {
    durationSec: 60,
    tempo: { bpm, beatOffsetSec: 0.1, beatIntervalSec: 60 / bpm, downbeatOffsetBeats: 0, downbeatConfidence: confidence },
    brightness: new Array(60).fill(0.5),
    energy: new Array(60).fill(0.6),
    sections: [
      { kind: 'intro', startSec: 0, endSec: 8 },
      { kind: 'verse', startSec: 8, endSec: 24 },
      { kind: 'chorus', startSec: 24, endSec: 40 },
      { kind: 'chorus', startSec: 40, endSec: 52 },
      { kind: 'outro', startSec: 52, endSec: 60 },
    ],
    cues: { mixInSec: 0.1, mixOutSec: 52 },
    key: { tonic: 'C', mode: 'major', camelot: '8B', confidence: 0.8 },
    loudness: { integratedLufs: -14, rangeLu: 6, truePeakDb: -1 },
    stereo: { correlation: 0.6, sideToMidRatio: 0.3 },
    ...rest,
  }
}

function inRange(t: Test, scores: Score[]): void {
  for (const [i, s] of scores.entries()) {
    for (const [name, v] of Object.entries(s)) {
      if (v === null) continue
      t.ok(typeof v === 'number' && Number.isFinite(v) && v >= 0 && v <= 1, `candidate ${i} ${name} = ${v} within 0..1`)
    }
  }
}

t.test('the candidate nearest the target bpm and duration is selected', async (t) => {
  const candidates = [
    { index: 0, analysis: analysis({ bpm: 104 }), seconds: 60 },
    { index: 1, analysis: analysis({ bpm: 119.8 }), seconds: 61 },
    { index: 2, analysis: analysis({ bpm: 120 }), seconds: 45 },
  ]
  const r = rankCandidates(candidates, { durationSec: 60, targetBpm: 120 })
  t.equal(r.selected, 1)
  t.equal(r.scores.length, 3, 'one score per candidate, input order')
  t.ok(r.scores[1]!.groove! > r.scores[0]!.groove!, 'closer tempo, better groove')
  t.ok(r.scores[1]!.duration > r.scores[2]!.duration, 'closer length, better duration')
  t.match(r.notes[0], /^candidate 1 selected: 119\.8 bpm vs target 120; duration 61 s vs 60 s/)
  t.ok(r.notes.length >= 2, 'a note compares with the runner-up')
  inRange(t, r.scores)
})

t.test('match priorities change the choice', async (t) => {
  // 0: right tempo, badly produced (too loud, clipping, out-of-phase). 1: off tempo, clean.
  const candidates = [
    {
      index: 0,
      analysis: analysis({
        bpm: 120,
        loudness: { integratedLufs: -2, rangeLu: 0.5, truePeakDb: 2.5 },
        stereo: { correlation: -0.6, sideToMidRatio: 1.5 },
        brightness: new Array(60).fill(0.05),
      }),
      seconds: 60,
    },
    { index: 1, analysis: analysis({ bpm: 100 }), seconds: 60 },
  ]
  const groove = rankCandidates(candidates, { targetBpm: 120, matchPriorities: { groove: 5, production: 1 } })
  const production = rankCandidates(candidates, { targetBpm: 120, matchPriorities: { groove: 1, production: 5 } })
  t.equal(groove.selected, 0, 'groove first: the on-tempo candidate')
  t.equal(production.selected, 1, 'production first: the clean candidate')
  t.ok(groove.scores[0]!.production < 0.5, 'a clipping, out-of-phase master scores low on production')
  // Harmony weighs key confidence only when asked for.
  const keyed = [
    { index: 0, analysis: analysis({ key: { tonic: 'A', mode: 'minor', camelot: '8A', confidence: 0.2 } }), seconds: 60 },
    { index: 1, analysis: analysis({ bpm: 118, key: { tonic: 'A', mode: 'minor', camelot: '8A', confidence: 0.95 } }), seconds: 60 },
  ]
  t.equal(rankCandidates(keyed, { targetBpm: 120 }).selected, 0, 'without harmony priority: tempo decides')
  const harmony = rankCandidates(keyed, { targetBpm: 120, matchPriorities: { harmony: 5, groove: 1 } })
  t.equal(harmony.selected, 1, 'harmony priority: the clearer key wins')
  t.ok(
    harmony.notes.some((n) => n.includes('harmony')),
    'the notes say harmony was weighed',
  )
  inRange(t, [...groove.scores, ...production.scores, ...harmony.scores])
})

t.test('null members: no beats without a target, fewer than two sections', async (t) => {
  const ambient = analysis({ confidence: 0, sections: [{ kind: 'verse', startSec: 0, endSec: 60 }] })
  const r = rankCandidates(
    [
      { index: 0, analysis: ambient, seconds: 60 },
      { index: 1, analysis: ambient, seconds: 58 },
    ],
    {},
  )
  t.equal(r.scores[0]!.groove, null, 'no target and no beats anywhere: groove is null')
  t.equal(r.scores[0]!.structure, null, 'one section: structure is null')
  t.equal(r.selected, 0)
  const withTarget = rankCandidates([{ index: 0, analysis: ambient, seconds: 60 }], { targetBpm: 100 })
  t.equal(withTarget.scores[0]!.groove, 0, 'a target bpm and no beats: groove 0, not null')
  // Production stays a number without loudness, stereo, brightness or energy.
  const bare = analysis({ brightness: [], energy: [] })
  delete bare.loudness
  delete bare.stereo
  t.equal(productionScore(bare), 0.5, 'nothing measurable: a neutral 0.5')
  inRange(t, [...r.scores, ...withTarget.scores])
})

t.test('ties go to the lower index', async (t) => {
  const a = analysis()
  const r = rankCandidates(
    [
      { index: 2, analysis: a, seconds: 60 },
      { index: 1, analysis: a, seconds: 60 },
      { index: 3, analysis: a, seconds: 60 },
    ],
    { durationSec: 60, targetBpm: 120 },
  )
  t.equal(r.selected, 1)
  t.same(r.scores[0], r.scores[1], 'identical analyses score the same')
})

t.test('requested sections: boundaries close to the request score higher', async (t) => {
  const sections = [
    { name: 'intro', startSec: 0, endSec: 10, description: 'pad' },
    { name: 'verse', startSec: 10, endSec: 30, description: 'drums in' },
    { name: 'chorus', startSec: 30, endSec: 60, description: 'full' },
  ]
  const near = analysis({
    sections: [
      { kind: 'intro', startSec: 0, endSec: 10.5 },
      { kind: 'verse', startSec: 10.5, endSec: 30 },
      { kind: 'chorus', startSec: 30, endSec: 60 },
    ],
  })
  const far = analysis({
    sections: [
      { kind: 'intro', startSec: 0, endSec: 20 },
      { kind: 'verse', startSec: 20, endSec: 45 },
      { kind: 'chorus', startSec: 45, endSec: 60 },
    ],
  })
  const r = rankCandidates(
    [
      { index: 0, analysis: far, seconds: 60 },
      { index: 1, analysis: near, seconds: 60 },
    ],
    { sections, matchPriorities: { structure: 5 } },
  )
  t.ok(r.scores[1]!.structure! > r.scores[0]!.structure!, 'nearer boundaries, better structure')
  t.equal(r.selected, 1)
})

t.test('member formulas', async (t) => {
  t.equal(durationScore(60, 60), 1)
  t.ok(Math.abs(durationScore(66, 60) - Math.exp(-1)) < 1e-12, 'one tolerance (10 %) away: e^-1')
  t.equal(durationScore(29, 60), 0, 'under half the target: 0')
  t.equal(durationScore(29, undefined), 1, 'no target: 1')
  t.equal(tempoCloseness(120, 120), 1)
  t.ok(Math.abs(tempoCloseness(60, 120) - 0.8) < 1e-12, 'half time counts at 80 %')
  t.ok(Math.abs(tempoCloseness(240, 120) - 0.8) < 1e-12, 'double time counts at 80 %')
  t.ok(tempoCloseness(126, 120) < tempoCloseness(121, 120), 'closer is better')
  t.equal(tempoCloseness(0, 120), 0)
})
