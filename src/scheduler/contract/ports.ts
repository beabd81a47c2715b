// The ports between the scheduler and its controllers. The controllers (controllers/) depend on
// these and on nothing else of the scheduler; the adapters implement them:
// - ResourceStore: Kubernetes-shaped storage of Task and Run resources. controllers/local/
//   postgres-store.ts (the embedded Postgres/PGlite backend) and controllers/kubernetes/store.ts
//   (custom resources on an API server), so the reconcilers run unchanged on both;
// - RunExecutor: runs ONE attempt of a Run and reports what happened. controllers/local/
//   sandbox-executor.ts (a bubblewrap sandbox) and controllers/kubernetes/job-executor.ts (a Job);
// - RunLedger: the money side of a run, which the RunController calls (src/scheduler implements it).
import type { Runtime, TriggerType } from '../../catalog/schemas/scheduler-vocabulary.ts'
import type { ExecutionOutcome } from './enums.ts'

// ---------------------------------------------------------------- ResourceStore
// Semantics follow the API server:
// - resourceVersion is an opaque string; a write with a stale one fails with ConflictError('Conflict') (409);
// - create of an existing (namespace, name) fails with ConflictError('AlreadyExists') (409);
// - generation counts spec changes only; status is a subresource that never bumps it;
// - delete cascades (background GC) to objects whose ownerReferences name the deleted uid;
// - watch resumes from a resourceVersion; one older than the retained history throws GoneError
//   (410) and the caller must relist (controllers/informer.ts does).

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
  /**
   * Versions the watcher already holds (an informer that put its own writes' answers in its
   * cache): the ADDED or MODIFIED event of one of them may be left out without being decoded, the
   * watch still moving past it, and taken off. Deletes are always delivered. A store may ignore it
   * and deliver everything.
   */
  held?: HeldVersions
}

/** resourceVersion → key (`namespace/name`) of the object at that version; a Map fits. */
export interface HeldVersions {
  get(resourceVersion: string): string | undefined
  delete(resourceVersion: string): boolean
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

// ---------------------------------------------------------------- RunExecutor
// The run controller owns the money and the resources; an executor only executes. Both adapters run
// the same bootstrap (runner-image/bootstrap), so task code behaves identically on either.

export interface ExecutionRequest {
  /** The Run resource's name (= the API's run id) and namespace. */
  runName: string
  namespace: string
  /** The owning Task resource (ownerReferences of a Job). */
  taskName: string
  taskUid?: string
  runUid?: string
  runtime: Runtime
  source: string
  entrypoint: string
  /** Task env, decrypted. The Kubernetes adapter ignores it and mounts envSecretName instead. */
  env: Record<string, string>
  /** Name of the Secret (owned by the Task) holding env, on Kubernetes. */
  envSecretName?: string
  dependencies: string[]
  maxRuntimeSec: number
  /** Per-run helper endpoint and its bearer token (AGW_HELPER_URL / AGW_RUN_TOKEN). */
  helper?: { url: string; token: string }
  /** Aborted when the Run is deleted or cancelled mid-flight. */
  signal: AbortSignal
}

export interface ExecutionResult {
  outcome: ExecutionOutcome
  exitCode: number | null
  /** Truncated captured output (with a marker line when cut). */
  stdout: string
  stderr: string
  /** Full byte counts produced. */
  stdoutBytes: number
  stderrBytes: number
  startedAt: Date
  finishedAt: Date
  /** Program phase only (billed at the sandbox rate). */
  durationMs: number
  /** Dependency install phase (billed at the install rate). */
  installDurationMs: number
  /** The interpreter that really ran, e.g. "python 3.11.2". */
  runtimeVersion: string
  /** Why it failed, in words, when it did (image pull error, missing Secret, OOM, …). */
  error?: string
  /** Nothing ran: the run was released before it started (costs nothing). */
  notStarted?: boolean
}

/** The result of an attempt that produced nothing (never started, lost, cancelled first): empty output, zero durations. */
export function noAttemptResult(outcome: ExecutionOutcome, times: { startedAt: Date; finishedAt: Date }, runtimeVersion: string, error?: string): ExecutionResult {
  return {
    outcome,
    exitCode: null,
    stdout: '',
    stderr: '',
    stdoutBytes: 0,
    stderrBytes: 0,
    startedAt: times.startedAt,
    finishedAt: times.finishedAt,
    durationMs: 0,
    installDurationMs: 0,
    runtimeVersion,
    ...(error !== undefined ? { error } : {}),
  }
}

export interface RunExecutor {
  readonly kind: 'local' | 'kubernetes'
  execute(request: ExecutionRequest): Promise<ExecutionResult>
}

// ---------------------------------------------------------------- RunLedger

/** A settled run as the ledger reports it. */
export interface SettledRun {
  status: string
  cost_micros: bigint
  exit_code: number | null
  started_at: Date | null
  finished_at: Date | null
}

/** The execution request the ledger prepares; the controller adds the namespace and the uids. */
export type PreparedRequest = Omit<ExecutionRequest, 'namespace' | 'taskUid' | 'runUid'>

/** The ledger side of a run, which the RunController calls. */
export interface RunLedger {
  /**
   * The dispatch decision, once per run name (funding check, reservation), and for a run claimed
   * (or running, when adopting) its execution request with a fresh helper token. `ahead`: the
   * run's instant has not come yet; a run that would be skipped only because another run of the
   * task is in flight is deferred instead (that run may finish before the slot).
   */
  dispatchRun(input: {
    runId: string
    taskId: string
    trigger: TriggerType
    ahead?: boolean
    signal: AbortSignal
  }): Promise<{ kind: 'claimed'; run: SettledRun & { status: string }; request?: PreparedRequest } | { kind: 'skipped'; reason: string; message: string } | { kind: 'deferred' }>
  /** Marks runs started (claimed → running; the `adopt` ones also running → running); returns those this call started. */
  startRuns(runIds: readonly string[], adopt?: readonly string[]): Promise<Set<string>>
  finishRun(runId: string, result: ExecutionResult): Promise<{ run: SettledRun }>
  /** Settles a claimed run that never started (deleted or cancelled before its instant): no cost. */
  releaseRun(runId: string, reason: string): Promise<{ run: SettledRun }>
  lostResult(reason: string): ExecutionResult
  /** Runs claimed or running in the ledger since before `before` (for the orphan sweep). */
  openRuns?(before: Date): Promise<{ id: string; status: string }[]>
}
