// The words of the Task/Run resources and the executor port, each written once. The API's
// vocabularies (task and run states, triggers, runtimes, rails, …) are the catalog's
// (src/catalog/schemas/scheduler-vocabulary.ts); index.ts re-exports both.
//
// Two lifecycles are kept apart on purpose:
// - TASK_STATES / RUN_STATES are what the API shows and the ledger records (`status` fields,
//   snake_case, SPEC's words);
// - TASK_PHASES / RUN_PHASES are what the controllers write into the resources' status.phase
//   (Kubernetes style, PascalCase), which `kubectl get` shows.

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
