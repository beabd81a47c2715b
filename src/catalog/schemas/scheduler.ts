// Scheduler service ({scheduler_url}/api/v1). SPEC gives the create body and the operation list;
// every response shape is designed here (see docs and descriptions). The vocabularies and bounds
// are the catalog's own (scheduler-vocabulary.ts, scheduler-limits.ts, scheduler-runtimes.ts);
// the scheduling contract (src/scheduler/contract) re-exports them to the domain validation, the
// Task/Run resources and the controllers. Money in responses is integer micros as a decimal
// string; env is never part of any response.
import { Type } from '@sinclair/typebox'
import { IdempotencyKey, MAX_SAFE_INTEGER, MicrosHeader, MicrosInput, MicrosString, Nullable, SignedMicrosString, StringEnum, Timestamp } from './common.ts'
import { FIELD_LIMITS, FIELD_PATTERNS, SCHEDULER_LIMITS } from './scheduler-limits.ts'
import { PREINSTALLED } from './scheduler-runtimes.ts'
import { DAYS_OF_WEEK, EVERY_VALUES, LLM_PROFILES, RAILS, RUN_STATES, RUNTIMES, SIBLINGS, TASK_STATES, TRIGGER_TYPES } from './scheduler-vocabulary.ts'

// ---------------------------------------------------------------- request parts

const Timezone = Type.String({
  minLength: 1,
  maxLength: FIELD_LIMITS.maxTimezoneChars,
  pattern: FIELD_PATTERNS.timezone,
  description: 'IANA time zone, e.g. UTC or Europe/Berlin; UTC when omitted',
})

export const CronSchedule = Type.Object(
  {
    cron: Type.String({ minLength: 1, maxLength: FIELD_LIMITS.maxCronChars, description: '5-field cron expression (minute hour day-of-month month day-of-week)' }),
    timezone: Type.Optional(Timezone),
  },
  { additionalProperties: false, title: 'Cron schedule' },
)

export const EverySchedule = Type.Object(
  {
    every: StringEnum(EVERY_VALUES),
    at: Type.Optional(
      Type.String({
        pattern: '^([01][0-9]|2[0-3]):[0-5][0-9]$',
        description: 'HH:MM (24 h). daily/weekly: time of day (default 00:00); hourly: only MM is used; minute: ignored',
      }),
    ),
    dayOfWeek: Type.Optional(StringEnum(DAYS_OF_WEEK, { description: 'Required with every=weekly' })),
    timezone: Type.Optional(Timezone),
  },
  {
    additionalProperties: false,
    title: 'Convenience schedule',
    if: { properties: { every: { const: 'weekly' } }, required: ['every'] },
    // biome-ignore lint/suspicious/noThenProperty: the JSON Schema if/then keyword
    then: { required: ['dayOfWeek'] },
  },
)

export const Schedule = Type.Union([CronSchedule, EverySchedule], {
  description: 'Either { cron, timezone } or { every, at, dayOfWeek, timezone }; the server compiles the convenience form to a 5-field cron. Omit for an on-demand task.',
})

const ToolName = Type.String({
  minLength: 1,
  maxLength: FIELD_LIMITS.maxToolNameChars,
  pattern: '^[A-Za-z0-9][A-Za-z0-9._:/@-]*$',
  description: 'A first-party sibling name (urlshortener, cdn, forms, screenshot, inbox) or a marketplace capability id',
})

const Dependency = Type.String({
  minLength: 1,
  maxLength: FIELD_LIMITS.maxDependencyChars,
  pattern: '^(@[a-z0-9][a-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*(\\[[A-Za-z0-9._,-]+\\])?((==|>=|<=|~=|!=|>|<|@)[A-Za-z0-9.*^~<>=!,+_-]+)?$',
  description: 'Package name with an optional version spec: requests==2.32.3, numpy>=2, lodash@4.17.21, @scope/pkg@^1',
})

export const TaskEnv = Type.Record(Type.String({ pattern: FIELD_PATTERNS.envName }), Type.String({ maxLength: SCHEDULER_LIMITS.maxEnvValueChars }), {
  additionalProperties: false,
  maxProperties: SCHEDULER_LIMITS.maxEnvKeys,
  description: `Sandbox environment variables (at most ${SCHEDULER_LIMITS.maxEnvKeys}; names [A-Za-z_][A-Za-z0-9_]*, values up to ${SCHEDULER_LIMITS.maxEnvValueChars} characters); encrypted at rest, never echoed`,
})

export const LlmConfig = Type.Object(
  {
    profile: StringEnum(LLM_PROFILES, { description: 'Default reserve per run: quick 0.05 USD, standard 0.15 USD, bulk 0.15 USD' }),
    max_cost_usdc_micros_per_run: Type.Optional(MicrosInput({ minimum: 1, description: 'Lowers the per-run LLM reserve below the profile default (integer micros)' })),
  },
  { additionalProperties: false, description: 'Enables generate_text inside the task' },
)

export const ArtifactsConfig = Type.Object({ enabled: Type.Boolean({ description: 'true enables store_artifact' }) }, { additionalProperties: false })

const NotifyEmail = Type.String({ format: 'email', maxLength: FIELD_LIMITS.maxEmailChars, description: 'Receives a best-effort completion e-mail per scheduled or triggered run' })
const MaxRuntimeSec = Type.Number({ minimum: 1, maximum: SCHEDULER_LIMITS.maxRuntimeSec, description: `Per-run wall-clock cap in seconds, 1 to ${SCHEDULER_LIMITS.maxRuntimeSec}` })
const SiblingSpend = MicrosInput({
  description: 'Per-run ceiling on sibling and paid-capability spend, integer micros (JSON integer or digit string)',
})
const ToolList = (description: string) => Type.Array(ToolName, { maxItems: SCHEDULER_LIMITS.maxToolList, uniqueItems: true, description })

export const TaskCreateRequest = Type.Object(
  {
    schedule: Type.Optional(Schedule),
    runtime: StringEnum(RUNTIMES, { description: 'python (3.12) or node (22)' }),
    source: Type.String({ minLength: 1, maxLength: SCHEDULER_LIMITS.maxSourceChars, description: `Script text, at most ${SCHEDULER_LIMITS.maxSourceChars} characters` }),
    entrypoint: Type.String({
      minLength: 1,
      maxLength: FIELD_LIMITS.maxEntrypointChars,
      pattern: FIELD_PATTERNS.entrypoint,
      description: 'Filename the source is written to, e.g. main.py or index.js',
    }),
    max_runtime_sec: MaxRuntimeSec,
    max_sibling_calls: Type.Integer({
      minimum: 0,
      maximum: SCHEDULER_LIMITS.maxSiblingCalls,
      description: `Per-run cap on call(...) invocations, 0 to ${SCHEDULER_LIMITS.maxSiblingCalls}; 0 for a plain script`,
    }),
    max_amount_usdc_micros: Type.Integer({
      minimum: 1,
      maximum: MAX_SAFE_INTEGER,
      description:
        'Lifetime ceiling in micros (1 USDC = 1,000,000). Direct rail: refundable escrow, must equal X-Pay-Amount-Micros. Marketplace rail: non-refundable seller-local cap. Size it >= estimated_ceiling_micros x runs wanted',
    }),
    tool_list: Type.Optional(
      ToolList(
        `Allowlist of siblings and capability ids (at most ${SCHEDULER_LIMITS.maxToolList}). Unset with max_sibling_calls > 0 means open (then max_sibling_spend_micros is required); unset with 0 means deny-all`,
      ),
    ),
    max_sibling_spend_micros: Type.Optional(SiblingSpend),
    dependencies: Type.Optional(
      Type.Array(Dependency, {
        maxItems: SCHEDULER_LIMITS.maxDependencies,
        uniqueItems: true,
        description: `Packages not preinstalled (at most ${SCHEDULER_LIMITS.maxDependencies}); each adds to the per-run ceiling. Preinstalled: python ${PREINSTALLED.python.join(', ')}; node ${PREINSTALLED.node.join(', ')}`,
      }),
    ),
    env: Type.Optional(TaskEnv),
    notify_email: Type.Optional(NotifyEmail),
    end_at: Type.Optional(Type.String({ format: 'date-time', description: 'End of the schedule (RFC 3339)' })),
    llm: Type.Optional(LlmConfig),
    artifacts: Type.Optional(ArtifactsConfig),
  },
  {
    additionalProperties: false,
    // SPEC: max_sibling_spend_micros is required when tool_list is unset and max_sibling_calls > 0.
    if: {
      properties: { max_sibling_calls: { type: 'integer', minimum: 1 } },
      required: ['max_sibling_calls'],
      not: { required: ['tool_list'] },
    },
    // biome-ignore lint/suspicious/noThenProperty: the JSON Schema if/then keyword
    then: { required: ['max_sibling_spend_micros'] },
  },
)

export const TaskCreateHeaders = Type.Object({
  'idempotency-key': IdempotencyKey,
  'x-pay-amount-micros': Type.Optional(
    MicrosHeader({
      description:
        'Direct rail (required there): the escrow paid with this call; must equal max_amount_usdc_micros. Not needed on the marketplace rail (Authorization: Bearer <plan access token>)',
    }),
  ),
})

export const TaskFundHeaders = Type.Object({
  'idempotency-key': IdempotencyKey,
  'x-pay-amount-micros': Type.Optional(
    MicrosHeader({ description: 'Direct rail (required there): the top-up paid with this call; must equal top_up_amount_micros. Not needed on the marketplace rail' }),
  ),
})

export const TaskFundRequest = Type.Object(
  { top_up_amount_micros: MicrosInput({ minimum: 1, description: 'Top-up in integer micros; equals X-Pay-Amount-Micros' }) },
  { additionalProperties: false },
)

export const TaskCloneRequest = Type.Object(
  { task_id: Type.String({ minLength: 1, maxLength: FIELD_LIMITS.maxIdChars, pattern: FIELD_PATTERNS.id, description: 'Task to copy' }) },
  { additionalProperties: false },
)

/**
 * PATCH body. Deliberately open (no additionalProperties: false): immutable or unknown fields must
 * reach the handler, which answers IMMUTABLE_FIELD naming the field.
 */
export const TaskPatchRequest = Type.Object(
  {
    notify_email: Type.Optional(Nullable(NotifyEmail, { description: 'New address; null removes it' })),
    end_at: Type.Optional(Nullable(Type.String({ format: 'date-time' }), { description: 'New end of the schedule; null removes it' })),
    tool_list: Type.Optional(ToolList('New allowlist; must contain every current entry (additions only, else IMMUTABLE_TOOL_REMOVAL)')),
    max_sibling_spend_micros: Type.Optional(SiblingSpend),
    max_runtime_sec: Type.Optional(MaxRuntimeSec),
  },
  { minProperties: 1, description: 'Mutable fields only; anything else answers IMMUTABLE_FIELD' },
)

export const TaskEnvRequest = Type.Object({ env: TaskEnv }, { additionalProperties: false })

export const TaskIdParams = Type.Object(
  { id: Type.String({ minLength: 1, maxLength: FIELD_LIMITS.maxIdChars, pattern: FIELD_PATTERNS.id, description: 'Task id' }) },
  { additionalProperties: false },
)
export const RunIdParams = Type.Object(
  { id: Type.String({ minLength: 1, maxLength: FIELD_LIMITS.maxIdChars, pattern: FIELD_PATTERNS.id, description: 'Run id' }) },
  { additionalProperties: false },
)
export const KeyIdParams = Type.Object(
  { id: Type.String({ minLength: 1, maxLength: FIELD_LIMITS.maxIdChars, pattern: FIELD_PATTERNS.id, description: 'Account key id' }) },
  { additionalProperties: false },
)

// ---------------------------------------------------------------- responses

export const Rail = StringEnum(RAILS, {
  description: 'direct: refundable USDC escrow held by the scheduler; marketplace: marketplace access plus usage reporting, nothing refundable',
})

export const ScheduleView = Type.Object(
  {
    cron: Type.String({ description: 'Compiled 5-field cron' }),
    timezone: Type.String(),
    every: Type.Optional(StringEnum(EVERY_VALUES)),
    at: Type.Optional(Type.String()),
    dayOfWeek: Type.Optional(StringEnum(DAYS_OF_WEEK)),
  },
  { additionalProperties: false },
)

export const TaskCaps = Type.Object(
  {
    max_runtime_sec: Type.Number(),
    max_sibling_calls: Type.Integer({ minimum: 0 }),
    max_amount_usdc_micros: MicrosString(),
    max_sibling_spend_micros: Nullable(MicrosString()),
  },
  { additionalProperties: false },
)

export const RecoveryHint = Type.Object(
  {
    reason: StringEnum(['insufficient_funds', 'paused_manually'] as const),
    message: Type.String(),
    shortfall_micros: Type.Optional(MicrosString({ description: 'Missing amount to cover the next per-run ceiling' })),
    action: Type.String({ description: 'What to call, e.g. POST /api/v1/tasks/{id}/fund' }),
  },
  { additionalProperties: false },
)

export const Task = Type.Object(
  {
    id: Type.String(),
    status: StringEnum(TASK_STATES),
    rail: Rail,
    schedule: Nullable(ScheduleView, { description: 'null for an on-demand task' }),
    runtime: StringEnum(RUNTIMES),
    entrypoint: Type.String(),
    caps: TaskCaps,
    tool_list: Nullable(Type.Array(Type.String()), { description: 'null: open when max_sibling_calls > 0, else deny-all' }),
    dependencies: Type.Array(Type.String()),
    env_keys: Type.Optional(Type.Array(Type.String(), { description: 'Names of the env variables; values are never returned' })),
    notify_email: Nullable(Type.String()),
    end_at: Nullable(Timestamp),
    llm: Nullable(Type.Object({ profile: StringEnum(LLM_PROFILES), max_cost_usdc_micros_per_run: MicrosString() }, { additionalProperties: false })),
    artifacts: Type.Object({ enabled: Type.Boolean() }, { additionalProperties: false }),
    webhook_enabled: Type.Boolean(),
    next_run_at: Nullable(Timestamp, { description: 'null when nothing is scheduled' }),
    cumulative_cost_micros: MicrosString({ description: 'Lifetime cost so far' }),
    balance_micros: MicrosString({
      description:
        'max_amount_usdc_micros (plus top-ups) minus cumulative cost: the escrow (direct rail) or the remaining lifetime cap (marketplace rail). Direct rail: settled payments only',
    }),
    pending_payment_micros: Type.Optional(
      MicrosString({
        description:
          'Direct rail: payments into the escrow (create, top-ups) still settling on-chain; they join balance_micros once settled (runs that need them wait) and are never refunded unless they settle',
      }),
    ),
    estimated_ceiling_micros: MicrosString({ description: 'Per-run ceiling reserved before each run' }),
    recovery_hint: Type.Optional(RecoveryHint),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { additionalProperties: false },
)

/** The create body POST /api/v1/tasks/clone returns (env values masked), to edit and send as POST /api/v1/tasks. */
export const TaskCloneSpec = Type.Object(
  {
    schedule: Type.Optional(ScheduleView),
    runtime: StringEnum(RUNTIMES),
    source: Type.String(),
    entrypoint: Type.String(),
    max_runtime_sec: Type.Number(),
    max_sibling_calls: Type.Integer(),
    max_amount_usdc_micros: Type.Integer(),
    tool_list: Type.Optional(Type.Array(Type.String())),
    max_sibling_spend_micros: Type.Optional(MicrosString()),
    dependencies: Type.Optional(Type.Array(Type.String())),
    env: Type.Optional(Type.Record(Type.String(), Type.String(), { description: 'Keys kept, values masked as "***"; set real values before creating' })),
    notify_email: Type.Optional(Type.String()),
    end_at: Type.Optional(Type.String()),
    llm: Type.Optional(Type.Object({ profile: StringEnum(LLM_PROFILES), max_cost_usdc_micros_per_run: Type.Optional(MicrosString()) }, { additionalProperties: false })),
    artifacts: Type.Optional(Type.Object({ enabled: Type.Boolean() }, { additionalProperties: false })),
  },
  { additionalProperties: false, description: 'A body for POST /api/v1/tasks' },
)

export const TaskClone = Type.Object({ source_task_id: Type.String(), spec: TaskCloneSpec }, { additionalProperties: false })

export const TaskEnvResult = Type.Object({ task_id: Type.String(), env_keys: Type.Array(Type.String()), updated_at: Timestamp }, { additionalProperties: false })

export const WebhookSecret = Type.Object(
  {
    task_id: Type.String(),
    secret: Type.String({ pattern: '^whsec_', description: 'Shown once; send as Authorization: Bearer <secret>. Keep it server-side' }),
    webhook_url: Type.String(),
    created_at: Timestamp,
  },
  { additionalProperties: false },
)

export const WebhookDisabled = Type.Object({ task_id: Type.String(), webhook_enabled: Type.Literal(false) }, { additionalProperties: false })

export const RunSlim = Type.Object(
  {
    id: Type.String(),
    task_id: Type.String(),
    status: StringEnum(RUN_STATES),
    trigger: StringEnum(TRIGGER_TYPES),
    exit_code: Nullable(Type.Integer()),
    cost_micros: MicrosString(),
    created_at: Timestamp,
    started_at: Nullable(Timestamp),
    finished_at: Nullable(Timestamp),
  },
  { additionalProperties: false },
)

export const Run = Type.Object(
  {
    id: Type.String(),
    task_id: Type.String(),
    status: StringEnum(RUN_STATES),
    trigger: StringEnum(TRIGGER_TYPES),
    exit_code: Nullable(Type.Integer()),
    cost_micros: MicrosString(),
    created_at: Timestamp,
    started_at: Nullable(Timestamp),
    finished_at: Nullable(Timestamp),
    duration_ms: Nullable(Type.Integer({ minimum: 0 })),
    stdout: Type.String({ description: 'Captured stdout, truncated' }),
    stderr: Type.String({ description: 'Captured stderr, truncated' }),
    stdout_truncated: Type.Boolean(),
    stderr_truncated: Type.Boolean(),
    logs_url: Type.String({ description: 'Full logs' }),
    runtime_version: Nullable(Type.String({ description: 'The interpreter that really ran, e.g. "python 3.12.7" or "node 22.11.0"' })),
    error: Type.Optional(Type.String({ description: 'Why the run failed, when it did' })),
  },
  { additionalProperties: false },
)

export const RunList = Type.Object(
  { runs: Type.Array(RunSlim), next_cursor: Nullable(Type.String(), { description: 'Pass as ?cursor= for the next page; null on the last page' }) },
  { additionalProperties: false },
)

export const TriggerResult = Type.Object(
  {
    task_id: Type.String(),
    queued: Type.Boolean({ description: 'false when the task is not active (no-op)' }),
    status: StringEnum(TASK_STATES),
    next_run_at: Nullable(Timestamp),
  },
  { additionalProperties: false },
)

export const OwnerUsage = Type.Object(
  {
    owner: Type.String({ description: 'Wallet address' }),
    tasks: Type.Array(
      Type.Object(
        {
          task_id: Type.String(),
          status: StringEnum(TASK_STATES),
          rail: Rail,
          runs: Type.Integer({ minimum: 0 }),
          cumulative_cost_micros: MicrosString(),
          balance_micros: MicrosString(),
        },
        { additionalProperties: false },
      ),
    ),
    totals: Type.Object(
      {
        tasks: Type.Integer({ minimum: 0 }),
        runs: Type.Integer({ minimum: 0 }),
        cumulative_cost_micros: MicrosString(),
        balance_micros: MicrosString(),
        refunded_micros: MicrosString(),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
)

export const REFUND_STATES = ['confirmed', 'sending', 'retrying', 'after_run', 'after_payment', 'none'] as const

export const RefundOutlook = Type.Object(
  {
    state: StringEnum(REFUND_STATES, {
      description:
        'confirmed: sent, mined and final on-chain; sending: on its way; retrying: not sent yet (e.g. the refund wallet is short), retried until confirmed; after_run: sent when the run in flight finishes; after_payment: sent once a payment still settling is known and confirmed on-chain; none: nothing to refund (marketplace rail, dust, an empty escrow, or a payment the chain dropped for good)',
    }),
    amount_micros: MicrosString({ description: 'The refund; an estimate (a lower bound) when `estimated`' }),
    estimated: Type.Boolean(),
    tx_hash: Nullable(Type.String()),
    expected_by: Nullable(Timestamp, { description: 'When the refund is next attempted, or by when the run in flight must have finished' }),
    detail: Type.String(),
  },
  { additionalProperties: false },
)

export const LEDGER_KINDS = ['charge', 'refund', 'run_cost', 'dust_forfeit', 'reversal', 'usage'] as const

export const TaskLedger = Type.Object(
  {
    task_id: Type.String(),
    rail: Rail,
    rows: Type.Array(
      Type.Object(
        {
          id: Type.String(),
          kind: StringEnum(LEDGER_KINDS, {
            description:
              "direct: charge, refund, run_cost, dust_forfeit, reversal (a charge whose payment did not settle); marketplace (all audit only): charge (the lifetime cap and its raises), run_cost (a run against the cap), usage (the run's cost as reported on the marketplace meter)",
          }),
          amount_micros: SignedMicrosString({ description: 'Positive into escrow, negative out of it' }),
          tx_hash: Nullable(Type.String(), {
            description: 'On-chain transaction hash (direct rail): the settlement of a charge, the transfer of a refund once confirmed (until then see `refund`)',
          }),
          run_id: Nullable(Type.String()),
          created_at: Timestamp,
        },
        { additionalProperties: false },
      ),
    ),
    sum_micros: SignedMicrosString({
      description:
        'Direct rail: max_amount minus cumulative cost; 0 on a terminal task. Marketplace rail: the remaining lifetime cap (usage rows excluded, nothing is ever refunded)',
    }),
    authoritative: Type.Boolean({ description: 'false on the marketplace rail, where marketplace usage is authoritative' }),
    refund: Type.Optional(RefundOutlook),
  },
  { additionalProperties: false },
)

export const TaskDeleted = Type.Object(
  {
    id: Type.String(),
    status: Type.Literal('deleted'),
    rail: Rail,
    refunded_micros: MicrosString({ description: 'Direct rail: max_amount minus cumulative cost, refunded on-chain (confirmed); marketplace: 0' }),
    refund_tx_hash: Nullable(Type.String()),
    refund: Type.Optional(RefundOutlook),
    deleted_at: Timestamp,
  },
  { additionalProperties: false },
)

export const AccountKey = Type.Object(
  {
    id: Type.String(),
    prefix: Type.String(),
    created_at: Timestamp,
    revoked_at: Nullable(Timestamp),
    last_used_at: Nullable(Timestamp),
  },
  { additionalProperties: false },
)

export const Account = Type.Object(
  {
    id: Type.String(),
    plan: Type.String(),
    status: Type.String(),
    period: Type.Object({ start: Timestamp, end: Timestamp }, { additionalProperties: false }),
    credit_balance_micros: SignedMicrosString(),
    tasks_active: Type.Integer({ minimum: 0 }),
    runs_lifetime: Type.Integer({ minimum: 0 }),
    keys: Type.Array(AccountKey),
  },
  { additionalProperties: false },
)

export const AccountKeys = Type.Object({ keys: Type.Array(AccountKey) }, { additionalProperties: false })

export const AccountKeyCreated = Type.Object(
  {
    id: Type.String(),
    key: Type.String({ pattern: '^agk_', description: 'The API key, shown once; send as Authorization: Bearer <key>' }),
    prefix: Type.String(),
    account_id: Type.String(),
    created_at: Timestamp,
  },
  { additionalProperties: false },
)

export const AccountKeyRevoked = Type.Object({ id: Type.String(), revoked_at: Timestamp }, { additionalProperties: false })

export const AccountLedger = Type.Object(
  {
    rows: Type.Array(
      Type.Object(
        {
          id: Type.String(),
          kind: StringEnum(['grant', 'reversal', 'cost_finalize'] as const),
          amount_micros: SignedMicrosString(),
          task_id: Nullable(Type.String()),
          run_id: Nullable(Type.String()),
          created_at: Timestamp,
        },
        { additionalProperties: false },
      ),
      { description: 'Newest first' },
    ),
    next_cursor: Nullable(Type.String()),
  },
  { additionalProperties: false },
)

export const SchedulerIndex = Type.Object(
  {
    service: Type.Literal('scheduler'),
    version: Type.String(),
    runtimes: Type.Array(Type.String()),
    links: Type.Object({ openapi: Type.String(), llms: Type.String(), rates: Type.String(), siblings: Type.String() }, { additionalProperties: false }),
    operations: Type.Array(Type.Object({ method: Type.String(), path: Type.String(), summary: Type.String(), proof: Type.String() }, { additionalProperties: false })),
  },
  { additionalProperties: false },
)

const ProfileRate = Type.Object(
  {
    max_cost_usdc_micros_per_run: MicrosString({ description: 'Default LLM reserve per run' }),
    input_micros_per_million_tokens: MicrosString(),
    output_micros_per_million_tokens: MicrosString(),
  },
  { additionalProperties: false },
)

export const Rates = Type.Object(
  {
    currency: Type.Literal('USD'),
    sandbox_per_second_micros: MicrosString(),
    sibling_call_fee_micros: MicrosString({ description: 'Per-call sibling fee used in the ceiling (the most expensive first-party sibling)' }),
    siblings: Type.Record(Type.String(), Type.Object({ fee_micros: MicrosString() }, { additionalProperties: false })),
    dependency_install: Type.Object({ budget_sec_per_package: Type.Number({ minimum: 0 }), per_second_micros: MicrosString() }, { additionalProperties: false }),
    overhead_micros: MicrosString(),
    min_refund_micros: MicrosString({ description: 'Remainders below this are forfeited as dust instead of refunded' }),
    hard_caps: Type.Object(
      {
        max_runtime_sec: Type.Number(),
        max_sibling_calls: Type.Integer(),
        max_source_chars: Type.Integer(),
        max_source_bytes: Type.Integer(),
        max_dependencies: Type.Integer(),
        max_env_keys: Type.Integer(),
        max_env_value_chars: Type.Integer(),
        max_tool_list: Type.Integer(),
        max_consecutive_continuations: Type.Integer(),
        max_continuation_delay_sec: Type.Integer(),
        max_artifact_bytes: Type.Integer(),
        max_artifacts_per_run: Type.Integer(),
        max_artifact_bytes_per_run: Type.Integer(),
        max_output_bytes_in_run: Type.Integer(),
        max_log_bytes: Type.Integer(),
      },
      { additionalProperties: false },
    ),
    llm_profiles: Type.Object({ quick: ProfileRate, standard: ProfileRate, bulk: ProfileRate }, { additionalProperties: false }),
    formula: Type.String({ description: 'How estimated_ceiling_micros is computed' }),
  },
  { additionalProperties: false },
)

export const Siblings = Type.Object(
  {
    siblings: Type.Array(
      Type.Object(
        {
          name: StringEnum(SIBLINGS),
          description: Type.String(),
          fee_micros: MicrosString({ description: 'Flat per-call fee' }),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
)
