// Scheduler accounts (one per wallet or plan holder) and their API keys (stored as SHA-256 only):
// create, authenticate (Authorization: Bearer agk_…), list, revoke; the account view and the
// account ledger (the owner's escrow movements as grant / reversal / cost_finalize).
import type { Db } from '../platform/db/index.ts'
import { AppError } from '../platform/errors.ts'
import type { Clock } from '../platform/clock.ts'
import { ownerLedgerPage } from './escrow-store.ts'
import { newBearerSecret, secretHash } from './secrets.ts'
import { lower, newId } from './task-core.ts'
import { activeTaskCount } from './task-store.ts'
import type { TaskReads } from './task-reads.ts'

export function createAccounts(deps: { db: Db; clock: Clock; reads: TaskReads }) {
  const { db, clock } = deps

  async function accountOf(owner: string): Promise<{ id: string; created_at: Date; plan: string; status: string }> {
    const id = newId('acct')
    await db.query(`insert into scheduler_accounts (id, owner) values ($1, $2) on conflict (owner) do nothing`, [id, lower(owner)])
    return (
      await db.query<{ id: string; created_at: Date; plan: string; status: string }>(`select id, created_at, plan, status from scheduler_accounts where owner = $1`, [lower(owner)])
    )[0]!
  }

  async function createKey(owner: string) {
    const account = await accountOf(owner)
    const key = newBearerSecret('agk_')
    const id = newId('key')
    const now = clock.now()
    await db.query(`insert into scheduler_api_keys (id, account_id, prefix, key_hash, created_at) values ($1, $2, $3, $4, $5)`, [
      id,
      account.id,
      key.slice(0, 10),
      secretHash(key),
      now,
    ])
    return { id, key, prefix: key.slice(0, 10), account_id: account.id, created_at: now.toISOString() }
  }

  /** The account of an API key; throws API_KEY_INVALID. Records last_used_at. */
  async function accountForKey(bearer: string | undefined): Promise<{ id: string; owner: string }> {
    if (bearer === undefined) throw new AppError('API_KEY_INVALID', 'Send the account API key as Authorization: Bearer agk_…', { field: 'header.authorization' })
    const rows = await db.query<{ account_id: string; owner: string }>(
      `update scheduler_api_keys k set last_used_at = $2 from scheduler_accounts a
        where k.key_hash = $1 and k.revoked_at is null and a.id = k.account_id returning k.account_id, a.owner`,
      [secretHash(bearer), clock.now()],
    )
    const row = rows[0]
    if (row === undefined) throw new AppError('API_KEY_INVALID', 'The API key is unknown or revoked', { field: 'header.authorization' })
    return { id: row.account_id, owner: row.owner }
  }

  async function keysOf(accountId: string) {
    const rows = await db.query<{ id: string; prefix: string; created_at: Date; revoked_at: Date | null; last_used_at: Date | null }>(
      `select id, prefix, created_at, revoked_at, last_used_at from scheduler_api_keys where account_id = $1 order by created_at, id`,
      [accountId],
    )
    return rows.map((row) => ({
      id: row.id,
      prefix: row.prefix,
      created_at: row.created_at.toISOString(),
      revoked_at: row.revoked_at?.toISOString() ?? null,
      last_used_at: row.last_used_at?.toISOString() ?? null,
    }))
  }

  async function getAccount(account: { id: string; owner: string }) {
    const info = (await db.query<{ created_at: Date; plan: string; status: string }>(`select created_at, plan, status from scheduler_accounts where id = $1`, [account.id]))[0]!
    const usage = await deps.reads.ownerUsage(account.owner)
    const active = await activeTaskCount(db, account.owner)
    const now = clock.now()
    const start = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1))
    const end = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1))
    return {
      id: account.id,
      plan: info.plan,
      status: info.status,
      period: { start: start.toISOString(), end: end.toISOString() },
      credit_balance_micros: usage.totals.balance_micros,
      tasks_active: active,
      runs_lifetime: usage.totals.runs,
      keys: await keysOf(account.id),
    }
  }

  async function revokeKey(account: { id: string }, keyId: string) {
    const rows = await db.query<{ account_id: string; revoked_at: Date | null }>(`select account_id, revoked_at from scheduler_api_keys where id = $1`, [keyId])
    const key = rows[0]
    if (key === undefined || key.account_id !== account.id) throw new AppError('API_KEY_NOT_FOUND', `No key ${keyId} in this account`, { field: 'path.id' })
    const updated = await db.query<{ revoked_at: Date }>(`update scheduler_api_keys set revoked_at = coalesce(revoked_at, $2) where id = $1 returning revoked_at`, [
      keyId,
      clock.now(),
    ])
    return { id: keyId, revoked_at: updated[0]!.revoked_at.toISOString() }
  }

  /** Account ledger: the owner's escrow movements as grant / reversal / cost_finalize, newest first. */
  async function accountLedger(account: { owner: string }, query: { cursor?: string; limit?: number }) {
    const limit = query.limit ?? 20
    let before: bigint | undefined
    if (query.cursor !== undefined) {
      if (!/^\d{1,19}$/.test(query.cursor)) throw new AppError('VALIDATION_ERROR', 'cursor is not one this API issued', { field: 'query.cursor' })
      before = BigInt(query.cursor)
    }
    const rows = await ownerLedgerPage(db, account.owner, limit + 1, before)
    const kindOf = (kind: string) => (kind === 'charge' ? 'grant' : kind === 'run_cost' ? 'cost_finalize' : 'reversal')
    const page = rows.slice(0, limit)
    return {
      rows: page.map((row) => ({
        id: row.id.toString(),
        kind: kindOf(row.kind),
        amount_micros: row.amount_micros.toString(),
        task_id: row.task_id,
        run_id: row.run_id,
        created_at: row.created_at.toISOString(),
      })),
      next_cursor: rows.length > limit ? page[page.length - 1]!.id.toString() : null,
    }
  }

  return { createKey, accountForKey, keysOf, getAccount, revokeKey, accountLedger }
}

export type Accounts = ReturnType<typeof createAccounts>
