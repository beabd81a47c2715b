// The chain is the truth about money, the database its copy. A settlement recorded as 'settled'
// is provisional until the chain confirms it (CHAIN_CONFIRMATIONS blocks deep; on the dev chain,
// also saved to disk): its work may run, but no refund or withdrawal draws on it. This sweep asks
// the chain about every settlement not confirmed yet and moves it on, once, in a transaction that
// locks its reservation:
//
//   settled ──(deep enough)──────────────────────────────→ confirmed (confirmed_at, block)
//      │
//      └─(no longer on the chain)→ reorged ─(re-broadcast lands)→ settled (ledger: resettled)
//                                     └──(can never land)──────→ reversed (ledger: reversed;
//                                                                  the work is taken back)
//
// Every move is a payments_ledger row (reorged, resettled, reversed), so the ledger stays
// append-only and tells the whole story. It runs at start, on the reconcile loop, right after each
// new settlement, and whenever a refund asks about the settlements it would return.
import type { Db } from '../platform/db/index.ts'
import type { Logger } from '../platform/logger.ts'
import { claimForCheck } from './check-claims.ts'
import { appendPaymentEvent, type AfterDecision, type PaymentOutcomes, type ReservationRow } from './outcomes.ts'
import type { Protocol } from './types.ts'

/** What the chain says about one recorded settlement. */
export type ChainTruth =
  /** On the chain and final. */
  | { status: 'confirmed'; reference: string; blockNumber: bigint | null }
  /** On the chain, not deep enough yet. */
  | { status: 'included'; reference: string; blockNumber: bigint | null }
  /** Not on the chain (any more); `reference`: the transaction that re-broadcast it, if one was sent. */
  | { status: 'missing'; reference?: string | undefined }
  /** It can never land (the authorization expired unused): the work is reversed. */
  | { status: 'dead'; reason: string }
  /** The chain cannot tell yet (RPC down): asked again on the next pass. */
  | { status: 'unknown' }

export interface RecordedSettlement {
  replayKey: string
  state: 'settled' | 'reorged'
  reference: string | null
  detail: Record<string, unknown>
}

/** Reads one protocol's chain for a recorded settlement (and re-broadcasts one it lost, if it can). */
export type ChainTruthReader = (row: RecordedSettlement) => Promise<ChainTruth>

export interface SettlementConfirmations {
  /** Asks the chain about these settlements (or every unconfirmed one, oldest first); returns how many moved. */
  sweep(replayKeys?: readonly string[]): Promise<number>
  /**
   * Checks this settlement soon, in one pass with every other asked for meanwhile (a busy seller
   * records many a second: one pass, and on the dev chain one save, covers them all). Never throws.
   */
  soon(replayKey: string): void
}

type Row = ReservationRow & RecordedSettlement
/** A row as a pass reads it: with its updated_at, the order passes take rows in. */
type SweptRow = Row & { updated_at: Date }

/** Rows one pass looks at, at most. */
const BATCH = 200

export function createSettlementConfirmations(deps: {
  db: Db
  outcomes: PaymentOutcomes
  readers: Partial<Record<Protocol, ChainTruthReader>>
  logger: Logger
}): SettlementConfirmations {
  const { db, outcomes, readers, logger } = deps
  let passes: Promise<unknown> = Promise.resolve()

  /** Applies what the chain said, if the row is still as it was read; returns whether it moved. */
  async function apply(seen: Row, truth: ChainTruth): Promise<boolean> {
    if (truth.status === 'unknown') return false
    if (truth.status === 'missing' && seen.state === 'reorged' && (truth.reference === undefined || truth.reference === seen.reference)) return false
    let after: AfterDecision | undefined
    const moved = await db.transaction(async (tx) => {
      const current = (
        await tx.query<{ state: string; reference: string | null; confirmed_at: Date | null }>(
          `select state, reference, confirmed_at from payment_reservations where replay_key = $1 for update`,
          [seen.replayKey],
        )
      )[0]
      // Someone else moved it since it was read: their decision stands.
      if (current === undefined || current.state !== seen.state || current.reference !== seen.reference || current.confirmed_at !== null) return false
      const handler = outcomes.handlerOf(seen.effect)
      switch (truth.status) {
        case 'confirmed':
        case 'included': {
          // A settled row whose recorded transaction is gone, found carried by another one (the
          // reader re-broadcast it within this same read, or another transaction used the
          // authorization), was dropped and re-landed in one step: the ledger says both, or the
          // story would skip the reorg and the reference would change silently.
          const relanded = seen.state === 'settled' && Boolean(seen.reference) && truth.reference !== seen.reference
          if (relanded) {
            await appendPaymentEvent(tx, seen, 'reorged', seen.reference, seen.detail)
            logger.warn({ replayKey: seen.replayKey, reference: seen.reference, now: truth.reference }, 'a recorded settlement is no longer on the chain; it was re-landed')
          }
          if (seen.state === 'reorged' || relanded) await appendPaymentEvent(tx, seen, 'resettled', truth.reference, { ...seen.detail, previous: seen.reference })
          const confirmed = truth.status === 'confirmed'
          await tx.query(
            `update payment_reservations set state = 'settled', reference = $2, block_number = $3, confirmed_at = case when $4 then now() end, updated_at = now() where replay_key = $1`,
            [seen.replayKey, truth.reference, truth.blockNumber, confirmed],
          )
          if (confirmed) after = await handler?.confirmed?.(tx, seen.replayKey)
          return confirmed || seen.state === 'reorged' || truth.reference !== seen.reference
        }
        case 'missing':
          if (seen.state === 'settled') {
            await appendPaymentEvent(tx, seen, 'reorged', seen.reference, seen.detail)
            logger.warn({ replayKey: seen.replayKey, reference: seen.reference }, 'a recorded settlement is no longer on the chain; re-landing it')
          }
          await tx.query(`update payment_reservations set state = 'reorged', reference = $2, block_number = null, updated_at = now() where replay_key = $1`, [
            seen.replayKey,
            truth.reference ?? seen.reference,
          ])
          return true
        case 'dead':
          if (seen.state === 'settled') await appendPaymentEvent(tx, seen, 'reorged', seen.reference, seen.detail)
          await appendPaymentEvent(tx, seen, 'reversed', null, { ...seen.detail, reason: truth.reason })
          await tx.query(`update payment_reservations set state = 'reversed', block_number = null, decided_at = now(), updated_at = now() where replay_key = $1`, [seen.replayKey])
          after = await handler?.reversed(tx, seen.replayKey)
          logger.warn({ replayKey: seen.replayKey, reason: truth.reason }, 'a settlement the chain dropped can no longer land; its work was reversed')
          return true
      }
    })
    if (after) await after().catch((error: unknown) => logger.warn({ err: error, replayKey: seen.replayKey }, 'post-confirmation work failed; the owning sweep will redo it'))
    return moved
  }

  async function pass(replayKeys: readonly string[] | undefined): Promise<number> {
    const effects = outcomes.effects()
    const columns = `replay_key, replay_key as "replayKey", state, reference, detail, protocol, protocol_version, payer, amount_micros, operation_id, agent_id, effect, updated_at`
    const unconfirmed = `state in ('settled', 'reorged') and confirmed_at is null and (effect is null or effect = any($1::text[]))`
    // A sweep of every settlement is claimed: another replica's sweep neither reads nor
    // re-broadcasts these meanwhile. One asked about given settlements (right after they were
    // made, or by a refund about to draw on them) reads them whatever another pass holds.
    const claimed = replayKeys === undefined ? await claimForCheck<SweptRow>(db, { columns, where: unconfirmed, params: [effects], limit: BATCH }) : undefined
    const rows =
      claimed?.rows ??
      (await db.query<SweptRow>(`select ${columns} from payment_reservations where ${unconfirmed} and replay_key = any($2::text[]) order by updated_at limit ${BATCH}`, [
        effects,
        replayKeys,
      ]))
    let moved = 0
    try {
      for (const row of rows) {
        const read = readers[row.protocol]
        if (read === undefined) continue
        let truth: ChainTruth
        try {
          truth = await read(row)
        } catch (error) {
          // One settlement the chain cannot answer for must not hold up the others.
          logger.warn({ err: error, replayKey: row.replayKey }, 'could not check a settlement against the chain yet')
          continue
        }
        if (await apply(row, truth)) moved += 1
      }
    } finally {
      await claimed?.release()
    }
    return moved
  }

  function sweep(replayKeys?: readonly string[]): Promise<number> {
    if (replayKeys !== undefined && replayKeys.length === 0) return Promise.resolve(0)
    // One pass at a time per process (and a claim per row across processes): two would
    // re-broadcast the same lost authorization twice.
    const run = passes.then(() => pass(replayKeys))
    passes = run.catch(() => undefined)
    return run
  }

  let asked = new Set<string>()
  let draining = false
  async function drain(): Promise<void> {
    while (asked.size > 0) {
      const keys = [...asked]
      asked = new Set()
      await sweep(keys).catch((error: unknown) => logger.warn({ err: error, settlements: keys.length }, 'confirmation check failed; the sweep retries it'))
    }
  }
  function soon(replayKey: string): void {
    asked.add(replayKey)
    if (draining) return
    draining = true
    void drain().finally(() => {
      draining = false
      // Asked for between the last pass and here: drained now, not on the next timer.
      const left = [...asked][0]
      if (left !== undefined) soon(left)
    })
  }
  return { sweep, soon }
}
