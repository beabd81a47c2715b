// Notes of the offline composer's plan: harmony (cadencing progressions so the key is
// unambiguous), drums, bass, chords, pad, a melody per section kind (repeated sections repeat it,
// which is what structure analysis looks for) and the lead-mapping roles. Intensity (1..10)
// decides which parts play, how dense and how loud.
import { DRUM_ELEMENT_NOTES, type DrumElement, GROOVES, STEP_VELOCITY } from './grooves.ts'
import { BLUES, type Chord, clampMidi, type Group, groupOf, JAZZ, makeChord, nearestWithPc, PROGRESSIONS, scaleStep } from './harmony.ts'
import type { ExtraPart, PartName, PlanNote, PlanPart, Style } from './plan.ts'
import { createRng } from './rng.ts'
import { programName, type SectionKind } from './vocabulary.ts'

// ---------------------------------------------------------------------------------------------
// The arrangement

export interface ArrangeSection {
  name: string
  kind: SectionKind
  startBar: number
  endBar: number
  intensity: number
  description?: string
}

export interface ArrangeInput {
  style: Style
  sections: ArrangeSection[]
  bars: number
  /** The PRNG key of the request (prompt + seed). */
  key: string
  contentEndBeats: number
}

export interface Arrangement {
  parts: PlanPart[]
  /** Per section (same order): names of the parts with notes in it. */
  sectionParts: string[][]
  progressions: Record<string, string[]>
}

const MIX: Record<PartName, { volume: number; pan: number; velocity: number }> = {
  lead: { volume: 0.85, pan: 0.1, velocity: 0.85 },
  vocal: { volume: 0.82, pan: 0, velocity: 0.85 },
  chords: { volume: 0.7, pan: -0.2, velocity: 0.7 },
  pad: { volume: 0.55, pan: 0.05, velocity: 0.6 },
  bass: { volume: 0.85, pan: 0, velocity: 0.85 },
  drums: { volume: 0.85, pan: 0, velocity: 1 },
  harmony: { volume: 0.65, pan: -0.3, velocity: 0.7 },
  response: { volume: 0.7, pan: 0.35, velocity: 0.75 },
  'ad-lib': { volume: 0.6, pan: 0.45, velocity: 0.7 },
  sustained: { volume: 0.55, pan: -0.4, velocity: 0.6 },
  ensemble: { volume: 0.65, pan: -0.15, velocity: 0.7 },
  counter: { volume: 0.65, pan: 0.3, velocity: 0.7 },
}

const CHORUS_LIKE: SectionKind[] = ['chorus', 'drop', 'solo']
const SUNG: SectionKind[] = ['verse', 'chorus', 'drop', 'pre-chorus']
const MELODIC_KINDS: SectionKind[] = ['verse', 'chorus', 'drop', 'solo', 'pre-chorus', 'bridge']

export function arrange(input: ArrangeInput): Arrangement {
  const { style, sections, bars, key } = input
  const parts = new Map<string, PlanPart>()
  const part = (name: string, role: PartName, program: number, percussion = false): PlanPart => {
    let existing = parts.get(name)
    if (!existing) {
      existing = { name, role, program, instrument: programName(program, percussion), channel: 0, percussion, volume: MIX[role].volume, pan: MIX[role].pan, notes: [] }
      parts.set(name, existing)
    }
    return existing
  }
  const rngStyle = createRng(`${key}\u0000arrangement`)
  const barsPerChord = style.bpm >= 150 && style.genre.progression !== 'blues' ? 2 : 1

  // Progressions per group (a jazz style cadences ii–V–I; blues is the 12-bar).
  const table = PROGRESSIONS[style.mode]
  const progressions: Record<string, string[]> = {}
  for (const group of ['verse', 'chorus', 'bridge', 'build'] as const) {
    const pick = rngStyle.pick(table[group])!
    progressions[group] = style.genre.progression === 'blues' ? BLUES[style.mode] : style.genre.name === 'jazz' && group !== 'bridge' ? JAZZ[style.mode] : pick
  }
  const used = new Set(sections.map((s) => groupOf(s.kind)))
  for (const group of Object.keys(progressions)) if (!used.has(group as Group)) delete progressions[group]

  const sectionOf = (bar: number) => sections.find((s) => bar >= s.startBar && bar < s.endBar) ?? sections.at(-1)!
  const tonicChord = makeChord(style.mode === 'major' ? 'I' : 'i', style)
  const chordAt = (bar: number): Chord => {
    if (bar >= bars - 1) return tonicChord
    const section = sectionOf(bar)
    const prog = progressions[groupOf(section.kind)]!
    return makeChord(prog[Math.floor((bar - section.startBar) / barsPerChord) % prog.length]!, style)
  }

  // Swing warps positions inside each beat; beat boundaries stay put.
  const swing = (beat: number) => {
    if (style.swing <= 0) return beat
    const whole = Math.floor(beat)
    const unitBeats = style.genre.swingUnit === 8 ? 1 : 0.5
    const inBeat = beat - whole
    const unitStart = Math.floor(inBeat / unitBeats) * unitBeats
    const t = (inBeat - unitStart) / unitBeats
    const warped = t < 0.5 ? t * (1 + style.swing) : 0.5 * (1 + style.swing) + (t - 0.5) * (1 - style.swing)
    return whole + unitStart + warped * unitBeats
  }
  const add = (p: PlanPart, beat: number, beats: number, midi: number, velocity: number) => {
    if (beat >= bars * 4 || beats <= 0) return
    p.notes.push({ beat: swing(beat), beats, midi: p.percussion ? midi : clampMidi(Math.round(midi)), velocity: Math.min(1, Math.max(0.08, velocity)) })
  }

  const groove = style.drums && style.genre.groove !== 'none' ? GROOVES[style.genre.groove] : style.drums ? GROOVES.halftime : undefined
  const kickSteps = groove ? rngStyle.pick(groove.kicks)! : 'x.......x.......'
  const excludedDrumNotes = new Set<number>()
  for (const element of ['kick', 'snare', 'cymbals'] as DrumElement[]) {
    if (style.excludedElements.has(element as 'kick')) for (const n of DRUM_ELEMENT_NOTES[element]) excludedDrumNotes.add(n)
  }

  const melodyOctaveShift = (octave: number) => 12 * (octave - 5)
  const mappingRoles = style.extras

  sections.forEach((section, index) => {
    const I = section.intensity
    const loud = 0.5 + 0.05 * I
    const chorusLike = CHORUS_LIKE.includes(section.kind)
    const description = ` ${(section.description ?? '').toLowerCase()} `
    const noDrumsHere = /\b(no|without) (drums|percussion|beat)|drums? drops? out|a ?cappella/.test(description)
    // A named lead keeps the melody and the voice joins it in choruses; otherwise the voice sings
    // verses and choruses and the lead instrument takes the rest.
    const vocalHere = style.programs.vocal !== null && (style.leadExplicit ? CHORUS_LIKE : SUNG).includes(section.kind) && I >= 3
    const leadHere = style.programs.lead !== null && (style.persistentLead || ((style.leadExplicit || !vocalHere) && ((MELODIC_KINDS.includes(section.kind) && I >= 4) || I >= 6)))
    const melodyHere = leadHere || vocalHere
    const reserveTail = mappingRoles.some((e) => e.role === 'response' || e.role === 'counter')
    const melody = melodyHere ? sectionMelody(style, section, key, chordAt, reserveTail) : []

    for (let bar = section.startBar; bar < section.endBar && bar < bars; bar++) {
      const beat0 = bar * 4
      const final = bar === bars - 1
      const chord = chordAt(bar)
      const chordStart = (bar - section.startBar) % barsPerChord === 0
      const ending = input.contentEndBeats - beat0
      const firstOfSection = bar === section.startBar

      // Drums
      if (groove && I >= 3 && !noDrumsHere) {
        const drums = part('drums', 'drums', style.kit, true)
        const hit = (step: number, note: number, v: number) => !excludedDrumNotes.has(note) && add(drums, beat0 + step / 4, 0.25, note, v * loud)
        if (firstOfSection && ((index > 0 && I >= 6) || I >= 8)) hit(0, 49, 0.9)
        if (final) hit(0, 36, 1)
        else {
          const fill = bar === section.endBar - 1 && section.endBar - section.startBar >= 4 && I >= 5 && index < sections.length - 1 ? (I >= 7 ? 8 : 12) : 16
          const layers = [
            ...(groove.kick && I >= groove.kick.min ? [{ note: groove.kick.note, steps: kickSteps }] : []),
            ...groove.layers.filter((l) => I >= l.min && I <= (l.max ?? 10)),
          ]
          for (const layer of layers) {
            for (let step = 0; step < Math.min(16, fill); step++) {
              const v = STEP_VELOCITY[layer.steps[step] ?? '.']
              if (v) hit(step, layer.note, v * (groove.kick?.velocity === 'ghost' && layer.note === 36 ? 0.5 : 1))
            }
          }
          if (groove.rollsFrom && I >= groove.rollsFrom && bar % 2 === 1) for (let k = 0; k < 8; k++) hit(12 + k / 2, 42, 0.45 + k * 0.05)
          const toms = [50, 50, 48, 48, 47, 47, 45, 45]
          for (let step = fill; step < 16; step++) hit(step, step < 12 ? toms[step - 8]! : 38, 0.6 + (step - fill) * 0.05)
        }
      }

      // Bass
      if (style.bass && style.programs.bass !== null && (I >= 3 || (I >= 2 && style.genre.bass === 'held'))) {
        const bass = part('bass', 'bass', style.programs.bass)
        const root = 36 + chord.root - (chord.root >= 8 ? 12 : 0)
        const fifth = root + 7
        const v = MIX.bass.velocity * loud
        if (final) add(bass, beat0, ending, root, v)
        else bassBar(style, bass, add, beat0, root, fifth, chord, chordAt(bar + 1), kickSteps, chordStart, barsPerChord, v, I)
      }

      // Chords and pad
      const voiced = chord.tones.map((pc) => 55 + ((pc - 7 + 12) % 12)).sort((a, b) => a - b)
      if (style.programs.chords !== null) {
        const chords = part('chords', 'chords', style.programs.chords)
        const v = MIX.chords.velocity * loud
        if (final) for (const p of voiced) add(chords, beat0, ending, p, v)
        else chordBar(style, chords, add, beat0, voiced, chordStart, barsPerChord, v, I)
      }
      const padHere = style.programs.pad !== null && (style.padAlways || I >= 6 || ['intro', 'outro', 'bridge', 'breakdown', 'interlude'].includes(section.kind))
      if (padHere && (chordStart || final)) {
        const pad = part('pad', 'pad', style.programs.pad!)
        const length = final ? ending : barsPerChord * 4 * 0.98
        for (const pc of chord.tones.slice(0, 3)) add(pad, beat0, length, 60 + pc, MIX.pad.velocity * loud)
      }

      // Melody: the vocal-like lead where it sings, the lead instrument elsewhere (both when persistent).
      const inBar = melody.filter((n) => n.beat >= beat0 && n.beat < beat0 + 4)
      const finalNote = { beat: beat0, beats: ending, midi: nearestWithPc([chord.root], 72), velocity: 0.75 }
      const barMelody = final ? (melodyHere ? [finalNote] : []) : inBar
      if (leadHere && style.programs.lead !== null) {
        const lead = part('lead', 'lead', style.programs.lead)
        const phrase = Math.floor((bar - section.startBar) / 4)
        const shift = melodyOctaveShift(style.leadOctave) + (style.leadWide && phrase % 2 === 1 ? 12 : 0)
        for (const n of barMelody) add(lead, n.beat, final ? n.beats : n.beats * style.leadGate, n.midi + shift, (MIX.lead.velocity + style.leadAccent) * n.velocity * loud * 1.1)
      }
      if (vocalHere) {
        const vocal = part('vocal', 'vocal', style.programs.vocal!)
        for (const n of barMelody) add(vocal, n.beat, n.beats, n.midi - (n.midi > 76 ? 12 : 0), MIX.vocal.velocity * n.velocity * loud * 1.1)
      }

      // Lead-mapping roles and extra instruments
      const counts = new Map<string, number>()
      for (const extra of mappingRoles) {
        const n = (counts.get(extra.role) ?? 0) + 1
        counts.set(extra.role, n)
        const name = n === 1 ? extra.role : `${extra.role} ${n}`
        extraBar(style, extra, name, part, add, { bar, beat0, final, ending, chord, section, I, loud, chorusLike, melodyHere, barMelody, key, chordStart, barsPerChord })
      }
    }
  })

  // Channels: drums on 10 (index 9), the rest in order around it.
  const list = [...parts.values()].filter((p) => p.notes.length > 0)
  let channel = 0
  for (const p of list) {
    if (p.percussion) p.channel = 9
    else {
      if (channel === 9) channel += 1
      p.channel = Math.min(15, channel++)
    }
    p.notes.sort((a, b) => a.beat - b.beat || a.midi - b.midi)
  }
  const sectionParts = sections.map((s) => list.filter((p) => p.notes.some((n) => n.beat >= s.startBar * 4 && n.beat < s.endBar * 4)).map((p) => p.name))
  return { parts: list, sectionParts, progressions }
}

type Add = (p: PlanPart, beat: number, beats: number, midi: number, velocity: number) => void

function bassBar(
  style: Style,
  bass: PlanPart,
  add: Add,
  beat0: number,
  root: number,
  fifth: number,
  chord: Chord,
  next: Chord,
  kicks: string,
  chordStart: boolean,
  span: number,
  v: number,
  I: number,
): void {
  const kickBeats = [...kicks].flatMap((c, step) => (c === '.' ? [] : [step / 4]))
  const play = (notes: Array<[beat: number, pitch: number, length: number, velocity?: number]>) => {
    for (const [at, pitch, length, velocity] of notes) add(bass, beat0 + at, length, pitch, velocity ?? v)
  }
  switch (style.genre.bass) {
    case 'held':
      if (chordStart) add(bass, beat0, span * 4 * 0.97, root, v)
      return
    case 'eighths':
      for (let k = 0; k < 8; k++) add(bass, beat0 + k / 2, 0.42, I >= 7 && k >= 6 ? root + 12 : root, v * (k % 2 === 0 ? 1 : 0.85))
      return
    case 'root-fifth':
      if (I >= 6)
        play([
          [0, root, 0.9],
          [1, root, 0.9],
          [2, fifth, 0.9],
          [3, root, 0.9],
        ])
      else
        play([
          [0, root, 1.9],
          [2, fifth, 1.9],
        ])
      return
    case 'offbeat':
      for (let k = 0; k < 4; k++) add(bass, beat0 + k + 0.5, 0.45, root, v)
      if (I >= 7) add(bass, beat0, 0.4, root - 12 >= 28 ? root - 12 : root, v * 0.9)
      return
    case 'walking': {
      const third = nearestWithPc([chord.tones[1]!], root + 4)
      const approach = nearestWithPc([next.root], root + 7) + (style.mode === 'major' ? -1 : 1)
      play([
        [0, root, 0.9],
        [1, third, 0.9, v * 0.85],
        [2, fifth, 0.9, v * 0.85],
        [3, approach, 0.9, v * 0.85],
      ])
      return
    }
    case 'reggae':
      play([
        [0, root, 0.6],
        [0.75, nearestWithPc([chord.tones[1]!], root + 4), 0.6],
        [1.5, fifth, 0.6],
      ])
      return
    default: {
      // syncopated / sub: follow the kick, held until the next hit (sub) or shorter.
      const gate = style.genre.bass === 'sub' ? 0.98 : 0.8
      play(kickBeats.map((at, k) => [at, root, ((kickBeats[k + 1] ?? 4) - at) * gate]))
      if (I >= 6 && style.genre.bass === 'syncopated') add(bass, beat0 + 3.5, 0.4, root + 12, v * 0.8)
    }
  }
}

function chordBar(style: Style, chords: PlanPart, add: Add, beat0: number, voiced: number[], chordStart: boolean, span: number, v: number, I: number): void {
  const hits = (positions: number[], length: number, accent = (_: number) => 1) => {
    for (const at of positions) for (const p of voiced) add(chords, beat0 + at, length, p, v * accent(at))
  }
  const kind = I <= 3 && style.genre.chords !== 'arpeggio' ? 'sustain' : style.genre.chords
  switch (kind) {
    case 'sustain':
      if (chordStart) hits([0], span * 4 * 0.97)
      return
    case 'stabs':
      hits(I >= 8 ? [0, 0.5, 1.5, 2.5, 3.5] : [0.5, 1.5, 2.5, 3.5], 0.3)
      return
    case 'strum':
      hits(I >= 6 ? [0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5] : [0, 1, 2, 3], I >= 6 ? 0.4 : 0.85, (at) => (at % 2 === 0 ? 1 : 0.8))
      return
    case 'arpeggio': {
      const pattern = [...voiced, ...voiced.slice(1, -1).reverse()]
      const step = style.bpm >= 130 || I <= 4 ? 0.5 : 0.25
      for (let k = 0; k < 4 / step; k++)
        add(chords, beat0 + k * step, step * 0.95, pattern[k % pattern.length]! + (k >= pattern.length && I >= 7 ? 12 : 0), v * (k === 0 ? 1 : 0.8))
      return
    }
    case 'comp':
      hits(I >= 6 ? [0, 1.5, 2.5] : [0, 2.5], I >= 6 ? 0.6 : 1.2)
      return
    case 'skank':
      hits(I >= 6 ? [1, 1.5, 3, 3.5] : [1, 3], 0.3)
      return
    default:
      hits(I >= 6 ? [0, 1, 2, 3] : [0, 2], I >= 6 ? 0.9 : 1.8)
  }
}

/** The melody of one section, at the reference octave 5 (C5 = 72). Same kind and progression → same melody. */
function sectionMelody(style: Style, section: ArrangeSection, key: string, chordAt: (bar: number) => Chord, reserveTail: boolean): PlanNote[] {
  const rng = createRng(`${key}\u0000melody\u0000${section.kind}`)
  const chorusLike = CHORUS_LIKE.includes(section.kind)
  const density = Math.min(0.95, Math.max(0.12, style.density * (0.7 + 0.06 * section.intensity) * (chorusLike ? 1.15 : 1)))
  // A 2-bar motif on an 8th grid: onsets and a contour of scale steps.
  const onsets: number[] = []
  for (let pos = 0; pos < (reserveTail ? 12 : 16); pos++) {
    const p = pos === 0 ? 1 : pos % 4 === 0 ? density * 1.4 : pos % 2 === 0 ? density : density * 0.55
    if (rng.chance(p)) onsets.push(pos)
  }
  for (const pos of [4, 8]) if (onsets.length < 3 && !onsets.includes(pos)) onsets.push(pos)
  onsets.sort((a, b) => a - b)
  const leap = 0.08 * style.temperature
  const contour = onsets.map(() => {
    const r = rng.next()
    if (r < leap) return rng.chance(0.5) ? rng.int(3, 4) : -rng.int(3, 4)
    return rng.pick([-1, -1, 1, 1, -2, 2, 0])!
  })
  const center = 72 + style.tonic - (style.tonic > 6 ? 12 : 0)
  const notes: PlanNote[] = []
  for (let unit = section.startBar; unit < section.endBar; unit += 2) {
    let pitch = nearestWithPc(chordAt(unit).tones, center)
    const cadence = ((unit - section.startBar) / 2) % 2 === 1
    onsets.forEach((pos, k) => {
      const bar = unit + Math.floor(pos / 8)
      if (bar >= section.endBar) return
      const chord = chordAt(bar)
      if (k > 0) pitch = scaleStep(pitch, contour[k]!, chord.scale)
      if (pitch > center + 10 || pitch < center - 8) pitch = scaleStep(pitch, pitch > center ? -3 : 3, chord.scale)
      const last = k === onsets.length - 1
      if (last && cadence) pitch = nearestWithPc([chord.root], pitch)
      else if (pos % 4 === 0) pitch = nearestWithPc(chord.tones, pitch)
      const end = Math.min(onsets[k + 1] ?? (reserveTail ? 12 : 16), pos + 8)
      notes.push({ beat: unit * 4 + pos / 2, beats: ((end - pos) / 2) * 0.92, midi: pitch, velocity: pos % 4 === 0 ? 1 : 0.85 })
    })
  }
  return notes
}

interface BarContext {
  bar: number
  beat0: number
  final: boolean
  ending: number
  chord: Chord
  section: ArrangeSection
  I: number
  loud: number
  chorusLike: boolean
  melodyHere: boolean
  barMelody: PlanNote[]
  key: string
  chordStart: boolean
  barsPerChord: number
}

function extraBar(style: Style, extra: ExtraPart, name: string, part: (name: string, role: PartName, program: number) => PlanPart, add: Add, c: BarContext): void {
  const center = 12 * (extra.octave + 1) + style.tonic - (style.tonic > 6 ? 12 : 0)
  const shift = 12 * (extra.octave - 5) + (extra.wide && Math.floor((c.bar - c.section.startBar) / 4) % 2 === 1 ? 12 : 0)
  const v = (MIX[extra.role].velocity + extra.accent) * c.loud
  const p = () => part(name, extra.role, extra.program)
  const rng = createRng(`${c.key}\u0000${name}\u0000${c.section.kind}\u0000${(c.bar - c.section.startBar) % 4}`)
  if (c.final) {
    if (c.melodyHere || extra.role === 'sustained') add(p(), c.beat0, c.ending, nearestWithPc([c.chord.tones[1] ?? c.chord.root], center), v)
    return
  }
  switch (extra.role) {
    case 'harmony':
      if (c.melodyHere && (c.chorusLike || c.I >= 7))
        for (const n of c.barMelody) add(p(), n.beat, n.beats * extra.gate, scaleStep(n.midi, -2, c.chord.scale) + shift, v * n.velocity)
      return
    case 'ensemble':
      if (c.melodyHere && (c.chorusLike || c.I >= 7))
        for (const n of c.barMelody) add(p(), n.beat, n.beats * Math.max(extra.gate, 0.9), n.midi + shift - (shift === 0 ? 12 : 0), v * n.velocity)
      return
    case 'sustained':
      if ((c.I >= 3 || style.persistentLead) && c.chordStart)
        add(p(), c.beat0, c.barsPerChord * 4 * 0.97, nearestWithPc([c.chord.tones[(c.bar >> 1) % 2 === 0 ? 1 : 2] ?? c.chord.root], center), v)
      return
    case 'ad-lib':
      if ((c.bar - c.section.startBar) % 4 === 3 && (c.chorusLike || c.section.kind === 'outro' || c.I >= 8) && c.I >= 4) {
        let pitch = nearestWithPc(c.chord.tones, center + 5)
        for (let k = 0; k < 4; k++) {
          add(p(), c.beat0 + 2.5 + k * 0.25, 0.22 * extra.gate * 1.2, pitch, v * (0.8 + k * 0.07))
          pitch = scaleStep(pitch, 1, c.chord.scale)
        }
      }
      return
    default: {
      // response / counter: answer the melody in the last two beats of each 2-bar unit.
      if (!c.melodyHere || (c.bar - c.section.startBar) % 2 !== 1 || (extra.role === 'counter' && c.I < 5)) return
      let pitch = nearestWithPc(c.chord.tones, center + rng.int(0, 4))
      const figure = rng.pick([
        [2, 2.5, 3],
        [2, 3],
        [2.5, 3, 3.5],
      ])!
      for (const at of figure) {
        add(p(), c.beat0 + at, 0.45 * Math.max(extra.gate, 0.6), pitch, v)
        pitch = scaleStep(pitch, rng.chance(0.6) ? -1 : 1, c.chord.scale)
      }
    }
  }
}
