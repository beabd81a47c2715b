// The outcome of a payment, decided once, durably, in one place. The request path (right after
// its settlement) and the settlement reconciler (after a crash, a timeout or a pending receipt)
// both call decide(); it locks the reservation row, and the first caller with a final verdict
// writes the payments ledger row, moves the reservation and lets the domain that sold the work
// apply it (activate or reverse) in the same transaction. Any later caller gets that decision.
//
// The work a payment buys is bound to it in the work's own transaction (bind, see guard.ts):
// after that, the work exists exactly as long as its payment is not known to have failed.
import { Gauge, type Registry } from 'prom-client'
import type { Db, Queryable } from '../platform/db/index.ts'
import type { Logger } from '../platform/logger.ts'
import type { Protocol } from './types.ts'

/** What is known about a settlement. */
export type Verdict =
  | { status: 'settled'; reference: string }
  /** It can never settle (nothing moved, and nothing can move any more). */
  | { status: 'failed'; reason: string }
  /** Not known yet (receipt not seen, RPC down): decided later by the reconciler. */
  | { status: 'pending'; reference?: string | undefined }

export type Decision = { status: 'settled'; reference: string | null } | { status: 'failed'; reason: string } | { status: 'pending'; reference: string | null }

/**
 * Work a decision leaves for after its commit (on-chain refunds, resource writes). Best effort:
 * whatever a crash skips there, the owning domain's own sweep redoes from the database.
 */
export type AfterDecision = () => Promise<void>

/** A domain's side of the payments it sold (plans, task escrow, deposits, …). */
export interface OutcomeHandler {
  /** The payment settled: make its work permanent. Runs inside the decision's transaction. */
  settled(tx: Queryable, replayKey: string, reference: string | null): Promise<AfterDecision | undefined>
  /** The payment will never settle: take its work back. Runs inside the decision's transaction. */
  failed(tx: Queryable, replayKey: string): Promise<AfterDecision | undefined>
  /**
   * The payment had settled, but the chain dropped it and it can never land again (confirmations.ts):
   * take the work back as for a failed payment, and cancel what an unsent refund would return of it.
   */
  reversed(tx: Queryable, replayKey: string): Promise<AfterDecision | undefined>
  /** The settlement is confirmed on-chain: money may now leave against it (e.g. a closing escrow). */
  confirmed?(tx: Queryable, replayKey: string): Promise<AfterDecision | undefined>
}

export interface PaymentOutcomes {
  /** Registers the handler of the work kind `effect` (e.g. `plan.purchase`, `scheduler.charge`). */
  register(effect: string, handler: OutcomeHandler): void
  /** The effects this process can apply (the reconciler decides only those rows, plus effect-less ones). */
  effects(): string[]
  /** The handler of `effect` (undefined for effect-less payments); throws if this process has none. */
  handlerOf(effect: string | null): OutcomeHandler | undefined
  /**
   * Decides the payment `replayKey` with `verdict`, once. `source` names the caller in the ledger
   * (`settled` vs `reconciled_settled`). Returns the decision in force afterwards: the caller's
   * verdict, or the final one an earlier caller made.
   */
  decide(replayKey: string, verdict: Verdict, source: 'request' | 'reconciler'): Promise<Decision>
}

/** A payment_reservations row as decisions read it. */
export interface ReservationRow {
  [column: string]: unknown
  replay_key: string
  protocol: Protocol
  protocol_version: number
  payer: string
  amount_micros: bigint
  operation_id: string
  agent_id: string | null
  state: string
  reference: string | null
  effect: string | null
  detail: Record<string, unknown>
}

/** payments_ledger events: the decisions' and the chain-truth sweep's (confirmations.ts). */
export type LedgerEvent = 'settled' | 'pending' | 'failed' | 'reconciled_settled' | 'reconciled_failed' | 'reorged' | 'resettled' | 'reversed'

/** Appends one payments_ledger row about reservation `row` (a second settlement of one spend key is dropped). */
export async function appendPaymentEvent(
  q: Queryable,
  row: ReservationRow,
  event: LedgerEvent,
  reference: string | null,
  detail: Record<string, unknown> = row.detail,
): Promise<void> {
  await q.query(
    `insert into payments_ledger (protocol, protocol_version, event, replay_key, payer, payee, amount_micros, operation_id, agent_id, reference, detail)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
     on conflict (replay_key) where event in ('settled', 'reconciled_settled') do nothing`,
    [row.protocol, row.protocol_version, event, row.replay_key, row.payer, String(row.detail.payTo ?? ''), row.amount_micros, row.operation_id, row.agent_id, reference, detail],
  )
}

const LEDGER_EVENT = {
  request: { settled: 'settled', failed: 'failed', pending: 'pending' },
  reconciler: { settled: 'reconciled_settled', failed: 'reconciled_failed', pending: 'pending' },
} as const

export function createPaymentOutcomes(deps: {
  db: Db
  logger: Logger
  /** Told after the commit of every new settled decision (the confirmation sweep looks at it at once). */
  onSettled?: (replayKey: string) => void
}): PaymentOutcomes {
  const { db, logger } = deps
  const handlers = new Map<string, OutcomeHandler>()

  function handlerOf(effect: string | null): OutcomeHandler | undefined {
    if (effect === null) return undefined
    const handler = handlers.get(effect)
    // Deciding without the handler would settle money without its work (or the reverse).
    if (handler === undefined) throw new Error(`no outcome handler for "${effect}" in this process`)
    return handler
  }

  function finalOf(row: ReservationRow): Decision | undefined {
    // 'reorged' stays settled for the work until the confirmation sweep re-decides it.
    if (row.state === 'settled' || row.state === 'consumed' || row.state === 'reorged') return { status: 'settled', reference: row.reference }
    if (row.state === 'released') return { status: 'failed', reason: 'the payment did not settle' }
    if (row.state === 'reversed') return { status: 'failed', reason: 'the settlement was dropped by the chain and can no longer land' }
    return undefined
  }

  return {
    register(effect, handler) {
      if (handlers.has(effect)) throw new Error(`outcome handler "${effect}" registered twice`)
      handlers.set(effect, handler)
    },

    effects: () => [...handlers.keys()],
    handlerOf,

    async decide(replayKey, verdict, source) {
      let after: AfterDecision | undefined
      const decision = await db.transaction(async (tx): Promise<Decision> => {
        const row = (await tx.query<ReservationRow>(`select * from payment_reservations where replay_key = $1 for update`, [replayKey]))[0]
        if (row === undefined) throw new Error(`no reservation ${replayKey}`)
        const final = finalOf(row)
        if (final !== undefined) return final
        const handler = handlerOf(row.effect)
        const reference = verdict.status === 'failed' ? row.reference : verdict.reference || row.reference || null
        const event = LEDGER_EVENT[source][verdict.status]
        // A pending row is written once per reservation, not on every reconciler pass.
        if (verdict.status !== 'pending' || row.state !== 'pending') await appendPaymentEvent(tx, row, event, reference)
        if (verdict.status === 'pending') {
          await tx.query(`update payment_reservations set state = 'pending', reference = $2, updated_at = now() where replay_key = $1`, [replayKey, reference])
          return { status: 'pending', reference }
        }
        const state = verdict.status === 'settled' ? 'settled' : 'released'
        await tx.query(`update payment_reservations set state = $2, reference = $3, decided_at = now(), updated_at = now() where replay_key = $1`, [replayKey, state, reference])
        if (handler !== undefined) after = verdict.status === 'settled' ? await handler.settled(tx, replayKey, reference) : await handler.failed(tx, replayKey)
        return verdict.status === 'settled' ? { status: 'settled', reference } : { status: 'failed', reason: verdict.reason }
      })
      if (after) {
        await after().catch((error: unknown) => {
          logger.warn({ err: error, replayKey }, 'post-decision work failed; the owning sweep will redo it')
        })
      }
      if (decision.status === 'settled' && verdict.status === 'settled') deps.onSettled?.(replayKey)
      return decision
    },
  }
}

/** Open settlements by state, read at scrape time (a row stuck here is a payment whose work is provisional). */
export function registerPaymentMetrics(registry: Registry, db: Db): void {
  const states = ['reserved', 'settling', 'pending', 'unconfirmed', 'reorged'] as const
  new Gauge({
    name: 'agent_gateway_payments_open',
    help: 'Payments not final yet, by state: reserved (work running), settling (work bound, settlement under way), pending (broadcast, outcome unknown), unconfirmed (settled, not yet CHAIN_CONFIRMATIONS deep), reorged (settled, then dropped by the chain; being re-landed)',
    labelNames: ['state'],
    registers: [registry],
    async collect() {
      const rows = await db.query<{ state: string; n: bigint }>(
        `select case when state = 'settled' then 'unconfirmed' else state end as state, count(*)::int8 as n from payment_reservations
          where state in ('reserved', 'settling', 'pending', 'reorged') or (state = 'settled' and confirmed_at is null) group by 1`,
      )
      const counts = new Map(rows.map((row) => [row.state, Number(row.n)]))
      for (const state of states) this.set({ state }, counts.get(state) ?? 0)
    },
  })
  new Gauge({
    name: 'agent_gateway_settlements_unconfirmed_micros',
    help: 'USDC micros of settled payments the chain has not confirmed yet (no refund draws on them until it does)',
    registers: [registry],
    async collect() {
      const rows = await db.query<{ micros: bigint | null }>(
        `select sum(amount_micros)::int8 as micros from payment_reservations where state in ('settled', 'reorged') and confirmed_at is null`,
      )
      this.set(Number(rows[0]?.micros ?? 0n))
    },
  })
}

/** How long a settlement may stay undecided before /readyz mentions it. */
const STUCK_SETTLEMENT_MS = 10 * 60_000

/** /readyz detail: settlements undecided for long (their work stays provisional), or undefined. */
export async function stuckSettlements(db: Db): Promise<Record<string, unknown> | undefined> {
  const rows = await db.query<{ n: bigint; oldest: Date | null }>(
    `select count(*)::int8 as n, min(updated_at) as oldest from payment_reservations
      where (state in ('settling', 'pending', 'reorged') or (state = 'settled' and confirmed_at is null)) and updated_at < now() - make_interval(secs => $1)`,
    [STUCK_SETTLEMENT_MS / 1000],
  )
  const n = Number(rows[0]?.n ?? 0n)
  if (n === 0) return undefined
  return {
    stuck: n,
    since: rows[0]?.oldest?.toISOString() ?? null,
    detail:
      'Payments whose settlement is still not final after 10 minutes (chain RPC unreachable, or a settlement the chain dropped): the work they bought stays provisional, and no refund draws on them, until the reconciler or the confirmation sweep can decide them.',
  }
}
