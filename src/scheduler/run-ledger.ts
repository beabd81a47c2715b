// The run ledger: the controller's port into the scheduler (RunLedger). Dispatch decides a run
// against its task's state and escrow and holds the run's ceiling (batched: one transaction for
// many runs, their rows written in one statement); start marks runs running once; finish settles a
// finished attempt exactly once (min(actual, reserved) as run_cost, the reservation released, the
// task's state machine, a continuation, the completion e-mail); release settles a run that never
// started at no cost. Runs lost to the service (infra_error, executor restart) are not charged.
import { Batcher } from '../platform/batcher.ts'
import type { Db, Queryable } from '../platform/db/index.ts'
import { isUniqueViolation } from '../platform/db/index.ts'
import { AppError } from '../platform/errors.ts'
import type { Clock } from '../platform/clock.ts'
import type { Logger } from '../platform/logger.ts'
import type { Mailer } from '../platform/mailer.ts'
import { formatUsd, type Micros } from '../platform/money.ts'
import { storableText } from '../platform/text-safety.ts'
import { finalizeRun } from './domain/escrow.ts'
import type { SchedulerRates } from './domain/rates.ts'
import { transition, type RunOutcome, type RunTrigger } from './domain/states.ts'
import { appendRunCosts, escrowFactsMany } from './escrow-store.ts'
import type { SchedulerMarketplace } from './marketplace.ts'
import { RUN_FINAL_STATUSES, truncateUtf8, type RunRow, type StoredSpec, type TaskRow } from './records.ts'
import { newBearerSecret, secretHash, type SchedulerSecrets } from './secrets.ts'
import { snapshot, type AfterCommit, type TaskCore } from './task-core.ts'
import type { LogStore, TaskReads } from './task-reads.ts'
import type { TaskResources } from './task-resources.ts'
import { noAttemptResult, type ExecutionRequest, type ExecutionResult } from './contract/index.ts'
import { insertRuns, markRunsRunning, openRunsBefore, recordRunResults, runById, runsByIds, runsForUpdate, setRunTokenHashes, type NewRun, type RunResult } from './run-store.ts'
import { setConsecutiveCounts, taskExecutionSpecs, tasksForUpdate } from './task-store.ts'

export type RunClaim =
  | { kind: 'claimed'; run: RunRow }
  | { kind: 'skipped'; reason: string; message: string }
  /** Leave the Run pending and look again later (trigger/continuation behind an in-flight run). */
  | { kind: 'deferred' }

/** A run to dispatch: the API's synchronous claim, or the controller's (scheduled, triggered, a continuation). */
interface DispatchDecisionInput {
  runId: string
  taskId: string
  trigger: RunTrigger
  /** The run's instant has not come yet (see decideDispatch). */
  ahead?: boolean
}

/** A run the controller dispatches (scheduled, triggered or a continuation). */
export interface DispatchInput extends DispatchDecisionInput {
  /** Aborts the execution (the run was deleted or cancelled). */
  signal: AbortSignal
}

export type DispatchResult =
  | { kind: 'claimed'; run: RunRow; request?: Omit<ExecutionRequest, 'namespace' | 'taskUid' | 'runUid'>; token?: string }
  | { kind: 'skipped'; reason: string; message: string }
  | { kind: 'deferred' }

interface RunRowInsert extends NewRun {
  /** The helper token whose hash the row holds (handed to the execution, never stored). */
  token: string | null
}

export interface RunLedgerDeps {
  db: Db
  clock: Clock
  rates: SchedulerRates
  logger: Logger
  secrets: SchedulerSecrets
  mailer: Mailer
  logs: LogStore
  marketplace: SchedulerMarketplace
  core: TaskCore
  resources: TaskResources
  reads: TaskReads
  /** Public base of the scheduler ({scheduler_url}), named in completion e-mails. */
  publicUrl: string
  /** Base URL run sandboxes use to reach the helper endpoint. */
  internalUrl: string
}

export function createRunLedger(deps: RunLedgerDeps) {
  const { db, clock, rates, logger, secrets, marketplace, core, resources, reads, internalUrl } = deps

  /**
   * Dispatch decision for one run, in one transaction (decideDispatch): the state machine's
   * `dispatch` event with the funding check; on start, the run row is inserted holding the per-run
   * ceiling as its reservation. Idempotent per run id: a run already claimed is returned as claimed.
   */
  async function claimRun(input: { runId: string; taskId: string; trigger: RunTrigger }): Promise<RunClaim> {
    let decided: Awaited<ReturnType<typeof decideDispatch>>
    try {
      decided = await decideDispatch([input], false)
    } catch (error) {
      // The one-in-flight index: a concurrent claim won. Synchronous callers get their SPEC code.
      if (isUniqueViolation(error)) {
        if (input.trigger === 'webhook') throw new AppError('RATE_LIMIT', 'A webhook run of this task is already in flight; one at a time')
        if (input.trigger === 'manual') throw new AppError('RUN_IN_FLIGHT', 'A run of this task is claimed or running; one run at a time')
        return { kind: 'deferred' }
      }
      throw error
    }
    for (const { task, after } of decided.afters) await core.runAfterCommit(task, after)
    const result = decided.results[0] as DispatchResult
    return result.kind === 'claimed' ? { kind: 'claimed', run: result.run } : result
  }

  /**
   * The run controller's dispatch: the dispatch decision (decideDispatch) and, for a run claimed
   * (or running, when adopted), its execution request with a fresh helper token. Calls are
   * group-committed: one transaction decides a batch of runs (one per task), so thousands of runs
   * due in the same minute are dispatched in a few dozen transactions. Never throws a SPEC error: only
   * the schedule, trigger and continuation triggers come here (sync runs are claimed by the API).
   */
  function dispatchRun(input: DispatchInput): Promise<DispatchResult> {
    return dispatchBatcher.submit(input)
  }

  const dispatchBatcher = new Batcher<DispatchInput, DispatchResult>(
    async (inputs) => {
      try {
        return await dispatchBatch(inputs)
      } catch (error) {
        // A concurrent claim of one of these tasks won the one-in-flight index: decide one by one.
        if (!isUniqueViolation(error) || inputs.length === 1) {
          if (isUniqueViolation(error)) return [{ kind: 'deferred' }]
          throw error
        }
        const out: DispatchResult[] = []
        for (const input of inputs)
          out.push(
            await dispatchBatch([input]).then(
              (r) => r[0] as DispatchResult,
              (e: unknown) => (isUniqueViolation(e) ? { kind: 'deferred' } : Promise.reject(e)),
            ),
          )
        return out
      }
    },
    (input) => input.taskId,
    200,
  )

  /**
   * The dispatch decision for a batch of runs, in one transaction: tasks locked in id order, the
   * facts of all of them read in one statement, the run rows written in one. `tokens`: claimed runs
   * get a fresh helper token (the controller's dispatch, which then builds their requests); the
   * API's synchronous claim needs none. The caller runs the after-commit work.
   */
  async function decideDispatch(
    inputs: readonly DispatchDecisionInput[],
    tokens: boolean,
  ): Promise<{ results: DispatchResult[]; afters: { task: TaskRow; after: AfterCommit }[] }> {
    const afters: { task: TaskRow; after: AfterCommit }[] = []
    const results = await db.transaction(async (tx) => {
      const now = clock.now()
      const runIds = inputs.map((input) => input.runId)
      const existing = new Map((await runsByIds(tx, runIds)).map((row) => [row.id, row]))
      const fresh = inputs.filter((input) => !existing.has(input.runId))
      const taskIds = [...new Set(fresh.map((input) => input.taskId))].sort()
      const tasks = new Map(taskIds.length === 0 ? [] : (await tasksForUpdate(tx, taskIds)).map((task) => [task.id, task]))
      const known = taskIds.length === 0 ? new Map() : await escrowFactsMany(tx, taskIds)
      const out: (DispatchResult | { pending: RunRowInsert })[] = []
      const inserts: RunRowInsert[] = []
      const tokenUpdates: { id: string; token: string }[] = []
      const heldByOwner = new Map<string, bigint>()
      for (const input of inputs) {
        const row = existing.get(input.runId)
        if (row !== undefined) {
          if (row.status === 'skipped') out.push({ kind: 'skipped', reason: row.outcome ?? 'skipped', message: row.error ?? 'skipped' })
          else if (tokens && (row.status === 'claimed' || row.status === 'running')) {
            const token = newBearerSecret('run_')
            tokenUpdates.push({ id: row.id, token })
            out.push({ kind: 'claimed', run: row, token })
          } else out.push({ kind: 'claimed', run: row })
          continue
        }
        const task = tasks.get(input.taskId)
        if (task === undefined) {
          // The Task resource is written before the task row commits (createTask): a run created
          // ahead for a task made seconds before its slot can get here first. Look again later.
          out.push(input.ahead === true ? { kind: 'deferred' } : { kind: 'skipped', reason: 'TaskNotFound', message: `task ${input.taskId} does not exist` })
          continue
        }
        const facts = await core.factsOf(tx, task, known.get(task.id), heldByOwner.get(task.owner) ?? 0n)
        const result = transition(snapshot(task), { type: 'dispatch', trigger: input.trigger }, facts)
        if (input.ahead === true && result.effects.some((effect) => effect.type === 'skip_run' && effect.reason === 'run_in_flight')) {
          out.push({ kind: 'deferred' })
          continue
        }
        const after = await core.applyTransition(tx, task, result, facts)
        afters.push({ task, after })
        const start = result.effects.find((effect) => effect.type === 'start_run')
        if (start && start.type === 'start_run') {
          if (task.rail === 'marketplace') heldByOwner.set(task.owner, (heldByOwner.get(task.owner) ?? 0n) + start.reserve_micros)
          const token = tokens ? newBearerSecret('run_') : null
          const insert: RunRowInsert = {
            id: input.runId,
            task_id: task.id,
            trigger: input.trigger,
            status: 'claimed',
            reserved: start.reserve_micros,
            outcome: null,
            error: null,
            token_hash: token === null ? null : secretHash(token),
            finished: null,
            token,
          }
          inserts.push(insert)
          out.push({ pending: insert })
          continue
        }
        if (result.effects.some((effect) => effect.type === 'defer_run')) {
          out.push({ kind: 'deferred' })
          continue
        }
        const skip = result.effects.find((effect) => effect.type === 'skip_run')
        const reason = skip && skip.type === 'skip_run' ? skip.reason : 'not_active'
        const message = skipMessage(reason, facts.ceiling_micros, result.next)
        inserts.push({
          id: input.runId,
          task_id: task.id,
          trigger: input.trigger,
          status: 'skipped',
          reserved: 0n,
          outcome: reason,
          error: message,
          token_hash: null,
          finished: now,
          token: null,
        })
        out.push({ kind: 'skipped', reason, message })
      }
      const written = new Map<string, RunRow>()
      if (inserts.length > 0) {
        for (const row of await insertRuns(tx, inserts, now)) written.set(row.id, row)
      }
      if (tokenUpdates.length > 0) {
        const hashes = tokenUpdates.map((u) => ({ id: u.id, hash: secretHash(u.token) }))
        await setRunTokenHashes(tx, hashes)
      }
      return out.map(
        (entry): DispatchResult =>
          'pending' in entry ? { kind: 'claimed', run: written.get(entry.pending.id) as RunRow, ...(entry.pending.token === null ? {} : { token: entry.pending.token }) } : entry,
      )
    })
    return { results, afters }
  }

  async function dispatchBatch(inputs: readonly DispatchInput[]): Promise<DispatchResult[]> {
    const { results, afters } = await decideDispatch(inputs, true)
    for (const { task, after } of afters) {
      await core.runAfterCommit(task, after).catch((error: unknown) => logger.warn({ err: error, taskId: task.id }, 'post-dispatch work failed'))
    }
    // The requests of claimed runs: code and env from the task rows (read after commit, unlocked),
    // the copy of a task's fields that executes (docs/architecture.md "Where a task's fields live").
    const needed = [...new Set(results.flatMap((result, i) => (result.kind === 'claimed' && result.token !== undefined ? [(inputs[i] as DispatchInput).taskId] : [])))]
    const specs = new Map(needed.length === 0 ? [] : (await taskExecutionSpecs(db, needed)).map((row) => [row.id, row]))
    return results.map((result, i) => {
      if (result.kind !== 'claimed' || result.token === undefined) return result
      const input = inputs[i] as DispatchInput
      const task = specs.get(input.taskId)
      if (task === undefined) return { kind: 'claimed', run: result.run }
      return { kind: 'claimed', run: result.run, request: requestOf(input.runId, task, result.token, input.signal) }
    })
  }

  function skipMessage(reason: string, ceiling: Micros, state: string): string {
    return reason === 'insufficient_funds'
      ? `skipped: the escrow is below the per-run ceiling (${formatUsd(ceiling)} USD); the task is paused until funded`
      : reason === 'run_in_flight'
        ? 'skipped: another run of this task was in flight'
        : reason === 'schedule_ended'
          ? 'skipped: the schedule ended'
          : `skipped: the task is ${state}`
  }

  function requestOf(
    runId: string,
    task: { id: string; spec: StoredSpec; env_ciphertext: string | null },
    token: string,
    signal: AbortSignal,
  ): Omit<ExecutionRequest, 'namespace' | 'taskUid' | 'runUid'> {
    return {
      runName: runId,
      taskName: task.id,
      runtime: task.spec.runtime,
      source: task.spec.source,
      entrypoint: task.spec.entrypoint,
      env: secrets.decryptEnv(task.id, task.env_ciphertext),
      envSecretName: `${task.id}-env`,
      dependencies: task.spec.dependencies,
      maxRuntimeSec: task.spec.max_runtime_sec,
      helper: { url: `${internalUrl}/internal/v1/runs/${runId}`, token },
      signal,
    }
  }

  /**
   * claimed → running, exactly once per run, for a batch of runs in one statement; `adopt` names
   * runs already running whose attempt is re-attached. Returns the ids this call started.
   */
  async function startRuns(runIds: readonly string[], adopt: readonly string[] = []): Promise<Set<string>> {
    if (runIds.length === 0) return new Set()
    return new Set(await markRunsRunning(db, runIds, adopt, clock.now()))
  }

  /** Runs claimed or running since before `before` (the run controller's orphan sweep). */
  async function openRuns(before: Date): Promise<{ id: string; status: string }[]> {
    return openRunsBefore(db, before)
  }

  /** A claimed run that never started (deleted or cancelled before its instant): settled at no cost. */
  async function releaseRun(runId: string, reason: string): Promise<{ run: RunRow }> {
    return finishRun(runId, { ...noAttempt('cancelled', 'none', reason), notStarted: true })
  }

  /** What a finished attempt costs: runtime and install by the started second, helper meters, overhead. */
  function costOf(run: RunRow, result: ExecutionResult): Micros {
    if (result.outcome === 'infra_error' || result.notStarted === true) return 0n
    const seconds = (ms: number) => BigInt(Math.ceil(Math.max(0, ms) / 1000))
    return (
      seconds(result.durationMs) * rates.sandbox_per_second_micros +
      seconds(result.installDurationMs) * rates.dependency_install.per_second_micros +
      run.sibling_spend_micros +
      run.llm_cost_micros +
      rates.overhead_micros
    )
  }

  const OUTCOME_STATUS: Record<ExecutionResult['outcome'], RunRow['status']> = {
    succeeded: 'succeeded',
    failed: 'failed',
    timed_out: 'timed_out',
    cancelled: 'cancelled',
    infra_error: 'failed',
  }

  /**
   * Settles a finished attempt, once: the run_cost row (min(actual, reserved)), the reservation
   * released, the run record, the task's state machine (`run_finished`), a continuation, the
   * completion e-mail. Returns the final run row. A second call returns the same row.
   */
  async function finishRun(runId: string, result: ExecutionResult): Promise<{ run: RunRow; continuation?: { delaySec: number } }> {
    const input = { runId, result }
    const outcome = await finishBatcher.submit(input)
    if (outcome === undefined) throw new Error(`run ${runId} was never claimed`)
    return afterFinish(input, outcome)
  }

  // Settlements are group-committed like dispatches: one transaction settles a batch of runs, the
  // ledger rows and run records written in one statement each; each caller then does its own
  // post-commit work.
  const finishBatcher = new Batcher<FinishInput, FinishOutcome | undefined>(
    (inputs) => finishBatch(inputs),
    (input) => input.runId,
    200,
  )

  interface FinishInput {
    runId: string
    result: ExecutionResult
  }

  interface FinishOutcome {
    run: RunRow
    /** Set when this call settled the run (not when it was settled already). */
    task?: TaskRow
    after?: AfterCommit
    continuation?: { delaySec: number }
  }

  async function finishBatch(inputs: readonly FinishInput[]): Promise<(FinishOutcome | undefined)[]> {
    return db.transaction(async (tx) => {
      const ids = inputs.map((input) => input.runId)
      const current = new Map((await runsForUpdate(tx, ids)).map((row) => [row.id, row]))
      // One run per task is settled per pass; another of the same task (never in normal flight:
      // one run at a time) goes in the next pass of this transaction, seeing the first's effects.
      const outcomes = new Map<string, FinishOutcome>()
      let pending = inputs.filter((input) => {
        const row = current.get(input.runId)
        if (row === undefined) return false // never claimed: that caller gets the error
        if (!(RUN_FINAL_STATUSES as readonly string[]).includes(row.status)) return true
        outcomes.set(input.runId, { run: row })
        return false
      })
      while (pending.length > 0) {
        const seen = new Set<string>()
        const pass: FinishInput[] = []
        const later: FinishInput[] = []
        for (const input of pending) {
          const taskId = (current.get(input.runId) as RunRow).task_id
          if (seen.has(taskId)) later.push(input)
          else {
            seen.add(taskId)
            pass.push(input)
          }
        }
        for (const [id, outcome] of await settlePass(tx, pass, current)) outcomes.set(id, outcome)
        pending = later
      }
      return inputs.map((input) => outcomes.get(input.runId))
    })
  }

  async function settlePass(tx: Queryable, pass: readonly FinishInput[], current: Map<string, RunRow>): Promise<Map<string, FinishOutcome>> {
    const taskIds = [...new Set(pass.map((input) => (current.get(input.runId) as RunRow).task_id))].sort()
    const tasks = new Map((await tasksForUpdate(tx, taskIds)).map((task) => [task.id, task]))
    const cap = rates.hard_caps.max_output_bytes_in_run
    const ledger: { task_id: string; amount: bigint; run_id: string }[] = []
    const updates: RunResult[] = []
    for (const { runId, result } of pass) {
      const run = current.get(runId) as RunRow
      const settled = finalizeRun({ run_id: runId, amount_micros: run.reserved_micros }, costOf(run, result))
      for (const row of settled.rows) ledger.push({ task_id: run.task_id, amount: row.amount_micros, run_id: runId })
      if (settled.absorbed_micros > 0n) logger.warn({ runId, absorbed: settled.absorbed_micros.toString() }, 'run cost above its reservation was absorbed')
      updates.push({
        id: runId,
        status: OUTCOME_STATUS[result.outcome],
        cost: settled.charged_micros,
        exit_code: result.exitCode,
        outcome: result.outcome,
        // A script's output may hold bytes Postgres text cannot (NUL): kept, replaced by U+FFFD.
        error: result.error === undefined ? null : storableText(result.error),
        stdout: truncateUtf8(storableText(result.stdout), cap),
        stderr: truncateUtf8(storableText(result.stderr), cap),
        stdout_bytes: result.stdoutBytes,
        stderr_bytes: result.stderrBytes,
        runtime_version: result.runtimeVersion,
        install_ms: Math.round(result.installDurationMs),
        started_at: result.notStarted === true ? null : result.startedAt,
        finished_at: result.finishedAt,
      })
    }
    await appendRunCosts(tx, ledger)
    const finishedRows = await recordRunResults(tx, updates)
    const finished = new Map(finishedRows.map((row) => [row.id, row]))
    const known = await escrowFactsMany(tx, taskIds)
    const out = new Map<string, FinishOutcome>()
    for (const { runId, result } of pass) {
      const before = current.get(runId) as RunRow
      const task = tasks.get(before.task_id) as TaskRow
      const run = finished.get(runId) as RunRow
      current.set(runId, run)
      const infraFailures = result.outcome === 'infra_error' ? task.consecutive_infra_failures + 1 : 0
      const wantsContinuation = before.continuation_delay_sec !== null && result.outcome === 'succeeded' && task.status === 'active'
      const chain = wantsContinuation ? (before.trigger === 'continuation' ? task.consecutive_continuations : 0) + 1 : 0
      if (infraFailures !== task.consecutive_infra_failures || chain !== task.consecutive_continuations) {
        await setConsecutiveCounts(tx, task.id, infraFailures, chain)
      }
      const facts = await core.factsOf(tx, task, known.get(task.id))
      const outcome: RunOutcome = result.outcome
      const after = await core.applyTransition(tx, task, transition(snapshot(task), { type: 'run_finished', outcome, consecutive_infra_failures: infraFailures }, facts), facts)
      Object.assign(after, await marketplace.reportRunUsage(tx, task, run)) // marketplace rail: usage report + plan debit once per run, may pause (marketplace.ts)
      out.set(runId, { run, task, after, ...(wantsContinuation ? { continuation: { delaySec: before.continuation_delay_sec as number } } : {}) })
    }
    return out
  }

  /** After a settlement commits: the run log, the task's follow-up, a continuation, the e-mail. */
  async function afterFinish(input: FinishInput, outcome: FinishOutcome): Promise<{ run: RunRow; continuation?: { delaySec: number } }> {
    const { run, task, after, continuation } = outcome
    const { runId, result } = input
    if (task === undefined || after === undefined) return { run }
    if (result.notStarted === true) {
      // Released before it started: no log, no e-mail, no continuation; the task's follow-up (a
      // refund once a deleted task's last run is settled) still happens.
      await core.runAfterCommit(task, after)
      return { run }
    }
    const log = `${result.stdout}${result.stderr ? `\n--- stderr ---\n${result.stderr}` : ''}`
    await deps.logs
      .put(`runs/${runId}/output.log`, Buffer.from(log), 'text/plain; charset=utf-8')
      .catch((error: unknown) => logger.warn({ err: error, runId }, 'storing the run log failed'))
    await core.runAfterCommit(task, after)
    if (continuation) await resources.createRun(task.id, 'continuation', new Date(clock.nowMs() + continuation.delaySec * 1000))
    if (task.spec.notify_email && (run.trigger === 'schedule' || run.trigger === 'trigger' || run.trigger === 'continuation')) {
      deps.mailer
        .send({
          to: task.spec.notify_email,
          subject: `[agent-gateway] run ${run.id} of task ${task.id}: ${run.status}`,
          text:
            `Task ${task.id} ran (${run.trigger}) and ${run.status}${run.exit_code === null ? '' : ` with exit code ${run.exit_code}`}.\n` +
            `Cost: ${formatUsd(run.cost_micros)} USD.\nRun: ${deps.publicUrl}/api/v1/runs/${run.id}\nLogs: ${reads.logsUrl(run.id)}\n`,
        })
        .catch((error: unknown) => logger.warn({ err: error, runId }, 'completion e-mail failed'))
    }
    return continuation ? { run, continuation } : { run }
  }

  /** The result of a run lost to the service (its sandbox or Job went away): infra_error, not charged. */
  function lostResult(reason: string): ExecutionResult {
    return noAttempt('infra_error', 'unknown', reason)
  }

  /** A result with no attempt behind it, at this instant. */
  function noAttempt(outcome: ExecutionResult['outcome'], runtimeVersion: string, error: string): ExecutionResult {
    const now = clock.now()
    return noAttemptResult(outcome, { startedAt: now, finishedAt: now }, runtimeVersion, error)
  }

  async function runRow(runId: string): Promise<RunRow | undefined> {
    return runById(db, runId)
  }

  return { claimRun, dispatchRun, startRuns, openRuns, releaseRun, finishRun, lostResult, runRow }
}

export type SchedulerRunLedger = ReturnType<typeof createRunLedger>
