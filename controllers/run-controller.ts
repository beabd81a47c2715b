// The Run controller: turns Run resources into executions. An informer on Runs feeds a per-key work
// queue; the pure reconcileRun decides per Run, the adapter applies:
// - start: claim the run in the ledger (funding check + reservation, once per run name), mark the
//   Run Running, execute it through the RunExecutor port in the background, then finish it in the
//   ledger (cost settled exactly once) and write the final phase;
// - a Run deleted or cancelled mid-flight aborts its execution; the executor stops the attempt and
//   the ledger still settles what it used;
// - a Run found Running that this process is not executing was orphaned by a restart: the
//   Kubernetes executor re-attaches to its Job (same deterministic Job name), the local one cannot
//   (the sandbox died with the old process) and the run is settled as lost, at no cost.
// Money never lives in the Run resource: its status mirrors the settled cost for display only.
import { objectKey, splitKey, type ResourceStore } from './resource-store.ts'
import { Informer } from './informer.ts'
import { isFinished, type RunPhase, type RunResource, type RunStatus, type TriggerType } from './task-reconciler.ts'
import { realTimers, WorkQueue, type Timers } from './work-queue.ts'
import type { ExecutionRequest, ExecutionResult, RunExecutor } from './executor.ts'

/** A settled run as the ledger reports it. */
export interface SettledRun {
  status: string
  cost_micros: bigint
  exit_code: number | null
  started_at: Date | null
  finished_at: Date | null
}

/** The ledger side of a run (implemented by src/scheduler/service.ts). */
export interface RunLedger {
  claimRun(input: { runId: string; taskId: string; trigger: TriggerType }): Promise<
    { kind: 'claimed'; run: SettledRun } | { kind: 'skipped'; reason: string; message: string } | { kind: 'deferred' }
  >
  /** Marks the run started (claimed → running; with adopt also running → running) and builds its request; undefined if another executor started it. */
  executionRequest(runId: string, signal: AbortSignal, adopt?: boolean): Promise<Omit<ExecutionRequest, 'namespace' | 'taskUid' | 'runUid'> | undefined>
  finishRun(runId: string, result: ExecutionResult): Promise<{ run: SettledRun }>
  lostResult(reason: string): ExecutionResult
}

export type RunAction =
  | { type: 'none' }
  | { type: 'start' }
  | { type: 'adopt' }
  | { type: 'abort' }
  | { type: 'requeueAfter'; ms: number }

export interface RunObserved {
  run: RunResource | undefined
  /** This process is executing the run now. */
  executing: boolean
  /** The executor can re-attach to an attempt a previous process started (Kubernetes Jobs). */
  canAdopt: boolean
  now: Date
}

/** PURE: what to do with one Run. */
export function reconcileRun(observed: RunObserved): RunAction {
  const { run, executing, now } = observed
  if (run === undefined || run.metadata.deletionTimestamp !== undefined || run.spec.cancelRequested === true) {
    return executing ? { type: 'abort' } : { type: 'none' }
  }
  if (isFinished(run) || executing) return { type: 'none' }
  const phase = run.status?.phase ?? 'Pending'
  if (phase === 'Running') return observed.canAdopt ? { type: 'adopt' } : { type: 'start' }
  const notBefore = run.spec.notBefore === undefined ? undefined : Date.parse(run.spec.notBefore)
  if (notBefore !== undefined && notBefore > now.getTime()) return { type: 'requeueAfter', ms: notBefore - now.getTime() }
  return { type: 'start' }
}

const PHASE_OF: Record<string, RunPhase> = { succeeded: 'Succeeded', failed: 'Failed', timed_out: 'TimedOut', cancelled: 'Cancelled', skipped: 'Rejected' }

export interface RunControllerOptions {
  runs: ResourceStore<RunResource>
  ledger: RunLedger
  executor: RunExecutor
  namespace?: string
  clock?: { now(): Date } & Timers
  /** Runs executing at once in this process (default 4); more wait in the queue. */
  maxParallel?: number
  /** How long a deferred run (behind an in-flight one) waits before it is looked at again. */
  deferMs?: number
  onError?: (where: string, err: unknown) => void
}

export class RunController {
  readonly #options: RunControllerOptions
  readonly #clock: { now(): Date } & Timers
  readonly #informer: Informer<RunResource>
  readonly #queue: WorkQueue
  readonly #executing = new Map<string, AbortController>()
  readonly #done = new Set<Promise<void>>()
  /** Runs this process settled whose final phase the informer has not shown yet (not orphans). */
  readonly #settled = new Set<string>()
  readonly stats = { started: 0, finished: 0, skipped: 0, deferred: 0, lost: 0, adopted: 0, errors: 0 }

  constructor(options: RunControllerOptions) {
    this.#options = options
    this.#clock = options.clock ?? { now: () => new Date(), ...realTimers }
    const onError = options.onError ?? (() => {})
    this.#informer = new Informer(options.runs, {
      ...(options.namespace === undefined ? {} : { namespace: options.namespace }),
      onError: (error) => onError('run informer', error),
    })
    this.#queue = new WorkQueue((key) => this.reconcile(key), {
      concurrency: 8,
      delayTimers: this.#clock,
      onError: (key, error) => {
        this.stats.errors += 1
        onError(`run ${key}`, error)
      },
    })
    this.#informer.on((_type, run) => this.#queue.add(objectKey(run.metadata)))
  }

  async start(): Promise<void> {
    await this.#informer.start()
  }

  /**
   * Stops reconciling. By default in-flight runs are cancelled and settled; with
   * `{ cancelRunning: false }` they are left alone (a lost leader Lease: the Jobs keep running and
   * the next leader adopts them), and nothing waits for them.
   */
  async stop(options: { cancelRunning?: boolean } = {}): Promise<void> {
    this.#queue.stop()
    await this.#informer.stop()
    if (options.cancelRunning === false) return
    for (const abort of this.#executing.values()) abort.abort()
    await Promise.allSettled([...this.#done])
  }

  /** Resolves when nothing is queued, reconciling or executing. */
  async idle(): Promise<void> {
    for (;;) {
      await this.#queue.idle()
      if (this.#done.size === 0) return
      await Promise.allSettled([...this.#done])
    }
  }

  get executing(): number {
    return this.#executing.size
  }

  async reconcile(key: string): Promise<void> {
    if (!this.#informer.hasSynced) return
    const { namespace, name } = splitKey(key)
    const run = this.#informer.get(namespace, name)
    if (this.#settled.has(key)) {
      if (run === undefined || isFinished(run)) this.#settled.delete(key)
      return
    }
    const action = reconcileRun({ run, executing: this.#executing.has(key), canAdopt: this.#options.executor.kind === 'kubernetes', now: this.#clock.now() })
    switch (action.type) {
      case 'none':
        return
      case 'abort':
        this.#executing.get(key)?.abort()
        return
      case 'requeueAfter':
        this.#queue.addAfter(key, action.ms + 50)
        return
      case 'start':
      case 'adopt':
        if (this.#executing.size >= (this.#options.maxParallel ?? 4)) {
          this.#queue.addAfter(key, 250)
          return
        }
        await this.#start(key, run as RunResource, action.type === 'adopt')
    }
  }

  async #start(key: string, run: RunResource, adopt: boolean): Promise<void> {
    const { ledger, runs } = this.#options
    const { namespace, name } = run.metadata
    if (run.status?.phase === 'Running' && !adopt) {
      // Orphaned by a restart of a local executor: the sandbox is gone; settle it as lost (free).
      this.stats.lost += 1
      const { run: final } = await ledger.finishRun(name, ledger.lostResult('the executor restarted while the run was in flight'))
      await this.#writeFinal(run, final)
      return
    }
    const claim = await ledger.claimRun({ runId: name, taskId: run.spec.taskRef.name, trigger: run.spec.trigger.type })
    if (claim.kind === 'deferred') {
      this.stats.deferred += 1
      this.#queue.addAfter(key, this.#options.deferMs ?? 5_000)
      return
    }
    if (claim.kind === 'skipped') {
      this.stats.skipped += 1
      await runs.patchStatus(namespace, name, { phase: 'Rejected', reason: claim.reason, message: claim.message, completionTime: this.#clock.now().toISOString() })
      return
    }
    if (claim.run.status === 'running' && !adopt) {
      // Started by a process that died before writing phase Running: the sandbox died with it.
      this.stats.lost += 1
      const { run: final } = await ledger.finishRun(name, ledger.lostResult('the executor restarted while the run was in flight'))
      await this.#writeFinal(run, final)
      return
    }
    if (claim.run.status !== 'claimed' && claim.run.status !== 'running') {
      // Settled already (a previous attempt finished before its status write): mirror it.
      await this.#writeFinal(run, claim.run)
      return
    }
    const abort = new AbortController()
    this.#executing.set(key, abort)
    if (adopt) this.stats.adopted += 1
    else this.stats.started += 1
    const done = this.#execute(run, abort, adopt)
      .catch((error: unknown) => {
        this.stats.errors += 1
        this.#options.onError?.(`run ${key}`, error)
      })
      .finally(() => {
      this.#settled.add(key)
      this.#executing.delete(key)
      this.#done.delete(done)
    })
    this.#done.add(done)
  }

  async #execute(run: RunResource, abort: AbortController, adopt: boolean): Promise<void> {
    const { ledger, runs, executor } = this.#options
    const { namespace, name, uid } = run.metadata
    let result: ExecutionResult
    try {
      const request = await ledger.executionRequest(name, abort.signal, adopt)
      if (request === undefined) return // another executor started it first
      await runs.patchStatus(namespace, name, { phase: 'Running', startTime: this.#clock.now().toISOString() }).catch(() => {})
      result = await executor.execute({ ...request, namespace, runUid: uid, ...(run.spec.taskRef.uid ? { taskUid: run.spec.taskRef.uid } : {}) })
    } catch (error) {
      this.#options.onError?.(`execute ${name}`, error)
      result = ledger.lostResult(`the executor failed: ${(error as Error).message ?? String(error)}`)
    }
    const { run: final } = await ledger.finishRun(name, result)
    this.stats.finished += 1
    await this.#writeFinal(run, final)
  }

  async #writeFinal(run: RunResource, final: SettledRun): Promise<void> {
    const status: RunStatus = {
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
