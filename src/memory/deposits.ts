// The memory service's money beyond the write itself: deposits (paid with x402/MPP, provisional
// until their settlement is known), withdrawals (a ledger row and an on-chain refund from the
// outbox, in one transaction under the owner lock), and the payment decisions of per-call writes.
//
// Crash safety is the payments module's: the work of a payment is bound to it in the work's own
// transaction, and the decision — by the request, or after a crash by the settlement reconciler —
// runs these handlers exactly once: a settled deposit enters the ledger with its transaction hash,
// a failed one never does; a settled per-call write becomes visible, a failed one is deleted. A
// settlement the chain later drops for good (payments/confirmations.ts) is reversed the same way:
// the write is deleted; the deposit leaves the ledger, and a withdrawal not signed yet that
// returned it is reduced by it. A withdrawal is signed only once every deposit it returns is
// confirmed on-chain.
import { randomUUID } from 'node:crypto'
import type { Db, Queryable } from '../platform/db/index.ts'
import type { Logger } from '../platform/logger.ts'
import type { SettlementConfirmations } from '../payments/confirmations.ts'
import type { OutcomeHandler, PaymentOutcomes } from '../payments/outcomes.ts'
import { createRefunds, MEMORY_REFUNDS, type RefundChain, type Refunds, type RefundSource, type RefundState } from '../payments/refunds.ts'
import type { OwnerId } from './types.ts'
import { MEMORY_WRITE_EFFECT } from './service.ts'
import { appendLedger, balanceOf, ensureOwner, lockOwner, nextSeq } from './store.ts'

/** payment_reservations.effect of a deposit. */
export const MEMORY_DEPOSIT_EFFECT = 'memory.deposit'

/** A per-call write's decision: visible with the next seq, or gone (nothing stored for a failed payment). */
export const memoryWriteOutcomes: OutcomeHandler = {
  async settled(tx, replayKey) {
    const row = (await tx.query<{ id: string; owner: string }>(`select id, owner from memory_records where replay_key = $1 and state = 'provisional' for update`, [replayKey]))[0]
    if (row === undefined) return undefined
    await lockOwner(tx, row.owner)
    const seq = await nextSeq(tx, row.owner)
    await tx.query(`update memory_records set state = 'active', seq = $2 where id = $1`, [row.id, seq])
    return undefined
  },
  async failed(tx, replayKey) {
    await tx.query(`delete from memory_records where replay_key = $1 and state = 'provisional'`, [replayKey])
    return undefined
  },
  async reversed(tx, replayKey) {
    await tx.query(`delete from memory_records where replay_key = $1`, [replayKey])
    return undefined
  },
}

/** A deposit's decision: into the ledger with its transaction, or reversed. */
export const memoryDepositOutcomes: Omit<OutcomeHandler, 'reversed'> = {
  async settled(tx, replayKey, reference) {
    const rows = await tx.query<{ owner: string; amount_micros: bigint }>(
      `update memory_deposits set state = 'settled', tx_hash = $2, decided_at = now() where replay_key = $1 and state = 'provisional' returning owner, amount_micros`,
      [replayKey, reference],
    )
    const deposit = rows[0]
    if (deposit === undefined) return undefined
    await appendLedger(tx, { owner: deposit.owner, kind: 'deposit', amountMicros: deposit.amount_micros, replayKey, txHash: reference })
    return undefined
  },
  async failed(tx, replayKey) {
    await tx.query(`update memory_deposits set state = 'reversed', decided_at = now() where replay_key = $1 and state = 'provisional'`, [replayKey])
    return undefined
  },
}

/** A deposit the chain dropped for good leaves the ledger, and an unsent withdrawal of it shrinks. */
function depositReversal(refunds: Pick<Refunds, 'reduce'>): OutcomeHandler['reversed'] {
  return async (tx, replayKey) => {
    const deposit = (
      await tx.query<{ owner: string; amount_micros: bigint; decided_at: Date }>(
        `select owner, amount_micros, decided_at from memory_deposits where replay_key = $1 and state = 'settled' for update`,
        [replayKey],
      )
    )[0]
    if (deposit === undefined) return undefined
    await tx.query(`update memory_deposits set state = 'reversed', decided_at = now() where replay_key = $1`, [replayKey])
    await lockOwner(tx, deposit.owner)
    // Only a withdrawal made after the deposit settled can have returned it.
    const unsent = await tx.query<{ refund_id: string }>(
      `select refund_id from memory_refunds where owner = $1 and state in ('pending', 'waiting', 'failed', 'sending') and raw_tx is null and created_at >= $2
        order by created_at desc`,
      [deposit.owner, deposit.decided_at],
    )
    let left = deposit.amount_micros
    for (const { refund_id } of unsent) {
      if (left <= 0n) break
      left -= await refunds.reduce(tx, refund_id, left)
    }
    // One row, net of what the withdrawals gave back: memory_ledger admits no positive row but a
    // deposit (its check constraint), so the part taken off unsent withdrawals (which had left
    // the balance with them) is not taken from the balance again. 0 when a withdrawal held it all.
    await appendLedger(tx, { owner: deposit.owner, kind: 'reversal', amountMicros: -left, replayKey })
    return undefined
  }
}

/** A withdrawal returns the owner's settled deposits, less what their other withdrawals returned. */
const withdrawalSource: RefundSource = {
  async of(q, refundId) {
    const rows = await q.query<{ replay_keys: string[] | null; elsewhere: bigint | null }>(
      `select (select array_agg(d.replay_key) from memory_deposits d where d.owner = r.owner and d.state = 'settled') as replay_keys,
              (select sum(o.amount_micros) from memory_refunds o where o.owner = r.owner and o.refund_id <> r.refund_id and o.state <> 'cancelled')::int8 as elsewhere
         from memory_refunds r where r.refund_id = $1`,
      [refundId],
    )
    return { replayKeys: rows[0]?.replay_keys ?? [], refundedElsewhereMicros: rows[0]?.elsewhere ?? 0n }
  },
}

export interface MemoryMoney {
  refunds: Refunds
  /** Records a paid deposit, bound to its payment (call inside the request's paid handler). */
  deposit(owner: OwnerId, payment: { amountMicros: bigint; replayKey: string; bind: (tx: Queryable, effect: string) => Promise<void> }): Promise<void>
  /** The deposit's answer once its payment is decided. */
  depositView(owner: OwnerId, replayKey: string): Promise<{ owner: string; depositedMicros: string; balanceMicros: string; txHash: string | null }>
  /** Refunds the whole balance on-chain (idempotent: with nothing left, the last withdrawal is answered again). */
  withdraw(owner: OwnerId): Promise<{ refundedMicros: string; txHash: string | null; status: RefundState | 'none' }>
}

export function registerMemoryMoney(deps: {
  db: Db
  logger: Logger
  payments: { outcomes: PaymentOutcomes; chain: RefundChain; confirmations: Pick<SettlementConfirmations, 'sweep'> }
}): MemoryMoney {
  const { db } = deps
  const refunds = createRefunds({
    db,
    chain: deps.payments.chain,
    logger: deps.logger,
    outbox: MEMORY_REFUNDS,
    source: withdrawalSource,
    confirm: (keys) => deps.payments.confirmations.sweep(keys),
  })
  deps.payments.outcomes.register(MEMORY_WRITE_EFFECT, memoryWriteOutcomes)
  deps.payments.outcomes.register(MEMORY_DEPOSIT_EFFECT, { ...memoryDepositOutcomes, reversed: depositReversal(refunds) })

  async function refundView(refundId: string) {
    const row = (
      await db.query<{ amount_micros: bigint; state: RefundState; tx_hash: string | null }>(`select amount_micros, state, tx_hash from memory_refunds where refund_id = $1`, [
        refundId,
      ])
    )[0]
    if (row === undefined) throw new Error(`no memory refund ${refundId}`)
    return { refundedMicros: row.state === 'cancelled' ? '0' : row.amount_micros.toString(), txHash: row.state === 'confirmed' ? row.tx_hash : null, status: row.state }
  }

  return {
    refunds,

    async deposit(owner, payment) {
      await db.transaction(async (tx) => {
        await ensureOwner(tx, owner, 'direct')
        await tx.query(`insert into memory_deposits (replay_key, owner, amount_micros) values ($1, $2, $3)`, [payment.replayKey, owner, payment.amountMicros])
        await payment.bind(tx, MEMORY_DEPOSIT_EFFECT)
      })
    },

    async depositView(owner, replayKey) {
      const row = (await db.query<{ amount_micros: bigint; tx_hash: string | null }>(`select amount_micros, tx_hash from memory_deposits where replay_key = $1`, [replayKey]))[0]
      return {
        owner,
        depositedMicros: (row?.amount_micros ?? 0n).toString(),
        balanceMicros: (await balanceOf(db, owner)).toString(),
        txHash: row?.tx_hash ?? null,
      }
    },

    async withdraw(owner) {
      const refundId = await db.transaction(async (tx) => {
        if ((await lockOwner(tx, owner)) === undefined) return undefined
        const balance = await balanceOf(tx, owner)
        if (balance <= 0n) {
          // Nothing left: a retried withdrawal answers the last one (if no deposit came after it).
          const last = (
            await tx.query<{ kind: string; refund_id: string | null }>(
              `select kind, refund_id from memory_ledger where owner = $1 and kind in ('deposit', 'refund') order by id desc limit 1`,
              [owner],
            )
          )[0]
          return last?.kind === 'refund' && last.refund_id !== null ? { kind: 'existing' as const, id: last.refund_id } : undefined
        }
        const id = randomUUID()
        await appendLedger(tx, { owner, kind: 'refund', amountMicros: -balance, refundId: id })
        await tx.query(`insert into memory_refunds (refund_id, owner, to_address, amount_micros, state) values ($1, $2, $3, $4, 'pending')`, [id, owner, owner, balance])
        return { kind: 'created' as const, id }
      })
      if (refundId === undefined) return { refundedMicros: '0', txHash: null, status: 'none' }
      if (refundId.kind === 'created') {
        // Sent now; if the chain is slow or down the outbox keeps retrying (the answer says so).
        await refunds.send(refundId.id).catch((error: unknown) => deps.logger.warn({ err: error }, 'memory withdrawal: first send failed; retried by the outbox'))
      }
      return refundView(refundId.id)
    },
  }
}
