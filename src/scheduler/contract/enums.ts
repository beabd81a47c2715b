// The scheduler's vocabularies, each written once. The HTTP schemas (src/catalog/schemas/
// scheduler.ts), the Task/Run resource schemas (resources.ts, hence the CRDs), the domain (state
// machine, rate card, validation) and the controllers all take their values from here, so a value
// added in one place is accepted everywhere or the type check says where it is not.
//
// Two lifecycles are kept apart on purpose:
// - TASK_STATES / RUN_STATES are what the API shows and the ledger records (`status` fields,
//   snake_case, SPEC's words);
// - TASK_PHASES / RUN_PHASES are what the controllers write into the resources' status.phase
//   (Kubernetes style, PascalCase), which `kubectl get` shows.

/** Task `status` in the API and the database (SPEC "States and transitions"). */
export const TASK_STATES = ['active', 'paused_insufficient_funds', 'paused', 'completed', 'deleted', 'terminated'] as const
export type TaskState = (typeof TASK_STATES)[number]

/** Run `status` in the API and the database. */
export const RUN_STATES = ['queued', 'claimed', 'running', 'succeeded', 'failed', 'timed_out', 'cancelled', 'skipped'] as const
export type RunState = (typeof RUN_STATES)[number]

/** What started a run: the cron, "run now", POST /runs, the task's webhook, or a continuation. */
export const TRIGGER_TYPES = ['schedule', 'trigger', 'manual', 'webhook', 'continuation'] as const
export type TriggerType = (typeof TRIGGER_TYPES)[number]

/** Task resource status.phase. */
export const TASK_PHASES = ['Active', 'Suspended', 'OnDemand', 'Completed', 'Invalid'] as const
export type TaskPhase = (typeof TASK_PHASES)[number]

/** Run resource status.phase. */
export const RUN_PHASES = ['Pending', 'Queued', 'Running', 'Succeeded', 'Failed', 'Cancelled', 'TimedOut', 'Rejected'] as const
export type RunPhase = (typeof RUN_PHASES)[number]

/** Task resource spec.concurrencyPolicy: Forbid (absent) skips a due slot while a run is active. */
export const CONCURRENCY_POLICIES = ['Forbid', 'Allow'] as const
export type ConcurrencyPolicy = (typeof CONCURRENCY_POLICIES)[number]

/** Why a due slot created no run (Task resource status.lastSkipped.reason). */
export const SKIP_REASONS = ['ConcurrentRunActive', 'MissedStartingDeadline', 'TooManyMissedSlots'] as const
export type SkipReason = (typeof SKIP_REASONS)[number]

/** metav1.Condition status. */
export const CONDITION_STATUSES = ['True', 'False', 'Unknown'] as const
export type ConditionStatus = (typeof CONDITION_STATUSES)[number]

/** How one execution attempt ended (the executor port's answer, and what the ledger settles). */
export const EXECUTION_OUTCOMES = ['succeeded', 'failed', 'timed_out', 'cancelled', 'infra_error'] as const
export type ExecutionOutcome = (typeof EXECUTION_OUTCOMES)[number]

/** Script runtimes: python 3.12 or node 22. */
export const RUNTIMES = ['python', 'node'] as const
export type Runtime = (typeof RUNTIMES)[number]

/** How a task is paid: direct (refundable escrow) or marketplace (a lifetime cap, nothing refundable). */
export const RAILS = ['direct', 'marketplace'] as const
export type Rail = (typeof RAILS)[number]

/** generate_text reserve profiles (the rate card prices each). */
export const LLM_PROFILES = ['quick', 'standard', 'bulk'] as const
export type LlmProfileName = (typeof LLM_PROFILES)[number]

/** First-party siblings a task may call(...). */
export const SIBLINGS = ['urlshortener', 'cdn', 'forms', 'screenshot', 'inbox'] as const
export type SiblingName = (typeof SIBLINGS)[number]

/** The convenience schedule form's `every`. */
export const EVERY_VALUES = ['minute', 'hourly', 'daily', 'weekly'] as const
export type Every = (typeof EVERY_VALUES)[number]

/** The convenience schedule form's `dayOfWeek`. */
export const DAYS_OF_WEEK = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'] as const
export type DayOfWeekName = (typeof DAYS_OF_WEEK)[number]
