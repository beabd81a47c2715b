// The Task controller: a thin adapter. Informers on Tasks and Runs feed a per-key work queue (a Run
// event enqueues its owning Task); each key is reconciled from the informer caches by the pure
// reconcileTask and the actions are applied to the stores:
// - createRun first, then the status write, so a crash in between at worst replays the create
//   (AlreadyExists = success; the deterministic name makes it the same Run);
// - patchTaskStatus is optimistic on the cached resourceVersion: a Conflict (stale cache, or a
//   second controller got there first) fails the key and the queue retries it with backoff; that is
//   routine, so it is counted (stats.conflicts) and logged at debug, never passed to onError;
// - requeueAfter arms a timer on the injected clock (+ padding) for the next slot, due at the
//   reconcile's `now` + ms however long its writes took;
// - what a write got back goes into its informer's cache at once (Informer.observe, client-go's
//   mutation cache): the next reconcile decides on it, and the watch event echoing it later is
//   left out undecoded, as it carries the version the cache holds;
// - events that only echo what a reconcile already decided on start no reconcile: our status
//   write's object, whether the cache got it from the answer or from the watch, and the ADDED event
//   of a Run we created (unless another reconcile of the Task started before it came). Everything
//   else, including another writer's change that lands during our write, reconciles as usual.
// A reconcile reads its Task's Runs from the shared Run informer's index (RUNS_BY_TASK), not by
// scanning every cached Run.
import { Informer } from './informer.ts'
import { isFinished, reconcileTask, type Action, type ReconcileOptions } from './task-reconciler.ts'
import { WorkQueue } from './work-queue.ts'
import {
  isAlreadyExists,
  isConflict,
  type NewResource,
  NotFoundError,
  objectKey,
  type ResourceStore,
  type RunResource,
  splitKey,
  type TaskResource,
  type TaskResourceStatus,
} from '../src/scheduler/contract/index.ts'
import { realTimers, type Timers } from '../src/platform/clock.ts'

export interface Clock extends Timers {
  now(): Date
}

export const systemClock: Clock = { now: () => new Date(), ...realTimers }

function ownerTaskOf(run: RunResource): string | undefined {
  return run.metadata.ownerReferences?.find((ref) => ref.kind === 'Task')?.name ?? run.spec.taskRef?.name
}

export const TASK_LABEL = 'jobs.agent-gateway.dev/task'
export const TRIGGER_LABEL = 'jobs.agent-gateway.dev/trigger'

/** Name of the Run informer's index of Runs by Task: `runInformer.byIndex(RUNS_BY_TASK, '<namespace>/<task>')`. */
export const RUNS_BY_TASK = 'task'

/**
 * The index function of RUNS_BY_TASK: the key (`<namespace>/<name>`) of every Task the Run names.
 * Every writer (this controller, the scheduler API) names it three ways at once: the task label,
 * a Task ownerReference and spec.taskRef; a Run made by hand (kubectl, tests) may carry only some of
 * them, so the Run is filed under each name it gives (usually one). A Task's Runs in the
 * reconciler's sense are the Runs of its bucket whose spec.taskRef names it.
 */
export function runTaskKeys(run: RunResource): string[] {
  const { namespace, labels, ownerReferences } = run.metadata
  const label = labels?.[TASK_LABEL]
  const owner = ownerReferences?.find((ref) => ref.kind === 'Task')?.name
  const ref = run.spec.taskRef?.name
  const keys: string[] = []
  for (const name of [ref, owner, label]) {
    if (name === undefined || name === '') continue
    const key = objectKey({ namespace, name })
    if (!keys.includes(key)) keys.push(key)
  }
  return keys
}

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
  /** Task keys whose status write is in flight → resourceVersions of the MODIFIED events seen meanwhile. */
  readonly #writing = new Map<string, Set<bigint>>()
  /**
   * Runs this controller is creating or created, by Task key, whose ADDED event has not arrived:
   * that event only shows what the creating reconcile already decided on, so it is not worth a
   * reconcile (client-go's expectations). A reconcile of the Task that starts before it arrives
   * decided without the Run, so it forgets them and the event is then handled like any other.
   */
  readonly #expected = new Map<string, Set<string>>()
  /** Counters for tests and metrics. */
  readonly stats = { reconciles: 0, runsCreated: 0, alreadyExists: 0, runsDeleted: 0, statusWrites: 0, conflicts: 0, errors: 0, echoesSkipped: 0 }

  constructor(options: TaskControllerOptions) {
    this.#options = options
    this.#clock = options.clock ?? systemClock
    const onError = options.onError ?? (() => {})
    const informerOptions =
      options.namespace === undefined ? { onError: (e: unknown) => onError('informer', e) } : { namespace: options.namespace, onError: (e: unknown) => onError('informer', e) }
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
    // Runs by Task, so a reconcile reads its Task's Runs without scanning every cached Run (O(N)
    // per reconcile, O(N²) for N Tasks). Idempotent on an informer shared with the RunController.
    this.#runs.addIndex(RUNS_BY_TASK, runTaskKeys)
    this.#tasks.on((type, task) => {
      const key = objectKey(task.metadata)
      if (type === 'MODIFIED') {
        const rv = BigInt(task.metadata.resourceVersion)
        const writing = this.#writing.get(key)
        if (writing !== undefined) return void writing.add(rv) // decided when the write answers
      }
      this.#queue.add(key)
    })
    this.#runs.on((type, run, old) => {
      if (type === 'ADDED' && this.#observeExpected(run)) return
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
      this.#expected.delete(key)
      return
    }
    this.stats.reconciles += 1
    this.#expected.delete(key) // this reconcile decides on the cache as it is, without Runs still to arrive
    const runs = this.#runs.byIndex(RUNS_BY_TASK, key).filter((run) => run.spec.taskRef?.name === name)
    const now = this.#clock.now()
    const actions = reconcileTask({ task, runs, now }, this.#options.reconcile)
    await this.#apply(key, task, actions, now)
  }

  #expect(taskKey: string, runKey: string): void {
    let runs = this.#expected.get(taskKey)
    if (runs === undefined) this.#expected.set(taskKey, (runs = new Set()))
    runs.add(runKey)
  }

  /** Forgets an expected Run; false if it was not expected (any more). */
  #unexpect(taskKey: string, runKey: string): boolean {
    const runs = this.#expected.get(taskKey)
    if (runs?.delete(runKey) !== true) return false
    if (runs.size === 0) this.#expected.delete(taskKey)
    return true
  }

  /** An ADDED Run one of our reconciles created and still expects: consumed, true (no reconcile needed). */
  #observeExpected(run: RunResource): boolean {
    const runKey = objectKey(run.metadata)
    for (const taskKey of runTaskKeys(run)) {
      const runs = this.#expected.get(taskKey)
      if (runs?.has(runKey) !== true) continue
      this.#unexpect(taskKey, runKey)
      return true
    }
    return false
  }

  /**
   * After the slot: CronJob uses 100 ms. With runs created ahead nothing waits for this reconcile
   * (it records the slot in status), so it keeps 2 s clear of the runs starting at the slot.
   */
  #padding(): number {
    return this.#options.requeuePaddingMs ?? ((this.#options.reconcile?.lookaheadMs ?? 0) > 0 ? 2_000 : 100)
  }

  async #apply(key: string, task: TaskResource, actions: Action[], now: Date): Promise<void> {
    const { namespace, name } = task.metadata
    for (const action of actions) {
      if (action.type !== 'createRun') continue
      const runKey = objectKey({ namespace, name: action.name })
      this.#expect(key, runKey) // before the create: its ADDED event may come before the answer
      try {
        this.#runs.observe(await this.#options.runs.create(runOf(task, action)))
        this.stats.runsCreated += 1
      } catch (err) {
        // Not made by us: its ADDED event, still to come, is handled as usual; one that already
        // came was taken for ours and skipped, so look at what the other creator made.
        const seen = !this.#unexpect(key, runKey)
        if (!isAlreadyExists(err)) throw err
        this.stats.alreadyExists += 1 // a restart or another controller created this slot: done
        if (seen) this.#queue.add(key)
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
      // Task changes that arrive while the write is in flight wait for its answer: until then the
      // echo of the write cannot be told from another writer's change (this reconcile runs again
      // after it either way, so nothing is delayed). The answer itself goes into the cache here,
      // so it is one of them, unless the watch brought it first.
      const seen = new Set<bigint>()
      this.#writing.set(key, seen)
      let written: bigint
      try {
        const updated = await this.#options.tasks.patchStatus(namespace, name, statusPatch(current, desired), {
          resourceVersion: task.metadata.resourceVersion,
        })
        written = BigInt(updated.metadata.resourceVersion)
        this.#tasks.observe(updated)
      } catch (err) {
        if (seen.size > 0) this.#queue.add(key)
        throw err
      } finally {
        this.#writing.delete(key)
      }
      if (seen.has(written)) this.stats.echoesSkipped += 1 // the cache holds our write: nothing to decide
      for (const rv of seen) {
        if (rv === written) continue
        this.#queue.add(key) // another change came in meanwhile: reconcile again
        break
      }
      this.stats.statusWrites += 1
    }
    for (const action of actions) {
      if (action.type !== 'requeueAfter') continue
      // Due at the decision's instant + ms (+ padding), however long the writes above took: a
      // timer armed for `ms` from now would fire late by that long.
      const delay = now.getTime() + action.ms + this.#padding() - this.#clock.now().getTime()
      if (delay > 0) this.#queue.addAfter(key, delay)
      else this.#queue.add(key)
    }
  }
}

/** The Run a createRun action of `task` makes: named by the action, labelled and owned by the Task. */
export function runOf(task: TaskResource, action: Extract<Action, { type: 'createRun' }>): NewResource<RunResource> {
  const { namespace, name } = task.metadata
  return {
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
  }
}

/** A run left the active list, or a newer run finished, since `current` was written. */
function runFinishedSince(current: TaskResourceStatus, desired: TaskResourceStatus): boolean {
  if (desired.lastRunName !== current.lastRunName || desired.lastRunPhase !== current.lastRunPhase) return true
  const active = new Set(desired.active ?? [])
  return (current.active ?? []).some((name) => !active.has(name))
}

/** Merge patch turning `current` into `desired`: keys dropped from desired are sent as null. */
export function statusPatch(current: TaskResourceStatus, desired: TaskResourceStatus): TaskResourceStatus {
  const patch: Record<string, unknown> = { ...desired }
  for (const key of Object.keys(current)) {
    if ((desired as Record<string, unknown>)[key] === undefined) patch[key] = null
  }
  return patch as TaskResourceStatus
}
