// The money side of song and speech generation. The buyer pays for what the 402 quoted
// (candidateCount × price, less free units) before the media role runs; the answer tells what was
// delivered. A sale row binds that delivery to the payment in one transaction, so whatever
// crashes, the payment's decision settles it (and owes back the undelivered part) or fails it.
//
// Who pays what: free units cover delivered songs first; every delivered song beyond them costs
// the unit price; the rest of the payment (undelivered candidates) is refunded on-chain after the
// settlement, from the media refund outbox. A sale that delivered nothing chargeable never
// settles at all (the payment is released), and one that delivered nothing answers 502/504.
import type { Db, Queryable } from '../platform/db/index.ts'
import type { Logger } from '../platform/logger.ts'
import type { SettlementConfirmations } from '../payments/confirmations.ts'
import type { AfterDecision, OutcomeHandler, PaymentOutcomes } from '../payments/outcomes.ts'
import { createRefunds, MEDIA_REFUNDS, type RefundChain, type Refunds, type RefundSource } from '../payments/refunds.ts'

/** Names the outcome handler of media sales (payment_reservations.effect). */
export const MEDIA_SALE_EFFECT = 'media.sale'

export interface SaleTerms {
  /** Units the buyer asked for (candidates, or 1 for speech). */
  ordered: number
  /** Units delivered (stored, with a URL in the answer). */
  delivered: number
  /** Free included units taken for this request. */
  freeUnits: number
  unitPriceMicros: bigint
  /** What the payment authorizes (ordered − free units, at the unit price, or a quoted price). */
  paidMicros: bigint
}

/**
 * What the delivered units cost: free units cover delivered units first. Speech and other
 * single-unit sales deliver all or nothing, so only songs ever owe a refund.
 */
export function chargeFor(terms: SaleTerms): { chargedMicros: bigint; refundMicros: bigint } {
  const chargeableUnits = BigInt(Math.max(0, terms.delivered - terms.freeUnits))
  const perUnit = terms.ordered > terms.freeUnits ? terms.paidMicros / BigInt(terms.ordered - terms.freeUnits) : terms.unitPriceMicros
  const charged = chargeableUnits * perUnit
  const chargedMicros = charged > terms.paidMicros ? terms.paidMicros : charged
  return { chargedMicros, refundMicros: terms.paidMicros - chargedMicros }
}

export interface SaleRecord {
  replayKey: string
  operationId: string
  payer: string
  agentId: string | null
  terms: SaleTerms
  chargedMicros: bigint
  resultUrl: string
}

/** Writes the provisional sale; call inside the transaction that binds the payment. */
export async function recordSale(tx: Queryable, sale: SaleRecord): Promise<void> {
  await tx.query(
    `insert into media_sales (replay_key, operation_id, payer, agent_id, ordered_units, delivered_units, free_units, paid_micros, charged_micros, result_url)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
    [
      sale.replayKey,
      sale.operationId,
      sale.payer.toLowerCase(),
      sale.agentId,
      sale.terms.ordered,
      sale.terms.delivered,
      sale.terms.freeUnits,
      sale.terms.paidMicros,
      sale.chargedMicros,
      sale.resultUrl,
    ],
  )
}

/** The payment decision's side of a sale: settle it (and owe the refund), or mark it failed. */
export function createMediaSaleOutcomes(deps: { refunds: Pick<Refunds, 'send' | 'reduce'> }): OutcomeHandler {
  return {
    async settled(tx, replayKey, reference): Promise<AfterDecision | undefined> {
      const rows = await tx.query<{ payer: string; refund_micros: bigint }>(
        `update media_sales set state = 'settled', settlement_ref = $2, decided_at = now() where replay_key = $1 and state = 'provisional'
          returning payer, refund_micros`,
        [replayKey, reference],
      )
      const sale = rows[0]
      if (sale === undefined || sale.refund_micros <= 0n) return undefined
      // Owed in the decision's transaction, sent after it commits (and retried until confirmed).
      await tx.query(`insert into media_refunds (replay_key, to_address, amount_micros, state) values ($1, $2, $3, 'pending') on conflict do nothing`, [
        replayKey,
        sale.payer,
        sale.refund_micros,
      ])
      return async () => {
        await deps.refunds.send(replayKey)
      }
    },
    async failed(tx, replayKey) {
      await tx.query(`update media_sales set state = 'failed', decided_at = now() where replay_key = $1 and state = 'provisional'`, [replayKey])
      return undefined
    },
    async reversed(tx, replayKey) {
      // The payment never reached the chain after all: nothing of it is owed back.
      await tx.query(`update media_sales set state = 'reversed', decided_at = now() where replay_key = $1 and state = 'settled'`, [replayKey])
      await deps.refunds.reduce(tx, replayKey)
      return undefined
    },
  }
}

/** A sale's refund returns part of that sale's own payment. */
const saleRefundSource: RefundSource = {
  of: async (_q, replayKey) => ({ replayKeys: [replayKey], refundedElsewhereMicros: 0n }),
}

/**
 * Makes this process decide media sales with their payments (the request path and the settlement
 * reconciler alike) and send their refunds; returns the refund outbox (retry it periodically).
 */
export function registerMediaSales(deps: {
  db: Db
  payments: { outcomes: PaymentOutcomes; chain: RefundChain; confirmations: Pick<SettlementConfirmations, 'sweep'> }
  logger: Logger
}): Refunds {
  const refunds = createRefunds({
    db: deps.db,
    chain: deps.payments.chain,
    logger: deps.logger,
    outbox: MEDIA_REFUNDS,
    source: saleRefundSource,
    confirm: (keys) => deps.payments.confirmations.sweep(keys),
  })
  deps.payments.outcomes.register(MEDIA_SALE_EFFECT, createMediaSaleOutcomes({ refunds }))
  return refunds
}

/** A sale's refund as the answer reports it (headers): owed amount, and the tx once confirmed. */
export async function refundOf(db: Queryable, replayKey: string): Promise<{ micros: bigint; state: string; txHash: string | null } | undefined> {
  const rows = await db.query<{ amount_micros: bigint; state: string; tx_hash: string | null }>(`select amount_micros, state, tx_hash from media_refunds where replay_key = $1`, [
    replayKey,
  ])
  const row = rows[0]
  return row ? { micros: row.amount_micros, state: row.state, txHash: row.tx_hash } : undefined
}
