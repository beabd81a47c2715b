// The form of a song on bar lines: the requested sections snapped to bars (gaps become an intro
// or outro), or a default form (intro/verse/chorus/…/outro) scaled to the song's length.
import type { SectionRequest } from '../../types.ts'
import { normalizeText } from './prompt-text.ts'
import { INTENSITY_WORDS, SECTION_KINDS, type SectionKind } from './vocabulary.ts'

const DEFAULT_FORMS: Array<{ minBars: number; kinds: Array<[SectionKind, number]> }> = [
  {
    minBars: 48,
    kinds: [
      ['intro', 1],
      ['verse', 2],
      ['chorus', 2],
      ['verse', 2],
      ['chorus', 2],
      ['bridge', 1.5],
      ['chorus', 2],
      ['outro', 1],
    ],
  },
  {
    minBars: 28,
    kinds: [
      ['intro', 1],
      ['verse', 2],
      ['chorus', 2],
      ['verse', 2],
      ['chorus', 2],
      ['outro', 1],
    ],
  },
  {
    minBars: 12,
    kinds: [
      ['intro', 1],
      ['verse', 2],
      ['chorus', 2],
      ['outro', 1],
    ],
  },
  {
    minBars: 0,
    kinds: [
      ['intro', 1],
      ['chorus', 2],
      ['outro', 1],
    ],
  },
]

export interface DraftSection {
  name: string
  kind: SectionKind
  startBar: number
  endBar: number
  intensity: number
  requested: boolean
  description?: string
}

export function sectionKind(name: string): SectionKind {
  const text = normalizeText(name)
  return SECTION_KINDS.find((k) => k.pattern.test(text))?.kind ?? 'verse'
}

function defaultIntensity(kind: SectionKind): number {
  return SECTION_KINDS.find((k) => k.kind === kind)?.intensity ?? 5
}

/** The default form scaled to `bars`: sections in 4-bar units where they fit, the remainder to the outro. */
export function defaultForm(bars: number): DraftSection[] {
  const form = DEFAULT_FORMS.find((f) => bars >= f.minBars)!.kinds.slice(0, Math.max(1, bars))
  const unit = bars >= 4 * form.length ? 4 : bars >= 2 * form.length ? 2 : 1
  const units = Math.floor(bars / unit)
  const weight = form.reduce((sum, [, w]) => sum + w, 0)
  const shares = form.map(([, w]) => Math.max(1, Math.floor((units * w) / weight)))
  let spare = units - shares.reduce((a, b) => a + b, 0)
  // Hand out what rounding left, choruses first, then verses.
  for (const prefer of ['chorus', 'verse', 'bridge', 'intro', 'outro'] as const) {
    for (let k = form.length - 1; k >= 0 && spare > 0; k--) {
      if (form[k]![0] !== prefer) continue
      shares[k]! += 1
      spare -= 1
    }
  }
  for (let k = 0; spare < 0 && k < form.length; k++) {
    while (shares[k]! > 1 && spare < 0) {
      shares[k]! -= 1
      spare += 1
    }
  }
  const sections: DraftSection[] = []
  let bar = 0
  form.forEach(([kind], k) => {
    const end = k === form.length - 1 ? bars : bar + shares[k]! * unit
    if (end > bar) sections.push({ name: kind, kind, startBar: bar, endBar: end, intensity: defaultIntensity(kind), requested: false })
    bar = end
  })
  return sections
}

/** Requested sections snapped to bar lines; a gap before the first becomes an intro, one after the last an outro. */
export function requestedForm(sections: SectionRequest[], bars: number, barSec: number, decisions: string[]): DraftSection[] {
  const sorted = [...sections].sort((a, b) => a.startSec - b.startSec)
  const drafts: DraftSection[] = []
  for (const section of sorted) {
    const startBar = Math.max(drafts.at(-1)?.endBar ?? 0, Math.min(bars, Math.round(section.startSec / barSec)))
    const endBar = Math.min(bars, Math.round(section.endSec / barSec))
    if (endBar <= startBar) {
      decisions.push(`section "${section.name}" (${section.startSec}–${section.endSec} s) is shorter than a bar or in the tail: merged into its neighbour`)
      continue
    }
    const kind = sectionKind(section.name)
    const described = INTENSITY_WORDS.find((w) => w.words.some((word) => normalizeText(section.description).includes(` ${word} `)))
    drafts.push({
      name: section.name,
      kind,
      startBar,
      endBar,
      intensity: section.intensity ?? described?.intensity ?? defaultIntensity(kind),
      requested: true,
      description: section.description,
    })
  }
  if (drafts.length === 0) return defaultForm(bars)
  const first = drafts[0]!
  if (first.startBar > 0) {
    if (first.startBar >= 2) drafts.unshift({ name: 'intro', kind: 'intro', startBar: 0, endBar: first.startBar, intensity: 3, requested: false })
    else first.startBar = 0
  }
  for (let k = 1; k < drafts.length; k++) drafts[k - 1]!.endBar = drafts[k]!.startBar
  const last = drafts.at(-1)!
  if (bars - last.endBar >= 2) drafts.push({ name: 'outro', kind: 'outro', startBar: last.endBar, endBar: bars, intensity: 3, requested: false })
  else last.endBar = bars
  return drafts
}
