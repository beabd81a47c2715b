// Direct-rail payments into a task's escrow (the create and its top-ups), from the payments
// module's side. A paid create or top-up records a provisional charge bound to its payment in
// the same transaction; the payment's decision (src/payments/outcomes.ts: the request path right
// after settling, or the reconciler after a crash) lands here, once, in its own transaction:
// settled → the charge enters the ledger with its transaction hash; failed → it never does (a
// failed create deletes its task and frees its Idempotency-Key; a failed top-up frees its key).
// Either way a closing escrow that waited for it may close; a settled one only refunds once the
// chain confirms it (confirmed), and one the chain drops for good leaves the escrow (reversed).
import type { Queryable } from '../platform/db/index.ts'
import type { Clock } from '../platform/clock.ts'
import type { Micros } from '../platform/money.ts'
import type { AfterDecision, OutcomeHandler } from '../payments/outcomes.ts'
import { addProvisionalCharge, appendCharge, confirmCharge, decideProvisionalCharge, lockProvisionalCharge, reverseSettledCharge } from './escrow-store.ts'
import type { TaskCore } from './task-core.ts'
import { releaseIdempotencyKey } from './task-store.ts'

/** The outcome handler name of direct-rail escrow payments (payment_reservations.effect). */
export const SCHEDULER_CHARGE_EFFECT = 'scheduler.charge'

/** What a paid create/fund learned from the payment guard. */
export interface PaymentFacts {
  payer: string
  protocol: string
  amountMicros: Micros
  /** The payment's spend key (direct rail); null on the marketplace rail, where nothing is paid. */
  replayKey: string | null
  /**
   * Binds the charge to its payment inside the transaction that records it (the payment guard's
   * bind). Without it the charge stays provisional until chargeOutcomes decides it.
   */
  bind?: ((tx: Queryable, effect: string) => Promise<void>) | undefined
}

/**
 * A payment into the escrow, inside the transaction that creates or funds the task. Marketplace
 * rail: the cap is raised at once (an audit row, no money). Direct rail: a provisional charge,
 * bound to the payment.
 */
export async function recordCharge(tx: Queryable, taskId: string, kind: 'create' | 'top_up', amount: Micros, payment: PaymentFacts, fundingKey: string | null): Promise<void> {
  if (payment.replayKey === null) {
    await appendCharge(tx, taskId, amount)
    return
  }
  await addProvisionalCharge(tx, { replayKey: payment.replayKey, task_id: taskId, kind, amount_micros: amount, funding_key: fundingKey })
  await payment.bind?.(tx, SCHEDULER_CHARGE_EFFECT)
}

export function createChargeOutcomes(deps: { clock: Clock; core: TaskCore }): OutcomeHandler {
  const { clock, core } = deps
  /** The task's state machine hears of the decision; its post-commit work (resource, refund) follows the commit. */
  async function decided(tx: Queryable, taskId: string, event: { settled: boolean; create: boolean }): Promise<AfterDecision> {
    const { task, after } = await core.step(tx, taskId, { type: 'payment_decided', ...event })
    return () => core.runAfterCommit(task, after)
  }
  return {
    async settled(tx, replayKey, reference) {
      const charge = await lockProvisionalCharge(tx, replayKey)
      if (charge === undefined) return
      await decideProvisionalCharge(tx, replayKey, charge, { settled: true, txHash: reference }, clock.now())
      return decided(tx, charge.task_id, { settled: true, create: charge.kind === 'create' })
    },
    async failed(tx, replayKey) {
      const charge = await lockProvisionalCharge(tx, replayKey)
      if (charge === undefined) return
      await decideProvisionalCharge(tx, replayKey, charge, { settled: false }, clock.now())
      if (charge.funding_key !== null) await tx.query(`delete from scheduler_fundings where task_id = $1 and idempotency_key = $2`, [charge.task_id, charge.funding_key])
      if (charge.kind === 'create') {
        // A retry with the same Idempotency-Key creates a new task instead of finding this one.
        await releaseIdempotencyKey(tx, charge.task_id)
      }
      return decided(tx, charge.task_id, { settled: false, create: charge.kind === 'create' })
    },
    async confirmed(tx, replayKey) {
      const taskId = await confirmCharge(tx, replayKey, clock.now())
      if (taskId === undefined) return
      return decided(tx, taskId, { settled: true, create: false })
    },
    async reversed(tx, replayKey) {
      // As for a failed payment: a create that was never paid takes its task with it.
      const charge = await reverseSettledCharge(tx, replayKey, clock.now())
      if (charge === undefined) return
      if (charge.kind === 'create') await releaseIdempotencyKey(tx, charge.task_id)
      return decided(tx, charge.task_id, { settled: false, create: charge.kind === 'create' })
    },
  }
}
