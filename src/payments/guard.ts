// The one payment guard every paid route uses. Order matters and is the product:
//   credential → verify locally → reserve the spend key (unique row) → do the work, binding it to
//   the payment in its own transaction → settle → decide (outcomes.ts: ledger row, reservation
//   state and the work's activation or reversal in one transaction).
// Work that fails releases the reservation and is never settled. A settlement whose outcome is
// unknown (receipt not seen, the process died) is decided later by the reconciler from the
// chain, with the same decide(), so the work and the money always end up agreeing.
import type { Db, Queryable } from '../platform/db/index.ts'
import { AppError } from '../platform/errors.ts'
import type { Logger } from '../platform/logger.ts'
import { formatUsd } from '../platform/money.ts'
import type { Decision, PaymentOutcomes, Verdict } from './outcomes.ts'
import { claimForCheck, releaseOrphanedClaims } from './check-claims.ts'
import { credentialsOf, paymentCredential, type HeaderBag, type PaymentCredential } from './credentials.ts'
import { PaymentRejected, type ChallengeParts, type PriceQuote, type Protocol, type SettlementOutcome, type VerifiedPayment } from './types.ts'

/** One payment protocol as the guard sees it. */
export interface PaymentMethod {
  protocol: Protocol
  challenge(quote: PriceQuote): ChallengeParts
  /**
   * Verifies `value` without consuming anything; throws PaymentRejected. `credential`: the
   * request's credential `value` comes from; a method may keep per-request work on it (x402
   * decodes it once for both the payment-identifier read and this verification).
   */
  verify(value: string, quote: PriceQuote, credential?: PaymentCredential): Promise<VerifiedPayment>
}

export interface AuthorizedPayment {
  payment: VerifiedPayment
  /** What it was authorized for (the 402 of a settlement that fails answers this quote). */
  quote: PriceQuote
  /**
   * Inside the transaction that does the paid work: binds that work (the outcome handler named
   * `effect`, see outcomes.ts) to this payment and marks it as about to settle. From then on the
   * work lives exactly as long as the payment is not known to have failed, whatever crashes.
   * Throws when the reservation lapsed (the reconciler released it): the work's transaction then
   * rolls back.
   */
  bind(tx: Queryable, effect: string): Promise<void>
  /** Settles (unless $0) and decides the outcome; returns the decision and the receipt headers. */
  commit(): Promise<{ decision: Decision; headers: Record<string, string> }>
  /** The work failed or was refused: frees the proof, and reverses the work if it was bound. */
  release(reason?: string): Promise<void>
  /**
   * Set when the proof moves nothing until we broadcast it (not $0, not already on-chain): inside
   * the transaction of work paid another way (a balance the payer holds with us), ends the
   * reservation as consumed under `effect` — never settled, never usable again. Throws when the
   * reservation lapsed (the work's transaction then rolls back). Never with bind.
   */
  forgo?: (tx: Queryable, effect: string) => Promise<void>
  /** True once forgo ran (its transaction may still roll back: release() then frees the proof). */
  readonly forgone: boolean
}

export interface ReconcileOptions {
  /** A 'reserved' row older than this is released: its request died before settling anything. */
  reservedStaleMs?: number
  /** A 'settling' row older than this is decided from the chain (its request died mid-settlement). */
  settlingStaleMs?: number
  /**
   * Rows last touched before this instant belong to a process known to be dead (the embedded
   * default holds the data-dir lock, so at start every earlier row is an orphan): stale at once.
   */
  orphanedBefore?: Date
}

export interface PaymentGuard {
  /** The 402 every client family understands, as an AppError to throw. */
  paymentRequired(quote: PriceQuote, reason?: string, detail?: string): AppError
  authorize(headers: HeaderBag, quote: PriceQuote, operationId: string, context?: { agentId?: string | undefined }): Promise<AuthorizedPayment>
  /** Decides settlements whose outcome is not known yet; returns how many rows it decided. */
  reconcile(reconcilers: Partial<Record<Protocol, PendingReconciler>>, options?: ReconcileOptions): Promise<number>
}

/** An open settlement as its protocol's reconciler sees it. */
export interface OpenSettlement {
  replayKey: string
  /** 'settling': the request bound its work and may or may not have broadcast; 'pending': broadcast, receipt not seen. */
  state: 'settling' | 'pending'
  reference: string | null
  detail: Record<string, unknown>
  /** When the reservation last changed (taken, marked settling, found pending). */
  since: Date
}

/** Decides the fate of a settlement whose outcome is unknown, from the chain. */
export type PendingReconciler = (row: OpenSettlement) => Promise<Verdict>

export interface PaymentGuardDeps {
  db: Db
  methods: Record<Protocol, PaymentMethod>
  outcomes: PaymentOutcomes
  logger: Logger
}

const RESERVED_STALE_MS = 10 * 60_000
const SETTLING_STALE_MS = 2 * 60_000

export function createPaymentGuard(deps: PaymentGuardDeps): PaymentGuard {
  const { db, methods, outcomes, logger } = deps

  function paymentRequired(quote: PriceQuote, reason?: string, detail?: string): AppError {
    const x402 = methods.x402.challenge(quote)
    // A method that cannot pay this quote here (MPP charges without a Tempo RPC) sends no challenge.
    const mpp = methods.mpp.challenge(quote)
    const offered = Object.keys(mpp.headers).length > 0 ? 'x402 or MPP' : 'x402'
    const price = `${formatUsd(quote.amountMicros)} USD`
    return new AppError(reason ? 'payment_invalid' : 'payment_required', detail ?? `${quote.route} costs ${price}. Pay with ${offered} and retry.`, {
      status: 402,
      headers: { ...x402.headers, ...mpp.headers, 'cache-control': 'no-store' },
      extensions: { ...x402.body, ...(reason ? { reason, error: reason } : {}), priceMicros: quote.amountMicros.toString() },
    })
  }

  async function reserve(payment: VerifiedPayment, operationId: string, agentId: string | undefined): Promise<boolean> {
    // The primary key is the replay guard; a released key (failed work) may be taken again.
    const rows = await db.query(
      `insert into payment_reservations (replay_key, protocol, protocol_version, payer, amount_micros, operation_id, agent_id, state, detail)
       values ($1, $2, $3, $4, $5, $6, $7, 'reserved', $8)
       on conflict (replay_key) do update set state = 'reserved', operation_id = excluded.operation_id, agent_id = excluded.agent_id,
           detail = excluded.detail, effect = null, reference = null, decided_at = null, updated_at = now()
         where payment_reservations.state = 'released'
       returning replay_key`,
      [payment.replayKey, payment.protocol, payment.version, payment.payer.toLowerCase(), payment.amountMicros, operationId, agentId ?? null, payment.detail],
    )
    return rows.length === 1
  }

  /** reserved → settling, only if nobody released it meanwhile; the marker precedes any broadcast. */
  async function markSettling(q: Queryable, replayKey: string, effect: string | null): Promise<boolean> {
    const rows = await q.query(
      `update payment_reservations set state = 'settling', effect = coalesce($2, effect), updated_at = now() where replay_key = $1 and state = 'reserved' returning 1`,
      [replayKey, effect],
    )
    return rows.length === 1
  }

  const lapsed = (quote: PriceQuote) =>
    paymentRequired(quote, 'challenge_expired', 'The payment reservation lapsed while the work ran; nothing was charged. Sign a new payment and retry.')

  return {
    paymentRequired,

    async authorize(headers, quote, operationId, context) {
      // The payment credential of the request, if any; two at once is a 400.
      const credential = paymentCredential(credentialsOf(headers))
      if (!credential) throw paymentRequired(quote)
      let payment: VerifiedPayment
      try {
        payment = await methods[credential.protocol].verify(credential.value, quote, credential)
      } catch (error) {
        if (error instanceof PaymentRejected) {
          if (error.reason === 'malformed') {
            throw new AppError('payment_malformed', error.message, { extensions: { reason: 'malformed', protocol: credential.protocol }, field: 'header' })
          }
          throw paymentRequired(quote, error.reason, error.message)
        }
        // The proof could not be checked (RPC down): nothing was reserved or charged; try again.
        logger.error({ err: error, protocol: credential.protocol }, 'payment verification unavailable')
        throw new AppError('unavailable', `${credential.protocol} verification is unavailable right now; nothing was charged, retry later`, {
          headers: { 'retry-after': '5' },
        })
      }
      if (!(await reserve(payment, operationId, context?.agentId))) {
        throw paymentRequired(quote, 'nonce_already_used', 'This payment proof was already used; sign a new one.')
      }
      let bound = false
      let done = false
      let forgone = false
      // An MPP push credential names a transaction the payer already broadcast: it cannot be forgone.
      const onChainAlready = payment.protocol === 'mpp' && payment.detail.mode === 'push'
      const forgo = async (tx: Queryable, effect: string) => {
        if (done || bound || forgone) throw new Error('payment already bound, forgone, committed or released')
        const rows = await tx.query(
          `update payment_reservations set state = 'consumed', effect = $2, decided_at = now(), updated_at = now() where replay_key = $1 and state = 'reserved' returning 1`,
          [payment.replayKey, effect],
        )
        if (rows.length !== 1) throw lapsed(quote)
        forgone = true
      }
      return {
        payment,
        quote,
        get forgone() {
          return forgone
        },
        ...(payment.zeroValue || onChainAlready ? {} : { forgo }),
        async bind(tx, effect) {
          if (done || bound || forgone) throw new Error('payment already bound, forgone, committed or released')
          if (!(await markSettling(tx, payment.replayKey, effect))) throw lapsed(quote)
          bound = true
        },
        async release(reason) {
          if (done) return
          done = true
          if (bound) {
            // The bound work exists; nothing was broadcast, so the payment fails and the work is reversed.
            await outcomes.decide(payment.replayKey, { status: 'failed', reason: reason ?? 'the paid work failed' }, 'request')
            return
          }
          await db.query(`update payment_reservations set state = 'released', updated_at = now() where replay_key = $1 and state = 'reserved'`, [payment.replayKey])
        },
        async commit() {
          if (done || forgone) throw new Error('payment already committed, released or forgone')
          done = true
          if (payment.zeroValue) {
            await db.query(`update payment_reservations set state = 'consumed', decided_at = now(), updated_at = now() where replay_key = $1`, [payment.replayKey])
            return { decision: { status: 'settled', reference: null }, headers: {} }
          }
          if (!bound && !(await markSettling(db, payment.replayKey, null))) throw lapsed(quote)
          let outcome: SettlementOutcome
          try {
            outcome = await payment.settle()
          } catch (error) {
            // We cannot tell whether anything was broadcast: the reconciler decides from the chain.
            logger.error({ err: error, replayKey: payment.replayKey }, 'settlement threw; outcome unknown, left for reconciliation')
            outcome = { status: 'pending', reference: '' }
          }
          const verdict: Verdict =
            outcome.status === 'settled'
              ? { status: 'settled', reference: outcome.reference }
              : outcome.status === 'pending'
                ? { status: 'pending', reference: outcome.reference || undefined }
                : { status: 'failed', reason: outcome.reason }
          const decision = await outcomes.decide(payment.replayKey, verdict, 'request')
          if (decision.status === 'settled') {
            return { decision, headers: outcome.status === 'settled' ? outcome.headers : {} }
          }
          if (decision.status === 'pending') {
            return { decision, headers: { 'x-payment-status': 'pending', ...(decision.reference ? { 'x-payment-reference': decision.reference } : {}) } }
          }
          return { decision, headers: {} }
        },
      }
    },

    async reconcile(reconcilers, options = {}) {
      const effects = outcomes.effects()
      let changed = 0
      // A reservation whose request died before it bound work or started settling: nothing was
      // broadcast (the 'settling' marker precedes any broadcast), so the proof is freed.
      const orphanedBefore = options.orphanedBefore ?? new Date(0)
      const released = await db.query(
        `update payment_reservations set state = 'released', updated_at = now()
          where state = 'reserved' and (updated_at < now() - make_interval(secs => $1) or updated_at < $2) returning replay_key`,
        [(options.reservedStaleMs ?? RESERVED_STALE_MS) / 1000, orphanedBefore],
      )
      changed += released.length
      if (options.orphanedBefore !== undefined) await releaseOrphanedClaims(db, options.orphanedBefore)
      // Claimed: another replica's pass does not settle the same authorization again meanwhile.
      const claimed = await claimForCheck<{
        replay_key: string
        protocol: Protocol
        state: 'settling' | 'pending'
        reference: string | null
        detail: Record<string, unknown>
        updated_at: Date
      }>(db, {
        columns: 'replay_key, protocol, state, reference, detail, updated_at',
        where: `(state = 'pending' or (state = 'settling' and (updated_at < now() - make_interval(secs => $1) or updated_at < $3)))
            and (effect is null or effect = any($2::text[]))`,
        params: [(options.settlingStaleMs ?? SETTLING_STALE_MS) / 1000, effects, orphanedBefore],
        limit: 500,
      })
      try {
        for (const row of claimed.rows) {
          const reconciler = reconcilers[row.protocol]
          if (!reconciler) continue
          let verdict: Verdict
          try {
            verdict = await reconciler({ replayKey: row.replay_key, state: row.state, reference: row.reference, detail: row.detail, since: row.updated_at })
          } catch (error) {
            // One row the chain cannot answer for must not block the others.
            logger.warn({ err: error, replayKey: row.replay_key }, 'could not reconcile a settlement yet')
            verdict = { status: 'pending' }
          }
          // Not decided yet: only a new broadcast (a reference we did not have) is worth recording.
          if (verdict.status === 'pending' && (!verdict.reference || verdict.reference === row.reference)) continue
          const decision = await outcomes.decide(row.replay_key, verdict, 'reconciler')
          if (decision.status !== 'pending') changed += 1
        }
      } finally {
        await claimed.release()
      }
      return changed
    },
  }
}
