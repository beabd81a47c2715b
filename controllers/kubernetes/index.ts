// The Kubernetes backend in one place: the Task/Run stores over custom resources, the task env
// Secrets, the Job executor and the Lease leader elector, on one KubeConfig (in-cluster service
// account, or a kubeconfig file). See docs/kubernetes.md.
import { randomBytes } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { hostname } from 'node:os'
import { KubeConfig, type V1Job } from '@kubernetes/client-node'
import { parse as parseYaml } from 'yaml'
import type { TimerClock } from '../../src/platform/clock.ts'
import type { Config } from '../../src/platform/config.ts'
import { createJobExecutor, type JobExecutorOptions, type KubernetesJobExecutor } from './job-executor.ts'
import { DEFAULT_IMAGES } from './job-spec.ts'
import { LeaderElector, type LeaderElectorOptions } from './leader-election.ts'
import { createKubernetesStores, type KubernetesResourceStore } from './store.ts'
import { createTaskEnvSecrets, type TaskEnvSecrets } from './task-env-secrets.ts'
import type { RunResource, TaskResource } from '../../src/scheduler/contract/index.ts'

export * from './store.ts'
export * from './kube-http.ts'
export * from './api-errors.ts'
export * from './merge-patch.ts'
export * from './kube-objects.ts'
export * from './task-env-secrets.ts'
export * from './job-spec.ts'
export * from './job-executor.ts'
export * from './leader-election.ts'

export const DEFAULT_LEASE_NAME = 'agent-gateway-controller'

/** In a pod: the service account; else the given kubeconfig file; else the usual defaults ($KUBECONFIG, ~/.kube/config). */
export function loadKubeConfig(options: { kubeconfigPath?: string; env?: NodeJS.ProcessEnv } = {}): KubeConfig {
  const env = options.env ?? process.env
  const kubeConfig = new KubeConfig()
  if (options.kubeconfigPath !== undefined) kubeConfig.loadFromFile(options.kubeconfigPath)
  else if (env.KUBERNETES_SERVICE_HOST !== undefined && env.KUBERNETES_SERVICE_HOST !== '') kubeConfig.loadFromCluster()
  else kubeConfig.loadFromDefault()
  return kubeConfig
}

/** The admin's Job template (the chart's ConfigMap key `job-template.yaml`), or undefined without a file. */
export async function loadJobTemplate(file: string | undefined): Promise<V1Job | undefined> {
  if (file === undefined || file === '') return undefined
  const parsed = parseYaml(await readFile(file, 'utf8')) as unknown
  if (typeof parsed !== 'object' || parsed === null || (parsed as { kind?: unknown }).kind !== 'Job') {
    throw new Error(`${file}: expected a batch/v1 Job (the runner Job template)`)
  }
  return parsed as V1Job
}

export interface KubernetesBackendOptions {
  /** Namespace of Tasks, Runs, their Jobs and the Lease. */
  namespace: string
  kubeconfigPath?: string
  /** The admin's Job template file (RUNNER_JOB_TEMPLATE_FILE); absent = DEFAULT_JOB_TEMPLATE. */
  jobTemplateFile?: string
  /** Runner images (RUNNER_IMAGE_PYTHON / RUNNER_IMAGE_NODE); absent = DEFAULT_IMAGES, the official slim images. */
  images?: { python: string; node: string }
  /** Package sources for task dependencies (NPM_REGISTRY / PIP_INDEX_URL); absent = the package managers' defaults. */
  npmRegistry?: string
  pipIndexUrl?: string
  /**
   * What the kubelet puts in a pod's environment, not configuration: KUBERNETES_SERVICE_HOST (in a
   * cluster: use the service account) and HOSTNAME (the pod name, in the Lease holder identity).
   * Default process.env.
   */
  env?: NodeJS.ProcessEnv
}

/** The backend options the typed configuration chooses (the composition root passes them). */
export function kubernetesBackendOptions(
  config: Pick<Config, 'kubeNamespace' | 'runnerJobTemplateFile' | 'runnerImagePython' | 'runnerImageNode' | 'npmRegistry' | 'pipIndexUrl'>,
): KubernetesBackendOptions {
  return {
    namespace: config.kubeNamespace,
    images: { python: config.runnerImagePython, node: config.runnerImageNode },
    ...(config.runnerJobTemplateFile !== undefined ? { jobTemplateFile: config.runnerJobTemplateFile } : {}),
    ...(config.npmRegistry !== undefined ? { npmRegistry: config.npmRegistry } : {}),
    ...(config.pipIndexUrl !== undefined ? { pipIndexUrl: config.pipIndexUrl } : {}),
  }
}

export interface KubernetesBackend {
  kubeConfig: KubeConfig
  namespace: string
  tasks: KubernetesResourceStore<TaskResource>
  runs: KubernetesResourceStore<RunResource>
  envSecrets: TaskEnvSecrets
  /** A Job executor with the backend's namespace, images, template and package sources. */
  createExecutor(options?: Partial<Omit<JobExecutorOptions, 'kubeConfig'>> & { clock?: TimerClock }): KubernetesJobExecutor
  /** A leader elector on the Lease `agent-gateway-controller` (identity: hostname + random). */
  createElector(options: Pick<LeaderElectorOptions, 'onStartedLeading'> & Partial<Omit<LeaderElectorOptions, 'kubeConfig'>>): LeaderElector
}

export async function openKubernetesBackend(options: KubernetesBackendOptions): Promise<KubernetesBackend> {
  const env = options.env ?? process.env
  const kubeConfig = loadKubeConfig({ ...(options.kubeconfigPath !== undefined ? { kubeconfigPath: options.kubeconfigPath } : {}), env })
  const template = await loadJobTemplate(options.jobTemplateFile)
  const images = options.images ?? { ...DEFAULT_IMAGES }
  const { namespace } = options
  const packageSources = {
    ...(options.npmRegistry !== undefined ? { npmRegistry: options.npmRegistry } : {}),
    ...(options.pipIndexUrl !== undefined ? { pipIndexUrl: options.pipIndexUrl } : {}),
  }
  const { tasks, runs } = createKubernetesStores({ kubeConfig, namespace })
  return {
    kubeConfig,
    namespace,
    tasks,
    runs,
    envSecrets: createTaskEnvSecrets(kubeConfig, namespace),
    createExecutor: (overrides = {}) => createJobExecutor({ namespace, images, ...(template !== undefined ? { template } : {}), ...packageSources, ...overrides, kubeConfig }),
    createElector: (electorOptions) =>
      new LeaderElector({
        namespace,
        leaseName: DEFAULT_LEASE_NAME,
        identity: `${env.HOSTNAME || hostname()}-${randomBytes(4).toString('hex')}`,
        ...electorOptions,
        kubeConfig,
      }),
  }
}
