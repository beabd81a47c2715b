// The scheduler's marketplace rail (SPEC "Marketplace rail: marketplace access plus usage
// reporting; max_amount_usdc_micros is only a seller-local lifetime execution cap, not refundable;
// no seller-held buyer balance exists"), on the gateway's own marketplace: its agents, access
// tokens and plans (src/payments/agents.ts) and the scheduler's meter and plans in the registry.
//
// - Access: a create (or a fund) that carries `Authorization: Bearer <accessToken>` instead of a
//   payment is a marketplace call. The token must name an agent (else 401 bearer_required) holding
//   a plan that covers the scheduler with room for one per-run ceiling (else 403 plan_required,
//   listing the plans). Nothing is paid to the scheduler and nothing is held for the buyer.
// - Identity: the task's owner is the plan holder, stored as `agent:<agentId>` (never a wallet);
//   the same token proves ownership on the owner endpoints. A wallet proof never reaches a
//   marketplace task and a token never reaches a direct-rail task (404, like a stranger's task).
// - Usage: each finished run with a cost reports it once on the scheduler meter (1 unit = 1
//   micro-USD of the rate card): a row in scheduler_usage_reports (primary key = run id, the
//   idempotency guard), an audit-only 'usage' ledger row, and the plan debit (credit: the cost,
//   after any free included units of a claimed agent; subscription: one call). It runs inside the
//   finishing transaction, so a run is reported exactly when it is settled, once.
// - The cap is the domain's: charge rows hold the cap (and its raises by fund), run_cost rows the
//   runs against it, so available = cap - cumulative cost - open reservations (escrow.ts).
// - Plan exhaustion: a task is refused new runs (403) when its holder's plan no longer covers one
//   ceiling (run now, webhook, trigger, resume, fund), and after each reported run an active task
//   whose holder can no longer cover the next ceiling is paused (paused_insufficient_funds with a
//   recovery_hint naming the plan to buy). Scheduled runs are claimed by the run controller without
//   this check, so a holder running several tasks on one credit plan can overdraw it by at most one
//   run per task; the overdraft stays on the plan's ledger and the next purchase covers it.
import { AppError } from '../platform/errors.ts'
import type { Clock } from '../platform/clock.ts'
import type { Db, Queryable } from '../platform/db/index.ts'
import type { Logger } from '../platform/logger.ts'
import { formatUsd, type Micros } from '../platform/money.ts'
import { createHash } from 'node:crypto'
import { findService } from '../catalog/registry.ts'
import type { Meter, PlanSpec, ServiceSpec } from '../catalog/types.ts'
import { createAgentStore, planStandings, type AgentStore, type PlanStanding } from '../payments/agents.ts'
import { registrationRecipe } from '../payments/access.ts'
import { credentialsOf, type HeaderBag } from '../payments/credentials.ts'
import type { SchedulerRates } from './domain/rates.ts'
import { isTerminal } from './domain/states.ts'
import { ceilingOf, type RunRow, type SerializedHint, type StoredSpec, type TaskRow } from './records.ts'
import { appendUsage, holderReserved } from './escrow-store.ts'
import { pauseActiveForFunds, taskStatus } from './task-store.ts'

/** Owners of marketplace tasks are plan holders: `agent:<agentId>`. Direct-rail owners are 0x wallets. */
export const MARKETPLACE_OWNER_PREFIX = 'agent:'
/** operation_id of the plan debits written for scheduler runs. */
export const USAGE_OPERATION_ID = 'scheduler.run'

export function marketplaceOwner(agentId: string): string {
  return MARKETPLACE_OWNER_PREFIX + agentId
}

export function agentIdOfOwner(owner: string): string | undefined {
  return owner.startsWith(MARKETPLACE_OWNER_PREFIX) ? owner.slice(MARKETPLACE_OWNER_PREFIX.length) : undefined
}

/** Owner ids compare as stored: wallets lowercase, agent ids (base64url) exactly. */
export function normalizeOwner(owner: string): string {
  return owner.startsWith('0x') || owner.startsWith('0X') ? owner.toLowerCase() : owner
}

/**
 * A Kubernetes label value for the owner (63 characters of [A-Za-z0-9_.-], alphanumeric at both
 * ends): the wallet without 0x as before, or `agent-` and a digest of the agent id.
 */
export function ownerLabel(owner: string): string {
  if (agentIdOfOwner(owner) === undefined) return owner.slice(2, 42)
  return `agent-${createHash('sha256').update(owner).digest('hex').slice(0, 40)}`
}

export interface PlanHolder {
  agentId: string
  /** The task owner id of this holder (`agent:<agentId>`). */
  owner: string
  claimedEmail: string | null
}

export interface SchedulerMarketplaceDeps {
  db: Db
  clock: Clock
  rates: SchedulerRates
  logger: Logger
  /** Public base of the gateway, for plan purchase links (default: paths only). */
  gatewayUrl?: string | undefined
  /** The scheduler's registry entry (meter and plans); default the registry's `scheduler`. */
  service?: ServiceSpec
  agents?: AgentStore
}

/** What a finished run's usage report changed after commit (merged into finishRun's AfterCommit). */
export interface UsageReportEffects {
  /** The task was paused: suspend its Task resource. */
  syncSuspend?: boolean
}

export function createSchedulerMarketplace(deps: SchedulerMarketplaceDeps) {
  const { db, clock, rates, logger } = deps
  const service = deps.service ?? findService('scheduler')
  if (service === undefined) throw new Error('the registry has no scheduler service')
  const meter: Meter | undefined = service.meter
  const plans: readonly PlanSpec[] = service.plans.filter((plan) => plan.covers.includes(service.slug))
  const agents = deps.agents ?? createAgentStore(db, clock)
  const gateway = deps.gatewayUrl ?? ''

  function planOffers(): Record<string, unknown>[] {
    return plans.map((plan) => ({
      id: plan.id,
      kind: plan.kind,
      title: plan.title,
      price: { amountMicros: plan.priceMicros.toString(), amountUsd: formatUsd(plan.priceMicros) },
      purchase: `${gateway}/plans/${plan.id}/purchase`,
    }))
  }

  function purchaseHint(): string {
    const first = plans[0]
    return first ? `POST ${gateway}/plans/${first.id}/purchase` : `see ${gateway}/services/${service!.slug}`
  }

  /**
   * The plan holder named by `Authorization: Bearer`, or undefined when there is none. A token that
   * names no agent answers 401 bearer_required with the registration recipe.
   */
  async function holder(headers: HeaderBag): Promise<PlanHolder | undefined> {
    const bearer = credentialsOf(headers).bearer // Authorization only: never Svc-Agent-Authorization
    if (bearer === undefined) return undefined
    // A bearer that breaks the token syntax is answered like an unknown token.
    const agent = bearer.valid ? await agents.findByToken(bearer.token) : undefined
    if (agent === undefined) {
      throw new AppError(
        'bearer_required',
        'Authorization: Bearer carries no known access token; register at POST /auth/register on the gateway and buy a plan covering the scheduler',
        {
          field: 'header.authorization',
          extensions: { recipe: registrationRecipe(gateway), plans: planOffers() },
        },
      )
    }
    return { agentId: agent.id, owner: marketplaceOwner(agent.id), claimedEmail: agent.claimedEmail }
  }

  /** The holder's best covering plan with room for `ceiling`; 403 plan_required otherwise. */
  async function requireAccess(agentId: string, ceiling: Micros, q: Queryable = db): Promise<PlanStanding> {
    const standing = (await planStandings(q, clock.now(), agentId, service!.slug, plans, ceiling))[0]
    if (standing !== undefined) return standing
    const left = await creditLeft(q, agentId)
    throw new AppError(
      'plan_required',
      `No active plan of yours covers a scheduler run: the per-run ceiling is ${formatUsd(ceiling)} USD and your plan credit is ${formatUsd(left)} USD; buy one of the listed plans (${purchaseHint()})`,
      { extensions: { plans: planOffers(), ceiling_micros: ceiling.toString(), credit_micros: left.toString() } },
    )
  }

  /** The largest credit left on the holder's active covering credit plans (0 when none). */
  async function creditLeft(q: Queryable, agentId: string): Promise<Micros> {
    const standings = await planStandings(q, clock.now(), agentId, service!.slug, plans, 0n)
    let best = 0n
    for (const standing of standings) if (standing.remainingMicros !== undefined && standing.remainingMicros > best) best = standing.remainingMicros
    return best
  }

  /**
   * What the holder's plans can still pay for: the best plan credit left minus what the holder's
   * marketplace runs in flight have reserved. The dispatch funding check of a marketplace task
   * uses min(remaining cap, this), so a holder with several tasks on one plan cannot overdraw it.
   */
  async function planRoom(q: Queryable, owner: string): Promise<Micros> {
    const agentId = agentIdOfOwner(owner)
    if (agentId === undefined) return 0n
    return (await creditLeft(q, agentId)) - (await holderReserved(q, owner))
  }

  /**
   * Before a run is asked for (run now, webhook, trigger, resume, fund): a marketplace task whose
   * holder has no covering plan for one ceiling answers 403 plan_required. Other rails and
   * terminal tasks pass (the state machine answers those).
   */
  async function assertCanRun(task: Pick<TaskRow, 'rail' | 'owner' | 'status'> & { spec: StoredSpec }): Promise<void> {
    if (task.rail !== 'marketplace' || isTerminal(task.status)) return
    const agentId = agentIdOfOwner(task.owner)
    if (agentId === undefined) throw new AppError('INTERNAL', 'a marketplace task without a plan holder')
    await requireAccess(agentId, ceilingOf(task.spec, rates))
  }

  /**
   * Reports a finished run's usage, exactly once per run, inside the finishing transaction `tx`
   * (which holds the run row locked): the usage report, the audit-only 'usage' ledger row, the
   * plan debit, and the pause of an active task whose holder cannot cover the next ceiling.
   * Direct-rail tasks and runs that cost nothing report nothing.
   */
  async function reportRunUsage(tx: Queryable, task: Pick<TaskRow, 'id' | 'rail' | 'owner' | 'spec'>, run: Pick<RunRow, 'id' | 'cost_micros'>): Promise<UsageReportEffects> {
    if (task.rail !== 'marketplace' || run.cost_micros <= 0n || meter === undefined) return {}
    const agentId = agentIdOfOwner(task.owner)
    if (agentId === undefined) {
      logger.error({ taskId: task.id, runId: run.id }, 'marketplace task without a plan holder: usage not reported')
      return {}
    }
    // The same per-agent lock the gateway's plan debits take: one debit at a time per holder.
    const agent = (await tx.query<{ claimed_email: string | null }>(`select claimed_email from agents where id = $1 for update`, [agentId]))[0]
    if (agent === undefined) {
      logger.error({ taskId: task.id, runId: run.id, agentId }, 'the plan holder of a marketplace task is gone: usage not reported')
      return {}
    }
    if ((await tx.query(`select 1 from scheduler_usage_reports where run_id = $1`, [run.id])).length > 0) return {}

    const price = meter.unitPriceMicros > 0n ? meter.unitPriceMicros : 1n
    const units = (run.cost_micros + price - 1n) / price
    let free = 0n
    if (meter.includedUnits > 0 && agent.claimed_email !== null) {
      // Free included units apply only to claimed agents (SPEC 5), counted across all their reports.
      const used =
        (
          await tx.query<{ n: bigint }>(`select coalesce(sum(included_units), 0)::int8 as n from scheduler_usage_reports where agent_id = $1 and meter = $2`, [agentId, meter.name])
        )[0]?.n ?? 0n
      const left = BigInt(meter.includedUnits) - used
      if (left > 0n) free = left < units ? left : units
    }
    const chargeable = (units - free) * price

    let planId: string | null = null
    let purchaseId: string | null = null
    let debited = 0n
    if (chargeable > 0n) {
      const standing = (await planStandings(tx, clock.now(), agentId, service!.slug, plans, chargeable))[0] ?? (await overdraftPlan(tx, agentId))
      if (standing === undefined) {
        logger.warn({ taskId: task.id, runId: run.id, agentId, chargeable: chargeable.toString() }, 'no plan of the holder left to debit: usage reported unbilled')
      } else if (standing.kind === 'credit') {
        await tx.query(`insert into plan_credit_ledger (agent_id, plan_id, kind, amount_micros, operation_id, request_id) values ($1, $2, 'debit', $3, $4, $5)`, [
          agentId,
          standing.planId,
          -chargeable,
          USAGE_OPERATION_ID,
          `scheduler-run:${run.id}`,
        ])
        planId = standing.planId
        purchaseId = standing.purchaseId
        debited = chargeable
      } else {
        const next = await tx.query<{ n: number }>(`select coalesce(max(ordinal), 0) + 1 as n from plan_subscription_calls where purchase_id = $1`, [standing.purchaseId])
        await tx.query(`insert into plan_subscription_calls (purchase_id, ordinal, operation_id) values ($1, $2, $3)`, [standing.purchaseId, next[0]?.n ?? 1, USAGE_OPERATION_ID])
        planId = standing.planId
        purchaseId = standing.purchaseId
      }
    }
    await tx.query(
      `insert into scheduler_usage_reports (run_id, task_id, agent_id, service, meter, units, included_units, debited_micros, plan_id, purchase_id, created_at)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
      [run.id, task.id, agentId, service!.slug, meter.name, units, free, debited, planId, purchaseId, clock.now()],
    )
    await appendUsage(tx, task.id, run.id, run.cost_micros, clock.now())

    // The next run needs a covering plan too: pause an active task whose holder has none left.
    const status = await taskStatus(tx, task.id)
    if (status !== 'active') return {}
    const ceiling = ceilingOf(task.spec, rates)
    if ((await planStandings(tx, clock.now(), agentId, service!.slug, plans, ceiling)).length > 0) return {}
    const left = await creditLeft(tx, agentId)
    const gap = ceiling > left ? ceiling - left : 0n
    const hint: SerializedHint = {
      reason: 'insufficient_funds',
      message:
        `Paused after run ${run.id}: your marketplace plan no longer covers a run (plan credit ${formatUsd(left)} USD, per-run ceiling ${formatUsd(ceiling)} USD). ` +
        `Buy a plan covering the scheduler (${plans.map((plan) => plan.id).join(', ') || 'see the gateway'}), then resume the task; nothing is charged by the scheduler itself.`,
      shortfall_micros: gap.toString(),
      action: `${purchaseHint()}, then POST /api/v1/tasks/${task.id}/resume`,
    }
    await pauseActiveForFunds(tx, task.id, hint, clock.now())
    return { syncSuspend: true }
  }

  /**
   * The plan a run is debited from when no active plan has room for it: the holder's latest
   * covering credit purchase (its balance goes below 0 and the next purchase covers it).
   */
  async function overdraftPlan(q: Queryable, agentId: string): Promise<PlanStanding | undefined> {
    const credit = plans.filter((plan) => plan.kind === 'credit').map((plan) => plan.id)
    if (credit.length === 0) return undefined
    const row = (
      await q.query<{ id: string; plan_id: string }>(
        `select id, plan_id from plan_purchases where agent_id = $1 and plan_id = any($2) and kind = 'credit' order by created_at desc limit 1`,
        [agentId, credit],
      )
    )[0]
    return row === undefined ? undefined : { planId: row.plan_id, kind: 'credit', purchaseId: row.id }
  }

  /** Usage reported for one task (for views and tests), oldest first. */
  async function usageOf(taskId: string, q: Queryable = db) {
    return q.query<{ run_id: string; units: bigint; included_units: bigint; debited_micros: bigint; plan_id: string | null; meter: string }>(
      `select run_id, units, included_units, debited_micros, plan_id, meter from scheduler_usage_reports where task_id = $1 order by created_at, run_id`,
      [taskId],
    )
  }

  return {
    service,
    meter,
    plans,
    holder,
    requireAccess,
    planRoom,
    assertCanRun,
    reportRunUsage,
    usageOf,
    planOffers,
  }
}

export type SchedulerMarketplace = ReturnType<typeof createSchedulerMarketplace>
