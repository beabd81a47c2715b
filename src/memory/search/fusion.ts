// Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009): a position's fused score is
// Σ over the ranked lists containing it of 1 / (k + rank), rank from 1. Only ranks count, so a
// BM25 score and a cosine never need a common scale; k = 60 damps the head of each list.
import { FUSION_DEPTH, RRF_K } from '../limits.ts'

export interface Fused {
  position: number
  score: number
  /** 1-based rank in each input list, null where the position is absent (same order as the lists). */
  ranks: (number | null)[]
}

/**
 * Fuses ranked lists of positions (best first; each read to `depth` at most). The result is sorted
 * by fused score, ties to the higher position (positions follow seq: the newer record wins).
 */
export function reciprocalRankFusion(lists: readonly ArrayLike<number>[], options: { k?: number; depth?: number } = {}): Fused[] {
  const k = options.k ?? RRF_K
  const depth = options.depth ?? FUSION_DEPTH
  const byPosition = new Map<number, Fused>()
  lists.forEach((list, which) => {
    const length = Math.min(list.length, depth)
    for (let i = 0; i < length; i++) {
      const position = list[i]!
      let entry = byPosition.get(position)
      if (entry === undefined) byPosition.set(position, (entry = { position, score: 0, ranks: lists.map(() => null) }))
      if (entry.ranks[which] !== null) continue // a list naming a position twice counts its best rank
      entry.ranks[which] = i + 1
      entry.score += 1 / (k + i + 1)
    }
  })
  return [...byPosition.values()].sort((a, b) => b.score - a.score || b.position - a.position)
}
