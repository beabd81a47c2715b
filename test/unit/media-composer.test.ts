// The offline composer: a prompt and seed become a plan whose tempo, key, sections and parts
// follow the request (vocabulary, explicit bpm/key, targetBpm, exclusions, instrumental, sections
// and intensity, lead mapping, tail reserve), identically for the same seed.
import t from 'tap'
import { beatToSec, type ComposeRequest, compose, type MusicalPlan } from '../../src/media/providers/offline/composer.ts'
import { planToMidi } from '../../src/media/providers/offline/midi.ts'
import { VOCAL_PROGRAMS } from '../../src/media/providers/offline/vocabulary.ts'

const base: ComposeRequest = { prompt: 'upbeat pop song', seed: 1, durationSec: 60, instrumental: false }
const plan = (overrides: Partial<ComposeRequest>) => compose({ ...base, ...overrides })
const onsets = (p: MusicalPlan) => p.parts.flatMap((part) => part.notes.map((n) => ({ part: part.name, sec: beatToSec(p, n.beat), end: beatToSec(p, n.beat + n.beats) })))
const partOf = (p: MusicalPlan, name: string) => p.parts.find((part) => part.name === name)
const notesIn = (p: MusicalPlan, name: string, from: number, to: number) => (partOf(p, name)?.notes ?? []).filter((n) => beatToSec(p, n.beat) >= from && beatToSec(p, n.beat) < to)

t.test('the same request and seed give the same plan (and MIDI); other seeds differ', async (t) => {
  const request: ComposeRequest = { ...base, prompt: 'dreamy synthwave with saxophone', negativePrompt: 'no piano', tailReserveSec: 4, targetBpm: 100 }
  const a = compose(request)
  const b = compose({ ...request })
  t.same(a, b)
  t.ok(planToMidi(a).equals(planToMidi(b)), 'identical MIDI bytes')
  const others = [2, 3, -7, 9_007_199_254_740_991].map((seed) => compose({ ...request, seed }))
  for (const other of others) t.not(JSON.stringify(other.parts), JSON.stringify(a.parts), `seed ${other.seed} differs`)
  t.equal(a.seed, 1)
})

t.test('genre and mood vocabulary set the tempo: chill lofi hip hop is slower than drum and bass', async (t) => {
  for (const seed of [1, 2, 3, 4, 5]) {
    const lofi = plan({ prompt: 'chill lofi hip hop', seed })
    const dnb = plan({ prompt: 'drum and bass', seed })
    t.equal(lofi.genre, 'lofi')
    t.equal(dnb.genre, 'drum and bass')
    t.ok(lofi.bpm < 95 && dnb.bpm > 160 && lofi.bpm < dnb.bpm, `seed ${seed}: ${lofi.bpm} < ${dnb.bpm}`)
  }
  t.equal(plan({ prompt: 'a dark techno track' }).genre, 'techno')
  t.equal(plan({ prompt: 'some r&b' }).genre, 'r&b')
  t.equal(plan({ prompt: 'something nice' }).genre, 'pop', 'no genre word: the default')
  t.same(plan({ prompt: 'a sad, dreamy tune' }).moods, ['sad', 'dreamy'])
  t.equal(plan({ prompt: 'jazz' }).groove, 'jazz')
  t.ok(plan({ prompt: 'jazz' }).swing > 0.2, 'jazz swings')
})

t.test('an explicit tempo and key in the prompt win', async (t) => {
  const p = plan({ prompt: 'ambient piece, 120 bpm in A minor' })
  t.equal(p.bpm, 120)
  t.same(p.key, { tonic: 'A', mode: 'minor', pitchClass: 9 })
  t.same(plan({ prompt: 'house in F# major at 124bpm' }).key, { tonic: 'F#', mode: 'major', pitchClass: 6 })
  t.same(plan({ prompt: 'ballad in Bb minor' }).key, { tonic: 'Bb', mode: 'minor', pitchClass: 10 })
  t.same(plan({ prompt: 'a folk song in the key of D' }).key, { tonic: 'D', mode: 'major', pitchClass: 2 })
  t.equal(plan({ prompt: 'rock, tempo 142' }).bpm, 142)
  // The progressions cadence in the key: the tonic chord is in them, and the song ends on it.
  for (const prog of Object.values(p.progressions))
    t.ok(
      prog.some((n) => n === 'i' || n === 'V'),
      'tonic or dominant in every progression',
    )
  const lastBass = partOf(p, 'bass')?.notes.at(-1) ?? partOf(p, 'chords')!.notes.at(-1)!
  t.equal(lastBass.midi % 12, 9, 'the last bar rests on A')
})

t.test('targetBpm wins over the genre (and over a tempo in the prompt)', async (t) => {
  t.equal(plan({ prompt: 'drum and bass', targetBpm: 87 }).bpm, 87)
  t.equal(plan({ prompt: 'house, 124 bpm', targetBpm: 97.5 }).bpm, 97.5)
  t.match(plan({ prompt: 'house, 124 bpm', targetBpm: 97.5 }).decisions.join('\n'), /selectionTarget\.bpm.*124 BPM ignored/)
})

t.test('the negative prompt and "no …" exclude instruments and elements', async (t) => {
  for (const p of [plan({ prompt: 'lofi hip hop', negativePrompt: 'no drums' }), plan({ prompt: 'lofi hip hop, no drums, with flute' })]) {
    t.notOk(partOf(p, 'drums'), 'no drum part')
    t.equal(p.groove, 'none')
    t.ok(p.excluded.includes('drums'))
  }
  t.ok(partOf(plan({ prompt: 'lofi hip hop, no drums, with flute' }), 'lead')?.program === 73, 'the flute after the negation still leads')
  const jazz = plan({ prompt: 'jazz trio', negativePrompt: 'piano' })
  t.ok(
    jazz.parts.every((part) => part.percussion || part.program > 7),
    'no piano-family program',
  )
  t.ok(partOf(plan({ prompt: 'jazz trio' }), 'chords')!.program <= 7, 'the jazz default comping is a piano')
  t.notOk(partOf(plan({ prompt: 'funk', negativePrompt: 'bass' }), 'bass'), 'no bass')
  const noHats = plan({ prompt: 'house', negativePrompt: 'hi-hats' })
  t.ok(
    partOf(noHats, 'drums')!.notes.every((n) => ![42, 44, 46, 49, 51].includes(n.midi)),
    'no cymbals',
  )
  t.ok(
    partOf(noHats, 'drums')!.notes.some((n) => n.midi === 36),
    'the kick stays',
  )
  const dnb = plan({ prompt: 'liquid funk', negativePrompt: 'drum and bass' })
  t.ok(partOf(dnb, 'drums') && partOf(dnb, 'bass'), '"drum and bass" as a genre excludes neither drums nor bass')
})

t.test('instrumental excludes every voice-like program; otherwise a vocal-like lead sings', async (t) => {
  for (const prompt of ['cinematic choir and strings', 'pop with vocals', 'ambient voices', 'trance']) {
    const p = plan({ prompt, instrumental: true })
    t.ok(
      p.parts.every((part) => part.percussion || !VOCAL_PROGRAMS.has(part.program)),
      `${prompt}: ${p.parts.map((part) => part.instrument).join(', ')}`,
    )
    t.notOk(partOf(p, 'vocal'))
  }
  const sung = plan({ prompt: 'pop ballad', instrumental: false })
  t.ok(partOf(sung, 'vocal') && VOCAL_PROGRAMS.has(partOf(sung, 'vocal')!.program), 'a vocal part on a voice program')
  t.equal(partOf(plan({ prompt: 'cinematic', instrumental: false }), 'vocal')?.program, 52, 'choir for cinematic')
  t.notOk(partOf(plan({ prompt: 'pop', negativePrompt: 'vocals' }), 'vocal'), 'negative "vocals" removes it too')
})

t.test('requested sections become the arrangement; intensity drives parts, density and velocity', async (t) => {
  const sections = [
    { name: 'Intro', startSec: 0, endSec: 12, description: 'soft piano', intensity: 2 },
    { name: 'Verse 1', startSec: 12, endSec: 28, description: 'groove comes in', intensity: 5 },
    { name: 'Chorus', startSec: 28, endSec: 48, description: 'everything', intensity: 10 },
    { name: 'Outro', startSec: 48, endSec: 60, description: 'fade', intensity: 3 },
  ]
  const p = plan({ prompt: 'pop rock at 120 bpm', sections, durationSec: 60 })
  t.same(
    p.sections.map((s) => [s.name, s.kind, s.intensity]),
    sections.map((s) => [s.name, s.name === 'Verse 1' ? 'verse' : s.name.toLowerCase(), s.intensity]),
  )
  const barSec = 2
  p.sections.forEach((s, k) => {
    t.ok(Math.abs(s.startSec - sections[k]!.startSec) <= barSec / 2, `${s.name} starts on the bar nearest ${sections[k]!.startSec} s (${s.startSec})`)
    t.equal(s.startSec % barSec, 0, `${s.name} starts on a bar line`)
  })
  t.equal(p.sections.at(-1)!.endSec, 60)
  t.notOk(p.sections[0]!.parts.includes('drums'), 'no drums at intensity 2')
  t.ok(p.sections[2]!.parts.includes('drums') && p.sections[2]!.parts.includes('pad'), 'drums and pad at intensity 10')
  const perSec = (s: { startSec: number; endSec: number }) => onsets(p).filter((n) => n.sec >= s.startSec && n.sec < s.endSec).length / (s.endSec - s.startSec)
  t.ok(perSec(p.sections[2]!) > perSec(p.sections[1]!) && perSec(p.sections[1]!) > perSec(p.sections[0]!), 'denser as intensity rises')
  const meanVelocity = (s: { startSec: number; endSec: number }) => {
    const notes = notesIn(p, 'chords', s.startSec, s.endSec)
    return notes.reduce((sum, n) => sum + n.velocity, 0) / notes.length
  }
  t.ok(meanVelocity(p.sections[2]!) > meanVelocity(p.sections[1]!), 'louder at higher intensity')
  // Without intensities the kind decides (chorus above verse), and gaps get an intro.
  const q = plan({
    prompt: 'pop at 120 bpm',
    sections: [
      { name: 'verse', startSec: 8, endSec: 30, description: 'x' },
      { name: 'chorus', startSec: 30, endSec: 60, description: 'y' },
    ],
  })
  t.same(
    q.sections.map((s) => s.name),
    ['intro', 'verse', 'chorus'],
  )
  t.ok(q.sections[2]!.intensity > q.sections[1]!.intensity)
  t.equal(
    plan({ prompt: 'pop', sections: [{ name: 'part a', startSec: 0, endSec: 60, description: 'quiet and sparse' }] }).sections[0]!.intensity,
    3,
    'description words set an intensity',
  )
})

t.test('the default form: bar-aligned, contiguous, covering the duration (30 s and 300 s)', async (t) => {
  for (const durationSec of [30, 300]) {
    for (const prompt of ['chill lofi', 'drum and bass', 'ambient', 'blues']) {
      const p = plan({ prompt, durationSec })
      const barSec = (4 * 60) / p.bpm
      t.equal(p.durationSec, durationSec)
      t.equal(p.sections[0]!.startSec, 0)
      t.equal(p.sections.at(-1)!.endSec, durationSec)
      p.sections.forEach((s, k) => {
        if (k > 0) t.equal(s.startSec, p.sections[k - 1]!.endSec, `${prompt} ${durationSec}s: contiguous`)
        t.ok(Math.abs(s.startSec / barSec - Math.round(s.startSec / barSec)) < 1e-3, `${prompt} ${durationSec}s: ${s.name} on a bar line`)
      })
      t.ok(
        onsets(p).every((n) => n.sec < durationSec - 0.75 && n.end <= durationSec - 0.75 + 1e-6),
        `${prompt} ${durationSec}s: every note inside`,
      )
      if (durationSec === 300)
        t.same(
          p.sections.map((s) => s.kind),
          ['intro', 'verse', 'chorus', 'verse', 'chorus', 'bridge', 'chorus', 'outro'],
        )
    }
  }
})

t.test('tailReserveSec leaves the last seconds without note onsets', async (t) => {
  for (const tailReserveSec of [0, 5, 15]) {
    const p = plan({ prompt: 'energetic rock', durationSec: 45, tailReserveSec })
    const limit = 45 - Math.max(tailReserveSec, 0.75)
    t.equal(p.contentEndSec, limit)
    t.ok(
      onsets(p).every((n) => n.sec < limit && n.end <= limit + 1e-6),
      `tail ${tailReserveSec}: nothing starts at or after ${limit} s`,
    )
    t.ok(
      onsets(p).some((n) => n.sec >= limit - (2 * 4 * 60) / p.bpm),
      'the music goes on into the last whole bar before the tail',
    )
  }
})

t.test('instrument words in the prompt pick the GM programs', async (t) => {
  const p = plan({ prompt: 'lofi with flute and harp, upright bass and strings' })
  t.equal(partOf(p, 'lead')?.program, 73)
  t.equal(partOf(p, 'chords')?.program, 46)
  t.equal(partOf(p, 'bass')?.program, 32)
  t.equal(partOf(p, 'pad')?.program, 48)
  t.ok([29, 30].includes(partOf(plan({ prompt: 'heavy metal with electric guitar' }), 'lead')!.program), 'electric guitar in metal: overdriven or distorted')
  t.equal(partOf(plan({ prompt: 'pop with electric guitar' }), 'lead')?.program, 27, 'elsewhere: clean')
  const solo = plan({ prompt: 'solo piano, melancholic' })
  t.same(
    solo.parts.map((part) => part.program),
    solo.parts.map(() => 0),
    'solo piano: piano only',
  )
})

t.test('instrumentalLeadMapping roles become parts on the named instruments', async (t) => {
  const p = plan({
    prompt: 'neo soul',
    instrumental: true,
    instrumentalLeadMapping: [
      { role: 'lead', instrument: 'tenor saxophone', register: 'low', articulation: 'legato' },
      { role: 'response', instrument: 'muted trumpet' },
      { role: 'harmony', instrument: 'flute', register: 'high' },
      { role: 'sustained', instrument: 'string section' },
      { role: 'ad-lib', instrument: 'vibraphone' },
      { role: 'ensemble', instrument: 'brass section' },
      { role: 'response', instrument: 'kazoo' },
    ],
  })
  const program = (name: string) => partOf(p, name)?.program
  t.equal(program('lead'), 66)
  t.equal(program('response'), 59)
  t.equal(program('harmony'), 73)
  t.equal(program('sustained'), 48)
  t.equal(program('ad-lib'), 11)
  t.equal(program('ensemble'), 61)
  t.ok(partOf(p, 'response 2'), 'an unknown instrument still plays the role')
  t.match(p.decisions.join('\n'), /"kazoo" not recognised/)
  const lead = partOf(p, 'lead')!.notes
  const high = partOf(p, 'harmony')!.notes
  t.ok(lead.reduce((s, n) => s + n.midi, 0) / lead.length < high.reduce((s, n) => s + n.midi, 0) / high.length, 'low lead below the high harmony')
  t.ok(new Set(p.parts.map((part) => part.channel)).size === p.parts.length, 'one channel per part')
  t.ok(
    p.parts.every((part) => (part.percussion ? part.channel === 9 : part.channel !== 9 && part.channel < 16)),
    'drums alone on channel 10',
  )

  // persistent continuity: the lead restates itself at the start of every section.
  const persistent = plan({ prompt: 'cinematic', instrumental: true, instrumentalLeadMapping: [{ role: 'lead', instrument: 'cello' }], instrumentalLeadContinuity: 'persistent' })
  const sectional = plan({ prompt: 'cinematic', instrumental: true, instrumentalLeadMapping: [{ role: 'lead', instrument: 'cello' }], instrumentalLeadContinuity: 'sectional' })
  for (const s of persistent.sections) t.ok(notesIn(persistent, 'lead', s.startSec - 0.01, s.startSec + 0.01).length > 0, `persistent: the lead opens ${s.name}`)
  t.ok(
    sectional.sections.some((s) => notesIn(sectional, 'lead', s.startSec, s.endSec).length === 0),
    'sectional: some sections without the lead',
  )
})

t.test('random requests (hostile sections, every vocabulary word, extreme tempi) keep the invariants', async (t) => {
  let state = 2024
  const rand = () => (state = (Math.imul(state, 1664525) + 1013904223) >>> 0) / 2 ** 32
  const pick = <T>(items: readonly T[]) => items[Math.floor(rand() * items.length)]!
  const words = [
    'lofi',
    'drum and bass',
    'jazz',
    'metal',
    'ambient',
    'sad',
    'epic',
    'no',
    'without',
    'piano',
    'choir',
    'saxophone',
    '808',
    'strings',
    'drums',
    '90 bpm',
    'in Eb minor',
    'solo',
    ',',
    '🎵',
    'über',
  ]
  const roles = ['lead', 'harmony', 'response', 'ad-lib', 'sustained', 'ensemble'] as const
  let problems = 0
  for (let round = 0; round < 40; round++) {
    const durationSec = 30 + Math.floor(rand() * 271)
    const request: ComposeRequest = {
      prompt: Array.from({ length: 1 + Math.floor(rand() * 8) }, () => pick(words)).join(' '),
      seed: Math.floor(rand() * 2e9) - 1e9,
      durationSec,
      instrumental: rand() < 0.5,
      negativePrompt: rand() < 0.3 ? pick(words) : undefined,
      tailReserveSec: rand() < 0.5 ? Math.floor(rand() * 16) : undefined,
      targetBpm: rand() < 0.3 ? 40 + rand() * 200 : undefined,
      temperature: rand() * 2,
      sections:
        rand() < 0.5
          ? Array.from({ length: Math.floor(rand() * 21) }, () => {
              const start = Math.floor(rand() * 300)
              return {
                name: pick(['intro', 'Verse 2', 'chorus', 'drop', 'x']),
                startSec: start,
                endSec: start + 1 + Math.floor(rand() * 60),
                description: pick(['quiet', 'big', 'no drums', 'x']),
              }
            })
          : undefined,
      instrumentalLeadMapping: rand() < 0.3 ? Array.from({ length: 1 + Math.floor(rand() * 8) }, () => ({ role: pick(roles), instrument: pick(words) })) : undefined,
      instrumentalLeadContinuity: rand() < 0.5 ? 'persistent' : 'sectional',
    }
    const p = compose(request)
    const why: string[] = []
    if (p.sections[0]!.startSec !== 0 || p.sections.at(-1)!.endSec !== durationSec) why.push('sections do not cover the song')
    if (p.sections.some((s, k) => k > 0 && s.startSec !== p.sections[k - 1]!.endSec)) why.push('sections not contiguous')
    if (onsets(p).some((n) => n.sec >= p.contentEndSec || n.end > p.contentEndSec + 1e-6)) why.push('a note in the tail')
    if (p.parts.some((part) => part.notes.some((n) => n.midi < 0 || n.midi > 127 || !(n.velocity > 0 && n.velocity <= 1) || !(n.beats > 0)))) why.push('a note out of range')
    if (new Set(p.parts.map((part) => part.channel)).size !== p.parts.length || p.parts.length > 16) why.push('channels')
    if (request.instrumental && p.parts.some((part) => !part.percussion && VOCAL_PROGRAMS.has(part.program))) why.push('a voice in an instrumental')
    if (why.length > 0) {
      problems += 1
      t.fail(`${JSON.stringify(request)}: ${why.join(', ')}`)
    }
  }
  t.equal(problems, 0)
})
