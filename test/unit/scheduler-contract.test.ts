// The scheduling contract (src/scheduler/contract) is the one source of the vocabularies and bounds:
// the HTTP schemas, the CRDs, the rate card's hard caps and the create validation all carry its
// values, so changing one there changes them everywhere. And the CRD schema conversion keeps what
// the API server needs (nullable, x-kubernetes-* keywords) and refuses what it could not express.
import t from 'tap'
import { Type } from '@sinclair/typebox'
import { RUN_CRD, structuralSchema, TASK_CRD, type SchemaNode } from '../../controllers/kubernetes/crds.ts'
import { Run, Task, TaskCreateRequest } from '../../src/catalog/schemas/scheduler.ts'
import { FIELD_LIMITS, RUN_PHASES, RUN_STATES, RUNTIMES, SCHEDULER_LIMITS, TASK_PHASES, TASK_STATES, TRIGGER_TYPES } from '../../src/scheduler/contract/index.ts'
import { DEFAULT_RATES } from '../../src/scheduler/domain/rates.ts'
import { validateCreateTask } from '../../src/scheduler/domain/validate.ts'

type Node = { [key: string]: unknown }
const at = (schema: unknown, ...path: string[]): Node => path.reduce<Node>((node, key) => (node.properties as Record<string, Node>)[key] as Node, schema as Node)
const crdRoot = (crd: typeof TASK_CRD): SchemaNode => crd.spec.versions[0]?.schema.openAPIV3Schema as SchemaNode

t.test('the HTTP schemas and the CRDs carry the contract’s vocabularies', async (t) => {
  t.same(at(Task, 'status').enum, [...TASK_STATES], 'Task.status')
  t.same(at(Run, 'status').enum, [...RUN_STATES], 'Run.status')
  t.same(at(Run, 'trigger').enum, [...TRIGGER_TYPES], 'Run.trigger')
  t.same(at(TaskCreateRequest, 'runtime').enum, [...RUNTIMES], 'create runtime')
  t.same(at(crdRoot(TASK_CRD), 'spec', 'runtime').enum, [...RUNTIMES], 'Task CRD runtime')
  t.same(at(crdRoot(TASK_CRD), 'status', 'phase').enum, [...TASK_PHASES], 'Task CRD phase')
  t.same(at(crdRoot(RUN_CRD), 'status', 'phase').enum, [...RUN_PHASES], 'Run CRD phase')
  t.same(at(crdRoot(RUN_CRD), 'spec', 'trigger', 'type').enum, [...TRIGGER_TYPES], 'Run CRD trigger type')
})

t.test('the HTTP schemas, the CRDs and the rate card carry the contract’s bounds', async (t) => {
  const http = TaskCreateRequest as unknown as Node
  const crd = crdRoot(TASK_CRD)
  t.equal(at(http, 'source').maxLength, SCHEDULER_LIMITS.maxSourceChars)
  t.equal(at(crd, 'spec', 'source').maxLength, SCHEDULER_LIMITS.maxSourceChars)
  t.equal(DEFAULT_RATES.hard_caps.max_source_chars, SCHEDULER_LIMITS.maxSourceChars)
  t.equal(at(http, 'max_runtime_sec').maximum, SCHEDULER_LIMITS.maxRuntimeSec)
  t.equal(at(crd, 'spec', 'maxRuntimeSec').maximum, SCHEDULER_LIMITS.maxRuntimeSec)
  t.equal(DEFAULT_RATES.hard_caps.max_runtime_sec, SCHEDULER_LIMITS.maxRuntimeSec)
  t.equal(at(http, 'dependencies').maxItems, SCHEDULER_LIMITS.maxDependencies)
  t.equal(at(crd, 'spec', 'dependencies').maxItems, SCHEDULER_LIMITS.maxDependencies)
  t.equal(DEFAULT_RATES.hard_caps.max_dependencies, SCHEDULER_LIMITS.maxDependencies)
  t.equal(at(http, 'entrypoint').maxLength, FIELD_LIMITS.maxEntrypointChars)
  t.equal(at(crd, 'spec', 'entrypoint').maxLength, FIELD_LIMITS.maxEntrypointChars)
  t.equal(at(http, 'entrypoint').pattern, at(crd, 'spec', 'entrypoint').pattern, 'one entrypoint syntax')
  t.equal(at(crd, 'spec', 'schedule', 'cron').maxLength, FIELD_LIMITS.maxCronChars)
  t.equal(at(crd, 'spec', 'schedule', 'timezone').pattern, at(TaskCreateRequest.properties.schedule.anyOf[0], 'timezone').pattern, 'one time zone syntax')
})

t.test('the create validation enforces the same bounds', async (t) => {
  const body = { runtime: 'python', source: 'print(1)', entrypoint: 'main.py', max_runtime_sec: 60, max_sibling_calls: 0, max_amount_usdc_micros: 1_000_000 }
  const now = new Date('2026-11-24T12:00:00Z')
  t.doesNotThrow(() => validateCreateTask({ ...body, max_runtime_sec: SCHEDULER_LIMITS.maxRuntimeSec }, { now }))
  t.throws(() => validateCreateTask({ ...body, max_runtime_sec: SCHEDULER_LIMITS.maxRuntimeSec + 1 }, { now }), { code: 'VALIDATION_ERROR' })
  t.doesNotThrow(() => validateCreateTask({ ...body, entrypoint: `${'a'.repeat(FIELD_LIMITS.maxEntrypointChars - 3)}.py` }, { now }))
  t.throws(() => validateCreateTask({ ...body, entrypoint: `${'a'.repeat(FIELD_LIMITS.maxEntrypointChars - 2)}.py` }, { now }), { code: 'VALIDATION_ERROR' })
  t.throws(() => validateCreateTask({ ...body, source: 'x'.repeat(SCHEDULER_LIMITS.maxSourceChars + 1) }, { now }), { code: 'VALIDATION_ERROR' })
})

t.test('structuralSchema: CRD keyword order, nullable, and refusals', async (t) => {
  const schema = Type.Object(
    { n: Type.Optional(Type.Union([Type.Integer({ minimum: 0 }), Type.Null()])), s: Type.String({ maxLength: 3, 'x-kubernetes-validations': [{ rule: 'self == oldSelf' }] }) },
    { description: 'd' },
  )
  const node = structuralSchema(schema)
  t.same(Object.keys(node), ['type', 'properties', 'required', 'description'], 'type, then structure, then keywords')
  t.strictSame(node.properties, {
    n: { type: 'integer', nullable: true, minimum: 0 },
    s: { type: 'string', maxLength: 3, 'x-kubernetes-validations': [{ rule: 'self == oldSelf' }] },
  })
  t.same(node.required, ['s'])
  t.equal(Object.getOwnPropertySymbols(node).length, 0, 'no TypeBox symbols')
  t.throws(() => structuralSchema(Type.Union([Type.String(), Type.Integer()])), /one schema or null/)
  t.throws(() => structuralSchema(Type.Any()), /needs one type/)
})
