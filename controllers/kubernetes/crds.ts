// The Task and Run CustomResourceDefinitions. Their schemas are the scheduling contract's
// (src/scheduler/contract/resources.ts: the TypeBox schemas the reconcilers' types come from),
// turned here into structural openAPIV3Schema; this file adds what only Kubernetes needs: names,
// printer columns, selectable fields, the status subresource. scripts/gen-crds.ts writes the
// result to crds/ and charts/agent-gateway/crds/; test/unit/crds.test.ts fails when those copies
// drift, and test/helpers/fake-kube-apiserver.ts serves exactly these objects.
//
// No x-kubernetes-preserve-unknown-fields: the API server prunes anything the contract does not
// list. The rules the schemas follow (no secrets, money as display strings, no defaults, CEL
// immutability) are in resources.ts.
import type { TSchema } from '@sinclair/typebox'
import { stringify } from 'yaml'
import {
  RESOURCE_API_VERSION,
  RESOURCE_GROUP,
  RESOURCE_VERSION,
  RUN_KIND as CONTRACT_RUN_KIND,
  RunResourceSpecSchema,
  RunResourceStatusSchema,
  TASK_KIND as CONTRACT_TASK_KIND,
  TaskResourceSpecSchema,
  TaskResourceStatusSchema,
} from '../../src/scheduler/contract/index.ts'

export const CRD_GROUP = RESOURCE_GROUP
export const CRD_VERSION = RESOURCE_VERSION
export const CRD_API_VERSION = RESOURCE_API_VERSION
export const CRD_CATEGORY = 'agent-gateway'
export const TASK_PLURAL = 'tasks'
export const RUN_PLURAL = 'runs'
export const TASK_KIND = CONTRACT_TASK_KIND
export const RUN_KIND = CONTRACT_RUN_KIND
export const TASK_SHORT_NAMES = ['agtask'] as const
export const RUN_SHORT_NAMES = ['agrun'] as const

/** A JSON Schema node of a structural CRD schema (apiextensions.k8s.io/v1 JSONSchemaProps). */
export type SchemaNode = { [keyword: string]: unknown }

const STRUCTURE_KEYS = new Set(['type', 'properties', 'required', 'items', 'anyOf'])

/**
 * A contract (TypeBox) schema as a structural CRD schema node: `type` first, then `properties` and
 * `required` (objects) or `items` (arrays), then every other keyword as written (bounds, patterns,
 * descriptions, x-kubernetes-*). A union of one schema with null becomes that schema with
 * `nullable: true`, the OpenAPI v3 spelling the API server understands. TypeBox's symbol keys are
 * dropped; a keyword the API server would not know fails here, not at install time.
 */
export function structuralSchema(schema: TSchema): SchemaNode {
  const node = schema as SchemaNode
  if (Array.isArray(node.anyOf)) {
    const variants = node.anyOf as TSchema[]
    const others = variants.filter((variant) => variant.type !== 'null')
    if (variants.length !== 2 || others.length !== 1) throw new Error('a CRD schema union must be one schema or null')
    const { type, ...rest } = structuralSchema(others[0] as TSchema)
    return { type, nullable: true, ...rest, ...keywords(node) }
  }
  if (typeof node.type !== 'string') throw new Error(`a CRD schema node needs one type (got ${JSON.stringify(node.type)})`)
  const out: SchemaNode = { type: node.type }
  if (node.type === 'object' && node.properties !== undefined) {
    out.properties = Object.fromEntries(Object.entries(node.properties as Record<string, TSchema>).map(([key, child]) => [key, structuralSchema(child)]))
    if (Array.isArray(node.required) && node.required.length > 0) out.required = [...(node.required as string[])]
  }
  if (node.type === 'array') out.items = structuralSchema(node.items as TSchema)
  return { ...out, ...keywords(node) }
}

function keywords(node: SchemaNode): SchemaNode {
  return Object.fromEntries(
    Object.entries(node)
      .filter(([key]) => !STRUCTURE_KEYS.has(key))
      .map(([key, value]) => [key, structuredClone(value)]),
  )
}

const TASK_SPEC = structuralSchema(TaskResourceSpecSchema)
const TASK_STATUS = structuralSchema(TaskResourceStatusSchema)
const RUN_SPEC = structuralSchema(RunResourceSpecSchema)
const RUN_STATUS = structuralSchema(RunResourceStatusSchema)

// ---------------------------------------------------------------- CRDs

/** The object around spec and status; metadata is the API server's (ObjectMeta is not listed in CRDs). */
function rootSchema(kind: string, spec: SchemaNode, status: SchemaNode): SchemaNode {
  return {
    type: 'object',
    properties: { apiVersion: { type: 'string' }, kind: { type: 'string' }, metadata: { type: 'object' }, spec, status },
    required: ['spec'],
    description: `${kind} of the Agent Gateway scheduler`,
  }
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
