// The controllers of a process: the Task and Run controllers over the scheduler's resources. On
// Kubernetes only the holder of the leader Lease reconciles, with a new pair per term; elsewhere one
// pair runs from listen to stop. Loaded only by a process that runs the controller role.
import { Informer } from '../../controllers/informer.ts'
import { RunController } from '../../controllers/run-controller.ts'
import { TaskController } from '../../controllers/task-controller.ts'
import type { Config } from '../platform/config.ts'
import type { Logger } from '../platform/logger.ts'
import type { SchedulerService } from '../scheduler/service.ts'
import type { Controllers } from './context.ts'
import type { SchedulerBackend } from './scheduler-backend.ts'

export interface ControllerTerms {
  /** The first pair (the one a process without leader election runs). */
  first: Controllers
  /** Starts reconciling, or starts campaigning for the Lease. */
  start(): Promise<void>
  /** Stops the election and the current pair. */
  stop(): Promise<void>
}

export function createControllers(deps: { config: Config; logger: Logger; backend: SchedulerBackend; scheduler: SchedulerService }): ControllerTerms {
  const { config, logger, backend, scheduler } = deps
  const onError = (where: string, err: unknown) => logger.error({ err }, `controller: ${where}`)
  const make = (): Controllers => {
    // One Run informer (one cache of every Run) serves both controllers of a term.
    const runInformer = new Informer(backend.runs, { namespace: config.kubeNamespace, onError: (error: unknown) => onError('run informer', error) })
    return {
      // Cron Runs are created and dispatched dispatchAheadSec before their slot and start on it.
      tasks: new TaskController({
        tasks: backend.tasks,
        runs: backend.runs,
        runInformer,
        namespace: config.kubeNamespace,
        reconcile: { lookaheadMs: config.dispatchAheadSec * 1000 },
        costOf: (taskName) => scheduler.taskCost(taskName),
        onError,
        logger,
      }),
      runs: new RunController({
        runs: backend.runs,
        runInformer,
        ledger: scheduler,
        executor: backend.executor,
        namespace: config.kubeNamespace,
        maxParallel: config.sandboxMaxParallel,
        prepareAheadMs: config.dispatchAheadSec * 1000,
        onError,
        logger,
      }),
    }
  }
  const first = make()
  let current = first
  const elector = backend.createElector?.({
    onStartedLeading: async (signal: AbortSignal) => {
      const term = make()
      current = term
      await term.runs.start()
      await term.tasks.start()
      // Lost the Lease: stop reconciling but leave the Jobs running; the next leader adopts them.
      signal.addEventListener('abort', () => void Promise.allSettled([term.tasks.stop(), term.runs.stop({ cancelRunning: false })]), { once: true })
    },
    onStoppedLeading: () => logger.warn('controller: lost the leader Lease; reconciling stopped'),
    // A Lease the API server could not renew, or reconciling that failed to start as leader.
    onError: (err: unknown) => logger.warn({ err }, 'controller: leader election'),
  })
  return {
    first,
    async start() {
      if (elector) {
        elector.start()
        return
      }
      await first.runs.start()
      await first.tasks.start()
    },
    async stop() {
      await elector?.stop().catch(() => {})
      await Promise.allSettled([current.tasks.stop(), current.runs.stop()])
    },
  }
}
