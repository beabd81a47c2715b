// What the scheduler API reads: a task's runs (list, one, logs behind signed URLs), its ledger,
// the owner's usage rollup, what a deleted task's owner gets back and when, and the settled cost
// the TaskController mirrors on each Task resource (grouped reads).
import { Batcher } from '../platform/batcher.ts'
import type { Db } from '../platform/db/index.ts'
import { AppError } from '../platform/errors.ts'
import type { Clock } from '../platform/clock.ts'
import { isTerminal } from './domain/states.ts'
import { escrowFacts, ledgerRows, ledgerSum, ownerTaskTotals, taskCosts } from './escrow-store.ts'
import { runSlimView, runView, type RunRow, type TaskRow } from './records.ts'
import type { SchedulerSecrets } from './secrets.ts'
import { lower, ownedTask } from './task-core.ts'
import { inFlightRunTimes, runById, runsOfTask, runWithOwner } from './run-store.ts'

export interface LogStore {
  put(key: string, data: Buffer, contentType: string): Promise<unknown>
  get(key: string): Promise<{ data: Buffer; contentType: string } | undefined>
}

export interface TaskReadsDeps {
  db: Db
  clock: Clock
  secrets: SchedulerSecrets
  logs: LogStore
  /** Public base of the scheduler ({scheduler_url}): log URLs. */
  publicUrl: string
  /** Bytes of stdout/stderr a run view carries. */
  outputCap: number
}

export function createTaskReads(deps: TaskReadsDeps) {
  const { db, clock, secrets, outputCap } = deps

  /** What a deleted task's owner gets back, and when: sent, still owed (a run or a payment to finish first), or nothing. */
  async function refundOutlook(task: TaskRow) {
    const sent = (
      await db.query<{ amount_micros: bigint; tx_hash: string | null; state: string; next_attempt_at: Date; error: string | null }>(
        `select amount_micros, tx_hash, state, next_attempt_at, error from scheduler_refunds where task_id = $1`,
        [task.id],
      )
    )[0]
    const base = { amount_micros: '0', estimated: false, tx_hash: null as string | null, expected_by: null as string | null }
    if (sent !== undefined) {
      const amount = sent.amount_micros.toString()
      if (sent.state === 'confirmed')
        return { ...base, state: 'confirmed' as const, amount_micros: amount, tx_hash: sent.tx_hash, detail: 'Refunded on-chain to the paying wallet.' }
      if (sent.state === 'cancelled') return { ...base, state: 'none' as const, detail: 'Nothing is owed: the payment it would have returned never reached the chain.' }
      if (sent.state === 'waiting' && sent.error?.startsWith('waiting for')) {
        return {
          ...base,
          state: 'after_payment' as const,
          amount_micros: amount,
          expected_by: sent.next_attempt_at.toISOString(),
          detail: `The refund is sent once the payments it returns are confirmed on-chain (${sent.error}).`,
        }
      }
      const retrying = sent.state === 'failed' || sent.state === 'waiting'
      return {
        ...base,
        state: retrying ? ('retrying' as const) : ('sending' as const),
        amount_micros: amount,
        tx_hash: sent.tx_hash,
        expected_by: sent.next_attempt_at.toISOString(),
        detail: retrying
          ? `The refund could not be sent yet (${sent.error ?? 'unknown'}); it is retried automatically until it is confirmed.`
          : 'The refund transaction is on its way.',
      }
    }
    if (task.rail === 'marketplace') return { ...base, state: 'none' as const, detail: 'Marketplace rail: the cap is not money held for you; nothing is refunded.' }
    const { summary, inFlight, pending, unconfirmed } = await escrowFacts(db, task.id)
    if (summary.closed) {
      return { ...base, state: 'none' as const, detail: `The remainder (${summary.forfeited_micros} micros) was below the minimum refund and was forfeited as dust.` }
    }
    if (inFlight) {
      const run = await inFlightRunTimes(db, task.id)
      const from = run?.started_at ?? run?.created_at ?? clock.now()
      const by = new Date(Math.max(from.getTime(), clock.nowMs()) + (task.spec.max_runtime_sec + 60) * 1000)
      return {
        ...base,
        state: 'after_run' as const,
        // At least the balance less the run's reserved ceiling; the run's actual cost decides.
        amount_micros: (summary.balance_micros - summary.reserved_micros + pending).toString(),
        estimated: true,
        expected_by: by.toISOString(),
        detail: 'A run is in flight: it was asked to stop, and the balance less its actual cost is refunded as soon as it finishes.',
      }
    }
    if (pending > 0n) {
      return {
        ...base,
        state: 'after_payment' as const,
        amount_micros: (summary.balance_micros + pending).toString(),
        estimated: true,
        detail: 'A payment into this escrow is still settling on-chain; the refund is sent once it is known (the part that settles is refunded, a failed part was never taken).',
      }
    }
    if (unconfirmed > 0n) {
      return {
        ...base,
        state: 'after_payment' as const,
        amount_micros: summary.balance_micros.toString(),
        estimated: true,
        detail:
          'A payment into this escrow settled but is not yet confirmed on-chain (CHAIN_CONFIRMATIONS); the refund is sent once it is (one the chain drops for good is not refunded, it was never received).',
      }
    }
    return { ...base, state: 'none' as const, detail: 'Nothing is left to refund.' }
  }

  // ------------------------------------------------------------------ runs: reads

  function logsUrl(runId: string): string {
    return `${deps.publicUrl}/api/v1/runs/${runId}/logs?sig=${secrets.sign(`logs:${runId}`)}`
  }

  async function ownedRun(runId: string, owner: string): Promise<RunRow> {
    const run = await runWithOwner(db, runId)
    if (run === undefined || run.owner !== lower(owner)) throw new AppError('not_found', `No run ${runId} of this wallet`, { field: 'path.id' })
    return run
  }

  async function getRun(runId: string, owner: string) {
    const run = await ownedRun(runId, owner)
    return runView(run, logsUrl(run.id), outputCap)
  }

  async function runLogs(runId: string, signature: string): Promise<string> {
    if (!secrets.verify(`logs:${runId}`, signature)) throw new AppError('not_found', 'Unknown log URL', { field: 'query.sig' })
    const blob = await deps.logs.get(`runs/${runId}/output.log`)
    if (blob !== undefined) return blob.data.toString('utf8')
    const run = await runById(db, runId)
    if (run === undefined) throw new AppError('not_found', `No run ${runId}`, { field: 'path.id' })
    return `${run.stdout}${run.stderr ? `\n--- stderr ---\n${run.stderr}` : ''}`
  }

  async function listRuns(taskId: string, owner: string, query: { cursor?: string; limit?: number }) {
    await ownedTask(db, taskId, owner)
    const limit = query.limit ?? 20
    let before: { at: Date; id: string } | undefined
    if (query.cursor !== undefined) {
      const [at, id] = Buffer.from(query.cursor, 'base64url').toString('utf8').split('|')
      if (!at || !id || Number.isNaN(Date.parse(at))) throw new AppError('VALIDATION_ERROR', 'cursor is not one this API issued', { field: 'query.cursor' })
      before = { at: new Date(at), id }
    }
    const rows = await runsOfTask(db, taskId, limit + 1, before)
    const page = rows.slice(0, limit)
    const last = page[page.length - 1]
    return {
      runs: page.map(runSlimView),
      next_cursor: rows.length > limit && last ? Buffer.from(`${last.created_at.toISOString()}|${last.id}`).toString('base64url') : null,
    }
  }

  async function taskLedger(taskId: string, owner: string) {
    const task = await ownedTask(db, taskId, owner)
    const rows = await ledgerRows(db, taskId)
    // 'usage' rows (marketplace rail) restate a run's cost as reported on the meter: left out of the
    // sum, which is then the remaining lifetime cap (direct rail: no usage rows, the escrow balance).
    const sum = ledgerSum(rows)
    return {
      task_id: taskId,
      rail: task.rail,
      rows: rows.map((row) => ({
        id: row.id.toString(),
        kind: row.kind,
        amount_micros: row.amount_micros.toString(),
        tx_hash: row.tx_hash ?? row.refund_tx ?? null,
        run_id: row.run_id,
        created_at: row.created_at.toISOString(),
      })),
      sum_micros: sum.toString(),
      authoritative: task.rail === 'direct',
      // A closed direct escrow: whether its refund row is on-chain yet, or still owed and why.
      ...(isTerminal(task.status) && task.rail === 'direct' ? { refund: await refundOutlook(task) } : {}),
    }
  }

  /**
   * A task's total settled cost (its run_cost rows), as GET …/usage counts it; undefined for an
   * unknown task. Read by the TaskController after every finished run, so the reads of concurrent
   * callers are grouped into one query.
   */
  const costBatcher = new Batcher<string, bigint | undefined>(
    (taskIds) => taskCosts(db, taskIds),
    (taskId) => taskId,
    200,
  )
  const taskCost = (taskId: string): Promise<bigint | undefined> => costBatcher.submit(taskId)

  async function ownerUsage(owner: string) {
    const rows = await ownerTaskTotals(db, lower(owner))
    const totals = { tasks: rows.length, runs: 0, cost: 0n, balance: 0n, refunded: 0n }
    const list = rows.map((row) => {
      totals.runs += Number(row.runs)
      totals.cost += row.cost ?? 0n
      totals.balance += row.balance ?? 0n
      totals.refunded += row.refunded ?? 0n
      return {
        task_id: row.id,
        status: row.status,
        rail: row.rail,
        runs: Number(row.runs),
        cumulative_cost_micros: (row.cost ?? 0n).toString(),
        balance_micros: (row.balance ?? 0n).toString(),
      }
    })
    return {
      owner: lower(owner),
      tasks: list,
      totals: {
        tasks: totals.tasks,
        runs: totals.runs,
        cumulative_cost_micros: totals.cost.toString(),
        balance_micros: totals.balance.toString(),
        refunded_micros: totals.refunded.toString(),
      },
    }
  }

  return { refundOutlook, logsUrl, getRun, runLogs, listRuns, taskLedger, taskCost, ownerUsage }
}

export type TaskReads = ReturnType<typeof createTaskReads>
