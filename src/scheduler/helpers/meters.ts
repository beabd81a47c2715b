// The per-run meters the helpers reserve against (the run row's counters, run-store.ts): each
// reservation is one conditional update that checks the cap and adds in the same row write, so
// concurrent helper calls are serialised by the row lock and a cap can never be passed or a call
// counted twice. Money is reserved first (worst case) and settled to the real amount afterwards;
// a failed call releases what it reserved. After the run ends nothing new can be reserved (status
// check), but settling an in-flight reservation still applies. A refused reservation is told apart
// here (run ended, which cap) from the meters as they stand.
import type { Queryable } from '../../platform/db/index.ts'
import type { Micros } from '../../platform/money.ts'
import {
  addLlmCost,
  giveBackArtifact,
  giveBackSiblingCall,
  IN_FLIGHT_STATUSES,
  runMeters,
  settleLlmCost,
  takeArtifact,
  takeSiblingCall,
  type ArtifactMeters,
  type RunMeters,
  type SiblingMeters,
} from '../run-store.ts'

export type { ArtifactMeters, SiblingMeters }

export type Refusal = 'run_ended' | 'call_cap' | 'spend_cap' | 'count_cap' | 'bytes_cap'

export type Reserved<T> = { ok: true; meters: T } | { ok: false; refusal: Refusal; meters: T }

async function currentMeters(db: Queryable, runId: string): Promise<RunMeters> {
  const row = await runMeters(db, runId)
  if (row === undefined) throw new Error(`run ${runId} vanished`)
  return row
}

function ended(row: RunMeters): boolean {
  return !(IN_FLIGHT_STATUSES as readonly string[]).includes(row.status)
}

/**
 * Takes one call(...) slot and reserves `amount` of sibling spend: refused when the run ended,
 * `max_sibling_calls` slots are taken, or spend would pass `spendLimit`.
 */
export async function reserveSiblingCall(db: Queryable, runId: string, amount: Micros, maxCalls: number, spendLimit: Micros): Promise<Reserved<SiblingMeters>> {
  const taken = await takeSiblingCall(db, runId, amount, maxCalls, spendLimit)
  if (taken !== undefined) return { ok: true, meters: taken }
  const row = await currentMeters(db, runId)
  const meters = { sibling_calls: row.sibling_calls, sibling_spend_micros: row.sibling_spend_micros }
  if (ended(row)) return { ok: false, refusal: 'run_ended', meters }
  if (row.sibling_calls >= maxCalls) return { ok: false, refusal: 'call_cap', meters }
  return { ok: false, refusal: 'spend_cap', meters }
}

/** Gives back `amount` of reserved spend, and the call slot too when `slot` is true. */
export async function releaseSiblingCall(db: Queryable, runId: string, amount: Micros, slot: boolean): Promise<void> {
  if (amount === 0n && !slot) return
  await giveBackSiblingCall(db, runId, amount, slot ? 1 : 0)
}

/** Reserves `amount` of LLM spend within `limit` (the run's LLM reserve). */
export async function reserveLlm(db: Queryable, runId: string, amount: Micros, limit: Micros): Promise<Reserved<{ llm_cost_micros: Micros }>> {
  const added = await addLlmCost(db, runId, amount, limit)
  if (added !== undefined) return { ok: true, meters: added }
  const row = await currentMeters(db, runId)
  return { ok: false, refusal: ended(row) ? 'run_ended' : 'spend_cap', meters: { llm_cost_micros: row.llm_cost_micros } }
}

/** Replaces a reservation with the real cost and adds the tokens; returns the run's LLM total. */
export async function settleLlm(db: Queryable, runId: string, reserved: Micros, actual: Micros, inputTokens: number, outputTokens: number): Promise<Micros> {
  return (await settleLlmCost(db, runId, reserved, actual, inputTokens, outputTokens)) ?? 0n
}

/** Counts one artifact of `bytes` against the per-run count and byte caps. */
export async function reserveArtifact(db: Queryable, runId: string, bytes: number, maxCount: number, maxBytes: number): Promise<Reserved<ArtifactMeters>> {
  const taken = await takeArtifact(db, runId, bytes, maxCount, maxBytes)
  if (taken !== undefined) return { ok: true, meters: taken }
  const row = await currentMeters(db, runId)
  const meters = { artifacts_count: row.artifacts_count, artifacts_bytes: row.artifacts_bytes }
  if (ended(row)) return { ok: false, refusal: 'run_ended', meters }
  if (row.artifacts_count >= maxCount) return { ok: false, refusal: 'count_cap', meters }
  return { ok: false, refusal: 'bytes_cap', meters }
}

export async function releaseArtifact(db: Queryable, runId: string, bytes: number): Promise<void> {
  await giveBackArtifact(db, runId, bytes)
}
