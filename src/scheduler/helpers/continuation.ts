// request_continuation(delay_sec = 0): asks for a fresh billed run after this one exits cleanly.
// Accepted only while the task is active, below the consecutive cap
// (hard_caps.max_consecutive_continuations) and funded: the escrow's available balance (the
// escrow store's rule: money rows, without the marketplace's usage restatements, minus open
// reservations, this run's included) plus payments still settling must cover the per-run ceiling. An accepted request records the run row's continuation_delay_sec; the run controller
// schedules the follow-up only after a clean exit (none after a crash or timeout). Asking again in
// the same run replaces the delay.
//
// consecutive_continuations in the answer counts the chain including the follow-up just accepted
// (1 for the first continuation after a normal run); when refused it is the count so far.
import type { Db } from '../../platform/db/index.ts'
import { AppError } from '../../platform/errors.ts'
import { estimateCeilingMicros, type SchedulerRates } from '../domain/rates.ts'
import { escrowFacts } from '../escrow-store.ts'
import { setContinuationDelay } from '../run-store.ts'
import type { HelperRun } from './run.ts'

export type ContinuationRefusal = 'max_consecutive_continuations' | 'insufficient_funds' | 'task_not_active'

export interface ContinuationOutput {
  accepted: boolean
  consecutive_continuations: number
  max_consecutive_continuations: number
  delay_sec: number
  reason?: ContinuationRefusal
}

/** The pure decision (see header). */
export function decideContinuation(input: {
  taskStatus: string
  consecutive: number
  maxConsecutive: number
  availableMicros: bigint
  ceilingMicros: bigint
}): { accepted: true } | { accepted: false; reason: ContinuationRefusal } {
  if (input.taskStatus !== 'active') return { accepted: false, reason: 'task_not_active' }
  if (input.consecutive >= input.maxConsecutive) return { accepted: false, reason: 'max_consecutive_continuations' }
  if (input.availableMicros < input.ceilingMicros) return { accepted: false, reason: 'insufficient_funds' }
  return { accepted: true }
}

export async function requestContinuation(deps: { db: Db; rates: SchedulerRates }, run: HelperRun, delaySec: number): Promise<ContinuationOutput> {
  const max = deps.rates.hard_caps.max_consecutive_continuations
  if (!Number.isInteger(delaySec) || delaySec < 0 || delaySec > deps.rates.hard_caps.max_continuation_delay_sec) {
    throw new AppError('VALIDATION_ERROR', `body.delay_sec must be an integer from 0 to ${deps.rates.hard_caps.max_continuation_delay_sec}`, { field: 'body.delay_sec' })
  }
  const { summary, pending } = await escrowFacts(deps.db, run.taskId)
  const ceiling = estimateCeilingMicros(
    { max_runtime_sec: run.spec.max_runtime_sec, max_sibling_calls: run.spec.max_sibling_calls, dependencies: run.spec.dependencies, llm: run.spec.llm },
    deps.rates,
  )
  const decision = decideContinuation({
    taskStatus: run.taskStatus,
    consecutive: run.consecutiveContinuations,
    maxConsecutive: max,
    // As the state machine counts it: payments still settling fund the next run (it waits for them).
    availableMicros: summary.available_micros + pending,
    ceilingMicros: ceiling,
  })
  if (!decision.accepted) {
    return { accepted: false, consecutive_continuations: run.consecutiveContinuations, max_consecutive_continuations: max, delay_sec: delaySec, reason: decision.reason }
  }
  if (!(await setContinuationDelay(deps.db, run.runId, delaySec))) throw new AppError('TOKEN_EXPIRED', `Run ${run.runId} has ended`, { field: 'header.authorization' })
  return { accepted: true, consecutive_continuations: run.consecutiveContinuations + 1, max_consecutive_continuations: max, delay_sec: delaySec }
}
