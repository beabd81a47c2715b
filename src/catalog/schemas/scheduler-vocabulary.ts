// The scheduler API's vocabularies, each written once. The HTTP schemas (scheduler.ts), the
// Task/Run resources and the schedule (src/scheduler/contract re-exports them), the domain (state
// machine, rate card, validation) and the controllers all take their values from here, so a value
// added here is accepted everywhere or the type check says where it is not. The catalog owns them
// because it states the API and depends on no domain module; the resources' own words (status
// phases, conditions, skip reasons) are the contract's (src/scheduler/contract/enums.ts).

/** Task `status` in the API and the database (SPEC "States and transitions"). */
export const TASK_STATES = ['active', 'paused_insufficient_funds', 'paused', 'completed', 'deleted', 'terminated'] as const
export type TaskState = (typeof TASK_STATES)[number]

/** Run `status` in the API and the database. */
export const RUN_STATES = ['queued', 'claimed', 'running', 'succeeded', 'failed', 'timed_out', 'cancelled', 'skipped'] as const
export type RunState = (typeof RUN_STATES)[number]

/** What started a run: the cron, "run now", POST /runs, the task's webhook, or a continuation. */
export const TRIGGER_TYPES = ['schedule', 'trigger', 'manual', 'webhook', 'continuation'] as const
export type TriggerType = (typeof TRIGGER_TYPES)[number]

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
