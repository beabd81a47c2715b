// The Run controller: turns Run resources into executions. An informer on Runs feeds a per-key work
// queue; the pure reconcileRun decides per Run, the adapter applies:
// - prepare: claim the run in the ledger (the dispatch: funding check + reservation, once per run
//   name) and build its execution request. A Run with spec.notBefore (created ahead of its cron
//   slot, or a delayed continuation) is prepared up to `prepareAheadMs` before that instant, so the
//   slot itself costs no database round trip per run;
// - start: at notBefore (or at once), prepared runs are marked started in the ledger in batches
//   (claimed → running, exactly once per run name) and executed through the RunExecutor port, up to
//   `maxParallel` at a time; then the cost is settled in the ledger exactly once and the final phase
//   is written;
// - a Run deleted or cancelled mid-flight aborts its execution (the ledger still settles what it
//   used); one deleted or cancelled while prepared is released at no cost;
// - a Run found Running (or started in the ledger while its Running phase was never written) that
//   this process is not executing was orphaned by a restart: the Kubernetes executor re-attaches to
//   its Job (same deterministic Job name), the local one cannot (the sandbox died with the old
//   process) and the run is settled as lost: failed, outcome infra_error, at no cost (docs/scheduler.md).
//   A prepared run is only in memory: after a restart its claim is found again and it is prepared anew.
// Money never lives in the Run resource: its status mirrors the settled cost for display only.
import type { ControllerLogger } from './task-controller.ts'
import { Informer } from './informer.ts'
import { isFinished } from './task-reconciler.ts'
import { WorkQueue } from './work-queue.ts'
import {
  type ExecutionResult,
  isConflict,
  objectKey,
  type PreparedRequest,
  type ResourceStore,
  type RunExecutor,
  type RunLedger,
  type RunPhase,
  type RunResource,
  type RunResourceStatus,
  type SettledRun,
  splitKey,
} from '../src/scheduler/contract/index.ts'
import { realTimers, type Timers } from '../src/platform/clock.ts'

export type RunAction =
  | { type: 'none' }
  | { type: 'prepare'; dueAt: number }
  | { type: 'adopt' }
  | { type: 'settleLost' }
  | { type: 'abort' }
  | { type: 'release' }
  | { type: 'requeueAfter'; ms: number }

export interface RunObserved {
  run: RunResource | undefined
  /** This process is executing the run now. */
  executing: boolean
  /** This process has claimed the run and holds it until its instant. */
  prepared: boolean
  /** The executor can re-attach to an attempt a previous process started (Kubernetes Jobs). */
  canAdopt: boolean
  now: Date
  /** How long before spec.notBefore a run is claimed and prepared. */
  prepareAheadMs: number
}

/** PURE: what to do with one Run. */
export function reconcileRun(observed: RunObserved): RunAction {
  const { run, executing, prepared, now } = observed
  if (run === undefined || run.metadata.deletionTimestamp !== undefined || run.spec.cancelRequested === true) {
    return executing ? { type: 'abort' } : prepared ? { type: 'release' } : { type: 'none' }
  }
  if (isFinished(run) || executing || prepared) return { type: 'none' }
  const phase = run.status?.phase ?? 'Pending'
  if (phase === 'Running') return observed.canAdopt ? { type: 'adopt' } : { type: 'settleLost' }
  const notBefore = run.spec.notBefore === undefined ? Number.NaN : Date.parse(run.spec.notBefore)
  const dueAt = Number.isNaN(notBefore) ? now.getTime() : Math.max(notBefore, now.getTime())
  const early = dueAt - now.getTime() - observed.prepareAheadMs
  if (early > 0) return { type: 'requeueAfter', ms: early }
  return { type: 'prepare', dueAt }
}

const PHASE_OF: Record<string, RunPhase> = { succeeded: 'Succeeded', failed: 'Failed', timed_out: 'TimedOut', cancelled: 'Cancelled', skipped: 'Rejected' }

export interface RunControllerOptions {
  runs: ResourceStore<RunResource>
  ledger: RunLedger
  executor: RunExecutor
  namespace?: string
  clock?: { now(): Date } & Timers
  /** Runs executing at once in this process (default 4); more wait, claimed, for a free place. */
  maxParallel?: number
  /** Claim and prepare a run this long before its spec.notBefore (default 0: at that instant). */
  prepareAheadMs?: number
  /** Runs reconciled (claimed, prepared) at once (default 64; database calls queue on the pool). */
  concurrency?: number
  /** Finished runs being settled at once (default 500; the ledger group-commits them); the rest wait their turn. */
  settleConcurrency?: number
  /** How long a deferred run (behind an in-flight one) waits before it is looked at again. */
  deferMs?: number
  /**
   * Every this often (and at start), ledger runs claimed or running for over a minute whose Run
   * resource is gone (deleted while no controller watched) are settled: released, or lost. Default 60 s; 0 = never.
   */
  sweepMs?: number
  /** A Run informer shared with the TaskController (one cache of every Run instead of two). */
  runInformer?: Informer<RunResource>
  /** Failures worth an operator's look (logged at error). Conflicts never come here. */
  onError?: (where: string, err: unknown) => void
  /** Where routine events go (a Conflict, requeued): debug lines. A pino logger fits. */
  logger?: ControllerLogger
}

interface Prepared {
  key: string
  run: RunResource
  request: PreparedRequest
  abort: AbortController
  dueAt: number
  adopt: boolean
}

/** Runs marked started per ledger call, and such calls in flight at once. */
const START_BATCH = 2_000
const START_CALLS = 4

export class RunController {
  readonly #options: RunControllerOptions
  readonly #clock: { now(): Date } & Timers
  readonly #informer: Informer<RunResource>
  readonly #queue: WorkQueue
  readonly #executing = new Map<string, AbortController>()
  readonly #done = new Set<Promise<void>>()
  /** Runs this process settled whose final phase the informer has not shown yet (not orphans). */
  readonly #settled = new Set<string>()
  /** Claimed and prepared, not started: by key, and by the instant they are due. */
  readonly #prepared = new Map<string, Prepared>()
  readonly #dueBuckets = new Map<number, { keys: Set<string>; timer: unknown }>()
  /** Due prepared runs waiting for a free place, oldest first. */
  #ready: string[] = []
  #starting = 0
  #startCalls = 0
  #stopped = false
  readonly stats = { started: 0, finished: 0, skipped: 0, deferred: 0, lost: 0, adopted: 0, released: 0, conflicts: 0, errors: 0 }

  constructor(options: RunControllerOptions) {
    this.#options = options
    this.#clock = options.clock ?? { now: () => new Date(), ...realTimers }
    const onError = options.onError ?? (() => {})
    this.#informer =
      options.runInformer ??
      new Informer(options.runs, {
        ...(options.namespace === undefined ? {} : { namespace: options.namespace }),
        onError: (error) => onError('run informer', error),
      })
    this.#queue = new WorkQueue((key) => this.reconcile(key), {
      concurrency: options.concurrency ?? 64,
      delayTimers: this.#clock,
      onError: (key, error) => {
        this.stats.errors += 1
        onError(`run ${key}`, error)
      },
      // Two writers raced on a resource (409 Conflict): routine, retried with backoff.
      isRoutine: isConflict,
      onRoutine: (key, error) => {
        this.stats.conflicts += 1
        options.logger?.debug({ key, reason: (error as Error).message }, 'run controller: resourceVersion conflict; requeued')
      },
    })
    this.#informer.on((_type, run) => this.#queue.add(objectKey(run.metadata)))
  }

  async start(): Promise<void> {
    this.#stopped = false
    await this.#informer.start()
    this.#armSweep(0)
  }

  #sweepTimer: unknown

  #armSweep(ms: number): void {
    const every = this.#options.sweepMs ?? 60_000
    if (every <= 0 || this.#options.ledger.openRuns === undefined || this.#stopped) return
    this.#sweepTimer = this.#clock.setTimeout(() => {
      this.sweep()
        .catch((error: unknown) => this.#options.onError?.('orphan sweep', error))
        .finally(() => this.#armSweep(every))
    }, ms)
  }

  /**
   * Settles ledger runs whose Run resource is gone and that this process does not hold: a claim is
   * released at no cost, a started run is lost (its sandbox or Job went with the resource).
   */
  async sweep(): Promise<number> {
    const { ledger } = this.#options
    if (ledger.openRuns === undefined || !this.#informer.hasSynced) return 0
    const open = await ledger.openRuns(new Date(this.#clock.now().getTime() - 60_000))
    if (open.length === 0) return 0
    const known = new Set(this.#informer.list().map((run) => run.metadata.name))
    const held = new Set([...this.#prepared.keys(), ...this.#executing.keys()].map((key) => splitKey(key).name))
    let settled = 0
    for (const { id, status } of open) {
      if (known.has(id) || held.has(id) || this.#stopped) continue
      if (status === 'claimed') await ledger.releaseRun(id, 'the run resource was deleted before the run started')
      else await ledger.finishRun(id, ledger.lostResult('the run resource was deleted while the run was in flight'))
      settled += 1
    }
    return settled
  }

  /**
   * Stops reconciling. By default in-flight runs are cancelled and settled; with
   * `{ cancelRunning: false }` they are left alone (a lost leader Lease: the Jobs keep running and
   * the next leader adopts them), and nothing waits for them. Prepared runs are dropped, not
   * released: their claims stay, and the next controller prepares them again.
   */
  async stop(options: { cancelRunning?: boolean } = {}): Promise<void> {
    this.#stopped = true
    this.#queue.stop()
    if (this.#sweepTimer !== undefined) this.#clock.clearTimeout(this.#sweepTimer as never)
    for (const bucket of this.#dueBuckets.values()) this.#clock.clearTimeout(bucket.timer as never)
    this.#dueBuckets.clear()
    this.#prepared.clear()
    this.#ready = []
    await this.#informer.stop()
    if (options.cancelRunning === false) return
    for (const abort of this.#executing.values()) abort.abort()
    await Promise.allSettled([...this.#done])
  }

  /** Resolves when nothing is queued, reconciling, starting or executing (runs waiting for their instant do not count). */
  async idle(): Promise<void> {
    for (;;) {
      await this.#queue.idle()
      if (this.#done.size === 0 && this.#starting === 0 && this.#ready.length === 0) return
      if (this.#done.size > 0) await Promise.allSettled([...this.#done])
      else await new Promise((resolve) => setImmediate(resolve))
    }
  }

  get executing(): number {
    return this.#executing.size
  }

  /** Claimed runs held until their instant or a free place. */
  get prepared(): number {
    return this.#prepared.size
  }

  async reconcile(key: string): Promise<void> {
    if (!this.#informer.hasSynced) return
    const { namespace, name } = splitKey(key)
    const run = this.#informer.get(namespace, name)
    if (this.#settled.has(key)) {
      if (run === undefined || isFinished(run)) this.#settled.delete(key)
      return
    }
    const action = reconcileRun({
      run,
      executing: this.#executing.has(key),
      prepared: this.#prepared.has(key),
      canAdopt: this.#options.executor.kind === 'kubernetes',
      now: this.#clock.now(),
      prepareAheadMs: this.#options.prepareAheadMs ?? 0,
    })
    switch (action.type) {
      case 'none':
        return
      case 'abort':
        this.#executing.get(key)?.abort()
        return
      case 'release':
        await this.#release(key, run === undefined ? 'the run was deleted before it started' : 'the run was cancelled before it started')
        return
      case 'requeueAfter':
        this.#queue.addAfter(key, action.ms + 50)
        return
      case 'settleLost':
        await this.#settleLost(run as RunResource)
        return
      case 'adopt':
      case 'prepare': {
        const dueAt = action.type === 'prepare' ? action.dueAt : this.#clock.now().getTime()
        // A run due now takes a place only when one is free (it is claimed at that moment); one due
        // later is claimed ahead whatever the load, and waits for a place at its instant.
        if (dueAt <= this.#clock.now().getTime() && this.#load() >= this.#maxParallel()) {
          this.#queue.addAfter(key, 250)
          return
        }
        await this.#prepare(key, run as RunResource, dueAt, action.type === 'adopt')
      }
    }
  }

  #maxParallel(): number {
    return this.#options.maxParallel ?? 4
  }

  /** Places taken or promised: executing, being started, due and waiting. */
  #load(): number {
    return this.#executing.size + this.#starting + this.#ready.length
  }

  async #settleLost(run: RunResource): Promise<void> {
    // Orphaned by a restart of a local executor: the sandbox is gone; settle it as lost (free).
    const { ledger } = this.#options
    this.stats.lost += 1
    const { run: final } = await ledger.finishRun(run.metadata.name, ledger.lostResult('the executor restarted while the run was in flight'))
    await this.#writeFinal(run, final)
  }

  async #prepare(key: string, run: RunResource, dueAt: number, adopt: boolean): Promise<void> {
    const { ledger, runs } = this.#options
    const { namespace, name } = run.metadata
    const ahead = dueAt > this.#clock.now().getTime()
    const abort = new AbortController()
    const claim = await ledger.dispatchRun({ runId: name, taskId: run.spec.taskRef.name, trigger: run.spec.trigger.type, signal: abort.signal, ...(ahead ? { ahead } : {}) })
    if (claim.kind === 'deferred') {
      this.stats.deferred += 1
      // Behind an in-flight run: look again soon, and at the latest at the run's instant (where a
      // scheduled run still behind one is skipped, concurrencyPolicy Forbid).
      const wait = Math.min(this.#options.deferMs ?? 5_000, Math.max(0, dueAt - this.#clock.now().getTime()))
      this.#queue.addAfter(key, Math.max(50, wait))
      return
    }
    if (claim.kind === 'skipped') {
      this.stats.skipped += 1
      await runs.patchStatus(namespace, name, { phase: 'Rejected', reason: claim.reason, message: claim.message, completionTime: this.#clock.now().toISOString() })
      return
    }
    if (claim.run.status === 'running' && !adopt) {
      // Started by a process that died before its phase Running was written. A local sandbox died
      // with that process: the run is lost. A Kubernetes Job outlives it: re-attach, as for Running.
      if (this.#options.executor.kind !== 'kubernetes') {
        await this.#settleLost(run)
        return
      }
      adopt = true
    }
    if (claim.run.status !== 'claimed' && claim.run.status !== 'running') {
      // Settled already (a previous attempt finished before its status write): mirror it.
      await this.#writeFinal(run, claim.run)
      return
    }
    const request = claim.request
    if (request === undefined || this.#stopped) return
    const prepared: Prepared = { key, run, request, abort, dueAt, adopt }
    this.#prepared.set(key, prepared)
    // Deleted or cancelled while the claim was being made: release it now.
    const current = this.#informer.get(namespace, name)
    if (current === undefined || current.spec.cancelRequested === true || current.metadata.deletionTimestamp !== undefined) {
      await this.#release(key, 'the run was deleted before it started')
      return
    }
    if (dueAt <= this.#clock.now().getTime()) {
      this.#ready.push(key)
      this.#pump()
      return
    }
    let bucket = this.#dueBuckets.get(dueAt)
    if (bucket === undefined) {
      const keys = new Set<string>()
      const timer = this.#clock.setTimeout(() => this.#due(dueAt), Math.max(0, dueAt - this.#clock.now().getTime()))
      bucket = { keys, timer }
      this.#dueBuckets.set(dueAt, bucket)
    }
    bucket.keys.add(key)
  }

  /** An instant came: its prepared runs queue for a place, in the order they were prepared. */
  #due(dueAt: number): void {
    const bucket = this.#dueBuckets.get(dueAt)
    this.#dueBuckets.delete(dueAt)
    if (bucket === undefined || this.#stopped) return
    for (const key of bucket.keys) if (this.#prepared.has(key)) this.#ready.push(key)
    this.#pump()
  }

  /** Starts due prepared runs while places are free: one ledger call per batch marks them started. */
  #pump(): void {
    while (!this.#stopped && this.#ready.length > 0 && this.#startCalls < START_CALLS) {
      const free = this.#maxParallel() - this.#executing.size - this.#starting
      if (free <= 0) return
      const batch: Prepared[] = []
      while (batch.length < Math.min(free, START_BATCH) && this.#ready.length > 0) {
        const prepared = this.#prepared.get(this.#ready.shift() as string)
        if (prepared !== undefined) batch.push(prepared)
      }
      if (batch.length === 0) return
      this.#starting += batch.length
      this.#startCalls += 1
      const names = batch.map((p) => p.run.metadata.name)
      const adopt = batch.filter((p) => p.adopt).map((p) => p.run.metadata.name)
      this.#options.ledger
        .startRuns(names, adopt)
        .then(
          (started) => {
            for (const prepared of batch) {
              // Released meanwhile (deleted or cancelled): the release settled it; never execute it.
              if (this.#prepared.get(prepared.key) !== prepared) continue
              this.#prepared.delete(prepared.key)
              if (started.has(prepared.run.metadata.name)) this.#launch(prepared)
            }
          },
          (error: unknown) => {
            // Not started: they stay prepared and are tried again after a pause.
            this.stats.errors += 1
            this.#options.onError?.('start runs', error)
            const keys = batch.filter((p) => this.#prepared.get(p.key) === p).map((p) => p.key)
            this.#clock.setTimeout(() => {
              this.#ready.unshift(...keys.filter((key) => this.#prepared.has(key)))
              this.#pump()
            }, 1_000)
          },
        )
        .finally(() => {
          this.#starting -= batch.length
          this.#startCalls -= 1
          this.#pump()
        })
    }
  }

  #settling = 0
  readonly #settleWaiters: (() => void)[] = []

  async #settleSlot(): Promise<void> {
    // A place freed by a finished settlement is handed straight to the oldest waiter.
    if (this.#settling >= (this.#options.settleConcurrency ?? 500)) await new Promise<void>((resolve) => this.#settleWaiters.push(resolve))
    else this.#settling += 1
  }

  #launch(prepared: Prepared): void {
    const { key, adopt } = prepared
    this.#executing.set(key, prepared.abort)
    if (adopt) this.stats.adopted += 1
    else this.stats.started += 1
    const done = this.#execute(prepared)
      .catch((error: unknown) => {
        this.stats.errors += 1
        this.#options.onError?.(`run ${key}`, error)
      })
      .finally(() => {
        this.#free(key)
        this.#done.delete(done)
      })
    this.#done.add(done)
  }

  /** The attempt is over: its place goes to the next due run (settling it needs no place). */
  #free(key: string): void {
    if (!this.#executing.has(key)) return
    // Marked settled first: until its final phase shows, the Run (still Running) is no orphan.
    this.#settled.add(key)
    this.#executing.delete(key)
    this.#pump()
  }

  /** finishRun is idempotent: a failed attempt (a database hiccup) is retried before giving up. */
  async #settle(name: string, result: ExecutionResult): Promise<{ run: SettledRun }> {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await this.#options.ledger.finishRun(name, result)
      } catch (error) {
        if (attempt >= 3 || this.#stopped) throw error
        this.#options.onError?.(`settle ${name} (attempt ${attempt})`, error)
        await new Promise<void>((resolve) => this.#clock.setTimeout(() => resolve(), 1_000 * attempt))
      }
    }
  }

  async #release(key: string, reason: string): Promise<void> {
    const prepared = this.#prepared.get(key)
    if (prepared === undefined) return
    this.#prepared.delete(key)
    this.#dueBuckets.get(prepared.dueAt)?.keys.delete(key)
    prepared.abort.abort()
    this.stats.released += 1
    const { run: final } = await this.#options.ledger.releaseRun(prepared.run.metadata.name, reason)
    this.#settled.add(key)
    await this.#writeFinal(prepared.run, final)
  }

  async #execute(prepared: Prepared): Promise<void> {
    const { ledger, runs, executor } = this.#options
    const { run, request, abort } = prepared
    const { namespace, name, uid } = run.metadata
    let result: ExecutionResult
    let runningWrite: Promise<unknown> = Promise.resolve()
    try {
      const execution = executor.execute({ ...request, signal: abort.signal, namespace, runUid: uid, ...(run.spec.taskRef.uid ? { taskUid: run.spec.taskRef.uid } : {}) })
      // The Running phase is for display (kubectl; the API reads the ledger): off the start path,
      // but written before the final phase.
      runningWrite = runs.patchStatus(namespace, name, { phase: 'Running', startTime: this.#clock.now().toISOString() }).catch(() => {})
      result = await execution
    } catch (error) {
      this.#options.onError?.(`execute ${name}`, error)
      result = ledger.lostResult(`the executor failed: ${(error as Error).message ?? String(error)}`)
    }
    this.#free(prepared.key)
    // Settling waits for one of a bounded number of places (the ledger group-commits them), so a
    // burst of finished runs never holds unbounded work in memory.
    await this.#settleSlot()
    try {
      const { run: final } = await this.#settle(name, result)
      this.stats.finished += 1
      await runningWrite
      await this.#writeFinal(run, final)
    } finally {
      const next = this.#settleWaiters.shift()
      if (next !== undefined) next()
      else this.#settling -= 1
    }
  }

  async #writeFinal(run: RunResource, final: SettledRun): Promise<void> {
    const status: RunResourceStatus = {
      phase: PHASE_OF[final.status] ?? 'Failed',
      costMicros: final.cost_micros.toString(),
      exitCode: final.exit_code,
    }
    if (final.started_at) status.startTime = final.started_at.toISOString()
    if (final.finished_at) status.completionTime = final.finished_at.toISOString()
    if (final.started_at && final.finished_at) status.durationMs = final.finished_at.getTime() - final.started_at.getTime()
    try {
      await this.#options.runs.patchStatus(run.metadata.namespace, run.metadata.name, status)
    } catch (error) {
      // Deleted mid-flight (task deleted): the ledger is settled, nothing to mirror.
      if ((error as { code?: number }).code !== 404) throw error
    }
  }
}
