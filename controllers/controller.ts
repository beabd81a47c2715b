// The Task controller: a thin adapter. Informers on Tasks and Runs feed a per-key work queue (a Run
// event enqueues its owning Task); each key is reconciled from the informer caches by the pure
// reconcileTask and the actions are applied to the stores:
// - createRun first, then the status write, so a crash in between at worst replays the create
//   (AlreadyExists = success; the deterministic name makes it the same Run);
// - patchTaskStatus is optimistic on the cached resourceVersion: a Conflict (stale cache, or a
//   second controller got there first) fails the key and the queue retries it with backoff; that is
//   routine, so it is counted (stats.conflicts) and logged at debug, never passed to onError;
// - requeueAfter arms a timer on the injected clock (+ padding) for the next slot.
import {
  isAlreadyExists,
  isConflict,
  NotFoundError,
  objectKey,
  splitKey,
  type ResourceStore,
} from './resource-store.ts'
import { Informer } from './informer.ts'
import { isFinished, reconcileTask, type Action, type ReconcileOptions, type RunResource, type TaskResource, type TaskStatus } from './task-reconciler.ts'
import { realTimers, WorkQueue, type Timers } from './work-queue.ts'

export interface Clock extends Timers {
  now(): Date
}

export const systemClock: Clock = { now: () => new Date(), ...realTimers }

const BY_TASK = 'task'

function ownerTaskOf(run: RunResource): string | undefined {
  return run.metadata.ownerReferences?.find((ref) => ref.kind === 'Task')?.name ?? run.spec.taskRef?.name
}

export const TASK_LABEL = 'jobs.agent-gateway.dev/task'
export const TRIGGER_LABEL = 'jobs.agent-gateway.dev/trigger'

export interface TaskControllerOptions {
  tasks: ResourceStore<TaskResource>
  runs: ResourceStore<RunResource>
  clock?: Clock
  namespace?: string
  reconcile?: ReconcileOptions
  /** Added to requeueAfter so the timer fires just after the slot (CronJob uses 100 ms). */
  requeuePaddingMs?: number
  /** Tasks reconciled at once (default 256): their writes are group-committed by the store, so more at once means bigger batches, not more load. */
  concurrency?: number
  /**
   * The task's total settled cost (the ledger), mirrored into status.costMicros for display when a
   * status write follows a finished run (a run's cost is settled before its final phase is written).
   */
  costOf?: (taskName: string) => Promise<bigint | undefined>
  /** A Run informer shared with the RunController (one cache of every Run instead of two). */
  runInformer?: Informer<RunResource>
  /** Failures worth an operator's look (logged at error). Conflicts never come here. */
  onError?: (where: string, err: unknown) => void
  /** Where routine events go (a Conflict, requeued): debug lines. A pino logger fits. */
  logger?: ControllerLogger
}

/** The part of a logger the controllers use (a pino `Logger` fits). */
export interface ControllerLogger {
  debug(details: object, message: string): void
}

export class TaskController {
  readonly #options: TaskControllerOptions
  readonly #clock: Clock
  readonly #tasks: Informer<TaskResource>
  readonly #runs: Informer<RunResource>
  readonly #queue: WorkQueue
  /** resourceVersion of our last status write per Task, until the informer has shown it. */
  readonly #written = new Map<string, bigint>()
  /** Counters for tests and metrics. */
  readonly stats = { reconciles: 0, runsCreated: 0, alreadyExists: 0, runsDeleted: 0, statusWrites: 0, conflicts: 0, errors: 0 }

  constructor(options: TaskControllerOptions) {
    this.#options = options
    this.#clock = options.clock ?? systemClock
    const onError = options.onError ?? (() => {})
    const informerOptions = options.namespace === undefined ? { onError: (e: unknown) => onError('informer', e) } : { namespace: options.namespace, onError: (e: unknown) => onError('informer', e) }
    this.#tasks = new Informer(options.tasks, informerOptions)
    this.#runs = options.runInformer ?? new Informer(options.runs, informerOptions)
    this.#queue = new WorkQueue((key) => this.reconcile(key), {
      concurrency: options.concurrency ?? 256,
      delayTimers: this.#clock,
      onError: (key, err) => {
        this.stats.errors += 1
        onError(`reconcile ${key}`, err)
      },
      // Two writers raced on the Task's status (a stale cache, a second controller): retried.
      isRoutine: isConflict,
      onRoutine: (key, err) => {
        this.stats.conflicts += 1
        options.logger?.debug({ key, reason: (err as Error).message }, 'task controller: resourceVersion conflict; requeued')
      },
    })
    // Runs by owning Task, so a reconcile reads its runs without scanning every cached Run.
    this.#runs.addIndex(BY_TASK, (run) => {
      const owner = ownerTaskOf(run)
      return owner === undefined ? undefined : objectKey({ namespace: run.metadata.namespace, name: owner })
    })
    this.#tasks.on((_type, task) => this.#queue.add(objectKey(task.metadata)))
    this.#runs.on((type, run, old) => {
      // A Task's decisions depend on which of its Runs exist and which are finished; a Run's other
      // status writes (Running, the start time) change nothing for it.
      if (type === 'MODIFIED' && old !== undefined && isFinished(old) === isFinished(run)) return
      const owner = ownerTaskOf(run)
      if (owner !== undefined) this.#queue.add(objectKey({ namespace: run.metadata.namespace, name: owner }))
    })
  }

  /** Starts both informers; resolves once their caches are filled (keys are then being reconciled). */
  async start(): Promise<void> {
    // Runs first, so the first Task reconciles see the existing Runs.
    await this.#runs.start()
    await this.#tasks.start()
  }

  async stop(): Promise<void> {
    this.#queue.stop()
    await Promise.all([this.#tasks.stop(), this.#runs.stop()])
    await this.#queue.idle()
  }

  /** Resolves when no key is queued or being reconciled. */
  idle(): Promise<void> {
    return this.#queue.idle()
  }

  async reconcile(key: string): Promise<void> {
    if (!this.#tasks.hasSynced || !this.#runs.hasSynced) return
    const { namespace, name } = splitKey(key)
    const task = this.#tasks.get(namespace, name)
    if (task === undefined) {
      this.#written.delete(key)
      return
    }
    // Our own last status write has not reached the cache yet: deciding on the older object would
    // only end in a Conflict. Look again when the watch has caught up.
    const written = this.#written.get(key)
    if (written !== undefined) {
      if (BigInt(task.metadata.resourceVersion) < written) {
        this.#queue.addAfter(key, 50)
        return
      }
      this.#written.delete(key)
    }
    this.stats.reconciles += 1
    const runs = this.#runs.byIndex(BY_TASK, key).filter((run) => run.spec.taskRef?.name === name)
    const actions = reconcileTask({ task, runs, now: this.#clock.now() }, this.#options.reconcile)
    await this.#apply(key, task, actions)
  }

  /**
   * After the slot: CronJob uses 100 ms. With runs created ahead nothing waits for this reconcile
   * (it records the slot in status), so it keeps 2 s clear of the runs starting at the slot.
   */
  #padding(): number {
    return this.#options.requeuePaddingMs ?? ((this.#options.reconcile?.lookaheadMs ?? 0) > 0 ? 2_000 : 100)
  }

  async #apply(key: string, task: TaskResource, actions: Action[]): Promise<void> {
    const { namespace, name } = task.metadata
    for (const action of actions) {
      if (action.type !== 'createRun') continue
      try {
        await this.#options.runs.create({
          apiVersion: task.apiVersion,
          kind: 'Run',
          metadata: {
            name: action.name,
            namespace,
            labels: { [TASK_LABEL]: name, [TRIGGER_LABEL]: action.trigger },
            ownerReferences: [{ kind: 'Task', name, uid: task.metadata.uid }],
          },
          spec: {
            taskRef: { name, uid: task.metadata.uid, generation: task.metadata.generation },
            trigger: { type: action.trigger, scheduledTime: action.slot },
            ...(action.notBefore === undefined ? {} : { notBefore: action.notBefore }),
          },
          status: { phase: 'Pending' },
        })
        this.stats.runsCreated += 1
      } catch (err) {
        if (!isAlreadyExists(err)) throw err
        this.stats.alreadyExists += 1 // a restart or another controller created this slot: done
      }
    }
    for (const action of actions) {
      if (action.type !== 'deleteRun') continue
      try {
        await this.#options.runs.delete(namespace, action.name)
        this.stats.runsDeleted += 1
      } catch (err) {
        if (!(err instanceof NotFoundError)) throw err
      }
    }
    for (const action of actions) {
      if (action.type !== 'patchTaskStatus') continue
      const current = task.status ?? {}
      let desired = action.status
      if (this.#options.costOf !== undefined && runFinishedSince(current, desired)) {
        const cost = await this.#options.costOf(name)
        if (cost !== undefined) desired = { ...desired, costMicros: cost.toString() }
      }
      const updated = await this.#options.tasks.patchStatus(namespace, name, statusPatch(current, desired), {
        resourceVersion: task.metadata.resourceVersion,
      })
      this.#written.set(key, BigInt(updated.metadata.resourceVersion))
      this.stats.statusWrites += 1
    }
    for (const action of actions) {
      if (action.type === 'requeueAfter') this.#queue.addAfter(key, action.ms + this.#padding())
    }
  }
}

/** A run left the active list, or a newer run finished, since `current` was written. */
function runFinishedSince(current: TaskStatus, desired: TaskStatus): boolean {
  if (desired.lastRunName !== current.lastRunName || desired.lastRunPhase !== current.lastRunPhase) return true
  const active = new Set(desired.active ?? [])
  return (current.active ?? []).some((name) => !active.has(name))
}

/** Merge patch turning `current` into `desired`: keys dropped from desired are sent as null. */
export function statusPatch(current: TaskStatus, desired: TaskStatus): TaskStatus {
  const patch: Record<string, unknown> = { ...desired }
  for (const key of Object.keys(current)) {
    if ((desired as Record<string, unknown>)[key] === undefined) patch[key] = null
  }
  return patch as TaskStatus
}
