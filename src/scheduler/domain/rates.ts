// The scheduler rate card (GET /api/v1/rates, GET /api/v1/_siblings) and the per-run ceiling of
// SPEC "POST /api/v1/tasks" rule 2. All money is bigint micros; views render it as digit strings.
//
// Decisions (SPEC: "Numeric values of the scheduler rate constants and hard caps: not shown"):
// - sandbox: 100 micros per wall-clock second (0.36 USD per sandbox hour), billed per started
//   second; a fractional max_runtime_sec is rounded up in the ceiling for the same reason.
// - first-party siblings have flat per-call fees: urlshortener 1000, forms 1000, cdn 2000,
//   inbox 2000, screenshot 5000 micros.
// - The ceiling's sibling term is max_sibling_calls x `sibling_call_fee_micros`, one published
//   number equal to the most expensive first-party fee (5000). It does not depend on tool_list, so
//   anybody can recompute estimated_ceiling_micros from the rate card alone, and the reserve covers
//   any mix of first-party calls. Marketplace capabilities have no fixed price; their spend is
//   bounded per call by max_price_micros and per run by max_sibling_spend_micros, and the runner
//   must also keep a run's total spend inside its reservation (finalizeRun never charges more
//   than was reserved, see escrow.ts).
// - dependency install: 30 s budget per declared package at 100 micros/s (3000 micros each).
// - overhead: 1000 micros per run (scheduling, log storage, the completion e-mail).
// - llm_profiles: max_cost_usdc_micros_per_run is SPEC's "Default LLM reserve per run" (quick
//   0.05, standard 0.15, bulk 0.15 USD). Token prices reuse the two model tiers SPEC publishes for
//   the memory service: quick and bulk run the smaller model (100000 in / 400000 out micros per
//   million tokens), standard the larger one (300000 / 2500000); bulk differs from quick only by
//   its larger reserve (more tokens per run).
// - min_refund_micros 10000 (0.01 USD): a remainder below it is forfeited as dust instead of
//   being sent on-chain (the transfer would cost more than it returns).
// - hard caps beyond SCHEDULER_LIMITS: source at most 1 MiB of UTF-8, the ConfigMap limit (262144
//   UTF-16 units are at most 768 KiB of UTF-8, so today the character cap binds first and the
//   byte cap is a backstop for a changed rate card), 10 consecutive continuations, artifacts at most 10 MiB each, 20 and
//   50 MiB per run, run stdout/stderr truncated to 64 KiB each in GET /runs/{id}, full logs kept up
//   to 10 MB.
import type { Micros } from '../../platform/money.ts'
import { SCHEDULER_LIMITS, type LlmProfileName, type SiblingName } from '../contract/index.ts'

export interface SiblingRate {
  readonly fee_micros: Micros
  readonly description: string
}

export interface LlmProfileRate {
  /** Default (and highest) LLM reserve per run for this profile. */
  readonly max_cost_usdc_micros_per_run: Micros
  readonly input_micros_per_million_tokens: Micros
  readonly output_micros_per_million_tokens: Micros
}

export interface HardCaps {
  readonly max_runtime_sec: number
  readonly max_sibling_calls: number
  readonly max_source_chars: number
  readonly max_source_bytes: number
  readonly max_dependencies: number
  readonly max_env_keys: number
  readonly max_env_value_chars: number
  readonly max_tool_list: number
  readonly max_consecutive_continuations: number
  readonly max_continuation_delay_sec: number
  readonly max_artifact_bytes: number
  readonly max_artifacts_per_run: number
  readonly max_artifact_bytes_per_run: number
  readonly max_output_bytes_in_run: number
  readonly max_log_bytes: number
}

export interface SchedulerRates {
  readonly currency: 'USD'
  readonly sandbox_per_second_micros: Micros
  readonly siblings: Readonly<Record<SiblingName, SiblingRate>>
  /** The ceiling's per-call sibling fee: the highest first-party fee. */
  readonly sibling_call_fee_micros: Micros
  readonly dependency_install: { readonly budget_sec_per_package: number; readonly per_second_micros: Micros }
  readonly overhead_micros: Micros
  readonly min_refund_micros: Micros
  readonly llm_profiles: Readonly<Record<LlmProfileName, LlmProfileRate>>
  readonly hard_caps: HardCaps
}

const SIBLING_RATES: Record<SiblingName, SiblingRate> = {
  urlshortener: { fee_micros: 1_000n, description: 'Create and resolve short links' },
  cdn: { fee_micros: 2_000n, description: 'Publish files to a public CDN URL' },
  forms: { fee_micros: 1_000n, description: 'Create hosted forms and read submissions' },
  screenshot: { fee_micros: 5_000n, description: 'Render a web page to PNG or PDF' },
  inbox: { fee_micros: 2_000n, description: 'Receive and read e-mail at a task address' },
}

function maxFee(siblings: Readonly<Record<string, SiblingRate>>): Micros {
  let max = 0n
  for (const rate of Object.values(siblings)) if (rate.fee_micros > max) max = rate.fee_micros
  return max
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null) {
    for (const inner of Object.values(value)) deepFreeze(inner)
    Object.freeze(value)
  }
  return value
}

export const DEFAULT_RATES: SchedulerRates = deepFreeze({
  currency: 'USD',
  sandbox_per_second_micros: 100n,
  siblings: SIBLING_RATES,
  sibling_call_fee_micros: maxFee(SIBLING_RATES),
  dependency_install: { budget_sec_per_package: 30, per_second_micros: 100n },
  overhead_micros: 1_000n,
  min_refund_micros: 10_000n,
  llm_profiles: {
    quick: { max_cost_usdc_micros_per_run: 50_000n, input_micros_per_million_tokens: 100_000n, output_micros_per_million_tokens: 400_000n },
    standard: { max_cost_usdc_micros_per_run: 150_000n, input_micros_per_million_tokens: 300_000n, output_micros_per_million_tokens: 2_500_000n },
    bulk: { max_cost_usdc_micros_per_run: 150_000n, input_micros_per_million_tokens: 100_000n, output_micros_per_million_tokens: 400_000n },
  },
  hard_caps: {
    max_runtime_sec: SCHEDULER_LIMITS.maxRuntimeSec,
    max_sibling_calls: SCHEDULER_LIMITS.maxSiblingCalls,
    max_source_chars: SCHEDULER_LIMITS.maxSourceChars,
    max_source_bytes: 1_048_576,
    max_dependencies: SCHEDULER_LIMITS.maxDependencies,
    max_env_keys: SCHEDULER_LIMITS.maxEnvKeys,
    max_env_value_chars: SCHEDULER_LIMITS.maxEnvValueChars,
    max_tool_list: SCHEDULER_LIMITS.maxToolList,
    max_consecutive_continuations: 10,
    max_continuation_delay_sec: 600,
    max_artifact_bytes: 10_485_760,
    max_artifacts_per_run: 20,
    max_artifact_bytes_per_run: 52_428_800,
    max_output_bytes_in_run: 65_536,
    max_log_bytes: 10_000_000,
  },
})

/** What the ceiling depends on (a TaskCreateInput has all of it). */
export interface CeilingInput {
  readonly max_runtime_sec: number
  readonly max_sibling_calls: number
  readonly dependencies: readonly string[]
  readonly llm: { readonly profile: LlmProfileName; readonly max_cost_usdc_micros_per_run?: Micros | null } | null
}

export interface CeilingBreakdown {
  readonly runtime_micros: Micros
  readonly siblings_micros: Micros
  readonly dependencies_micros: Micros
  readonly llm_micros: Micros
  readonly overhead_micros: Micros
  readonly total_micros: Micros
}

/** The LLM reserve a task gets: its own max_cost_usdc_micros_per_run when lower, else the profile's. */
export function llmReserveMicros(llm: CeilingInput['llm'], rates: SchedulerRates = DEFAULT_RATES): Micros {
  if (llm === null) return 0n
  const profile = rates.llm_profiles[llm.profile]
  if (profile === undefined) throw new RangeError(`unknown llm profile ${String(llm.profile)}`)
  const own = llm.max_cost_usdc_micros_per_run
  return own !== undefined && own !== null && own < profile.max_cost_usdc_micros_per_run ? own : profile.max_cost_usdc_micros_per_run
}

/** SPEC rule 2 term by term. */
export function estimateCeiling(task: CeilingInput, rates: SchedulerRates = DEFAULT_RATES): CeilingBreakdown {
  if (!Number.isFinite(task.max_runtime_sec) || task.max_runtime_sec < 0) throw new RangeError('max_runtime_sec must be a non-negative number')
  if (!Number.isSafeInteger(task.max_sibling_calls) || task.max_sibling_calls < 0) throw new RangeError('max_sibling_calls must be a non-negative integer')
  const runtime_micros = BigInt(Math.ceil(task.max_runtime_sec)) * rates.sandbox_per_second_micros
  const siblings_micros = BigInt(task.max_sibling_calls) * rates.sibling_call_fee_micros
  const dependencies_micros = BigInt(task.dependencies.length) * BigInt(Math.ceil(rates.dependency_install.budget_sec_per_package)) * rates.dependency_install.per_second_micros
  const llm_micros = llmReserveMicros(task.llm, rates)
  const overhead_micros = rates.overhead_micros
  return {
    runtime_micros,
    siblings_micros,
    dependencies_micros,
    llm_micros,
    overhead_micros,
    total_micros: runtime_micros + siblings_micros + dependencies_micros + llm_micros + overhead_micros,
  }
}

/** estimated_ceiling_micros: the amount reserved before every run. */
export function estimateCeilingMicros(task: CeilingInput, rates: SchedulerRates = DEFAULT_RATES): Micros {
  return estimateCeiling(task, rates).total_micros
}

export const CEILING_FORMULA =
  'estimated_ceiling_micros = ceil(max_runtime_sec) x sandbox_per_second_micros + max_sibling_calls x sibling_call_fee_micros + ' +
  'len(dependencies) x dependency_install.budget_sec_per_package x dependency_install.per_second_micros + ' +
  '(llm set ? min(llm.max_cost_usdc_micros_per_run, llm_profiles[profile].max_cost_usdc_micros_per_run) : 0) + overhead_micros'

/**
 * GET /api/v1/rates body. Everything the `Rates` response schema has, plus `siblings` (per-sibling
 * fees), `min_refund_micros`, per-token prices in llm_profiles and the extra hard caps; the schema
 * in src/catalog/schemas/scheduler.ts needs those added before the route serves them.
 */
export function ratesView(rates: SchedulerRates = DEFAULT_RATES) {
  const profiles = Object.fromEntries(
    Object.entries(rates.llm_profiles).map(([name, p]) => [
      name,
      {
        max_cost_usdc_micros_per_run: p.max_cost_usdc_micros_per_run.toString(),
        input_micros_per_million_tokens: p.input_micros_per_million_tokens.toString(),
        output_micros_per_million_tokens: p.output_micros_per_million_tokens.toString(),
      },
    ]),
  )
  return {
    currency: rates.currency,
    sandbox_per_second_micros: rates.sandbox_per_second_micros.toString(),
    sibling_call_fee_micros: rates.sibling_call_fee_micros.toString(),
    siblings: Object.fromEntries(Object.entries(rates.siblings).map(([name, s]) => [name, { fee_micros: s.fee_micros.toString() }])),
    dependency_install: {
      budget_sec_per_package: rates.dependency_install.budget_sec_per_package,
      per_second_micros: rates.dependency_install.per_second_micros.toString(),
    },
    overhead_micros: rates.overhead_micros.toString(),
    min_refund_micros: rates.min_refund_micros.toString(),
    hard_caps: { ...rates.hard_caps },
    llm_profiles: profiles,
    formula: CEILING_FORMULA,
  }
}

/** GET /api/v1/_siblings body (matches the `Siblings` response schema). */
export function siblingsView(rates: SchedulerRates = DEFAULT_RATES) {
  return {
    siblings: Object.entries(rates.siblings).map(([name, s]) => ({ name, description: s.description, fee_micros: s.fee_micros.toString() })),
  }
}
