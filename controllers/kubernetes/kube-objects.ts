// Task and Run custom resources as the API server returns and takes them (KubeObject), converted
// to and from the port's resources (metadata reduced to ObjectMeta, owner references completed
// with an apiVersion), and the field manager every controller write is made as.
import type { AnyResource, ObjectMeta, OwnerReference, ResourceKind } from '../../src/scheduler/contract/index.ts'
import { CRD_API_VERSION, RUN_KIND, TASK_KIND } from './crds.ts'

/** The one field manager of every controller write (server-side apply ownership). */
export const FIELD_MANAGER = 'agent-gateway-controller'

/** A Kubernetes object as the API returns it (CustomObjectsApi answers plain JSON). */
export interface KubeObject {
  apiVersion: string
  kind: string
  metadata: {
    name: string
    namespace?: string
    uid: string
    resourceVersion: string
    generation?: number
    creationTimestamp: string
    deletionTimestamp?: string
    labels?: Record<string, string>
    annotations?: Record<string, string>
    ownerReferences?: Array<{ apiVersion: string; kind: string; name: string; uid: string; controller?: boolean; blockOwnerDeletion?: boolean }>
    finalizers?: string[]
    [field: string]: unknown
  }
  spec?: unknown
  status?: unknown
  [field: string]: unknown
}

function ownerApiVersion(ref: OwnerReference & { apiVersion?: string }): string {
  if (typeof ref.apiVersion === 'string' && ref.apiVersion !== '') return ref.apiVersion
  if (ref.kind === TASK_KIND || ref.kind === RUN_KIND) return CRD_API_VERSION
  throw new Error(`ownerReference to ${ref.kind} ${ref.name}: apiVersion unknown`)
}

/** A Kubernetes object as the port's resource (metadata reduced to ObjectMeta, like Postgres'). */
export function fromKube<R extends AnyResource>(object: KubeObject): R {
  const meta = object.metadata
  const metadata: ObjectMeta = {
    name: meta.name,
    namespace: meta.namespace ?? '',
    uid: meta.uid,
    resourceVersion: meta.resourceVersion,
    generation: meta.generation ?? 1,
    creationTimestamp: new Date(meta.creationTimestamp).toISOString(),
  }
  if (meta.deletionTimestamp !== undefined) metadata.deletionTimestamp = new Date(meta.deletionTimestamp).toISOString()
  if (meta.labels !== undefined && Object.keys(meta.labels).length > 0) metadata.labels = { ...meta.labels }
  if (meta.ownerReferences !== undefined && meta.ownerReferences.length > 0) {
    metadata.ownerReferences = meta.ownerReferences.map((ref) => ({ kind: ref.kind, name: ref.name, uid: ref.uid }))
  }
  if (meta.finalizers !== undefined && meta.finalizers.length > 0) metadata.finalizers = [...meta.finalizers]
  const resource: AnyResource = { apiVersion: object.apiVersion, kind: object.kind as ResourceKind, metadata, spec: object.spec ?? {} }
  if (object.status !== undefined && object.status !== null) resource.status = object.status
  return resource as R
}

export function toKubeOwnerReferences(refs: OwnerReference[] | undefined): KubeObject['metadata']['ownerReferences'] {
  if (refs === undefined || refs.length === 0) return undefined
  // A single owner controls its dependent (kubectl shows "Controlled By").
  return refs.map((ref) => ({ apiVersion: ownerApiVersion(ref), kind: ref.kind, name: ref.name, uid: ref.uid, ...(refs.length === 1 ? { controller: true } : {}) }))
}
