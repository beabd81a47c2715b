// Text → index terms, shared by the blind index (HMAC of each term) and the lexical embedder.
// Pipeline: well-formed UTF-16 → NFKC → drop invisible format characters → lowercase (locale-free)
// → word tokens (Unicode letters, marks, digits; internal apostrophes kept, hyphens split) →
// English stopwords out → tokens over 64 characters out → Porter2 stems for Latin-script words.
// Scripts written without spaces (Han, kana, Thai, Lao, Khmer, Myanmar) become overlapping
// character bigrams, so a sentence of Chinese is not one 200-character "word".
// Every step is a single linear pass (no regex with nested ambiguous quantifiers): hostile input
// (NUL, lone surrogates, megabyte strings, ZWJ/RTL marks) costs time proportional to its length.
import { createRequire } from 'node:module'

// wink-porter2-stemmer is CommonJS without types: a plain (word) => stem function.
const stemWord = createRequire(import.meta.url)('wink-porter2-stemmer') as (word: string) => string

/** Longest token kept (longer ones are hashes, base64, junk: no use to match on). */
export const MAX_TOKEN_LENGTH = 64

/** A compact English stopword list. Negations (no, not, nor) stay: "does not like X" must keep them. */
const STOPWORDS = new Set(
  (
    "a about above after again against all am an and any are aren't as at be because been before being below between both but by can can't " +
    "cannot could couldn't did didn't do does doesn't doing don't down during each few for from further had hadn't has hasn't have haven't " +
    "having he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its " +
    "itself let's me more most mustn't my myself of off on once only or other ought our ours ourselves out over own same shan't she she'd " +
    "she'll she's should shouldn't so some such than that that's the their theirs them themselves then there there's these they they'd " +
    "they'll they're they've this those through to too under until up very was wasn't we we'd we'll we're we've were weren't what what's " +
    "when when's where where's which while who who's whom why why's will with won't would wouldn't you you'd you'll you're you've your " +
    'yours yourself yourselves also just s t'
  ).split(' '),
)

// Written without spaces between words: tokenised as character bigrams (as Lucene's CJK analyzer).
// Letters, marks and digits only: 。 and 「」 carry Han/kana script extensions too.
const SPACELESS = String.raw`[\p{L}\p{M}\p{N}]&&[\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Thai}\p{scx=Lao}\p{scx=Khmer}\p{scx=Myanmar}]`
// A run of spaceless-script characters, or a word: letters/marks/digits of other scripts with
// internal apostrophes ("user's", "o'clock"). Each `'…` group must start with an apostrophe, so
// matching never backtracks more than one step: linear on any input.
const WORD = new RegExp(String.raw`[${SPACELESS}]+|[[\p{L}\p{M}\p{N}]--[${SPACELESS}]]+(?:'[[\p{L}\p{M}\p{N}]--[${SPACELESS}]]+)*`, 'gv')
const SPACELESS_RUN = new RegExp(`^[${SPACELESS}]`, 'v')
const LATIN_WORD = /^[\p{sc=Latin}']+$/u
// Apostrophe look-alikes NFKC leaves alone (right/left single quotes, modifier letter apostrophe).
const APOSTROPHES = /[\u2018\u2019\u02bc]/g
// Format characters (ZWJ/ZWNJ, RTL/LTR marks, soft hyphen, BOM, tag characters) are invisible:
// dropped so "pass\u00adword" matches "password". The zero-width space separates words instead.
const ZERO_WIDTH_SPACE = /\u200b/g
const FORMAT = /\p{Cf}/gu

/** The text in the form the tokeniser reads: well-formed, NFKC, no format characters, lowercase. */
export function normalizeText(text: string): string {
  return text.toWellFormed().normalize('NFKC').replace(ZERO_WIDTH_SPACE, ' ').replace(FORMAT, '').toLowerCase().replace(APOSTROPHES, "'")
}

/**
 * Word tokens of the text before stemming: normalised, stopwords and over-long tokens dropped,
 * spaceless-script runs as bigrams. (The lexical embedder hashes these tokens' character n-grams.)
 */
export function tokensOf(text: string): string[] {
  const out: string[] = []
  if (typeof text !== 'string' || text.length === 0) return out
  for (const match of normalizeText(text).matchAll(WORD)) {
    const token = match[0]
    if (SPACELESS_RUN.test(token)) {
      pushBigrams(token, out)
      continue
    }
    if (token.length > MAX_TOKEN_LENGTH || STOPWORDS.has(token)) continue
    out.push(token)
  }
  return out
}

function pushBigrams(run: string, out: string[]): void {
  const chars = Array.from(run) // code points: astral Han (extension B+) stays whole
  if (chars.length === 1) {
    out.push(chars[0]!)
    return
  }
  for (let i = 0; i + 1 < chars.length; i++) out.push(chars[i]! + chars[i + 1]!)
}

// Stems of recent tokens: natural text repeats its vocabulary, and Porter2 is a chain of regexes.
// Bounded: cleared when full (cheaper than LRU bookkeeping; refills in one document).
const STEM_CACHE_MAX = 50_000
const stemCache = new Map<string, string>()

/** Porter2 stem of a Latin-script token (English rules; "user's" → "user"); other tokens unchanged. */
export function stemToken(token: string): string {
  let stem = stemCache.get(token)
  if (stem !== undefined) return stem
  stem = LATIN_WORD.test(token) ? stemWord(token) : token
  if (stem.length === 0) stem = token
  if (stemCache.size >= STEM_CACHE_MAX) stemCache.clear()
  stemCache.set(token, stem)
  return stem
}

/** Index terms of the text (the blind index's input): tokensOf, stemmed. Repeats kept (they are tf). */
export function termsOf(text: string): string[] {
  const tokens = tokensOf(text)
  for (let i = 0; i < tokens.length; i++) tokens[i] = stemToken(tokens[i]!)
  return tokens
}

/** Canonical form of an exact-match field (context, a tag) before its MAC: NFKC, trimmed. */
export function normalizeForMac(value: string): string {
  return value.toWellFormed().normalize('NFKC').trim()
}
