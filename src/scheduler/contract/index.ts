// The scheduling contract: what the scheduler API, its domain and the controllers agree on, defined
// once. It imports nothing of the scheduler outside itself (only src/platform, the catalog's
// scheduler vocabularies, which are leaves, and packages: TypeBox, cron-parser), so the
// controllers depend on it and on no other part of src/scheduler
// (test/unit/import-boundaries.test.ts holds these rules):
// - the API's vocabularies (task and run states, triggers, runtimes, …), bounds (source size,
//   runtime cap, dependency count, field lengths and syntax) and what each runtime offers
//   (preinstalled libraries, entrypoint endings), re-exported from the catalog, which states the
//   API (src/catalog/schemas/scheduler-{vocabulary,limits,runtimes}.ts);
// - enums.ts: the resources' own words (status phases, conditions, skip reasons, outcomes);
// - resources.ts: the Task and Run resources as TypeBox schemas, their types, and the names the
//   CRDs are generated under;
// - schedule.ts: what a schedule means (compiling, slots, Run names);
// - ports.ts: the ResourceStore, RunExecutor and RunLedger ports and the store's errors.
export { FIELD_LIMITS, FIELD_PATTERNS, SCHEDULER_LIMITS } from '../../catalog/schemas/scheduler-limits.ts'
export { ENTRYPOINT_EXTENSIONS, PREINSTALLED } from '../../catalog/schemas/scheduler-runtimes.ts'
export {
  DAYS_OF_WEEK,
  EVERY_VALUES,
  LLM_PROFILES,
  RAILS,
  RUN_STATES,
  RUNTIMES,
  SIBLINGS,
  TASK_STATES,
  TRIGGER_TYPES,
  type DayOfWeekName,
  type Every,
  type LlmProfileName,
  type Rail,
  type RunState,
  type Runtime,
  type SiblingName,
  type TaskState,
  type TriggerType,
} from '../../catalog/schemas/scheduler-vocabulary.ts'
export {
  CONCURRENCY_POLICIES,
  CONDITION_STATUSES,
  EXECUTION_OUTCOMES,
  RUN_PHASES,
  SKIP_REASONS,
  TASK_PHASES,
  type ConcurrencyPolicy,
  type ConditionStatus,
  type ExecutionOutcome,
  type RunPhase,
  type SkipReason,
  type TaskPhase,
} from './enums.ts'
export {
  ConditionSchema,
  formatDuration,
  RESOURCE_API_VERSION,
  RESOURCE_GROUP,
  RESOURCE_VERSION,
  RUN_KIND,
  RunResourceSpecSchema,
  RunResourceStatusSchema,
  SkipRecordSchema,
  TASK_KIND,
  TaskResourceSpecSchema,
  TaskResourceStatusSchema,
  type Condition,
  type RunResource,
  type RunResourceSpec,
  type RunResourceStatus,
  type SkipRecord,
  type TaskResource,
  type TaskResourceSpec,
  type TaskResourceStatus,
} from './resources.ts'
export {
  compileSchedule,
  DEFAULT_TIMEZONE,
  latestSlotBetween,
  MAX_SLOTS_PER_CALL,
  nextSlot,
  nextSlots,
  normalizeTimezone,
  slotName,
  slotsBetween,
  slotStamp,
  type CompiledSchedule,
  type ScheduleInput,
} from './schedule.ts'
export {
  ConflictError,
  GoneError,
  isAlreadyExists,
  isConflict,
  NotFoundError,
  objectKey,
  splitKey,
  type AnyResource,
  type ConflictReason,
  type ExecutionRequest,
  type ExecutionResult,
  noAttemptResult,
  type FieldSelector,
  type ListOptions,
  type ListResult,
  type NewResource,
  type ObjectMeta,
  type HeldVersions,
  type OwnerReference,
  type PreparedRequest,
  type Resource,
  type ResourceKind,
  type ResourceStore,
  type RunExecutor,
  type RunLedger,
  type SettledRun,
  type WatchEvent,
  type WatchEventType,
  type WatchOptions,
} from './ports.ts'
