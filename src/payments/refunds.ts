// On-chain refunds as an outbox of signed transactions: the scheduler's closed direct-rail
// escrows, the media role's undelivered songs and the memory service's withdrawals, each in its
// own table of the same shape.
//
// A refund row is written in the transaction that decides it is owed (an escrow closing, never
// above what the task received on-chain; a settled song payment whose candidates were not all
// delivered). Sending it is at-least-once work
// made exactly-once by the chain: the transfer is signed, its hash/nonce/bytes stored, and only
// then broadcast. Whoever picks the row up later (after a crash, a timeout, an RPC outage) asks
// the chain about that exact transaction: mined → done; its nonce used by another transaction →
// it can never be mined, sign a new one; otherwise broadcast the same bytes again. A refund is
// never dropped: one that cannot be sent (the refund wallet is short, the RPC is down) is retried
// with back-off until it is confirmed, and shows in metrics and the scheduler's /readyz detail.
//
// Money leaves only against confirmed receipts. Before a refund is signed, the settlements it
// returns (its RefundSource) must be confirmed on-chain (confirmations.ts), it may not exceed what
// they brought in less what other refunds from them took, and the refund wallet must hold it;
// otherwise it waits ('waiting', with the reason), visibly. A refund is 'confirmed' only once its
// own transaction is final, so one the chain dropped is sent again, never forgotten.
//
// Where the money comes from: refunds are paid by the settler wallet (SETTLER_PRIVATE_KEY), while
// payments go to PAY_TO_ADDRESS. See docs/payments.md "Refunds": the same wallet, or a float.
import { Gauge, type Registry } from 'prom-client'
import type { REFUND_OUTBOX_STATES } from '../catalog/schemas/common.ts'
import type { Db, Queryable } from '../platform/db/index.ts'
import type { Logger } from '../platform/logger.ts'
import type { ChainPort } from './chain/types.ts'
import type { Address, Hex } from './types.ts'

/** First retry after 5 s, doubling up to every 10 minutes. */
const BACKOFF_BASE_MS = 5_000
const BACKOFF_MAX_MS = 10 * 60_000
/** How long one sender holds a row it is working on before another may resume it. */
const LEASE_MS = 2 * 60_000
/** A refund not confirmed this long after its escrow closed is reported as stuck. */
export const REFUND_STUCK_AFTER_MS = 10 * 60_000
/** A refund waiting for confirmations (or for its own transaction to be final) looks again this soon. */
const CONFIRMATION_RETRY_MS = 2_000

/**
 * Which outbox table a Refunds instance sends from, and the column that names a refund in it.
 * Identifiers, not values: only these pairs exist (each table has the columns of scheduler_refunds).
 */
export type RefundOutbox = { table: 'scheduler_refunds'; key: 'task_id' } | { table: 'media_refunds'; key: 'replay_key' } | { table: 'memory_refunds'; key: 'refund_id' }
export const SCHEDULER_REFUNDS: RefundOutbox = { table: 'scheduler_refunds', key: 'task_id' }
export const MEDIA_REFUNDS: RefundOutbox = { table: 'media_refunds', key: 'replay_key' }
export const MEMORY_REFUNDS: RefundOutbox = { table: 'memory_refunds', key: 'refund_id' }

export type RefundState = (typeof REFUND_OUTBOX_STATES)[number]

/** Refund rows still owed (neither confirmed nor cancelled), as SQL over an outbox table. */
export const OPEN_REFUND_SQL = `state not in ('confirmed', 'cancelled')`

/** The payments a refund returns money from, as its domain knows them. */
export interface RefundSource {
  /**
   * The spend keys (payment_reservations) of the settlements refund `key` returns money from,
   * and what other refunds already returned of them.
   */
  of(q: Queryable, key: string): Promise<{ replayKeys: string[]; refundedElsewhereMicros: bigint }>
}

export interface RefundStanding {
  /** Refunds not confirmed yet, and their sum. */
  outstanding: number
  outstandingMicros: bigint
  /** Outstanding for longer than REFUND_STUCK_AFTER_MS. */
  stuck: number
  /** Not signed yet because a settlement they return is not confirmed, or the wallet is short. */
  waiting: number
  /** The key (task id, payment replay key) of the oldest stuck refund. */
  oldestStuckKey: string | null
  lastError: string | null
}

export interface Refunds {
  /** Sends (or resumes) the refund under one key if it is due; returns its state afterwards. */
  send(key: string): Promise<RefundState | undefined>
  /** Every refund that is due; returns how many were attempted. */
  retryDue(): Promise<number>
  /** Refunds whose sender died before `before` are due now (no waiting for the lease). */
  resumeOrphans(before: Date): Promise<void>
  standing(): Promise<RefundStanding>
  /**
   * Inside a transaction: takes up to `micros` (default: all of it) off refund `key` while it is
   * not signed yet (its payment never reached the chain); one brought to 0 is cancelled. Returns
   * what was taken off.
   */
  reduce(tx: Queryable, key: string, micros?: bigint): Promise<bigint>
}

interface RefundRow {
  [column: string]: unknown
  to_address: string
  amount_micros: bigint
  state: RefundState
  tx_hash: string | null
  raw_tx: string | null
  tx_nonce: bigint | null
  attempts: number
}

export function backoffMs(attempts: number): number {
  return Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** Math.max(0, attempts - 1))
}

export type RefundChain = Pick<ChainPort, 'transfer' | 'resend' | 'inclusion' | 'balanceOf' | 'serviceAddress'>

export function createRefunds(deps: {
  db: Db
  chain: RefundChain
  logger: Logger
  outbox?: RefundOutbox
  /** The settlements each refund returns; without it, a refund is not checked against them (tests of the outbox alone). */
  source?: RefundSource
  /** Asks the chain about settlements now (the confirmation sweep), so a refund does not wait for its timer. */
  confirm?: (replayKeys: readonly string[]) => Promise<unknown>
}): Refunds {
  const { db, chain, logger } = deps
  const { table, key: column } = deps.outbox ?? SCHEDULER_REFUNDS

  async function settle(
    key: string,
    state: 'confirmed' | 'failed' | 'sending' | 'waiting',
    fields: { txHash?: string | null; error?: string | null; attempts: number; clearSigned?: boolean; retryInMs?: number },
  ): Promise<void> {
    const retryIn = state === 'confirmed' ? 0 : (fields.retryInMs ?? backoffMs(fields.attempts))
    await db.query(
      `update ${table}
          set state = $2, tx_hash = coalesce($3, tx_hash), error = $4, updated_at = now(),
              confirmed_at = case when $2 = 'confirmed' then now() else confirmed_at end,
              next_attempt_at = now() + make_interval(secs => $5),
              raw_tx = case when $6 then null else raw_tx end, tx_nonce = case when $6 then null else tx_nonce end
        where ${column} = $1 and state <> 'cancelled'`,
      [key, state, fields.txHash ?? null, fields.error ?? null, retryIn / 1000, fields.clearSigned === true],
    )
  }

  /** Mined: 'confirmed' once final, else looked at again shortly (the signed bytes are kept to resend). */
  async function mined(key: string, txHash: Hex, attempts: number): Promise<RefundState> {
    const seen = await chain.inclusion(txHash)
    if (seen.status === 'included' && seen.final) {
      await settle(key, 'confirmed', { txHash, attempts })
      return 'confirmed'
    }
    await settle(key, 'sending', { txHash, error: 'mined, waiting for confirmations', attempts, retryInMs: CONFIRMATION_RETRY_MS })
    return 'sending'
  }

  /** Why refund `refund` may not be signed yet (`confirming`: it waits for confirmations), or undefined when it may. */
  async function holdBack(key: string, refund: RefundRow): Promise<{ reason: string; confirming: boolean } | undefined> {
    if (deps.source !== undefined) {
      const source = await deps.source.of(db, key)
      // The chain was asked before the claim (askChain): asking it here, with the row claimed,
      // would let a reversal it finds skip this refund as possibly signed.
      const open = await unconfirmed(source.replayKeys)
      if (open.length > 0) return { reason: `waiting for ${open.length} payment(s) it returns to be confirmed on-chain`, confirming: true }
      const received = await confirmedMicros(source.replayKeys)
      const ceiling = received - source.refundedElsewhereMicros
      if (refund.amount_micros > ceiling) return { reason: `it would exceed what the chain confirms was received (${ceiling} micros)`, confirming: false }
    }
    const balance = await chain.balanceOf(chain.serviceAddress)
    if (balance < refund.amount_micros) return { reason: `the refund wallet holds ${balance} micros, this refund needs ${refund.amount_micros}`, confirming: false }
    return undefined
  }

  async function unconfirmed(replayKeys: readonly string[]): Promise<string[]> {
    if (replayKeys.length === 0) return []
    const rows = await db.query<{ replay_key: string }>(
      `select replay_key from payment_reservations where replay_key = any($1::text[]) and state not in ('released', 'reversed') and (state <> 'settled' or confirmed_at is null)`,
      [replayKeys],
    )
    return rows.map((row) => row.replay_key)
  }

  async function confirmedMicros(replayKeys: readonly string[]): Promise<bigint> {
    if (replayKeys.length === 0) return 0n
    const rows = await db.query<{ micros: bigint | null }>(
      `select sum(amount_micros)::int8 as micros from payment_reservations where replay_key = any($1::text[]) and state = 'settled' and confirmed_at is not null`,
      [replayKeys],
    )
    return rows[0]?.micros ?? 0n
  }

  /**
   * Asks the chain (the confirmation sweep) about the settlements refund `key` returns that are
   * not confirmed yet, so it need not wait for the sweep's timer. Done before the refund is
   * claimed: a settlement found dropped for good is reversed right here, and its reversal must
   * find this refund unclaimed to reduce or cancel it (a 'sending' row may be signed, so
   * reduce() leaves it alone; this refund would then wait forever for money that never came).
   */
  async function askChain(key: string): Promise<void> {
    if (deps.source === undefined || deps.confirm === undefined) return
    try {
      const open = await unconfirmed((await deps.source.of(db, key)).replayKeys)
      if (open.length > 0) await deps.confirm(open)
    } catch (error) {
      logger.warn({ err: error, key }, 'could not ask the chain about the payments a refund returns; the sweep will')
    }
  }

  async function send(key: string): Promise<RefundState | undefined> {
    await askChain(key)
    // The claim is a lease: a sender that dies mid-way is resumed by the next one after LEASE_MS.
    const claimed = await db.query<RefundRow>(
      `update ${table} set state = 'sending', attempts = attempts + 1, updated_at = now(), next_attempt_at = now() + make_interval(secs => $2)
        where ${column} = $1 and ${OPEN_REFUND_SQL} and next_attempt_at <= now()
        returning *`,
      [key, LEASE_MS / 1000],
    )
    const refund = claimed[0]
    if (refund === undefined) return undefined
    const to = refund.to_address as Address
    try {
      if (refund.raw_tx !== null && refund.tx_hash !== null && refund.tx_nonce !== null) {
        const resumed = await chain.resend({ hash: refund.tx_hash as Hex, nonce: Number(refund.tx_nonce), raw: refund.raw_tx as Hex }, { to, value: refund.amount_micros })
        if (resumed.status === 'confirmed') return await mined(key, resumed.txHash, refund.attempts)
        if (resumed.status === 'pending') {
          await settle(key, 'sending', { error: 'receipt pending', attempts: refund.attempts })
          return 'sending'
        }
        // Reverted, or its nonce went to another transaction: nothing moved; sign a new one below.
        logger.warn({ key, txHash: refund.tx_hash, outcome: resumed.status }, 'refund transaction will never be mined; signing a new one')
        await db.query(`update ${table} set raw_tx = null, tx_nonce = null where ${column} = $1`, [key])
      }
      const held = await holdBack(key, refund)
      if (held !== undefined) {
        if (held.confirming) {
          // Not an attempt: it waits for the chain to confirm, which takes blocks, not back-off.
          await db.query(`update ${table} set attempts = attempts - 1 where ${column} = $1`, [key])
        }
        await settle(key, 'waiting', { error: held.reason, attempts: refund.attempts, retryInMs: held.confirming ? CONFIRMATION_RETRY_MS : backoffMs(refund.attempts) })
        return 'waiting'
      }
      const result = await chain.transfer(to, refund.amount_micros, {
        onSigned: async (tx) => {
          // Recorded only if nobody reduced or cancelled the refund since it was claimed (a
          // reversal may, while it is unsigned): otherwise nothing is broadcast.
          const recorded = await db.query(
            `update ${table} set tx_hash = $2, tx_nonce = $3, raw_tx = $4 where ${column} = $1 and state = 'sending' and amount_micros = $5 returning 1`,
            [key, tx.hash, tx.nonce, tx.raw, refund.amount_micros],
          )
          if (recorded.length === 0) throw new Error('the refund was reduced or cancelled while it was being signed')
        },
      })
      if (result.status === 'confirmed') return await mined(key, result.txHash, refund.attempts)
      if (result.status === 'pending') {
        // Broadcast, receipt not seen: the stored transaction is resumed on the next attempt.
        await settle(key, 'sending', { txHash: result.txHash, error: 'receipt pending', attempts: refund.attempts })
        return 'sending'
      }
      logger.warn({ key, reason: result.reason, attempts: refund.attempts }, 'refund not sent; retried with back-off')
      await settle(key, 'failed', { error: result.reason, attempts: refund.attempts, clearSigned: true })
      return 'failed'
    } catch (error) {
      // The chain could not be asked (RPC down): the row keeps any signed transaction, which the
      // next attempt resumes before it would sign another.
      logger.warn({ err: error, key }, 'refund attempt failed; retried with back-off')
      await settle(key, 'failed', { error: String((error as Error).message ?? error), attempts: refund.attempts })
      return 'failed'
    }
  }

  return {
    send,

    async reduce(tx, key, micros) {
      const row = (
        await tx.query<{ amount_micros: bigint; state: RefundState; raw_tx: string | null }>(`select amount_micros, state, raw_tx from ${table} where ${column} = $1 for update`, [
          key,
        ])
      )[0]
      if (row === undefined || (micros !== undefined && micros <= 0n)) return 0n
      // Signed (or sent) refunds are past taking back; the source check keeps them from being signed
      // early. An unsigned one being sent ('sending', no raw_tx) may be reduced: its signer records
      // the signed transaction only if the amount is still the one it signed.
      if (row.raw_tx !== null || !['pending', 'waiting', 'failed', 'sending'].includes(row.state)) {
        logger.error({ key, state: row.state }, 'a refund to reduce was already signed; left as it is')
        return 0n
      }
      const taken = micros !== undefined && micros < row.amount_micros ? micros : row.amount_micros
      const left = row.amount_micros - taken
      // A cancelled row keeps the amount it was owed (amounts are positive), for the record.
      if (left === 0n) await tx.query(`update ${table} set state = 'cancelled', updated_at = now() where ${column} = $1`, [key])
      else await tx.query(`update ${table} set amount_micros = $2, updated_at = now() where ${column} = $1`, [key, left])
      return taken
    },

    /** Refunds a dead process was sending: resumed now rather than when its lease runs out. */
    async resumeOrphans(before: Date) {
      await db.query(`update ${table} set next_attempt_at = now() where state = 'sending' and updated_at < $1`, [before])
    },

    async retryDue() {
      const rows = await db.query<{ key: string }>(`select ${column} as key from ${table} where ${OPEN_REFUND_SQL} and next_attempt_at <= now() order by next_attempt_at limit 200`)
      for (const row of rows) await send(row.key)
      return rows.length
    },

    async standing() {
      const rows = await db.query<{ outstanding: bigint; micros: bigint | null; stuck: bigint; waiting: bigint; oldest: string | null; last_error: string | null }>(
        `select count(*)::int8 as outstanding, sum(amount_micros)::int8 as micros,
                count(*) filter (where created_at < now() - make_interval(secs => $1))::int8 as stuck,
                count(*) filter (where state = 'waiting')::int8 as waiting,
                (select ${column} as key from ${table} where ${OPEN_REFUND_SQL} and created_at < now() - make_interval(secs => $1) order by created_at limit 1) as oldest,
                (select error from ${table} where ${OPEN_REFUND_SQL} and error is not null order by updated_at desc limit 1) as last_error
           from ${table} where ${OPEN_REFUND_SQL}`,
        [REFUND_STUCK_AFTER_MS / 1000],
      )
      const row = rows[0]
      return {
        outstanding: Number(row?.outstanding ?? 0n),
        outstandingMicros: row?.micros ?? 0n,
        stuck: Number(row?.stuck ?? 0n),
        waiting: Number(row?.waiting ?? 0n),
        oldestStuckKey: row?.oldest ?? null,
        lastError: row?.last_error ?? null,
      }
    },
  }
}

/**
 * Refund capacity in metrics, read at scrape time: what is owed (outstanding, stuck) and what the
 * refund wallet holds (cached for 30 s: one RPC read per half minute at most).
 */
export function registerRefundMetrics(registry: Registry, source: { standing(): Promise<RefundStanding>; walletBalance(): Promise<bigint> }): void {
  let cached: { at: number; value: bigint } | undefined
  const wallet = async (): Promise<bigint | undefined> => {
    if (cached === undefined || Date.now() - cached.at > 30_000) {
      try {
        cached = { at: Date.now(), value: await source.walletBalance() }
      } catch {
        return cached?.value
      }
    }
    return cached.value
  }
  let standing: Promise<RefundStanding> | undefined
  // One read of the refund table for the gauges a scrape collects together.
  const current = () =>
    (standing ??= source.standing().finally(() => {
      standing = undefined
    }))
  const gauge = (name: string, help: string, read: () => Promise<number | undefined>) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      async collect() {
        const value = await read().catch(() => undefined)
        if (value !== undefined) this.set(value)
      },
    })
  gauge('agent_gateway_refunds_outstanding', 'Refunds owed on-chain and not confirmed yet', async () => (await current()).outstanding)
  gauge('agent_gateway_refunds_outstanding_micros', 'USDC micros owed in refunds not confirmed yet', async () => Number((await current()).outstandingMicros))
  gauge(
    'agent_gateway_refunds_waiting',
    'Refunds not signed yet: a payment they return is not confirmed on-chain, or the refund wallet is short',
    async () => (await current()).waiting,
  )
  gauge('agent_gateway_refunds_stuck', `Refunds not confirmed ${REFUND_STUCK_AFTER_MS / 60_000} minutes after their escrow closed`, async () => (await current()).stuck)
  gauge('agent_gateway_refund_wallet_balance_micros', 'USDC micros held by the refund (settler) wallet', async () => {
    const value = await wallet()
    return value === undefined ? undefined : Number(value)
  })
  gauge('agent_gateway_refund_capacity_micros', 'Refund wallet balance minus refunds owed; below 0 the wallet cannot pay every refund owed', async () => {
    const value = await wallet()
    return value === undefined ? undefined : Number(value - (await current()).outstandingMicros)
  })
}

/** /readyz detail: refunds owed for long (REFUND_STUCK_AFTER_MS), or undefined when there are none. */
export async function stuckRefunds(refunds: Pick<Refunds, 'standing'>): Promise<Record<string, unknown> | undefined> {
  const standing = await refunds.standing()
  if (standing.stuck === 0) return undefined
  return {
    stuck: standing.stuck,
    outstanding: standing.outstanding,
    waiting: standing.waiting,
    outstanding_micros: standing.outstandingMicros.toString(),
    oldest: standing.oldestStuckKey,
    last_error: standing.lastError,
    detail:
      'Refunds not confirmed 10 minutes after they were owed; they are retried until confirmed. Check the refund wallet balance (agent_gateway_refund_capacity_micros) and the chain RPC.',
  }
}
