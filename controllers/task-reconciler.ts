// The cron reconciler for Task resources: PURE. reconcileTask(observed, options) → actions; it
// reads no clock and does no I/O, so the same observed state always gives the same actions (a
// restart, or a second controller looking at the same state, decides the same thing).
//
// Rules (the semantics of the Kubernetes CronJob controller v2):
// - Run names are deterministic: slotName(task, slot) for scheduled runs, `<task>-m<epoch ms>` for
//   an on-demand trigger. Creating one that exists is AlreadyExists = done, so no slot runs twice.
// - status.lastScheduleTime is the latest slot the controller has handled (run created, or skipped
//   with a recorded reason). Slots are looked for in (lastScheduleTime ?? creationTimestamp, now].
// - After downtime at most ONE catch-up: only the latest missed slot, and only if it is no older
//   than startingDeadlineSeconds (default 300); the others are counted in status.missedSlots.
// - suspended, deleting (deletionTimestamp) or completed tasks create nothing; a task without a
//   schedule is on-demand and never gets scheduled runs.
// - spec.triggerRequestedAt newer than status.lastTriggerHandled → one run with trigger 'trigger',
//   created even while another run is active: a trigger queues a run, it is never skipped (the run
//   controller starts it once the run in flight has finished).
// - concurrencyPolicy Forbid (default): while a run is active, a due slot is skipped and recorded
//   in status.lastSkipped. Allow: runs may overlap.
// - History: finished runs beyond successfulRunsHistoryLimit (default 3) / failedRunsHistoryLimit
//   (default 1) are deleted, oldest first.
// - requeueAfter: until the next slot (exact; the adapter may pad). None when the schedule ended.
// - endAt (inclusive): no slot after it; once past it with no run active the task is Completed.
import {
  compileSchedule,
  latestSlotBetween,
  nextSlot,
  slotName,
  type CompiledSchedule,
  type RunPhase,
  type RunResource,
  type TaskResource,
  type TaskResourceSpec,
  type TaskResourceStatus,
  type TriggerType,
} from '../src/scheduler/contract/index.ts'

export type Action =
  | { type: 'createRun'; name: string; slot: string; trigger: TriggerType; notBefore?: string }
  | { type: 'deleteRun'; name: string }
  | { type: 'patchTaskStatus'; status: TaskResourceStatus }
  | { type: 'requeueAfter'; ms: number }

export interface ReconcileOptions {
  /** Used when the task does not set startingDeadlineSeconds (default 300 s). */
  defaultStartingDeadlineSeconds?: number
  defaultSuccessfulRunsHistoryLimit?: number
  defaultFailedRunsHistoryLimit?: number
  /** Bound on the missed-slot scan (CronJob uses 100); past it the task resumes from now. */
  maxMissedScan?: number
  /**
   * Create the next slot's Run this long before the slot (spec.notBefore = the slot), so it can be
   * dispatched ahead and started on time. 0 (default) = create it at the slot.
   */
  lookaheadMs?: number
}

export interface Observed {
  task: TaskResource
  /** Runs owned by the task (any phase). */
  runs: readonly RunResource[]
  now: Date
}

const FINISHED_OK: ReadonlySet<RunPhase> = new Set(['Succeeded'])
const FINISHED_BAD: ReadonlySet<RunPhase> = new Set(['Failed', 'Cancelled', 'TimedOut', 'Rejected'])

/** A scheduled Run created ahead of its slot that has not been started (nothing runs yet). */
export function isWaitingForSlot(run: RunResource, now: Date): boolean {
  const notBefore = run.spec.notBefore === undefined ? Number.NaN : Date.parse(run.spec.notBefore)
  return run.spec.trigger?.type === 'schedule' && (run.status?.phase ?? 'Pending') === 'Pending' && notBefore > now.getTime()
}

export function isFinished(run: RunResource): boolean {
  const phase = run.status?.phase
  return phase !== undefined && (FINISHED_OK.has(phase) || FINISHED_BAD.has(phase))
}

/** Deterministic name of the run for an on-demand trigger requested at `requestedAt`. */
export function triggerRunName(taskName: string, requestedAt: Date): string {
  return `${taskName}-m${requestedAt.getTime()}`
}

function finishedAt(run: RunResource): string {
  return run.status?.completionTime ?? run.spec.trigger?.scheduledTime ?? run.metadata.creationTimestamp
}

function byName(a: RunResource, b: RunResource): number {
  return a.metadata.name < b.metadata.name ? -1 : a.metadata.name > b.metadata.name ? 1 : 0
}

function historyDeletes(runs: readonly RunResource[], keepOk: number, keepBad: number): string[] {
  const out: string[] = []
  for (const [phases, keep] of [
    [FINISHED_OK, keepOk],
    [FINISHED_BAD, keepBad],
  ] as const) {
    const finished = runs
      .filter((run) => run.status?.phase !== undefined && phases.has(run.status.phase))
      .sort((a, b) => (finishedAt(a) < finishedAt(b) ? 1 : finishedAt(a) > finishedAt(b) ? -1 : byName(b, a)))
    for (const run of finished.slice(Math.max(0, keep))) out.push(run.metadata.name)
  }
  return out.sort()
}

/**
 * lastRunName/lastRunPhase: the latest finished run still kept (after this pass's history deletes),
 * absent when none is; lastSuccessfulTime: the latest success ever seen, kept once its run is gone.
 */
function recordLastRun(status: TaskResourceStatus, runs: readonly RunResource[], deleted: ReadonlySet<string>): void {
  let last: RunResource | undefined
  for (const run of runs) {
    if (!isFinished(run)) continue
    const completed = run.status?.completionTime
    if (run.status?.phase === 'Succeeded' && completed !== undefined && (status.lastSuccessfulTime === undefined || completed > status.lastSuccessfulTime)) {
      status.lastSuccessfulTime = completed
    }
    if (deleted.has(run.metadata.name)) continue
    if (last === undefined || finishedAt(run) > finishedAt(last) || (finishedAt(run) === finishedAt(last) && byName(run, last) > 0)) last = run
  }
  if (last === undefined) {
    delete status.lastRunName
    delete status.lastRunPhase
  } else {
    status.lastRunName = last.metadata.name
    status.lastRunPhase = last.status?.phase
  }
}

/** Equal as JSON (key order and undefined-valued keys aside), compared in place: no copies, no strings. */
function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false
  if (Array.isArray(a) || Array.isArray(b)) return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((item, i) => sameJson(item, b[i]))
  const right = b as Record<string, unknown>
  let keys = 0
  for (const [key, value] of Object.entries(a)) {
    if (value === undefined) continue
    keys += 1
    if (!sameJson(value, right[key])) return false
  }
  for (const value of Object.values(right)) if (value !== undefined) keys -= 1
  return keys === 0
}

function parseInstant(value: string | undefined): Date | undefined {
  if (value === undefined) return undefined
  const date = new Date(value)
  return Number.isNaN(date.getTime()) ? undefined : date
}

/**
 * compileSchedule, memoised: validating a schedule (timezone, a test fire) costs more than the rest
 * of a reconcile, and 10,000 tasks share a handful of schedules. Same input, same answer (or error).
 */
const compiledSchedules = new Map<string, CompiledSchedule | Error>()
function compiled(schedule: NonNullable<TaskResourceSpec['schedule']>): CompiledSchedule {
  const key = JSON.stringify(schedule)
  let entry = compiledSchedules.get(key)
  if (entry === undefined) {
    try {
      entry = compileSchedule(schedule, 'spec.schedule')
    } catch (err) {
      entry = err instanceof Error ? err : new Error(String(err))
    }
    if (compiledSchedules.size >= 1_000) compiledSchedules.delete(compiledSchedules.keys().next().value as string)
    compiledSchedules.set(key, entry)
  }
  if (entry instanceof Error) throw entry
  return entry
}

export function reconcileTask(observed: Observed, options: ReconcileOptions = {}): Action[] {
  const { task, now } = observed
  const spec = task.spec
  const current: TaskResourceStatus = task.status ?? {}
  const runs = observed.runs.filter((run) => run.spec.taskRef?.name === task.metadata.name)
  const actions: Action[] = []

  // Deleting: the owner-reference cascade removes the runs; nothing to create or write.
  if (task.metadata.deletionTimestamp !== undefined) return actions

  const keepOk = spec.successfulRunsHistoryLimit ?? options.defaultSuccessfulRunsHistoryLimit ?? 3
  const keepBad = spec.failedRunsHistoryLimit ?? options.defaultFailedRunsHistoryLimit ?? 1
  for (const name of historyDeletes(runs, keepOk, keepBad)) actions.push({ type: 'deleteRun', name })

  const existing = new Set(runs.map((run) => run.metadata.name))
  // A run created ahead of its slot is not in flight until its slot comes.
  const waiting = runs.filter((run) => isWaitingForSlot(run, now))
  const active = runs.filter((run) => !isFinished(run) && !isWaitingForSlot(run, now)).map((run) => run.metadata.name)
  const forbid = (spec.concurrencyPolicy ?? 'Forbid') === 'Forbid'
  const status: TaskResourceStatus = { ...current, observedGeneration: task.metadata.generation }
  delete status.message
  const runsByName = new Map(runs.map((run) => [run.metadata.name, run]))
  const create = (name: string, slot: Date, trigger: TriggerType, ahead = false): void => {
    if (!existing.has(name)) actions.push({ type: 'createRun', name, slot: slot.toISOString(), trigger, ...(ahead ? { notBefore: slot.toISOString() } : {}) })
    existing.add(name)
    // A run created ahead may have finished by the time its slot is recorded: not in flight.
    const run = runsByName.get(name)
    if (!ahead && !active.includes(name) && (run === undefined || !isFinished(run))) active.push(name)
  }
  // Runs created ahead for slots that will not come (suspended, completed, schedule changed or
  // ended) are deleted; the run controller releases anything it had dispatched for them.
  const keepWaiting = new Set<string>()

  // On-demand trigger: at most one run per request instant. It is queued, never skipped (SPEC:
  // trigger "queues one"): behind a run in flight its Run waits, the run controller's claim
  // deferring it until that run has finished.
  const requested = parseInstant(spec.triggerRequestedAt)
  const handled = parseInstant(current.lastTriggerHandled)
  if (requested !== undefined && (handled === undefined || requested.getTime() > handled.getTime()) && current.phase !== 'Completed') {
    create(triggerRunName(task.metadata.name, requested), requested, 'trigger')
    status.lastTriggerHandled = requested.toISOString()
  }

  let requeueMs: number | undefined
  if (spec.schedule === undefined) {
    status.phase = 'OnDemand'
    delete status.nextRunAt
  } else if (current.phase === 'Completed') {
    delete status.nextRunAt
  } else {
    let schedule: CompiledSchedule | undefined
    try {
      schedule = compiled(spec.schedule)
    } catch (err) {
      status.phase = 'Invalid'
      status.message = err instanceof Error ? err.message : String(err)
      delete status.nextRunAt
    }
    if (schedule !== undefined) {
      const endAt = parseInstant(spec.endAt)
      if (spec.suspend === true) {
        // Suspended: nothing is created. As with CronJob, on resume the latest slot missed while
        // suspended runs once if it is still within the starting deadline. (Status must not depend
        // on `now` here, or every status write would trigger another one.)
        status.phase = 'Suspended'
        delete status.nextRunAt
      } else {
        status.phase = 'Active'
        const from = parseInstant(current.lastScheduleTime) ?? new Date(task.metadata.creationTimestamp)
        const to = endAt !== undefined && endAt.getTime() < now.getTime() ? endAt : now
        const scan = latestSlotBetween(schedule, from, to, options.maxMissedScan ?? 100)
        if (scan.capped) {
          status.lastSkipped = { slot: now.toISOString(), reason: 'TooManyMissedSlots' }
          status.missedSlots = (current.missedSlots ?? 0) + scan.count
          status.lastScheduleTime = to.toISOString()
        } else if (scan.latest !== undefined) {
          const slot = scan.latest
          const deadlineMs = (spec.startingDeadlineSeconds ?? options.defaultStartingDeadlineSeconds ?? 300) * 1000
          if (scan.count > 1) status.missedSlots = (current.missedSlots ?? 0) + scan.count - 1
          const name = slotName(task.metadata.name, slot)
          if (now.getTime() - slot.getTime() > deadlineMs) {
            status.lastSkipped = { slot: slot.toISOString(), reason: 'MissedStartingDeadline' }
          } else if (forbid && active.length > 0 && !active.includes(name)) {
            status.lastSkipped = { slot: slot.toISOString(), reason: 'ConcurrentRunActive' }
          } else {
            create(name, slot, 'schedule')
          }
          status.lastScheduleTime = slot.toISOString()
        }
        const next = nextSlot(schedule, now, { endAt: endAt ?? null })
        if (next === undefined) {
          delete status.nextRunAt
          if (active.length === 0) status.phase = 'Completed'
        } else {
          status.nextRunAt = next.toISOString()
          requeueMs = next.getTime() - now.getTime()
          const lookahead = options.lookaheadMs ?? 0
          if (lookahead > 0 && requeueMs <= lookahead) {
            const name = slotName(task.metadata.name, next)
            keepWaiting.add(name)
            create(name, next, 'schedule', true)
          } else if (lookahead > 0) {
            requeueMs -= lookahead // wake up when the next slot's Run is to be created
          }
        }
      }
    }
  }

  for (const run of waiting) {
    if (!keepWaiting.has(run.metadata.name)) actions.push({ type: 'deleteRun', name: run.metadata.name })
  }

  status.active = [...active].sort()
  status.activeCount = status.active.length
  recordLastRun(status, runs, new Set(actions.flatMap((action) => (action.type === 'deleteRun' ? [action.name] : []))))
  // Ready: the spec was understood. An invalid schedule is reported here, never a crash loop.
  const invalid = status.phase === 'Invalid'
  const readyStatus = invalid ? 'False' : 'True'
  const previous = current.conditions?.find((condition) => condition.type === 'Ready')
  status.conditions = [
    {
      type: 'Ready',
      status: readyStatus,
      reason: invalid ? 'InvalidSchedule' : (status.phase ?? 'Active'),
      message: invalid ? (status.message ?? 'invalid schedule') : `task is ${(status.phase ?? 'Active').toLowerCase()}`,
      observedGeneration: task.metadata.generation,
      // Stable while the status holds, so a repeated reconcile writes nothing.
      lastTransitionTime: previous !== undefined && previous.status === readyStatus ? previous.lastTransitionTime : now.toISOString(),
    },
  ]
  if (!sameJson(status, current)) actions.push({ type: 'patchTaskStatus', status })
  if (requeueMs !== undefined) actions.push({ type: 'requeueAfter', ms: requeueMs })
  return actions
}
