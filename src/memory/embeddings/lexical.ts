// The model-free default embedder: random indexing of hashed features (a dense SimHash). Every
// feature (a stemmed term, or a character 3/4-gram of a word wrapped in boundary markers) gets a
// fixed pseudo-random ±1 vector over all dimensions, seeded by a hash of the feature; a text's
// vector is the weighted sum, L2-normalised. Random ±1 vectors are nearly orthogonal (cosine ~
// N(0, 1/dims)), so the cosine of two texts approximates the weighted overlap of their features:
// shared stems score high, shared word pieces ("prefer"/"preference", typos) score some, unrelated
// text scores ~0. It knows no synonyms: "IDE" and "code editor" share nothing.
// No model, no I/O, deterministic across processes and versions of Node (only integer hashing).
import type { Embedder, EmbeddingResult } from '../types.ts'
import { stemToken, tokensOf } from '../search/text.ts'

export const LEXICAL_DIMS = 384
/** Weight of a term's stem feature (before sublinear tf). */
const TERM_WEIGHT = 1
/** L2 weight of all of a word's n-gram features together (each gets NGRAM_WEIGHT/√count). */
const NGRAM_WEIGHT = 0.5
/**
 * Distinct words a text contributes at most (first seen first). Bounds the work on a hostile
 * megabyte of distinct junk words (~16 features × 384 dims each); a memory has far fewer.
 */
export const MAX_DISTINCT_WORDS = 20_000

export function lexicalEmbedderId(dims: number): string {
  return `lexical-ngram-v1-${dims}`
}

// ------------------------------------------------------------------ feature vectors

// FNV-1a over UTF-16 code units, then murmur3's finaliser: FNV alone leaves nearby strings with
// nearby seeds, and xorshift's first outputs from nearby seeds are correlated.
function featureSeed(feature: string, basis: number): number {
  let h = basis
  for (let i = 0; i < feature.length; i++) h = Math.imul(h ^ feature.charCodeAt(i), 0x01000193)
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h === 0 ? 0x9e3779b9 : h // xorshift's one fixed point
}
// Different bases keep the term "run" and the n-gram "run" apart.
const TERM_BASIS = 0x811c9dc5
const NGRAM_BASIS = 0x050c5d1f

/** Sign bits of a feature's vector (bit d set = +1 at dimension d), by xorshift32 from its hash. */
function featureBits(feature: string, basis: number, out: Uint32Array): Uint32Array {
  let x = featureSeed(feature, basis)
  for (let w = 0; w < out.length; w++) {
    x ^= x << 13
    x ^= x >>> 17
    x ^= x << 5
    out[w] = x
  }
  return out
}

// Row v holds the 8 bits of byte value v as 0/1 doubles: one lookup per byte of a feature's bits
// replaces 8 shifts and masks, and the unrolled multiply-adds have no branches to mispredict
// (the bits are random). Measured ~3x faster than a branch per dimension.
const BYTE_BITS = new Float64Array(256 * 8)
for (let v = 0; v < 256; v++) for (let k = 0; k < 8; k++) BYTE_BITS[v * 8 + k] = (v >>> k) & 1

/** acc[d] += weight × bit d. The ±1 vector is recovered at the end: Σ w(2b − 1) = 2·acc − Σ w. */
function addBits(acc: Float64Array, bits: Uint32Array, weight: number): void {
  for (let w = 0; w < bits.length; w++) {
    const word = bits[w]!
    for (let y = 0, d = w << 5; y < 32; y += 8, d += 8) {
      const o = ((word >>> y) & 255) << 3
      acc[d]! += BYTE_BITS[o]! * weight
      acc[d + 1]! += BYTE_BITS[o + 1]! * weight
      acc[d + 2]! += BYTE_BITS[o + 2]! * weight
      acc[d + 3]! += BYTE_BITS[o + 3]! * weight
      acc[d + 4]! += BYTE_BITS[o + 4]! * weight
      acc[d + 5]! += BYTE_BITS[o + 5]! * weight
      acc[d + 6]! += BYTE_BITS[o + 6]! * weight
      acc[d + 7]! += BYTE_BITS[o + 7]! * weight
    }
  }
}

// ------------------------------------------------------------------ embedding one text

export interface LexicalEmbedderOptions {
  dims?: number
  /** Words whose summed n-gram vectors are cached (dims × 4 bytes each: 1.5 KB at 384). */
  cacheSize?: number
}

export class LexicalEncoder {
  readonly dims: number
  readonly #empty: Float32Array
  // A word's n-gram vectors summed (±1 already applied), by word: the ~15 feature vectors of a word
  // cost ~15 × dims operations, its cached sum dims. Two-generation LRU approximation: a hit in
  // the old generation is promoted; when the young one is full it becomes the old one (O(1),
  // unlike evicting a Map's oldest key, which V8 makes linear in the deleted entries before it).
  readonly #cacheMax: number
  #young = new Map<string, Float32Array>()
  #old = new Map<string, Float32Array>()
  readonly #bits: Uint32Array
  readonly #scratch: Float64Array

  constructor(options: LexicalEmbedderOptions = {}) {
    const dims = options.dims ?? LEXICAL_DIMS
    if (!Number.isInteger(dims) || dims % 32 !== 0 || dims < 32 || dims > 4096) throw new RangeError(`lexical dims must be a multiple of 32 in 32..4096, got ${dims}`)
    this.dims = dims
    this.#cacheMax = Math.max(1, (options.cacheSize ?? 8192) >>> 1)
    this.#bits = new Uint32Array(dims / 32)
    this.#scratch = new Float64Array(dims)
    // A text with no terms (empty, only stopwords or punctuation) still gets a unit vector, as the
    // Embedder contract requires: a fixed one, near-orthogonal to every real text.
    const acc = new Float64Array(dims)
    addBits(acc, featureBits('\u0000empty', TERM_BASIS, this.#bits), 1)
    this.#empty = unit(acc, new Float64Array(dims), 1)!
  }

  /** The unit vector of one text. */
  encode(text: string): Float32Array {
    // Distinct words with their counts: a repeated word costs one pass, and tf is sublinear.
    const counts = new Map<string, number>()
    for (const token of tokensOf(text)) {
      const count = counts.get(token)
      if (count !== undefined) counts.set(token, count + 1)
      else if (counts.size < MAX_DISTINCT_WORDS) counts.set(token, 1)
    }
    if (counts.size === 0) return this.#empty.slice()
    const signed = new Float64Array(this.dims) // n-gram sums, ±1 applied
    const bitsAcc = new Float64Array(this.dims) // stems: Σ w·bit, fixed up with Σ w at the end
    let stemTotal = 0
    // Stems: "running" and "runs" add the same vector. Their counts merge before tf is damped.
    const stems = new Map<string, number>()
    for (const [token, count] of counts) {
      const stem = stemToken(token)
      stems.set(stem, (stems.get(stem) ?? 0) + count)
      const ngrams = this.#ngrams(token)
      const tf = 1 + Math.log(count)
      for (let d = 0; d < this.dims; d++) signed[d]! += tf * ngrams[d]!
    }
    for (const [stem, count] of stems) {
      const weight = TERM_WEIGHT * (1 + Math.log(count))
      addBits(bitsAcc, featureBits(stem, TERM_BASIS, this.#bits), weight)
      stemTotal += weight
    }
    return unit(bitsAcc, signed, stemTotal) ?? this.#empty.slice()
  }

  // The summed vectors of the character 3- and 4-grams of "<token>" (the markers make prefixes and
  // suffixes features of their own). By code unit: the 64-unit token cap bounds the work.
  #ngrams(token: string): Float32Array {
    let sum = this.#young.get(token)
    if (sum !== undefined) return sum
    sum = this.#old.get(token)
    if (sum === undefined) {
      const wrapped = `<${token}>`
      const n3 = wrapped.length - 2
      const n4 = wrapped.length - 3 // ≥ 0: a token has at least one code unit
      // Each gram weighs NGRAM_WEIGHT/√count: near-orthogonal vectors add in quadrature, so all of
      // a word's grams together have length ≈ NGRAM_WEIGHT whatever the word's length.
      const weight = NGRAM_WEIGHT / Math.sqrt(n3 + n4)
      const acc = this.#scratch.fill(0)
      for (let i = 0; i < n3; i++) addBits(acc, featureBits(wrapped.slice(i, i + 3), NGRAM_BASIS, this.#bits), weight)
      for (let i = 0; i < n4; i++) addBits(acc, featureBits(wrapped.slice(i, i + 4), NGRAM_BASIS, this.#bits), weight)
      const total = weight * (n3 + n4)
      sum = new Float32Array(this.dims)
      for (let d = 0; d < this.dims; d++) sum[d] = 2 * acc[d]! - total
    }
    if (this.#young.size >= this.#cacheMax) {
      this.#old = this.#young
      this.#young = new Map()
    }
    this.#young.set(token, sum)
    return sum
  }
}

/** The unit vector of (2·bitsAcc − total) + signed; undefined if it is zero. */
function unit(bitsAcc: Float64Array, signed: Float64Array, total: number): Float32Array | undefined {
  let sum = 0
  for (let d = 0; d < bitsAcc.length; d++) {
    const v = 2 * bitsAcc[d]! - total + signed[d]!
    signed[d] = v
    sum += v * v
  }
  if (!(sum > 0) || !Number.isFinite(sum)) return undefined
  const inv = 1 / Math.sqrt(sum)
  const out = new Float32Array(signed.length)
  for (let d = 0; d < signed.length; d++) out[d] = signed[d]! * inv
  return out
}

// ------------------------------------------------------------------ the Embedder

/** The lexical embedder (mode 'lexical'). Token counts are left to the caller (tokens.ts). */
export function createLexicalEmbedder(options: LexicalEmbedderOptions = {}): Embedder {
  const encoder = new LexicalEncoder(options)
  return {
    id: lexicalEmbedderId(encoder.dims),
    mode: 'lexical',
    dims: encoder.dims,
    description: 'lexical: hashed word stems and character n-grams (no model; matches shared words and word forms, not synonyms)',
    async embed(texts: string[], opts?: { signal?: AbortSignal }): Promise<EmbeddingResult> {
      const vectors: Float32Array[] = []
      for (const text of texts) {
        opts?.signal?.throwIfAborted()
        vectors.push(encoder.encode(text))
      }
      return { vectors, tokens: undefined }
    },
  }
}
