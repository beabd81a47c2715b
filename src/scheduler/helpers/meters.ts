// The per-run meters on scheduler_runs, advanced only by conditional UPDATEs: each reservation is
// one statement that checks the cap and adds in the same row write, so concurrent helper calls are
// serialised by the row lock and a cap can never be passed or a call counted twice. Money is
// reserved first (worst case) and settled to the real amount afterwards; a failed call releases
// what it reserved. After the run ends nothing new can be reserved (status check), but settling
// an in-flight reservation still applies.
import type { Queryable } from '../../platform/db/index.ts'
import type { Micros } from '../../platform/money.ts'
import { IN_FLIGHT_SQL, IN_FLIGHT_STATUSES } from '../escrow-store.ts'

export type Refusal = 'run_ended' | 'call_cap' | 'spend_cap' | 'count_cap' | 'bytes_cap'

export type Reserved<T> = { ok: true; meters: T } | { ok: false; refusal: Refusal; meters: T }

export type SiblingMeters = {
  sibling_calls: number
  sibling_spend_micros: Micros
}

interface MeterRow {
  [column: string]: unknown
  status: string
  sibling_calls: number
  sibling_spend_micros: bigint
  llm_cost_micros: bigint
  artifacts_count: number
  artifacts_bytes: bigint
}

async function currentMeters(db: Queryable, runId: string): Promise<MeterRow> {
  const rows = await db.query<MeterRow>('select status, sibling_calls, sibling_spend_micros, llm_cost_micros, artifacts_count, artifacts_bytes from scheduler_runs where id = $1', [
    runId,
  ])
  const row = rows[0]
  if (row === undefined) throw new Error(`run ${runId} vanished`)
  return row
}

function ended(row: MeterRow): boolean {
  return !(IN_FLIGHT_STATUSES as readonly string[]).includes(row.status)
}

/**
 * Takes one call(...) slot and reserves `amount` of sibling spend: refused when the run ended,
 * `max_sibling_calls` slots are taken, or spend would pass `spendLimit`.
 */
export async function reserveSiblingCall(db: Queryable, runId: string, amount: Micros, maxCalls: number, spendLimit: Micros): Promise<Reserved<SiblingMeters>> {
  const rows = await db.query<SiblingMeters>(
    `update scheduler_runs
        set sibling_calls = sibling_calls + 1, sibling_spend_micros = sibling_spend_micros + $2::int8
      where id = $1 and ${IN_FLIGHT_SQL} and sibling_calls < $3::int4 and sibling_spend_micros + $2::int8 <= $4::int8
      returning sibling_calls, sibling_spend_micros`,
    [runId, amount, maxCalls, spendLimit],
  )
  if (rows[0] !== undefined) return { ok: true, meters: rows[0] }
  const row = await currentMeters(db, runId)
  const meters = { sibling_calls: row.sibling_calls, sibling_spend_micros: row.sibling_spend_micros }
  if (ended(row)) return { ok: false, refusal: 'run_ended', meters }
  if (row.sibling_calls >= maxCalls) return { ok: false, refusal: 'call_cap', meters }
  return { ok: false, refusal: 'spend_cap', meters }
}

/** Gives back `amount` of reserved spend, and the call slot too when `slot` is true. */
export async function releaseSiblingCall(db: Queryable, runId: string, amount: Micros, slot: boolean): Promise<void> {
  if (amount === 0n && !slot) return
  await db.query('update scheduler_runs set sibling_spend_micros = sibling_spend_micros - $2::int8, sibling_calls = sibling_calls - $3::int4 where id = $1', [
    runId,
    amount,
    slot ? 1 : 0,
  ])
}

/** Reserves `amount` of LLM spend within `limit` (the run's LLM reserve). */
export async function reserveLlm(db: Queryable, runId: string, amount: Micros, limit: Micros): Promise<Reserved<{ llm_cost_micros: Micros }>> {
  const rows = await db.query<{ llm_cost_micros: bigint }>(
    `update scheduler_runs set llm_cost_micros = llm_cost_micros + $2::int8
      where id = $1 and ${IN_FLIGHT_SQL} and llm_cost_micros + $2::int8 <= $3::int8
      returning llm_cost_micros`,
    [runId, amount, limit],
  )
  if (rows[0] !== undefined) return { ok: true, meters: rows[0] }
  const row = await currentMeters(db, runId)
  return { ok: false, refusal: ended(row) ? 'run_ended' : 'spend_cap', meters: { llm_cost_micros: row.llm_cost_micros } }
}

/** Replaces a reservation with the real cost and adds the tokens; returns the run's LLM total. */
export async function settleLlm(db: Queryable, runId: string, reserved: Micros, actual: Micros, inputTokens: number, outputTokens: number): Promise<Micros> {
  const rows = await db.query<{ llm_cost_micros: bigint }>(
    `update scheduler_runs
        set llm_cost_micros = llm_cost_micros - $2::int8 + $3::int8,
            llm_input_tokens = llm_input_tokens + $4::int8,
            llm_output_tokens = llm_output_tokens + $5::int8
      where id = $1 returning llm_cost_micros`,
    [runId, reserved, actual, inputTokens, outputTokens],
  )
  return rows[0]?.llm_cost_micros ?? 0n
}

export type ArtifactMeters = {
  artifacts_count: number
  artifacts_bytes: Micros
}

/** Counts one artifact of `bytes` against the per-run count and byte caps. */
export async function reserveArtifact(db: Queryable, runId: string, bytes: number, maxCount: number, maxBytes: number): Promise<Reserved<ArtifactMeters>> {
  const rows = await db.query<ArtifactMeters>(
    `update scheduler_runs set artifacts_count = artifacts_count + 1, artifacts_bytes = artifacts_bytes + $2::int8
      where id = $1 and ${IN_FLIGHT_SQL} and artifacts_count < $3::int4 and artifacts_bytes + $2::int8 <= $4::int8
      returning artifacts_count, artifacts_bytes`,
    [runId, bytes, maxCount, maxBytes],
  )
  if (rows[0] !== undefined) return { ok: true, meters: rows[0] }
  const row = await currentMeters(db, runId)
  const meters = { artifacts_count: row.artifacts_count, artifacts_bytes: row.artifacts_bytes }
  if (ended(row)) return { ok: false, refusal: 'run_ended', meters }
  if (row.artifacts_count >= maxCount) return { ok: false, refusal: 'count_cap', meters }
  return { ok: false, refusal: 'bytes_cap', meters }
}

export async function releaseArtifact(db: Queryable, runId: string, bytes: number): Promise<void> {
  await db.query('update scheduler_runs set artifacts_count = artifacts_count - 1, artifacts_bytes = artifacts_bytes - $2::int8 where id = $1', [runId, bytes])
}
