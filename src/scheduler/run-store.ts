// The scheduler_runs table: every statement that writes it, and every read of it but the escrow's
// (escrow-store.ts sums the reservations of runs in flight into a task's escrow facts and a plan
// holder's reservations). Reads that join a run with its task (the owner check, the helpers'
// token check) are about the run and live here; they only read the task row. Each function is one
// statement over any Queryable (a transaction or the pool), so callers compose them in their own
// transaction and keep its lock order (a dispatch locks tasks, then writes runs; a settlement locks
// runs, then their tasks; many rows in id order). A run's meters advance only by conditional
// updates that check the cap and add in the same row write (helpers/meters.ts).
import type { Queryable } from '../platform/db/index.ts'
import type { Micros } from '../platform/money.ts'
import type { RunRow } from './records.ts'
import type { RunTrigger } from './domain/states.ts'

/** Run statuses that hold a reservation (one run per task at most: a unique index). */
export const IN_FLIGHT_STATUSES = ['claimed', 'running'] as const
/** `status in (…in flight…)`, for SQL over runs. */
export const IN_FLIGHT_SQL = `status in (${IN_FLIGHT_STATUSES.map((s) => `'${s}'`).join(', ')})`

// ------------------------------------------------------------------ dispatch

/** Runs by id, unlocked (a dispatch finds the ones already decided). */
export async function runsByIds(q: Queryable, runIds: readonly string[]): Promise<RunRow[]> {
  return q.query<RunRow>(`select * from scheduler_runs where id = any($1::text[])`, [runIds])
}

/** A dispatch decision's row: claimed holding its reservation, or skipped and finished. */
export interface NewRun {
  id: string
  task_id: string
  trigger: RunTrigger
  status: 'claimed' | 'skipped'
  reserved: bigint
  outcome: string | null
  error: string | null
  token_hash: string | null
  finished: Date | null
}

/** The rows of a dispatch batch, in one statement, created at `at`. */
export async function insertRuns(q: Queryable, runs: readonly NewRun[], at: Date): Promise<RunRow[]> {
  return q.query<RunRow>(
    `insert into scheduler_runs (id, task_id, trigger, status, reserved_micros, outcome, error, token_hash, created_at, finished_at)
           select i.id, i.task_id, i.trigger, i.status, i.reserved, i.outcome, i.error, i.token_hash, $9, i.finished
             from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::text[], $7::text[], $8::text[], $10::timestamptz[])
                  as i(id, task_id, trigger, status, reserved, outcome, error, token_hash, finished)
           returning *`,
    [
      runs.map((i) => i.id),
      runs.map((i) => i.task_id),
      runs.map((i) => i.trigger),
      runs.map((i) => i.status),
      runs.map((i) => i.reserved),
      runs.map((i) => i.outcome),
      runs.map((i) => i.error),
      runs.map((i) => i.token_hash),
      at,
      runs.map((i) => i.finished),
    ],
  )
}

/** Fresh helper tokens (their hashes) for runs already claimed or running. */
export async function setRunTokenHashes(q: Queryable, hashes: readonly { id: string; hash: string }[]): Promise<void> {
  await q.query(`update scheduler_runs r set token_hash = u.hash from unnest($1::text[], $2::text[]) as u(id, hash) where r.id = u.id`, [
    hashes.map((u) => u.id),
    hashes.map((u) => u.hash),
  ])
}

/** claimed → running (and `adopt`: running ones re-attached), once; the ids this statement started. */
export async function markRunsRunning(q: Queryable, runIds: readonly string[], adopt: readonly string[], at: Date): Promise<string[]> {
  const rows = await q.query<{ id: string }>(
    `update scheduler_runs set status = 'running', started_at = coalesce(started_at, $3)
        where id = any($1::text[]) and (status = 'claimed' or (status = 'running' and id = any($2::text[])))
        returning id`,
    [runIds, adopt, at],
  )
  return rows.map((row) => row.id)
}

/** Runs claimed or running since before `before`, oldest first. */
export async function openRunsBefore(q: Queryable, before: Date): Promise<{ id: string; status: string }[]> {
  return q.query<{ id: string; status: string }>(`select id, status from scheduler_runs where status in ('claimed', 'running') and created_at < $1 order by created_at`, [before])
}

// ------------------------------------------------------------------ settlement

/** Runs by id, locked in id order (a settlement batch). */
export async function runsForUpdate(q: Queryable, runIds: readonly string[]): Promise<RunRow[]> {
  return q.query<RunRow>(`select * from scheduler_runs where id = any($1::text[]) order by id for update`, [runIds])
}

/** A settled attempt's record: the reservation is released and the helper token cleared with it. */
export interface RunResult {
  id: string
  status: RunRow['status']
  cost: Micros
  exit_code: number | null
  outcome: string
  error: string | null
  stdout: string
  stderr: string
  stdout_bytes: number
  stderr_bytes: number
  runtime_version: string
  install_ms: number
  /** Kept when the run had started already. */
  started_at: Date | null
  finished_at: Date
}

/** The records of a settlement batch, in one statement; returns the final rows. */
export async function recordRunResults(q: Queryable, results: readonly RunResult[]): Promise<RunRow[]> {
  const column = <K extends keyof RunResult>(key: K) => results.map((r) => r[key])
  return q.query<RunRow>(
    `update scheduler_runs r set status = u.status, reserved_micros = 0, cost_micros = u.cost, exit_code = u.exit_code, outcome = u.outcome, error = u.error,
              stdout = u.stdout, stderr = u.stderr, stdout_bytes = u.stdout_bytes, stderr_bytes = u.stderr_bytes, runtime_version = u.runtime_version,
              install_ms = u.install_ms, started_at = coalesce(r.started_at, u.started_at), finished_at = u.finished_at, token_hash = null
         from unnest($1::text[], $2::text[], $3::int8[], $4::int4[], $5::text[], $6::text[], $7::text[], $8::text[], $9::int8[], $10::int8[], $11::text[], $12::int4[], $13::timestamptz[], $14::timestamptz[])
              as u(id, status, cost, exit_code, outcome, error, stdout, stderr, stdout_bytes, stderr_bytes, runtime_version, install_ms, started_at, finished_at)
        where r.id = u.id
        returning r.*`,
    [
      column('id'),
      column('status'),
      column('cost'),
      column('exit_code'),
      column('outcome'),
      column('error'),
      column('stdout'),
      column('stderr'),
      column('stdout_bytes'),
      column('stderr_bytes'),
      column('runtime_version'),
      column('install_ms'),
      column('started_at'),
      column('finished_at'),
    ],
  )
}

// ------------------------------------------------------------------ reads

export async function runById(q: Queryable, runId: string): Promise<RunRow | undefined> {
  return (await q.query<RunRow>(`select * from scheduler_runs where id = $1`, [runId]))[0]
}

/** A run with its task's owner (the owner check of GET /runs/{id}). */
export async function runWithOwner(q: Queryable, runId: string): Promise<(RunRow & { owner: string }) | undefined> {
  return (await q.query<RunRow & { owner: string }>(`select r.*, t.owner from scheduler_runs r join scheduler_tasks t on t.id = r.task_id where r.id = $1`, [runId]))[0]
}

/** A page of a task's runs, newest first, after the (created_at, id) cursor `before`. */
export async function runsOfTask(q: Queryable, taskId: string, limit: number, before?: { at: Date; id: string }): Promise<RunRow[]> {
  return q.query<RunRow>(
    before === undefined
      ? `select * from scheduler_runs where task_id = $1 order by created_at desc, id desc limit $2`
      : `select * from scheduler_runs where task_id = $1 and (created_at, id) < ($3, $4) order by created_at desc, id desc limit $2`,
    before === undefined ? [taskId, limit] : [taskId, limit, before.at, before.id],
  )
}

/** When the task's run in flight was claimed and started (a refund's expected time). */
export async function inFlightRunTimes(q: Queryable, taskId: string): Promise<{ started_at: Date | null; created_at: Date } | undefined> {
  return (
    await q.query<{ started_at: Date | null; created_at: Date }>(
      `select started_at, created_at from scheduler_runs where task_id = $1 and status in ('claimed', 'running') limit 1`,
      [taskId],
    )
  )[0]
}

export async function runInFlight(q: Queryable, taskId: string): Promise<boolean> {
  return (await q.query(`select 1 from scheduler_runs where task_id = $1 and ${IN_FLIGHT_SQL} limit 1`, [taskId])).length > 0
}

/** The ceilings a task's runs in flight hold (its escrow's open reservations). */
export async function heldReservations(q: Queryable, taskId: string): Promise<{ id: string; reserved_micros: bigint }[]> {
  return q.query<{ id: string; reserved_micros: bigint }>(`select id, reserved_micros from scheduler_runs where task_id = $1 and ${IN_FLIGHT_SQL} and reserved_micros > 0`, [
    taskId,
  ])
}

// ------------------------------------------------------------------ the helpers' side

/** A run as its helper token proves it, with the task fields the helpers read. */
export interface HelperRunRow {
  [column: string]: unknown
  run_id: string
  task_id: string
  status: string
  token_hash: string | null
  task_status: string
  consecutive_continuations: number
  spec: unknown
}

export async function runForHelper(q: Queryable, runId: string): Promise<HelperRunRow | undefined> {
  const rows = await q.query<HelperRunRow>(
    `select r.id as run_id, r.task_id, r.status, r.token_hash, t.status as task_status,
            t.consecutive_continuations, t.spec
       from scheduler_runs r join scheduler_tasks t on t.id = r.task_id
      where r.id = $1`,
    [runId],
  )
  return rows[0]
}

/** A follow-up run after this one exits cleanly; false once the run has ended. */
export async function setContinuationDelay(q: Queryable, runId: string, delaySec: number): Promise<boolean> {
  const updated = await q.query(
    `update scheduler_runs set continuation_delay_sec = $2 where id = $1 and status in (${IN_FLIGHT_STATUSES.map((s) => `'${s}'`).join(', ')}) returning id`,
    [runId, delaySec],
  )
  return updated.length > 0
}

export type SiblingMeters = {
  sibling_calls: number
  sibling_spend_micros: Micros
}

export type ArtifactMeters = {
  artifacts_count: number
  artifacts_bytes: Micros
}

export interface RunMeters {
  [column: string]: unknown
  status: string
  sibling_calls: number
  sibling_spend_micros: bigint
  llm_cost_micros: bigint
  artifacts_count: number
  artifacts_bytes: bigint
}

/** A run's status and meters (why a conditional update refused). */
export async function runMeters(q: Queryable, runId: string): Promise<RunMeters | undefined> {
  const rows = await q.query<RunMeters>('select status, sibling_calls, sibling_spend_micros, llm_cost_micros, artifacts_count, artifacts_bytes from scheduler_runs where id = $1', [
    runId,
  ])
  return rows[0]
}

/** The run's LLM spend so far. */
export async function runLlmCost(q: Queryable, runId: string): Promise<Micros | undefined> {
  const rows = await q.query<{ llm_cost_micros: bigint }>('select llm_cost_micros from scheduler_runs where id = $1', [runId])
  return rows[0]?.llm_cost_micros
}

/** One call slot and `amount` of spend, if the run is in flight and within both caps. */
export async function takeSiblingCall(q: Queryable, runId: string, amount: Micros, maxCalls: number, spendLimit: Micros): Promise<SiblingMeters | undefined> {
  const rows = await q.query<SiblingMeters>(
    `update scheduler_runs
        set sibling_calls = sibling_calls + 1, sibling_spend_micros = sibling_spend_micros + $2::int8
      where id = $1 and ${IN_FLIGHT_SQL} and sibling_calls < $3::int4 and sibling_spend_micros + $2::int8 <= $4::int8
      returning sibling_calls, sibling_spend_micros`,
    [runId, amount, maxCalls, spendLimit],
  )
  return rows[0]
}

export async function giveBackSiblingCall(q: Queryable, runId: string, amount: Micros, slots: 0 | 1): Promise<void> {
  await q.query('update scheduler_runs set sibling_spend_micros = sibling_spend_micros - $2::int8, sibling_calls = sibling_calls - $3::int4 where id = $1', [runId, amount, slots])
}

/** `amount` more LLM spend, if the run is in flight and stays within `limit`. */
export async function addLlmCost(q: Queryable, runId: string, amount: Micros, limit: Micros): Promise<{ llm_cost_micros: Micros } | undefined> {
  const rows = await q.query<{ llm_cost_micros: bigint }>(
    `update scheduler_runs set llm_cost_micros = llm_cost_micros + $2::int8
      where id = $1 and ${IN_FLIGHT_SQL} and llm_cost_micros + $2::int8 <= $3::int8
      returning llm_cost_micros`,
    [runId, amount, limit],
  )
  return rows[0]
}

/** Replaces `reserved` LLM spend with `actual` and adds the tokens; the run's LLM total after it. */
export async function settleLlmCost(q: Queryable, runId: string, reserved: Micros, actual: Micros, inputTokens: number, outputTokens: number): Promise<Micros | undefined> {
  const rows = await q.query<{ llm_cost_micros: bigint }>(
    `update scheduler_runs
        set llm_cost_micros = llm_cost_micros - $2::int8 + $3::int8,
            llm_input_tokens = llm_input_tokens + $4::int8,
            llm_output_tokens = llm_output_tokens + $5::int8
      where id = $1 returning llm_cost_micros`,
    [runId, reserved, actual, inputTokens, outputTokens],
  )
  return rows[0]?.llm_cost_micros
}

/** One artifact of `bytes`, if the run is in flight and within the count and byte caps. */
export async function takeArtifact(q: Queryable, runId: string, bytes: number, maxCount: number, maxBytes: number): Promise<ArtifactMeters | undefined> {
  const rows = await q.query<ArtifactMeters>(
    `update scheduler_runs set artifacts_count = artifacts_count + 1, artifacts_bytes = artifacts_bytes + $2::int8
      where id = $1 and ${IN_FLIGHT_SQL} and artifacts_count < $3::int4 and artifacts_bytes + $2::int8 <= $4::int8
      returning artifacts_count, artifacts_bytes`,
    [runId, bytes, maxCount, maxBytes],
  )
  return rows[0]
}

export async function giveBackArtifact(q: Queryable, runId: string, bytes: number): Promise<void> {
  await q.query('update scheduler_runs set artifacts_count = artifacts_count - 1, artifacts_bytes = artifacts_bytes - $2::int8 where id = $1', [runId, bytes])
}
