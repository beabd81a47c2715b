// Escrow arithmetic of one task on the direct rail, over its append-only ledger. Pure: callers
// load the rows and open reservations, call these, and append what comes back in the same
// transaction.
//
// Design:
// - Ledger rows are money movements only, signed from the escrow's point of view:
//     charge       +amount  create (max_amount_usdc_micros) and every top-up
//     run_cost     -cost    a finalised run's actual cost
//     refund       -rest    the remainder sent back on-chain when the task closes
//     dust_forfeit -rest    a remainder below rates.min_refund_micros, kept instead of refunded
//     reversal     -charge  a charge (create or top-up) whose payment did not settle after all
//   So SUM(amount) = funded - cumulative cost while the task lives (SPEC's "max_amount minus
//   cumulative cost", with top-ups counted in max_amount), and 0 once it is closed.
// - A reservation is not a ledger row (it moves no money): it is the per-run ceiling held by a
//   claimed/running run, stored with the run. available = balance - open reservations, and that
//   is what the state machine compares with the ceiling.
// - finalizeRun charges min(actual, reserved): the owner never pays above the ceiling that was
//   reserved; an overrun (a few seconds past the deadline, a late sibling settlement) is absorbed
//   by the service and reported as `absorbed_micros` for metrics. A failed run still pays what
//   it used.
// - closeEscrow needs every reservation finalised first; it refunds the balance, or forfeits it as
//   dust when below min_refund_micros; closing an already-closed escrow returns no rows.
// - Marketplace rail: the same numbers bound the seller-local lifetime cap (charge rows = cap,
//   run_cost = usage), but nothing is refundable, so closing appends nothing and the audit sum
//   stays at the unused cap.
import { AppError } from '../../platform/errors.ts'
import type { Micros } from '../../platform/money.ts'

export const LEDGER_ROW_KINDS = ['charge', 'run_cost', 'refund', 'dust_forfeit', 'reversal'] as const
export type LedgerRowKind = (typeof LEDGER_ROW_KINDS)[number]

/** A row to append (ids, timestamps and tx hashes are the adapter's). */
export interface LedgerEntry {
  readonly kind: LedgerRowKind
  /** Signed micros: positive into the escrow, negative out of it. */
  readonly amount_micros: Micros
  readonly run_id: string | null
}

export interface Reservation {
  readonly run_id: string
  readonly amount_micros: Micros
}

export interface EscrowSummary {
  /** SUM(charge): max_amount plus top-ups. */
  readonly funded_micros: Micros
  /** -SUM(run_cost). */
  readonly cumulative_cost_micros: Micros
  readonly refunded_micros: Micros
  readonly forfeited_micros: Micros
  /** SUM(amount) over all rows. */
  readonly balance_micros: Micros
  /** SUM of open reservations. */
  readonly reserved_micros: Micros
  /** balance - reserved: what the next run's ceiling is compared with. */
  readonly available_micros: Micros
  /** A refund or dust_forfeit row exists. */
  readonly closed: boolean
}

/** Thrown when stored rows break the ledger's own rules: a bug or tampering, never user input. */
export class LedgerCorruption extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'LedgerCorruption'
  }
}

function checkRow(row: LedgerEntry): void {
  const ok = row.kind === 'charge' ? row.amount_micros > 0n : row.amount_micros < 0n
  if (!ok) throw new LedgerCorruption(`${row.kind} row with amount ${row.amount_micros}`)
}

/** Totals of a ledger; throws LedgerCorruption if the rows can't be a real history. */
export function summarize(rows: readonly LedgerEntry[], reservations: readonly Reservation[] = []): EscrowSummary {
  let funded = 0n
  let cost = 0n
  let refunded = 0n
  let forfeited = 0n
  let closed = false
  for (const row of rows) {
    checkRow(row)
    if (closed) throw new LedgerCorruption(`${row.kind} row after the escrow was closed`)
    switch (row.kind) {
      case 'charge':
        funded += row.amount_micros
        break
      case 'run_cost':
        cost -= row.amount_micros
        break
      case 'refund':
        refunded -= row.amount_micros
        closed = true
        break
      case 'dust_forfeit':
        forfeited -= row.amount_micros
        closed = true
        break
      case 'reversal':
        // A charge whose payment did not settle never became money: it leaves "funded".
        funded += row.amount_micros
        break
    }
    if (funded - cost - refunded - forfeited < 0n) throw new LedgerCorruption('the ledger went negative')
  }
  let reserved = 0n
  for (const r of reservations) {
    if (r.amount_micros < 0n) throw new LedgerCorruption(`negative reservation for run ${r.run_id}`)
    reserved += r.amount_micros
  }
  const balance = funded - cost - refunded - forfeited
  if (closed && balance !== 0n) throw new LedgerCorruption('a closed escrow does not sum to 0')
  return {
    funded_micros: funded,
    cumulative_cost_micros: cost,
    refunded_micros: refunded,
    forfeited_micros: forfeited,
    balance_micros: balance,
    reserved_micros: reserved,
    available_micros: balance - reserved,
    closed,
  }
}

/** The row for the create payment or a top-up. */
export function chargeEntry(amount: Micros): LedgerEntry {
  if (amount <= 0n) throw new AppError('INSUFFICIENT_FUND_AMOUNT', 'A charge must be a positive number of micros', { field: 'body.top_up_amount_micros' })
  return { kind: 'charge', amount_micros: amount, run_id: null }
}

/** Appends a charge, refusing a closed escrow. */
export function fund(rows: readonly LedgerEntry[], amount: Micros): LedgerEntry[] {
  if (summarize(rows).closed) throw new AppError('TASK_DELETED', 'The escrow of this task is closed')
  return [chargeEntry(amount)]
}

/**
 * Holds `ceiling` of the available escrow for one run. Throws TASK_PAUSED_INSUFFICIENT_FUNDS when
 * available < ceiling (the state machine pauses before this is reached in normal operation).
 */
export function reserveForRun(rows: readonly LedgerEntry[], reservations: readonly Reservation[], runId: string, ceiling: Micros): Reservation {
  if (ceiling < 0n) throw new RangeError('ceiling must not be negative')
  if (reservations.some((r) => r.run_id === runId)) throw new LedgerCorruption(`run ${runId} already holds a reservation`)
  const summary = summarize(rows, reservations)
  if (summary.closed) throw new AppError('TASK_DELETED', 'The escrow of this task is closed')
  if (summary.available_micros < ceiling) {
    const gap = ceiling - summary.available_micros
    throw new AppError('TASK_PAUSED_INSUFFICIENT_FUNDS', `Available escrow is ${gap} micros short of the per-run ceiling`, {
      extensions: { shortfall_micros: gap.toString(), ceiling_micros: ceiling.toString() },
    })
  }
  return { run_id: runId, amount_micros: ceiling }
}

export interface Finalized {
  /** Rows to append (none for a free run). */
  readonly rows: LedgerEntry[]
  readonly charged_micros: Micros
  /** Cost above the reservation, absorbed by the service. */
  readonly absorbed_micros: Micros
  /** The reservation is released: drop it from the open set. */
  readonly released: Reservation
}

/** Settles one run: charges min(actual, reserved) and releases the reservation. */
export function finalizeRun(reservation: Reservation, actualCost: Micros): Finalized {
  if (actualCost < 0n) throw new RangeError('actual cost must not be negative')
  const charged = actualCost < reservation.amount_micros ? actualCost : reservation.amount_micros
  return {
    rows: charged > 0n ? [{ kind: 'run_cost', amount_micros: -charged, run_id: reservation.run_id }] : [],
    charged_micros: charged,
    absorbed_micros: actualCost - charged,
    released: reservation,
  }
}

/**
 * Rows that close the escrow of a terminal task: refund the balance (direct rail, at least
 * minRefund), or forfeit it as dust. Throws while a run still holds a reservation.
 */
export function closeEscrow(
  rows: readonly LedgerEntry[],
  reservations: readonly Reservation[],
  options: { readonly rail: 'direct' | 'marketplace'; readonly minRefundMicros: Micros },
): LedgerEntry[] {
  const summary = summarize(rows, reservations)
  if (summary.reserved_micros > 0n || reservations.length > 0) {
    throw new LedgerCorruption('close the escrow only after every in-flight run is finalised')
  }
  if (options.rail === 'marketplace' || summary.closed || summary.balance_micros === 0n) return []
  const kind: LedgerRowKind = summary.balance_micros >= options.minRefundMicros ? 'refund' : 'dust_forfeit'
  return [{ kind, amount_micros: -summary.balance_micros, run_id: null }]
}

/**
 * The ledger invariant of SPEC "Ledger row" (direct rail): SUM(amount) = funded - cumulative
 * cost while open, 0 once closed, never negative, reservations within the balance. Returns the
 * reasons it fails (empty when it holds).
 */
export function invariantViolations(rows: readonly LedgerEntry[], reservations: readonly Reservation[] = []): string[] {
  let summary: EscrowSummary
  try {
    summary = summarize(rows, reservations)
  } catch (error) {
    return [(error as Error).message]
  }
  const problems: string[] = []
  const sum = rows.reduce((acc, row) => acc + row.amount_micros, 0n)
  if (sum !== summary.balance_micros) problems.push('sum differs from balance')
  if (!summary.closed && sum !== summary.funded_micros - summary.cumulative_cost_micros) problems.push('open: sum != funded - cumulative cost')
  if (summary.closed && sum !== 0n) problems.push('closed: sum != 0')
  if (summary.funded_micros !== summary.cumulative_cost_micros + summary.refunded_micros + summary.forfeited_micros + summary.balance_micros) {
    problems.push('funded != cost + refunded + forfeited + balance')
  }
  if (summary.available_micros < 0n) problems.push('reservations exceed the balance')
  return problems
}
