// KEK rotation: make the new key-encryption key active (new data keys use it at once), then
// rewrap every memory_owner_keys row still under another KEK, in batches. Data keys do not
// change, so no record is re-encrypted; readers unwrap each row by its own kek_version, so
// nothing stops while it runs (the ring must hold the old and the new KEK meanwhile). Each batch
// commits on its own: a stopped rotation resumes where it was, and concurrent runs to the same
// KEK share the work (FOR UPDATE SKIP LOCKED); a run superseded by a rotation to another KEK stops.
import type { Db } from '../../platform/db/index.ts'
import type { KeyRing } from '../types.ts'
import { unwrapDek, wrapDek } from './envelope.ts'
import { KEK_ID_RE } from './keyring.ts'
import { kekOf } from './owner-keys.ts'

export interface RotateKekOptions {
  db: Db
  ring: KeyRing
  toKekId: string
  /** Rows rewrapped per transaction (default 100). */
  batchSize?: number
  /** After each committed batch: rows rewrapped so far by this run. */
  onProgress?: (progress: { rewrapped: number; batch: number }) => void | Promise<void>
}

export interface RotateKekResult {
  /** Rows this run rewrapped. */
  rewrapped: number
  /** Rows already under the new KEK that this run did not touch (earlier runs, new owners). */
  alreadyCurrent: number
}

type KeyRow = {
  owner: string
  dek_version: number
  kek_version: string
  wrapped_dek: Buffer
}

/**
 * Before switching anything: one row per KEK in use must unwrap with this ring, so a ring that
 * lacks an old key (or holds other bytes under its id) stops here, not after the switch.
 */
async function preflight(db: Db, ring: KeyRing, toKekId: string): Promise<void> {
  const samples = await db.query<KeyRow>(
    `select distinct on (kek_version) owner, dek_version, kek_version, wrapped_dek
       from memory_owner_keys where kek_version <> $1 order by kek_version, owner, dek_version`,
    [toKekId],
  )
  for (const row of samples) {
    const kek = await kekOf(ring, row.kek_version)
    unwrapDek(kek, row.wrapped_dek, { owner: row.owner, dekVersion: row.dek_version, kekId: row.kek_version }).fill(0)
  }
}

export async function rotateKek(options: RotateKekOptions): Promise<RotateKekResult> {
  const { db, ring, toKekId } = options
  const batchSize = options.batchSize ?? 100
  if (!Number.isInteger(batchSize) || batchSize < 1) throw new Error(`memory: batchSize must be a positive integer, got ${batchSize}`)
  if (!KEK_ID_RE.test(toKekId)) throw new Error('memory: the target KEK id must be 1-64 characters of [A-Za-z0-9_.-]')
  if (!ring.key(toKekId)) await ring.reload()
  if (!ring.key(toKekId)) throw new Error(`memory: cannot rotate to key-encryption key "${toKekId}": the key ring holds only ${ring.ids().join(', ')}`)

  await preflight(db, ring, toKekId)
  // First, so every data key created from now on is wrapped under the new KEK. The update waits
  // for transactions that read the old active KEK FOR SHARE (activeKekId) and may still insert.
  await db.query(
    `insert into memory_kek_state (singleton, active_kek) values (true, $1)
     on conflict (singleton) do update set active_kek = excluded.active_kek, rotated_at = now()
       where memory_kek_state.active_kek <> excluded.active_kek`,
    [toKekId],
  )

  let rewrapped = 0
  for (;;) {
    const batch = await db.transaction(async (tx) => {
      const state = await tx.query<{ active_kek: string }>('select active_kek from memory_kek_state where singleton for share')
      const active = state[0]?.active_kek
      if (active !== toKekId) throw new Error(`memory: rotation to "${toKekId}" superseded: the active key-encryption key is now "${active}"`)
      const rows = await tx.query<KeyRow>(
        `select owner, dek_version, kek_version, wrapped_dek from memory_owner_keys
          where kek_version <> $1 order by owner, dek_version limit $2 for update skip locked`,
        [toKekId, batchSize],
      )
      const newKek = await kekOf(ring, toKekId)
      for (const row of rows) {
        const oldKek = await kekOf(ring, row.kek_version)
        const dek = unwrapDek(oldKek, row.wrapped_dek, { owner: row.owner, dekVersion: row.dek_version, kekId: row.kek_version })
        const wrapped = wrapDek(newKek, dek, { owner: row.owner, dekVersion: row.dek_version, kekId: toKekId })
        dek.fill(0)
        await tx.query(
          `update memory_owner_keys set wrapped_dek = $3, kek_version = $4, rewrapped_at = now()
            where owner = $1 and dek_version = $2 and kek_version = $5`,
          [row.owner, row.dek_version, wrapped, toKekId, row.kek_version],
        )
      }
      return rows.length
    })
    if (batch === 0) break
    rewrapped += batch
    await options.onProgress?.({ rewrapped, batch })
  }

  const [current] = await db.query<{ n: bigint }>('select count(*) as n from memory_owner_keys where kek_version = $1', [toKekId])
  return { rewrapped, alreadyCurrent: Math.max(0, Number(current?.n ?? 0n) - rewrapped) }
}
