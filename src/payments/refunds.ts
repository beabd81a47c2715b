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
// Where the money comes from: refunds are paid by the settler wallet (SETTLER_PRIVATE_KEY), while
// payments go to PAY_TO_ADDRESS. See docs/payments.md "Refunds": the same wallet, or a float.
import { Gauge, type Registry } from 'prom-client'
import type { Db } from '../platform/db/index.ts'
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

/**
 * Which outbox table a Refunds instance sends from, and the column that names a refund in it.
 * Identifiers, not values: only these pairs exist (each table has the columns of scheduler_refunds).
 */
export type RefundOutbox = { table: 'scheduler_refunds'; key: 'task_id' } | { table: 'media_refunds'; key: 'replay_key' } | { table: 'memory_refunds'; key: 'refund_id' }
export const SCHEDULER_REFUNDS: RefundOutbox = { table: 'scheduler_refunds', key: 'task_id' }
export const MEDIA_REFUNDS: RefundOutbox = { table: 'media_refunds', key: 'replay_key' }
export const MEMORY_REFUNDS: RefundOutbox = { table: 'memory_refunds', key: 'refund_id' }

export type RefundState = 'pending' | 'sending' | 'confirmed' | 'failed'

export interface RefundStanding {
  /** Refunds not confirmed yet, and their sum. */
  outstanding: number
  outstandingMicros: bigint
  /** Outstanding for longer than REFUND_STUCK_AFTER_MS. */
  stuck: number
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

export function createRefunds(deps: { db: Db; chain: Pick<ChainPort, 'transfer' | 'resend'>; logger: Logger; outbox?: RefundOutbox }): Refunds {
  const { db, chain, logger } = deps
  const { table, key: column } = deps.outbox ?? SCHEDULER_REFUNDS

  async function settle(
    key: string,
    state: 'confirmed' | 'failed' | 'sending',
    fields: { txHash?: string | null; error?: string | null; attempts: number; clearSigned?: boolean },
  ): Promise<void> {
    const retryIn = state === 'confirmed' ? 0 : backoffMs(fields.attempts)
    await db.query(
      `update ${table}
          set state = $2, tx_hash = coalesce($3, tx_hash), error = $4, updated_at = now(),
              confirmed_at = case when $2 = 'confirmed' then now() else confirmed_at end,
              next_attempt_at = now() + make_interval(secs => $5),
              raw_tx = case when $6 then null else raw_tx end, tx_nonce = case when $6 then null else tx_nonce end
        where ${column} = $1`,
      [key, state, fields.txHash ?? null, fields.error ?? null, retryIn / 1000, fields.clearSigned === true],
    )
  }

  async function send(key: string): Promise<RefundState | undefined> {
    // The claim is a lease: a sender that dies mid-way is resumed by the next one after LEASE_MS.
    const claimed = await db.query<RefundRow>(
      `update ${table} set state = 'sending', attempts = attempts + 1, updated_at = now(), next_attempt_at = now() + make_interval(secs => $2)
        where ${column} = $1 and state <> 'confirmed' and next_attempt_at <= now()
        returning *`,
      [key, LEASE_MS / 1000],
    )
    const refund = claimed[0]
    if (refund === undefined) return undefined
    const to = refund.to_address as Address
    try {
      if (refund.raw_tx !== null && refund.tx_hash !== null && refund.tx_nonce !== null) {
        const resumed = await chain.resend({ hash: refund.tx_hash as Hex, nonce: Number(refund.tx_nonce), raw: refund.raw_tx as Hex }, { to, value: refund.amount_micros })
        if (resumed.status === 'confirmed') {
          await settle(key, 'confirmed', { txHash: resumed.txHash, attempts: refund.attempts })
          return 'confirmed'
        }
        if (resumed.status === 'pending') {
          await settle(key, 'sending', { error: 'receipt pending', attempts: refund.attempts })
          return 'sending'
        }
        // Reverted, or its nonce went to another transaction: nothing moved; sign a new one below.
        logger.warn({ key, txHash: refund.tx_hash, outcome: resumed.status }, 'refund transaction will never be mined; signing a new one')
        await db.query(`update ${table} set raw_tx = null, tx_nonce = null where ${column} = $1`, [key])
      }
      const result = await chain.transfer(to, refund.amount_micros, {
        onSigned: async (tx) => {
          await db.query(`update ${table} set tx_hash = $2, tx_nonce = $3, raw_tx = $4 where ${column} = $1`, [key, tx.hash, tx.nonce, tx.raw])
        },
      })
      if (result.status === 'confirmed') {
        await settle(key, 'confirmed', { txHash: result.txHash, attempts: refund.attempts })
        return 'confirmed'
      }
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

    /** Refunds a dead process was sending: resumed now rather than when its lease runs out. */
    async resumeOrphans(before: Date) {
      await db.query(`update ${table} set next_attempt_at = now() where state = 'sending' and updated_at < $1`, [before])
    },

    async retryDue() {
      const rows = await db.query<{ key: string }>(
        `select ${column} as key from ${table} where state <> 'confirmed' and next_attempt_at <= now() order by next_attempt_at limit 200`,
      )
      for (const row of rows) await send(row.key)
      return rows.length
    },

    async standing() {
      const rows = await db.query<{ outstanding: bigint; micros: bigint | null; stuck: bigint; oldest: string | null; last_error: string | null }>(
        `select count(*)::int8 as outstanding, sum(amount_micros)::int8 as micros,
                count(*) filter (where created_at < now() - make_interval(secs => $1))::int8 as stuck,
                (select ${column} as key from ${table} where state <> 'confirmed' and created_at < now() - make_interval(secs => $1) order by created_at limit 1) as oldest,
                (select error from ${table} where state <> 'confirmed' and error is not null order by updated_at desc limit 1) as last_error
           from ${table} where state <> 'confirmed'`,
        [REFUND_STUCK_AFTER_MS / 1000],
      )
      const row = rows[0]
      return {
        outstanding: Number(row?.outstanding ?? 0n),
        outstandingMicros: row?.micros ?? 0n,
        stuck: Number(row?.stuck ?? 0n),
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
    outstanding_micros: standing.outstandingMicros.toString(),
    oldest: standing.oldestStuckKey,
    last_error: standing.lastError,
    detail:
      'Refunds not confirmed 10 minutes after they were owed; they are retried until confirmed. Check the refund wallet balance (agent_gateway_refund_capacity_micros) and the chain RPC.',
  }
}
