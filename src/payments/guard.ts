// The one payment guard every paid route uses. Order matters and is the product:
//   credential → verify locally → reserve the spend key (unique row) → do the work → settle → ledger.
// Work that fails releases the reservation and is never settled; a settlement whose outcome is
// unknown is recorded as pending and reconciled later, never broadcast twice.
import type { Db } from '../platform/db/index.ts'
import { isUniqueViolation } from '../platform/db/index.ts'
import { AppError } from '../platform/errors.ts'
import type { Logger } from '../platform/logger.ts'
import { formatUsd } from '../platform/money.ts'
import { PaymentRejected, type ChallengeParts, type PriceQuote, type Protocol, type SettlementOutcome, type VerifiedPayment } from './types.ts'

/** One payment protocol as the guard sees it. */
export interface PaymentMethod {
  protocol: Protocol
  challenge(quote: PriceQuote): ChallengeParts
  /** Verifies without consuming anything; throws PaymentRejected. */
  verify(credential: string, quote: PriceQuote): Promise<VerifiedPayment>
}

export interface Credential {
  protocol: Protocol
  value: string
}

type HeaderBag = Record<string, string | string[] | undefined>

function header(headers: HeaderBag, name: string): string | undefined {
  const value = headers[name]
  return Array.isArray(value) ? value[0] : value
}

/** The payment credential of a request, if any; two at once is a 400. */
export function readCredential(headers: HeaderBag): Credential | undefined {
  const found: Credential[] = []
  const v2 = header(headers, 'payment-signature')
  const v1 = header(headers, 'x-payment')
  const authorization = header(headers, 'authorization')
  if (v2) found.push({ protocol: 'x402', value: v2 })
  if (v1) found.push({ protocol: 'x402', value: v1 })
  if (authorization && /^payment\s/i.test(authorization)) found.push({ protocol: 'mpp', value: authorization })
  if (found.length > 1) {
    throw new AppError('payment_malformed', 'Send exactly one payment credential: PAYMENT-SIGNATURE, X-PAYMENT or Authorization: Payment', {
      extensions: { reason: 'multiple_credentials' },
      field: 'header',
    })
  }
  return found[0]
}

export interface AuthorizedPayment {
  payment: VerifiedPayment
  /** Settles (unless $0) and records it; returns the receipt headers. Throws a 402 when settlement fails. */
  commit(context: { agentId?: string | undefined; operationId: string }): Promise<Record<string, string>>
  /** The work failed: free the spend key so the same proof may be presented again. */
  release(): Promise<void>
}

export interface PaymentGuard {
  /** The 402 every client family understands, as an AppError to throw. */
  paymentRequired(quote: PriceQuote, reason?: string, detail?: string): AppError
  authorize(headers: HeaderBag, quote: PriceQuote, operationId: string): Promise<AuthorizedPayment>
  /** Settles pending/stuck settlements; returns how many rows changed. */
  reconcile(reconcilers: Partial<Record<Protocol, PendingReconciler>>): Promise<number>
}

/** Decides the fate of a settlement whose outcome was unknown. */
export type PendingReconciler = (row: { replayKey: string; reference: string | null; detail: Record<string, unknown> }) => Promise<'settled' | 'failed' | 'pending'>

export interface PaymentGuardDeps {
  db: Db
  methods: Record<Protocol, PaymentMethod>
  logger: Logger
}

export function createPaymentGuard(deps: PaymentGuardDeps): PaymentGuard {
  const { db, methods, logger } = deps

  function paymentRequired(quote: PriceQuote, reason?: string, detail?: string): AppError {
    const x402 = methods.x402.challenge(quote)
    const mpp = methods.mpp.challenge(quote)
    const price = `${formatUsd(quote.amountMicros)} USD`
    return new AppError(reason ? 'payment_invalid' : 'payment_required', detail ?? `${quote.route} costs ${price}. Pay with x402 or MPP and retry.`, {
      status: 402,
      headers: { ...x402.headers, ...mpp.headers, 'cache-control': 'no-store' },
      extensions: { ...x402.body, ...(reason ? { reason, error: reason } : {}), priceMicros: quote.amountMicros.toString() },
    })
  }

  async function reserve(payment: VerifiedPayment, operationId: string): Promise<boolean> {
    // The primary key is the replay guard; a released key (failed work) may be taken again.
    const rows = await db.query(
      `insert into payment_reservations (replay_key, protocol, payer, amount_micros, operation_id, state, detail)
       values ($1, $2, $3, $4, $5, 'reserved', $6)
       on conflict (replay_key) do update set state = 'reserved', operation_id = excluded.operation_id, detail = excluded.detail, updated_at = now()
         where payment_reservations.state = 'released'
       returning replay_key`,
      [payment.replayKey, payment.protocol, payment.payer.toLowerCase(), payment.amountMicros, operationId, payment.detail],
    )
    return rows.length === 1
  }

  async function setState(replayKey: string, state: string, reference?: string): Promise<void> {
    await db.query(`update payment_reservations set state = $2, reference = coalesce($3, reference), updated_at = now() where replay_key = $1`, [
      replayKey,
      state,
      reference ?? null,
    ])
  }

  /**
   * Appends the settlement outcome to the ledger and moves the reservation in ONE statement, so a
   * crash cannot leave a ledger row without its state (or the reverse). A second 'settled' row for
   * one key is refused by the unique index and skipped here.
   */
  async function recordOutcome(
    payment: VerifiedPayment,
    event: 'settled' | 'pending' | 'failed',
    nextState: 'settled' | 'pending' | 'released',
    context: { agentId?: string | undefined; operationId: string },
    reference?: string,
  ): Promise<void> {
    const rows = await db.query<{ recorded: boolean }>(
      `with ledger as (
         insert into payments_ledger (protocol, protocol_version, event, replay_key, payer, payee, amount_micros, operation_id, agent_id, reference, detail)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         on conflict (replay_key) where event in ('settled', 'reconciled_settled') do nothing
         returning 1
       ), state as (
         update payment_reservations set state = $12, reference = coalesce($10, reference), updated_at = now() where replay_key = $4
       )
       select exists (select 1 from ledger) as recorded`,
      [
        payment.protocol,
        payment.version,
        event,
        payment.replayKey,
        payment.payer.toLowerCase(),
        payment.detail.payTo ?? '',
        payment.amountMicros,
        context.operationId,
        context.agentId ?? null,
        reference ?? null,
        payment.detail,
        nextState,
      ],
    )
    if (!rows[0]?.recorded) logger.error({ replayKey: payment.replayKey }, 'refused a second settlement record for one spend key')
  }

  return {
    paymentRequired,

    async authorize(headers, quote, operationId) {
      const credential = readCredential(headers)
      if (!credential) throw paymentRequired(quote)
      let payment: VerifiedPayment
      try {
        payment = await methods[credential.protocol].verify(credential.value, quote)
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
      if (!(await reserve(payment, operationId))) {
        throw paymentRequired(quote, 'nonce_already_used', 'This payment proof was already used; sign a new one.')
      }
      let done = false
      return {
        payment,
        async release() {
          if (done) return
          done = true
          await setState(payment.replayKey, 'released')
        },
        async commit(context) {
          if (done) throw new Error('payment already committed or released')
          done = true
          if (payment.zeroValue) {
            await setState(payment.replayKey, 'consumed')
            return {}
          }
          // No 'settling' write: a reservation that outlives its process is decided by the
          // reconciler from the chain (nonce used or not), which needs no marker.
          let outcome: SettlementOutcome
          try {
            outcome = await payment.settle()
          } catch (error) {
            // We cannot tell whether anything was broadcast: keep the key taken and reconcile later.
            logger.error({ err: error, replayKey: payment.replayKey }, 'settlement threw; outcome unknown, left for reconciliation')
            outcome = { status: 'pending', reference: '' }
          }
          if (outcome.status === 'settled') {
            await recordOutcome(payment, 'settled', 'settled', context, outcome.reference)
            return outcome.headers
          }
          if (outcome.status === 'pending') {
            await recordOutcome(payment, 'pending', 'pending', context, outcome.reference || undefined)
            return { 'x-payment-status': 'pending', ...(outcome.reference ? { 'x-payment-reference': outcome.reference } : {}) }
          }
          await recordOutcome(payment, 'failed', 'released', context)
          throw paymentRequired(quote, 'settlement_failed', `Settlement failed: ${outcome.reason}. Nothing was charged.`)
        },
      }
    },

    async reconcile(reconcilers) {
      const rows = await db.query<{ replay_key: string; protocol: Protocol; reference: string | null; payer: string; amount_micros: bigint; operation_id: string; detail: Record<string, unknown> }>(
        `select replay_key, protocol, reference, payer, amount_micros, operation_id, detail from payment_reservations
         where state = 'pending' or (state in ('reserved', 'settling') and updated_at < now() - interval '10 minutes')`,
      )
      let changed = 0
      for (const row of rows) {
        const reconciler = reconcilers[row.protocol]
        if (!reconciler) continue
        const ledger = await db.query<{ protocol_version: number; payee: string; agent_id: string | null }>(
          `select protocol_version, payee, agent_id from payments_ledger where replay_key = $1 order by id desc limit 1`,
          [row.replay_key],
        )
        const last = ledger[0]
        let verdict: 'settled' | 'failed' | 'pending'
        try {
          verdict = await reconciler({ replayKey: row.replay_key, reference: row.reference, detail: row.detail })
        } catch (error) {
          // One row the chain cannot answer for must not block the others.
          logger.warn({ err: error, replayKey: row.replay_key }, 'could not reconcile a settlement yet')
          continue
        }
        if (verdict === 'pending') continue
        const event = verdict === 'settled' ? 'reconciled_settled' : 'reconciled_failed'
        await db.transaction(async (tx) => {
          await tx.query(
            `insert into payments_ledger (protocol, protocol_version, event, replay_key, payer, payee, amount_micros, operation_id, agent_id, reference, detail)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             on conflict (replay_key) where event in ('settled', 'reconciled_settled') do nothing`,
            [row.protocol, last?.protocol_version ?? 0, event, row.replay_key, row.payer, String(row.detail.payTo ?? last?.payee ?? ''), row.amount_micros, row.operation_id, last?.agent_id ?? null, row.reference, row.detail],
          )
          await tx.query(`update payment_reservations set state = $2, updated_at = now() where replay_key = $1`, [
            row.replay_key,
            verdict === 'settled' ? 'settled' : 'released',
          ])
        })
        changed += 1
      }
      return changed
    },
  }
}
