// Composition root: opens the platform (database, key-value store, metrics), builds the
// catalog, starts the listeners of the requested roles, and stops them in order.
import path from 'node:path'
import type { FastifyInstance } from 'fastify'
import type { Config } from './platform/config.ts'
import type { Logger } from './platform/logger.ts'
import { createMetrics } from './platform/metrics.ts'
import { createHttpApp } from './platform/http.ts'
import { openDb, type Db } from './platform/db/index.ts'
import { lockDataDir } from './platform/data-dir-lock.ts'
import { migrate, migrationsDir } from './platform/db/migrate.ts'
import { openKeyValue, type KeyValue } from './platform/kv/index.ts'
import { createMailer, warnMailUndelivered } from './platform/mailer.ts'
import { systemClock } from './platform/clock.ts'
import { openPayments, type Payments } from './payments/index.ts'
import type { Address } from './payments/types.ts'
import { registry } from './catalog/registry.ts'
import { createCatalog, type Catalog } from './catalog/catalog.ts'
import type { ServiceAppDeps } from './catalog/service-app.ts'
import { buildGatewayApp, GATEWAY_OPERATIONS } from './gateway/app.ts'
import { buildSchedulerApp, SCHEDULER_OPERATIONS } from './scheduler/app.ts'
import { createSchedulerService, SCHEDULER_CHARGE_EFFECT, type EnvSecretsPort, type SchedulerService } from './scheduler/service.ts'
import { registerRefundMetrics, stuckRefunds, type RefundStanding } from './payments/refunds.ts'
import { registerPaymentMetrics, stuckSettlements } from './payments/outcomes.ts'
import { createSchedulerSecrets, schedulerMasterKey } from './scheduler/secrets.ts'
import { DEFAULT_RATES } from './scheduler/domain/rates.ts'
import { openBlobStore } from './platform/blob-store.ts'
import { tempoClientFromUrl } from './payments/mpp/index.ts'
import { PostgresResourceStore } from '../controllers/local/postgres-store.ts'
import { TaskController } from '../controllers/task-controller.ts'
import { RunController } from '../controllers/run-controller.ts'
import { Informer } from '../controllers/informer.ts'
import { createLocalExecutor } from '../controllers/local/sandbox-executor.ts'
import { removeStaleWorkDirs } from '../controllers/local/workdirs.ts'
import { createExecutorHealth, formatReport, type ExecutorHealthMonitor, type PrerequisiteReport } from '../controllers/local/prerequisites.ts'
import { registerHelperRoutes, registerSiblingPublicRoutes } from './scheduler/helpers/index.ts'
import { buildMemoryApp, MEMORY_OPERATIONS } from './memory/app.ts'
import { openMemoryRole, type MemoryRole } from './memory/role.ts'
import { createMediaService, type MediaClient, type MediaService } from './media/service.ts'
import { createHttpMediaClient } from './media/client.ts'
import { buildMediaApp } from './media/app.ts'
import { registerMediaSales } from './gateway/media-sales.ts'
import { openReviewsRole, type ReviewsRole } from './reviews/role.ts'
import { ConfigError } from './platform/config.ts'
import type { ResourceStore, RunExecutor, RunResource, TaskResource } from './scheduler/contract/index.ts'

export const ROLES = ['gateway', 'scheduler-api', 'controller', 'media', 'memory'] as const
export type Role = (typeof ROLES)[number]

export interface Listener {
  name: string
  url: string
  app: FastifyInstance
}

export interface Running {
  roles: Role[]
  listeners: Listener[]
  db: Db
  kv: KeyValue
  catalog: Catalog
  /** Open in roles that take payments or send refunds (gateway, scheduler-api, controller, memory). */
  payments: Payments | undefined
  /** Open in the scheduler-api and controller roles. */
  scheduler: SchedulerService | undefined
  controllers: { tasks: TaskController; runs: RunController } | undefined
  stop(): Promise<void>
}

/** Every operation with a handler in this build, whichever roles run in this process. */
export const IMPLEMENTED_OPERATIONS: ReadonlySet<string> = new Set([...GATEWAY_OPERATIONS, ...SCHEDULER_OPERATIONS, ...MEMORY_OPERATIONS])

/** The database of this process; the embedded one also takes the DATA_DIR lock (released on close). */
export async function openPlatformDb(config: Config): Promise<Db> {
  if (config.databaseUrl) return openDb({ kind: 'postgres', url: config.databaseUrl, poolMax: config.databasePoolMax })
  const unlock = lockDataDir(config.dataDir)
  try {
    const db = await openDb({ kind: 'pglite', dataDir: path.join(config.dataDir, 'pgdata') })
    const close = db.close.bind(db)
    return Object.assign(db, {
      close: async () => {
        try {
          await close()
        } finally {
          unlock()
        }
      },
    })
  } catch (error) {
    unlock()
    throw error
  }
}

export async function start(config: Config, roles: readonly Role[], logger: Logger): Promise<Running> {
  const startedAt = new Date()
  // Local executor: its prerequisites (bwrap, prlimit, the interpreters, user namespaces) are
  // checked while the platform opens. A missing one is printed with its fix, turns the scheduler's
  // /readyz to 503 and refuses create/fund/run now/trigger/webhook (503, before any 402); the rest
  // is served. Kubernetes runs in runner images that carry everything: nothing to check.
  const executorHealth: ExecutorHealthMonitor | undefined =
    config.schedulerExecutor === 'local' && roles.some((role) => role === 'scheduler-api' || role === 'controller')
      ? createExecutorHealth({ onChange: (report, previous) => reportExecutor(logger, report, previous) })
      : undefined
  const executorChecked = executorHealth?.refresh().catch((error: unknown) => logger.error({ err: error }, 'local executor: prerequisite check failed'))
  const db = await openPlatformDb(config)
  // PGlite under the data-dir lock: no other process shares this database, so whatever payment or
  // refund a process left open before this start is an orphan, decided now rather than after the
  // stale windows that protect the requests of other replicas on Postgres.
  const orphans = db.kind === 'pglite' ? { orphanedBefore: startedAt } : {}
  const kv = await openKeyValue(config.redisUrl ? { kind: 'redis', url: config.redisUrl } : { kind: 'memory' })
  try {
    await migrate(db, migrationsDir)
  } catch (error) {
    await Promise.allSettled([db.close(), kv.close()])
    throw error
  }
  let payments: Payments | undefined
  const takesPayments = roles.some((role) => role === 'gateway' || role === 'scheduler-api' || role === 'controller' || role === 'memory')
  try {
    if (takesPayments)
      payments = await openPayments({
        db,
        kv,
        logger,
        clock: systemClock,
        registry,
        dataDir: config.dataDir,
        payTo: config.payTo as Address,
        gatewayUrl: config.publicBaseUrl,
        chainRpcUrl: config.chainRpcUrl,
        settlerPrivateKey: config.settlerPrivateKey,
        tempoRpcUrl: config.tempoRpcUrl,
        mppSecretKey: config.mppSecretKey,
        // Every role decides the open settlements of the work it sells (the effects it registers).
        reconcileEveryMs: 30_000,
      })
  } catch (error) {
    await Promise.allSettled([db.close(), kv.close()])
    throw error
  }
  const mailer = createMailer({ smtpUrl: config.smtpUrl, from: config.mailFrom })
  // The gateway's dev routes say it themselves; any other process on a real chain says it here.
  if (!(payments?.devChain && roles.includes('gateway'))) warnMailUndelivered(mailer, logger)
  const metrics = createMetrics()
  if (payments) registerPaymentMetrics(metrics.registry, db)
  const catalog = createCatalog(registry, {
    urls: { gateway: config.publicBaseUrl, scheduler: config.publicSchedulerUrl, memory: config.publicMemoryUrl },
    implemented: IMPLEMENTED_OPERATIONS,
  })
  const deps: ServiceAppDeps = {
    catalog,
    logger,
    metrics,
    bodyLimitBytes: config.bodyLimitBytes,
    payTo: config.payTo,
    readiness: { database: () => db.ping(), kv: () => kv.ping() },
    diagnostics: { settlements: () => stuckSettlements(db) },
  }
  // The scheduler and probe listeners' /readyz detail: the above, and stuck refunds where this process sends them.
  let diagnostics = deps.diagnostics

  const planned: { name: string; port: number; app: FastifyInstance }[] = []
  const has = (role: Role) => roles.includes(role)

  // Scheduler: one service over the Task/Run resources, shared by the API and the controllers.
  let scheduler: SchedulerService | undefined
  let controllers: Running['controllers']
  let refundTimer: NodeJS.Timeout | undefined
  let elector: { start(): void; stop(): Promise<void> } | undefined
  const blobs = openBlobStore(config)
  // Refund outboxes this process sends from (scheduler escrows, media sales): one set of gauges.
  const refundStandings: (() => Promise<RefundStanding>)[] = []
  if ((has('scheduler-api') || has('controller')) && payments) {
    const backend = await schedulerBackend(config, db)
    if (has('controller') && config.schedulerExecutor === 'local') {
      // Run dirs of a crashed process (its sandboxes died with it); never those of a live process.
      const removed = await removeStaleWorkDirs()
      if (removed > 0) logger.info({ removed }, 'local executor: removed run work dirs left by a process that is gone')
    }
    scheduler = createSchedulerService({
      db,
      clock: systemClock,
      rates: DEFAULT_RATES,
      secrets: createSchedulerSecrets(await schedulerMasterKey(db, config.schedulerSecretKey)),
      tasks: backend.tasks,
      runs: backend.runs,
      namespace: config.kubeNamespace,
      chain: payments.chain,
      mailer,
      logger,
      logs: blobs,
      publicUrl: config.publicSchedulerUrl,
      internalUrl: config.schedulerInternalUrl,
      gatewayUrl: config.publicBaseUrl,
      ...(backend.envSecrets ? { envSecrets: backend.envSecrets } : {}),
    })
    // Escrow payments are decided by this process's requests or its reconciler pass, whichever first.
    payments.outcomes.register(SCHEDULER_CHARGE_EFFECT, scheduler.chargeOutcomes)
    const owed = scheduler
    refundStandings.push(() => owed.refundStanding())
    diagnostics = { ...diagnostics, refunds: () => stuckRefunds({ standing: () => owed.refundStanding() }) }
    if (has('controller')) {
      const onError = (where: string, err: unknown) => logger.error({ err }, `controller: ${where}`)
      const make = () => {
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
            costOf: (taskName) => (scheduler as SchedulerService).taskCost(taskName),
            onError,
            logger,
          }),
          runs: new RunController({
            runs: backend.runs,
            runInformer,
            ledger: scheduler as SchedulerService,
            executor: backend.executor,
            namespace: config.kubeNamespace,
            maxParallel: config.sandboxMaxParallel,
            prepareAheadMs: config.dispatchAheadSec * 1000,
            onError,
            logger,
          }),
        }
      }
      controllers = make()
      if (backend.createElector) {
        let current = controllers
        elector = backend.createElector({
          onStartedLeading: async (signal: AbortSignal) => {
            current = make()
            controllers = current
            await current.runs.start()
            await current.tasks.start()
            // Lost the Lease: stop reconciling but leave the Jobs running; the next leader adopts them.
            signal.addEventListener('abort', () => void Promise.allSettled([current.tasks.stop(), current.runs.stop({ cancelRunning: false })]), { once: true })
          },
          onStoppedLeading: () => logger.warn('controller: lost the leader Lease; reconciling stopped'),
        })
      }
      const service = scheduler
      refundTimer = setInterval(() => {
        service.recover().catch((error: unknown) => logger.error({ err: error }, 'scheduler recovery pass failed'))
      }, 15_000)
      refundTimer.unref()
    }
  }
  // Media: in this process when the role runs here, or when the gateway runs without MEDIA_URL.
  let media: MediaService | undefined
  let mediaRefundTimer: NodeJS.Timeout | undefined
  let reviewsRole: ReviewsRole | undefined
  if (has('media') || (has('gateway') && !config.mediaUrl)) {
    media = createMediaService({
      blobs,
      logger,
      publicMediaUrl: config.publicMediaUrl,
      concurrency: config.mediaConcurrency,
      analysisThreads: config.mediaAnalysisThreads,
      soundfont: config.soundfontPath,
      song: config.songUpstreamUrl ? { url: config.songUpstreamUrl, apiKey: config.songUpstreamApiKey, model: config.songUpstreamModel } : undefined,
      speech: config.speechUpstreamUrl ? { url: config.speechUpstreamUrl, apiKey: config.speechUpstreamApiKey, model: config.speechUpstreamModel } : undefined,
      upstreamTimeoutMs: config.mediaUpstreamTimeoutMs,
      upstreamRetries: config.mediaUpstreamRetries,
    })
    // A missing tool is said once with its fix; the rest of the product runs, songs/speech answer 503.
    const tools = media
    void tools.prerequisites().then((missing) => {
      if (missing) logger.warn(missing, 'media: tools missing; songs and speech answer 503 until they are installed')
    })
  }
  if (has('gateway') && payments) {
    // Songs and speech are sold here: their sales are decided with their payments, and the
    // undelivered part of a settled sale is refunded from the media refund outbox.
    const mediaRefunds = registerMediaSales({ db, payments, logger })
    if (orphans.orphanedBefore) await mediaRefunds.resumeOrphans(orphans.orphanedBefore)
    mediaRefundTimer = setInterval(() => {
      mediaRefunds.retryDue().catch((error: unknown) => logger.error({ err: error }, 'media refund pass failed'))
    }, 15_000)
    mediaRefundTimer.unref()
    refundStandings.push(() => mediaRefunds.standing())
    const client: MediaClient = config.mediaUrl ? createHttpMediaClient({ url: config.mediaUrl, token: config.mediaInternalToken as string }) : (media as MediaService)
    const reviewsService = registry.services.find((service) => service.slug === 'reviews-create')
    const reviews = await openReviewsRole({
      config,
      db,
      blobs,
      clock: systemClock,
      logger,
      plans: reviewsService?.plans ?? [],
      priceMicros: reviewsService?.meter?.unitPriceMicros ?? 0n,
    })
    reviewsRole = reviews
    planned.push({
      name: 'gateway',
      port: config.gatewayPort,
      app: buildGatewayApp({
        ...deps,
        diagnostics: { ...deps.diagnostics, mediaRefunds: () => stuckRefunds({ standing: () => mediaRefunds.standing() }) },
        payments,
        mailer,
        db,
        media: { client, hostedBlobs: config.mediaUrl ? undefined : blobs },
        reviews,
      }),
    })
    // The isolated origin of review sites: its own listener, never the gateway's origin.
    planned.push({ name: 'reviews', port: config.reviewsPort, app: reviews.siteHost })
  }
  if (has('scheduler-api') && payments && scheduler) {
    const helperDeps = {
      db,
      clock: systemClock,
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
    planned.push({
      name: 'scheduler',
      port: config.schedulerPort,
      app: buildSchedulerApp({
        ...deps,
        // The executor is a readiness dependency of this listener only (the gateway and memory
        // listeners of the same process stay ready).
        ...(executorHealth ? { readiness: { ...deps.readiness, executor: () => executorHealth.readiness() }, executorHealth } : {}),
        diagnostics,
        payments,
        kv,
        service: scheduler,
        extraRoutes: (app) => {
          registerHelperRoutes(app, helperDeps)
          registerSiblingPublicRoutes(app, helperDeps)
        },
      }),
    })
  }
  let memoryRole: MemoryRole | undefined
  if (has('memory') && payments) {
    const role = await openMemoryRole({ config, db, clock: systemClock, logger, payments })
    memoryRole = role
    if (orphans.orphanedBefore) await role.money.refunds.resumeOrphans(orphans.orphanedBefore)
    refundStandings.push(() => role.money.refunds.standing())
    planned.push({
      name: 'memory',
      port: config.memoryPort,
      app: buildMemoryApp({
        ...deps,
        diagnostics: {
          ...deps.diagnostics,
          memory: async () => role.describe(),
          memoryRefunds: () => stuckRefunds({ standing: () => role.money.refunds.standing() }),
        },
        payments,
        kv,
        service: role.service,
        money: role.money,
      }),
    })
  }
  if (payments && refundStandings.length > 0) {
    const { chain } = payments
    registerRefundMetrics(metrics.registry, { standing: () => combinedStanding(refundStandings), walletBalance: () => chain.balanceOf(chain.serviceAddress) })
  }
  // Media and controller serve no public API; on their own they still need probes and /metrics.
  const probeOnly = (name: string) =>
    createHttpApp({
      name,
      logger,
      metrics,
      bodyLimitBytes: config.bodyLimitBytes,
      readiness: deps.readiness,
      diagnostics,
    })
  if (has('media') && !has('gateway') && media) {
    if (!config.mediaInternalToken) throw new ConfigError('MEDIA_INTERNAL_TOKEN', 'is required when the media role runs without the gateway (the gateway presents it)')
    const service = media
    planned.push({
      name: 'media',
      port: config.mediaPort,
      app: buildMediaApp({
        name: 'media',
        logger,
        metrics,
        bodyLimitBytes: config.bodyLimitBytes,
        readiness: deps.readiness,
        diagnostics: { ...diagnostics, tools: () => service.prerequisites() },
        service,
        blobs,
        internalToken: config.mediaInternalToken,
      }),
    })
  }
  if (has('controller') && roles.length === 1) planned.push({ name: 'controller', port: config.controllerPort, app: probeOnly('controller') })

  await executorChecked
  const listeners: Listener[] = []
  const stopAll = async () => {
    if (refundTimer) clearInterval(refundTimer)
    if (mediaRefundTimer) clearInterval(mediaRefundTimer)
    await media?.close().catch(() => {})
    await memoryRole?.stop().catch(() => {})
    await reviewsRole?.stop().catch(() => {})
    if (elector) await elector.stop().catch(() => {})
    if (controllers) await Promise.allSettled([controllers.tasks.stop(), controllers.runs.stop()])
    await Promise.allSettled(planned.map((entry) => entry.app.close()))
    mailer.close()
    await payments?.close()
    await Promise.allSettled([db.close(), kv.close()])
  }
  try {
    for (const entry of planned) {
      await entry.app.listen({ host: config.host, port: entry.port })
      const address = entry.app.server.address()
      const port = typeof address === 'object' && address ? address.port : entry.port
      listeners.push({ name: entry.name, url: `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`, app: entry.app })
    }
  } catch (error) {
    await stopAll()
    throw error
  }

  if (controllers) {
    const running = controllers
    try {
      if (elector) {
        // Kubernetes: only the Lease holder reconciles; losing the Lease stops both controllers.
        elector.start()
      } else {
        await running.runs.start()
        await running.tasks.start()
      }
      // Crash recovery (refunds due, Task resources owed a write) in the background: a restart
      // after a crash is ready as fast as a clean one.
      if (scheduler) void scheduler.recover(orphans).catch((error: unknown) => logger.error({ err: error }, 'scheduler recovery pass failed'))
    } catch (error) {
      await stopAll()
      throw error
    }
  }

  // Settlements a crash left undecided are decided from the chain in the background (then every 30 s).
  if (payments) void payments.reconcile(orphans).catch((error: unknown) => logger.error({ err: error }, 'settlement reconciliation failed'))

  let stopping: Promise<void> | undefined
  return {
    scheduler,
    controllers,
    roles: [...roles],
    listeners,
    db,
    kv,
    catalog,
    payments,
    stop() {
      // Readiness goes 503 first so load balancers stop sending; close() then drains in-flight requests.
      stopping ??= (async () => {
        for (const listener of listeners) listener.app.markDraining()
        await stopAll()
      })()
      return stopping
    },
  }
}

/** The refund outboxes of this process as one standing (sums; the oldest stuck key of the first that has one). */
async function combinedStanding(sources: (() => Promise<RefundStanding>)[]): Promise<RefundStanding> {
  const standings = await Promise.all(sources.map((source) => source()))
  return {
    outstanding: standings.reduce((sum, standing) => sum + standing.outstanding, 0),
    outstandingMicros: standings.reduce((sum, standing) => sum + standing.outstandingMicros, 0n),
    stuck: standings.reduce((sum, standing) => sum + standing.stuck, 0),
    oldestStuckKey: standings.find((standing) => standing.oldestStuckKey !== null)?.oldestStuckKey ?? null,
    lastError: standings.find((standing) => standing.lastError !== null)?.lastError ?? null,
  }
}

/** Logs the local executor's verdict at start and whenever it changes; at start a missing prerequisite also goes to stderr with its fix. */
function reportExecutor(logger: Logger, report: PrerequisiteReport, previous: PrerequisiteReport | undefined): void {
  if (!previous && report.notes.length > 0) logger.warn({ missingLibraries: report.missingLibraries }, `local executor: ${report.notes.join('; ')}`)
  if (report.ok) {
    logger.info(
      { tools: report.tools, runtimes: report.runtimes },
      previous ? 'local executor: prerequisites now satisfied; the scheduler takes tasks again' : 'local executor: prerequisites satisfied',
    )
    return
  }
  logger.error({ problems: report.problems }, `local executor cannot run task scripts: ${report.problems.map((problem) => `${problem.reason} (fix: ${problem.fix})`).join('; ')}`)
  if (!previous) process.stderr.write(formatReport(report))
}

/** Where Task/Run resources live and how runs execute: Postgres/PGlite + bubblewrap, or Kubernetes. */
interface SchedulerBackend {
  tasks: ResourceStore<TaskResource>
  runs: ResourceStore<RunResource>
  executor: RunExecutor
  envSecrets?: EnvSecretsPort
  createElector?: (options: { onStartedLeading: (signal: AbortSignal) => Promise<void>; onStoppedLeading?: () => void }) => { start(): void; stop(): Promise<void> }
}

async function schedulerBackend(config: Config, db: Db): Promise<SchedulerBackend> {
  if (config.schedulerExecutor === 'kubernetes') {
    // Loaded only here: the Kubernetes client is large and local mode never needs it.
    const { kubernetesBackendOptions, openKubernetesBackend } = await import('../controllers/kubernetes/index.ts')
    const k8s = await openKubernetesBackend(kubernetesBackendOptions(config))
    return {
      tasks: k8s.tasks,
      runs: k8s.runs,
      executor: k8s.createExecutor(),
      envSecrets: k8s.envSecrets,
      createElector: (options) => k8s.createElector(options),
    }
  }
  return {
    tasks: new PostgresResourceStore<TaskResource>(db, { kind: 'Task' }),
    runs: new PostgresResourceStore<RunResource>(db, { kind: 'Run' }),
    executor: createLocalExecutor({
      ...(config.npmRegistry ? { npmRegistry: config.npmRegistry } : {}),
      ...(config.pipIndexUrl ? { pipIndexUrl: config.pipIndexUrl } : {}),
    }),
  }
}
