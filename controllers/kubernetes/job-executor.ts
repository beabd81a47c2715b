// The Kubernetes RunExecutor (src/scheduler/contract/ports.ts): one attempt of a Run = one sandboxed Job
// (controllers/kubernetes/job-spec.ts) running the shared bootstrap with the run.json contract.
//
// execute():
// 1. creates the per-run ConfigMap (script, run.json, bootstrap) and token Secret, both owned by
//    the Run, then the Job (deterministic name). A Job that already exists is ADOPTED: a controller
//    restarted mid-run re-attaches to its Job and never starts a second one for the same attempt;
// 2. watches the Job and its Pod (watches only wake it; it re-reads both, level-triggered, and
//    re-reads every resyncMs anyway) and decides with the pure classifyJob():
//      Complete → succeeded; Failed/DeadlineExceeded → timed_out; Failed otherwise → failed (exit
//      code from the container's terminated state); a container waiting with ImagePullBackOff,
//      ErrImagePull, CreateContainerConfigError (e.g. the task's env Secret is missing) or
//      InvalidImageName for longer than waitingGraceMs → infra_error (the Job controller never
//      fails such a pod: only activeDeadlineSeconds would, much later). The Job is deleted then;
//      the abort signal → the Job is deleted (propagationPolicy Background: the API default for
//      Jobs orphans the Pod) → cancelled;
// 3. ARCHIVES the log before anything is cleaned up: it follows the pod log while the container
//    runs (so a pod the Job controller deletes at its deadline still leaves its output) and reads
//    it once more at the end (the complete log when the pod still exists);
// 4. deletes the ConfigMap and the token Secret; the Job itself is left to ttlSecondsAfterFinished.
//
// Output: Kubernetes keeps one log per container with stdout and stderr MERGED (the API cannot
// separate them), so `stdout` carries everything in order (dependency install output, the
// bootstrap's sentinel line, the program's output and errors), truncated like the local executor
// (first outputLimitBytes, then a marker line), and `stderr` is empty. Timing comes from the log
// line timestamps (timestamps=true) and the container state: install = container start → sentinel
// line, program = sentinel line → container finish (or the last log line, if later).
// runtimeVersion: a bootstrap `hello` status line in the log if there is one, else the image tag.
import { readFileSync } from 'node:fs'
import { Writable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import { BatchV1Api, CoreV1Api, CustomObjectsApi, Log, Watch, type KubeConfig, type V1ConfigMap, type V1Job, type V1Pod, type V1Secret } from '@kubernetes/client-node'
import { systemTimerClock, type TimerClock } from '../../src/platform/clock.ts'
import { noAttemptResult, type ExecutionOutcome, type ExecutionRequest, type ExecutionResult, type RunExecutor } from '../../src/scheduler/contract/index.ts'
import { CRD_GROUP, CRD_VERSION, RUN_PLURAL } from './crds.ts'
import { buildRunConfigMap, buildRunJob, buildRunTokenSecret, LABELS, runConfigMapName, runJobName, runTokenSecretName, SCRIPT_CONTAINER, SENTINEL } from './job-spec.ts'
import { apiStatus, isNotFound } from './api-errors.ts'
import { shareConnections } from './kube-http.ts'
import { FIELD_MANAGER } from './kube-objects.ts'

const MiB = 1024 * 1024
/** Container waiting reasons that never resolve by themselves. */
export const FATAL_WAITING_REASONS: ReadonlySet<string> = new Set(['ImagePullBackOff', 'ErrImagePull', 'CreateContainerConfigError', 'InvalidImageName'])
const INSTALL_FAILED = '=== agent-gateway: dependency install failed ==='

// ------------------------------------------------------------------------------------------ pure parts

type Time = Date | string | undefined | null

function ms(value: Time): number | undefined {
  if (value === undefined || value === null) return undefined
  const t = value instanceof Date ? value.getTime() : Date.parse(value)
  return Number.isNaN(t) ? undefined : t
}

export type JobVerdict =
  | { state: 'active'; waiting?: { pod: string; reason: string; message: string } }
  | { state: 'finished'; outcome: Extract<ExecutionOutcome, 'succeeded' | 'failed' | 'timed_out'>; exitCode: number | null; reason?: string; message?: string }

interface Terminated {
  exitCode?: number
  reason?: string
  message?: string
  startedAt?: Time
  finishedAt?: Time
}

export function scriptContainerState(
  pod: V1Pod | undefined,
): { running?: { startedAt?: Time }; terminated?: Terminated; waiting?: { reason?: string; message?: string } } | undefined {
  const statuses = pod?.status?.containerStatuses ?? []
  const status = statuses.find((s) => s.name === SCRIPT_CONTAINER) ?? statuses[0]
  return status?.state as ReturnType<typeof scriptContainerState>
}

/** PURE: what the Job and its Pod say about the attempt. */
export function classifyJob(job: V1Job, pod: V1Pod | undefined): JobVerdict {
  const conditions = job.status?.conditions ?? []
  const holds = (type: string) => conditions.find((c) => c.type === type && c.status === 'True')
  const terminated = scriptContainerState(pod)?.terminated
  const exitCode = typeof terminated?.exitCode === 'number' ? terminated.exitCode : null
  if (holds('Complete') !== undefined) return { state: 'finished', outcome: 'succeeded', exitCode: exitCode ?? 0 }
  const failed = holds('Failed')
  if (failed !== undefined) {
    const outcome = failed.reason === 'DeadlineExceeded' ? 'timed_out' : 'failed'
    const reason = terminated?.reason !== undefined && terminated.reason !== 'Error' && terminated.reason !== 'Completed' ? terminated.reason : failed.reason
    return { state: 'finished', outcome, exitCode, ...(reason !== undefined ? { reason } : {}), ...(failed.message !== undefined ? { message: failed.message } : {}) }
  }
  const waiting = scriptContainerState(pod)?.waiting
  if (pod?.metadata?.name !== undefined && waiting?.reason !== undefined && FATAL_WAITING_REASONS.has(waiting.reason)) {
    return { state: 'active', waiting: { pod: pod.metadata.name, reason: waiting.reason, message: waiting.message ?? '' } }
  }
  return { state: 'active' }
}

const TIMESTAMP = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) /

export interface ParsedLog {
  /** The log without the kubelet's timestamps. */
  text: string
  bytes: number
  sentinelAtMs?: number
  lastLineAtMs?: number
  /** "python 3.12.7" from a bootstrap hello status line before the sentinel, if any. */
  runtimeVersion?: string
  sawSentinel: boolean
  installFailed: boolean
}

/**
 * PURE: strips the `timestamps=true` prefixes (only when every line has one, so a server that
 * ignores the flag cannot make us eat user text) and finds the bootstrap's markers.
 */
export function parsePodLog(raw: string): ParsedLog {
  const lines = raw.split('\n')
  const trailingNewline = lines.length > 0 && lines[lines.length - 1] === ''
  if (trailingNewline) lines.pop()
  const stamped = lines.length > 0 && lines.every((line) => TIMESTAMP.test(line))
  const out: string[] = []
  let sentinelAtMs: number | undefined
  let lastLineAtMs: number | undefined
  let runtimeVersion: string | undefined
  let sawSentinel = false
  let installFailed = false
  for (const line of lines) {
    let content = line
    let at: number | undefined
    if (stamped) {
      const match = TIMESTAMP.exec(line) as RegExpExecArray
      at = ms(match[1])
      content = line.slice(match[0].length)
      if (at !== undefined) lastLineAtMs = at
    }
    if (!sawSentinel) {
      if (content === SENTINEL) {
        sawSentinel = true
        sentinelAtMs = at
      } else if (content === INSTALL_FAILED) installFailed = true
      else if (runtimeVersion === undefined && content.startsWith('{"event"')) {
        try {
          const event = JSON.parse(content) as { event?: string; runtime?: string; version?: string }
          if (event.event === 'hello' && typeof event.version === 'string') runtimeVersion = `${event.runtime ?? ''} ${event.version}`.trim().slice(0, 60)
        } catch {
          // not a status line
        }
      }
    }
    out.push(content)
  }
  const text = out.join('\n') + (trailingNewline ? '\n' : '')
  return {
    text,
    bytes: Buffer.byteLength(text),
    sawSentinel,
    installFailed,
    ...(sentinelAtMs !== undefined ? { sentinelAtMs } : {}),
    ...(lastLineAtMs !== undefined ? { lastLineAtMs } : {}),
    ...(runtimeVersion !== undefined ? { runtimeVersion } : {}),
  }
}

/** The local executor's truncation: the first `cap` bytes, then a marker line. */
export function truncateOutput(text: string, cap: number, name = 'stdout', totalBytes = Buffer.byteLength(text)): string {
  const bytes = Buffer.from(text)
  if (totalBytes <= cap && bytes.length <= cap) return text
  return `${bytes.subarray(0, cap).toString('utf8')}\n[agent-gateway: ${name} truncated at ${cap} of ${totalBytes} bytes]\n`
}

/** "python 3.12-slim" from `python:3.12-slim` / `reg:5000/agw/python:3.12@sha256:…`. */
export function imageRuntimeVersion(runtime: string, image: string): string {
  const withoutDigest = image.split('@')[0] as string
  const lastSlash = withoutDigest.lastIndexOf('/')
  const colon = withoutDigest.lastIndexOf(':')
  const tag = colon > lastSlash ? withoutDigest.slice(colon + 1) : 'latest'
  return `${runtime} ${tag}`
}

// ------------------------------------------------------------------------------------------ adapter

export interface JobExecutorOptions {
  kubeConfig: KubeConfig
  /** Namespace of Runs whose request does not say (requests normally do). */
  namespace: string
  images: { python: string; node: string }
  /** The admin's Job template (RUNNER_JOB_TEMPLATE_FILE); DEFAULT_JOB_TEMPLATE when absent. */
  template?: V1Job
  clock?: TimerClock
  /** How long a container may wait with an image/config error before the run fails (default 60 s). */
  waitingGraceMs?: number
  /** Re-read the Job and Pod at least this often, watch events or not (default 5 s). */
  resyncMs?: number
  /** Kept output (default 1 MiB), as the local executor. */
  outputLimitBytes?: number
  /** Most bytes read from the pod log (default 4 × outputLimitBytes). */
  logLimitBytes?: number
  installTimeoutSec?: number
  startupAllowanceSec?: number
  ttlSecondsAfterFinished?: number
  pipIndexUrl?: string
  npmRegistry?: string
  npmCli?: string
  /** Bootstrap texts (default: runner-image/bootstrap/bootstrap.py and .mjs of this checkout). */
  bootstrap?: { python: string; node: string }
  /** Follow the pod log while it runs (default true). */
  followLogs?: boolean
  onError?: (where: string, err: unknown) => void
}

/** ExecutionRequest plus the attempt number (a retry is a new Job under the same Run). */
export type KubernetesExecutionRequest = ExecutionRequest & { attempt?: number }

const BOOTSTRAP_DIR = fileURLToPath(new URL('../../runner-image/bootstrap/', import.meta.url))

let bootstrapCache: { python: string; node: string } | undefined
function shippedBootstrap(): { python: string; node: string } {
  bootstrapCache ??= {
    python: readFileSync(`${BOOTSTRAP_DIR}bootstrap.py`, 'utf8'),
    node: readFileSync(`${BOOTSTRAP_DIR}bootstrap.mjs`, 'utf8'),
  }
  return bootstrapCache
}

/** Wakes the wait loop: watch events, timers, the abort signal. */
class Waker {
  #resolve: (() => void) | undefined
  #pending = false
  poke(): void {
    const resolve = this.#resolve
    this.#resolve = undefined
    if (resolve !== undefined) resolve()
    else this.#pending = true
  }
  wait(): Promise<void> {
    if (this.#pending) {
      this.#pending = false
      return Promise.resolve()
    }
    return new Promise((resolve) => {
      this.#resolve = resolve
    })
  }
}

/** A bounded in-memory sink for the followed log. */
class LogSink extends Writable {
  readonly chunks: Buffer[] = []
  bytes = 0
  readonly #cap: number
  constructor(cap: number) {
    super()
    this.#cap = cap
    // client-node's Log pipes the response into us without handling its errors: aborting the
    // follow (or a dropped connection) would otherwise be an uncaught AbortError.
    this.on('pipe', (source: NodeJS.ReadableStream) => source.on('error', () => {}))
  }
  override _write(chunk: Buffer, _encoding: string, callback: () => void): void {
    if (this.bytes < this.#cap) {
      const part = chunk.subarray(0, this.#cap - this.bytes)
      this.chunks.push(part)
      this.bytes += part.length
    }
    callback()
  }
  text(): string {
    return Buffer.concat(this.chunks).toString('utf8')
  }
}

export class KubernetesJobExecutor implements RunExecutor {
  readonly kind = 'kubernetes' as const
  readonly #options: JobExecutorOptions
  readonly #clock: TimerClock
  readonly #batch: BatchV1Api
  readonly #core: CoreV1Api
  readonly #custom: CustomObjectsApi
  readonly #watch: Watch
  readonly #log: Log
  /** Counters for tests and metrics. */
  readonly stats = { created: 0, adopted: 0, cancelled: 0, infraErrors: 0, logReads: 0, waitingPods: 0 }

  constructor(options: JobExecutorOptions) {
    this.#options = options
    this.#clock = options.clock ?? systemTimerClock
    const kubeConfig = shareConnections(options.kubeConfig)
    this.#batch = kubeConfig.makeApiClient(BatchV1Api)
    this.#core = kubeConfig.makeApiClient(CoreV1Api)
    this.#custom = kubeConfig.makeApiClient(CustomObjectsApi)
    this.#watch = new Watch(kubeConfig)
    this.#log = new Log(kubeConfig)
  }

  async execute(input: ExecutionRequest): Promise<ExecutionResult> {
    const request = input as KubernetesExecutionRequest
    const namespace = request.namespace || this.#options.namespace
    const attempt = request.attempt ?? 1
    const jobName = runJobName(request.runName, attempt)
    const startedAt = this.#clock.now()
    const image = this.#options.images[request.runtime]
    const fallbackVersion = imageRuntimeVersion(request.runtime, image)
    const bare = (outcome: ExecutionOutcome, error?: string): ExecutionResult => noAttemptResult(outcome, { startedAt, finishedAt: this.#clock.now() }, fallbackVersion, error)

    let job = await this.#readJob(namespace, jobName)
    if (job === undefined) {
      if (request.signal.aborted) return bare('cancelled')
      const runUid = request.runUid ?? (await this.#runUid(namespace, request.runName))
      if (runUid === undefined) return bare('infra_error', `Run ${namespace}/${request.runName} not found`)
      const owned = { ...request, namespace, runUid }
      try {
        job = await this.#createObjects(owned, jobName, attempt)
      } catch (err) {
        await this.#cleanup(namespace, jobName)
        return bare('infra_error', `cannot create the Job: ${describe(err)}`)
      }
    } else this.stats.adopted += 1

    return this.#follow(request, namespace, job, startedAt, fallbackVersion)
  }

  async #runUid(namespace: string, runName: string): Promise<string | undefined> {
    try {
      const run = (await this.#custom.getNamespacedCustomObject({ group: CRD_GROUP, version: CRD_VERSION, plural: RUN_PLURAL, namespace, name: runName })) as {
        metadata?: { uid?: string }
      }
      return run.metadata?.uid
    } catch (err) {
      if (isNotFound(err)) return undefined
      throw err
    }
  }

  async #readJob(namespace: string, name: string): Promise<V1Job | undefined> {
    try {
      return await this.#batch.readNamespacedJob({ name, namespace })
    } catch (err) {
      if (isNotFound(err)) return undefined
      throw err
    }
  }

  /** ConfigMap + token Secret (replaced if left over from a crash before the Job), then the Job. */
  async #createObjects(request: KubernetesExecutionRequest & { runUid: string }, jobName: string, attempt: number): Promise<V1Job> {
    const options = this.#options
    const { namespace } = request
    const configMapName = runConfigMapName(jobName)
    const bootstrap = options.bootstrap ?? shippedBootstrap()
    const urls = {
      ...(options.pipIndexUrl !== undefined ? { pipIndexUrl: options.pipIndexUrl } : {}),
      ...(options.npmRegistry !== undefined ? { npmRegistry: options.npmRegistry } : {}),
      ...(options.npmCli !== undefined ? { npmCli: options.npmCli } : {}),
    }
    const configMap = buildRunConfigMap({ name: configMapName, jobName, request, attempt, source: request.source, bootstrapSource: bootstrap[request.runtime], ...urls })
    await this.#createOrReplace('configmap', configMap)
    let tokenSecretName: string | undefined
    if (request.helper !== undefined) {
      tokenSecretName = runTokenSecretName(jobName)
      await this.#createOrReplace('secret', buildRunTokenSecret({ name: tokenSecretName, jobName, request, token: request.helper.token, attempt }))
    }
    const body = buildRunJob(options.template, {
      request,
      images: options.images,
      runConfigMapName: configMapName,
      attempt,
      ...(tokenSecretName !== undefined ? { runTokenSecretName: tokenSecretName } : {}),
      ...(options.installTimeoutSec !== undefined ? { installTimeoutSec: options.installTimeoutSec } : {}),
      ...(options.startupAllowanceSec !== undefined ? { startupAllowanceSec: options.startupAllowanceSec } : {}),
      ...(options.ttlSecondsAfterFinished !== undefined ? { ttlSecondsAfterFinished: options.ttlSecondsAfterFinished } : {}),
      ...urls,
    })
    try {
      const created = await this.#batch.createNamespacedJob({ namespace, body, fieldManager: FIELD_MANAGER })
      this.stats.created += 1
      return created
    } catch (err) {
      if (apiStatus(err)?.code !== 409) throw err
      this.stats.adopted += 1 // created by another executor between our read and our create
      return this.#batch.readNamespacedJob({ name: jobName, namespace })
    }
  }

  async #createOrReplace(kind: 'configmap' | 'secret', body: V1ConfigMap | V1Secret): Promise<void> {
    const name = body.metadata?.name as string
    const namespace = body.metadata?.namespace as string
    try {
      if (kind === 'configmap') await this.#core.createNamespacedConfigMap({ namespace, body, fieldManager: FIELD_MANAGER })
      else await this.#core.createNamespacedSecret({ namespace, body, fieldManager: FIELD_MANAGER })
      return
    } catch (err) {
      if (apiStatus(err)?.code !== 409) throw err
    }
    const existing = kind === 'configmap' ? await this.#core.readNamespacedConfigMap({ name, namespace }) : await this.#core.readNamespacedSecret({ name, namespace })
    const replacement = { ...body, metadata: { ...body.metadata, resourceVersion: existing.metadata?.resourceVersion } }
    if (kind === 'configmap') await this.#core.replaceNamespacedConfigMap({ name, namespace, body: replacement, fieldManager: FIELD_MANAGER })
    else await this.#core.replaceNamespacedSecret({ name, namespace, body: replacement, fieldManager: FIELD_MANAGER })
  }

  async #newestPod(namespace: string, jobName: string, jobUid: string | undefined): Promise<V1Pod | undefined> {
    const pods = await this.#core.listNamespacedPod({ namespace, labelSelector: `${LABELS.job}=${jobName}` })
    const owned = pods.items.filter((pod) => jobUid === undefined || (pod.metadata?.ownerReferences ?? []).some((ref) => ref.uid === jobUid))
    owned.sort((a, b) => (ms(b.metadata?.creationTimestamp) ?? 0) - (ms(a.metadata?.creationTimestamp) ?? 0))
    return owned[0]
  }

  async #follow(request: KubernetesExecutionRequest, namespace: string, initial: V1Job, startedAt: Date, fallbackVersion: string): Promise<ExecutionResult> {
    const options = this.#options
    const jobName = initial.metadata?.name as string
    const jobUid = initial.metadata?.uid
    const graceMs = options.waitingGraceMs ?? 60_000
    const resyncMs = options.resyncMs ?? 5_000
    const outputCap = options.outputLimitBytes ?? MiB
    const logCap = options.logLimitBytes ?? 4 * outputCap
    const waker = new Waker()
    const watches = new Map<string, AbortController | 'starting'>()
    const timers = new Set<unknown>()
    const waitingSince = new Map<string, number>()
    const sink = new LogSink(logCap)
    let follower: { pod: string; controller?: AbortController } | undefined
    const onAbort = (): void => waker.poke()
    request.signal.addEventListener('abort', onAbort, { once: true })
    // One pending timer per purpose (resync, grace): re-arming replaces it.
    const armed = new Map<string, unknown>()
    const later = (purpose: string, delay: number): void => {
      const previous = armed.get(purpose)
      if (previous !== undefined) {
        this.#clock.clearTimeout(previous)
        timers.delete(previous)
      }
      const handle = this.#clock.setTimeout(
        () => {
          timers.delete(handle)
          armed.delete(purpose)
          waker.poke()
        },
        Math.max(0, delay),
      )
      timers.add(handle)
      armed.set(purpose, handle)
    }
    const ensureWatch = (key: string, path: string, query: Record<string, string>): void => {
      if (watches.has(key)) return
      watches.set(key, 'starting')
      this.#watch
        .watch(
          path,
          { ...query, allowWatchBookmarks: 'true' },
          () => waker.poke(),
          () => {
            watches.delete(key) // ended: re-opened on the next resync
          },
        )
        .then(
          (controller) => {
            if (watches.get(key) === 'starting') watches.set(key, controller)
            else controller.abort()
          },
          () => watches.delete(key),
        )
    }
    const stopAll = (): void => {
      request.signal.removeEventListener('abort', onAbort)
      for (const entry of watches.values()) if (entry !== 'starting') entry.abort()
      watches.clear()
      for (const handle of timers) this.#clock.clearTimeout(handle)
      timers.clear()
      follower?.controller?.abort()
    }

    try {
      let job: V1Job | undefined = initial
      let pod: V1Pod | undefined
      let verdict: JobVerdict
      for (;;) {
        if (request.signal.aborted) {
          this.stats.cancelled += 1
          const archived = await this.#archive(namespace, pod, sink, follower !== undefined) // while the pod still exists
          await this.#deleteJob(namespace, jobName)
          await this.#cleanup(namespace, jobName)
          return this.#result('cancelled', null, request, archived, pod, job, startedAt, fallbackVersion, outputCap)
        }
        ensureWatch('job', `/apis/batch/v1/namespaces/${namespace}/jobs`, { fieldSelector: `metadata.name=${jobName}` })
        ensureWatch('pods', `/api/v1/namespaces/${namespace}/pods`, { labelSelector: `${LABELS.job}=${jobName}` })
        job = await this.#readJob(namespace, jobName)
        if (job === undefined || (jobUid !== undefined && job.metadata?.uid !== jobUid)) {
          this.stats.infraErrors += 1
          const archived = await this.#archive(namespace, pod, sink, follower !== undefined)
          await this.#cleanup(namespace, jobName)
          return this.#result(
            'infra_error',
            null,
            request,
            archived,
            pod,
            undefined,
            startedAt,
            fallbackVersion,
            outputCap,
            `Job ${namespace}/${jobName} was deleted before it finished`,
          )
        }
        pod = await this.#newestPod(namespace, jobName, jobUid)
        const state = scriptContainerState(pod)
        if (
          options.followLogs !== false &&
          pod?.metadata?.name !== undefined &&
          follower?.pod !== pod.metadata.name &&
          (state?.running !== undefined || state?.terminated !== undefined)
        ) {
          follower?.controller?.abort()
          const current: { pod: string; controller?: AbortController } = { pod: pod.metadata.name }
          follower = current
          sink.chunks.length = 0
          sink.bytes = 0
          this.#log
            .log(namespace, current.pod, SCRIPT_CONTAINER, sink, { follow: true, timestamps: true, limitBytes: logCap })
            .then((controller) => {
              current.controller = controller
              if (follower !== current) controller.abort()
            })
            .catch((err: unknown) => options.onError?.('follow log', err))
        }
        verdict = classifyJob(job, pod)
        if (verdict.state === 'finished') break
        if (verdict.waiting !== undefined) {
          const key = `${verdict.waiting.pod}/${verdict.waiting.reason}`
          const nowMs = this.#clock.now().getTime()
          const since = waitingSince.get(key) ?? nowMs
          if (!waitingSince.has(key)) this.stats.waitingPods += 1
          waitingSince.set(key, since)
          if (nowMs - since >= graceMs) {
            // The Job controller would leave this pod waiting until the deadline: fail it now.
            this.stats.infraErrors += 1
            await this.#deleteJob(namespace, jobName)
            await this.#cleanup(namespace, jobName)
            const result = this.#result(
              'infra_error',
              null,
              request,
              parsePodLog(''),
              pod,
              job,
              startedAt,
              fallbackVersion,
              outputCap,
              `${verdict.waiting.reason}: ${verdict.waiting.message}`.trim(),
            )
            return { ...result, runtimeVersion: fallbackVersion }
          }
          later('grace', since + graceMs - nowMs)
        }
        later('resync', resyncMs)
        await waker.wait()
      }
      const archived = await this.#archive(namespace, pod, sink, follower !== undefined)
      await this.#cleanup(namespace, jobName)
      const error = verdict.outcome === 'succeeded' ? undefined : describeFailure(verdict, archived)
      return this.#result(verdict.outcome, verdict.exitCode, request, archived, pod, job, startedAt, fallbackVersion, outputCap, error)
    } finally {
      stopAll()
    }
  }

  /** The pod log: a final complete read when the pod still exists, else what the follower kept. */
  async #archive(namespace: string, pod: V1Pod | undefined, sink: LogSink, followed: boolean): Promise<ParsedLog> {
    const name = pod?.metadata?.name
    if (name !== undefined) {
      try {
        this.stats.logReads += 1
        const limitBytes = this.#options.logLimitBytes ?? 4 * (this.#options.outputLimitBytes ?? MiB)
        const text = await this.#core.readNamespacedPodLog({ name, namespace, container: SCRIPT_CONTAINER, timestamps: true, limitBytes })
        if (typeof text === 'string' && (text.length > 0 || !followed || sink.bytes === 0)) return parsePodLog(text)
      } catch (err) {
        if (!isNotFound(err) && apiStatus(err)?.code !== 400) this.#options.onError?.('read log', err)
      }
    }
    return parsePodLog(sink.text())
  }

  #result(
    outcome: ExecutionOutcome,
    exitCode: number | null,
    request: KubernetesExecutionRequest,
    log: ParsedLog,
    pod: V1Pod | undefined,
    job: V1Job | undefined,
    requestedAt: Date,
    fallbackVersion: string,
    outputCap: number,
    error?: string,
  ): ExecutionResult {
    const container = scriptContainerState(pod)
    const terminated = container?.terminated
    const containerStart = ms(terminated?.startedAt) ?? ms(container?.running?.startedAt) ?? ms(pod?.status?.startTime) ?? ms(job?.status?.startTime)
    const startedAtMs = containerStart ?? requestedAt.getTime()
    const ended = ms(terminated?.finishedAt) ?? ms(job?.status?.completionTime) ?? this.#clock.now().getTime()
    // Container times have 1 s resolution, log timestamps nanoseconds: take the later.
    const finishedAtMs = Math.max(ended, log.lastLineAtMs ?? ended, startedAtMs)
    const programStartMs = log.sentinelAtMs ?? (log.sawSentinel || request.dependencies.length === 0 ? startedAtMs : finishedAtMs)
    const installDurationMs = request.dependencies.length === 0 ? 0 : Math.max(0, Math.min(programStartMs, finishedAtMs) - startedAtMs)
    return {
      outcome,
      exitCode,
      stdout: truncateOutput(log.text, outputCap, 'stdout'),
      stderr: '',
      stdoutBytes: log.bytes,
      stderrBytes: 0,
      startedAt: new Date(startedAtMs),
      finishedAt: new Date(finishedAtMs),
      durationMs: Math.max(0, finishedAtMs - Math.max(programStartMs, startedAtMs)),
      installDurationMs,
      runtimeVersion: log.runtimeVersion ?? fallbackVersion,
      ...(error !== undefined ? { error } : {}),
    }
  }

  async #deleteJob(namespace: string, name: string): Promise<void> {
    try {
      // Background: the Pod goes with the Job (the API default for Jobs orphans it).
      await this.#batch.deleteNamespacedJob({ name, namespace, propagationPolicy: 'Background' })
    } catch (err) {
      if (!isNotFound(err)) this.#options.onError?.('delete job', err)
    }
  }

  /** Per-run ConfigMap and token Secret; best effort (they also go with the Run). */
  async #cleanup(namespace: string, jobName: string): Promise<void> {
    const ignore = (err: unknown): void => {
      if (!isNotFound(err)) this.#options.onError?.('cleanup', err)
    }
    await Promise.all([
      this.#core.deleteNamespacedConfigMap({ name: runConfigMapName(jobName), namespace }).catch(ignore),
      this.#core.deleteNamespacedSecret({ name: runTokenSecretName(jobName), namespace }).catch(ignore),
    ])
  }
}

function describe(err: unknown): string {
  const status = apiStatus(err)
  if (status !== undefined) return `${status.code}${status.reason !== undefined ? ` ${status.reason}` : ''}: ${status.message ?? ''}`.trim()
  return err instanceof Error ? err.message : String(err)
}

function describeFailure(verdict: Extract<JobVerdict, { state: 'finished' }>, log: ParsedLog): string {
  if (verdict.outcome === 'timed_out') return `DeadlineExceeded: ${verdict.message ?? 'the Job ran longer than its activeDeadlineSeconds'}`
  if (log.installFailed) return 'dependency install failed'
  if (verdict.reason === 'OOMKilled') return 'OOMKilled: the script exceeded its memory limit'
  if (verdict.exitCode !== null)
    return `exited with code ${verdict.exitCode}${verdict.reason !== undefined && verdict.reason !== 'BackoffLimitExceeded' ? ` (${verdict.reason})` : ''}`
  return verdict.reason ?? verdict.message ?? 'the Job failed'
}

export function createJobExecutor(options: JobExecutorOptions): KubernetesJobExecutor {
  return new KubernetesJobExecutor(options)
}
