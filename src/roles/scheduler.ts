// The scheduler roles (scheduler-api, controller): one scheduler service over the Task/Run
// resources, shared by the scheduler-api listener and the controllers; the controller's probes
// listener when it runs alone. Escrow payments are decided by this process's requests or its
// reconciler pass, whichever first; refunds due are retried by the recovery pass.
import type { ExecutorHealthMonitor } from '../../controllers/local/prerequisites.ts'
import { stuckRefunds } from '../payments/refunds.ts'
import type { Role } from '../platform/roles.ts'
import { early, paid, serviceAppDeps, type PlannedListener, type RoleModule } from './context.ts'
import { chromium, reportExecutor } from './prerequisites.ts'
import { schedulerBackend } from './scheduler-backend.ts'

/** The controller role alone serves no API; it still answers probes and /metrics on its port. */
const controllerAlone = (roles: readonly Role[]) => roles.length === 1 && roles[0] === 'controller'

export const schedulerRole: RoleModule = {
  name: 'scheduler',
  takesPayments: true,
  wants: (_config, roles) => roles.includes('scheduler-api') || roles.includes('controller'),
  // The screenshot helper of the scheduler API renders with Chromium.
  prerequisites: (_config, roles) => (roles.includes('scheduler-api') ? [chromium] : []),
  preload(config, roles, logger) {
    const api = roles.includes('scheduler-api')
    const controller = roles.includes('controller')
    const local = config.schedulerExecutor === 'local'
    // Local executor: its prerequisites (bwrap, prlimit, the interpreters, user namespaces) are
    // checked while the platform opens, asked for before this role's modules so that their
    // probes fork this process while it is small. A missing one is said on stderr with its fix, turns the
    // scheduler's /readyz to 503 and refuses create/fund/run now/trigger/webhook (503, before any
    // 402); the rest is served. Kubernetes runs in runner images that carry everything.
    const executorHealth: Promise<ExecutorHealthMonitor> | undefined = local
      ? early(
          import('../../controllers/local/prerequisites.ts').then(({ createExecutorHealth }) =>
            createExecutorHealth({ onChange: (report, previous) => reportExecutor(logger, report, previous) }),
          ),
        )
      : undefined
    const executorChecked = executorHealth?.then((health) => health.refresh()).catch((error: unknown) => logger.error({ err: error }, 'local executor: prerequisite check failed'))

    const serviceModule = early(import('../scheduler/service.ts'))
    const secretsModule = early(import('../scheduler/secrets.ts'))
    const ratesModule = early(import('../scheduler/domain/rates.ts'))
    const openBackend = schedulerBackend(config)
    const controllerModule = controller ? early(import('./controller.ts')) : undefined
    const appModule = api ? early(import('../scheduler/app.ts')) : undefined
    const helpersModule = api ? early(import('../scheduler/helpers/index.ts')) : undefined
    const mppModule = api ? early(import('../payments/mpp/index.ts')) : undefined
    const httpModule = controllerAlone(roles) ? early(import('../platform/http.ts')) : undefined

    return {
      async open(context) {
        const { db, blobs } = context
        const { payments } = paid(context)
        const backend = await openBackend(db)
        if (controller && local) {
          // Run dirs of a crashed process (its sandboxes died with it); never those of a live process.
          const removed = await backend.removeStaleWorkDirs?.()
          if (removed) logger.info({ removed }, 'local executor: removed run work dirs left by a process that is gone')
        }
        const { createSchedulerService, SCHEDULER_CHARGE_EFFECT } = await serviceModule
        const { createSchedulerSecrets, schedulerMasterKey } = await secretsModule
        const { DEFAULT_RATES } = await ratesModule
        const scheduler = createSchedulerService({
          db,
          clock: context.clock,
          rates: DEFAULT_RATES,
          secrets: createSchedulerSecrets(await schedulerMasterKey(db, config.schedulerSecretKey)),
          tasks: backend.tasks,
          runs: backend.runs,
          namespace: config.kubeNamespace,
          chain: payments.chain,
          confirm: (keys) => payments.confirmations.sweep(keys),
          mailer: context.mailer,
          logger,
          logs: blobs,
          publicUrl: config.publicSchedulerUrl,
          internalUrl: config.schedulerInternalUrl,
          gatewayUrl: config.publicBaseUrl,
          ...(backend.envSecrets ? { envSecrets: backend.envSecrets } : {}),
        })
        const standing = () => scheduler.refundStanding()
        const terms = controllerModule ? (await controllerModule).createControllers({ config, logger, backend, scheduler }) : undefined
        const orphans = context.orphanedBefore ? { orphanedBefore: context.orphanedBefore } : {}
        const listeners: PlannedListener[] = []

        if (appModule && helpersModule && mppModule) {
          const { buildSchedulerApp } = await appModule
          const { registerHelperRoutes, registerSiblingPublicRoutes } = await helpersModule
          const { tempoClientFromUrl } = await mppModule
          const health = await executorHealth
          const helperDeps = {
            db,
            clock: context.clock,
            rates: DEFAULT_RATES,
            logger,
            blobs,
            publicSchedulerUrl: config.publicSchedulerUrl,
            llm: { ...(config.llmBaseUrl ? { baseUrl: config.llmBaseUrl } : {}), ...(config.llmApiKey ? { apiKey: config.llmApiKey } : {}) },
            marketplace: {
              ...(config.marketplacePayerKey ? { payerPrivateKey: config.marketplacePayerKey as `0x${string}` } : {}),
              ...(config.tempoRpcUrl ? { tempo: tempoClientFromUrl(config.tempoRpcUrl) } : {}),
            },
          }
          listeners.push({
            name: 'scheduler',
            port: config.schedulerPort,
            // The executor is a readiness dependency of this listener only (the gateway and memory
            // listeners of the same process stay ready).
            ...(health ? { readiness: { executor: () => health.readiness() } } : {}),
            build: (probes) => {
              const app = buildSchedulerApp({
                ...serviceAppDeps(context, probes),
                ...(health ? { executorHealth: health } : {}),
                payments,
                kv: context.kv,
                service: scheduler,
                extraRoutes: (app) => {
                  registerHelperRoutes(app, helperDeps)
                  registerSiblingPublicRoutes(app, helperDeps)
                },
              })
              context.localApps.set('scheduler', app)
              return app
            },
          })
        }
        if (httpModule) {
          const { createHttpApp } = await httpModule
          listeners.push({
            name: 'controller',
            port: config.controllerPort,
            build: ({ readiness, diagnostics }) =>
              createHttpApp({ name: 'controller', logger, metrics: context.metrics, bodyLimitBytes: config.bodyLimitBytes, readiness, diagnostics, hosts: context.hosts }),
          })
        }

        return {
          outcomes: { [SCHEDULER_CHARGE_EFFECT]: scheduler.chargeOutcomes },
          refundStandings: [standing],
          diagnostics: { refunds: () => stuckRefunds({ standing }) },
          listeners,
          shares: { scheduler, ...(terms ? { controllers: terms.first } : {}) },
          loops: terms ? [{ name: 'scheduler recovery pass', everyMs: 15_000, run: () => scheduler.recover() }] : [],
          afterListen: async () => {
            // The check started before the database opened: the scheduler says it before it is ready.
            await executorChecked
            if (!terms) return
            await terms.start()
            // Crash recovery (refunds due, Task resources owed a write) in the background: a restart
            // after a crash is ready as fast as a clean one.
            void scheduler.recover(orphans).catch((error: unknown) => logger.error({ err: error }, 'scheduler recovery pass failed'))
          },
          stop: async () => {
            await terms?.stop()
          },
        }
      },
    }
  },
}
