// One owner's recall index, in process: BM25 over the blind terms and cosine over the vectors,
// fused by reciprocal rank. Records are held by position (the order they were added, which is
// seq order), in typed arrays; the only per-record objects are the id strings.
// Filters (a context MAC, tag MACs that must all be present) become one byte per position,
// applied inside both searches, so a selective filter still returns its full FUSION_DEPTH.
import { FUSION_DEPTH } from '../limits.ts'
import type { IndexedRecord, OwnerIndex, RecallHit, RecallQuery } from '../types.ts'
import { Bm25Index } from './bm25.ts'
import { reciprocalRankFusion } from './fusion.ts'
import { VectorStore } from './vectors.ts'

export function createOwnerIndex(dims: number): OwnerIndex {
  return new RecallIndex(dims)
}

class RecallIndex implements OwnerIndex {
  readonly dims: number
  #size = 0
  #maxSeq = 0
  readonly #ids: string[] = []
  /** Approximate heap bytes of #ids, kept as they are added (bytes() is asked on every recall). */
  #idBytes = 0
  #seqs = new Float64Array(64)
  readonly #lexical = new Bm25Index()
  readonly #vectors: VectorStore
  // Record position ↔ vector position (records without a vector have none).
  #vectorOf = new Int32Array(64)
  #recordOfVector = new Int32Array(64)
  // Context: interned MAC id per position (−1 = none). Tags: positions per tag MAC, ascending.
  readonly #contextIds = new Map<string, number>()
  #contextOf = new Int32Array(64)
  readonly #tagPositions = new Map<string, { positions: Int32Array; length: number }>()
  #tagBytes = 0

  constructor(dims: number) {
    this.dims = dims
    this.#vectors = new VectorStore(dims)
  }

  get size(): number {
    return this.#size
  }

  get maxSeq(): number {
    return this.#maxSeq
  }

  /** Records with seq ≤ maxSeq are already held and skipped (a reload racing a write adds them twice). */
  add(records: IndexedRecord[]): void {
    // Validate the whole batch first: a bad record leaves the index as it was.
    let last = this.#maxSeq
    for (const record of records) {
      if (!Number.isSafeInteger(record.seq)) throw new RangeError(`record ${record.id}: seq must be a safe integer, got ${record.seq}`)
      if (record.seq <= last) continue
      if (record.vector !== null && record.vector.length !== this.dims) {
        throw new RangeError(`record ${record.id}: vector has ${record.vector.length} dimensions, the index ${this.dims}`)
      }
      last = record.seq
    }
    for (const record of records) {
      if (record.seq <= this.#maxSeq) continue
      this.#append(record)
    }
  }

  #append(record: IndexedRecord): void {
    const position = this.#size++
    if (position === this.#seqs.length) {
      this.#seqs = grow(this.#seqs, position * 2)
      this.#vectorOf = grow(this.#vectorOf, position * 2)
      this.#contextOf = grow(this.#contextOf, position * 2)
    }
    this.#ids.push(record.id)
    this.#idBytes += 40 + record.id.length * 2 // string header + UTF-16 payload + the array slot (approx.)
    this.#seqs[position] = record.seq
    this.#maxSeq = record.seq
    this.#lexical.add(record.blind)
    if (record.vector !== null) {
      const vectorPosition = this.#vectors.add(record.vector)
      if (vectorPosition === this.#recordOfVector.length) this.#recordOfVector = grow(this.#recordOfVector, vectorPosition * 2)
      this.#recordOfVector[vectorPosition] = position
      this.#vectorOf[position] = vectorPosition
    } else {
      this.#vectorOf[position] = -1
    }
    let contextId = -1
    if (record.context !== null) {
      contextId = this.#contextIds.get(record.context) ?? this.#contextIds.size
      if (contextId === this.#contextIds.size) this.#contextIds.set(record.context, contextId)
    }
    this.#contextOf[position] = contextId
    for (const tag of new Set(record.tags)) {
      let entry = this.#tagPositions.get(tag)
      if (entry === undefined) {
        this.#tagPositions.set(tag, (entry = { positions: new Int32Array(4), length: 0 }))
        this.#tagBytes += 128 + tag.length * 2
      }
      if (entry.length === entry.positions.length) {
        this.#tagBytes += entry.positions.byteLength
        entry.positions = grow(entry.positions, entry.length * 2)
      }
      entry.positions[entry.length++] = position
    }
  }

  search(query: RecallQuery): RecallHit[] {
    const limit = Math.floor(query.limit)
    if (!(limit > 0) || this.#size === 0) return []
    const allowed = this.#filter(query)
    if (allowed === 'none') return []
    const lexical = this.#lexical.search(query.terms, FUSION_DEPTH, allowed).positions
    let vector: Int32Array = new Int32Array(0)
    if (query.vector !== null && query.vector.length === this.dims && this.#vectors.size > 0) {
      let vectorAllowed: Uint8Array | null = null
      if (allowed !== null) {
        vectorAllowed = new Uint8Array(this.#vectors.size)
        for (let v = 0; v < vectorAllowed.length; v++) vectorAllowed[v] = allowed[this.#recordOfVector[v]!]!
      }
      vector = this.#vectors.search(query.vector, FUSION_DEPTH, { allowed: vectorAllowed }).positions
      for (let i = 0; i < vector.length; i++) vector[i] = this.#recordOfVector[vector[i]!]!
    }
    const fused = reciprocalRankFusion([lexical, vector], { depth: FUSION_DEPTH })
    // Positions follow seq, and fusion already breaks score ties by position; the id order is
    // for equal seqs, which add() never admits, kept so the rule holds whatever the input.
    fused.sort((a, b) => b.score - a.score || this.#seqs[b.position]! - this.#seqs[a.position]! || compare(this.#ids[a.position]!, this.#ids[b.position]!))
    const hits: RecallHit[] = []
    for (let i = 0; i < fused.length && hits.length < limit; i++) {
      const entry = fused[i]!
      hits.push({ id: this.#ids[entry.position]!, score: entry.score, lexicalRank: entry.ranks[0] ?? null, vectorRank: entry.ranks[1] ?? null })
    }
    return hits
  }

  // One byte per position (1 = passes the filters), null without filters, 'none' when nothing can
  // pass (an unknown context or tag MAC).
  #filter(query: RecallQuery): Uint8Array | null | 'none' {
    const tags = [...new Set(query.tags ?? [])]
    if (query.context === undefined && tags.length === 0) return null
    const n = this.#size
    const allowed = new Uint8Array(n)
    if (query.context !== undefined) {
      const contextId = this.#contextIds.get(query.context)
      if (contextId === undefined) return 'none'
      for (let i = 0; i < n; i++) allowed[i] = this.#contextOf[i] === contextId ? 1 : 0
    } else {
      allowed.fill(1)
    }
    if (tags.length === 0) return allowed
    // Count the query's tags each position carries; it passes with all of them.
    const entries = tags.map((tag) => this.#tagPositions.get(tag))
    if (entries.some((entry) => entry === undefined)) return 'none'
    const counts = new Uint32Array(n)
    for (const entry of entries) for (let i = 0; i < entry!.length; i++) counts[entry!.positions[i]!]!++
    for (let i = 0; i < n; i++) if (counts[i] !== tags.length) allowed[i] = 0
    return allowed
  }

  bytes(): number {
    return (
      this.#idBytes +
      this.#seqs.byteLength +
      this.#vectorOf.byteLength +
      this.#recordOfVector.byteLength +
      this.#contextOf.byteLength +
      this.#contextIds.size * 100 +
      this.#tagBytes +
      this.#lexical.bytes() +
      this.#vectors.bytes()
    )
  }
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0
}

function grow<T extends Int32Array | Float64Array>(array: T, length: number): T {
  const bigger = new (array.constructor as new (length: number) => T)(Math.max(length, 4))
  bigger.set(array)
  return bigger
}
