// The per-run Kubernetes objects of one attempt, PURE (no I/O, no clock): the Job that runs the
// shared bootstrap (runner-image/bootstrap) in a sandboxed pod, the ConfigMap with the script,
// run.json and the bootstrap itself, and the Secret with the run's helper token.
//
// A cluster admin may supply a Job template (the Helm chart renders it into a ConfigMap, key
// `job-template.yaml`; the controller reads the file named by RUNNER_JOB_TEMPLATE_FILE). The
// template contributes scheduling and sizing (runtimeClassName, hostUsers, resources, /tmp size,
// nodeSelector, tolerations, affinity, priorityClassName, imagePullSecrets, labels, annotations,
// podFailurePolicy, ttlSecondsAfterFinished). buildRunJob fills in everything per run and FORCES
// the sandbox fields (restricted Pod Security), so no template can weaken them.
//
// Layout inside the pod (the same as the local bubblewrap sandbox, controllers/local/sandbox.ts):
//   /agw/run.json, /agw/bootstrap.{py,mjs}   ConfigMap, read-only
//   /work/script/<entrypoint>                ConfigMap, read-only
//   /tmp                                     emptyDir (medium Memory, sized): HOME, installs
// The bootstrap ships in the ConfigMap, so any python/node image runs the exact same bootstrap.
import { createHash } from 'node:crypto'
import type { V1ConfigMap, V1Container, V1EnvVar, V1Job, V1OwnerReference, V1PodSpec, V1Secret, V1Volume, V1VolumeMount } from '@kubernetes/client-node'
import type { ExecutionRequest } from '../../src/scheduler/contract/index.ts'
import { CRD_API_VERSION, RUN_KIND } from './crds.ts'

export const SCRIPT_CONTAINER = 'script'
export const SANDBOX_UID = 65534
export const SENTINEL = '=== agent-gateway: program output follows ==='

/** Labels every per-run object carries (the chart's egress NetworkPolicy selects the component). */
export const LABELS = {
  name: 'app.kubernetes.io/name',
  component: 'app.kubernetes.io/component',
  partOf: 'app.kubernetes.io/part-of',
  managedBy: 'app.kubernetes.io/managed-by',
  task: 'jobs.agent-gateway.dev/task',
  run: 'jobs.agent-gateway.dev/run',
  job: 'jobs.agent-gateway.dev/job',
  attempt: 'jobs.agent-gateway.dev/attempt',
} as const
export const COMPONENT_TASK_RUN = 'task-run'
export const MANAGED_BY = 'agent-gateway-controller'
/** Full (unshortened) names, since label values are capped at 63 characters. */
export const ANNOTATIONS = { task: 'jobs.agent-gateway.dev/task-name', run: 'jobs.agent-gateway.dev/run-name' } as const

/** Keys of the per-run ConfigMap (prefixed so a script named run.json cannot collide). */
export const CONFIG_KEYS = { runJson: 'agw.run.json', bootstrap: 'agw.bootstrap', scriptPrefix: 'script.' } as const
export const TOKEN_KEY = 'token'

/** Kubernetes' ConfigMap/Secret data limit is 1 MiB; keep headroom for metadata. */
export const MAX_CONFIGMAP_BYTES = 1_000_000

export const DEFAULT_IMAGES = { python: 'python:3.12-slim', node: 'node:22-slim' } as const
/** npm's CLI in the official node images (bootstrap.mjs spawns it for installs). */
export const DEFAULT_NPM_CLI = '/usr/local/lib/node_modules/npm/bin/npm-cli.js'

/**
 * The template used when the admin supplies none: sized for one short script and a few package
 * installs (a 512Mi memory limit, as the local sandbox's default), /tmp in memory and bounded so a
 * run cannot fill the node's disk. Only fields an admin may tune live here; the sandbox fields are
 * forced by buildRunJob either way.
 */
export const DEFAULT_JOB_TEMPLATE: V1Job = {
  apiVersion: 'batch/v1',
  kind: 'Job',
  metadata: {},
  spec: {
    ttlSecondsAfterFinished: 300,
    template: {
      metadata: {},
      spec: {
        containers: [
          {
            name: SCRIPT_CONTAINER,
            resources: {
              requests: { cpu: '250m', memory: '256Mi', 'ephemeral-storage': '100Mi' },
              limits: { cpu: '1', memory: '512Mi', 'ephemeral-storage': '1Gi' },
            },
          },
        ],
        volumes: [{ name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: '256Mi' } }],
      },
    },
  },
}

export interface RunJobInput {
  request: Pick<ExecutionRequest, 'runName' | 'namespace' | 'taskName' | 'runUid' | 'runtime' | 'entrypoint' | 'dependencies' | 'maxRuntimeSec' | 'envSecretName' | 'helper'>
  images: { python: string; node: string }
  runConfigMapName: string
  /** Secret holding the helper token under key `token` (required when request.helper is set). */
  runTokenSecretName?: string
  /** Attempt number of the Run (1 = first); part of the Job name so each attempt has its own Job. */
  attempt?: number
  /** Dependency install budget added to activeDeadlineSeconds when there are dependencies (default 300). */
  installTimeoutSec?: number
  /** Scheduling + image pull + interpreter start, added to activeDeadlineSeconds (default 30). */
  startupAllowanceSec?: number
  /** Default when the template sets none (default 300). */
  ttlSecondsAfterFinished?: number
  pipIndexUrl?: string
  npmRegistry?: string
  npmCli?: string
}

// ------------------------------------------------------------------------------------------ names

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/

function shortHash(value: string): string {
  return createHash('sha256').update(value).digest('hex').slice(0, 8)
}

/**
 * A DNS-1123 label of at most `max` characters derived from `value`: unchanged when it already is
 * one, else lower-cased, '.'/'_' → '-', and cut with a hash of the full value so distinct inputs
 * stay distinct.
 */
export function dnsLabel(value: string, max = 63): string {
  if (value.length <= max && DNS_LABEL.test(value)) return value
  const cleaned = value
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+|-+$/g, '')
  if (cleaned.length <= max && cleaned === value) return cleaned
  const hash = shortHash(value)
  const head = cleaned.slice(0, max - hash.length - 1).replace(/-+$/, '')
  return head.length > 0 ? `${head}-${hash}` : hash
}

/** A label value (≤ 63, [A-Za-z0-9._-], alphanumeric ends); long or odd names get a hash suffix. */
export function labelValue(value: string): string {
  if (value.length <= 63 && LABEL_VALUE.test(value)) return value
  const hash = shortHash(value)
  const head = value
    .replace(/[^A-Za-z0-9._-]+/g, '-')
    .slice(0, 63 - hash.length - 1)
    .replace(/[^A-Za-z0-9]+$/, '')
    .replace(/^[^A-Za-z0-9]+/, '')
  return head.length > 0 ? `${head}-${hash}` : hash
}

/**
 * The Job of attempt `attempt` of Run `runName`: deterministic, so a restarted controller finds
 * (adopts) the Job it created before instead of creating a second one. ≤ 52 characters, like
 * CronJob's Jobs, which leaves room for the pod name suffix the Job controller adds.
 */
export function runJobName(runName: string, attempt = 1): string {
  const base = attempt > 1 ? `${runName}-a${attempt}` : runName
  return dnsLabel(base, 52)
}

export function runConfigMapName(jobName: string): string {
  return `${jobName}-files`
}

export function runTokenSecretName(jobName: string): string {
  return `${jobName}-token`
}

// ------------------------------------------------------------------------------------------ objects

function runOwnerReference(request: RunJobInput['request']): V1OwnerReference {
  if (request.runUid === undefined || request.runUid === '') throw new Error(`Run ${request.namespace}/${request.runName}: runUid is required to own its Job`)
  return { apiVersion: CRD_API_VERSION, kind: RUN_KIND, name: request.runName, uid: request.runUid, controller: true, blockOwnerDeletion: true }
}

function runLabels(request: RunJobInput['request'], jobName: string, attempt: number): Record<string, string> {
  return {
    [LABELS.name]: 'agent-gateway',
    [LABELS.component]: COMPONENT_TASK_RUN,
    [LABELS.partOf]: 'agent-gateway',
    [LABELS.managedBy]: MANAGED_BY,
    [LABELS.task]: labelValue(request.taskName),
    [LABELS.run]: labelValue(request.runName),
    [LABELS.job]: jobName,
    [LABELS.attempt]: String(attempt),
  }
}

function runAnnotations(request: RunJobInput['request']): Record<string, string> {
  return { [ANNOTATIONS.task]: request.taskName, [ANNOTATIONS.run]: request.runName }
}

/** run.json of the bootstrap (runner-image/bootstrap/README.md), the Kubernetes flavour: no proxy socket, no status fd. */
export function buildRunConfig(input: Pick<RunJobInput, 'request' | 'pipIndexUrl' | 'npmRegistry' | 'npmCli'>): Record<string, unknown> {
  const { request } = input
  return {
    runtime: request.runtime,
    entrypoint: `/work/script/${request.entrypoint}`,
    dependencies: request.dependencies,
    installDir: '/tmp/.agw',
    pipIndexUrl: input.pipIndexUrl ?? null,
    npmRegistry: input.npmRegistry ?? null,
    npmCli: request.runtime === 'node' ? (input.npmCli ?? DEFAULT_NPM_CLI) : null,
    // The pod's own network (egress NetworkPolicy) replaces the local mode's proxy socket.
    proxySocket: null,
    proxyPort: null,
    statusFd: null,
  }
}

export interface RunConfigMapInput extends Pick<RunJobInput, 'request' | 'pipIndexUrl' | 'npmRegistry' | 'npmCli' | 'attempt'> {
  name: string
  jobName: string
  source: string
  /** Text of runner-image/bootstrap/bootstrap.py or bootstrap.mjs (read by the adapter). */
  bootstrapSource: string
}

/** The per-run ConfigMap (script, run.json, bootstrap), owned by the Run. */
export function buildRunConfigMap(input: RunConfigMapInput): V1ConfigMap {
  const { request } = input
  const data = {
    [CONFIG_KEYS.runJson]: `${JSON.stringify(buildRunConfig(input), null, 2)}\n`,
    [CONFIG_KEYS.bootstrap]: input.bootstrapSource,
    [`${CONFIG_KEYS.scriptPrefix}${request.entrypoint}`]: input.source,
  }
  const bytes = Object.entries(data).reduce((sum, [k, v]) => sum + k.length + Buffer.byteLength(v), 0)
  if (bytes > MAX_CONFIGMAP_BYTES) throw new Error(`Run ${request.runName}: script and bootstrap are ${bytes} bytes, over the ConfigMap limit of ${MAX_CONFIGMAP_BYTES}`)
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: input.name,
      namespace: request.namespace,
      labels: runLabels(request, input.jobName, input.attempt ?? 1),
      annotations: runAnnotations(request),
      ownerReferences: [runOwnerReference(request)],
    },
    data,
  }
}

/** The per-run Secret with the helper bearer token (never a literal env value in the Job). */
export function buildRunTokenSecret(input: { name: string; jobName: string; request: RunJobInput['request']; token: string; attempt?: number }): V1Secret {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: input.name,
      namespace: input.request.namespace,
      labels: runLabels(input.request, input.jobName, input.attempt ?? 1),
      annotations: runAnnotations(input.request),
      ownerReferences: [runOwnerReference(input.request)],
    },
    type: 'Opaque',
    stringData: { [TOKEN_KEY]: input.token },
  }
}

/** Env names the executor sets; the task's Secret cannot override them (env wins over envFrom). */
const RESERVED_ENV = ['HOME', 'TMPDIR', 'LANG', 'AGW_RUN_ID', 'AGW_HELPER_URL', 'AGW_RUN_TOKEN'] as const

function clone<T>(value: T): T {
  return structuredClone(value)
}

/** The pod's only container: the template's `script` container (or its first) as the base. */
function scriptContainer(template: V1PodSpec | undefined): V1Container {
  const containers = template?.containers ?? []
  return clone(containers.find((c) => c.name === SCRIPT_CONTAINER) ?? containers[0] ?? { name: SCRIPT_CONTAINER })
}

/**
 * The Job of one attempt. The template is not modified. Forced regardless of the template:
 * backoffLimit 0, restartPolicy Never, one container, non-root uid 65534, no privilege
 * escalation, all capabilities dropped, read-only root filesystem, RuntimeDefault seccomp (a
 * Localhost profile from the template is kept), no service-account token, no service links.
 */
export function buildRunJob(template: V1Job | undefined, input: RunJobInput): V1Job {
  const base = clone(template ?? DEFAULT_JOB_TEMPLATE)
  const { request } = input
  const attempt = input.attempt ?? 1
  const jobName = runJobName(request.runName, attempt)
  const labels = runLabels(request, jobName, attempt)
  const annotations = runAnnotations(request)
  const image = input.images[request.runtime]
  if (image === undefined || image === '') throw new Error(`no runner image for runtime ${request.runtime}`)
  if (request.helper !== undefined && input.runTokenSecretName === undefined) throw new Error('runTokenSecretName is required with a helper')

  const podTemplate = base.spec?.template ?? {}
  const podSpec: V1PodSpec = podTemplate.spec ?? { containers: [] }
  const container = scriptContainer(podSpec)

  const env: V1EnvVar[] = [
    ...(container.env ?? []).filter((e) => !(RESERVED_ENV as readonly string[]).includes(e.name)),
    { name: 'HOME', value: '/tmp' },
    { name: 'TMPDIR', value: '/tmp' },
    { name: 'LANG', value: 'C.UTF-8' },
    { name: 'AGW_RUN_ID', value: request.runName },
  ]
  if (request.helper !== undefined) {
    env.push({ name: 'AGW_HELPER_URL', value: request.helper.url })
    env.push({ name: 'AGW_RUN_TOKEN', valueFrom: { secretKeyRef: { name: input.runTokenSecretName as string, key: TOKEN_KEY, optional: false } } })
  }

  const bootstrapFile = request.runtime === 'python' ? 'bootstrap.py' : 'bootstrap.mjs'
  const command = request.runtime === 'python' ? ['python3', '-I', `/agw/${bootstrapFile}`, '/agw/run.json'] : ['node', `/agw/${bootstrapFile}`, '/agw/run.json']

  const ourMounts: V1VolumeMount[] = [
    { name: 'agw', mountPath: '/agw', readOnly: true },
    { name: 'script', mountPath: '/work/script', readOnly: true },
    { name: 'tmp', mountPath: '/tmp' },
  ]
  const ourMountNames = new Set(ourMounts.map((m) => m.name))
  const ourMountPaths = new Set(ourMounts.map((m) => m.mountPath))

  const script: V1Container = {
    ...container,
    name: SCRIPT_CONTAINER,
    image,
    imagePullPolicy: container.imagePullPolicy ?? 'IfNotPresent',
    command,
    args: [],
    workingDir: '/tmp',
    env,
    // Task env: a missing Secret must fail the pod (CreateContainerConfigError), not run without it.
    envFrom: request.envSecretName === undefined ? [] : [{ secretRef: { name: request.envSecretName, optional: false } }],
    volumeMounts: [...(container.volumeMounts ?? []).filter((m) => !ourMountNames.has(m.name) && !ourMountPaths.has(m.mountPath)), ...ourMounts],
    securityContext: {
      ...container.securityContext,
      runAsNonRoot: true,
      runAsUser: SANDBOX_UID,
      runAsGroup: SANDBOX_UID,
      allowPrivilegeEscalation: false,
      privileged: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
      seccompProfile: seccomp(container.securityContext?.seccompProfile),
    },
    terminationMessagePolicy: 'FallbackToLogsOnError',
    stdin: false,
    tty: false,
  }
  delete script.ports
  delete script.livenessProbe
  delete script.readinessProbe
  delete script.startupProbe
  delete script.lifecycle

  const tmpVolume = (podSpec.volumes ?? []).find((v) => v.name === 'tmp' && v.emptyDir !== undefined)
  const volumes: V1Volume[] = [
    ...(podSpec.volumes ?? []).filter((v) => !ourMountNames.has(v.name)),
    {
      name: 'agw',
      configMap: {
        name: input.runConfigMapName,
        optional: false,
        items: [
          { key: CONFIG_KEYS.runJson, path: 'run.json', mode: 0o444 },
          { key: CONFIG_KEYS.bootstrap, path: bootstrapFile, mode: 0o444 },
        ],
      },
    },
    {
      name: 'script',
      configMap: {
        name: input.runConfigMapName,
        optional: false,
        items: [{ key: `${CONFIG_KEYS.scriptPrefix}${request.entrypoint}`, path: request.entrypoint, mode: 0o444 }],
      },
    },
    // Memory-backed and sized: counts against the pod's memory, never fills the node's disk.
    { name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: tmpVolume?.emptyDir?.sizeLimit ?? '256Mi' } },
  ]

  const spec: V1PodSpec = {
    ...podSpec,
    containers: [script],
    restartPolicy: 'Never',
    automountServiceAccountToken: false,
    enableServiceLinks: false,
    hostNetwork: false,
    hostPID: false,
    hostIPC: false,
    shareProcessNamespace: false,
    securityContext: {
      ...podSpec.securityContext,
      runAsNonRoot: true,
      runAsUser: SANDBOX_UID,
      runAsGroup: SANDBOX_UID,
      fsGroup: podSpec.securityContext?.fsGroup ?? SANDBOX_UID,
      seccompProfile: seccomp(podSpec.securityContext?.seccompProfile),
    },
    volumes,
  }
  delete spec.initContainers
  delete spec.ephemeralContainers
  delete spec.nodeName
  // hostUsers: only `false` (a user namespace) is a choice the template can make.
  if (podSpec.hostUsers !== false) delete spec.hostUsers
  if (podSpec.runtimeClassName === undefined || podSpec.runtimeClassName === '') delete spec.runtimeClassName

  const installSec = request.dependencies.length > 0 ? (input.installTimeoutSec ?? 300) : 0
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      ...base.metadata,
      name: jobName,
      namespace: request.namespace,
      labels: { ...base.metadata?.labels, ...labels },
      annotations: { ...base.metadata?.annotations, ...annotations },
      ownerReferences: [runOwnerReference(request)],
    },
    spec: {
      ...base.spec,
      // Retries are new Jobs (new attempts) under the same Run, each with its own log.
      backoffLimit: 0,
      completions: 1,
      parallelism: 1,
      activeDeadlineSeconds: Math.ceil(request.maxRuntimeSec + installSec + (input.startupAllowanceSec ?? 30)),
      ttlSecondsAfterFinished: base.spec?.ttlSecondsAfterFinished ?? input.ttlSecondsAfterFinished ?? 300,
      template: {
        metadata: {
          ...podTemplate.metadata,
          labels: { ...podTemplate.metadata?.labels, ...labels },
          annotations: { ...podTemplate.metadata?.annotations, ...annotations },
        },
        spec,
      },
    },
  }
}

function seccomp(fromTemplate: { type: string; localhostProfile?: string } | undefined): { type: string; localhostProfile?: string } {
  // Restricted Pod Security allows RuntimeDefault or a Localhost profile; never Unconfined.
  if (fromTemplate?.type === 'Localhost' && fromTemplate.localhostProfile !== undefined) return { type: 'Localhost', localhostProfile: fromTemplate.localhostProfile }
  return { type: 'RuntimeDefault' }
}
