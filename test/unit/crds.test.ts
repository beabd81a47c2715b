// The Task/Run CRDs (controllers/kubernetes/crds.ts): checked-in copies equal the generated ones,
// each is a valid apiextensions.k8s.io/v1 CustomResourceDefinition with a structural schema, the
// schemas accept what the reconciler's types allow and reject what the API server must refuse,
// and every CEL rule / printer column is one the fake API server evaluates.
import { readFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Ajv, type ValidateFunction } from 'ajv'
import addFormatsModule from 'ajv-formats'
import { CustomResourceDefinition as CrdModel } from 'kubernetes-models/apiextensions.k8s.io/v1/CustomResourceDefinition'
import t from 'tap'
import { parseAllDocuments } from 'yaml'
import { CRD_GROUP, CRDS, crdFiles, renderCrdsYaml, RUN_CRD, TASK_CRD, type CustomResourceDefinition, type SchemaNode } from '../../controllers/kubernetes/crds.ts'
import {
  SCHEDULER_LIMITS,
  type RunResourceSpec as RunSpec,
  type RunResourceStatus as RunStatus,
  type TaskResourceSpec as TaskSpec,
  type TaskResourceStatus as TaskStatus,
} from '../../src/scheduler/contract/index.ts'
import { evaluateJsonPath, parseCel, parseJsonPath } from '../helpers/fake-kube-apiserver.ts'
import { formatDuration } from '../../src/scheduler/contract/index.ts'

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv
const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..')

/** The named (non-index-signature) keys of a type: TaskSpec etc. also allow `[extra: string]`. */
type KnownKeys<T> = keyof { [K in keyof T as string extends K ? never : number extends K ? never : K]: T[K] }
type Full<T> = Required<Pick<T, KnownKeys<T>>>

// One value for every field of the reconciler's types: adding a field there breaks the type check
// here until it is added, and then the test below fails until the CRD lists it.
const FULL_TASK_SPEC: Full<TaskSpec> = {
  schedule: { cron: '*/15 * * * *', timezone: 'Europe/Berlin' },
  suspend: false,
  endAt: '2027-01-01T00:00:00Z',
  startingDeadlineSeconds: 300,
  concurrencyPolicy: 'Allow',
  successfulRunsHistoryLimit: 3,
  failedRunsHistoryLimit: 1,
  triggerRequestedAt: '2026-11-24T12:00:00Z',
  taskId: 'nightly',
  owner: '0x1111111111111111111111111111111111111111',
  runtime: 'node',
  entrypoint: 'index.js',
  source: 'console.log(1)',
  dependencies: ['lodash@4.17.21'],
  maxRuntimeSec: 600,
  envSecretRef: { name: 'nightly-env' },
}
const FULL_TASK_STATUS: Full<TaskStatus> = {
  phase: 'Active',
  observedGeneration: 2,
  lastScheduleTime: '2026-11-24T12:00:00Z',
  nextRunAt: '2026-11-24T12:15:00Z',
  active: ['nightly-202611241200'],
  lastTriggerHandled: '2026-11-24T11:00:00Z',
  lastSkipped: { slot: '2026-11-24T11:45:00Z', reason: 'ConcurrentRunActive' },
  missedSlots: 2,
  message: 'ok',
  activeCount: 1,
  lastRunName: 'nightly-202611241145',
  lastRunPhase: 'Failed',
  lastSuccessfulTime: '2026-11-24T11:30:42Z',
  costMicros: '5400',
  conditions: [{ type: 'Ready', status: 'True', reason: 'Active', message: 'task is active', observedGeneration: 2, lastTransitionTime: '2026-11-24T11:00:00Z' }],
}
const FULL_RUN_SPEC: Full<RunSpec> = {
  taskRef: { name: 'nightly', uid: '0d7c5ad0-0000-4000-8000-000000000000', generation: 2 },
  trigger: { type: 'continuation', scheduledTime: '2026-11-24T12:00:00Z' },
  notBefore: '2026-11-24T12:05:00Z',
  cancelRequested: false,
}
const FULL_RUN_STATUS: Full<RunStatus> = {
  phase: 'Succeeded',
  startTime: '2026-11-24T12:00:01Z',
  completionTime: '2026-11-24T12:01:24Z',
  exitCode: 0,
  durationMs: 83000,
  costMicros: '1200',
  reason: 'Completed',
  message: 'done',
  jobName: 'nightly-202611241200-a1',
  observedGeneration: 1,
  conditions: [{ type: 'Succeeded', status: 'True', reason: 'Completed', message: '', lastTransitionTime: '2026-11-24T12:01:24Z' }],
  duration: '1m23s',
}
const CONDITION = { type: 'Ready', status: 'True', observedGeneration: 2, lastTransitionTime: '2026-11-24T12:00:00Z', reason: 'Scheduled', message: '' }

const schemaOf = (crd: CustomResourceDefinition): SchemaNode => (crd.spec.versions[0] as CustomResourceDefinition['spec']['versions'][number]).schema.openAPIV3Schema
const validator = (crd: CustomResourceDefinition): ValidateFunction => {
  // Non-strict: ajv then ignores the x-kubernetes-* keywords, which only the API server evaluates.
  const ajv = new Ajv({ strict: false, allErrors: true, formats: { int64: true } })
  addFormats(ajv)
  return ajv.compile(schemaOf(crd))
}
const task = (spec: object, status?: object) => ({ apiVersion: `${CRD_GROUP}/v1alpha1`, kind: 'Task', metadata: { name: 'nightly' }, spec, ...(status ? { status } : {}) })
const run = (spec: object, status?: object) => ({ apiVersion: `${CRD_GROUP}/v1alpha1`, kind: 'Run', metadata: { name: 'nightly-1' }, spec, ...(status ? { status } : {}) })

t.test('checked-in CRD files equal the generated ones (run npm run gen:crds)', async (t) => {
  for (const dir of ['crds', 'charts/agent-gateway/crds']) {
    for (const [file, content] of crdFiles()) {
      t.equal(await readFile(join(REPO_ROOT, dir, file), 'utf8'), content, `${dir}/${file}`)
    }
  }
  t.same(
    parseAllDocuments(renderCrdsYaml()).map((doc) => doc.toJS()),
    [TASK_CRD, RUN_CRD],
    'renderCrdsYaml round-trips to the objects',
  )
})

t.test('each CRD is a valid apiextensions.k8s.io/v1 CustomResourceDefinition (kubernetes-models)', async (t) => {
  for (const crd of CRDS) {
    t.doesNotThrow(() => new CrdModel(crd as never).validate(), crd.metadata.name)
  }
  const broken = structuredClone(TASK_CRD) as unknown as { spec: { scope: unknown } }
  broken.spec.scope = 7
  t.throws(() => new CrdModel(broken as never).validate(), 'the validator does reject a broken CRD')
})

t.test('names: group, plurals, short names that collide with nothing common, category', async (t) => {
  t.same(
    CRDS.map((c) => [c.metadata.name, c.spec.names.kind, c.spec.names.shortNames, c.spec.names.categories]),
    [
      ['tasks.jobs.agent-gateway.dev', 'Task', ['agtask'], ['agent-gateway']],
      ['runs.jobs.agent-gateway.dev', 'Run', ['agrun'], ['agent-gateway']],
    ],
  )
  for (const crd of CRDS) {
    t.ok(crd.spec.versions[0]?.subresources?.status, `${crd.spec.names.kind} has the status subresource`)
    t.notOk(crd.spec.names.shortNames?.includes('tk'), "tk is Tekton's")
  }
})

/** Structural-schema rules the API server enforces at CRD creation (those a unit test can check). */
function structuralProblems(node: SchemaNode, path: string, inSpec: boolean): string[] {
  const problems: string[] = []
  if (typeof node.type !== 'string') problems.push(`${path}: no type`)
  if (node['x-kubernetes-preserve-unknown-fields'] === true && inSpec) problems.push(`${path}: preserve-unknown-fields in spec`)
  if (node.type === 'object' && node.properties !== undefined && node.additionalProperties !== undefined) problems.push(`${path}: properties and additionalProperties`)
  if ('uniqueItems' in node) problems.push(`${path}: uniqueItems is not allowed (use x-kubernetes-list-type: set)`)
  if (node['x-kubernetes-list-type'] === 'map') {
    const keys = node['x-kubernetes-list-map-keys'] as string[]
    const required = ((node.items as SchemaNode).required ?? []) as string[]
    for (const key of keys) if (!required.includes(key)) problems.push(`${path}: list-map key ${key} must be required`)
  }
  if (node.type === 'array' && node['x-kubernetes-validations'] === undefined && node.maxItems === undefined) problems.push(`${path}: arrays need maxItems (CEL cost bounds)`)
  for (const [key, child] of Object.entries((node.properties ?? {}) as Record<string, SchemaNode>)) {
    problems.push(...structuralProblems(child, `${path}.${key}`, inSpec || (path === '' && key === 'spec')))
  }
  if (node.items !== undefined) problems.push(...structuralProblems(node.items as SchemaNode, `${path}[]`, inSpec))
  return problems
}

function walk(node: SchemaNode, visit: (node: SchemaNode, path: string) => void, path = ''): void {
  visit(node, path)
  for (const [key, child] of Object.entries((node.properties ?? {}) as Record<string, SchemaNode>)) walk(child, visit, `${path}.${key}`)
  if (node.items !== undefined) walk(node.items as SchemaNode, visit, `${path}[]`)
}

t.test('schemas are structural, bounded, and use only CEL/JSONPath the fake API server evaluates', async (t) => {
  for (const crd of CRDS) {
    const schema = schemaOf(crd)
    t.same(structuralProblems(schema, '', false), [], `${crd.spec.names.kind}: structural`)
    const rules: string[] = []
    const unboundedStrings: string[] = []
    walk(schema, (node, path) => {
      for (const { rule } of (node['x-kubernetes-validations'] ?? []) as Array<{ rule: string }>) {
        rules.push(rule)
        t.doesNotThrow(() => parseCel(rule), `${crd.spec.names.kind}${path}: ${rule}`)
      }
      // CEL cost estimation needs bounded strings; apiVersion/kind are the server's.
      if (/^\.(spec|status)/.test(path) && node.type === 'string' && node.enum === undefined && node.format === undefined && node.maxLength === undefined)
        unboundedStrings.push(path)
      if (node.default !== undefined)
        t.ok(
          validator({ ...crd, spec: { ...crd.spec, versions: [{ ...crd.spec.versions[0], schema: { openAPIV3Schema: node } }] } } as CustomResourceDefinition)(node.default),
          `${crd.spec.names.kind}${path}: default is valid`,
        )
    })
    t.same(unboundedStrings, [], `${crd.spec.names.kind}: every string has maxLength, an enum or a format`)
    t.ok(rules.length > 0, `${crd.spec.names.kind} has CEL rules`)
    const version = crd.spec.versions[0] as CustomResourceDefinition['spec']['versions'][number]
    for (const column of version.additionalPrinterColumns ?? []) t.doesNotThrow(() => parseJsonPath(column.jsonPath), column.jsonPath)
    for (const { jsonPath } of version.selectableFields ?? []) {
      const node = jsonPath
        .slice(1)
        .split('.')
        .reduce<SchemaNode | undefined>((n, key) => (n?.properties as Record<string, SchemaNode> | undefined)?.[key], schema)
      t.ok(node && ['string', 'integer', 'boolean'].includes(node.type as string), `selectable field ${jsonPath} is a scalar of the schema`)
    }
  }
})

t.test('the schemas list every field of the reconciler types and accept them', async (t) => {
  const validateTask = validator(TASK_CRD)
  const validateRun = validator(RUN_CRD)
  const taskProperties = schemaOf(TASK_CRD).properties as Record<string, SchemaNode>
  const runProperties = schemaOf(RUN_CRD).properties as Record<string, SchemaNode>
  const listed = (node: SchemaNode | undefined) => Object.keys((node?.properties ?? {}) as object).sort()
  t.same(
    Object.keys(FULL_TASK_SPEC).filter((k) => !listed(taskProperties.spec).includes(k)),
    [],
    'TaskSpec fields in the CRD',
  )
  t.same(
    Object.keys(FULL_TASK_STATUS).filter((k) => !listed(taskProperties.status).includes(k)),
    [],
    'TaskStatus fields in the CRD',
  )
  t.same(
    Object.keys(FULL_RUN_SPEC).filter((k) => !listed(runProperties.spec).includes(k)),
    [],
    'RunSpec fields in the CRD',
  )
  t.same(
    Object.keys(FULL_RUN_STATUS).filter((k) => !listed(runProperties.status).includes(k)),
    [],
    'RunStatus fields in the CRD',
  )

  const fullTask = task(FULL_TASK_SPEC, {
    ...FULL_TASK_STATUS,
    conditions: [CONDITION],
    activeCount: 1,
    lastRunName: 'nightly-1',
    lastRunPhase: 'Running',
    lastSuccessfulTime: '2026-11-24T11:00:00Z',
    costMicros: '2400',
  })
  t.ok(validateTask(fullTask), JSON.stringify(validateTask.errors))
  t.ok(validateTask(task({})), 'an empty spec (on-demand, nothing else) is valid')
  const fullRun = run(FULL_RUN_SPEC, { ...FULL_RUN_STATUS, observedGeneration: 1, conditions: [{ ...CONDITION, type: 'Succeeded' }], duration: formatDuration(83000) })
  t.ok(validateRun(fullRun), JSON.stringify(validateRun.errors))
  t.ok(validateRun(run({ ...FULL_RUN_SPEC, trigger: { type: 'schedule', scheduledTime: '2026-11-24T12:00:00Z' } }, { exitCode: null })), 'exitCode may be null')
})

t.test('the schemas reject what the API server must refuse', async (t) => {
  const validateTask = validator(TASK_CRD)
  const validateRun = validator(RUN_CRD)
  const badTasks: Array<[string, object]> = [
    ['unknown runtime', { ...FULL_TASK_SPEC, runtime: 'ruby' }],
    ['negative maxRuntimeSec', { ...FULL_TASK_SPEC, maxRuntimeSec: -1 }],
    ['maxRuntimeSec over the cap', { ...FULL_TASK_SPEC, maxRuntimeSec: SCHEDULER_LIMITS.maxRuntimeSec + 1 }],
    ['source over the cap', { ...FULL_TASK_SPEC, source: 'x'.repeat(SCHEDULER_LIMITS.maxSourceChars + 1) }],
    ['too many dependencies', { ...FULL_TASK_SPEC, dependencies: Array.from({ length: SCHEDULER_LIMITS.maxDependencies + 1 }, (_, i) => `p${i}`) }],
    ['entrypoint with a slash', { ...FULL_TASK_SPEC, entrypoint: '../main.py' }],
    ['schedule without cron', { ...FULL_TASK_SPEC, schedule: { timezone: 'UTC' } }],
    ['unknown concurrencyPolicy', { ...FULL_TASK_SPEC, concurrencyPolicy: 'Replace' }],
    ['envSecretRef without a name', { ...FULL_TASK_SPEC, envSecretRef: {} }],
    ['envSecretRef with an invalid name', { ...FULL_TASK_SPEC, envSecretRef: { name: 'Not_A_Name' } }],
    ['endAt not a date-time', { ...FULL_TASK_SPEC, endAt: 'tomorrow' }],
    ['negative history limit', { ...FULL_TASK_SPEC, successfulRunsHistoryLimit: -1 }],
  ]
  for (const [why, spec] of badTasks) t.notOk(validateTask(task(spec)), `Task: ${why}`)
  t.notOk(validateTask(task(FULL_TASK_SPEC, { costMicros: 1200 })), 'Task: costMicros is a string (display only)')
  t.notOk(
    validateTask(task(FULL_TASK_SPEC, { conditions: [{ type: 'Ready', status: 'Maybe', reason: 'X', message: '', lastTransitionTime: '2026-11-24T12:00:00Z' }] })),
    'Task: condition status True/False/Unknown',
  )
  t.notOk(validateTask({ ...task(FULL_TASK_SPEC), spec: undefined }), 'Task: spec is required')

  const badRuns: Array<[string, object]> = [
    ['no taskRef', { trigger: FULL_RUN_SPEC.trigger }],
    ['no trigger', { taskRef: FULL_RUN_SPEC.taskRef }],
    ['unknown trigger type', { ...FULL_RUN_SPEC, trigger: { type: 'cron', scheduledTime: '2026-11-24T12:00:00Z' } }],
    ['trigger without scheduledTime', { ...FULL_RUN_SPEC, trigger: { type: 'schedule' } }],
  ]
  for (const [why, spec] of badRuns) t.notOk(validateRun(run(spec)), `Run: ${why}`)
  t.notOk(validateRun(run(FULL_RUN_SPEC, { phase: 'Exploded' })), 'Run: unknown phase')
  t.notOk(validateRun(run(FULL_RUN_SPEC, { durationMs: -5 })), 'Run: negative duration')
})

t.test('no secret values or money numbers in the CRs', async (t) => {
  const spec = (schemaOf(TASK_CRD).properties as Record<string, SchemaNode>).spec as SchemaNode
  const fields = Object.keys(spec.properties as object)
  t.notOk(fields.includes('env'), 'env values are never part of a Task')
  t.same(Object.keys(((spec.properties as Record<string, SchemaNode>).envSecretRef as SchemaNode).properties as object), ['name'])
  for (const crd of CRDS) {
    walk(schemaOf(crd), (node, path) => {
      if (/cost|micros|amount/i.test(path)) t.equal(node.type, 'string', `${crd.spec.names.kind}${path} is a display string`)
    })
  }
})

t.test('printer columns select what the reconcilers write', async (t) => {
  const columns = (crd: CustomResourceDefinition) => (crd.spec.versions[0]?.additionalPrinterColumns ?? []).filter((c) => (c.priority ?? 0) === 0)
  t.same(
    columns(TASK_CRD).map((c) => c.name),
    ['Schedule', 'Suspended', 'Ready', 'Active', 'Last Run', 'Last Schedule', 'Next Run', 'Cost', 'Age'],
  )
  t.same(
    columns(RUN_CRD).map((c) => c.name),
    ['Task', 'Trigger', 'Phase', 'Started', 'Duration', 'Cost', 'Age'],
  )
  const ready = TASK_CRD.spec.versions[0]?.additionalPrinterColumns?.find((c) => c.name === 'Ready')?.jsonPath as string
  t.same(evaluateJsonPath({ status: { conditions: [{ type: 'Suspended', status: 'False' }, CONDITION] } }, ready), ['True'])
  t.same(evaluateJsonPath({ status: {} }, ready), [])
})

t.test('formatDuration', async (t) => {
  t.same([850, 12_000, 83_000, 7_500_000, -1].map(formatDuration), ['850ms', '12s', '1m23s', '2h5m', ''])
})
