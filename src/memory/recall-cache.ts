// Decrypted recall indexes, one per owner, in process memory only (never Redis, never disk),
// bounded by bytes: the least recently used owners are dropped first. Coherent across replicas
// without messages: records are immutable and each visible one has a per-owner seq given in
// commit order (store.ts nextSeq under the owner lock), so a recall asks the database for the
// owner's version (one indexed read) and loads only `seq > what it holds`.
import type { Db } from '../platform/db/index.ts'
import type { Logger } from '../platform/logger.ts'
import type { Embedder, OwnerId, OwnerIndex, OwnerKeys } from './types.ts'
import { createOwnerIndex } from './search/owner-index.ts'
import { indexedRecordOf } from './records.ts'
import { indexRowsAfter, ownerVersion } from './store.ts'

const PAGE = 2_000

export interface RecallCache {
  /** The owner's index, current as of this call (undefined: the owner has no records). */
  indexOf(owner: OwnerId, keys: OwnerKeys): Promise<OwnerIndex | undefined>
  /** The owner's index as held, without asking the database (a recall checks the version with its content read). */
  peek(owner: OwnerId): OwnerIndex | undefined
  /** Bytes held and owners cached (metrics). */
  stats(): { bytes: number; owners: number }
  clear(): void
}

export function createRecallCache(deps: { db: Db; embedder: Embedder; maxBytes: number; logger: Logger }): RecallCache {
  const { db, embedder } = deps
  // Map order is recency order: a hit is re-inserted at the end. Each entry keeps the bytes it was
  // counted at, so a hit costs no recount (counting walks the index).
  const entries = new Map<OwnerId, { index: OwnerIndex; bytes: number }>()
  const loading = new Map<OwnerId, Promise<OwnerIndex | undefined>>()
  let bytes = 0

  function touch(owner: OwnerId, index: OwnerIndex, counted: number): void {
    const before = entries.get(owner)?.bytes ?? 0
    entries.delete(owner)
    entries.set(owner, { index, bytes: counted })
    bytes += counted - before
    for (const [other, held] of entries) {
      if (bytes <= deps.maxBytes || other === owner) break
      entries.delete(other)
      bytes -= held.bytes
    }
  }

  async function refresh(owner: OwnerId, keys: OwnerKeys): Promise<OwnerIndex | undefined> {
    const version = await ownerVersion(db, owner)
    const held = entries.get(owner)
    if (version === undefined || version === 0n) return held?.index
    if (held !== undefined && BigInt(held.index.maxSeq) >= version) {
      touch(owner, held.index, held.bytes)
      return held.index
    }
    const index = held?.index ?? createOwnerIndex(embedder.dims)
    for (;;) {
      const rows = await indexRowsAfter(db, owner, index.maxSeq, PAGE)
      if (rows.length === 0) break
      index.add(rows.map((row) => indexedRecordOf(keys, row, embedder.id, embedder.dims)))
      if (rows.length < PAGE || BigInt(index.maxSeq) >= version) break
    }
    touch(owner, index, index.bytes())
    return index
  }

  return {
    indexOf(owner, keys) {
      // Refreshes of one owner run one after another (never two loads of the same rows); each
      // call still checks the version itself, so a write that committed before this call is seen
      // even when a refresh that started earlier was running.
      const previous = loading.get(owner) ?? Promise.resolve(undefined)
      const promise = previous.catch(() => undefined).then(() => refresh(owner, keys))
      loading.set(owner, promise)
      void promise
        .finally(() => {
          if (loading.get(owner) === promise) loading.delete(owner)
        })
        .catch(() => {})
      return promise
    },
    peek(owner) {
      const held = entries.get(owner)
      if (held !== undefined) touch(owner, held.index, held.bytes)
      return held?.index
    },
    stats: () => ({ bytes, owners: entries.size }),
    clear() {
      entries.clear()
      bytes = 0
    },
  }
}
