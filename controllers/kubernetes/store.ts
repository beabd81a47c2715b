// The Kubernetes backend of the ResourceStore port (src/scheduler/contract/ports.ts): Task and Run
// custom resources (controllers/kubernetes/crds.ts) through the API server with client-node 2.0.1.
// It mirrors controllers/local/postgres-store.ts:
// - errors: 404 → NotFoundError, 409 → ConflictError('AlreadyExists' | 'Conflict'), 410 → GoneError;
// - create stores the given status too: the API server drops status on create (status subresource),
//   so a second write puts it (merge patch on the created resourceVersion);
// - replaceSpec is a PUT of the stored object with only spec and labels changed and the caller's
//   resourceVersion (stale → 409 Conflict); the server bumps generation on spec changes;
// - patchStatus is a top-level merge where null deletes a key and nested values are replaced
//   whole, nulls stripped (the Postgres semantics). The store reads the object and computes the
//   full desired status, then writes it through /status:
//     * with options.resourceVersion: a JSON merge patch carrying metadata.resourceVersion
//       (optimistic; the patch also nulls the keys that go away, so merge == replace); when no
//       value of the patch is a nested object the patch itself is that merge patch, and the read
//       is skipped (flatStatusPatch: one round trip, the server checks the resourceVersion);
//     * without: server-side apply (application/apply-patch+yaml, fieldManager
//       `agent-gateway-controller`, force) of the whole desired status, with the read
//       resourceVersion as a precondition and a few retries on Conflict, so the read-merge-write is
//       atomic like Postgres' single UPDATE. Removed keys are also sent as null: a real server
//       prunes those nulls (and drops the fields this manager no longer applies), an apply that
//       is approximated as a merge (the test fake) deletes them;
// - delete uses propagationPolicy Background (the garbage collector removes owned Runs and Jobs);
// - watch resumes from a resourceVersion, re-watches transparently after a server-side close or
//   the client's 30 s inactivity timeout, rejects with GoneError on 410 (HTTP or an ERROR event)
//   and resolves when the signal aborts; an ADDED or MODIFIED line whose version the watcher
//   already holds (options.held) is passed over undecoded, only its head read (watch-line.ts).
//   A line's first "resourceVersion" value is looked up first, so the others cost one indexOf.
// options.namespace scopes list-without-namespace and watch (a namespaced Role is enough); without
// it they are cluster-wide.
// Its parts are beside this file: the HTTP and connection sharing (kube-http.ts), the error mapping
// (api-errors.ts), the status merge and patch bodies (merge-patch.ts), the object conversion
// (kube-objects.ts); the task env Secrets are task-env-secrets.ts. This module keeps the store and
// re-exports what callers outside controllers/kubernetes/ import from it.
import { PatchStrategy, setHeaderOptions, type CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node'
import {
  ConflictError,
  GoneError,
  NotFoundError,
  type AnyResource,
  type ListOptions,
  type ListResult,
  type NewResource,
  type ResourceKind,
  type ResourceStore,
  type WatchEvent,
  type WatchEventType,
  type WatchOptions,
  type RunResource,
  type TaskResource,
} from '../../src/scheduler/contract/index.ts'
import { mapped } from './api-errors.ts'
import { CRD_API_VERSION, CRD_GROUP, CRD_VERSION, RUN_PLURAL, TASK_PLURAL } from './crds.ts'
import { isRecord, type JsonRecord } from './json.ts'
import { DirectWatch, makeCustomObjectsApi, shareConnections } from './kube-http.ts'
import { FIELD_MANAGER, fromKube, toKubeOwnerReferences, type KubeObject } from './kube-objects.ts'
import { firstResourceVersion, readWatchLineHead } from './watch-line.ts'
import { applyConfiguration, diffMergePatch, flatStatusPatch, mergeStatus } from './merge-patch.ts'

export { apiStatus } from './api-errors.ts'
export { DirectWatch, makeCustomObjectsApi, shareConnections } from './kube-http.ts'
export { FIELD_MANAGER } from './kube-objects.ts'
export { createTaskEnvSecrets, taskEnvSecretName } from './task-env-secrets.ts'
export type { TaskEnvSecrets } from './task-env-secrets.ts'

interface CustomResourceType {
  kind: ResourceKind
  plural: string
}

export interface KubernetesStoreOptions {
  kubeConfig: KubeConfig
  /** Scope of list-without-namespace and watch; absent = all namespaces. */
  namespace?: string
  fieldManager?: string
  /** Attempts of a read-merge-apply status write that loses a race (default 5). */
  statusRetries?: number
}

export class KubernetesResourceStore<R extends AnyResource> implements ResourceStore<R> {
  readonly kind: ResourceKind
  readonly #type: CustomResourceType
  readonly #api: CustomObjectsApi
  readonly #watch: DirectWatch
  readonly #namespace: string | undefined
  readonly #fieldManager: string
  readonly #statusRetries: number
  /** Counters for tests and metrics (held: watch events left out undecoded, options.held). */
  readonly stats = { watches: 0, statusRetries: 0, held: 0 }

  constructor(type: CustomResourceType, options: KubernetesStoreOptions) {
    this.kind = type.kind
    this.#type = type
    const kubeConfig = shareConnections(options.kubeConfig)
    this.#api = makeCustomObjectsApi(kubeConfig)
    this.#watch = new DirectWatch(kubeConfig)
    this.#namespace = options.namespace
    this.#fieldManager = options.fieldManager ?? FIELD_MANAGER
    this.#statusRetries = options.statusRetries ?? 5
  }

  #ref(namespace: string): { group: string; version: string; plural: string; namespace: string } {
    return { group: CRD_GROUP, version: CRD_VERSION, plural: this.#type.plural, namespace }
  }

  async #read(namespace: string, name: string): Promise<KubeObject> {
    return (await mapped(this.#api.getNamespacedCustomObject({ ...this.#ref(namespace), name }))) as KubeObject
  }

  async get(namespace: string, name: string): Promise<R | undefined> {
    try {
      return fromKube<R>(await this.#read(namespace, name))
    } catch (err) {
      if (err instanceof NotFoundError) return undefined
      throw err
    }
  }

  async list(namespace?: string, options: ListOptions = {}): Promise<ListResult<R>> {
    const selectors: { labelSelector?: string; fieldSelector?: string } = {}
    if (options.labelSelector !== undefined && Object.keys(options.labelSelector).length > 0) {
      selectors.labelSelector = Object.entries(options.labelSelector)
        .map(([k, v]) => `${k}=${v}`)
        .join(',')
    }
    const fields = Object.entries(options.fieldSelector ?? {}).filter(([, v]) => v !== undefined)
    if (fields.length > 0) selectors.fieldSelector = fields.map(([k, v]) => `${k}=${v}`).join(',')
    const scope = namespace ?? this.#namespace
    const result = (await mapped(
      scope === undefined
        ? this.#api.listCustomObjectForAllNamespaces({ group: CRD_GROUP, version: CRD_VERSION, resourcePlural: this.#type.plural, ...selectors })
        : this.#api.listNamespacedCustomObject({ ...this.#ref(scope), ...selectors }),
    )) as { metadata?: { resourceVersion?: string }; items?: KubeObject[] }
    return {
      resourceVersion: result.metadata?.resourceVersion ?? '',
      items: (result.items ?? []).map((item) => fromKube<R>({ ...item, apiVersion: item.apiVersion ?? CRD_API_VERSION, kind: item.kind ?? this.kind })),
    }
  }

  async create(resource: NewResource<R>): Promise<R> {
    const meta = resource.metadata
    const body: KubeObject = {
      apiVersion: resource.apiVersion || CRD_API_VERSION,
      kind: this.kind,
      metadata: {
        name: meta.name,
        namespace: meta.namespace,
        ...(meta.labels !== undefined && Object.keys(meta.labels).length > 0 ? { labels: meta.labels } : {}),
        ...(toKubeOwnerReferences(meta.ownerReferences) !== undefined ? { ownerReferences: toKubeOwnerReferences(meta.ownerReferences) } : {}),
      } as KubeObject['metadata'],
      spec: resource.spec ?? {},
    }
    const created = (await mapped(this.#api.createNamespacedCustomObject({ ...this.#ref(meta.namespace), body, fieldManager: this.#fieldManager }))) as KubeObject
    if (resource.status === undefined || resource.status === null) return fromKube<R>(created)
    // The server ignored the status (a subresource); write it on exactly the created version.
    try {
      return await this.#patchStatusMerge(created, mergeStatus(created.status, resource.status), created.metadata.resourceVersion)
    } catch (err) {
      if (err instanceof ConflictError) return (await this.get(meta.namespace, meta.name)) ?? fromKube<R>(created) // someone else wrote first
      throw err
    }
  }

  async replaceSpec(resource: R): Promise<R> {
    const { namespace, name, resourceVersion } = resource.metadata
    const stored = await this.#read(namespace, name)
    if (stored.metadata.resourceVersion !== resourceVersion)
      throw new ConflictError('Conflict', `${this.kind} ${namespace}/${name}: the object has been modified; apply your changes to the latest version`)
    const metadata: KubeObject['metadata'] = { ...stored.metadata, resourceVersion }
    if (resource.metadata.labels !== undefined && Object.keys(resource.metadata.labels).length > 0) metadata.labels = { ...resource.metadata.labels }
    else delete metadata.labels
    delete metadata.managedFields
    const body: KubeObject = { ...stored, metadata, spec: resource.spec ?? {} }
    delete body.status
    const replaced = (await mapped(this.#api.replaceNamespacedCustomObject({ ...this.#ref(namespace), name, body, fieldManager: this.#fieldManager }))) as KubeObject
    return fromKube<R>(replaced)
  }

  async patchStatus(namespace: string, name: string, status: R['status'], options: { resourceVersion?: string } = {}): Promise<R> {
    // Optimistic and flat (no nested object among the values): the merge patch of the values
    // themselves is already the port's semantics, and the server checks the resourceVersion, so
    // the read is not needed (one round trip instead of two; a stale version is the same 409).
    const flat = options.resourceVersion === undefined ? undefined : flatStatusPatch(status)
    if (flat !== undefined) return this.#patchStatusMergeAt(namespace, name, flat, options.resourceVersion as string)
    for (let attempt = 0; ; attempt += 1) {
      const stored = await this.#read(namespace, name)
      const desired = mergeStatus(stored.status, status)
      if (options.resourceVersion !== undefined) {
        if (stored.metadata.resourceVersion !== options.resourceVersion) {
          throw new ConflictError('Conflict', `${this.kind} ${namespace}/${name}: the object has been modified; apply your changes to the latest version`)
        }
        return this.#patchStatusMerge(stored, desired, options.resourceVersion)
      }
      try {
        return await this.#applyStatus(stored, desired)
      } catch (err) {
        if (!(err instanceof ConflictError) || attempt + 1 >= this.#statusRetries) throw err
        this.stats.statusRetries += 1 // another writer between our read and our apply: read again
      }
    }
  }

  async #patchStatusMerge(stored: KubeObject, desired: JsonRecord, resourceVersion: string): Promise<R> {
    return this.#patchStatusMergeAt(stored.metadata.namespace ?? '', stored.metadata.name, diffMergePatch(stored.status, desired), resourceVersion)
  }

  /** JSON merge patch of /status, conditional on `resourceVersion` (stale → 409 Conflict). */
  async #patchStatusMergeAt(namespace: string, name: string, status: JsonRecord, resourceVersion: string): Promise<R> {
    const body = { metadata: { resourceVersion }, status }
    const patched = (await mapped(
      this.#api.patchNamespacedCustomObjectStatus({ ...this.#ref(namespace), name, body, fieldManager: this.#fieldManager }, MERGE_PATCH),
    )) as KubeObject
    return fromKube<R>(patched)
  }

  async #applyStatus(stored: KubeObject, desired: JsonRecord): Promise<R> {
    const body = {
      apiVersion: stored.apiVersion,
      kind: stored.kind,
      metadata: { name: stored.metadata.name, namespace: stored.metadata.namespace, resourceVersion: stored.metadata.resourceVersion },
      status: applyConfiguration(stored.status, desired),
    }
    const applied = (await mapped(
      this.#api.patchNamespacedCustomObjectStatus(
        { ...this.#ref(stored.metadata.namespace ?? ''), name: stored.metadata.name, body, fieldManager: this.#fieldManager, force: true },
        setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply),
      ),
    )) as KubeObject
    return fromKube<R>(applied)
  }

  async delete(namespace: string, name: string): Promise<void> {
    // Background: the API default for custom resources too, but explicit (Jobs default to Orphan).
    await mapped(this.#api.deleteNamespacedCustomObject({ ...this.#ref(namespace), name, propagationPolicy: 'Background' }))
  }

  #collectionPath(): string {
    const scope = this.#namespace === undefined ? '' : `/namespaces/${encodeURIComponent(this.#namespace)}`
    return `/apis/${CRD_GROUP}/${CRD_VERSION}${scope}/${this.#type.plural}`
  }

  async watch(options: WatchOptions, onEvent: (event: WatchEvent<R>) => void): Promise<void> {
    const { signal } = options
    // No version = from now on: a real server would replay every object as ADDED without one.
    let resourceVersion = options.resourceVersion !== undefined && options.resourceVersion !== '' ? options.resourceVersion : (await this.list()).resourceVersion
    let quickCloses = 0
    while (!signal.aborted) {
      const startedAt = Date.now()
      let events = 0
      const end = await this.#watchOnce(resourceVersion, signal, options.held, (rv, event) => {
        resourceVersion = rv
        if (event === undefined) return // a bookmark
        events += 1
        if (event !== HELD) onEvent(event)
      })
      if (end === 'aborted') return
      // A server that closes at once again and again (a proxy, a bad LB) must not spin us.
      quickCloses = events === 0 && Date.now() - startedAt < 1000 ? quickCloses + 1 : 0
      if (quickCloses > 1) await abortableDelay(Math.min(30_000, 250 * 2 ** quickCloses), signal)
    }
  }

  /** One watch request; resolves how it ended, rejects with GoneError (410) or a transport error. */
  #watchOnce(
    resourceVersion: string,
    signal: AbortSignal,
    held: WatchOptions['held'],
    onEvent: (rv: string, event: WatchEvent<R> | typeof HELD | undefined) => void,
  ): Promise<'aborted' | 'closed' | 'timeout'> {
    this.stats.watches += 1
    return new Promise((resolve, reject) => {
      let controller: AbortController | undefined
      let settled = false
      const finish = (settle: () => void): void => {
        if (settled) return
        settled = true
        signal.removeEventListener('abort', onAbort)
        controller?.abort()
        settle()
      }
      const onAbort = (): void => finish(() => resolve('aborted'))
      // An event the watcher holds: its head is read (so the watch resumes past it), not the rest.
      const undecoded =
        held === undefined
          ? undefined
          : (line: string): boolean => {
              if (settled) return true
              const key = held.get(firstResourceVersion(line) ?? '')
              if (key === undefined) return false
              const head = readWatchLineHead(line)
              if (head === undefined || (head.type !== 'ADDED' && head.type !== 'MODIFIED') || held.get(head.resourceVersion) !== `${head.namespace}/${head.name}`) return false
              held.delete(head.resourceVersion)
              this.stats.held += 1
              onEvent(head.resourceVersion, HELD)
              return true
            }
      if (signal.aborted) return resolve('aborted')
      signal.addEventListener('abort', onAbort, { once: true })
      this.#watch
        .watch(
          this.#collectionPath(),
          { resourceVersion, allowWatchBookmarks: true },
          (type: string, object: KubeObject) => {
            if (settled) return
            if (type === 'ERROR') {
              const status = isRecord(object) ? (object as JsonRecord) : {}
              const message = typeof status.message === 'string' ? status.message : 'watch error'
              finish(() => reject(status.code === 410 ? new GoneError(message) : new Error(`watch ${this.#type.plural}: ${message} (${String(status.code)})`)))
              return
            }
            const rv = object?.metadata?.resourceVersion
            if (typeof rv !== 'string') return
            if (type === 'BOOKMARK') return onEvent(rv, undefined)
            if (type !== 'ADDED' && type !== 'MODIFIED' && type !== 'DELETED') return
            try {
              onEvent(rv, { type: type as WatchEventType, object: fromKube<R>(object) })
            } catch (err) {
              finish(() => reject(err))
            }
          },
          (err: unknown) => {
            if (signal.aborted) return finish(() => resolve('aborted'))
            if (err === null || err === undefined) return finish(() => resolve('closed'))
            if (isRecord(err) && err.name === 'TimeoutError') return finish(() => resolve('timeout'))
            if (isRecord(err) && err.statusCode === 410) return finish(() => reject(new GoneError()))
            finish(() => reject(err))
          },
          undecoded,
        )
        .then(
          (c) => {
            controller = c
            if (settled) c.abort()
          },
          (err: unknown) => finish(() => reject(err)),
        )
    })
  }
}

/** An event left out undecoded because the watcher holds it (options.held). */
const HELD = Symbol('held')

const MERGE_PATCH = setHeaderOptions('Content-Type', PatchStrategy.MergePatch)

function abortableDelay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms)
    function done(): void {
      clearTimeout(timer)
      signal.removeEventListener('abort', done)
      resolve()
    }
    signal.addEventListener('abort', done, { once: true })
  })
}

export function createKubernetesStores(options: KubernetesStoreOptions): {
  tasks: KubernetesResourceStore<TaskResource>
  runs: KubernetesResourceStore<RunResource>
} {
  return {
    tasks: new KubernetesResourceStore<TaskResource>({ kind: 'Task', plural: TASK_PLURAL }, options),
    runs: new KubernetesResourceStore<RunResource>({ kind: 'Run', plural: RUN_PLURAL }, options),
  }
}
