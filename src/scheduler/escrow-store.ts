// A task's escrow in the database: the only code that knows how balance, payments still settling
// and ledger row kinds are stored, and how the reservations of runs in flight count against them.
// Each function is one operation over any Queryable (a transaction or the pool), so callers
// compose them in their own transaction. The arithmetic is the pure domain's (domain/escrow.ts);
// this file reads and appends.
//
// The escrow tables (ledger, charges, refunds) are this file's alone. Statements over the task
// and run tables are task-store.ts's and run-store.ts's, except the reads here that join them
// for the escrow's sake: a task's facts (runs in flight and their reservations), a plan holder's
// reservations, settled costs, an owner's totals and ledger pages.
//
// The balance rule, once: balance = SUM(ledger) without the marketplace's audit-only `usage` rows;
// available = balance - the ceilings held by runs in flight; payments still settling are separate
// (scheduler_charges, 'provisional') and never part of the balance.
import type { Queryable } from '../platform/db/index.ts'
import type { Micros } from '../platform/money.ts'
import { closeEscrow, summarize, type EscrowSummary, type LedgerEntry, type Reservation } from './domain/escrow.ts'
import { heldReservations, IN_FLIGHT_SQL } from './run-store.ts'
/** Ledger kinds that are money (the escrow's own rows); `usage` restates a marketplace run's cost and is left out. */
const MONEY_KINDS_SQL = `kind <> 'usage'`

/** A task's escrow as the state machine needs it. */
export interface EscrowFacts {
  summary: EscrowSummary
  /** A run of the task is claimed or running. */
  inFlight: boolean
  /** Direct-rail charges (create, top-ups) whose settlement is not known yet. */
  pending: Micros
  /** Settled charges (in the balance) whose settlement the chain has not confirmed yet. */
  unconfirmed: Micros
}

/** Facts of many tasks in one statement: ledger sums per kind, reservations, in-flight, settling. */
export async function escrowFactsMany(q: Queryable, taskIds: readonly string[]): Promise<Map<string, EscrowFacts>> {
  const rows = await q.query<{ id: string; sums: Record<string, string>; reserved: bigint; in_flight: boolean; pending: bigint; unconfirmed: bigint }>(
    `select t.id,
            (select coalesce(jsonb_object_agg(kind, total), '{}'::jsonb)
               from (select kind, sum(amount_micros)::text as total from scheduler_ledger where task_id = t.id and ${MONEY_KINDS_SQL} group by kind) k) as sums,
            (select coalesce(sum(reserved_micros), 0)::int8 from scheduler_runs where task_id = t.id and ${IN_FLIGHT_SQL}) as reserved,
            exists (select 1 from scheduler_runs where task_id = t.id and ${IN_FLIGHT_SQL}) as in_flight,
            (select coalesce(sum(amount_micros), 0)::int8 from scheduler_charges where task_id = t.id and state = 'provisional') as pending,
            (select coalesce(sum(amount_micros), 0)::int8 from scheduler_charges where task_id = t.id and state = 'settled' and confirmed_at is null) as unconfirmed
       from unnest($1::text[]) as t(id)`,
    [taskIds],
  )
  const out = new Map<string, EscrowFacts>()
  for (const row of rows) {
    const entries: LedgerEntry[] = []
    // In the order summarize() checks them: a closing row after every other.
    for (const kind of ['charge', 'reversal', 'run_cost', 'refund', 'dust_forfeit'] as const) {
      if (row.sums[kind] !== undefined) entries.push({ kind, amount_micros: BigInt(row.sums[kind]), run_id: null })
    }
    const reservations = row.reserved > 0n ? [{ run_id: 'reserved', amount_micros: row.reserved }] : []
    out.set(row.id, { summary: summarize(entries, reservations), inFlight: row.in_flight, pending: row.pending, unconfirmed: row.unconfirmed })
  }
  return out
}

export async function escrowFacts(q: Queryable, taskId: string): Promise<EscrowFacts> {
  return (await escrowFactsMany(q, [taskId])).get(taskId) as EscrowFacts
}

/** Every money row and open reservation of a task (closing the escrow, invariant checks). */
export async function escrowOf(q: Queryable, taskId: string): Promise<{ rows: LedgerEntry[]; reservations: Reservation[]; summary: EscrowSummary }> {
  const rows = (
    await q.query<{ kind: LedgerEntry['kind']; amount_micros: bigint; run_id: string | null }>(
      `select kind, amount_micros, run_id from scheduler_ledger where task_id = $1 and ${MONEY_KINDS_SQL} order by id`,
      [taskId],
    )
  ).map((row) => ({ kind: row.kind, amount_micros: row.amount_micros, run_id: row.run_id }))
  const reservations = (await heldReservations(q, taskId)).map((row) => ({ run_id: row.id, amount_micros: row.reserved_micros }))
  return { rows, reservations, summary: summarize(rows, reservations) }
}

/** Ceilings held by the runs in flight of a plan holder's marketplace tasks. */
export async function holderReserved(q: Queryable, owner: string): Promise<Micros> {
  const [row] = await q.query<{ reserved: bigint }>(
    `select coalesce(sum(r.reserved_micros), 0)::int8 as reserved from scheduler_runs r join scheduler_tasks t on t.id = r.task_id
      where t.owner = $1 and t.rail = 'marketplace' and r.${IN_FLIGHT_SQL}`,
    [owner],
  )
  return row?.reserved ?? 0n
}

// ------------------------------------------------------------------ appending

/** Money into the escrow: a settled payment (with its transaction) or, on the marketplace rail, the cap. */
export async function appendCharge(q: Queryable, taskId: string, amount: Micros, settlement?: { replayKey: string; txHash: string | null }): Promise<void> {
  await q.query(`insert into scheduler_ledger (task_id, kind, amount_micros, replay_key, tx_hash) values ($1, 'charge', $2, $3, $4)`, [
    taskId,
    amount,
    settlement?.replayKey ?? null,
    settlement?.txHash ?? null,
  ])
}

/** The run_cost rows of settled runs, in order, in one statement (a run is charged once: unique index). */
export async function appendRunCosts(q: Queryable, rows: readonly { task_id: string; amount: Micros; run_id: string }[]): Promise<void> {
  if (rows.length === 0) return
  await q.query(
    `insert into scheduler_ledger (task_id, kind, amount_micros, run_id) select l.task_id, 'run_cost', l.amount, l.run_id from unnest($1::text[], $2::int8[], $3::text[]) with ordinality as l(task_id, amount, run_id, ord) order by l.ord`,
    [rows.map((l) => l.task_id), rows.map((l) => l.amount), rows.map((l) => l.run_id)],
  )
}

/** The marketplace's audit-only restatement of a run's cost as reported on the meter (once per run). */
export async function appendUsage(q: Queryable, taskId: string, runId: string, cost: Micros, at: Date): Promise<void> {
  await q.query(
    `insert into scheduler_ledger (task_id, kind, amount_micros, run_id, created_at) values ($1, 'usage', $2, $3, $4) on conflict (run_id) where kind = 'usage' do nothing`,
    [taskId, -cost, runId, at],
  )
}

/**
 * Closes a terminal task's escrow (every run settled, nothing settling): the refund (direct rail,
 * at least minRefund) with its on-chain outbox row, or the dust forfeit; nothing on the
 * marketplace rail. The refund is the ledger balance, which holds only settled payments, so it
 * never exceeds what the task received on-chain. Returns the refund, if one is owed.
 */
export async function closeTaskEscrow(
  q: Queryable,
  task: { id: string; owner: string; rail: 'direct' | 'marketplace' },
  minRefundMicros: Micros,
): Promise<{ refund: Micros | undefined }> {
  const { rows, reservations } = await escrowOf(q, task.id)
  let refund: Micros | undefined
  for (const entry of closeEscrow(rows, reservations, { rail: task.rail, minRefundMicros })) {
    await q.query(`insert into scheduler_ledger (task_id, kind, amount_micros, run_id) values ($1, $2, $3, null)`, [task.id, entry.kind, entry.amount_micros])
    if (entry.kind === 'refund') {
      refund = -entry.amount_micros
      await q.query(`insert into scheduler_refunds (task_id, to_address, amount_micros, state) values ($1, $2, $3, 'pending') on conflict (task_id) do nothing`, [
        task.id,
        task.owner,
        refund,
      ])
    }
  }
  return { refund }
}

// ------------------------------------------------------------------ payments still settling

export type ProvisionalCharge = {
  task_id: string
  kind: 'create' | 'top_up'
  amount_micros: Micros
  funding_key: string | null
}

export async function addProvisionalCharge(q: Queryable, charge: ProvisionalCharge & { replayKey: string }): Promise<void> {
  await q.query(`insert into scheduler_charges (replay_key, task_id, kind, amount_micros, funding_key, state) values ($1, $2, $3, $4, $5, 'provisional')`, [
    charge.replayKey,
    charge.task_id,
    charge.kind,
    charge.amount_micros,
    charge.funding_key,
  ])
}

/** The provisional charge of a payment, locked; undefined once decided (or never recorded). */
export async function lockProvisionalCharge(q: Queryable, replayKey: string): Promise<ProvisionalCharge | undefined> {
  const row = (
    await q.query<ProvisionalCharge & { state: string }>(`select task_id, kind, amount_micros, funding_key, state from scheduler_charges where replay_key = $1 for update`, [
      replayKey,
    ])
  )[0]
  return row?.state === 'provisional' ? { task_id: row.task_id, kind: row.kind, amount_micros: row.amount_micros, funding_key: row.funding_key } : undefined
}

/** The settled charge's payment is confirmed on-chain: a closing escrow may now refund it. */
export async function confirmCharge(q: Queryable, replayKey: string, at: Date): Promise<string | undefined> {
  const rows = await q.query<{ task_id: string }>(
    `update scheduler_charges set confirmed_at = $2 where replay_key = $1 and state = 'settled' and confirmed_at is null returning task_id`,
    [replayKey, at],
  )
  return rows[0]?.task_id
}

/**
 * A settled charge whose payment the chain dropped for good: it leaves the escrow (as much of it
 * as is still available; what runs already spent of it is the service's loss). The escrow cannot
 * have closed on it: closing waits for its charges to be confirmed.
 */
export async function reverseSettledCharge(q: Queryable, replayKey: string, at: Date): Promise<ProvisionalCharge | undefined> {
  const charge = (
    await q.query<ProvisionalCharge & { state: string }>(`select task_id, kind, amount_micros, funding_key, state from scheduler_charges where replay_key = $1 for update`, [
      replayKey,
    ])
  )[0]
  if (charge === undefined || charge.state !== 'settled') return undefined
  await q.query(`update scheduler_charges set state = 'reversed', decided_at = $2 where replay_key = $1`, [replayKey, at])
  const { summary } = await escrowOf(q, charge.task_id)
  if (summary.closed) throw new Error(`the escrow of task ${charge.task_id} closed on an unconfirmed charge`)
  const available = summary.available_micros > 0n ? summary.available_micros : 0n
  const taken = charge.amount_micros < available ? charge.amount_micros : available
  if (taken > 0n) await q.query(`insert into scheduler_ledger (task_id, kind, amount_micros, run_id) values ($1, 'reversal', $2, null)`, [charge.task_id, -taken])
  return { task_id: charge.task_id, kind: charge.kind, amount_micros: charge.amount_micros, funding_key: charge.funding_key }
}

/** Settled charges of a task whose payments the chain has not confirmed yet. */
export async function unconfirmedChargeKeys(q: Queryable, taskId: string): Promise<string[]> {
  const rows = await q.query<{ replay_key: string }>(`select replay_key from scheduler_charges where task_id = $1 and state = 'settled' and confirmed_at is null`, [taskId])
  return rows.map((row) => row.replay_key)
}

/** The settled charges a task's refund returns (their payments must be confirmed before it is signed). */
export async function settledChargeKeys(q: Queryable, taskId: string): Promise<string[]> {
  const rows = await q.query<{ replay_key: string }>(`select replay_key from scheduler_charges where task_id = $1 and state = 'settled'`, [taskId])
  return rows.map((row) => row.replay_key)
}

/** Settled: the charge enters the ledger with its transaction; reversed: it never does. */
export async function decideProvisionalCharge(
  q: Queryable,
  replayKey: string,
  charge: ProvisionalCharge,
  outcome: { settled: true; txHash: string | null } | { settled: false },
  at: Date,
): Promise<void> {
  await q.query(`update scheduler_charges set state = $2, tx_hash = $3, decided_at = $4 where replay_key = $1`, [
    replayKey,
    outcome.settled ? 'settled' : 'reversed',
    outcome.settled ? outcome.txHash : null,
    at,
  ])
  if (outcome.settled) await appendCharge(q, charge.task_id, charge.amount_micros, { replayKey, txHash: outcome.txHash })
}

// ------------------------------------------------------------------ reads

/** A task's settled cost (its run_cost rows), as a select-list column of `scheduler_tasks t`. */
export const TASK_COST_SQL = `(select -coalesce(sum(amount_micros), 0) from scheduler_ledger l where l.task_id = t.id and l.kind = 'run_cost')::int8 as cost`

/** Settled cost of many tasks (undefined: no such task). */
export async function taskCosts(q: Queryable, taskIds: readonly string[]): Promise<(Micros | undefined)[]> {
  const rows = await q.query<{ id: string; cost: bigint | null }>(`select t.id, ${TASK_COST_SQL} from scheduler_tasks t where t.id = any($1::text[])`, [taskIds])
  const costs = new Map(rows.map((row) => [row.id, row.cost ?? 0n]))
  return taskIds.map((id) => costs.get(id))
}

/** A task's ledger rows for its owner, a refund row with its transfer once confirmed. */
export async function ledgerRows(q: Queryable, taskId: string) {
  return q.query<{ id: bigint; kind: string; amount_micros: bigint; run_id: string | null; tx_hash: string | null; refund_tx: string | null; created_at: Date }>(
    `select l.id, l.kind, l.amount_micros, l.run_id, l.tx_hash, r.tx_hash as refund_tx, l.created_at
       from scheduler_ledger l left join scheduler_refunds r on r.task_id = l.task_id and l.kind = 'refund' and r.state = 'confirmed'
      where l.task_id = $1 order by l.id`,
    [taskId],
  )
}

/** Per task of an owner: runs, settled cost, balance (money rows only) and what was refunded. */
export async function ownerTaskTotals(q: Queryable, owner: string) {
  return q.query<{ id: string; status: string; rail: string; runs: bigint; cost: bigint | null; balance: bigint | null; refunded: bigint | null }>(
    `select t.id, t.status, t.rail,
            (select count(*) from scheduler_runs r where r.task_id = t.id and r.status not in ('skipped')) as runs,
            ${TASK_COST_SQL},
            (select coalesce(sum(amount_micros), 0) from scheduler_ledger l where l.task_id = t.id and l.${MONEY_KINDS_SQL})::int8 as balance,
            (select -coalesce(sum(amount_micros), 0) from scheduler_ledger l where l.task_id = t.id and l.kind = 'refund')::int8 as refunded
       from scheduler_tasks t where t.owner = $1 order by t.created_at`,
    [owner],
  )
}

/** An owner's money rows across tasks, newest first, a page after `before` (row id). */
export async function ownerLedgerPage(q: Queryable, owner: string, limit: number, before?: bigint) {
  return q.query<{ id: bigint; kind: string; amount_micros: bigint; task_id: string; run_id: string | null; created_at: Date }>(
    `select l.id, l.kind, l.amount_micros, l.task_id, l.run_id, l.created_at from scheduler_ledger l join scheduler_tasks t on t.id = l.task_id
      where t.owner = $1 and l.${MONEY_KINDS_SQL} ${before === undefined ? '' : 'and l.id < $3'} order by l.id desc limit $2`,
    before === undefined ? [owner, limit] : [owner, limit, before],
  )
}

/** The sum a task's ledger view shows: money rows only (direct: the escrow; marketplace: the cap left). */
export function ledgerSum(rows: readonly { kind: string; amount_micros: Micros }[]): Micros {
  return rows.reduce((acc, row) => (row.kind === 'usage' ? acc : acc + row.amount_micros), 0n)
}
