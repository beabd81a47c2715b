// Where Task/Run resources live and how runs execute: Postgres/PGlite + bubblewrap (the local
// executor), or Kubernetes. Only the chosen backend's modules are loaded: local mode never loads the
// Kubernetes client (large), Kubernetes never loads the sandbox executor.
import type { Config } from '../platform/config.ts'
import type { Db } from '../platform/db/index.ts'
import type { EnvSecretsPort } from '../scheduler/service.ts'
import type { ResourceStore, RunExecutor, RunResource, TaskResource } from '../scheduler/contract/index.ts'
import { early } from './context.ts'

export interface LeaderElector {
  start(): void
  stop(): Promise<void>
}

export interface SchedulerBackend {
  tasks: ResourceStore<TaskResource>
  runs: ResourceStore<RunResource>
  executor: RunExecutor
  envSecrets?: EnvSecretsPort
  /** Kubernetes: a leader Lease, so that one replica reconciles. */
  createElector?: (options: { onStartedLeading: (signal: AbortSignal) => Promise<void>; onStoppedLeading?: () => void; onError?: (err: unknown) => void }) => LeaderElector
  /** Local executor: removes the run dirs of processes that are gone; the count removed. */
  removeStaleWorkDirs?: () => Promise<number>
}

/** Starts loading the configured backend's modules (beside the database's open); the returned function opens it. */
export function schedulerBackend(config: Config): (db: Db) => Promise<SchedulerBackend> {
  if (config.schedulerExecutor === 'kubernetes') {
    const kubernetes = early(import('../../controllers/kubernetes/index.ts'))
    return async () => {
      const { kubernetesBackendOptions, openKubernetesBackend } = await kubernetes
      const k8s = await openKubernetesBackend(kubernetesBackendOptions(config))
      return {
        tasks: k8s.tasks,
        runs: k8s.runs,
        executor: k8s.createExecutor(),
        envSecrets: k8s.envSecrets,
        createElector: (options) => k8s.createElector(options),
      }
    }
  }
  const store = early(import('../../controllers/local/postgres-store.ts'))
  const sandbox = early(import('../../controllers/local/sandbox-executor.ts'))
  const workDirs = early(import('../../controllers/local/workdirs.ts'))
  return async (db) => {
    const { PostgresResourceStore } = await store
    const { createLocalExecutor } = await sandbox
    const { removeStaleWorkDirs } = await workDirs
    return {
      tasks: new PostgresResourceStore<TaskResource>(db, { kind: 'Task' }),
      runs: new PostgresResourceStore<RunResource>(db, { kind: 'Run' }),
      executor: createLocalExecutor({
        ...(config.npmRegistry ? { npmRegistry: config.npmRegistry } : {}),
        ...(config.pipIndexUrl ? { pipIndexUrl: config.pipIndexUrl } : {}),
      }),
      removeStaleWorkDirs,
    }
  }
}
