// Reading a prompt: normalised words, phrase matching (longest first, each span used once),
// "no …"/"without …" spans, and an explicit tempo ("120 bpm") or key ("in A minor", "key of D").
import type { Mode } from './vocabulary.ts'

const LETTERS: Record<string, number> = { c: 0, d: 2, e: 4, f: 5, g: 7, a: 9, b: 11 }

/** Lowercased words separated by single spaces, punctuation as " , ", padded so phrases match whole words. */
export function normalizeText(text: string): string {
  const cleaned = text
    .toLowerCase()
    .replace(/[’`]/g, "'")
    .replace(/[^a-z0-9&'#+\-.\s]/g, ' , ')
    .replace(/\.(?!\d)|(?<!\d)\./g, ' , ')
  return ` ${cleaned.replace(/\s+/g, ' ').trim()} `
}

export interface Match<T> {
  item: T
  phrase: string
  at: number
}

/** Finds each item's phrases in `text` (longest first, each span used once) and blanks them out. */
export function takePhrases<T>(holder: { text: string }, items: T[], phrasesOf: (item: T) => string[]): Match<T>[] {
  const all = items.flatMap((item) => phrasesOf(item).map((phrase) => ({ item, phrase })))
  all.sort((a, b) => b.phrase.length - a.phrase.length)
  const found: Match<T>[] = []
  for (const { item, phrase } of all) {
    for (const form of [phrase, `${phrase}s`]) {
      let at = holder.text.indexOf(` ${form} `)
      while (at >= 0) {
        found.push({ item, phrase, at })
        holder.text = holder.text.slice(0, at + 1) + ' '.repeat(form.length) + holder.text.slice(at + 1 + form.length)
        at = holder.text.indexOf(` ${form} `)
      }
    }
  }
  return found.sort((a, b) => a.at - b.at)
}

const NEGATIONS = new Set(['no', 'without', 'minus', 'sans', 'excluding'])
const NEGATION_STOPS = new Set([',', '&', 'but', 'with', 'just', 'only', 'except', 'plus', 'featuring'])

/** The words after "no", "without", … (up to three, to the next comma) apart from the rest, which keeps its positions. */
export function splitNegations(text: string): { positive: string; negated: string } {
  const tokens = text.trim().split(' ')
  const negated: string[] = []
  for (let k = 0; k < tokens.length; k++) {
    if (!NEGATIONS.has(tokens[k]!)) continue
    let taken = 0
    while (taken < 3 && k + 1 < tokens.length && !NEGATION_STOPS.has(tokens[k + 1]!)) {
      negated.push(tokens[k + 1]!)
      tokens[k + 1] = ' '.repeat(tokens[k + 1]!.length)
      k += 1
      taken += 1
    }
    negated.push(',')
  }
  return { positive: ` ${tokens.join(' ')} `, negated: ` ${negated.join(' ')} ` }
}

export function parseBpm(text: string): number | undefined {
  const match = / (\d{2,3}(?:\.\d+)?) ?(?:bpm|beats per minute|beats a minute) /.exec(text) ?? / (?:tempo|bpm) (?:of |at |= )?(\d{2,3}(?:\.\d+)?) /.exec(text)
  if (!match) return undefined
  const bpm = Number(match[1])
  return bpm >= 40 && bpm <= 240 ? bpm : undefined
}

export function parseKey(original: string): { tonic: number; mode: Mode } | undefined {
  const text = original.replace(/♯/g, '#').replace(/♭/g, 'b')
  const named = /\b([A-Ga-g])(#|b| sharp| flat)?[ -]?(major|minor|maj|min)\b/.exec(text) ?? /\bkey of ([A-Ga-g])(#|b| sharp| flat)?(?: ?(major|minor|maj|min))?\b/i.exec(text)
  const short = /\bin ([A-G])(#|b)?(m)?(?![a-z])/.exec(text)
  const match = named ?? short
  if (!match) return undefined
  let tonic = LETTERS[match[1]!.toLowerCase()]!
  const accidental = match[2]?.trim()
  if (accidental === '#' || accidental === 'sharp') tonic += 1
  if (accidental === 'b' || accidental === 'flat') tonic += 11
  const mode: Mode = /^(minor|min|m)$/i.test(match[3] ?? '') ? 'minor' : 'major'
  return { tonic: tonic % 12, mode }
}
