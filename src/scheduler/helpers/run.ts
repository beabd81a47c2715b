// Who is calling a helper: the run named in the URL, proven by its bearer token (the random secret
// the controller put into the sandbox as AGW_RUN_TOKEN; the run row's token_hash is its SHA-256
// hex). The run must be in flight (claimed or running); afterwards every helper answers
// TOKEN_EXPIRED. The task's stored spec is parsed here into the few fields the helpers need.
import { createHash, timingSafeEqual } from 'node:crypto'
import type { Queryable } from '../../platform/db/index.ts'
import { AppError } from '../../platform/errors.ts'
import { credentialsOf, type HeaderBag } from '../../payments/credentials.ts'
import { parseMicros, type Micros } from '../../platform/money.ts'
import { IN_FLIGHT_STATUSES, runForHelper } from '../run-store.ts'
import { LLM_PROFILES, type LlmProfileName } from '../contract/index.ts'

/** The task fields the helpers read (the task row's spec, money parsed to bigint). */
export interface HelperTaskSpec {
  readonly max_runtime_sec: number
  readonly max_sibling_calls: number
  readonly tool_list: readonly string[] | null
  readonly max_sibling_spend_micros: Micros | null
  readonly dependencies: readonly string[]
  readonly llm: { readonly profile: LlmProfileName; readonly max_cost_usdc_micros_per_run: Micros | null } | null
  readonly artifacts: { readonly enabled: boolean }
}

export interface HelperRun {
  readonly runId: string
  readonly taskId: string
  readonly taskStatus: string
  readonly consecutiveContinuations: number
  readonly spec: HelperTaskSpec
}

export function sha256Hex(value: string): string {
  return createHash('sha256').update(value, 'utf8').digest('hex')
}

/** The run token of `Authorization: Bearer <token>` (credentials.ts), or a 401 naming the header. */
export function bearerToken(headers: HeaderBag): string {
  const bearer = credentialsOf(headers).bearer
  if (bearer === undefined || !bearer.valid) {
    throw new AppError('TOKEN_EXPIRED', 'Send the run token as Authorization: Bearer $AGW_RUN_TOKEN', { field: 'header.authorization' })
  }
  return bearer.token
}

function sameHash(a: string, b: string): boolean {
  const left = Buffer.from(a, 'utf8')
  const right = Buffer.from(b, 'utf8')
  return left.length === right.length && timingSafeEqual(left, right)
}

function malformedSpec(taskId: string, what: string): never {
  throw new AppError('INTERNAL', `Task ${taskId} has a malformed stored spec (${what})`)
}

/** Reads the stored spec defensively: a bad row is a 500 naming the field, never a silent default. */
export function parseHelperSpec(taskId: string, raw: unknown): HelperTaskSpec {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) malformedSpec(taskId, 'not an object')
  const spec = raw as Record<string, unknown>
  const calls = spec.max_sibling_calls
  if (typeof calls !== 'number' || !Number.isSafeInteger(calls) || calls < 0) malformedSpec(taskId, 'max_sibling_calls')
  const runtime = spec.max_runtime_sec
  if (typeof runtime !== 'number' || !(runtime >= 0)) malformedSpec(taskId, 'max_runtime_sec')
  const tools = spec.tool_list ?? null
  if (tools !== null && (!Array.isArray(tools) || tools.some((t) => typeof t !== 'string'))) malformedSpec(taskId, 'tool_list')
  const spendRaw = spec.max_sibling_spend_micros ?? null
  const spend = spendRaw === null ? null : parseMicros(spendRaw)
  if (spend === undefined) malformedSpec(taskId, 'max_sibling_spend_micros')
  const deps = spec.dependencies ?? []
  if (!Array.isArray(deps)) malformedSpec(taskId, 'dependencies')
  let llm: HelperTaskSpec['llm'] = null
  if (spec.llm !== null && spec.llm !== undefined) {
    const l = spec.llm as Record<string, unknown>
    if (typeof l.profile !== 'string' || !(LLM_PROFILES as readonly string[]).includes(l.profile)) malformedSpec(taskId, 'llm.profile')
    const costRaw = l.max_cost_usdc_micros_per_run ?? null
    const cost = costRaw === null ? null : parseMicros(costRaw)
    if (cost === undefined) malformedSpec(taskId, 'llm.max_cost_usdc_micros_per_run')
    llm = { profile: l.profile as LlmProfileName, max_cost_usdc_micros_per_run: cost }
  }
  const artifacts = spec.artifacts as { enabled?: unknown } | null | undefined
  return {
    max_runtime_sec: runtime,
    max_sibling_calls: calls,
    tool_list: tools as string[] | null,
    max_sibling_spend_micros: spend,
    dependencies: deps as string[],
    llm,
    artifacts: { enabled: artifacts?.enabled === true },
  }
}

/**
 * The in-flight run `runId` proven by `token`, or TOKEN_EXPIRED (401): unknown run, wrong token,
 * token cleared, or run no longer claimed/running. One message for the first three so a caller
 * cannot probe which run ids exist.
 */
export async function authenticateRun(db: Queryable, runId: string, token: string): Promise<HelperRun> {
  const row = await runForHelper(db, runId)
  if (row === undefined || row.token_hash === null || !sameHash(row.token_hash, sha256Hex(token))) {
    throw new AppError('TOKEN_EXPIRED', 'The run token is not valid for this run', { field: 'header.authorization' })
  }
  if (!(IN_FLIGHT_STATUSES as readonly string[]).includes(row.status)) {
    throw new AppError('TOKEN_EXPIRED', `Run ${runId} is ${row.status}: its helper token expired when the run ended`, {
      field: 'header.authorization',
      extensions: { run_status: row.status },
    })
  }
  return {
    runId: row.run_id,
    taskId: row.task_id,
    taskStatus: row.task_status,
    consecutiveContinuations: Number(row.consecutive_continuations),
    spec: parseHelperSpec(row.task_id, row.spec),
  }
}
