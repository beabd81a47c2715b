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
//   and resolves when the signal aborts.
// Connections are reused (shareConnections: client-node 2.0.1 would open one per request), and the
// resource calls go straight to that connection pool (directHttpLibrary) instead of through fetch.
// options.namespace scopes list-without-namespace and watch (a namespaced Role is enough); without
// it they are cluster-wide.
import {
  CoreV1Api,
  CustomObjectsApi,
  IsomorphicFetchHttpLibrary,
  PatchStrategy,
  ResponseContext,
  setHeaderOptions,
  Watch,
  wrapHttpLibrary,
  type Configuration,
  type HttpLibrary,
  type KubeConfig,
  type RequestContext,
  type V1Secret,
} from '@kubernetes/client-node'
import {
  ConflictError,
  GoneError,
  NotFoundError,
  type AnyResource,
  type ListOptions,
  type ListResult,
  type NewResource,
  type ObjectMeta,
  type OwnerReference,
  type ResourceKind,
  type ResourceStore,
  type WatchEvent,
  type WatchEventType,
  type WatchOptions,
  type RunResource,
  type TaskResource,
} from '../../src/scheduler/contract/index.ts'
import { CRD_API_VERSION, CRD_GROUP, CRD_VERSION, RUN_KIND, RUN_PLURAL, TASK_KIND, TASK_PLURAL } from './crds.ts'
import { dnsLabel, LABELS, MANAGED_BY } from './job-spec.ts'

/** The one field manager of every controller write (server-side apply ownership). */
export const FIELD_MANAGER = 'agent-gateway-controller'

type Json = unknown
type JsonRecord = Record<string, unknown>

function isRecord(value: Json): value is JsonRecord {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

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

// ------------------------------------------------------------------------------------------ connections

const SHARED = Symbol.for('agent-gateway.kubeconfig.shared-dispatcher')

/**
 * client-node 2.0.1 builds a NEW undici Agent for every request whenever the cluster has TLS
 * options (a CA, client certs, or skipTLSVerify: i.e. always in a cluster), so no connection is
 * ever reused: a TCP (+TLS) handshake per call. This memoizes the dispatcher per cluster and TLS
 * material on the given KubeConfig (idempotent; a rotated certificate gets a new one, the old one
 * is closed gracefully). Measured: bench/k8s-reconcile.bench.ts, docs/BENCHMARKS.md.
 */
export function shareConnections(kubeConfig: KubeConfig): KubeConfig {
  const target = kubeConfig as unknown as Record<string | symbol, unknown> & { createDispatcher: (cluster: unknown, agentOptions: Record<string, unknown>) => unknown }
  if (target[SHARED] === true || typeof target.createDispatcher !== 'function') return kubeConfig
  const original = target.createDispatcher.bind(kubeConfig)
  // Called on every request with a fresh agentOptions (the CA, cert and key read again as new
  // Buffers): matched by content, the Buffers compared bytewise (no serializing or hashing them).
  const cache: { cluster: string; options: Record<string, unknown>; dispatcher: unknown }[] = []
  target.createDispatcher = (cluster, agentOptions) => {
    const clusterKey = JSON.stringify(cluster) ?? ''
    const hit = cache.find((entry) => entry.cluster === clusterKey && sameAgentOptions(entry.options, agentOptions))
    if (hit !== undefined) return hit.dispatcher
    const dispatcher = original(cluster, agentOptions)
    cache.push({ cluster: clusterKey, options: { ...agentOptions }, dispatcher })
    if (cache.length > 4) {
      const old = cache.shift()?.dispatcher as { close?: () => Promise<void> } | undefined
      void old?.close?.().catch(() => {})
    }
    return dispatcher
  }
  target[SHARED] = true
  return kubeConfig
}

function sameOptionValue(a: unknown, b: unknown): boolean {
  if (a === b) return true
  if (Buffer.isBuffer(a) || Buffer.isBuffer(b)) return Buffer.isBuffer(a) && Buffer.isBuffer(b) && a.equals(b)
  if (Array.isArray(a) || Array.isArray(b)) return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((item, i) => sameOptionValue(item, b[i]))
  return isRecord(a) && isRecord(b) && sameAgentOptions(a, b)
}

/** The same TLS material and settings (keys with undefined values count as absent). */
function sameAgentOptions(a: Record<string, unknown>, b: Record<string, unknown>): boolean {
  for (const key of new Set([...Object.keys(a), ...Object.keys(b)])) if (!sameOptionValue(a[key], b[key])) return false
  return true
}

/** What directHttpLibrary needs of an undici Dispatcher (client-node's own undici, whatever its version). */
interface RequestDispatcher {
  request(options: {
    origin: string
    path: string
    method: string
    headers: Record<string, string>
    body?: string
    signal?: AbortSignal
  }): Promise<{ statusCode: number; headers: Record<string, string | string[] | undefined>; body: { text(): Promise<string>; arrayBuffer(): Promise<ArrayBuffer> } }>
}

function isRequestDispatcher(value: unknown): value is RequestDispatcher {
  return typeof value === 'object' && value !== null && typeof (value as { request?: unknown }).request === 'function'
}

const fetchLibrary = new IsomorphicFetchHttpLibrary()

/**
 * client-node's generated APIs send every call through undici's fetch (WHATWG Request, Headers
 * and streams around each call; a string body is written as a stream). This library hands the
 * call to the same undici dispatcher (the one shareConnections keeps: same connections, TLS,
 * timeouts) through its plain request(): same method, URL, headers (the API's Accept and
 * Content-Type, auth, User-Agent), body and signal; the response's status, headers (lowercase,
 * repeated values joined by ", " as fetch joins them) and body. What fetch would add and we
 * leave out: it asks for gzip (the API server then compresses lists over 128 KiB) and follows
 * redirects (the resource endpoints never redirect). Calls without such a dispatcher (a cluster
 * without TLS options) or with a non-string body go through fetch as before. Measured:
 * bench/k8s-reconcile.bench.ts, docs/BENCHMARKS.md.
 */
export const directHttpLibrary: HttpLibrary = (() => {
  const direct = wrapHttpLibrary({
    async send(request: RequestContext): Promise<ResponseContext> {
      const dispatcher = request.getDispatcher() as unknown as RequestDispatcher
      const url = new URL(request.getUrl())
      const body = request.getBody() as string | undefined
      const signal = request.getSignal()
      const response = await dispatcher.request({
        origin: url.origin,
        path: `${url.pathname}${url.search}`,
        method: request.getHttpMethod(),
        headers: request.getHeaders(),
        ...(body === undefined ? {} : { body }),
        ...(signal === undefined ? {} : { signal: signal as AbortSignal }),
      })
      const headers: Record<string, string> = {}
      for (const [name, value] of Object.entries(response.headers)) if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(', ') : value
      const stream = response.body
      return new ResponseContext(response.statusCode, headers, {
        text: () => stream.text(),
        binary: async () => Buffer.from(await stream.arrayBuffer()),
        stream: () => null,
      })
    },
  })
  return {
    send(request) {
      const body = request.getBody()
      const straight = isRequestDispatcher(request.getDispatcher()) && (body === undefined || typeof body === 'string')
      return straight ? direct.send(request) : fetchLibrary.send(request)
    },
  }
})()

/** client-node's CustomObjectsApi for `kubeConfig` (auth, server, User-Agent as makeApiClient sets them) over directHttpLibrary. */
export function makeCustomObjectsApi(kubeConfig: KubeConfig): CustomObjectsApi {
  return shareConnections(kubeConfig).makeApiClient(
    class extends CustomObjectsApi {
      constructor(configuration: Configuration) {
        super({ ...configuration, httpApi: directHttpLibrary })
      }
    },
  )
}

// ------------------------------------------------------------------------------------------ errors

/** The HTTP status and metav1.Status of a client-node ApiException (its body is the raw text). */
export function apiStatus(err: unknown): { code: number; reason?: string; message?: string } | undefined {
  if (!isRecord(err) || typeof err.code !== 'number') return undefined
  let body: Json = err.body
  if (typeof body === 'string') {
    try {
      body = JSON.parse(body)
    } catch {
      body = undefined
    }
  }
  const status = isRecord(body) ? body : {}
  return {
    code: err.code,
    ...(typeof status.reason === 'string' ? { reason: status.reason } : {}),
    ...(typeof status.message === 'string' ? { message: status.message } : {}),
  }
}

/** Maps 404/409/410 to the port's errors; anything else is returned unchanged. */
export function toStoreError(err: unknown): unknown {
  const status = apiStatus(err)
  if (status === undefined) return err
  if (status.code === 404) return new NotFoundError(status.message ?? 'not found')
  if (status.code === 409) return new ConflictError(status.reason === 'AlreadyExists' ? 'AlreadyExists' : 'Conflict', status.message)
  if (status.code === 410) return new GoneError(status.message)
  return err
}

export function isNotFound(err: unknown): boolean {
  return apiStatus(err)?.code === 404 || err instanceof NotFoundError
}

async function mapped<T>(call: Promise<T>): Promise<T> {
  try {
    return await call
  } catch (err) {
    throw toStoreError(err)
  }
}

// ------------------------------------------------------------------------------------------ status merge (pure)

function stripNulls(value: Json): Json {
  if (Array.isArray(value)) return value.map(stripNulls)
  if (!isRecord(value)) return value
  const out: JsonRecord = {}
  for (const [key, child] of Object.entries(value)) if (child !== null && child !== undefined) out[key] = stripNulls(child)
  return out
}

function deepEqual(a: Json, b: Json): boolean {
  if (a === b) return true
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((item, i) => deepEqual(item, b[i]))
  if (isRecord(a) && isRecord(b)) {
    const keys = Object.keys(a)
    return keys.length === Object.keys(b).length && keys.every((k) => k in b && deepEqual(a[k], b[k]))
  }
  return false
}

/**
 * The status after a patch, with the Postgres backend's semantics: top-level keys replace, a null
 * value removes its key, and nulls are stripped everywhere (jsonb_strip_nulls).
 */
export function mergeStatus(current: Json, patch: Json): JsonRecord {
  const out: JsonRecord = isRecord(current) ? { ...current } : {}
  if (isRecord(patch)) {
    for (const [key, value] of Object.entries(patch)) {
      if (value === null) delete out[key]
      else if (value !== undefined) out[key] = value
    }
  }
  return stripNulls(out) as JsonRecord
}

/** RFC 7386 merge patch turning `current` into `desired` (desired holds no nulls; arrays are atomic). */
export function diffMergePatch(current: Json, desired: JsonRecord): JsonRecord {
  const patch: JsonRecord = {}
  const base = isRecord(current) ? current : {}
  for (const key of Object.keys(base)) if (!(key in desired)) patch[key] = null
  for (const [key, value] of Object.entries(desired)) {
    const old = base[key]
    if (isRecord(old) && isRecord(value)) {
      const inner = diffMergePatch(old, value)
      if (Object.keys(inner).length > 0) patch[key] = inner
    } else if (!deepEqual(old, value)) patch[key] = value
  }
  return patch
}

/**
 * A status patch as an RFC 7386 merge patch with the port's semantics whatever the stored status
 * is, or undefined when that needs the stored status. A merge patch replaces scalars and arrays
 * whole and deletes a key given null, like mergeStatus; it merges nested objects key by key, where
 * mergeStatus replaces them whole (so a patch holding one is left to the read-merge-write path).
 * Nulls inside arrays are stripped as mergeStatus strips them. Stored statuses carry no nulls
 * (this store strips them on every write, and the CRD schemas prune them except in a Run's nullable
 * exitCode), so the only difference: an exitCode another client left null stays until rewritten,
 * where the read path would drop it with this write.
 */
export function flatStatusPatch(patch: Json): JsonRecord | undefined {
  if (!isRecord(patch)) return undefined
  const out: JsonRecord = {}
  for (const [key, value] of Object.entries(patch)) {
    if (value === undefined) continue
    if (isRecord(value)) return undefined
    out[key] = Array.isArray(value) ? stripNulls(value) : value
  }
  return out
}

/** `desired` in full plus an explicit null for every key of `current` it drops (at any depth). */
export function applyConfiguration(current: Json, desired: JsonRecord): JsonRecord {
  const out: JsonRecord = {}
  const base = isRecord(current) ? current : {}
  for (const key of Object.keys(base)) if (!(key in desired)) out[key] = null
  for (const [key, value] of Object.entries(desired)) {
    const old = base[key]
    out[key] = isRecord(old) && isRecord(value) ? applyConfiguration(old, value) : value
  }
  return out
}

// ------------------------------------------------------------------------------------------ object mapping

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

function toKubeOwnerReferences(refs: OwnerReference[] | undefined): KubeObject['metadata']['ownerReferences'] {
  if (refs === undefined || refs.length === 0) return undefined
  // A single owner controls its dependent (kubectl shows "Controlled By").
  return refs.map((ref) => ({ apiVersion: ownerApiVersion(ref), kind: ref.kind, name: ref.name, uid: ref.uid, ...(refs.length === 1 ? { controller: true } : {}) }))
}

// ------------------------------------------------------------------------------------------ the store

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
  readonly #watch: Watch
  readonly #namespace: string | undefined
  readonly #fieldManager: string
  readonly #statusRetries: number
  /** Counters for tests and metrics. */
  readonly stats = { watches: 0, statusRetries: 0 }

  constructor(type: CustomResourceType, options: KubernetesStoreOptions) {
    this.kind = type.kind
    this.#type = type
    const kubeConfig = shareConnections(options.kubeConfig)
    this.#api = makeCustomObjectsApi(kubeConfig)
    this.#watch = new Watch(kubeConfig)
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
      const end = await this.#watchOnce(resourceVersion, signal, (rv, event) => {
        resourceVersion = rv
        if (event !== undefined) {
          events += 1
          onEvent(event)
        }
      })
      if (end === 'aborted') return
      // A server that closes at once again and again (a proxy, a bad LB) must not spin us.
      quickCloses = events === 0 && Date.now() - startedAt < 1000 ? quickCloses + 1 : 0
      if (quickCloses > 1) await abortableDelay(Math.min(30_000, 250 * 2 ** quickCloses), signal)
    }
  }

  /** One watch request; resolves how it ended, rejects with GoneError (410) or a transport error. */
  #watchOnce(resourceVersion: string, signal: AbortSignal, onEvent: (rv: string, event: WatchEvent<R> | undefined) => void): Promise<'aborted' | 'closed' | 'timeout'> {
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

// ------------------------------------------------------------------------------------------ task env Secrets

/** Name of the Secret holding a Task's env (`<task>-env`, shortened with a hash past 253 chars). */
export function taskEnvSecretName(taskName: string): string {
  const name = `${taskName}-env`
  return name.length <= 253 ? name : `${dnsLabel(taskName, 240)}-env`
}

export interface TaskEnvSecrets {
  /** Creates or replaces `<task>-env`, owned by the Task (garbage-collected with it). Returns the Secret's name. */
  put(taskName: string, taskUid: string, env: Record<string, string>): Promise<string>
  /** Deletes `<task>-env`; a missing Secret is fine. */
  delete(taskName: string): Promise<void>
}

export function createTaskEnvSecrets(kubeConfig: KubeConfig, namespace: string, options: { retries?: number } = {}): TaskEnvSecrets {
  const core = shareConnections(kubeConfig).makeApiClient(CoreV1Api)
  const retries = options.retries ?? 5
  const build = (taskName: string, taskUid: string, env: Record<string, string>): V1Secret => ({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: taskEnvSecretName(taskName),
      namespace,
      labels: { [LABELS.managedBy]: MANAGED_BY, [LABELS.partOf]: 'agent-gateway', [LABELS.task]: dnsLabel(taskName) },
      ownerReferences: [{ apiVersion: CRD_API_VERSION, kind: TASK_KIND, name: taskName, uid: taskUid, controller: true }],
    },
    type: 'Opaque',
    // data (not stringData) so a replace drops keys that left the env.
    data: Object.fromEntries(Object.entries(env).map(([k, v]) => [k, Buffer.from(v, 'utf8').toString('base64')])),
  })
  return {
    async put(taskName, taskUid, env) {
      const body = build(taskName, taskUid, env)
      const name = body.metadata?.name as string
      for (let attempt = 0; ; attempt += 1) {
        try {
          await core.createNamespacedSecret({ namespace, body, fieldManager: FIELD_MANAGER })
          return name
        } catch (err) {
          if (apiStatus(err)?.code !== 409) throw toStoreError(err)
        }
        try {
          const existing = await core.readNamespacedSecret({ name, namespace })
          await core.replaceNamespacedSecret({
            name,
            namespace,
            body: { ...body, metadata: { ...body.metadata, resourceVersion: existing.metadata?.resourceVersion } },
            fieldManager: FIELD_MANAGER,
          })
          return name
        } catch (err) {
          const code = apiStatus(err)?.code
          // 404: deleted between our create and read; 409: changed in between. Try again.
          if ((code !== 404 && code !== 409) || attempt + 1 >= retries) throw toStoreError(err)
        }
      }
    },
    async delete(taskName) {
      try {
        await core.deleteNamespacedSecret({ name: taskEnvSecretName(taskName), namespace })
      } catch (err) {
        if (!isNotFound(err)) throw toStoreError(err)
      }
    },
  }
}
