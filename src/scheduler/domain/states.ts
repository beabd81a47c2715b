// The task state machine of SPEC "States and transitions", as one pure function: given the
// task, an event and the facts the caller looked up (time, escrow, in-flight run), it returns the
// next status and the effects to apply in the same transaction, or throws the AppError to answer.
// Refusals that change nothing throw; a refusal that must still persist a change (a synchronous
// run that finds the escrow short pauses the task) returns a `reject` effect instead.
//
// Decisions (SPEC rule 3 "Transitions into completed and terminated: not shown", and others):
// - completed: the schedule is over. A scheduled task whose end_at has passed completes as soon
//   as nothing is in flight (on `tick`, on `dispatch`, or when its last run finishes), from
//   active or either paused state. An on-demand task never completes (SPEC rule 1).
// - terminated: stopped by the platform, never by the owner: operator action, abuse, or
//   INFRA_FAILURE_LIMIT consecutive runs lost to infrastructure errors (script failures and
//   timeouts don't count; the owner pays for those and can fix them).
// - completed and terminated are terminal like deleted: their escrow is closed at once (direct
//   rail: remainder refunded on-chain, dust forfeited; marketplace: nothing moves), so the ledger
//   sums to 0 without waiting for a DELETE. DELETE of a completed/terminated task only marks it
//   deleted. Owner writes on a terminal task answer TASK_COMPLETED / TASK_TERMINATED (409) or
//   TASK_DELETED (410); reads (GET, runs, ledger, clone) stay allowed — see assertWritable.
// - resume with balance < ceiling: 409 TASK_PAUSED_INSUFFICIENT_FUNDS (SPEC: unnamed 409), with
//   shortfall_micros and ceiling_micros in the problem; the status stays as it was.
// - resume is also accepted from paused_insufficient_funds (when the money is there, e.g. after the
//   rate card got cheaper); pause of a paused_insufficient_funds task makes it a manual pause, so
//   a later top-up no longer resumes it by itself. Pause/resume of a task already in the target
//   state is an idempotent no-op.
// - fund on paused_insufficient_funds must cover the shortfall, else 400 INSUFFICIENT_FUND_AMOUNT
//   with shortfall_micros, and nothing is charged (the caller checks before settling): a partial
//   top-up would lock more money while the task stays paused. Fund on active or paused (manual)
//   accepts any positive amount. A top-up of 0 or less is INSUFFICIENT_FUND_AMOUNT.
// - trigger on a non-active task is the SPEC no-op, except on a deleted task: TASK_DELETED (410),
//   like every owner operation on a deleted task. DELETE of a deleted task is an idempotent no-op.
// - Concurrency is Forbid (one run per task): a scheduled slot that finds a run in flight is
//   skipped, a trigger/continuation is deferred to the next dispatch pass, POST /runs answers 409
//   RUN_IN_FLIGHT, the webhook 429 RATE_LIMIT (SPEC: unnamed 429).
// - Pausing (manual or funds) clears next_run_at; resuming recomputes it from now. Slots missed
//   while paused are never caught up.
// - A run already in flight when the task is paused keeps running (CronJob `suspend` semantics);
//   on delete/terminate it is asked to cancel and the escrow is closed after it finalises.
import { AppError } from '../../platform/errors.ts'
import { formatUsd, type Micros } from '../../platform/money.ts'
import type { ExecutionOutcome, Rail, TaskState, TriggerType } from '../contract/index.ts'

export type { TaskState }
/** What started a run. */
export type RunTrigger = TriggerType
/** How a run's execution ended, as the state machine sees it. */
export type RunOutcome = ExecutionOutcome
export type TerminationReason = 'operator' | 'abuse' | 'infrastructure'

export const TERMINAL_STATUSES: readonly TaskState[] = ['completed', 'deleted', 'terminated']
/** Consecutive infrastructure-failed runs after which a task is terminated. */
export const INFRA_FAILURE_LIMIT = 5

export function isTerminal(status: TaskState): boolean {
  return TERMINAL_STATUSES.includes(status)
}

/** What the machine needs to know about the task itself. */
export interface TaskSnapshot {
  readonly id?: string
  readonly status: TaskState
  readonly rail: Rail
  /** false for an on-demand task. */
  readonly scheduled: boolean
  /** RFC 3339, or null. */
  readonly end_at: string | null
}

/** What the caller looked up just before the transition, in the same transaction. */
export interface TransitionFacts {
  readonly now: Date
  /** Per-run ceiling (estimated_ceiling_micros) under the current spec and rates. */
  readonly ceiling_micros: Micros
  /** Remaining escrow (direct) or cap (marketplace) minus open reservations; before a top-up. */
  readonly available_micros: Micros
  /**
   * Direct-rail payments (create, top-ups) whose settlement is not known yet. They count for the
   * task's state (a top-up resumes it), but no run starts on them and no escrow closes before
   * they are decided. Absent = 0.
   */
  readonly pending_micros?: Micros
  /** Settled payments into the escrow that the chain has not confirmed yet: a refund may not draw on them. */
  readonly unconfirmed_micros?: Micros
  /** A run of this task is claimed or running. */
  readonly run_in_flight: boolean
}

export type TaskEvent =
  | { readonly type: 'dispatch'; readonly trigger: RunTrigger }
  | { readonly type: 'pause' }
  | { readonly type: 'resume' }
  | { readonly type: 'fund'; readonly amount_micros: Micros }
  | { readonly type: 'delete' }
  | { readonly type: 'trigger' }
  | { readonly type: 'tick' }
  | { readonly type: 'run_finished'; readonly outcome: RunOutcome; readonly consecutive_infra_failures: number }
  | { readonly type: 'terminate'; readonly reason: TerminationReason }
  /**
   * A provisional payment was decided (settled, or failed for good). A failed create payment
   * deletes the task it was to buy; anything else only lets a waiting escrow close.
   */
  | { readonly type: 'payment_decided'; readonly settled: boolean; readonly create: boolean }

export interface RecoveryHint {
  readonly reason: 'insufficient_funds' | 'paused_manually'
  readonly message: string
  readonly shortfall_micros?: Micros
  readonly action: string
}

export type Effect =
  /** Recompute next_run_at from the schedule, strictly after now (no-op for on-demand tasks). */
  | { readonly type: 'schedule_next' }
  /** next_run_at = null. */
  | { readonly type: 'clear_next_run' }
  /** trigger: next_run_at = now, so the dispatcher picks the task up within a pass. */
  | { readonly type: 'queue_run' }
  | { readonly type: 'set_recovery_hint'; readonly hint: RecoveryHint }
  | { readonly type: 'clear_recovery_hint' }
  /** Reserve the ceiling (escrow.reserveForRun) and start the run. */
  | { readonly type: 'start_run'; readonly trigger: RunTrigger; readonly reserve_micros: Micros }
  | { readonly type: 'skip_run'; readonly reason: 'not_active' | 'run_in_flight' | 'insufficient_funds' | 'schedule_ended' }
  /** Leave the queued run for the next dispatch pass (a run in flight, or money still settling). */
  | { readonly type: 'defer_run' }
  | { readonly type: 'record_top_up'; readonly amount_micros: Micros }
  /** Ask the in-flight run to stop (Run spec.cancelRequested). */
  | { readonly type: 'cancel_in_flight_run' }
  /**
   * Close the escrow (escrow.closeEscrow): refund + dust forfeit on the direct rail, nothing on
   * the marketplace rail. `after_in_flight_run`: once the in-flight run has finalised;
   * `after_pending_payments`: once every provisional payment is decided.
   */
  | { readonly type: 'close_escrow'; readonly when: 'now' | 'after_in_flight_run' | 'after_pending_payments'; readonly refund: boolean }
  /** Persist this transition, then answer the caller with this error. */
  | { readonly type: 'reject'; readonly error: AppError }

export interface TransitionResult {
  readonly next: TaskState
  readonly effects: readonly Effect[]
}

const SYNC_TRIGGERS: readonly RunTrigger[] = ['manual', 'webhook']

function stateError(status: TaskState, task?: TaskSnapshot, facts?: TransitionFacts): AppError {
  switch (status) {
    case 'deleted':
      return new AppError('TASK_DELETED', 'The task was deleted')
    case 'completed':
      return new AppError('TASK_COMPLETED', 'The task completed: its schedule ended (end_at)')
    case 'terminated':
      return new AppError('TASK_TERMINATED', 'The task was terminated by the service')
    case 'paused':
      return new AppError('TASK_PAUSED_MANUAL', 'The task is paused; POST /api/v1/tasks/{id}/resume first')
    case 'paused_insufficient_funds':
      return insufficient(task, facts)
    case 'active':
      return new AppError('INTERNAL', 'no error for an active task')
  }
}

function shortfall(facts: TransitionFacts): Micros {
  const gap = facts.ceiling_micros - facts.available_micros
  return gap > 0n ? gap : 0n
}

function insufficient(task?: TaskSnapshot, facts?: TransitionFacts): AppError {
  if (facts === undefined) return new AppError('TASK_PAUSED_INSUFFICIENT_FUNDS', 'The task is paused: its escrow is below the per-run ceiling')
  const gap = shortfall(facts)
  const what = task?.rail === 'marketplace' ? 'remaining cap' : 'remaining escrow'
  return new AppError(
    'TASK_PAUSED_INSUFFICIENT_FUNDS',
    `The ${what} (${formatUsd(facts.available_micros)} USD) is below the per-run ceiling (${formatUsd(facts.ceiling_micros)} USD); fund at least ${gap} micros`,
    { extensions: { shortfall_micros: gap.toString(), ceiling_micros: facts.ceiling_micros.toString(), available_micros: facts.available_micros.toString() } },
  )
}

/** The recovery_hint GET shows on a task paused for funds. */
export function insufficientFundsHint(task: TaskSnapshot, facts: Pick<TransitionFacts, 'ceiling_micros' | 'available_micros'>): RecoveryHint {
  const gap = facts.ceiling_micros - facts.available_micros
  const shortfall_micros = gap > 0n ? gap : 0n
  const path = `/api/v1/tasks/${task.id ?? '{id}'}/fund`
  const what = task.rail === 'marketplace' ? 'remaining cap' : 'remaining escrow'
  return {
    reason: 'insufficient_funds',
    message:
      `Paused before a run: the ${what} (${formatUsd(facts.available_micros)} USD) is below the per-run ceiling ` +
      `(${formatUsd(facts.ceiling_micros)} USD). Top up at least ${formatUsd(shortfall_micros)} USD and the task resumes by itself.`,
    shortfall_micros,
    action: `POST ${path} with top_up_amount_micros >= ${shortfall_micros}`,
  }
}

export function manualPauseHint(task: Pick<TaskSnapshot, 'id'>): RecoveryHint {
  return {
    reason: 'paused_manually',
    message: 'Paused by the owner; scheduled runs are skipped until it is resumed.',
    action: `POST /api/v1/tasks/${task.id ?? '{id}'}/resume`,
  }
}

/**
 * Guard for owner writes that are not events of the machine (PATCH, PUT env, webhook enable /
 * disable): allowed in active and both paused states, refused on terminal ones.
 */
export function assertWritable(status: TaskState): void {
  if (isTerminal(status)) throw stateError(status)
}

function endReached(task: TaskSnapshot, now: Date): boolean {
  return task.scheduled && task.end_at !== null && Date.parse(task.end_at) <= now.getTime()
}

function complete(task: TaskSnapshot, facts: TransitionFacts, extra: readonly Effect[] = []): TransitionResult {
  return {
    next: 'completed',
    effects: [...extra, { type: 'clear_next_run' }, { type: 'clear_recovery_hint' }, closeEscrow(task, { ...facts, run_in_flight: false })],
  }
}

const pendingOf = (facts: TransitionFacts): Micros => facts.pending_micros ?? 0n

/** Closes now, or once the in-flight run finalised / the provisional payments are decided and confirmed. */
function closeEscrow(task: TaskSnapshot, facts: TransitionFacts): Effect {
  const refund = task.rail === 'direct'
  if (facts.run_in_flight) return { type: 'close_escrow', when: 'after_in_flight_run', refund }
  if (pendingOf(facts) > 0n || (facts.unconfirmed_micros ?? 0n) > 0n) return { type: 'close_escrow', when: 'after_pending_payments', refund }
  return { type: 'close_escrow', when: 'now', refund }
}

/** Where a new task starts: SPEC's "(creation)" row. */
export function initialTransition(task: Omit<TaskSnapshot, 'status'>, facts: Pick<TransitionFacts, 'ceiling_micros' | 'available_micros'>): TransitionResult {
  if (facts.available_micros < facts.ceiling_micros) {
    return {
      next: 'paused_insufficient_funds',
      effects: [{ type: 'clear_next_run' }, { type: 'set_recovery_hint', hint: insufficientFundsHint({ ...task, status: 'paused_insufficient_funds' }, facts) }],
    }
  }
  return { next: 'active', effects: task.scheduled ? [{ type: 'schedule_next' }] : [] }
}

const unchanged = (task: TaskSnapshot, effects: readonly Effect[] = []): TransitionResult => ({ next: task.status, effects })

function dispatch(task: TaskSnapshot, trigger: RunTrigger, facts: TransitionFacts): TransitionResult {
  const sync = SYNC_TRIGGERS.includes(trigger)
  if (task.status !== 'active') {
    if (sync) throw stateError(task.status, task, facts)
    return unchanged(task, [{ type: 'skip_run', reason: 'not_active' }])
  }
  if (endReached(task, facts.now)) {
    if (facts.run_in_flight) {
      if (trigger === 'manual') throw new AppError('RUN_IN_FLIGHT', 'A run of this task is claimed or running')
      if (trigger === 'webhook') throw new AppError('RATE_LIMIT', 'A webhook run of this task is already in flight')
      return unchanged(task, [{ type: 'skip_run', reason: 'schedule_ended' }])
    }
    const reject: Effect[] = sync ? [{ type: 'reject', error: stateError('completed') }] : [{ type: 'skip_run', reason: 'schedule_ended' }]
    return complete(task, facts, reject)
  }
  if (facts.run_in_flight) {
    switch (trigger) {
      case 'manual':
        throw new AppError('RUN_IN_FLIGHT', 'A run of this task is claimed or running; one run at a time')
      case 'webhook':
        throw new AppError('RATE_LIMIT', 'A webhook run of this task is already in flight')
      case 'schedule':
        return unchanged(task, [{ type: 'skip_run', reason: 'run_in_flight' }, { type: 'schedule_next' }])
      case 'trigger':
      case 'continuation':
        return unchanged(task, [{ type: 'defer_run' }])
    }
  }
  if (facts.available_micros < facts.ceiling_micros) {
    if (facts.available_micros + pendingOf(facts) >= facts.ceiling_micros) {
      // The money is paid but not settled yet: the run waits for it (seconds), it is not skipped.
      if (sync) throw paymentSettling(facts)
      return unchanged(task, [{ type: 'defer_run' }])
    }
    const effects: Effect[] = [
      { type: 'skip_run', reason: 'insufficient_funds' },
      { type: 'clear_next_run' },
      { type: 'set_recovery_hint', hint: insufficientFundsHint(task, facts) },
    ]
    if (sync) effects.push({ type: 'reject', error: insufficient(task, facts) })
    return { next: 'paused_insufficient_funds', effects }
  }
  const effects: Effect[] = [{ type: 'start_run', trigger, reserve_micros: facts.ceiling_micros }]
  // POST /runs and the webhook "do not advance next_run_at"; a continuation is extra to the schedule.
  if (trigger === 'schedule' || trigger === 'trigger') effects.push({ type: 'schedule_next' })
  return unchanged(task, effects)
}

function close(task: TaskSnapshot, facts: TransitionFacts): Effect[] {
  return facts.run_in_flight ? [{ type: 'cancel_in_flight_run' }, closeEscrow(task, facts)] : [closeEscrow(task, facts)]
}

function paymentSettling(facts: TransitionFacts): AppError {
  return new AppError('PAYMENT_SETTLING', `The escrow's latest payment (${formatUsd(pendingOf(facts))} USD) is still settling on-chain; retry in a few seconds`, {
    headers: { 'retry-after': '5' },
    extensions: { pending_micros: pendingOf(facts).toString(), available_micros: facts.available_micros.toString(), ceiling_micros: facts.ceiling_micros.toString() },
  })
}

/** What the task's state may count on: settled money plus payments still settling. */
function fundedFacts(facts: TransitionFacts): TransitionFacts {
  return { ...facts, available_micros: facts.available_micros + pendingOf(facts) }
}

/** One step of the task state machine; throws the AppError to answer when the event is refused. */
export function transition(task: TaskSnapshot, event: TaskEvent, facts: TransitionFacts): TransitionResult {
  const { status } = task
  switch (event.type) {
    case 'dispatch':
      return dispatch(task, event.trigger, facts)

    case 'pause':
      if (isTerminal(status)) throw stateError(status)
      if (status === 'paused') return unchanged(task)
      return { next: 'paused', effects: [{ type: 'clear_next_run' }, { type: 'set_recovery_hint', hint: manualPauseHint(task) }] }

    case 'resume':
      if (isTerminal(status)) throw stateError(status)
      if (status === 'active') return unchanged(task)
      if (fundedFacts(facts).available_micros < facts.ceiling_micros) throw insufficient(task, fundedFacts(facts))
      return { next: 'active', effects: [{ type: 'clear_recovery_hint' }, { type: 'schedule_next' }] }

    case 'fund': {
      if (isTerminal(status)) throw stateError(status)
      if (event.amount_micros <= 0n) {
        throw new AppError('INSUFFICIENT_FUND_AMOUNT', 'top_up_amount_micros must be positive', { field: 'body.top_up_amount_micros' })
      }
      const after = fundedFacts(facts).available_micros + event.amount_micros
      const topUp: Effect = { type: 'record_top_up', amount_micros: event.amount_micros }
      if (status !== 'paused_insufficient_funds') return unchanged(task, [topUp])
      if (after < facts.ceiling_micros) {
        const gap = shortfall(fundedFacts(facts))
        throw new AppError(
          'INSUFFICIENT_FUND_AMOUNT',
          `A top-up of ${event.amount_micros} micros leaves the task below its per-run ceiling; fund at least ${gap} micros to resume it`,
          { field: 'body.top_up_amount_micros', extensions: { shortfall_micros: gap.toString(), ceiling_micros: facts.ceiling_micros.toString() } },
        )
      }
      return { next: 'active', effects: [topUp, { type: 'clear_recovery_hint' }, { type: 'schedule_next' }] }
    }

    case 'delete':
      if (status === 'deleted') return unchanged(task)
      // completed/terminated closed their escrow already (or will, after their last run).
      if (status === 'completed' || status === 'terminated') return { next: 'deleted', effects: [] }
      return { next: 'deleted', effects: [{ type: 'clear_next_run' }, { type: 'clear_recovery_hint' }, ...close(task, facts)] }

    case 'trigger':
      if (status === 'deleted') throw stateError(status)
      if (status !== 'active') return unchanged(task)
      return unchanged(task, [{ type: 'queue_run' }])

    case 'tick':
      if (isTerminal(status) || facts.run_in_flight || !endReached(task, facts.now)) return unchanged(task)
      return complete(task, facts)

    case 'run_finished': {
      const settledRun = { ...facts, run_in_flight: false }
      if (isTerminal(status)) {
        // A delete/terminate that waited for this run closes now (or once its payments are
        // decided); closing twice moves nothing.
        return unchanged(task, [closeEscrow(task, settledRun)])
      }
      if (event.outcome === 'infra_error' && event.consecutive_infra_failures >= INFRA_FAILURE_LIMIT) {
        return { next: 'terminated', effects: [{ type: 'clear_next_run' }, { type: 'clear_recovery_hint' }, ...close(task, settledRun)] }
      }
      if (endReached(task, facts.now)) return complete(task, settledRun)
      return unchanged(task)
    }

    case 'payment_decided': {
      // A closing escrow that waited for this payment (its decision, or its confirmation) closes once nothing else is pending.
      if (isTerminal(status)) return unchanged(task, [closeEscrow(task, facts)])
      if (event.settled || !event.create) return unchanged(task)
      // The payment that was to buy the task failed: the task goes, with whatever it holds refunded.
      return { next: 'deleted', effects: [{ type: 'clear_next_run' }, { type: 'clear_recovery_hint' }, ...close(task, facts)] }
    }

    case 'terminate':
      if (isTerminal(status)) return unchanged(task)
      return { next: 'terminated', effects: [{ type: 'clear_next_run' }, { type: 'clear_recovery_hint' }, ...close(task, facts)] }
  }
}
