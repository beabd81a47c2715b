// Per-owner data keys (DEKs): random, wrapped under a key-encryption key (KEK) in
// memory_owner_keys, unwrapped on demand and kept (derived, never raw) in a bounded in-process
// TTL LRU. Each row names the KEK that wrapped it (kek_version), so readers keep working while a
// rotation rewraps rows under another KEK, as long as the ring holds both.
import { randomBytes } from 'node:crypto'
import type { Queryable } from '../../platform/db/index.ts'
import type { KeyRing, OwnerId, OwnerKeys, OwnerKeyStore } from '../types.ts'
import { deriveOwnerKeys, KEY_BYTES, unwrapDek, wrapDek } from './envelope.ts'

export interface OwnerKeyStoreOptions {
  ring: KeyRing
  /** Owners whose derived keys are cached (default 10,000). */
  maxCached?: number
  /** How long a cached owner's keys live (default 10 minutes). */
  ttlMs?: number
  clock?: () => number
}

/** OwnerKeyStore, plus forgetting one owner (crypto-shredding an owner must drop its cached keys). */
export interface OwnerKeyCache extends OwnerKeyStore {
  forget(owner: OwnerId): void
  readonly size: number
}

type KeyRow = {
  dek_version: number
  kek_version: string
  wrapped_dek: Buffer
  /** Inserted by the caller's still-open transaction (created_at = now()): not cacheable yet. */
  own: boolean
}

/** The ring's key `id`; on a miss, reloads the ring once (a rotated Secret, a key just added). */
export async function kekOf(ring: KeyRing, id: string): Promise<Buffer> {
  let kek = ring.key(id)
  if (!kek) {
    await ring.reload()
    kek = ring.key(id)
  }
  if (!kek) throw new Error(`memory: key-encryption key "${id}" is not in the key ring (it holds ${ring.ids().join(', ')}); add it to the ring`)
  return kek
}

/**
 * The KEK new data keys are wrapped under: memory_kek_state.active_kek, which every replica
 * agrees on; on a database without it, the ring's active id, recorded (first writer wins).
 * The row is read FOR SHARE: inside a transaction that then wraps a new DEK, a concurrent
 * rotation's switch waits for that transaction, so no new row lands under the old KEK unseen.
 */
export async function activeKekId(q: Queryable, ring: KeyRing): Promise<string> {
  const read = async () => (await q.query<{ active_kek: string }>('select active_kek from memory_kek_state where singleton for share'))[0]?.active_kek
  const current = await read()
  if (current !== undefined) return current
  await q.query('insert into memory_kek_state (singleton, active_kek) values (true, $1) on conflict do nothing', [ring.activeId])
  const agreed = await read()
  if (agreed === undefined) throw new Error('memory: memory_kek_state is still empty after inserting it')
  return agreed
}

async function readKeyRow(q: Queryable, owner: OwnerId): Promise<KeyRow | undefined> {
  const rows = await q.query<KeyRow>(
    `select dek_version, kek_version, wrapped_dek, created_at = now() as own
       from memory_owner_keys where owner = $1 order by dek_version desc limit 1`,
    [owner],
  )
  return rows[0]
}

export function createOwnerKeyStore(options: OwnerKeyStoreOptions): OwnerKeyCache {
  const { ring } = options
  const maxCached = options.maxCached ?? 10_000
  const ttlMs = options.ttlMs ?? 10 * 60_000
  const clock = options.clock ?? Date.now
  if (!Number.isInteger(maxCached) || maxCached < 0) throw new Error(`memory: maxCached must be a non-negative integer, got ${maxCached}`)
  // Map iteration order is insertion order: re-inserting on a hit makes the first entry the LRU.
  const cache = new Map<OwnerId, { keys: OwnerKeys; expires: number }>()

  const cached = (owner: OwnerId): OwnerKeys | undefined => {
    const entry = cache.get(owner)
    if (!entry) return undefined
    cache.delete(owner)
    if (entry.expires <= clock()) return undefined
    cache.set(owner, entry)
    return entry.keys
  }

  const remember = (owner: OwnerId, keys: OwnerKeys): void => {
    if (maxCached === 0) return
    cache.delete(owner)
    cache.set(owner, { keys, expires: clock() + ttlMs })
    while (cache.size > maxCached) cache.delete(cache.keys().next().value as OwnerId)
  }

  const unwrap = async (owner: OwnerId, row: KeyRow): Promise<OwnerKeys> => {
    const kek = await kekOf(ring, row.kek_version)
    const dek = unwrapDek(kek, row.wrapped_dek, { owner, dekVersion: row.dek_version, kekId: row.kek_version })
    try {
      return deriveOwnerKeys(owner, row.dek_version, dek)
    } finally {
      dek.fill(0) // only the derived subkeys stay in memory
    }
  }

  const fromRow = async (owner: OwnerId, row: KeyRow): Promise<OwnerKeys> => {
    const keys = await unwrap(owner, row)
    // A row this transaction inserted may yet roll back: caching its key could encrypt later
    // records under a DEK the database never kept. It is cached once read after commit.
    if (!row.own) remember(owner, keys)
    return keys
  }

  return {
    async keysOf(q, owner, opts) {
      const hit = cached(owner)
      if (hit) return hit
      const row = await readKeyRow(q, owner)
      if (row) return fromRow(owner, row)
      if (!opts?.create) return undefined
      const kekId = await activeKekId(q, ring)
      const kek = await kekOf(ring, kekId)
      const dek = randomBytes(KEY_BYTES)
      const wrapped = wrapDek(kek, dek, { owner, dekVersion: 1, kekId })
      dek.fill(0)
      // Concurrent creators race on the primary key: the loser inserts nothing (after waiting for
      // the winner's commit) and both re-read the winner's row, so they agree on one key.
      await q.query(
        `insert into memory_owner_keys (owner, dek_version, kek_version, wrapped_dek)
         values ($1, 1, $2, $3) on conflict do nothing`,
        [owner, kekId, wrapped],
      )
      const agreed = await readKeyRow(q, owner)
      if (!agreed) throw new Error(`memory: the data key of ${owner} is missing right after inserting it`)
      return fromRow(owner, agreed)
    },
    clear() {
      cache.clear()
    },
    forget(owner) {
      cache.delete(owner)
    },
    get size() {
      return cache.size
    },
  }
}
