// Candidate ranking: each analysed song gets the SPEC's Score (members 0..1), and the best overall
// score is selected (ties → the lower index). Members:
// - duration: exp(−|d − target|/tol), tol = 10 % of the target; 0 under half the target; 1 without a target.
// - production: mean of the measurable checks (integrated −20…−7 LUFS, true peak ≤ 0 dBTP, LRA 3–12 LU,
//   stereo correlation > 0, brightness 0.25–0.85, no long interior silence); 0.5 when nothing is measured.
// - groove: with a target bpm, octave-aware closeness (×½ and ×2 count at 80 %) × (0.5 + 0.5·downbeat
//   confidence), 0 for a candidate without beats. Without a target, the downbeat confidence (pulse clarity);
//   null for every candidate when none has beats (confidence 0), so nothing is compared on it.
// - structure: ≥ 3 sections, intro and outro, a repeated kind (chorus best), and with requested sections
//   the closeness of their boundaries; null when the analysis has fewer than 2 sections.
// overall = weighted mean of the non-null members: duration 2 (when a duration is requested, else 1),
// groove/structure/production by matchPriorities (default 1). harmony (key confidence, 0 without a key)
// joins with its weight only when matchPriorities.harmony is given; instrumentation has no local
// measurement and is ignored.
import type { Analysis, Score, SectionRequest } from './types.ts'

export interface RankCandidate {
  index: number
  analysis: Analysis
  seconds: number
}

export interface RankRequest {
  durationSec?: number | undefined
  targetBpm?: number | undefined
  matchPriorities?: { groove?: number; harmony?: number; structure?: number; production?: number; instrumentation?: number } | undefined
  sections?: SectionRequest[] | undefined
}

export interface Ranking {
  /** Same order as the input. */
  scores: Score[]
  /** The selected candidate's `index`. */
  selected: number
  notes: string[]
}

const unit = (v: number): number => (Number.isFinite(v) ? Math.min(1, Math.max(0, v)) : 0)

/** 1 inside [lo, hi], falling linearly to 0 over `below` under lo and `above` over hi. */
function band(v: number, lo: number, hi: number, below: number, above: number): number {
  if (v < lo) return unit(1 - (lo - v) / below)
  if (v > hi) return unit(1 - (v - hi) / above)
  return 1
}

export function durationScore(seconds: number, target: number | undefined): number {
  if (!target || !(target > 0)) return 1
  if (seconds < 0.5 * target) return 0
  return unit(Math.exp(-Math.abs(seconds - target) / (0.1 * target)))
}

export function productionScore(a: Analysis): number {
  const parts: number[] = []
  if (a.loudness) {
    parts.push(band(a.loudness.integratedLufs, -20, -7, 6, 6))
    parts.push(a.loudness.truePeakDb <= 0 ? 1 : unit(1 - a.loudness.truePeakDb / 3))
    parts.push(band(a.loudness.rangeLu, 3, 12, 3, 8))
  }
  if (a.stereo) parts.push(a.stereo.correlation > 0 ? 1 : unit(1 + 2 * a.stereo.correlation))
  if (a.brightness.length > 0) parts.push(band(a.brightness.reduce((s, v) => s + v, 0) / a.brightness.length, 0.25, 0.85, 0.25, 0.15))
  if (a.energy.length >= 10) {
    // Interior silence (the ends may fade): the share of energy points under 0.05 (≈ −38 LUFS).
    const inner = a.energy.slice(Math.floor(a.energy.length * 0.1), Math.ceil(a.energy.length * 0.9))
    const silent = inner.filter((e) => e < 0.05).length / Math.max(1, inner.length)
    parts.push(unit(1 - 4 * silent))
  }
  return parts.length > 0 ? unit(parts.reduce((s, v) => s + v, 0) / parts.length) : 0.5
}

/** Octave-aware tempo closeness: exp(−|log2 ratio|/0.05), the nearer of ×½ and ×2 at 80 %. */
export function tempoCloseness(bpm: number, target: number): number {
  if (!(bpm > 0) || !(target > 0)) return 0
  let best = 0
  for (const [m, w] of [
    [1, 1],
    [0.5, 0.8],
    [2, 0.8],
  ] as const) {
    best = Math.max(best, w * Math.exp(-Math.abs(Math.log2((bpm * m) / target)) / 0.05))
  }
  return unit(best)
}

function grooveScore(a: Analysis, targetBpm: number | undefined): number {
  const confidence = unit(a.tempo.downbeatConfidence)
  // Confidence 0 is what the analysis reports when it found no beats (its tempo is then a placeholder).
  if (confidence <= 0) return 0
  if (!targetBpm) return confidence
  return unit(tempoCloseness(a.tempo.bpm, targetBpm) * (0.5 + 0.5 * confidence))
}

export function structureScore(a: Analysis, requested: SectionRequest[] | undefined): number | null {
  const sections = a.sections
  if (sections.length < 2) return null
  const kinds = sections.map((s) => s.kind)
  const count = Math.min(1, sections.length / 3)
  const ends = (kinds[0] === 'intro' ? 0.5 : 0) + (kinds[kinds.length - 1] === 'outro' ? 0.5 : 0)
  const repeatedChorus = kinds.filter((k) => k === 'chorus').length >= 2
  const repeated = kinds.some((k, i) => kinds.indexOf(k) !== i)
  const repetition = repeatedChorus ? 1 : repeated ? 0.7 : 0
  const generic = (count + ends + repetition) / 3
  const wanted = (requested ?? []).slice(1).map((s) => s.startSec)
  if (wanted.length === 0) return unit(generic)
  const found = sections.slice(1).map((s) => s.startSec)
  const closeness = wanted.map((t) => (found.length > 0 ? Math.exp(-Math.min(...found.map((f) => Math.abs(f - t))) / 4) : 0))
  return unit(0.5 * generic + 0.5 * (closeness.reduce((s, v) => s + v, 0) / closeness.length))
}

const fmt = (v: number, digits = 1): string => (Math.round(v * 10 ** digits) / 10 ** digits).toString()

export function rankCandidates(candidates: RankCandidate[], request: RankRequest): Ranking {
  const priorities = request.matchPriorities ?? {}
  const target = request.targetBpm && request.targetBpm > 0 ? request.targetBpm : undefined
  const anyBeats = candidates.some((c) => c.analysis.tempo.downbeatConfidence > 0)
  const weights = {
    duration: request.durationSec ? 2 : 1,
    production: priorities.production ?? 1,
    groove: priorities.groove ?? 1,
    structure: priorities.structure ?? 1,
    harmony: priorities.harmony ?? 0,
  }
  const rows = candidates.map((c) => {
    const duration = durationScore(c.seconds, request.durationSec)
    const production = productionScore(c.analysis)
    const groove = target || anyBeats ? grooveScore(c.analysis, target) : null
    const structure = structureScore(c.analysis, request.sections)
    const harmony = c.analysis.key ? unit(c.analysis.key.confidence) : 0
    let num = weights.duration * duration + weights.production * production + weights.harmony * harmony
    let den = weights.duration + weights.production + weights.harmony
    if (groove !== null) {
      num += weights.groove * groove
      den += weights.groove
    }
    if (structure !== null) {
      num += weights.structure * structure
      den += weights.structure
    }
    const score: Score = { overall: unit(den > 0 ? num / den : 0), duration, production, groove, structure }
    return { candidate: c, score, harmony }
  })
  let best = rows[0]
  for (const row of rows) {
    if (!best) break
    const d = row.score.overall - best.score.overall
    if (d > 1e-9 || (Math.abs(d) <= 1e-9 && row.candidate.index < best.candidate.index)) best = row
  }
  if (!best) return { scores: [], selected: 0, notes: [] }
  const notes = [selectionNote(best.candidate, best.score, request, target)]
  const others = rows.filter((r) => r !== best).sort((a, b) => b.score.overall - a.score.overall)
  const runnerUp = others[0]
  if (runnerUp) {
    notes.push(`overall ${fmt(best.score.overall, 2)} vs ${fmt(runnerUp.score.overall, 2)} for candidate ${runnerUp.candidate.index}${deciding(best, runnerUp, weights)}`)
  }
  if (weights.harmony > 0) notes.push(`harmony weighed as key confidence: ${fmt(best.harmony, 2)}`)
  if ((priorities.instrumentation ?? 0) > 0) notes.push('instrumentation has no local measurement and was not weighed')
  return { scores: rows.map((r) => r.score), selected: best.candidate.index, notes }
}

function selectionNote(c: RankCandidate, s: Score, request: RankRequest, target: number | undefined): string {
  const parts: string[] = []
  const a = c.analysis
  if (target) parts.push(`${fmt(a.tempo.bpm)} bpm vs target ${fmt(target)}`)
  else if (a.tempo.downbeatConfidence > 0) parts.push(`${fmt(a.tempo.bpm)} bpm`)
  if (request.durationSec) parts.push(`duration ${fmt(c.seconds, 0)} s vs ${fmt(request.durationSec, 0)} s`)
  else parts.push(`duration ${fmt(c.seconds, 0)} s`)
  if (a.key) parts.push(`key ${a.key.tonic} ${a.key.mode} (${a.key.camelot})`)
  if (a.loudness) parts.push(`${fmt(a.loudness.integratedLufs)} LUFS`)
  if (s.structure !== null) parts.push(`${a.sections.length} sections`)
  return `candidate ${c.index} selected: ${parts.join('; ')}`
}

/** The member that separates the winner from the runner-up the most, weighted. */
function deciding(a: { score: Score; harmony: number }, b: { score: Score; harmony: number }, w: Record<string, number>): string {
  const members = ['duration', 'production', 'groove', 'structure'] as const
  let name = ''
  let gap = 0
  for (const m of members) {
    const x = a.score[m]
    const y = b.score[m]
    if (x === null || y === null) continue
    const g = (x - y) * (w[m] ?? 1)
    if (g > gap) {
      gap = g
      name = `${m} ${fmt(x, 2)} vs ${fmt(y, 2)}`
    }
  }
  if ((w.harmony ?? 0) * (a.harmony - b.harmony) > gap) name = `harmony ${fmt(a.harmony, 2)} vs ${fmt(b.harmony, 2)}`
  return name ? ` (mostly ${name})` : ''
}
