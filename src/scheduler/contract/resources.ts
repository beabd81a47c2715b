// The Task and Run resources (group jobs.agent-gateway.dev, version v1alpha1): their spec and
// status, written ONCE as TypeBox schemas. The TypeScript types are their Static<> types; the CRDs'
// openAPIV3Schema is generated from the same schemas (controllers/kubernetes/crds.ts, written to
// crds/ and the chart by scripts/gen-crds.ts), so what the reconcilers read and write is exactly
// what the API server accepts: the server prunes any field not listed here.
//
// Rules:
// - no secret value in a resource: env is only `envSecretRef.name` (a Secret owned by the Task);
// - money is display only: decimal micros in a string (`costMicros`), never a number; Postgres holds
//   the truth;
// - no schema defaults: the reconciler owns them (absent suspend = false, concurrencyPolicy =
//   Forbid, its ReconcileOptions for the deadline and history limits), so a Task reads back exactly
//   as written on every ResourceStore backend, and a default can never override ReconcileOptions;
// - every string is bounded and every list has maxItems (the API server's CEL cost estimate needs
//   both);
// - the `x-kubernetes-validations` (CEL) rules: a Task's runtime/source/entrypoint are immutable
//   once set; a Run's spec is immutable except cancelRequested, which only goes false → true.
// The status fields written for display give `kubectl get` columns scalars to show: conditions,
// activeCount, lastRunName/lastRunPhase, lastSuccessfulTime, costMicros (Task); duration (Run).
import { Type, type SchemaOptions, type Static, type TUnsafe } from '@sinclair/typebox'
import { FIELD_LIMITS, FIELD_PATTERNS, SCHEDULER_LIMITS } from '../../catalog/schemas/scheduler-limits.ts'
import { RUNTIMES, TRIGGER_TYPES } from '../../catalog/schemas/scheduler-vocabulary.ts'
import { CONCURRENCY_POLICIES, CONDITION_STATUSES, RUN_PHASES, SKIP_REASONS, TASK_PHASES } from './enums.ts'
import type { Resource } from './ports.ts'

export const RESOURCE_GROUP = 'jobs.agent-gateway.dev'
export const RESOURCE_VERSION = 'v1alpha1'
/** apiVersion of every Task and Run. */
export const RESOURCE_API_VERSION = `${RESOURCE_GROUP}/${RESOURCE_VERSION}`
export const TASK_KIND = 'Task'
export const RUN_KIND = 'Run'

// ---------------------------------------------------------------- parts

/** A string enum as structural schemas write it ({ type: string, enum }), typed as its union. */
function Enum<const T extends readonly string[]>(values: T, options: SchemaOptions = {}): TUnsafe<T[number]> {
  return Type.Unsafe<T[number]>({ type: 'string', enum: [...values], ...options })
}

const DateTime = (description: string) => Type.String({ format: 'date-time', description })
const immutable = (what: string) => ({ 'x-kubernetes-validations': [{ rule: 'self == oldSelf', message: `${what} is immutable` }] })

/** DNS-1123 subdomain: names of Kubernetes objects (Tasks, Runs, Secrets). */
const ObjectName = Type.String({ minLength: 1, maxLength: 253, pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$' })
const Uid = Type.String({ maxLength: 64 })
const Micros = (description: string) => Type.String({ pattern: '^[0-9]{1,20}$', maxLength: 20, description })

/** metav1.Condition, as in k8s.io/apimachinery/pkg/apis/meta/v1 (same bounds). */
export const ConditionSchema = Type.Object({
  type: Type.String({ maxLength: 316, pattern: '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$' }),
  status: Enum(CONDITION_STATUSES),
  observedGeneration: Type.Optional(Type.Integer({ format: 'int64', minimum: 0 })),
  lastTransitionTime: DateTime('When the condition last changed status'),
  reason: Type.String({ minLength: 1, maxLength: 1024, pattern: '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$' }),
  message: Type.String({ maxLength: 32768 }),
})
export type Condition = Static<typeof ConditionSchema>

const Conditions = Type.Array(ConditionSchema, {
  maxItems: 16,
  'x-kubernetes-list-type': 'map',
  'x-kubernetes-list-map-keys': ['type'],
  description: 'metav1.Condition list, one per type (Task: Ready, Suspended; Run: Succeeded)',
})

const ObservedGeneration = Type.Integer({ format: 'int64', minimum: 0, description: 'metadata.generation the status was computed from' })

export const SkipRecordSchema = Type.Object({ slot: DateTime('The skipped slot'), reason: Enum(SKIP_REASONS) })
export type SkipRecord = Static<typeof SkipRecordSchema>

// ---------------------------------------------------------------- Task

export const TaskResourceSpecSchema = Type.Object(
  {
    schedule: Type.Optional(
      Type.Object(
        {
          cron: Type.String({ minLength: 1, maxLength: FIELD_LIMITS.maxCronChars, description: '5-field cron (or @daily-style macro), compiled by the scheduler API' }),
          timezone: Type.Optional(
            Type.String({ minLength: 1, maxLength: FIELD_LIMITS.maxTimezoneChars, pattern: FIELD_PATTERNS.timezone, description: 'IANA zone; UTC when absent' }),
          ),
        },
        { description: 'Absent = on-demand only' },
      ),
    ),
    suspend: Type.Optional(Type.Boolean({ description: 'User pause: no new runs; running ones are not touched (absent = false)' })),
    endAt: Type.Optional(DateTime('Inclusive: no slot after this instant; the task then completes')),
    startingDeadlineSeconds: Type.Optional(Type.Integer({ minimum: 0, maximum: 86400, description: 'A missed slot older than this is skipped (controller default 300)' })),
    concurrencyPolicy: Type.Optional(Enum(CONCURRENCY_POLICIES, { description: 'Forbid (when absent) skips a due slot while a run is active' })),
    successfulRunsHistoryLimit: Type.Optional(Type.Integer({ minimum: 0, maximum: 100, description: 'Finished successful Runs kept (controller default 3)' })),
    failedRunsHistoryLimit: Type.Optional(Type.Integer({ minimum: 0, maximum: 100, description: 'Finished failed Runs kept (controller default 1)' })),
    triggerRequestedAt: Type.Optional(DateTime('Set by the API for "run now": one run per distinct instant')),
    // What the executor needs (the API writes them; money and secrets stay in Postgres):
    taskId: Type.Optional(Type.String({ maxLength: 253, description: "The scheduler API's task id (= metadata.name)" })),
    owner: Type.Optional(Type.String({ maxLength: 128, description: 'Paying wallet, for display' })),
    runtime: Type.Optional(Enum(RUNTIMES, { description: 'python (3.12) or node (22)', ...immutable('runtime') })),
    entrypoint: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: FIELD_LIMITS.maxEntrypointChars,
        pattern: FIELD_PATTERNS.entrypoint,
        description: 'File name the source is written to',
        ...immutable('entrypoint'),
      }),
    ),
    source: Type.Optional(Type.String({ minLength: 1, maxLength: SCHEDULER_LIMITS.maxSourceChars, description: 'Script text', ...immutable('source') })),
    dependencies: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: FIELD_LIMITS.maxDependencyChars }), {
        maxItems: SCHEDULER_LIMITS.maxDependencies,
        'x-kubernetes-list-type': 'atomic',
        description: 'Packages installed before the script runs (requests==2.32.3, lodash@4)',
      }),
    ),
    maxRuntimeSec: Type.Optional(Type.Number({ minimum: 1, maximum: SCHEDULER_LIMITS.maxRuntimeSec, description: 'Per-run wall-clock cap (Job activeDeadlineSeconds)' })),
    envSecretRef: Type.Optional(Type.Object({ name: ObjectName }, { description: 'Secret (owned by the Task) holding the env values; never the values' })),
  },
  {
    'x-kubernetes-validations': [
      {
        rule: '(!has(oldSelf.runtime) || has(self.runtime)) && (!has(oldSelf.source) || has(self.source)) && (!has(oldSelf.entrypoint) || has(self.entrypoint))',
        message: 'runtime, source and entrypoint cannot be removed once set',
      },
      { rule: 'has(self.runtime) == has(self.source) && has(self.source) == has(self.entrypoint)', message: 'runtime, source and entrypoint are set together' },
      { rule: '!has(self.endAt) || has(self.schedule)', message: 'endAt needs a schedule' },
    ],
  },
)
/** A Task resource's spec: the schedule and what the executor needs (not the API's create body, see TaskCreateInput). */
export type TaskResourceSpec = Static<typeof TaskResourceSpecSchema>

export const TaskResourceStatusSchema = Type.Object({
  observedGeneration: Type.Optional(ObservedGeneration),
  /** `Ready` says whether the spec was accepted (False: InvalidSchedule). */
  conditions: Type.Optional(Conditions),
  phase: Type.Optional(Enum(TASK_PHASES)),
  lastScheduleTime: Type.Optional(DateTime('Latest slot handled (run created or skipped with a reason)')),
  nextRunAt: Type.Optional(DateTime('Next slot of the schedule')),
  active: Type.Optional(Type.Array(Type.String({ maxLength: 253 }), { maxItems: 1000, 'x-kubernetes-list-type': 'atomic', description: 'Names of unfinished Runs' })),
  activeCount: Type.Optional(Type.Integer({ minimum: 0, description: 'len(active), for printer columns' })),
  lastTriggerHandled: Type.Optional(DateTime('Latest spec.triggerRequestedAt acted upon')),
  lastSkipped: Type.Optional(SkipRecordSchema),
  missedSlots: Type.Optional(Type.Integer({ minimum: 0 })),
  message: Type.Optional(Type.String({ maxLength: 32768 })),
  // The latest finished run still kept and how it ended (LAST RUN column). Finished runs only: the
  // status is then written when the active list changes anyway, never for a run's progress.
  lastRunName: Type.Optional(Type.String({ maxLength: 253 })),
  lastRunPhase: Type.Optional(Enum(RUN_PHASES)),
  /** Kept when history limits delete that run. */
  lastSuccessfulTime: Type.Optional(DateTime('Completion time of the latest successful Run')),
  /** Written by the controller adapter from the ledger. */
  costMicros: Type.Optional(Micros('Display mirror of the total settled cost, decimal micros (Postgres is the source of truth)')),
})
/** A Task resource's status, written by the Task controller (not the API's task state, see TaskState). */
export type TaskResourceStatus = Static<typeof TaskResourceStatusSchema>

// ---------------------------------------------------------------- Run

export const RunResourceSpecSchema = Type.Object(
  {
    taskRef: Type.Object({ name: ObjectName, uid: Type.Optional(Uid), generation: Type.Optional(Type.Integer({ format: 'int64', minimum: 0 })) }, immutable('taskRef')),
    trigger: Type.Object({ type: Enum(TRIGGER_TYPES), scheduledTime: DateTime('The slot (or request instant) this run is for') }, immutable('trigger')),
    notBefore: Type.Optional(DateTime('Not started before this instant (continuations with a delay)')),
    /** Tekton-style cancellation: the executor stops the attempt and the cost is settled. */
    cancelRequested: Type.Optional(Type.Boolean({ description: 'Set to true to cancel; cannot be undone' })),
  },
  {
    'x-kubernetes-validations': [
      { rule: 'has(self.notBefore) == has(oldSelf.notBefore) && (!has(self.notBefore) || self.notBefore == oldSelf.notBefore)', message: 'notBefore is immutable' },
      { rule: '!has(oldSelf.cancelRequested) || !oldSelf.cancelRequested || (has(self.cancelRequested) && self.cancelRequested)', message: 'cancelRequested cannot be undone' },
    ],
  },
)
export type RunResourceSpec = Static<typeof RunResourceSpecSchema>

export const RunResourceStatusSchema = Type.Object({
  observedGeneration: Type.Optional(ObservedGeneration),
  conditions: Type.Optional(Conditions),
  phase: Type.Optional(Enum(RUN_PHASES)),
  startTime: Type.Optional(DateTime('When the attempt started running')),
  completionTime: Type.Optional(DateTime('When the run finished')),
  exitCode: Type.Optional(Type.Union([Type.Integer({ minimum: -255, maximum: 255 }), Type.Null()])),
  durationMs: Type.Optional(Type.Integer({ minimum: 0, description: 'Program phase duration in milliseconds' })),
  duration: Type.Optional(Type.String({ maxLength: 32, description: 'durationMs for display (formatDuration), e.g. 1m23s' })),
  /** Never the source of truth. */
  costMicros: Type.Optional(Micros('Display mirror of the cost settled in Postgres, decimal micros')),
  reason: Type.Optional(Type.String({ maxLength: 1024, description: 'Why the run ended as it did (InsufficientFunds, ImagePullFailed, …)' })),
  message: Type.Optional(Type.String({ maxLength: 32768 })),
  jobName: Type.Optional(Type.String({ maxLength: 253, description: 'The Job of the current attempt' })),
})
export type RunResourceStatus = Static<typeof RunResourceStatusSchema>

export type TaskResource = Resource<TaskResourceSpec, TaskResourceStatus>
export type RunResource = Resource<RunResourceSpec, RunResourceStatus>

/** Run status.duration (the Duration column) from durationMs: 850ms, 12s, 1m23s, 2h5m. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return ''
  if (ms < 1000) return `${Math.round(ms)}ms`
  const totalSeconds = Math.floor(ms / 1000)
  const hours = Math.floor(totalSeconds / 3600)
  const minutes = Math.floor((totalSeconds % 3600) / 60)
  const seconds = totalSeconds % 60
  if (hours > 0) return `${hours}h${minutes}m`
  if (minutes > 0) return `${minutes}m${seconds}s`
  return `${seconds}s`
}
