// The Task and Run CustomResourceDefinitions: the ONE source of truth. scripts/gen-crds.ts writes
// them to crds/ and charts/agent-gateway/crds/; test/unit/crds.test.ts fails when those copies
// drift, and test/helpers/fake-kube-apiserver.ts serves exactly these objects.
//
// The shapes are TaskSpec/TaskStatus and RunSpec/RunStatus of controllers/task-reconciler.ts,
// field by field (no x-kubernetes-preserve-unknown-fields: the API server prunes anything not
// listed here), including the status fields written for display, so `kubectl get` columns have
// scalars to show: conditions (metav1.Condition), activeCount, lastRunName/lastRunPhase,
// lastSuccessfulTime, costMicros (Task) and observedGeneration, conditions, duration (Run).
//
// Rules:
// - no secret value in a CR: env is only `envSecretRef.name` (a Secret owned by the Task);
// - money is display-only: decimal micros in a string (`costMicros`), never a number;
// - no CRD defaults: the reconciler owns them (absent suspend = false, concurrencyPolicy = Forbid,
//   ReconcileOptions for the deadline and history limits), so a Task reads back exactly as written
//   on every ResourceStore backend, and a CRD default can never override ReconcileOptions;
// - CEL: Task runtime/source/entrypoint immutable once set; Run spec immutable except
//   cancelRequested, which can only go false → true.
import { stringify } from 'yaml'
import { RUNTIMES, SCHEDULER_LIMITS } from '../../src/catalog/schemas/scheduler.ts'

export const CRD_GROUP = 'jobs.agent-gateway.dev'
export const CRD_VERSION = 'v1alpha1'
export const CRD_API_VERSION = `${CRD_GROUP}/${CRD_VERSION}`
export const CRD_CATEGORY = 'agent-gateway'
export const TASK_PLURAL = 'tasks'
export const RUN_PLURAL = 'runs'
export const TASK_KIND = 'Task'
export const RUN_KIND = 'Run'
export const TASK_SHORT_NAMES = ['agtask'] as const
export const RUN_SHORT_NAMES = ['agrun'] as const

export const TASK_PHASES = ['Active', 'Suspended', 'OnDemand', 'Completed', 'Invalid'] as const
export const RUN_PHASES = ['Pending', 'Queued', 'Running', 'Succeeded', 'Failed', 'Cancelled', 'TimedOut', 'Rejected'] as const
export const TRIGGER_TYPES = ['schedule', 'trigger', 'manual', 'webhook', 'continuation'] as const
export const CONCURRENCY_POLICIES = ['Forbid', 'Allow'] as const
export const SKIP_REASONS = ['ConcurrentRunActive', 'MissedStartingDeadline', 'TooManyMissedSlots'] as const

/** A JSON Schema node of a structural CRD schema (apiextensions.k8s.io/v1 JSONSchemaProps). */
export type SchemaNode = { [keyword: string]: unknown }

// ---------------------------------------------------------------- schema builders

const string = (extra: SchemaNode = {}): SchemaNode => ({ type: 'string', ...extra })
const integer = (extra: SchemaNode = {}): SchemaNode => ({ type: 'integer', ...extra })
const boolean = (extra: SchemaNode = {}): SchemaNode => ({ type: 'boolean', ...extra })
const dateTime = (description: string): SchemaNode => string({ format: 'date-time', description })
const enumOf = (values: readonly string[], extra: SchemaNode = {}): SchemaNode => string({ enum: [...values], ...extra })
const object = (properties: Record<string, SchemaNode>, extra: SchemaNode = {}): SchemaNode => ({ type: 'object', properties, ...extra })
const array = (items: SchemaNode, extra: SchemaNode = {}): SchemaNode => ({ type: 'array', items, ...extra })
const immutable = (what: string): SchemaNode => ({ 'x-kubernetes-validations': [{ rule: 'self == oldSelf', message: `${what} is immutable` }] })

/** DNS-1123 subdomain: names of Kubernetes objects (Tasks, Runs, Secrets). */
const OBJECT_NAME = string({ minLength: 1, maxLength: 253, pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$' })
const UID = string({ maxLength: 64 })
const MICROS = (description: string): SchemaNode => string({ pattern: '^[0-9]{1,20}$', maxLength: 20, description })

/** metav1.Condition, as in k8s.io/apimachinery/pkg/apis/meta/v1 (same bounds). */
const CONDITION = object(
  {
    type: string({ maxLength: 316, pattern: '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$' }),
    status: enumOf(['True', 'False', 'Unknown']),
    observedGeneration: integer({ format: 'int64', minimum: 0 }),
    lastTransitionTime: dateTime('When the condition last changed status'),
    reason: string({ minLength: 1, maxLength: 1024, pattern: '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$' }),
    message: string({ maxLength: 32768 }),
  },
  { required: ['type', 'status', 'lastTransitionTime', 'reason', 'message'] },
)

const CONDITIONS = array(CONDITION, {
  maxItems: 16,
  'x-kubernetes-list-type': 'map',
  'x-kubernetes-list-map-keys': ['type'],
  description: 'metav1.Condition list, one per type (Task: Ready, Suspended; Run: Succeeded)',
})

const OBSERVED_GENERATION = integer({ format: 'int64', minimum: 0, description: 'metadata.generation the status was computed from' })

// ---------------------------------------------------------------- Task

const TASK_SPEC = object(
  {
    schedule: object(
      {
        cron: string({ minLength: 1, maxLength: 120, description: '5-field cron (or @daily-style macro), compiled by the scheduler API' }),
        timezone: string({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2}$', description: 'IANA zone; UTC when absent' }),
      },
      { required: ['cron'], description: 'Absent = on-demand only' },
    ),
    suspend: boolean({ description: 'User pause: no new runs; running ones are not touched (absent = false)' }),
    endAt: dateTime('Inclusive: no slot after this instant; the task then completes'),
    startingDeadlineSeconds: integer({ minimum: 0, maximum: 86400, description: 'A missed slot older than this is skipped (controller default 300)' }),
    concurrencyPolicy: enumOf(CONCURRENCY_POLICIES, { description: 'Forbid (when absent) skips a due slot while a run is active' }),
    successfulRunsHistoryLimit: integer({ minimum: 0, maximum: 100, description: 'Finished successful Runs kept (controller default 3)' }),
    failedRunsHistoryLimit: integer({ minimum: 0, maximum: 100, description: 'Finished failed Runs kept (controller default 1)' }),
    triggerRequestedAt: dateTime('Set by the API for "run now": one run per distinct instant'),
    taskId: string({ maxLength: 253, description: "The scheduler API's task id (= metadata.name)" }),
    owner: string({ maxLength: 128, description: 'Paying wallet, for display' }),
    runtime: enumOf(RUNTIMES, { description: 'python (3.12) or node (22)', ...immutable('runtime') }),
    entrypoint: string({ minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9_][A-Za-z0-9._-]*$', description: 'File name the source is written to', ...immutable('entrypoint') }),
    source: string({ minLength: 1, maxLength: SCHEDULER_LIMITS.maxSourceChars, description: 'Script text', ...immutable('source') }),
    dependencies: array(string({ minLength: 1, maxLength: 214 }), {
      maxItems: SCHEDULER_LIMITS.maxDependencies,
      'x-kubernetes-list-type': 'atomic',
      description: 'Packages installed before the script runs (requests==2.32.3, lodash@4)',
    }),
    maxRuntimeSec: { type: 'number', minimum: 1, maximum: SCHEDULER_LIMITS.maxRuntimeSec, description: 'Per-run wall-clock cap (Job activeDeadlineSeconds)' },
    envSecretRef: object({ name: OBJECT_NAME }, { required: ['name'], description: 'Secret (owned by the Task) holding the env values; never the values' }),
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

const TASK_STATUS = object({
  observedGeneration: OBSERVED_GENERATION,
  conditions: CONDITIONS,
  phase: enumOf(TASK_PHASES),
  lastScheduleTime: dateTime('Latest slot handled (run created or skipped with a reason)'),
  nextRunAt: dateTime('Next slot of the schedule'),
  active: array(string({ maxLength: 253 }), { maxItems: 1000, 'x-kubernetes-list-type': 'atomic', description: 'Names of unfinished Runs' }),
  activeCount: integer({ minimum: 0, description: 'len(active), for printer columns' }),
  lastTriggerHandled: dateTime('Latest spec.triggerRequestedAt acted upon'),
  lastSkipped: object(
    { slot: dateTime('The skipped slot'), reason: enumOf(SKIP_REASONS) },
    { required: ['slot', 'reason'] },
  ),
  missedSlots: integer({ minimum: 0 }),
  message: string({ maxLength: 32768 }),
  lastRunName: string({ maxLength: 253 }),
  lastRunPhase: enumOf(RUN_PHASES),
  lastSuccessfulTime: dateTime('Completion time of the latest successful Run'),
  costMicros: MICROS('Display mirror of the total settled cost, decimal micros (Postgres is the source of truth)'),
})

// ---------------------------------------------------------------- Run

const RUN_SPEC = object(
  {
    taskRef: object(
      { name: OBJECT_NAME, uid: UID, generation: integer({ format: 'int64', minimum: 0 }) },
      { required: ['name'], ...immutable('taskRef') },
    ),
    trigger: object(
      { type: enumOf(TRIGGER_TYPES), scheduledTime: dateTime('The slot (or request instant) this run is for') },
      { required: ['type', 'scheduledTime'], ...immutable('trigger') },
    ),
    notBefore: dateTime('Not started before this instant (continuations with a delay)'),
    cancelRequested: boolean({ description: 'Set to true to cancel; cannot be undone' }),
  },
  {
    required: ['taskRef', 'trigger'],
    'x-kubernetes-validations': [
      { rule: 'has(self.notBefore) == has(oldSelf.notBefore) && (!has(self.notBefore) || self.notBefore == oldSelf.notBefore)', message: 'notBefore is immutable' },
      { rule: '!has(oldSelf.cancelRequested) || !oldSelf.cancelRequested || (has(self.cancelRequested) && self.cancelRequested)', message: 'cancelRequested cannot be undone' },
    ],
  },
)

const RUN_STATUS = object({
  observedGeneration: OBSERVED_GENERATION,
  conditions: CONDITIONS,
  phase: enumOf(RUN_PHASES),
  startTime: dateTime('When the attempt started running'),
  completionTime: dateTime('When the run finished'),
  exitCode: integer({ nullable: true, minimum: -255, maximum: 255 }),
  durationMs: integer({ minimum: 0, description: 'Program phase duration in milliseconds' }),
  duration: string({ maxLength: 32, description: 'durationMs for display (formatDuration), e.g. 1m23s' }),
  costMicros: MICROS('Display mirror of the cost settled in Postgres, decimal micros'),
  reason: string({ maxLength: 1024, description: 'Why the run ended as it did (InsufficientFunds, ImagePullFailed, …)' }),
  message: string({ maxLength: 32768 }),
  jobName: string({ maxLength: 253, description: 'The Job of the current attempt' }),
})

// ---------------------------------------------------------------- CRDs

const METADATA = { type: 'object' }

function rootSchema(kind: string, spec: SchemaNode, status: SchemaNode): SchemaNode {
  return object(
    {
      apiVersion: string(),
      kind: string(),
      metadata: METADATA,
      spec,
      status,
    },
    { required: ['spec'], description: `${kind} of the Agent Gateway scheduler` },
  )
}

export interface PrinterColumn {
  name: string
  type: 'string' | 'integer' | 'number' | 'boolean' | 'date'
  jsonPath: string
  description?: string
  priority?: number
  format?: string
}

const AGE: PrinterColumn = { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' }

export const TASK_PRINTER_COLUMNS: readonly PrinterColumn[] = [
  { name: 'Schedule', type: 'string', jsonPath: '.spec.schedule.cron' },
  { name: 'Suspended', type: 'boolean', jsonPath: '.spec.suspend' },
  { name: 'Ready', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
  { name: 'Active', type: 'integer', jsonPath: '.status.activeCount' },
  { name: 'Last Run', type: 'string', jsonPath: '.status.lastRunPhase' },
  { name: 'Last Schedule', type: 'date', jsonPath: '.status.lastScheduleTime' },
  // A future instant as type date would print <invalid>, so it is shown as written.
  { name: 'Next Run', type: 'string', jsonPath: '.status.nextRunAt' },
  { name: 'Cost', type: 'string', jsonPath: '.status.costMicros', description: 'Total settled cost, micros' },
  AGE,
  { name: 'Phase', type: 'string', jsonPath: '.status.phase', priority: 1 },
  { name: 'Runtime', type: 'string', jsonPath: '.spec.runtime', priority: 1 },
  { name: 'Last Run Name', type: 'string', jsonPath: '.status.lastRunName', priority: 1 },
  { name: 'Owner', type: 'string', jsonPath: '.spec.owner', priority: 1 },
]

export const RUN_PRINTER_COLUMNS: readonly PrinterColumn[] = [
  { name: 'Task', type: 'string', jsonPath: '.spec.taskRef.name' },
  { name: 'Trigger', type: 'string', jsonPath: '.spec.trigger.type' },
  { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
  { name: 'Started', type: 'date', jsonPath: '.status.startTime' },
  { name: 'Duration', type: 'string', jsonPath: '.status.duration' },
  { name: 'Cost', type: 'string', jsonPath: '.status.costMicros', description: 'Settled cost, micros' },
  AGE,
  { name: 'Reason', type: 'string', jsonPath: '.status.reason', priority: 1 },
  { name: 'Exit', type: 'integer', jsonPath: '.status.exitCode', priority: 1 },
  { name: 'Job', type: 'string', jsonPath: '.status.jobName', priority: 1 },
]

interface CrdInput {
  kind: string
  plural: string
  shortNames: readonly string[]
  spec: SchemaNode
  status: SchemaNode
  columns: readonly PrinterColumn[]
  selectableFields: readonly string[]
}

function crd(input: CrdInput): CustomResourceDefinition {
  const singular = input.kind.toLowerCase()
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: {
      name: `${input.plural}.${CRD_GROUP}`,
      labels: { 'app.kubernetes.io/name': 'agent-gateway', 'app.kubernetes.io/part-of': 'agent-gateway' },
    },
    spec: {
      group: CRD_GROUP,
      scope: 'Namespaced',
      names: {
        kind: input.kind,
        listKind: `${input.kind}List`,
        plural: input.plural,
        singular,
        shortNames: [...input.shortNames],
        categories: [CRD_CATEGORY],
      },
      versions: [
        {
          name: CRD_VERSION,
          served: true,
          storage: true,
          schema: { openAPIV3Schema: rootSchema(input.kind, input.spec, input.status) },
          subresources: { status: {} },
          additionalPrinterColumns: input.columns.map((column) => ({ ...column })),
          selectableFields: input.selectableFields.map((jsonPath) => ({ jsonPath })),
        },
      ],
    },
  }
}

/** The subset of apiextensions.k8s.io/v1 CustomResourceDefinition these CRDs use. */
export interface CustomResourceDefinition {
  apiVersion: 'apiextensions.k8s.io/v1'
  kind: 'CustomResourceDefinition'
  metadata: { name: string; labels?: Record<string, string> }
  spec: {
    group: string
    scope: 'Namespaced' | 'Cluster'
    names: { kind: string; listKind: string; plural: string; singular: string; shortNames?: string[]; categories?: string[] }
    versions: Array<{
      name: string
      served: boolean
      storage: boolean
      schema: { openAPIV3Schema: SchemaNode }
      subresources?: { status?: Record<string, never> }
      additionalPrinterColumns?: PrinterColumn[]
      selectableFields?: Array<{ jsonPath: string }>
    }>
  }
}

export const TASK_CRD: CustomResourceDefinition = crd({
  kind: TASK_KIND,
  plural: TASK_PLURAL,
  shortNames: TASK_SHORT_NAMES,
  spec: TASK_SPEC,
  status: TASK_STATUS,
  columns: TASK_PRINTER_COLUMNS,
  selectableFields: ['.spec.runtime', '.spec.owner', '.status.phase'],
})

export const RUN_CRD: CustomResourceDefinition = crd({
  kind: RUN_KIND,
  plural: RUN_PLURAL,
  shortNames: RUN_SHORT_NAMES,
  spec: RUN_SPEC,
  status: RUN_STATUS,
  columns: RUN_PRINTER_COLUMNS,
  selectableFields: ['.spec.taskRef.name', '.spec.trigger.type', '.status.phase'],
})

export const CRDS: readonly CustomResourceDefinition[] = [TASK_CRD, RUN_CRD]

const YAML_HEADER = '# Generated by scripts/gen-crds.ts from controllers/kubernetes/crds.ts; do not edit.\n'

/** One CRD as a YAML document (what crds/<name>.yaml holds). */
export function renderCrdYaml(definition: CustomResourceDefinition): string {
  return YAML_HEADER + stringify(definition, { lineWidth: 0, aliasDuplicateObjects: false })
}

/** Both CRDs as one multi-document YAML stream. */
export function renderCrdsYaml(): string {
  return YAML_HEADER + CRDS.map((definition) => stringify(definition, { lineWidth: 0, aliasDuplicateObjects: false })).join('---\n')
}

/** `crds/<plural>.<group>.yaml` file name → content, for the generator and the drift test. */
export function crdFiles(): Map<string, string> {
  return new Map(CRDS.map((definition) => [`${definition.metadata.name}.yaml`, renderCrdYaml(definition)]))
}

/** status.duration for display: 850ms, 12s, 1m23s, 2h5m. */
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
