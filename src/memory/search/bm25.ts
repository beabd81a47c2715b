// Okapi BM25 over one owner's blind index, in memory. Terms are MACs (hex), never words; the
// statistics (df, document lengths) are this owner's alone. Postings are interleaved
// (position, tf) pairs in one growable Int32Array per term, appended in position order.
//   score(d) = Σ_t qtf(t) · idf(t) · tf·(k1 + 1) / (tf + k1·(1 − b + b·|d|/avgdl))
//   idf(t)   = ln(1 + (N − df + 0.5) / (df + 0.5))        (Lucene's: never negative)
import type { BlindTerms } from '../types.ts'
import { FUSION_DEPTH } from '../limits.ts'
import { type Ranked, TopK } from './top-k.ts'

export const BM25_K1 = 1.2
export const BM25_B = 0.75

export class Bm25Index {
  readonly #terms = new Map<string, number>()
  // Per term id: its postings and how many Int32s of them are used (2 per posting).
  #postings: Int32Array[] = []
  #used = new Int32Array(64)
  #docLength = new Float64Array(64)
  #size = 0
  #totalLength = 0
  // Scratch of search: accumulated scores and the positions touched (reset after each search).
  #scores = new Float64Array(0)
  #touched = new Int32Array(0)

  /** Documents held. */
  get size(): number {
    return this.#size
  }

  /** Distinct terms held. */
  get terms(): number {
    return this.#terms.size
  }

  /** Adds a document (its blind terms; none is fine); returns its position. */
  add(blind: BlindTerms): number {
    const position = this.#size++
    if (position === this.#docLength.length) this.#docLength = grow(this.#docLength, position * 2)
    const length = Number.isFinite(blind.length) && blind.length > 0 ? blind.length : 0
    this.#docLength[position] = length
    this.#totalLength += length
    for (const [mac, tf] of blind.terms) {
      if (!(tf > 0)) continue
      let id = this.#terms.get(mac)
      if (id === undefined) {
        id = this.#terms.size
        this.#terms.set(mac, id)
        this.#postings.push(new Int32Array(4))
        if (id === this.#used.length) this.#used = grow(this.#used, id * 2)
      }
      let list = this.#postings[id]!
      const used = this.#used[id]!
      if (used + 2 > list.length) this.#postings[id] = list = grow(list, list.length * 2)
      list[used] = position
      list[used + 1] = Math.min(tf, 0x7fffffff)
      this.#used[id] = used + 2
    }
    return position
  }

  /** Documents containing the term. */
  df(mac: string): number {
    const id = this.#terms.get(mac)
    return id === undefined ? 0 : this.#used[id]! >> 1
  }

  /**
   * The best `limit` positions for the query's term MACs (a repeated term counts that many
   * times), among `allowed` (one byte per position, nonzero = allowed) when given. Only
   * documents sharing a term score; ties go to the higher (newer) position.
   */
  search(terms: readonly string[], limit: number = FUSION_DEPTH, allowed?: Uint8Array | null): Ranked {
    const n = this.#size
    const top = new TopK(Math.max(0, Math.min(limit, n)))
    if (top.k === 0 || terms.length === 0) return top.sorted()
    const queryTf = new Map<number, number>()
    for (const mac of terms) {
      const id = this.#terms.get(mac)
      if (id !== undefined) queryTf.set(id, (queryTf.get(id) ?? 0) + 1)
    }
    if (queryTf.size === 0) return top.sorted()
    if (this.#scores.length < n) {
      this.#scores = new Float64Array(this.#docLength.length)
      this.#touched = new Int32Array(this.#docLength.length)
    }
    const scores = this.#scores
    const touched = this.#touched
    const docLength = this.#docLength
    const mask = allowed ?? null
    let touchedCount = 0
    // Length normalisation k1·(1 − b + b·|d|/avgdl) = lengthBase + lengthScale·|d|.
    const avgdl = this.#totalLength > 0 ? this.#totalLength / n : 1
    const lengthBase = BM25_K1 * (1 - BM25_B)
    const lengthScale = (BM25_K1 * BM25_B) / avgdl
    for (const [id, qtf] of queryTf) {
      const list = this.#postings[id]!
      const used = this.#used[id]!
      const df = used >> 1
      const weight = qtf * Math.log(1 + (n - df + 0.5) / (df + 0.5)) * (BM25_K1 + 1)
      for (let p = 0; p < used; p += 2) {
        const position = list[p]!
        if (mask !== null && mask[position] === 0) continue
        const tf = list[p + 1]!
        // Every score is > 0 (idf > 0, tf ≥ 1), so 0 marks a position not yet touched.
        if (scores[position] === 0) touched[touchedCount++] = position
        scores[position]! += (weight * tf) / (tf + lengthBase + lengthScale * docLength[position]!)
      }
    }
    for (let t = 0; t < touchedCount; t++) {
      const position = touched[t]!
      top.push(scores[position]!, position)
      scores[position] = 0
    }
    return top.sorted()
  }

  /** Approximate bytes held. */
  bytes(): number {
    let postings = 0
    for (const list of this.#postings) postings += list.byteLength + 64 // + the typed array object
    // A term: its 24-char key string (~56 B) and its map entry (~24 B).
    return postings + this.#terms.size * 80 + this.#used.byteLength + this.#docLength.byteLength + this.#scores.byteLength + this.#touched.byteLength
  }
}

function grow<T extends Int32Array | Float64Array>(array: T, length: number): T {
  const bigger = new (array.constructor as new (length: number) => T)(Math.max(length, 4))
  bigger.set(array)
  return bigger
}
