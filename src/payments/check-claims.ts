// Every replica runs the settlement reconciler and the confirmation sweep over the one
// payment_reservations table. Without a claim, each of them re-broadcast the same lost or
// undecided authorization at the same moment (after an RPC node came back, one landed and the
// others were refused: "authorization is used"). A pass claims the rows it will ask the chain
// about (checking_until, migration 0015), skipping those another pass holds, and releases them when
// it ends; a claim of a process that died lapses after CHECK_CLAIM_MS, or at once when a start
// knows every earlier process died (PGlite under its data-dir lock: releaseOrphanedClaims).
import type { Queryable } from '../platform/db/index.ts'

/**
 * Long enough for a pass over a batch while the RPC node answers slowly (a longer pass may meet
 * another replica's on its last rows: no harm, only the duplicate work the claim saves).
 */
export const CHECK_CLAIM_MS = 30_000

export interface ClaimedRows<Row> {
  rows: Row[]
  /** Frees the rows for the next pass of any process. Never throws. */
  release(): Promise<void>
}

/**
 * Claims up to `limit` reservations matching `where` (over `params`), oldest `updated_at` first,
 * none held by another pass; returns `columns` of each, oldest first. `updated_at` is untouched.
 */
export async function claimForCheck<Row extends { replay_key: string; updated_at: Date }>(
  db: Queryable,
  options: { columns: string; where: string; params: unknown[]; limit: number },
): Promise<ClaimedRows<Row>> {
  const rows = await db.query<Row>(
    `with picked as (
       select replay_key as picked_key from payment_reservations
        where (${options.where}) and (checking_until is null or checking_until < now())
        order by updated_at limit ${Math.trunc(options.limit)}
        for update skip locked)
     update payment_reservations set checking_until = now() + make_interval(secs => $${options.params.length + 1})
       from picked where replay_key = picked.picked_key
     returning ${options.columns}`,
    [...options.params, CHECK_CLAIM_MS / 1000],
  )
  rows.sort((a, b) => new Date(a.updated_at).getTime() - new Date(b.updated_at).getTime())
  const keys = rows.map((row) => row.replay_key)
  return {
    rows,
    async release() {
      if (keys.length === 0) return
      await db.query(`update payment_reservations set checking_until = null where replay_key = any($1::text[])`, [keys]).catch(() => undefined)
    },
  }
}

/** Frees the claims made before `orphanedBefore`, the instant every earlier process was known dead. */
export async function releaseOrphanedClaims(db: Queryable, orphanedBefore: Date): Promise<void> {
  await db.query(`update payment_reservations set checking_until = null where checking_until is not null and checking_until < $1::timestamptz + make_interval(secs => $2)`, [
    orphanedBefore,
    CHECK_CLAIM_MS / 1000,
  ])
}
