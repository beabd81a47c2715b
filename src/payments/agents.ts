// Agents, their access tokens, plans and free included units. Tokens and claim codes are stored
// as SHA-256 only; a plan's credit is the SUM of its append-only ledger rows.
import { createHash, randomBytes } from 'node:crypto'
import type { Db, Queryable } from '../platform/db/index.ts'
import { isUniqueViolation } from '../platform/db/index.ts'
import { AppError } from '../platform/errors.ts'
import type { Clock } from '../platform/clock.ts'
import type { PlanSpec } from '../catalog/types.ts'
import type { OutcomeHandler } from './outcomes.ts'
import { TOKEN_PREFIXES } from './credentials.ts'

/** The outcome handler name of plan purchases (payment_reservations.effect). */
export const PLAN_PURCHASE_EFFECT = 'plan.purchase'

export const ACCESS_TOKEN_PREFIX = TOKEN_PREFIXES['access-token']
const CLAIM_TTL_MS = 24 * 60 * 60 * 1000

export function sha256(value: string): string {
  return createHash('sha256').update(value).digest('hex')
}

function newId(prefix: string): string {
  return `${prefix}_${randomBytes(12).toString('base64url')}`
}

export interface Agent {
  id: string
  claimedEmail: string | null
}

/** A covering plan the caller holds, and what is left on it. */
export interface PlanStanding {
  planId: string
  kind: 'credit' | 'subscription'
  purchaseId: string
  remainingMicros?: bigint
  remainingCalls?: number
}

export interface AgentStore {
  register(): Promise<{ agentId: string; accessToken: string }>
  findByToken(token: string): Promise<Agent | undefined>
  /** Starts a claim: returns the one-time code to mail to the human. */
  startClaim(agentId: string, email: string): Promise<{ code: string; expiresAt: Date }>
  /** Completes a claim with the mailed code; idempotent for the same code. */
  completeClaim(code: string): Promise<Agent>
  /**
   * Records a purchase bought with the payment `replayKey`. With `bind` (a paid purchase) it is
   * provisional, bound to the payment in the same transaction, and becomes usable when the
   * payment settles (purchaseOutcomes); without it (a grant) it is active at once.
   */
  activatePlan(input: {
    agentId: string
    plan: PlanSpec
    replayKey: string
    bind?: ((tx: Queryable, effect: string) => Promise<void>) | undefined
  }): Promise<{ purchaseId: string; endsAt: Date | null; creditMicros: bigint | null }>
  /** The purchase bought with `replayKey`, as it stands. */
  purchaseOf(replayKey: string): Promise<{ purchaseId: string; state: 'provisional' | 'active' | 'cancelled'; endsAt: Date | null } | undefined>
  /** Activates (grant, period from now) or cancels a provisional purchase once its payment is decided. */
  readonly purchaseOutcomes: OutcomeHandler
  /** Plans of the agent that cover `service` and still have room. */
  coveringPlans(agentId: string, service: string, plans: readonly PlanSpec[], costMicros: bigint): Promise<PlanStanding[]>
  /** Debits one call from a covering plan; returns an undo for failed work, or undefined when nothing covers it. */
  debitPlan(input: {
    agentId: string
    service: string
    plans: readonly PlanSpec[]
    costMicros: bigint
    operationId: string
    requestId: string
  }): Promise<{ standing: PlanStanding; undo(): Promise<void> } | undefined>
  /** Takes one free unit of `meter` if any is left (exactly once under concurrency); undo returns it. */
  takeIncludedUnit(input: { accountKey: string; meter: string; includedUnits: number; operationId: string }): Promise<{ undo(): Promise<void> } | undefined>
  includedUnitsLeft(accountKey: string, meter: string, includedUnits: number): Promise<number>
}

async function creditBalance(q: Queryable, agentId: string, planId: string): Promise<bigint> {
  const rows = await q.query<{ balance: bigint }>(`select coalesce(sum(amount_micros), 0)::int8 as balance from plan_credit_ledger where agent_id = $1 and plan_id = $2`, [
    agentId,
    planId,
  ])
  return rows[0]?.balance ?? 0n
}

/**
 * Plans of `agentId` covering `service` at `now` that still have room for `costMicros` (credit) or
 * one call (subscription), subscriptions first. Runs on any Queryable, so a caller can ask inside
 * its own transaction (the scheduler's marketplace usage reports do).
 */
export async function planStandings(q: Queryable, now: Date, agentId: string, service: string, plans: readonly PlanSpec[], costMicros: bigint): Promise<PlanStanding[]> {
  const covering = plans.filter((plan) => plan.covers.includes(service))
  if (covering.length === 0) return []
  const purchases = await q.query<{ id: string; plan_id: string; kind: 'credit' | 'subscription'; ends_at: Date | null; calls_per_period: number | null }>(
    `select id, plan_id, kind, ends_at, calls_per_period from plan_purchases
     where agent_id = $1 and plan_id = any($2) and state = 'active' and starts_at <= $3 and (ends_at is null or ends_at > $3)
     order by created_at`,
    [agentId, covering.map((plan) => plan.id), now],
  )
  const result: PlanStanding[] = []
  const seenCredit = new Set<string>()
  for (const purchase of purchases) {
    if (purchase.kind === 'credit') {
      if (seenCredit.has(purchase.plan_id)) continue
      seenCredit.add(purchase.plan_id)
      const remainingMicros = await creditBalance(q, agentId, purchase.plan_id)
      if (remainingMicros >= costMicros) result.push({ planId: purchase.plan_id, kind: 'credit', purchaseId: purchase.id, remainingMicros })
    } else {
      const used = await q.query<{ n: bigint }>(`select count(*)::int8 as n from plan_subscription_calls where purchase_id = $1`, [purchase.id])
      const remainingCalls = (purchase.calls_per_period ?? 0) - Number(used[0]?.n ?? 0n)
      if (remainingCalls > 0) result.push({ planId: purchase.plan_id, kind: 'subscription', purchaseId: purchase.id, remainingCalls })
    }
  }
  // Subscriptions first: their calls are already paid for and expire.
  return result.sort((a, b) => (a.kind === b.kind ? 0 : a.kind === 'subscription' ? -1 : 1))
}

function periodEnd(plan: PlanSpec, from: Date): Date | null {
  return plan.kind === 'subscription' && plan.periodDays ? new Date(from.getTime() + plan.periodDays * 86_400_000) : null
}

async function grantCredit(tx: Queryable, agentId: string, plan: PlanSpec, purchaseId: string): Promise<void> {
  await tx.query(`insert into plan_credit_ledger (agent_id, plan_id, kind, amount_micros, request_id) values ($1, $2, 'grant', $3, $4)`, [
    agentId,
    plan.id,
    plan.creditMicros ?? plan.priceMicros,
    `purchase:${purchaseId}`,
  ])
}

/** The purchase bought with `replayKey`, locked for its payment's decision. */
async function lockPurchase(tx: Queryable, replayKey: string) {
  const rows = await tx.query<{ id: string; agent_id: string; plan_id: string; state: string }>(
    `select id, agent_id, plan_id, state from plan_purchases where replay_key = $1 for update`,
    [replayKey],
  )
  return rows[0]
}

/** `plans`: every plan of the registry (a settled purchase is activated from its spec). */
/**
 * Debits one call of `service` from the agent's best covering plan inside the caller's
 * transaction `tx` (so the debit commits with the work it pays for, or not at all): credit plans
 * lose `costMicros`, subscriptions one call. Locks the agent row first, which serialises every
 * debit of one agent. Undefined when no plan has room (nothing written).
 */
export async function debitPlanIn(
  tx: Queryable,
  now: Date,
  input: { agentId: string; service: string; plans: readonly PlanSpec[]; costMicros: bigint; operationId: string; requestId: string },
): Promise<{ standing: PlanStanding; debitId?: bigint; ordinal?: number } | undefined> {
  const { agentId, costMicros, operationId, requestId } = input
  await tx.query(`select id from agents where id = $1 for update`, [agentId])
  const standing = (await planStandings(tx, now, agentId, input.service, input.plans, costMicros))[0]
  if (!standing) return undefined
  if (standing.kind === 'credit') {
    const rows = await tx.query<{ id: bigint }>(
      `insert into plan_credit_ledger (agent_id, plan_id, kind, amount_micros, operation_id, request_id) values ($1, $2, 'debit', $3, $4, $5) returning id`,
      [agentId, standing.planId, -costMicros, operationId, requestId],
    )
    return { standing: { ...standing, remainingMicros: (standing.remainingMicros ?? 0n) - costMicros }, debitId: rows[0]?.id ?? 0n }
  }
  const next = await tx.query<{ n: number }>(`select coalesce(max(ordinal), 0) + 1 as n from plan_subscription_calls where purchase_id = $1`, [standing.purchaseId])
  const ordinal = next[0]?.n ?? 1
  await tx.query(`insert into plan_subscription_calls (purchase_id, ordinal, operation_id) values ($1, $2, $3)`, [standing.purchaseId, ordinal, operationId])
  return { standing: { ...standing, remainingCalls: (standing.remainingCalls ?? 1) - 1 }, ordinal }
}

export function createAgentStore(db: Db, clock: Clock, plans: readonly PlanSpec[] = []): AgentStore {
  const plansById = new Map(plans.map((plan) => [plan.id, plan]))
  const standings = (q: Queryable, agentId: string, service: string, plans: readonly PlanSpec[], costMicros: bigint) =>
    planStandings(q, clock.now(), agentId, service, plans, costMicros)

  async function usedUnits(q: Queryable, accountKey: string, meter: string): Promise<number> {
    const rows = await q.query<{ n: bigint }>(`select count(*)::int8 as n from included_unit_claims where account_key = $1 and meter = $2`, [accountKey, meter])
    return Number(rows[0]?.n ?? 0n)
  }

  return {
    async register() {
      const agentId = newId('agt')
      const accessToken = ACCESS_TOKEN_PREFIX + randomBytes(32).toString('base64url')
      await db.query(`insert into agents (id, token_hash) values ($1, $2)`, [agentId, sha256(accessToken)])
      return { agentId, accessToken }
    },

    async findByToken(token) {
      if (!token.startsWith(ACCESS_TOKEN_PREFIX)) return undefined
      const rows = await db.query<{ id: string; claimed_email: string | null }>(`select id, claimed_email from agents where token_hash = $1`, [sha256(token)])
      const row = rows[0]
      return row ? { id: row.id, claimedEmail: row.claimed_email } : undefined
    },

    async startClaim(agentId, email) {
      const code = randomBytes(24).toString('base64url')
      const expiresAt = new Date(clock.nowMs() + CLAIM_TTL_MS)
      await db.query(`insert into agent_claims (token_hash, agent_id, email, expires_at) values ($1, $2, $3, $4)`, [sha256(code), agentId, email, expiresAt])
      return { code, expiresAt }
    },

    async completeClaim(code) {
      return db.transaction(async (tx) => {
        const rows = await tx.query<{ agent_id: string; email: string; expires_at: Date; used_at: Date | null }>(
          `select agent_id, email, expires_at, used_at from agent_claims where token_hash = $1 for update`,
          [sha256(code)],
        )
        const claim = rows[0]
        if (!claim) throw new AppError('not_found', 'Unknown or already replaced verification code', { field: 'body.code' })
        if (claim.used_at === null && claim.expires_at.getTime() < clock.nowMs()) {
          throw new AppError('validation_error', 'The verification code has expired; start the claim again', { field: 'body.code' })
        }
        if (claim.used_at === null) {
          await tx.query(`update agent_claims set used_at = $2 where token_hash = $1`, [sha256(code), clock.now()])
          await tx.query(`update agents set claimed_email = $2, claimed_at = $3 where id = $1`, [claim.agent_id, claim.email, clock.now()])
        }
        return { id: claim.agent_id, claimedEmail: claim.email }
      })
    },

    async activatePlan({ agentId, plan, replayKey, bind }) {
      const purchaseId = newId('pur')
      const now = clock.now()
      const endsAt = periodEnd(plan, now)
      try {
        await db.transaction(async (tx) => {
          await tx.query(
            `insert into plan_purchases (id, agent_id, plan_id, kind, replay_key, price_micros, starts_at, ends_at, calls_per_period, state, decided_at)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
            [purchaseId, agentId, plan.id, plan.kind, replayKey, plan.priceMicros, now, endsAt, plan.callsPerPeriod ?? null, bind ? 'provisional' : 'active', bind ? null : now],
          )
          if (bind) await bind(tx, PLAN_PURCHASE_EFFECT)
          else if (plan.kind === 'credit') await grantCredit(tx, agentId, plan, purchaseId)
        })
      } catch (error) {
        if (isUniqueViolation(error)) throw new AppError('payment_invalid', 'This payment already bought a plan', { extensions: { reason: 'nonce_already_used' } })
        throw error
      }
      return { purchaseId, endsAt, creditMicros: plan.kind === 'credit' ? (plan.creditMicros ?? plan.priceMicros) : null }
    },

    async purchaseOf(replayKey) {
      const row = (
        await db.query<{ id: string; state: 'provisional' | 'active' | 'cancelled'; ends_at: Date | null }>(`select id, state, ends_at from plan_purchases where replay_key = $1`, [
          replayKey,
        ])
      )[0]
      return row === undefined ? undefined : { purchaseId: row.id, state: row.state, endsAt: row.ends_at }
    },

    purchaseOutcomes: {
      async settled(tx, replayKey) {
        const purchase = await lockPurchase(tx, replayKey)
        if (purchase === undefined || purchase.state !== 'provisional') return
        const plan = plansById.get(purchase.plan_id)
        const now = clock.now()
        // The period starts when the plan becomes usable, not when it was ordered.
        await tx.query(`update plan_purchases set state = 'active', starts_at = $2, ends_at = $3, decided_at = $2 where id = $1`, [
          purchase.id,
          now,
          plan ? periodEnd(plan, now) : null,
        ])
        if (plan?.kind === 'credit') await grantCredit(tx, purchase.agent_id, plan, purchase.id)
      },
      async failed(tx, replayKey) {
        await tx.query(`update plan_purchases set state = 'cancelled', decided_at = $2 where replay_key = $1 and state = 'provisional'`, [replayKey, clock.now()])
      },
      async reversed(tx, replayKey) {
        // The chain dropped the payment for good: the plan stops covering, and what is left of its
        // credit grant goes with it (what was already spent of it is the service's loss).
        const purchase = await lockPurchase(tx, replayKey)
        if (purchase === undefined || purchase.state === 'cancelled') return
        await tx.query(`update plan_purchases set state = 'cancelled', decided_at = $2 where id = $1`, [purchase.id, clock.now()])
        const plan = plansById.get(purchase.plan_id)
        if (purchase.state !== 'active' || plan?.kind !== 'credit') return
        const grant = plan.creditMicros ?? plan.priceMicros
        // Serialised with the agent's debits, as debitPlanIn does.
        await tx.query(`select id from agents where id = $1 for update`, [purchase.agent_id])
        const balance = await creditBalance(tx, purchase.agent_id, plan.id)
        const taken = balance < grant ? balance : grant
        if (taken <= 0n) return
        await tx.query(`insert into plan_credit_ledger (agent_id, plan_id, kind, amount_micros, request_id) values ($1, $2, 'reversal', $3, $4)`, [
          purchase.agent_id,
          plan.id,
          -taken,
          `reversed:${purchase.id}`,
        ])
      },
    },

    coveringPlans: (agentId, service, plans, costMicros) => standings(db, agentId, service, plans, costMicros),

    async debitPlan({ agentId, service, plans, costMicros, operationId, requestId }) {
      return db.transaction(async (tx) => {
        const debit = await debitPlanIn(tx, clock.now(), { agentId, service, plans, costMicros, operationId, requestId })
        if (debit === undefined) return undefined
        const { standing } = debit
        if (debit.debitId !== undefined) {
          const debitId = debit.debitId
          return {
            standing,
            undo: async () => {
              await db.query(`insert into plan_credit_ledger (agent_id, plan_id, kind, amount_micros, operation_id, request_id) values ($1, $2, 'refund', $3, $4, $5)`, [
                agentId,
                standing.planId,
                costMicros,
                operationId,
                `${requestId}:refund:${debitId}`,
              ])
            },
          }
        }
        const ordinal = debit.ordinal
        return {
          standing,
          undo: async () => {
            await db.query(`delete from plan_subscription_calls where purchase_id = $1 and ordinal = $2`, [standing.purchaseId, ordinal])
          },
        }
      })
    },

    async takeIncludedUnit({ accountKey, meter, includedUnits, operationId }) {
      // Ordinals 1..includedUnits are unique per (account, meter): the insert is the claim.
      for (let ordinal = 1; ordinal <= includedUnits; ordinal += 1) {
        try {
          await db.query(`insert into included_unit_claims (account_key, meter, ordinal, operation_id) values ($1, $2, $3, $4)`, [accountKey, meter, ordinal, operationId])
          return {
            undo: async () => {
              await db.query(`delete from included_unit_claims where account_key = $1 and meter = $2 and ordinal = $3`, [accountKey, meter, ordinal])
            },
          }
        } catch (error) {
          if (!isUniqueViolation(error)) throw error
        }
      }
      return undefined
    },

    async includedUnitsLeft(accountKey, meter, includedUnits) {
      return Math.max(0, includedUnits - (await usedUnits(db, accountKey, meter)))
    },
  }
}
