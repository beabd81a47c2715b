// Semantic validation of POST /api/v1/tasks and PATCH /api/v1/tasks/{id}: everything the JSON
// Schemas in src/catalog/schemas/scheduler.ts cannot say. It re-checks types too, so it is safe on
// an unvalidated body; every error is an AppError with a SPEC code and the offending `field`
// (`body.tool_list.2`, `body.env.API_KEY`, ... — dot paths like the HTTP layer's).
//
// Decisions (SPEC leaves them open):
// - Marketplace capability id: `<publisher>/<capability>`, lowercase. publisher is a DNS name
//   (labels of a-z, 0-9 and inner '-', joined by '.'); capability is a slug of a-z, 0-9, '.', '_',
//   '-' starting and ending alphanumeric; at most 200 characters in all (acme/pdf-render,
//   example.com/geo.lookup). Anything else that is not a first-party sibling: UNKNOWN_SIBLING.
// - Dependencies: python entries are PEP 508 names with optional extras and comma-joined version
//   clauses (requests-oauthlib, uvicorn[standard]>=0.30,<1); no URLs, paths or markers. node
//   entries are npm names (optionally @scope/) with an optional @range of semver characters
//   (lodash@^4.17.21); no git/file/URL specs. Preinstalled libraries are compared by normalised
//   name (PEP 503 for python: PyYAML == pyyaml, python_dateutil == python-dateutil). Bad syntax
//   and preinstalled names are UNSUPPORTED_DEPENDENCY; the same package twice is VALIDATION_ERROR.
// - entrypoint: a bare file name (no '/', '\', no leading '.') ending in .py (python) or .js,
//   .mjs, .cjs (node).
// - env: values must be strings; names the sandbox owns are reserved (PATH, HOME, proxy
//   variables, NODE_OPTIONS, PYTHONPATH, PYTHONSTARTUP, LD_*, and the AGW_ prefix the helpers use).
// - end_at: RFC 3339 with an explicit offset; must be in the future, needs a schedule (an
//   on-demand task never ends by itself, SPEC rule 1) and must leave at least one slot.
// - llm.max_cost_usdc_micros_per_run may only lower the profile's reserve (SPEC: "may lower").
// - max_runtime_sec may be fractional (SPEC types it as number); billing rounds it up.
// - A tool_list with max_sibling_calls 0 is accepted (useless, harmless); max_sibling_spend_micros
//   is required only where SPEC requires it (tool_list unset and max_sibling_calls > 0).
// - PATCH: fields outside the five mutable ones answer IMMUTABLE_FIELD (409) naming the first
//   such field, unknown names included (so a typo is not silently ignored). Lowering a
//   raises-only field is VALIDATION_ERROR (400) with `current` in the problem: the field is
//   mutable, the value is wrong. A null max_sibling_spend_micros means "no per-run spend cap", so
//   introducing one later is a lowering and refused. Narrowing an open tool_list (unset with
//   max_sibling_calls > 0) to an allowlist removes access and is IMMUTABLE_TOOL_REMOVAL; a
//   deny-all one (unset with 0 calls) may receive entries.
// - The idempotency hash covers exactly SPEC rule 1's fields: cron (the compiled 5-field string),
//   source, runtime, dependencies, tool_list, env keys, end_at and the caps (max_runtime_sec,
//   max_sibling_calls, max_amount_usdc_micros, max_sibling_spend_micros and
//   llm.max_cost_usdc_micros_per_run). Lists that are sets (dependencies, tool_list, env keys) are
//   sorted first. Not covered, per SPEC: timezone, entrypoint, notify_email, llm profile,
//   artifacts and env values.
import { createHash } from 'node:crypto'
import { canonicalJson } from '../../platform/canonical-json.ts'
import { AppError, type ErrorCode } from '../../platform/errors.ts'
import { parseMicros, type Micros } from '../../platform/money.ts'
import {
  compileSchedule,
  ENTRYPOINT_EXTENSIONS,
  FIELD_LIMITS,
  FIELD_PATTERNS,
  nextSlot,
  PREINSTALLED,
  RUNTIMES,
  type CompiledSchedule,
  type Runtime,
  type TaskState,
} from '../contract/index.ts'
import { DEFAULT_RATES, type SchedulerRates } from './rates.ts'
import { assertWritable } from './states.ts'
import type { LlmProfileName } from '../contract/index.ts'

export const RESERVED_ENV = [
  'PATH',
  'HOME',
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'NO_PROXY',
  'ALL_PROXY',
  'NODE_OPTIONS',
  'NODE_USE_ENV_PROXY',
  'PYTHONPATH',
  'PYTHONSTARTUP',
  'PYTHONHOME',
] as const
const RESERVED_ENV_PREFIXES = ['AGW_', 'LD_'] as const
const ENTRYPOINT_PATTERN = new RegExp(FIELD_PATTERNS.entrypoint)
const ENV_NAME_PATTERN = new RegExp(FIELD_PATTERNS.envName)

export interface LlmSpec {
  readonly profile: LlmProfileName
  /** The caller's lower per-run LLM reserve, or null for the profile default. */
  readonly max_cost_usdc_micros_per_run: Micros | null
}

/** A validated, normalised create body (not the Task resource's spec, see TaskResourceSpec). Money is bigint micros. */
export interface TaskCreateInput {
  readonly schedule: CompiledSchedule | null
  readonly runtime: Runtime
  readonly source: string
  readonly entrypoint: string
  readonly max_runtime_sec: number
  readonly max_sibling_calls: number
  readonly max_amount_usdc_micros: Micros
  /** null = unset: open when max_sibling_calls > 0, else deny-all (see toolAccess). */
  readonly tool_list: readonly string[] | null
  /** null = no per-run spend cap (only allowed when tool_list is set or max_sibling_calls is 0). */
  readonly max_sibling_spend_micros: Micros | null
  readonly dependencies: readonly string[]
  readonly env: Readonly<Record<string, string>>
  readonly notify_email: string | null
  /** RFC 3339 UTC (toISOString) or null. */
  readonly end_at: string | null
  readonly llm: LlmSpec | null
  readonly artifacts: { readonly enabled: boolean }
}

export interface ValidateContext {
  /** The evaluation instant (end_at must be after it). */
  readonly now: Date
  readonly rates?: SchedulerRates
  /** First-party sibling names; defaults to the rate card's. */
  readonly siblings?: readonly string[]
}

export type ToolAccess = 'deny_all' | 'open' | 'allowlist'

/** How call(...) is gated: SPEC's tool_list rule. */
export function toolAccess(spec: Pick<TaskCreateInput, 'tool_list' | 'max_sibling_calls'>): ToolAccess {
  if (spec.tool_list !== null) return 'allowlist'
  return spec.max_sibling_calls > 0 ? 'open' : 'deny_all'
}

const CREATE_FIELDS = [
  'schedule',
  'runtime',
  'source',
  'entrypoint',
  'max_runtime_sec',
  'max_sibling_calls',
  'max_amount_usdc_micros',
  'tool_list',
  'max_sibling_spend_micros',
  'dependencies',
  'env',
  'notify_email',
  'end_at',
  'llm',
  'artifacts',
] as const

function fail(code: ErrorCode, detail: string, field: string, extensions?: Record<string, unknown>): never {
  throw new AppError(code, detail, extensions === undefined ? { field } : { field, extensions })
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

// ---------------------------------------------------------------- field checks

function checkRuntime(value: unknown): Runtime {
  if (value === undefined) fail('VALIDATION_ERROR', 'body.runtime is required', 'body.runtime')
  if (typeof value !== 'string' || !(RUNTIMES as readonly string[]).includes(value)) {
    fail('UNSUPPORTED_RUNTIME', `runtime ${JSON.stringify(value)} is not supported; use python (3.12) or node (22)`, 'body.runtime')
  }
  return value as Runtime
}

function checkSource(value: unknown, rates: SchedulerRates): string {
  const field = 'body.source'
  if (value === undefined) fail('VALIDATION_ERROR', 'body.source is required', field)
  if (typeof value !== 'string' || value.length === 0) fail('VALIDATION_ERROR', 'source must be a non-empty string', field)
  const caps = rates.hard_caps
  if (value.length > caps.max_source_chars) fail('VALIDATION_ERROR', `source is longer than ${caps.max_source_chars} characters`, field)
  if (Buffer.byteLength(value, 'utf8') > caps.max_source_bytes) fail('VALIDATION_ERROR', `source is larger than ${caps.max_source_bytes} bytes of UTF-8`, field)
  return value
}

function checkEntrypoint(value: unknown, runtime: Runtime): string {
  const field = 'body.entrypoint'
  if (value === undefined) fail('VALIDATION_ERROR', 'body.entrypoint is required', field)
  if (typeof value !== 'string' || value.length === 0 || value.length > FIELD_LIMITS.maxEntrypointChars) {
    fail('VALIDATION_ERROR', `entrypoint must be a file name of 1 to ${FIELD_LIMITS.maxEntrypointChars} characters`, field)
  }
  if (/[/\\]/.test(value)) fail('VALIDATION_ERROR', 'entrypoint must be a bare file name without path separators', field)
  if (value.startsWith('.')) fail('VALIDATION_ERROR', 'entrypoint must not start with a dot', field)
  if (!ENTRYPOINT_PATTERN.test(value)) fail('VALIDATION_ERROR', 'entrypoint may contain only letters, digits, ".", "_" and "-"', field)
  const allowed = ENTRYPOINT_EXTENSIONS[runtime]
  if (!allowed.some((ext) => value.endsWith(ext) && value.length > ext.length)) {
    fail('VALIDATION_ERROR', `entrypoint for runtime ${runtime} must end in ${allowed.join(', ')}`, field)
  }
  return value
}

function checkRuntimeSec(value: unknown, rates: SchedulerRates, field = 'body.max_runtime_sec'): number {
  const cap = rates.hard_caps.max_runtime_sec
  if (value === undefined) fail('VALIDATION_ERROR', `${field} is required`, field)
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 1 || value > cap) {
    fail('VALIDATION_ERROR', `max_runtime_sec must be a number of seconds from 1 to ${cap}`, field)
  }
  return value
}

function checkSiblingCalls(value: unknown, rates: SchedulerRates): number {
  const field = 'body.max_sibling_calls'
  const cap = rates.hard_caps.max_sibling_calls
  if (value === undefined) fail('VALIDATION_ERROR', 'body.max_sibling_calls is required', field)
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0 || value > cap) {
    fail('VALIDATION_ERROR', `max_sibling_calls must be an integer from 0 to ${cap}`, field)
  }
  return value
}

/** Integer micros from a JSON integer or digit string (SPEC: "integer as string or number"). */
function checkMicros(value: unknown, field: string, minimum: bigint): Micros {
  const parsed = parseMicros(value)
  if (parsed === undefined) {
    fail('VALIDATION_ERROR', `${field.replace(/^body\./, '')} must be a non-negative integer number of micros (JSON integer or digit string)`, field)
  }
  if (parsed < minimum) fail('VALIDATION_ERROR', `${field.replace(/^body\./, '')} must be at least ${minimum}`, field)
  return parsed
}

const DNS_LABEL = '[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?'
const CAPABILITY_ID = new RegExp(`^${DNS_LABEL}(?:\\.${DNS_LABEL})*/[a-z0-9](?:[a-z0-9._-]{0,126}[a-z0-9])?$`)
export const MAX_CAPABILITY_ID = FIELD_LIMITS.maxToolNameChars

/** True for a well-formed marketplace capability id (`publisher/capability`, see header). */
export function isCapabilityId(value: string): boolean {
  return value.length <= MAX_CAPABILITY_ID && CAPABILITY_ID.test(value)
}

function checkToolEntry(value: unknown, field: string, siblings: ReadonlySet<string>): string {
  if (typeof value !== 'string' || value.length === 0) fail('VALIDATION_ERROR', 'tool_list entries must be non-empty strings', field)
  if (siblings.has(value) || isCapabilityId(value)) return value
  fail(
    'UNKNOWN_SIBLING',
    `tool_list entry ${JSON.stringify(value)} is neither a first-party sibling (${[...siblings].join(', ')}) nor a marketplace capability id (publisher/capability, lowercase)`,
    field,
  )
}

function checkToolList(value: unknown, rates: SchedulerRates, siblings: ReadonlySet<string>, field = 'body.tool_list'): string[] {
  if (!Array.isArray(value)) fail('VALIDATION_ERROR', 'tool_list must be an array of sibling names and capability ids', field)
  const cap = rates.hard_caps.max_tool_list
  if (value.length > cap) fail('VALIDATION_ERROR', `tool_list has more than ${cap} entries`, field)
  const seen = new Set<string>()
  return value.map((entry, index) => {
    const name = checkToolEntry(entry, `${field}.${index}`, siblings)
    if (seen.has(name)) fail('VALIDATION_ERROR', `tool_list lists ${name} twice`, `${field}.${index}`)
    seen.add(name)
    return name
  })
}

const PY_NAME = '[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?'
const PY_CLAUSE = '(?:===|==|~=|!=|<=|>=|<|>)[A-Za-z0-9.*+!_-]+'
const PY_REQUIREMENT = new RegExp(`^(${PY_NAME})(?:\\[${PY_NAME}(?:,${PY_NAME})*\\])?(?:${PY_CLAUSE}(?:,${PY_CLAUSE})*)?$`)
const NPM_NAME = '(?:@[a-z0-9-~][a-z0-9-._~]*/)?[a-z0-9-~][a-z0-9-._~]*'
const NPM_REQUIREMENT = new RegExp(`^(${NPM_NAME})(?:@([0-9A-Za-z.*^~<>=|+-]+))?$`)

/** PEP 503 normalised project name. */
export function normalizePythonName(name: string): string {
  return name.toLowerCase().replace(/[-_.]+/g, '-')
}

/** The normalised package name of a dependency entry, or undefined if the entry is malformed. */
export function dependencyName(runtime: Runtime, entry: string): string | undefined {
  if (runtime === 'python') {
    const match = PY_REQUIREMENT.exec(entry)
    return match?.[1] === undefined ? undefined : normalizePythonName(match[1])
  }
  if (entry.length > FIELD_LIMITS.maxDependencyChars + 64) return undefined
  const match = NPM_REQUIREMENT.exec(entry)
  if (match?.[1] === undefined || match[1].length > FIELD_LIMITS.maxDependencyChars) return undefined
  if (match[2] !== undefined && (match[2].includes('==') || !/[0-9A-Za-z*]/.test(match[2]))) return undefined
  return match[1]
}

function checkDependencies(value: unknown, runtime: Runtime, rates: SchedulerRates): string[] {
  const field = 'body.dependencies'
  if (value === undefined) return []
  if (!Array.isArray(value)) fail('VALIDATION_ERROR', 'dependencies must be an array of package specs', field)
  const cap = rates.hard_caps.max_dependencies
  if (value.length > cap) fail('VALIDATION_ERROR', `dependencies has more than ${cap} entries`, field)
  const preinstalled = new Set(PREINSTALLED[runtime])
  const seen = new Set<string>()
  return value.map((entry, index) => {
    const at = `${field}.${index}`
    if (typeof entry !== 'string' || entry.length === 0) fail('VALIDATION_ERROR', 'dependencies entries must be non-empty strings', at)
    const name = dependencyName(runtime, entry)
    if (name === undefined) {
      const example = runtime === 'python' ? 'name, name==1.2.3 or name[extra]>=1,<2' : 'name, name@1.2.3 or @scope/name@^1'
      fail(
        'UNSUPPORTED_DEPENDENCY',
        `dependency ${JSON.stringify(entry)} is not a valid ${runtime === 'python' ? 'PyPI' : 'npm'} package spec (${example}; no URLs, paths or git specs)`,
        at,
      )
    }
    if (preinstalled.has(name)) {
      fail('UNSUPPORTED_DEPENDENCY', `${name} is preinstalled for ${runtime}; do not list it (preinstalled: ${PREINSTALLED[runtime].join(', ')})`, at)
    }
    if (seen.has(name)) fail('VALIDATION_ERROR', `dependencies lists ${name} twice`, at)
    seen.add(name)
    return entry
  })
}

export function isReservedEnvName(name: string): boolean {
  const upper = name.toUpperCase()
  return (RESERVED_ENV as readonly string[]).includes(upper) || RESERVED_ENV_PREFIXES.some((prefix) => upper.startsWith(prefix))
}

/** Checks an env object (create body or PUT /env). */
export function validateEnv(value: unknown, rates: SchedulerRates = DEFAULT_RATES, field = 'body.env'): Record<string, string> {
  if (value === undefined) return {}
  if (!isRecord(value)) fail('VALIDATION_ERROR', 'env must be an object of string values', field)
  const keys = Object.keys(value)
  const caps = rates.hard_caps
  if (keys.length > caps.max_env_keys) fail('VALIDATION_ERROR', `env has more than ${caps.max_env_keys} variables`, field)
  const out: Record<string, string> = {}
  for (const key of keys) {
    const at = `${field}.${key}`
    if (!ENV_NAME_PATTERN.test(key)) {
      fail('VALIDATION_ERROR', `env name ${JSON.stringify(key)} must match [A-Za-z_][A-Za-z0-9_]* (at most ${FIELD_LIMITS.maxEnvNameChars} characters)`, at)
    }
    if (isReservedEnvName(key)) fail('VALIDATION_ERROR', `env name ${key} is reserved by the sandbox`, at)
    const item = value[key]
    if (typeof item !== 'string') fail('VALIDATION_ERROR', `env.${key} must be a string (got ${item === null ? 'null' : typeof item})`, at)
    if (item.length > caps.max_env_value_chars) fail('VALIDATION_ERROR', `env.${key} is longer than ${caps.max_env_value_chars} characters`, at)
    out[key] = item
  }
  return out
}

const EMAIL = /^[^\s@"(),:;<>[\\\]]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+$/

function checkEmail(value: unknown, field = 'body.notify_email'): string {
  if (typeof value !== 'string' || value.length > FIELD_LIMITS.maxEmailChars || !EMAIL.test(value)) fail('VALIDATION_ERROR', 'notify_email must be an e-mail address', field)
  return value
}

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|([+-])(\d{2}):(\d{2}))$/

/** Parses an RFC 3339 date-time with real calendar checks (Date.parse accepts Feb 30). */
export function parseTimestamp(value: string): Date | undefined {
  const m = RFC3339.exec(value)
  if (m === null) return undefined
  const [year, month, day, hour, minute, second] = [m[1], m[2], m[3], m[4], m[5], m[6]].map(Number) as [number, number, number, number, number, number]
  const daysInMonth = new Date(Date.UTC(year, month, 0)).getUTCDate()
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth || hour > 23 || minute > 59 || second > 59) return undefined
  let offsetMin = 0
  if (m[9] !== undefined) {
    const oh = Number(m[10])
    const om = Number(m[11])
    if (oh > 23 || om > 59) return undefined
    offsetMin = (m[9] === '-' ? -1 : 1) * (oh * 60 + om)
  }
  const ms = m[7] === undefined ? 0 : Math.floor(Number(`0${m[7]}`) * 1000)
  const date = new Date(Date.UTC(year, month - 1, day, hour, minute, second, ms) - offsetMin * 60_000)
  return Number.isNaN(date.getTime()) ? undefined : date
}

function checkEndAt(value: unknown, schedule: CompiledSchedule | null, now: Date, field = 'body.end_at', requireSlot = true): string {
  const parsed = typeof value === 'string' ? parseTimestamp(value) : undefined
  if (parsed === undefined) fail('VALIDATION_ERROR', 'end_at must be an RFC 3339 date-time with an offset, e.g. 2026-12-31T23:59:00Z', field)
  if (schedule === null) fail('VALIDATION_ERROR', 'end_at needs a schedule: an on-demand task runs until it is deleted', field)
  if (parsed.getTime() <= now.getTime()) fail('VALIDATION_ERROR', `end_at ${value as string} is not in the future`, field)
  if (requireSlot && nextSlot(schedule, now, { endAt: parsed }) === undefined) {
    fail('VALIDATION_ERROR', `end_at ${value as string} is before the first scheduled run`, field)
  }
  return parsed.toISOString()
}

function checkLlm(value: unknown, rates: SchedulerRates): LlmSpec | null {
  const field = 'body.llm'
  if (value === undefined) return null
  if (!isRecord(value)) fail('VALIDATION_ERROR', 'llm must be an object { profile, max_cost_usdc_micros_per_run? }', field)
  for (const key of Object.keys(value)) {
    if (key !== 'profile' && key !== 'max_cost_usdc_micros_per_run') fail('VALIDATION_ERROR', `llm.${key} is not an allowed field`, `${field}.${key}`)
  }
  const profiles = Object.keys(rates.llm_profiles)
  const profileName = value.profile
  if (typeof profileName !== 'string' || !profiles.includes(profileName)) {
    fail('VALIDATION_ERROR', `llm.profile must be one of ${profiles.join(', ')}`, `${field}.profile`)
  }
  const profile = rates.llm_profiles[profileName as LlmProfileName]
  if (value.max_cost_usdc_micros_per_run === undefined) return { profile: profileName as LlmProfileName, max_cost_usdc_micros_per_run: null }
  const own = checkMicros(value.max_cost_usdc_micros_per_run, `${field}.max_cost_usdc_micros_per_run`, 1n)
  if (own > profile.max_cost_usdc_micros_per_run) {
    fail(
      'VALIDATION_ERROR',
      `llm.max_cost_usdc_micros_per_run may only lower the ${profileName} reserve of ${profile.max_cost_usdc_micros_per_run} micros`,
      `${field}.max_cost_usdc_micros_per_run`,
    )
  }
  return { profile: profileName as LlmProfileName, max_cost_usdc_micros_per_run: own }
}

function checkArtifacts(value: unknown): { enabled: boolean } {
  const field = 'body.artifacts'
  if (value === undefined) return { enabled: false }
  if (!isRecord(value) || typeof value.enabled !== 'boolean') fail('VALIDATION_ERROR', 'artifacts must be { enabled: boolean }', field)
  for (const key of Object.keys(value)) if (key !== 'enabled') fail('VALIDATION_ERROR', `artifacts.${key} is not an allowed field`, `${field}.${key}`)
  return { enabled: value.enabled }
}

function siblingSet(ctx: { rates?: SchedulerRates; siblings?: readonly string[] }): ReadonlySet<string> {
  return new Set(ctx.siblings ?? Object.keys((ctx.rates ?? DEFAULT_RATES).siblings))
}

// ---------------------------------------------------------------- create

/** Validates and normalises a POST /api/v1/tasks body; throws AppError naming the field. */
export function validateCreateTask(body: unknown, ctx: ValidateContext): TaskCreateInput {
  const rates = ctx.rates ?? DEFAULT_RATES
  const siblings = siblingSet(ctx)
  if (!isRecord(body)) fail('VALIDATION_ERROR', 'the body must be a JSON object', 'body')
  for (const key of Object.keys(body)) {
    if (!(CREATE_FIELDS as readonly string[]).includes(key)) fail('VALIDATION_ERROR', `body.${key} is not an allowed field`, `body.${key}`)
  }
  const runtime = checkRuntime(body.runtime)
  const schedule = body.schedule === undefined ? null : compileSchedule(body.schedule, 'body.schedule')
  const source = checkSource(body.source, rates)
  const entrypoint = checkEntrypoint(body.entrypoint, runtime)
  const max_runtime_sec = checkRuntimeSec(body.max_runtime_sec, rates)
  const max_sibling_calls = checkSiblingCalls(body.max_sibling_calls, rates)
  if (body.max_amount_usdc_micros === undefined) fail('VALIDATION_ERROR', 'body.max_amount_usdc_micros is required', 'body.max_amount_usdc_micros')
  const max_amount_usdc_micros = checkMicros(body.max_amount_usdc_micros, 'body.max_amount_usdc_micros', 1n)
  const tool_list = body.tool_list === undefined ? null : checkToolList(body.tool_list, rates, siblings)
  const max_sibling_spend_micros = body.max_sibling_spend_micros === undefined ? null : checkMicros(body.max_sibling_spend_micros, 'body.max_sibling_spend_micros', 0n)
  if (tool_list === null && max_sibling_calls > 0 && max_sibling_spend_micros === null) {
    fail('VALIDATION_ERROR', 'max_sibling_spend_micros is required when tool_list is unset (open) and max_sibling_calls > 0', 'body.max_sibling_spend_micros')
  }
  const dependencies = checkDependencies(body.dependencies, runtime, rates)
  const env = validateEnv(body.env, rates)
  const notify_email = body.notify_email === undefined ? null : checkEmail(body.notify_email)
  const end_at = body.end_at === undefined ? null : checkEndAt(body.end_at, schedule, ctx.now)
  const llm = checkLlm(body.llm, rates)
  const artifacts = checkArtifacts(body.artifacts)
  return {
    schedule,
    runtime,
    source,
    entrypoint,
    max_runtime_sec,
    max_sibling_calls,
    max_amount_usdc_micros,
    tool_list,
    max_sibling_spend_micros,
    dependencies,
    env,
    notify_email,
    end_at,
    llm,
    artifacts,
  }
}

// ---------------------------------------------------------------- idempotency

const sorted = (values: readonly string[]): string[] => [...values].sort()

/** The material SPEC rule 1 compares for Idempotency-Key reuse (see header for the field set). */
export function idempotencyMaterial(spec: TaskCreateInput) {
  return {
    v: 1,
    cron: spec.schedule?.cron ?? null,
    source: spec.source,
    runtime: spec.runtime,
    dependencies: sorted(spec.dependencies),
    tool_list: spec.tool_list === null ? null : sorted(spec.tool_list),
    env_keys: sorted(Object.keys(spec.env)),
    end_at: spec.end_at,
    max_runtime_sec: spec.max_runtime_sec,
    max_sibling_calls: spec.max_sibling_calls,
    max_amount_usdc_micros: spec.max_amount_usdc_micros,
    max_sibling_spend_micros: spec.max_sibling_spend_micros,
    llm_max_cost_usdc_micros_per_run: spec.llm?.max_cost_usdc_micros_per_run ?? null,
  }
}

/** Hex SHA-256 of the canonical JSON of idempotencyMaterial(spec). */
export function idempotencyHash(spec: TaskCreateInput): string {
  return createHash('sha256')
    .update(canonicalJson(idempotencyMaterial(spec)))
    .digest('hex')
}

// ---------------------------------------------------------------- patch

export const PATCHABLE_FIELDS = ['notify_email', 'end_at', 'tool_list', 'max_sibling_spend_micros', 'max_runtime_sec'] as const

/** What PATCH needs to know about the stored task. */
export interface PatchTarget {
  readonly status: TaskState
  readonly schedule: CompiledSchedule | null
  readonly max_runtime_sec: number
  readonly max_sibling_calls: number
  readonly tool_list: readonly string[] | null
  readonly max_sibling_spend_micros: Micros | null
}

/** The normalised changes; only the fields the body carried. */
export interface TaskPatch {
  notify_email?: string | null
  end_at?: string | null
  tool_list?: string[]
  max_sibling_spend_micros?: Micros
  max_runtime_sec?: number
}

export interface PatchContext {
  readonly now: Date
  /** A run of the task is claimed or running. */
  readonly runInFlight: boolean
  readonly rates?: SchedulerRates
  readonly siblings?: readonly string[]
}

/** Validates a PATCH /api/v1/tasks/{id} body against the stored task; throws AppError. */
export function validatePatch(task: PatchTarget, patch: unknown, ctx: PatchContext): TaskPatch {
  assertWritable(task.status)
  const rates = ctx.rates ?? DEFAULT_RATES
  if (!isRecord(patch)) fail('VALIDATION_ERROR', 'the body must be a JSON object', 'body')
  const keys = Object.keys(patch)
  if (keys.length === 0) fail('VALIDATION_ERROR', `the body must carry at least one of ${PATCHABLE_FIELDS.join(', ')}`, 'body')
  for (const key of keys) {
    if (!(PATCHABLE_FIELDS as readonly string[]).includes(key)) {
      const hint = key === 'env' ? '; replace env with PUT /api/v1/tasks/{id}/env' : '; clone the task and create a new one instead'
      fail('IMMUTABLE_FIELD', `${key} cannot be changed after creation${hint}`, `body.${key}`)
    }
  }
  const out: TaskPatch = {}
  if ('notify_email' in patch) out.notify_email = patch.notify_email === null ? null : checkEmail(patch.notify_email)
  if ('end_at' in patch) out.end_at = patch.end_at === null ? null : checkEndAt(patch.end_at, task.schedule, ctx.now, 'body.end_at', false)
  if ('tool_list' in patch) {
    const field = 'body.tool_list'
    if (patch.tool_list === null) fail('VALIDATION_ERROR', 'tool_list cannot be unset after creation', field)
    const next = checkToolList(patch.tool_list, rates, siblingSet(ctx), field)
    if (task.tool_list === null && task.max_sibling_calls > 0) {
      fail('IMMUTABLE_TOOL_REMOVAL', 'tool_list is unset (open to every sibling and capability); an allowlist would remove access. Clone and recreate instead', field)
    }
    const removed = (task.tool_list ?? []).filter((entry) => !next.includes(entry))
    if (removed.length > 0) {
      fail('IMMUTABLE_TOOL_REMOVAL', `tool_list entries cannot be removed (missing: ${removed.join(', ')}); clone and recreate instead`, field, { removed })
    }
    out.tool_list = next
  }
  if ('max_sibling_spend_micros' in patch) {
    const field = 'body.max_sibling_spend_micros'
    const next = checkMicros(patch.max_sibling_spend_micros, field, 0n)
    if (task.max_sibling_spend_micros === null) {
      fail('VALIDATION_ERROR', 'max_sibling_spend_micros is unset (no per-run cap); it can only be raised, so a cap cannot be introduced', field, { current: null })
    }
    if (next < task.max_sibling_spend_micros) {
      fail('VALIDATION_ERROR', `max_sibling_spend_micros can only be raised (current ${task.max_sibling_spend_micros})`, field, {
        current: task.max_sibling_spend_micros.toString(),
      })
    }
    out.max_sibling_spend_micros = next
  }
  if ('max_runtime_sec' in patch) {
    const field = 'body.max_runtime_sec'
    const next = checkRuntimeSec(patch.max_runtime_sec, rates, field)
    if (next < task.max_runtime_sec) fail('VALIDATION_ERROR', `max_runtime_sec can only be raised (current ${task.max_runtime_sec})`, field, { current: task.max_runtime_sec })
    if (ctx.runInFlight) fail('RUN_IN_FLIGHT', 'max_runtime_sec cannot change while a run is claimed or running; retry when it has finished', field)
    out.max_runtime_sec = next
  }
  return out
}
