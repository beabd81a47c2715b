// The ResourceStore port: Kubernetes-shaped storage for Task and Run resources, so the reconcilers
// run unchanged on the embedded Postgres/PGlite backend (controllers/local/postgres-store.ts) and,
// later, on a Kubernetes API server (custom resources). Semantics follow the API server:
// - resourceVersion is an opaque string; a write with a stale one fails with ConflictError('Conflict') (409);
// - create of an existing (namespace, name) fails with ConflictError('AlreadyExists') (409);
// - generation counts spec changes only; status is a subresource that never bumps it;
// - delete cascades (background GC) to objects whose ownerReferences name the deleted uid;
// - watch resumes from a resourceVersion; one older than the retained history throws GoneError
//   (410) and the caller must relist (see informer.ts).

export interface OwnerReference {
  kind: string
  name: string
  uid: string
}

export interface ObjectMeta {
  name: string
  namespace: string
  uid: string
  resourceVersion: string
  generation: number
  creationTimestamp: string
  deletionTimestamp?: string
  labels?: Record<string, string>
  ownerReferences?: OwnerReference[]
  finalizers?: string[]
}

export type ResourceKind = 'Task' | 'Run'

export interface Resource<Spec, Status> {
  apiVersion: string
  kind: ResourceKind
  metadata: ObjectMeta
  spec: Spec
  status?: Status
}

export type AnyResource = Resource<unknown, unknown>

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED'
export type WatchEvent<R> = { type: WatchEventType; object: R }

export interface FieldSelector {
  'spec.taskRef.name'?: string
  'status.phase'?: string
}

export interface ListOptions {
  labelSelector?: Record<string, string>
  fieldSelector?: FieldSelector
}

export interface ListResult<R> {
  items: R[]
  /** The store's resourceVersion as of the list: watch from it to miss nothing. */
  resourceVersion: string
}

export type NewResource<R extends AnyResource> = Omit<R, 'metadata'> & {
  metadata: Pick<ObjectMeta, 'name' | 'namespace' | 'labels' | 'ownerReferences'>
}

export interface WatchOptions {
  /** Deliver events strictly after this version; absent = from now on. */
  resourceVersion?: string
  /** Aborting ends the watch: the promise resolves. */
  signal: AbortSignal
}

export interface ResourceStore<R extends AnyResource> {
  readonly kind: ResourceKind
  get(namespace: string, name: string): Promise<R | undefined>
  list(namespace?: string, options?: ListOptions): Promise<ListResult<R>>
  /** AlreadyExists → throws ConflictError('AlreadyExists'). */
  create(resource: NewResource<R>): Promise<R>
  /** Replaces spec and labels; metadata.resourceVersion must be current → else ConflictError('Conflict'). Bumps generation when spec changed. */
  replaceSpec(resource: R): Promise<R>
  /** Status subresource: replaces status; does not bump generation. With options.resourceVersion, optimistic. */
  patchStatus(namespace: string, name: string, status: R['status'], options?: { resourceVersion?: string }): Promise<R>
  /** Deletes the object and (cascading) every object whose ownerReferences name its uid. Missing → NotFoundError. */
  delete(namespace: string, name: string): Promise<void>
  /** Streams events in resourceVersion order until signal aborts (resolves) or the version is too old (rejects GoneError). */
  watch(options: WatchOptions, onEvent: (event: WatchEvent<R>) => void): Promise<void>
}

export type ConflictReason = 'AlreadyExists' | 'Conflict'

/** HTTP 409 from the API server. */
export class ConflictError extends Error {
  readonly code = 409
  readonly reason: ConflictReason
  constructor(reason: ConflictReason, message?: string) {
    super(message ?? reason)
    this.name = 'ConflictError'
    this.reason = reason
  }
}

/** HTTP 410: the requested resourceVersion is older than the retained history; relist. */
export class GoneError extends Error {
  readonly code = 410
  constructor(message = 'resourceVersion too old') {
    super(message)
    this.name = 'GoneError'
  }
}

/** HTTP 404. */
export class NotFoundError extends Error {
  readonly code = 404
  constructor(message = 'not found') {
    super(message)
    this.name = 'NotFoundError'
  }
}

export function isAlreadyExists(err: unknown): boolean {
  return err instanceof ConflictError && err.reason === 'AlreadyExists'
}

export function isConflict(err: unknown): boolean {
  return err instanceof ConflictError && err.reason === 'Conflict'
}

/** `namespace/name`, the work-queue key. */
export function objectKey(meta: { namespace: string; name: string }): string {
  return `${meta.namespace}/${meta.name}`
}

export function splitKey(key: string): { namespace: string; name: string } {
  const slash = key.indexOf('/')
  return { namespace: key.slice(0, slash), name: key.slice(slash + 1) }
}
