// The k best (score, position) pairs of a stream, in a fixed-size binary min-heap on typed arrays
// (no object per candidate). Ties go to the higher position: positions follow seq, so on equal
// scores the newer record wins, the same rule as the fused list's.

export interface Ranked {
  /** Positions, best first. */
  positions: Int32Array
  /** Their scores, same order. */
  scores: Float64Array
}

export class TopK {
  readonly k: number
  readonly #scores: Float64Array
  readonly #positions: Int32Array
  #size = 0
  constructor(k: number) {
    this.k = Math.max(0, k)
    this.#scores = new Float64Array(Math.max(0, k))
    this.#positions = new Int32Array(Math.max(0, k))
  }

  get size(): number {
    return this.#size
  }

  /** Lowest score kept (−Infinity until full): a caller may skip candidates that cannot enter. */
  get floor(): number {
    return this.#size < this.k ? Number.NEGATIVE_INFINITY : this.#scores[0]!
  }

  push(score: number, position: number): void {
    const scores = this.#scores
    const positions = this.#positions
    if (this.#size < this.k) {
      // Sift up from the new leaf.
      let i = this.#size++
      while (i > 0) {
        const parent = (i - 1) >> 1
        if (!worse(score, position, scores[parent]!, positions[parent]!)) break
        scores[i] = scores[parent]!
        positions[i] = positions[parent]!
        i = parent
      }
      scores[i] = score
      positions[i] = position
      return
    }
    if (this.k === 0 || !worse(scores[0]!, positions[0]!, score, position)) return
    // Replace the root (the worst kept) and sift down.
    const size = this.#size
    let i = 0
    for (;;) {
      let child = 2 * i + 1
      if (child >= size) break
      if (child + 1 < size && worse(scores[child + 1]!, positions[child + 1]!, scores[child]!, positions[child]!)) child++
      if (!worse(scores[child]!, positions[child]!, score, position)) break
      scores[i] = scores[child]!
      positions[i] = positions[child]!
      i = child
    }
    scores[i] = score
    positions[i] = position
  }

  /** The kept pairs, best first (the heap is left as it was). */
  sorted(): Ranked {
    const order = Array.from({ length: this.#size }, (_, i) => i)
    const scores = this.#scores
    const positions = this.#positions
    order.sort((a, b) => (worse(scores[a]!, positions[a]!, scores[b]!, positions[b]!) ? 1 : -1))
    const out: Ranked = { positions: new Int32Array(order.length), scores: new Float64Array(order.length) }
    for (let i = 0; i < order.length; i++) {
      out.positions[i] = positions[order[i]!]!
      out.scores[i] = scores[order[i]!]!
    }
    return out
  }
}

/** Whether (sa, pa) ranks below (sb, pb): lower score, or equal score and older position. */
function worse(sa: number, pa: number, sb: number, pb: number): boolean {
  return sa < sb || (sa === sb && pa < pb)
}
