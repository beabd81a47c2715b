// What every task operation shares: a task row owned by its caller (locked or not), the facts the
// state machine needs, applying a transition's effects in the caller's transaction (status,
// recovery hint, closing the escrow), the post-commit work it leaves (Task resource, refund), and
// the task's public view. Task commands, the run ledger and the payment outcomes build on this.
import { randomBytes } from 'node:crypto'
import type { Db, Queryable } from '../platform/db/index.ts'
import { AppError } from '../platform/errors.ts'
import type { Clock } from '../platform/clock.ts'
import type { EscrowSummary } from './domain/escrow.ts'
import type { SchedulerRates } from './domain/rates.ts'
import { transition, type Effect, type TaskEvent, type TaskSnapshot, type TransitionFacts, type TransitionResult } from './domain/states.ts'
import { closeTaskEscrow, escrowFacts, type EscrowFacts } from './escrow-store.ts'
import { normalizeOwner, type SchedulerMarketplace } from './marketplace.ts'
import { ceilingOf, serializeHint, taskView, type SerializedHint, type TaskRow } from './records.ts'
import type { Refunds } from '../payments/refunds.ts'
import type { TaskResources } from './task-resources.ts'
import { taskById, taskForUpdate, writeTaskState } from './task-store.ts'

/** What to do after the transaction commits. */
export interface AfterCommit {
  syncSuspend?: boolean
  triggerAt?: Date
  deleteResource?: boolean
  refund?: boolean
  cancelRun?: boolean
  reject?: AppError
  /** The status the Task resource is brought in line with (clears resource_sync_pending). */
  resourceStatus?: TaskRow['status']
}

export interface TaskCoreDeps {
  db: Db
  clock: Clock
  rates: SchedulerRates
  marketplace: SchedulerMarketplace
  resources: TaskResources
  refunds: Refunds
}

/** Owners: wallets compare lowercase; marketplace plan holders (`agent:<id>`) exactly (marketplace.ts). */
export const lower = (owner: string) => normalizeOwner(owner)

export function newId(prefix: string): string {
  // Lowercase base32-ish: a DNS-1123 label, so it doubles as the Task/Run resource name.
  const alphabet = 'abcdefghijklmnopqrstuvwxyz234567'
  let out = prefix
  for (const byte of randomBytes(16)) out += alphabet[byte & 31]
  return out
}

export function snapshot(task: TaskRow): TaskSnapshot {
  return { id: task.id, status: task.status, rail: task.rail, scheduled: task.spec.schedule !== null, end_at: task.spec.end_at }
}

/** A task of this owner; another owner's task answers like a missing one (no enumeration). */
export async function ownedTask(q: Queryable, id: string, owner: string, lock = false): Promise<TaskRow> {
  const task = lock ? await taskForUpdate(q, id) : await taskById(q, id)
  if (task === undefined || task.owner !== lower(owner)) throw new AppError('TASK_NOT_FOUND', `No task ${id} belongs to this wallet`, { field: 'path.id' })
  return task
}

export function createTaskCore(deps: TaskCoreDeps) {
  const { db, clock, rates, marketplace, resources, refunds } = deps

  /**
   * The state machine's facts. `heldInBatch`: reservations a batched dispatch made earlier in the
   * same transaction for other marketplace tasks of this holder (not visible in the database yet).
   */
  async function factsOf(q: Queryable, task: TaskRow, known?: EscrowFacts, heldInBatch = 0n): Promise<TransitionFacts & { escrow: EscrowSummary }> {
    const { summary, inFlight, pending, unconfirmed } = known ?? (await escrowFacts(q, task.id))
    let available = summary.available_micros
    if (task.rail === 'marketplace') {
      // The cap is the seller-local limit; the holder's plan credit is what pays.
      const room = (await marketplace.planRoom(q, task.owner)) - heldInBatch
      if (room < available) available = room < 0n ? 0n : room
    }
    return {
      now: clock.now(),
      ceiling_micros: ceilingOf(task.spec, rates),
      available_micros: available,
      pending_micros: pending,
      unconfirmed_micros: unconfirmed,
      run_in_flight: inFlight,
      escrow: summary,
    }
  }

  /** Applies a transition's effects inside the transaction; returns the post-commit work. */
  async function applyTransition(tx: Queryable, task: TaskRow, result: TransitionResult, facts: TransitionFacts): Promise<AfterCommit> {
    const after: AfterCommit = {}
    let hint: SerializedHint | null = task.recovery_hint
    let hintTouched = false
    for (const effect of result.effects as Effect[]) {
      switch (effect.type) {
        case 'set_recovery_hint':
          hint = serializeHint(effect.hint)
          hintTouched = true
          break
        case 'clear_recovery_hint':
          hintTouched = hint !== null
          hint = null
          break
        case 'queue_run':
          after.triggerAt = facts.now
          break
        case 'cancel_in_flight_run':
          after.cancelRun = true
          break
        case 'close_escrow':
          if (effect.when === 'now' && (await closeTaskEscrow(tx, task, rates.min_refund_micros)).refund !== undefined) after.refund = true
          break
        case 'reject':
          after.reject = effect.error
          break
        default:
          break // record_top_up: the caller records the charge; schedule_next / clear_next_run: the resource's suspend below; start/skip/defer: the run ledger
      }
    }
    const next = result.next
    // A transition that changes nothing (most dispatches and settlements) writes nothing. A status
    // change owes the Task resource a write (suspend, deletion): flagged here, in the same
    // transaction, and cleared once done, so a crash in between is redone by the recovery sweep.
    if (next !== task.status || hintTouched) await writeTaskState(tx, task.id, next, hint, clock.now())
    if (next !== task.status) {
      if (next === 'deleted' || next === 'terminated') after.deleteResource = true
      else after.syncSuspend = next !== 'active'
      after.resourceStatus = next
    }
    return after
  }

  /** Loads the task locked, runs `event` through the machine and applies it, in `tx`. */
  async function step(tx: Queryable, taskId: string, event: TaskEvent): Promise<{ task: TaskRow; after: AfterCommit }> {
    const task = (await taskForUpdate(tx, taskId)) as TaskRow
    const facts = await factsOf(tx, task)
    return { task, after: await applyTransition(tx, task, transition(snapshot(task), event, facts), facts) }
  }

  async function runAfterCommit(task: TaskRow, after: AfterCommit): Promise<void> {
    if (after.deleteResource) await resources.remove(task.id)
    else if (after.syncSuspend !== undefined) {
      const suspend = after.syncSuspend
      await resources.updateSpec(task.id, (spec) => ({ ...spec, suspend }))
    }
    if (after.triggerAt !== undefined) {
      const at = after.triggerAt.toISOString()
      await resources.updateSpec(task.id, (spec) => ({ ...spec, triggerRequestedAt: at }))
    }
    if (after.resourceStatus !== undefined) await resources.synced(task.id, after.resourceStatus)
    if (after.refund) await refunds.send(task.id)
    if (after.reject) throw after.reject
  }

  async function view(q: Queryable, task: TaskRow) {
    const { summary, pending } = await escrowFacts(q, task.id)
    let nextRunAt: Date | null = null
    if (task.status === 'active' && task.spec.schedule !== null) {
      const resource = await resources.get(task.id)
      const trigger = resource?.spec.triggerRequestedAt
      const handled = resource?.status?.lastTriggerHandled
      if (trigger !== undefined && (handled === undefined || Date.parse(trigger) > Date.parse(handled))) nextRunAt = new Date(trigger)
      else if (resource?.status?.nextRunAt) nextRunAt = new Date(resource.status.nextRunAt)
    }
    return taskView(task, summary, rates, nextRunAt, pending)
  }

  /** The task as GET shows it (no owner check: callers checked or created it). */
  async function currentView(taskId: string): Promise<Record<string, unknown>> {
    return view(db, (await taskById(db, taskId)) as TaskRow)
  }

  return { factsOf, applyTransition, step, runAfterCommit, view, currentView }
}

export type TaskCore = ReturnType<typeof createTaskCore>
