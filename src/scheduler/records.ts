// Stored shapes of the scheduler (rows of src/migrations/0004_scheduler.sql) and their public views
// (the Task / Run / ledger response schemas of src/catalog/schemas/scheduler.ts). Money is bigint in
// rows and decimal strings in views; env values never leave this module's callers.
import type { Micros } from '../platform/money.ts'
import { estimateCeilingMicros, llmReserveMicros, type SchedulerRates } from './domain/rates.ts'
import type { RecoveryHint, TaskState } from './domain/states.ts'
import type { EscrowSummary } from './domain/escrow.ts'
import type { CompiledSchedule, LlmProfileName, Rail, Runtime } from './contract/index.ts'
import type { TaskCreateInput } from './domain/validate.ts'

/** A task row's spec: the validated create body minus env, money as decimal strings. */
export interface StoredSpec {
  schedule: CompiledSchedule | null
  runtime: Runtime
  source: string
  entrypoint: string
  max_runtime_sec: number
  max_sibling_calls: number
  max_amount_usdc_micros: string
  tool_list: string[] | null
  max_sibling_spend_micros: string | null
  dependencies: string[]
  notify_email: string | null
  end_at: string | null
  llm: { profile: LlmProfileName; max_cost_usdc_micros_per_run: string | null } | null
  artifacts: { enabled: boolean }
}

export interface TaskRow {
  [column: string]: unknown
  id: string
  owner: string
  rail: Rail
  status: TaskState
  spec: StoredSpec
  env_ciphertext: string | null
  env_keys: string[]
  idempotency_key: string
  request_hash: string
  payment_protocol: string | null
  payment_channel: string | null
  resource_sync_pending?: boolean
  webhook_secret_hash: string | null
  webhook_rotated_at: Date | null
  recovery_hint: SerializedHint | null
  next_run_at: Date | null
  consecutive_infra_failures: number
  consecutive_continuations: number
  created_at: Date
  updated_at: Date
  deleted_at: Date | null
}

export type SerializedHint = Omit<RecoveryHint, 'shortfall_micros'> & { shortfall_micros?: string }

export const RUN_FINAL_STATUSES = ['succeeded', 'failed', 'timed_out', 'cancelled', 'skipped'] as const
export type RunStatus = 'queued' | 'claimed' | 'running' | (typeof RUN_FINAL_STATUSES)[number]

export interface RunRow {
  [column: string]: unknown
  id: string
  task_id: string
  trigger: 'schedule' | 'trigger' | 'manual' | 'webhook' | 'continuation'
  status: RunStatus
  reserved_micros: bigint
  cost_micros: bigint
  sibling_calls: number
  sibling_spend_micros: bigint
  llm_cost_micros: bigint
  continuation_delay_sec: number | null
  exit_code: number | null
  outcome: string | null
  error: string | null
  stdout: string
  stderr: string
  stdout_bytes: bigint
  stderr_bytes: bigint
  runtime_version: string | null
  install_ms: number
  created_at: Date
  started_at: Date | null
  finished_at: Date | null
}

export function toStoredSpec(spec: TaskCreateInput): StoredSpec {
  return {
    schedule: spec.schedule,
    runtime: spec.runtime,
    source: spec.source,
    entrypoint: spec.entrypoint,
    max_runtime_sec: spec.max_runtime_sec,
    max_sibling_calls: spec.max_sibling_calls,
    max_amount_usdc_micros: spec.max_amount_usdc_micros.toString(),
    tool_list: spec.tool_list === null ? null : [...spec.tool_list],
    max_sibling_spend_micros: spec.max_sibling_spend_micros === null ? null : spec.max_sibling_spend_micros.toString(),
    dependencies: [...spec.dependencies],
    notify_email: spec.notify_email,
    end_at: spec.end_at,
    llm: spec.llm === null ? null : { profile: spec.llm.profile, max_cost_usdc_micros_per_run: spec.llm.max_cost_usdc_micros_per_run?.toString() ?? null },
    artifacts: { enabled: spec.artifacts.enabled },
  }
}

const big = (value: string | null | undefined): Micros | null => (value === null || value === undefined ? null : BigInt(value))

/** The per-run ceiling of a stored task under the current rate card. */
export function ceilingOf(spec: StoredSpec, rates: SchedulerRates): Micros {
  return estimateCeilingMicros(
    {
      max_runtime_sec: spec.max_runtime_sec,
      max_sibling_calls: spec.max_sibling_calls,
      dependencies: spec.dependencies,
      llm: spec.llm === null ? null : { profile: spec.llm.profile, max_cost_usdc_micros_per_run: big(spec.llm.max_cost_usdc_micros_per_run) },
    },
    rates,
  )
}

export function serializeHint(hint: RecoveryHint): SerializedHint {
  const { shortfall_micros, ...rest } = hint
  return shortfall_micros === undefined ? rest : { ...rest, shortfall_micros: shortfall_micros.toString() }
}

/** GET /api/v1/tasks/{id} and every answer that returns the task. */
export function taskView(task: TaskRow, escrow: EscrowSummary, rates: SchedulerRates, nextRunAt: Date | null, pendingMicros: Micros = 0n) {
  const { spec } = task
  const view: Record<string, unknown> = {
    id: task.id,
    status: task.status,
    rail: task.rail,
    schedule: spec.schedule === null ? null : { ...spec.schedule },
    runtime: spec.runtime,
    entrypoint: spec.entrypoint,
    caps: {
      max_runtime_sec: spec.max_runtime_sec,
      max_sibling_calls: spec.max_sibling_calls,
      max_amount_usdc_micros: spec.max_amount_usdc_micros,
      max_sibling_spend_micros: spec.max_sibling_spend_micros,
    },
    tool_list: spec.tool_list,
    dependencies: spec.dependencies,
    env_keys: task.env_keys,
    notify_email: spec.notify_email,
    end_at: spec.end_at,
    // The LLM reserve in force: the task's own lower value, else the profile's.
    llm:
      spec.llm === null
        ? null
        : {
            profile: spec.llm.profile,
            max_cost_usdc_micros_per_run: llmReserveMicros(
              { profile: spec.llm.profile, max_cost_usdc_micros_per_run: big(spec.llm.max_cost_usdc_micros_per_run) },
              rates,
            ).toString(),
          },
    artifacts: spec.artifacts,
    webhook_enabled: task.webhook_secret_hash !== null,
    next_run_at: nextRunAt === null ? null : nextRunAt.toISOString(),
    cumulative_cost_micros: escrow.cumulative_cost_micros.toString(),
    balance_micros: escrow.balance_micros.toString(),
    pending_payment_micros: pendingMicros.toString(),
    estimated_ceiling_micros: ceilingOf(spec, rates).toString(),
    created_at: task.created_at.toISOString(),
    updated_at: task.updated_at.toISOString(),
  }
  if (task.recovery_hint !== null && (task.status === 'paused' || task.status === 'paused_insufficient_funds')) view.recovery_hint = task.recovery_hint
  return view
}

const iso = (date: Date | null) => (date === null ? null : date.toISOString())

export function runSlimView(run: RunRow) {
  return {
    id: run.id,
    task_id: run.task_id,
    status: run.status,
    trigger: run.trigger,
    exit_code: run.exit_code,
    cost_micros: run.cost_micros.toString(),
    created_at: run.created_at.toISOString(),
    started_at: iso(run.started_at),
    finished_at: iso(run.finished_at),
  }
}

export function runView(run: RunRow, logsUrl: string, outputCap: number) {
  const cut = (text: string) => (Buffer.byteLength(text) <= outputCap ? { text, truncated: false } : { text: truncateUtf8(text, outputCap), truncated: true })
  const stdout = cut(run.stdout)
  const stderr = cut(run.stderr)
  const view: Record<string, unknown> = {
    ...runSlimView(run),
    duration_ms: run.started_at !== null && run.finished_at !== null ? Math.max(0, run.finished_at.getTime() - run.started_at.getTime()) : null,
    stdout: stdout.text,
    stderr: stderr.text,
    stdout_truncated: stdout.truncated || run.stdout_bytes > BigInt(Buffer.byteLength(run.stdout)),
    stderr_truncated: stderr.truncated || run.stderr_bytes > BigInt(Buffer.byteLength(run.stderr)),
    logs_url: logsUrl,
    runtime_version: run.runtime_version,
  }
  if (run.error !== null) view.error = run.error
  return view
}

/** The first `bytes` bytes of text, never splitting a UTF-8 sequence. */
export function truncateUtf8(text: string, bytes: number): string {
  const buffer = Buffer.from(text)
  if (buffer.length <= bytes) return text
  let end = bytes
  while (end > 0 && (buffer[end]! & 0xc0) === 0x80) end -= 1
  return buffer.subarray(0, end).toString('utf8')
}
