// The offline "song model": a prompt and seed become a MusicalPlan (tempo, key, sections, parts
// of notes in General MIDI programs) that midi.ts writes and fluidsynth renders. Everything is
// decided by a PRNG seeded from the prompt and seed, so the same request gives the same plan, and
// the plan is the ground truth of what was made (bpm, key, section times, duration).
import type { LeadMapping, SongGenerationRequest } from '../../types.ts'
import { arrange } from './arrangement.ts'
import { defaultForm, requestedForm } from './form.ts'
import type { MusicalPlan, PlanSection, Style } from './plan.ts'
import { normalizeText, parseBpm, parseKey, splitNegations, takePhrases } from './prompt-text.ts'
import { createRng, type Rng } from './rng.ts'
import {
  DEFAULT_GENRE,
  DRUM_WORDS,
  ELEMENT_WORDS,
  type ExcludedElement,
  FAMILY_WORDS,
  GENRES,
  INSTRUMENTS,
  type InstrumentWord,
  type Mode,
  MOODS,
  programName,
  VOCAL_PROGRAMS,
} from './vocabulary.ts'

export type ComposeRequest = Pick<
  SongGenerationRequest,
  | 'prompt'
  | 'negativePrompt'
  | 'seed'
  | 'durationSec'
  | 'instrumental'
  | 'sections'
  | 'tailReserveSec'
  | 'instrumentalLeadMapping'
  | 'instrumentalLeadContinuity'
  | 'targetBpm'
  | 'temperature'
>

/** What compose() returns, for callers that import the composer alone. */
export type { MusicalPlan } from './plan.ts'

export const TONICS = ['C', 'C#', 'D', 'Eb', 'E', 'F', 'F#', 'G', 'Ab', 'A', 'Bb', 'B'] as const
/** Below this much tail the last notes still get room to ring out. */
const MIN_TAIL_SEC = 0.75

// ---------------------------------------------------------------------------------------------
// Style: what the text asks for

const ROLE_FALLBACK: Record<'lead' | 'chords' | 'pad' | 'bass' | 'vocal', number[]> = {
  lead: [81, 0, 73, 65, 40, 11, 56, 24],
  chords: [0, 4, 25, 48, 16, 89],
  pad: [89, 48, 95, 90, 19],
  bass: [33, 32, 38, 42, 0],
  vocal: [53, 52, 54],
}

function decideStyle(request: ComposeRequest, rng: Rng, decisions: string[], excluded: string[]): Style {
  const { positive, negated } = splitNegations(normalizeText(request.prompt))
  const prompt = { text: positive }

  // Exclusions first, so nothing excluded gets chosen. Genre names are blanked out of the negative
  // text first: "drum and bass" there is not drums and bass.
  const negative = { text: `${normalizeText(request.negativePrompt ?? '')}${negated}` }
  takePhrases(negative, GENRES, (gs) => gs.words)
  const scan = <T>(items: T[], phrasesOf: (item: T) => string[]) => takePhrases({ text: negative.text }, items, phrasesOf).map((m) => m.item)
  const negMoods = scan(MOODS, (m) => m.words)
  const excludedPrograms = new Set<number>()
  const excludedElements = new Set<ExcludedElement>()
  for (const item of scan(INSTRUMENTS, (it) => it.words)) for (const p of item.programs) excludedPrograms.add(p)
  for (const item of scan(FAMILY_WORDS, (f) => f.words)) for (const p of item.programs) excludedPrograms.add(p)
  for (const item of scan(ELEMENT_WORDS, (e) => e.words)) excludedElements.add(item.element)
  if (request.instrumental) excludedElements.add('vocals')
  if (excludedElements.has('vocals')) for (const p of VOCAL_PROGRAMS) excludedPrograms.add(p)
  for (const e of excludedElements) excluded.push(e)
  if (excludedPrograms.size > 0)
    excluded.push(
      `programs: ${[...excludedPrograms]
        .sort((a, b) => a - b)
        .map((p) => programName(p))
        .join(', ')}`,
    )

  // Genre, moods, instruments, drum words, in the order they appear.
  const genreMatches = takePhrases(prompt, GENRES, (gs) => gs.words)
  const moods = [...new Set(takePhrases(prompt, MOODS, (m) => m.words).map((m) => m.item))].filter((m) => !negMoods.includes(m))
  const instruments = takePhrases(prompt, INSTRUMENTS, (it) => it.words)
  const drumWords = takePhrases(prompt, DRUM_WORDS, (d) => d.words)
  const implied = moods.find((m) => m.genre)?.genre
  const genre = genreMatches[0]?.item ?? GENRES.find((gs) => gs.name === (implied ?? DEFAULT_GENRE))!
  decisions.push(
    genreMatches[0]
      ? `genre ${genre.name} (from "${genreMatches[0].phrase}")`
      : `genre ${genre.name} (${implied ? `implied by the mood ${moods.find((m) => m.genre)!.name}` : 'default: no genre word found'})`,
  )
  if (moods.length > 0) decisions.push(`moods: ${moods.map((m) => m.name).join(', ')}`)

  // Tempo: selectionTarget.bpm, then an explicit "N bpm", then genre range × moods.
  const promptBpm = parseBpm(normalizeText(request.prompt))
  let bpm: number
  if (request.targetBpm !== undefined && request.targetBpm >= 40 && request.targetBpm <= 240) {
    bpm = request.targetBpm
    decisions.push(`tempo ${bpm} BPM from selectionTarget.bpm${promptBpm !== undefined && promptBpm !== bpm ? ` (the prompt's ${promptBpm} BPM ignored)` : ''}`)
  } else if (promptBpm !== undefined) {
    bpm = promptBpm
    decisions.push(`tempo ${bpm} BPM from the prompt`)
  } else {
    const [lo, hi] = genre.bpm
    const factor = Math.min(
      1.3,
      Math.max(
        0.7,
        moods.reduce((f, m) => f * m.tempo, 1),
      ),
    )
    bpm = Math.round(Math.min(hi * 1.05, Math.max(lo * 0.95, (lo + rng.next() * (hi - lo)) * factor)))
    bpm = Math.min(200, Math.max(50, bpm))
    decisions.push(`tempo ${bpm} BPM from the ${genre.name} range ${lo}–${hi}${factor !== 1 ? ` × ${factor.toFixed(2)} (moods)` : ''}`)
  }

  // Key: an explicit key, else the seed within the genre's and moods' mode bias.
  const explicitKey = parseKey(request.prompt)
  let tonic = rng.int(0, 11)
  let majorChance = genre.major + moods.reduce((sum, m) => sum + m.major, 0) - negMoods.reduce((sum, m) => sum + m.major / 2, 0)
  majorChance = Math.min(0.95, Math.max(0.05, majorChance))
  let mode: Mode = rng.next() < majorChance ? 'major' : 'minor'
  if (explicitKey) {
    tonic = explicitKey.tonic
    mode = explicitKey.mode
    decisions.push(`key ${TONICS[tonic]} ${mode} from the prompt`)
  }

  // Instruments: explicit words win over the genre's defaults.
  const usable = (p: number) => !excludedPrograms.has(p)
  const genreHas = (p: number) => [...genre.lead, ...genre.chordPrograms, ...(genre.pad ?? []), ...genre.bassPrograms].includes(p)
  const programOf = (word: InstrumentWord) => word.programs.find((p) => usable(p) && genreHas(p)) ?? word.programs.find(usable)
  const choose = (role: keyof typeof ROLE_FALLBACK, candidates: readonly number[]): number | null => rng.pick(candidates.filter(usable)) ?? ROLE_FALLBACK[role].find(usable) ?? null

  const named = instruments.filter((m) => programOf(m.item) !== undefined)
  for (const m of instruments) if (programOf(m.item) === undefined) decisions.push(`"${m.phrase}" is excluded, not used`)
  const melodic = named.filter((m) => m.item.hint === 'melodic' || m.item.hint === 'chordal')
  const leadWord = melodic[0]
  const chordWord = melodic.slice(1).find((m) => m.item.hint === 'chordal') ?? (melodic.length === 1 && leadWord?.item.hint === 'chordal' ? leadWord : undefined)
  const padWord = named.find((m) => m.item.hint === 'pad')
  const bassWord = named.find((m) => m.item.hint === 'bass')
  const vocalWord = named.find((m) => m.item.hint === 'vocal')
  const counters = melodic.filter((m) => m !== leadWord && m !== chordWord).slice(0, 2)
  // "solo piano", "piano only", "just a guitar": that instrument alone (the words must touch it).
  const alone = (m: (typeof melodic)[number]) =>
    / (?:solo|only|just|unaccompanied)(?: an?)? $/.test(positive.slice(0, m.at + 1)) || /^s? (?:only|alone)\b/.test(positive.slice(m.at + 1 + m.phrase.length))
  const minimal = melodic.length === 1 && !bassWord && !padWord && drumWords.length === 0 && alone(melodic[0]!)

  const programs: Style['programs'] = {
    lead: leadWord ? programOf(leadWord.item)! : choose('lead', genre.lead),
    chords: chordWord ? programOf(chordWord.item)! : choose('chords', genre.chordPrograms),
    pad: padWord ? programOf(padWord.item)! : genre.pad ? choose('pad', genre.pad) : null,
    bass: bassWord ? programOf(bassWord.item)! : choose('bass', genre.bassPrograms),
    vocal: null,
  }
  for (const [role, word] of [
    ['lead', leadWord],
    ['chords', chordWord],
    ['pad', padWord],
    ['bass', bassWord],
  ] as const) {
    if (word) decisions.push(`${role}: ${programName(programs[role]!)} (from "${word.phrase}")`)
  }
  let leadOctave = leadWord?.item.octave ?? 5
  if (programs.lead !== null && programs.lead >= 24 && programs.lead <= 31 && !leadWord) leadOctave = 4

  // A vocal-like lead when vocals are allowed (there is no singer): voice oohs, choir or synth voice.
  const mapping = request.instrumentalLeadMapping ?? []
  if (!excludedElements.has('vocals') && !mapping.some((m) => m.role === 'lead') && !minimal) {
    const electronic = ['house', 'techno', 'trance', 'edm', 'synthwave', 'drum and bass', 'trap', 'chiptune'].includes(genre.name)
    const choral = ['cinematic', 'classical', 'ambient'].includes(genre.name)
    const preferred = vocalWord ? programOf(vocalWord.item)! : electronic ? 54 : choral ? 52 : 53
    programs.vocal = usable(preferred) ? preferred : (ROLE_FALLBACK.vocal.find(usable) ?? null)
    if (programs.vocal !== null) decisions.push(`vocal-like lead ${programName(programs.vocal)} in verses and choruses (no singer: words and lyrics are not sung)`)
  } else if (vocalWord && request.instrumental) decisions.push(`"${vocalWord.phrase}" ignored: the song is instrumental`)

  const drumKit = drumWords.find((d) => d.item.kit !== undefined)?.item.kit ?? (instruments.some((m) => m.phrase === '808') ? 25 : genre.kit)
  const drums = (genre.drums || drumWords.length > 0) && !excludedElements.has('drums') && !minimal
  if (!genre.drums && drumWords.length > 0) decisions.push(`drums added (the prompt asks for "${drumWords[0]!.phrase}")`)

  const style: Style = {
    genre,
    moods,
    bpm,
    tonic,
    mode,
    swing: Math.min(0.4, genre.swing + moods.reduce((s, m) => s + (m.swing ?? 0), 0)),
    sevenths: genre.sevenths || moods.some((m) => m.sevenths),
    density: Math.min(0.9, Math.max(0.12, genre.density + moods.reduce((s, m) => s + m.density, 0))),
    temperature: Math.min(2, Math.max(0, request.temperature ?? 1)),
    drums,
    kit: drumKit,
    bass: programs.bass !== null && !excludedElements.has('bass') && !minimal,
    padAlways: moods.some((m) => m.pad) || genre.name === 'ambient',
    minimal,
    programs: {
      ...programs,
      lead: excludedElements.has('lead') ? null : programs.lead,
      pad: excludedElements.has('pad') || minimal ? null : programs.pad,
      chords: minimal ? programs.lead : programs.chords,
    },
    leadOctave,
    leadGate: 0.9,
    leadAccent: 0,
    leadWide: false,
    leadExplicit: leadWord !== undefined,
    persistentLead: request.instrumentalLeadContinuity === 'persistent',
    extras: counters.map((m) => ({ role: 'counter' as const, program: programOf(m.item)!, octave: m.item.octave, gate: 0.8, accent: 0, wide: false })),
    excludedElements,
  }
  if (minimal) decisions.push(`solo ${programName(style.programs.lead ?? 0)}: no drums, bass or pad`)
  applyMapping(style, mapping, usable, decisions)
  return style
}

function articulation(text: string | undefined): { gate: number; accent: number } {
  const words = normalizeText(text ?? '')
  let gate = 0.85
  let accent = 0
  if (/ (staccato|short|plucked|pizz\w*|stabs?|detached|choppy|clipped) /.test(words)) gate = 0.4
  if (/ (legato|smooth|sustained|long|flowing|held|connected|singing) /.test(words)) gate = 1
  if (/ (soft|breathy|gentle|muted|quiet|tender|light) /.test(words)) accent -= 0.15
  if (/ (bold|punchy|accented|strong|aggressive|bright|loud|forceful) /.test(words)) accent += 0.1
  return { gate, accent }
}

/** instrumentalLeadMapping: each vocal function becomes a part on the named instrument. */
function applyMapping(style: Style, mapping: LeadMapping[], usable: (p: number) => boolean, decisions: string[]): void {
  for (const entry of mapping) {
    const holder = { text: normalizeText(entry.instrument) }
    const word = takePhrases(holder, INSTRUMENTS, (it) => it.words)[0]?.item
    const candidates = word?.programs.filter(usable) ?? []
    const fallback = entry.role === 'sustained' || entry.role === 'ensemble' ? [48, 89, 0] : [...style.genre.lead, ...ROLE_FALLBACK.lead]
    const program = candidates[0] ?? fallback.find(usable)
    if (program === undefined) {
      decisions.push(`lead mapping ${entry.role} "${entry.instrument}": every candidate is excluded, dropped`)
      continue
    }
    if (!word) decisions.push(`lead mapping ${entry.role}: "${entry.instrument}" not recognised, played on ${programName(program)}`)
    else if (candidates.length === 0) decisions.push(`lead mapping ${entry.role}: "${entry.instrument}" is excluded, played on ${programName(program)}`)
    const shift = entry.register === 'low' ? -1 : entry.register === 'high' ? 1 : 0
    const octave = (word?.octave ?? 5) + shift
    const { gate, accent } = articulation(entry.articulation)
    if (entry.role === 'lead') {
      style.programs.lead = program
      style.leadOctave = octave
      style.leadGate = gate
      style.leadAccent = accent
      style.leadWide = entry.register === 'wide'
      style.leadExplicit = true
      decisions.push(`lead: ${programName(program)} from the lead mapping`)
    } else {
      style.extras.push({ role: entry.role, program, octave, gate, accent, wide: entry.register === 'wide' })
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The plan

/** Composes the plan of one song. Pure: the same request (and seed) gives the same plan. */
export function compose(request: ComposeRequest): MusicalPlan {
  const key = `${request.prompt}\u0000${request.seed}`
  const rng = createRng(`${key}\u0000style`)
  const decisions: string[] = []
  const excluded: string[] = []
  const style = decideStyle(request, rng, decisions, excluded)

  const durationSec = Math.max(1, request.durationSec)
  const tail = Math.min(durationSec / 2, Math.max(MIN_TAIL_SEC, request.tailReserveSec ?? 0))
  const contentEndSec = durationSec - tail
  const barSec = (4 * 60) / style.bpm
  const bars = Math.max(1, Math.floor(contentEndSec / barSec + 1e-9))
  if (bars * barSec > contentEndSec + 1e-6) decisions.push(`the song is shorter than one bar at ${style.bpm} BPM: one bar is played`)

  const drafts = request.sections?.length ? requestedForm(request.sections, bars, barSec, decisions) : defaultForm(bars)
  const moodShift = style.moods.reduce((s, m) => s + m.intensity, 0)
  for (const draft of drafts) {
    if (!(draft.requested && request.sections?.find((s) => s.name === draft.name)?.intensity !== undefined)) {
      draft.intensity = Math.round(Math.min(10, Math.max(1, draft.intensity + moodShift)))
    }
  }

  const arranged = arrange({ style, sections: drafts, bars, key, contentEndBeats: (contentEndSec * style.bpm) / 60 })
  const round = (x: number) => Math.round(x * 1000) / 1000
  const sections: PlanSection[] = drafts.map((draft, k) => ({
    name: draft.name,
    kind: draft.kind,
    startSec: round(draft.startBar * barSec),
    endSec: k === drafts.length - 1 ? durationSec : round(draft.endBar * barSec),
    startBar: draft.startBar,
    endBar: draft.endBar,
    intensity: draft.intensity,
    parts: arranged.sectionParts[k] ?? [],
    requested: draft.requested,
  }))

  return {
    seed: request.seed,
    bpm: style.bpm,
    beatsPerBar: 4,
    beatOffsetSec: 0,
    key: { tonic: TONICS[style.tonic]!, mode: style.mode, pitchClass: style.tonic },
    genre: style.genre.name,
    moods: style.moods.map((m) => m.name),
    groove: style.drums ? style.genre.groove : 'none',
    swing: style.swing,
    durationSec,
    contentEndSec: round(contentEndSec),
    sections,
    parts: arranged.parts,
    progressions: arranged.progressions,
    excluded,
    decisions,
  }
}

/** Seconds of a beat position in a plan. */
export function beatToSec(plan: Pick<MusicalPlan, 'bpm'>, beat: number): number {
  return (beat * 60) / plan.bpm
}
