// Input tokens of a text as OpenAI's cl100k_base counts them: what a write is billed when the
// embedder reports no usage of its own (the lexical and local embedders).
//
// The data is js-tiktoken's (the cl100k_base rank file and pre-tokeniser regex, loaded on first
// use, ~0.1 s); the counting is ours, because js-tiktoken's byte-pair merge rescans every pair
// after each merge (quadratic, with a string join per pair): one 1 MB word, or a long run of
// CJK or U+FFFD, would take minutes. Here each piece is merged with a heap over a linked list,
// O(n log n), with the same rule (lowest rank first, leftmost on ties), so counts are identical
// (the tests compare with js-tiktoken's encode on mixed text).
//
// Hostile input: lone surrogates become U+FFFD first (what any UTF-8 encoder sends), and
// special-token text ("<|endoftext|>") counts as plain text instead of throwing.
import { createRequire } from 'node:module'

interface Cl100k {
  /** Token bytes (as a latin1 string: one char per byte) → rank. */
  ranks: Map<string, number>
  /** cl100k_base's pre-tokeniser: BPE never merges across its pieces. */
  pieces: RegExp
}
let loaded: Cl100k | undefined

function load(): Cl100k {
  if (loaded !== undefined) return loaded
  // The CommonJS build through require: synchronous, and only when first needed.
  const data = createRequire(import.meta.url)('js-tiktoken/ranks/cl100k_base') as { pat_str: string; bpe_ranks: string }
  const ranks = new Map<string, number>()
  // js-tiktoken's rank format: lines of "<name> <first rank> <base64 token> <base64 token> …".
  for (const line of data.bpe_ranks.split('\n')) {
    if (line === '') continue
    const [, offset, ...tokens] = line.split(' ')
    const first = Number.parseInt(offset!, 10)
    for (let i = 0; i < tokens.length; i++) ranks.set(Buffer.from(tokens[i]!, 'base64').toString('latin1'), first + i)
  }
  loaded = { ranks, pieces: new RegExp(data.pat_str, 'gu') }
  return loaded
}

/** cl100k_base tokens of the text (special tokens counted as the plain text they are). */
export function countTokens(text: string): number {
  if (typeof text !== 'string' || text.length === 0) return 0
  const { ranks, pieces } = load()
  let total = 0
  pieces.lastIndex = 0
  for (const match of text.toWellFormed().matchAll(pieces)) {
    const piece = match[0]
    // The piece's UTF-8 bytes as a latin1 string (ASCII is already that).
    const bytes = Buffer.byteLength(piece, 'utf8') === piece.length ? piece : Buffer.from(piece, 'utf8').toString('latin1')
    total += ranks.has(bytes) ? 1 : mergedParts(bytes, ranks)
  }
  return total
}

/**
 * Parts left after byte-pair merging `bytes` (one char per byte): repeatedly merge the adjacent
 * pair whose concatenation has the lowest rank, the leftmost among equals, until none is a token.
 * Parts are a linked list over byte offsets; candidate pairs sit in a min-heap keyed by
 * rank × 2^32 + start offset (exact in a double), stale entries are skipped when popped.
 * Transient memory ≈ 37 bytes per byte of the piece (callers cap the text's size).
 */
export function mergedParts(bytes: string, ranks: Map<string, number>): number {
  const n = bytes.length
  if (n < 2) return n
  const next = new Int32Array(n) // start offset of the following part, n at the end
  const prev = new Int32Array(n) // start offset of the preceding part, -1 at the start
  const pairRank = new Int32Array(n) // rank of (part, next part), -1 if not a token
  const alive = new Uint8Array(n).fill(1)
  const heap = new Float64Array(3 * n) // n − 1 initial pairs, then at most 2 re-rated per merge
  let size = 0
  const push = (key: number): void => {
    let i = size++
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (heap[parent]! <= key) break
      heap[i] = heap[parent]!
      i = parent
    }
    heap[i] = key
  }
  const pop = (): number => {
    const top = heap[0]!
    const last = heap[--size]!
    let i = 0
    for (;;) {
      let child = 2 * i + 1
      if (child >= size) break
      if (child + 1 < size && heap[child + 1]! < heap[child]!) child++
      if (heap[child]! >= last) break
      heap[i] = heap[child]!
      i = child
    }
    heap[i] = last
    return top
  }
  const rate = (start: number): void => {
    const end = next[start]! < n ? next[next[start]!]! : -1
    const rank = end < 0 ? undefined : ranks.get(bytes.slice(start, end))
    pairRank[start] = rank ?? -1
    if (rank !== undefined) push(rank * 2 ** 32 + start)
  }
  for (let i = 0; i < n; i++) {
    next[i] = i + 1
    prev[i] = i - 1
  }
  for (let i = 0; i + 1 < n; i++) rate(i)
  let parts = n
  while (size > 0) {
    const key = pop()
    const start = key % 2 ** 32
    const rank = (key - start) / 2 ** 32
    if (alive[start] === 0 || pairRank[start] !== rank) continue // merged away or re-rated since
    const gone = next[start]!
    alive[gone] = 0
    next[start] = next[gone]!
    if (next[start]! < n) prev[next[start]!] = start
    parts--
    rate(start)
    if (prev[start]! >= 0) rate(prev[start]!)
  }
  return parts
}
