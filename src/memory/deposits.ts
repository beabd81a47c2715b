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
  /**
   * Refunds the whole withdrawable balance on-chain. Idempotent: with nothing left, the owner's
   * last withdrawal is answered again (replay), as it stands now — unless a deposit came after it.
   */
  withdraw(owner: OwnerId): Promise<WithdrawalView>
}

/** The answer of a withdrawal (DELETE /api/v1/deposits; WithdrawResult in catalog/schemas/memory.ts). */
export interface WithdrawalView {
  /** The withdrawal this answer is about: created by this call, or (replay) the last one; null when there is none. */
  withdrawalId: string | null
  /** What that withdrawal returns on-chain (0 when cancelled, or with none). */
  refundedMicros: string
  /** Its refund's state now; 'none' without a withdrawal. */
  status: RefundState | 'none'
  /** Its refund's transaction once signed and sent (final when status is confirmed); null before. */
  txHash: string | null
  /** Deposits whose payment is still settling: in no withdrawal yet, withdrawable once settled. */
  settlingMicros: string
  /** True when this call created no withdrawal (it answers the last one, or there is none). */
  replay: boolean
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

  /** A withdrawal's refund as it stands now (read from the outbox row, never remembered). */
  async function refundView(refundId: string): Promise<Pick<WithdrawalView, 'withdrawalId' | 'refundedMicros' | 'status' | 'txHash'>> {
    const row = (
      await db.query<{ amount_micros: bigint; state: RefundState; tx_hash: string | null; raw_tx: string | null }>(
        `select amount_micros, state, tx_hash, raw_tx from memory_refunds where refund_id = $1`,
        [refundId],
      )
    )[0]
    if (row === undefined) throw new Error(`no memory refund ${refundId}`)
    // tx_hash names the transaction that carries the refund while its signed bytes are kept (sent,
    // or being resent) and once confirmed; a hash left from a transaction that will never be mined
    // (raw_tx cleared, a new one is to be signed) is not shown.
    const sent = row.state === 'confirmed' || row.raw_tx !== null
    return {
      withdrawalId: refundId,
      refundedMicros: row.state === 'cancelled' ? '0' : row.amount_micros.toString(),
      status: row.state,
      txHash: sent ? row.tx_hash : null,
    }
  }

  /** Deposits of `owner` whose payment is not decided yet (not in the balance, in no withdrawal). */
  async function settlingOf(q: Queryable, owner: OwnerId): Promise<bigint> {
    const rows = await q.query<{ micros: bigint }>(`select coalesce(sum(amount_micros), 0)::int8 as micros from memory_deposits where owner = $1 and state = 'provisional'`, [
      owner,
    ])
    return rows[0]?.micros ?? 0n
  }

  /**
   * The withdrawal a repeat answers: the owner's last one, unless a deposit came after it (settled
   * into the ledger, or still settling) — answering it then would read as if that deposit came back.
   */
  async function lastWithdrawal(q: Queryable, owner: OwnerId): Promise<string | undefined> {
    const rows = await q.query<{ refund_id: string }>(
      `select l.refund_id from memory_ledger l join memory_refunds r on r.refund_id = l.refund_id
        where l.id = (select max(id) from memory_ledger where owner = $1 and kind in ('deposit', 'refund'))
          and l.kind = 'refund'
          and not exists (select 1 from memory_deposits d where d.owner = $1 and d.state = 'provisional' and d.created_at > r.created_at)`,
      [owner],
    )
    return rows[0]?.refund_id
  }

  async function withdrawNow(owner: OwnerId): Promise<WithdrawalView> {
    const decided = await db.transaction(async (tx) => {
      if ((await lockOwner(tx, owner)) === undefined) return { id: undefined, created: false, settling: 0n }
      // Read under the owner lock, with the balance: what this call saw settling is what it left out.
      const settling = await settlingOf(tx, owner)
      const balance = await balanceOf(tx, owner)
      if (balance <= 0n) return { id: await lastWithdrawal(tx, owner), created: false, settling }
      const id = randomUUID()
      await appendLedger(tx, { owner, kind: 'refund', amountMicros: -balance, refundId: id })
      await tx.query(`insert into memory_refunds (refund_id, owner, to_address, amount_micros, state) values ($1, $2, $3, $4, 'pending')`, [id, owner, owner, balance])
      return { id, created: true, settling }
    })
    const settlingMicros = decided.settling.toString()
    if (decided.id === undefined) return { withdrawalId: null, refundedMicros: '0', status: 'none', txHash: null, settlingMicros, replay: true }
    if (decided.created) {
      // Sent now; if the chain is slow or down the outbox keeps retrying (the answer says so).
      await refunds.send(decided.id).catch((error: unknown) => deps.logger.warn({ err: error }, 'memory withdrawal: first send failed; retried by the outbox'))
    }
    return { ...(await refundView(decided.id)), settlingMicros, replay: !decided.created }
  }

  // Withdrawals of one owner in this process run one after another: a concurrent call waits until
  // the first has sent its refund, then answers that refund as the send left it (its transaction,
  // its state). Across replicas they serialise on the owner lock, and a repeat reads the refund as
  // it stands at that moment (possibly not signed yet: `sending` or `pending`, no transaction).
  const withdrawing = new Map<OwnerId, Promise<WithdrawalView>>()

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
      const before = withdrawing.get(owner)
      const run = (before ?? Promise.resolve()).then(
        () => withdrawNow(owner),
        () => withdrawNow(owner),
      )
      withdrawing.set(owner, run)
      try {
        return await run
      } finally {
        if (withdrawing.get(owner) === run) withdrawing.delete(owner)
      }
    },
  }
}
