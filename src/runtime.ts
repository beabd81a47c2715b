// Composition root: opens the platform (database, key-value store, metrics), builds the
// catalog, starts the listeners of the requested roles, and stops them in order.
//
// Start-up order (docs/architecture.md, "Start-up"): what runs outside this thread starts first and
// runs alongside the rest: the dev chain (anvil), the local executor's and the system tools' checks.
// The modules of the requested roles load while PGlite opens (a role's modules are imported only
// when it runs here: a media process never loads the scheduler, a memory process never loads
// Chromium's driver). Then the migrations, the roles, and the listeners, all at once.
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import type { FastifyInstance } from 'fastify'
import type { LocalApps } from './mcp/dispatcher.ts'
import { ConfigError, type Config } from './platform/config.ts'
import type { Logger } from './platform/logger.ts'
import type { Db } from './platform/db/index.ts'
import { openDatabase, openPlatformDb } from './platform/db/open.ts'
import { lockDataDir } from './platform/data-dir-lock.ts'
import { createHostPolicy } from './platform/host-policy.ts'
import type { KeyValue } from './platform/kv/index.ts'
import { systemClock } from './platform/clock.ts'
import { ROLES, type Role } from './platform/roles.ts'
import type { Payments } from './payments/index.ts'
import type { DevChain } from './payments/chain/types.ts'
import type { Address } from './payments/types.ts'
import type { RefundStanding } from './payments/refunds.ts'
import type { Catalog } from './catalog/catalog.ts'
import type { ServiceAppDeps } from './catalog/service-app.ts'
import { GATEWAY_OPERATIONS } from './gateway/app.ts'
import { SCHEDULER_OPERATIONS } from './scheduler/app.ts'
import type { EnvSecretsPort, SchedulerService } from './scheduler/service.ts'
import { MEMORY_OPERATIONS } from './memory/app.ts'
import type { MemoryRole } from './memory/role.ts'
import type { MediaClient, MediaService } from './media/service.ts'
import type { ReviewsRole } from './reviews/role.ts'
import type { TaskController } from '../controllers/task-controller.ts'
import type { RunController } from '../controllers/run-controller.ts'
import type { ExecutorHealthMonitor, PrerequisiteReport } from '../controllers/local/prerequisites.ts'
import type { ResourceStore, RunExecutor, RunResource, TaskResource } from './scheduler/contract/index.ts'

export { ROLES, type Role }

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
  /** Built in roles with a public API (gateway, scheduler-api, memory) or that take payments. */
  catalog: Catalog | undefined
  /** Open in roles that take payments or send refunds (gateway, scheduler-api, controller, memory). */
  payments: Payments | undefined
  /** Open in the scheduler-api and controller roles. */
  scheduler: SchedulerService | undefined
  controllers: { tasks: TaskController; runs: RunController } | undefined
  /** How long each start-up phase took (ms since the phase before it; `total` since start() was called). */
  startup: Record<string, number>
  /** Resident memory at the end of each start-up phase, MB. */
  startupRssMb: Record<string, number>
  stop(): Promise<void>
}

/** Every operation with a handler in this build, whichever roles run in this process. */
export const IMPLEMENTED_OPERATIONS: ReadonlySet<string> = new Set([...GATEWAY_OPERATIONS, ...SCHEDULER_OPERATIONS, ...MEMORY_OPERATIONS])

/** The database of this process (src/platform/db/open.ts). */
export { openPlatformDb }

/**
 * The modules a process needs for its roles, imported together (their loading interleaves with
 * PGlite's start). Each is a promise of its module: a role's modules are only imported when it runs.
 */
function importModules(roles: readonly Role[], config: Config) {
  const has = (role: Role) => roles.includes(role)
  const takesPayments = has('gateway') || has('scheduler-api') || has('controller') || has('memory')
  const scheduling = (has('scheduler-api') || has('controller')) && takesPayments
  const mediaHere = has('media') || (has('gateway') && !config.mediaUrl)
  const only = <T>(wanted: boolean, load: () => Promise<T>): Promise<T> | undefined => (wanted ? load() : undefined)
  return {
    platform: Promise.all([
      import('./platform/db/migrate.ts'),
      import('./platform/kv/index.ts'),
      import('./platform/metrics.ts'),
      import('./platform/http.ts'),
      import('./platform/mailer.ts'),
      import('./platform/blob-store.ts'),
      // Light (SQL and gauges): every process reports stuck settlements and refunds under /readyz.
      import('./payments/outcomes.ts'),
      import('./payments/refunds.ts'),
    ]),
    payments: only(takesPayments, () => Promise.all([import('./payments/index.ts'), import('./catalog/registry.ts'), import('./catalog/catalog.ts')])),
    scheduler: only(scheduling, () =>
      Promise.all([
        import('./scheduler/service.ts'),
        import('./scheduler/secrets.ts'),
        import('./scheduler/domain/rates.ts'),
        has('controller') ? import('../controllers/task-controller.ts') : undefined,
        has('controller') ? import('../controllers/run-controller.ts') : undefined,
        has('controller') ? import('../controllers/informer.ts') : undefined,
      ]),
    ),
    schedulerApi: only(scheduling && has('scheduler-api'), () =>
      Promise.all([import('./scheduler/app.ts'), import('./scheduler/helpers/index.ts'), import('./payments/mpp/index.ts')]),
    ),
    localExecutor: only(scheduling && config.schedulerExecutor === 'local', () =>
      Promise.all([import('../controllers/local/postgres-store.ts'), import('../controllers/local/sandbox-executor.ts'), import('../controllers/local/workdirs.ts')]),
    ),
    media: only(mediaHere, () => import('./media/service.ts')),
    mediaApp: only(has('media') && !has('gateway'), () => import('./media/app.ts')),
    gateway: only(has('gateway') && takesPayments, () =>
      Promise.all([import('./gateway/app.ts'), import('./gateway/media-sales.ts'), import('./reviews/role.ts'), config.mediaUrl ? import('./media/client.ts') : undefined]),
    ),
    memory: only(has('memory') && takesPayments, () => Promise.all([import('./memory/app.ts'), import('./memory/role.ts')])),
  }
}

/** Settles every promise of `modules` (so none rejects unobserved when start-up fails early). */
function settleAll(modules: ReturnType<typeof importModules>): Promise<unknown> {
  return Promise.allSettled(Object.values(modules))
}

/** Elapsed time (and resident memory) per start-up phase, for the ready log line. */
function phaseTimer() {
  const started = performance.now()
  let last = started
  const phases: Record<string, number> = {}
  const rssMb: Record<string, number> = {}
  return {
    phases,
    rssMb,
    mark(name: string): void {
      const now = performance.now()
      phases[name] = Math.round(now - last)
      rssMb[name] = Math.round(process.memoryUsage.rss() / 2 ** 20)
      last = now
    },
    total(): Record<string, number> {
      phases.total = Math.round(performance.now() - started)
      return phases
    },
  }
}

/** One line on stderr for a missing system prerequisite: what it stops, and the command that fixes it. */
function sayMissing(line: string): void {
  process.stderr.write(`agent-gateway: ${line}\n`)
}

export async function start(config: Config, roles: readonly Role[], logger: Logger): Promise<Running> {
  const startedAt = new Date()
  const timer = phaseTimer()
  const has = (role: Role) => roles.includes(role)
  const takesPayments = has('gateway') || has('scheduler-api') || has('controller') || has('memory')
  // A configuration this start cannot serve is refused before anything is opened.
  if (has('media') && !has('gateway') && !config.mediaInternalToken) {
    throw new ConfigError('MEDIA_INTERNAL_TOKEN', 'is required when the media role runs without the gateway (the gateway presents it)')
  }

  // One process per embedded DATA_DIR (PGlite files and the dev chain's state): the lock comes
  // before anything starts.
  const unlock = config.databaseUrl ? undefined : lockDataDir(config.dataDir)

  // Started first, running beside everything below: the role modules' import, the dev chain, the
  // prerequisite checks.
  const modules = importModules(roles, config)
  // Local executor: its prerequisites (bwrap, prlimit, the interpreters, user namespaces) are
  // checked while the platform opens. A missing one is said on stderr with its fix, turns the
  // scheduler's /readyz to 503 and refuses create/fund/run now/trigger/webhook (503, before any
  // 402); the rest is served. Kubernetes runs in runner images that carry everything.
  const executorHealth: Promise<ExecutorHealthMonitor | undefined> =
    config.schedulerExecutor === 'local' && (has('scheduler-api') || has('controller'))
      ? import('../controllers/local/prerequisites.ts').then(({ createExecutorHealth }) =>
          createExecutorHealth({ onChange: (report, previous) => reportExecutor(logger, report, previous) }),
        )
      : Promise.resolve(undefined)
  const executorChecked = executorHealth.then((health) => health?.refresh()).catch((error: unknown) => logger.error({ err: error }, 'local executor: prerequisite check failed'))
  // Chromium renders review snapshots of live pages (gateway) and the screenshot helper (scheduler).
  const chromiumChecked = has('gateway') || has('scheduler-api') ? checkChromium(config.chromiumPath, logger) : undefined
  // The embedded dev chain (anvil, its own process) starts while PGlite opens.
  const devChain: Promise<DevChain> | undefined =
    takesPayments && !config.chainRpcUrl
      ? import('./payments/chain/dev.ts').then(({ startDevChain }) =>
          startDevChain({ dataDir: path.join(config.dataDir, 'chain'), logger, ...(config.chainConfirmations ? { confirmations: config.chainConfirmations } : {}) }),
        )
      : undefined
  devChain?.catch(() => {}) // observed below; a failure is reported there

  let db: Db | undefined
  let kv: KeyValue | undefined
  let payments: Payments | undefined
  let chain: DevChain | undefined
  // Closes whatever this start opened; also the stop of a running process (after its listeners).
  let closeRest: () => Promise<void> = async () => {}
  const closeOpened = async () => {
    await closeRest().catch(() => {})
    await payments?.close().catch(() => {})
    await (chain ?? (await devChain?.catch(() => undefined)))?.close().catch(() => {})
    await Promise.allSettled([db?.close(), kv?.close()])
  }
  try {
    db = await openDatabase(config, unlock, logger)
    timer.mark('database')
    const [
      { migrate, migrationsDir },
      { openKeyValue },
      { createMetrics },
      { createHttpApp },
      { createMailer, warnMailUndelivered },
      { openBlobStore },
      { registerPaymentMetrics, stuckSettlements },
      { registerRefundMetrics, stuckRefunds },
    ] = await modules.platform
    kv = await openKeyValue(config.redisUrl ? { kind: 'redis', url: config.redisUrl } : { kind: 'memory' })
    await migrate(db, migrationsDir)
    timer.mark('migrations')
    const running = await assemble()
    return running

    // The roles over the open platform (a function so that `db` and `kv` are narrowed once).
    async function assemble(): Promise<Running> {
      const dbOpen = db as Db
      const kvOpen = kv as KeyValue
      // PGlite under the data-dir lock: no other process shares this database, so whatever payment or
      // refund a process left open before this start is an orphan, decided now rather than after the
      // stale windows that protect the requests of other replicas on Postgres.
      const orphans = dbOpen.kind === 'pglite' ? { orphanedBefore: startedAt } : {}
      const paymentModules = await modules.payments
      if (paymentModules) {
        const [{ openPayments }, { registry }] = paymentModules
        chain = await devChain
        timer.mark('chain')
        payments = await openPayments({
          db: dbOpen,
          kv: kvOpen,
          logger,
          clock: systemClock,
          registry,
          dataDir: config.dataDir,
          payTo: config.payTo as Address,
          gatewayUrl: config.publicBaseUrl,
          chainRpcUrl: config.chainRpcUrl,
          settlerPrivateKey: config.settlerPrivateKey,
          chainConfirmations: config.chainConfirmations,
          facilitatorUrl: config.x402FacilitatorUrl,
          facilitatorHeaders: config.x402FacilitatorHeaders,
          facilitatorTimeoutMs: config.x402FacilitatorTimeoutMs,
          tempoRpcUrl: config.tempoRpcUrl,
          mppSecretKey: config.mppSecretKey,
          offerReceiptSigningKeys: config.offerReceiptSigningKeys,
          // Started above, beside PGlite; closed by this module (after payments) on stop.
          ...(chain ? { chain } : {}),
          // Every role decides the open settlements of the work it sells (the effects it registers).
          reconcileEveryMs: 30_000,
        })
        // The dev chain's faucet and dev routes: as if openPayments had started the chain itself.
        if (chain) payments.devChain = chain
      }
      const mailer = createMailer({ smtpUrl: config.smtpUrl, from: config.mailFrom })
      // The gateway's dev routes say it themselves; any other process on a real chain says it here.
      if (!(payments?.devChain && has('gateway'))) warnMailUndelivered(mailer, logger)
      const metrics = createMetrics()
      let catalog: Catalog | undefined
      let deps: ServiceAppDeps | undefined
      const readiness = { database: () => dbOpen.ping(), kv: () => kvOpen.ping() }
      // Every listener answers the same hosts: those of the URLs this deployment is configured with.
      const hosts = createHostPolicy({
        bindHost: config.host,
        urls: [config.publicBaseUrl, config.publicSchedulerUrl, config.publicMemoryUrl, config.publicMediaUrl, config.schedulerInternalUrl, config.mediaUrl],
        allowedHosts: config.allowedHosts,
      })
      let diagnostics: ServiceAppDeps['diagnostics'] = { settlements: () => stuckSettlements(dbOpen) }
      if (paymentModules && payments) {
        const [, { registry }, { createCatalog }] = paymentModules
        registerPaymentMetrics(metrics.registry, dbOpen)
        catalog = createCatalog(registry, {
          urls: { gateway: config.publicBaseUrl, scheduler: config.publicSchedulerUrl, memory: config.publicMemoryUrl },
          implemented: IMPLEMENTED_OPERATIONS,
          mppCharges: payments.mppCharges,
        })
        deps = {
          catalog,
          logger,
          metrics,
          bodyLimitBytes: config.bodyLimitBytes,
          payTo: config.payTo,
          offerReceiptSigners: payments.offerReceipt.signerAddresses,
          readiness,
          diagnostics,
          hosts,
        }
      }
      timer.mark('payments')

      const planned: { name: string; port: number; app: FastifyInstance }[] = []
      // The role apps of this process, for the gateway's MCP tool calls (filled as they are built).
      const localApps: LocalApps = new Map()
      // Scheduler: one service over the Task/Run resources, shared by the API and the controllers.
      let scheduler: SchedulerService | undefined
      let controllers: Running['controllers']
      let refundTimer: NodeJS.Timeout | undefined
      let elector: { start(): void; stop(): Promise<void> } | undefined
      const blobs = openBlobStore(config)
      // Refund outboxes this process sends from (scheduler escrows, media sales): one set of gauges.
      const refundStandings: (() => Promise<RefundStanding>)[] = []
      const schedulerModules = await modules.scheduler
      if (schedulerModules && payments) {
        const [{ createSchedulerService, SCHEDULER_CHARGE_EFFECT }, { createSchedulerSecrets, schedulerMasterKey }, { DEFAULT_RATES }, tasksModule, runsModule, informerModule] =
          schedulerModules
        const backend = await schedulerBackend(config, dbOpen, await modules.localExecutor)
        if (has('controller') && config.schedulerExecutor === 'local') {
          // Run dirs of a crashed process (its sandboxes died with it); never those of a live process.
          const removed = await backend.removeStaleWorkDirs?.()
          if (removed) logger.info({ removed }, 'local executor: removed run work dirs left by a process that is gone')
        }
        scheduler = createSchedulerService({
          db: dbOpen,
          clock: systemClock,
          rates: DEFAULT_RATES,
          secrets: createSchedulerSecrets(await schedulerMasterKey(dbOpen, config.schedulerSecretKey)),
          tasks: backend.tasks,
          runs: backend.runs,
          namespace: config.kubeNamespace,
          chain: payments.chain,
          confirm: (keys) => (payments as Payments).confirmations.sweep(keys),
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
        if (has('controller') && tasksModule && runsModule && informerModule) {
          const { TaskController } = tasksModule
          const { RunController } = runsModule
          const { Informer } = informerModule
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
              // A Lease the API server could not renew, or reconciling that failed to start as leader.
              onError: (err: unknown) => logger.warn({ err }, 'controller: leader election'),
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
      let memoryRole: MemoryRole | undefined
      closeRest = async () => {
        if (refundTimer) clearInterval(refundTimer)
        if (mediaRefundTimer) clearInterval(mediaRefundTimer)
        await media?.close().catch(() => {})
        await memoryRole?.stop().catch(() => {})
        await reviewsRole?.stop().catch(() => {})
        if (elector) await elector.stop().catch(() => {})
        if (controllers) await Promise.allSettled([controllers.tasks.stop(), controllers.runs.stop()])
        await Promise.allSettled(planned.map((entry) => entry.app.close()))
        mailer.close()
      }
      const mediaModule = await modules.media
      if (mediaModule) {
        media = mediaModule.createMediaService({
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
        // A missing tool is said once, one line per package with its fix; the rest of the product
        // runs, songs/speech answer 503 until it is installed.
        void media
          .prerequisites()
          .then((missing) => reportMediaTools(logger, missing))
          .catch((error: unknown) => logger.warn({ err: error }, 'media: tool check failed'))
      }
      timer.mark('scheduler+media')
      const gatewayModules = await modules.gateway
      if (gatewayModules && payments && deps) {
        const [{ buildGatewayApp }, { registerMediaSales }, { openReviewsRole }, clientModule] = gatewayModules
        const { registry } = (paymentModules as NonNullable<typeof paymentModules>)[1]
        // Songs and speech are sold here: their sales are decided with their payments, and the
        // undelivered part of a settled sale is refunded from the media refund outbox.
        const mediaRefunds = registerMediaSales({ db: dbOpen, payments, logger })
        if (orphans.orphanedBefore) await mediaRefunds.resumeOrphans(orphans.orphanedBefore)
        mediaRefundTimer = setInterval(() => {
          mediaRefunds.retryDue().catch((error: unknown) => logger.error({ err: error }, 'media refund pass failed'))
        }, 15_000)
        mediaRefundTimer.unref()
        refundStandings.push(() => mediaRefunds.standing())
        const client: MediaClient =
          config.mediaUrl && clientModule ? clientModule.createHttpMediaClient({ url: config.mediaUrl, token: config.mediaInternalToken as string }) : (media as MediaService)
        const reviewsService = registry.services.find((service) => service.slug === 'reviews-create')
        reviewsRole = await openReviewsRole({
          config,
          db: dbOpen,
          blobs,
          clock: systemClock,
          logger,
          plans: reviewsService?.plans ?? [],
          priceMicros: reviewsService?.meter?.unitPriceMicros ?? 0n,
        })
        planned.push({
          name: 'gateway',
          port: config.gatewayPort,
          app: buildGatewayApp({
            ...deps,
            diagnostics: { ...deps.diagnostics, mediaRefunds: () => stuckRefunds({ standing: () => mediaRefunds.standing() }) },
            payments,
            mailer,
            db: dbOpen,
            media: { client, hostedBlobs: config.mediaUrl ? undefined : blobs },
            reviews: reviewsRole,
            localApps,
          }),
        })
        // The isolated origin of review sites: its own listener, never the gateway's origin.
        planned.push({ name: 'reviews', port: config.reviewsPort, app: reviewsRole.siteHost })
      }
      timer.mark('gateway')
      const schedulerApiModules = await modules.schedulerApi
      if (schedulerApiModules && payments && scheduler && deps && schedulerModules) {
        const [{ buildSchedulerApp }, { registerHelperRoutes, registerSiblingPublicRoutes }, { tempoClientFromUrl }] = schedulerApiModules
        const { DEFAULT_RATES } = schedulerModules[2]
        const health = await executorHealth
        const helperDeps = {
          db: dbOpen,
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
            ...(health ? { readiness: { ...deps.readiness, executor: () => health.readiness() }, executorHealth: health } : {}),
            diagnostics,
            payments,
            kv: kvOpen,
            service: scheduler,
            extraRoutes: (app) => {
              registerHelperRoutes(app, helperDeps)
              registerSiblingPublicRoutes(app, helperDeps)
            },
          }),
        })
      }
      timer.mark('scheduler-api')
      const memoryModules = await modules.memory
      if (memoryModules && payments && deps) {
        const [{ buildMemoryApp }, { openMemoryRole }] = memoryModules
        const role = await openMemoryRole({ config, db: dbOpen, clock: systemClock, logger, payments })
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
            kv: kvOpen,
            service: role.service,
            money: role.money,
          }),
        })
      }
      timer.mark('memory')
      for (const entry of planned) if (entry.name === 'scheduler' || entry.name === 'memory') localApps.set(entry.name, entry.app)
      if (payments && refundStandings.length > 0) {
        const { chain: paymentChain } = payments
        registerRefundMetrics(metrics.registry, {
          standing: () => combinedStanding(refundStandings),
          walletBalance: () => paymentChain.balanceOf(paymentChain.serviceAddress),
        })
      }
      // Media and controller serve no public API; on their own they still need probes and /metrics.
      const mediaAppModule = await modules.mediaApp
      if (mediaAppModule && media) {
        const service = media
        planned.push({
          name: 'media',
          port: config.mediaPort,
          app: mediaAppModule.buildMediaApp({
            name: 'media',
            logger,
            metrics,
            bodyLimitBytes: config.bodyLimitBytes,
            readiness,
            diagnostics: { ...diagnostics, tools: () => service.prerequisites() },
            hosts,
            service,
            blobs,
            internalToken: config.mediaInternalToken as string,
          }),
        })
      }
      if (has('controller') && roles.length === 1) {
        planned.push({
          name: 'controller',
          port: config.controllerPort,
          app: createHttpApp({ name: 'controller', logger, metrics, bodyLimitBytes: config.bodyLimitBytes, readiness, diagnostics, hosts }),
        })
      }

      // Every listener at once (each compiles its routes' schemas while the others bind).
      const bound = await Promise.allSettled(
        planned.map(async (entry) => {
          await entry.app.listen({ host: config.host, port: entry.port })
          const address = entry.app.server.address()
          const port = typeof address === 'object' && address ? address.port : entry.port
          return { name: entry.name, url: `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`, app: entry.app }
        }),
      )
      const refused = bound.find((result) => result.status === 'rejected')
      if (refused) throw refused.reason
      const listeners: Listener[] = bound.map((result) => (result as PromiseFulfilledResult<Listener>).value)
      timer.mark('listen')
      // The check started before the database opened: the scheduler says it before it is ready.
      await Promise.all([executorChecked, chromiumChecked])

      if (controllers) {
        const reconciling = controllers
        if (elector) {
          // Kubernetes: only the Lease holder reconciles; losing the Lease stops both controllers.
          elector.start()
        } else {
          await reconciling.runs.start()
          await reconciling.tasks.start()
        }
        // Crash recovery (refunds due, Task resources owed a write) in the background: a restart
        // after a crash is ready as fast as a clean one.
        if (scheduler) void scheduler.recover(orphans).catch((error: unknown) => logger.error({ err: error }, 'scheduler recovery pass failed'))
      }
      timer.mark('controllers')

      // Settlements a crash left undecided are decided from the chain in the background (then every 30 s).
      if (payments) void payments.reconcile(orphans).catch((error: unknown) => logger.error({ err: error }, 'settlement reconciliation failed'))

      let stopping: Promise<void> | undefined
      return {
        scheduler,
        controllers,
        roles: [...roles],
        listeners,
        db: dbOpen,
        kv: kvOpen,
        catalog,
        payments,
        startup: timer.total(),
        startupRssMb: timer.rssMb,
        stop() {
          // Readiness goes 503 first so load balancers stop sending; close() then drains in-flight requests.
          stopping ??= (async () => {
            for (const listener of listeners) listener.app.markDraining()
            await closeOpened()
          })()
          return stopping
        },
      }
    }
  } catch (error) {
    await settleAll(modules)
    await closeOpened()
    throw error
  }
}

/** The refund outboxes of this process as one standing (sums; the oldest stuck key of the first that has one). */
async function combinedStanding(sources: (() => Promise<RefundStanding>)[]): Promise<RefundStanding> {
  const standings = await Promise.all(sources.map((source) => source()))
  return {
    outstanding: standings.reduce((sum, standing) => sum + standing.outstanding, 0),
    outstandingMicros: standings.reduce((sum, standing) => sum + standing.outstandingMicros, 0n),
    stuck: standings.reduce((sum, standing) => sum + standing.stuck, 0),
    waiting: standings.reduce((sum, standing) => sum + standing.waiting, 0),
    oldestStuckKey: standings.find((standing) => standing.oldestStuckKey !== null)?.oldestStuckKey ?? null,
    lastError: standings.find((standing) => standing.lastError !== null)?.lastError ?? null,
  }
}

/**
 * The local executor's verdict at start and whenever it changes. At start a missing prerequisite is
 * one line on stderr with its fix; what is not a problem (libraries of the SPEC a local run lacks,
 * an older python) is one short line, its details at debug (docs/sandbox.md).
 */
function reportExecutor(logger: Logger, report: PrerequisiteReport, previous: PrerequisiteReport | undefined): void {
  if (!previous && report.notes.length > 0) {
    const python = report.missingLibraries.python?.length ?? 0
    const node = report.missingLibraries.node?.length ?? 0
    logger.debug({ missingLibraries: report.missingLibraries, notes: report.notes }, 'local executor: notes')
    const missing =
      python + node > 0
        ? `${[python > 0 ? `${python} python` : '', node > 0 ? `${node} node` : ''].filter(Boolean).join(' and ')} libraries the SPEC preinstalls are missing for local runs`
        : ''
    const others = report.notes.filter((note) => !/libraries the SPEC preinstalls/.test(note))
    logger.warn(
      { missingLibraries: report.missingLibraries },
      `local executor: ${[...others, missing].filter(Boolean).join('; ')} (tasks that import them fail; LOG_LEVEL=debug lists them, docs/sandbox.md#preinstalled-libraries says how to install them)`,
    )
  }
  if (report.ok) {
    logger.info(
      { tools: report.tools, runtimes: report.runtimes },
      previous ? 'local executor: prerequisites now satisfied; the scheduler takes tasks again' : 'local executor: prerequisites satisfied',
    )
    return
  }
  const problems = report.problems.map((problem) => `${problem.reason} (fix: ${problem.fix})`).join('; ')
  if (previous) {
    logger.error({ problems: report.problems }, `local executor cannot run task scripts: ${problems}`)
    return
  }
  logger.debug({ problems: report.problems }, `local executor cannot run task scripts: ${problems}`)
  for (const problem of report.problems) {
    sayMissing(
      `the local sandbox executor (SCHEDULER_EXECUTOR=local) cannot run task scripts: ${problem.reason}; the scheduler refuses new tasks until then (the rest runs); fix: ${problem.fix}`,
    )
  }
}

/** Missing media tools at start: one line per package to install (ffmpeg and ffprobe are one). */
function reportMediaTools(logger: Logger, missing: Record<string, unknown> | undefined): void {
  const problems = (missing?.problems ?? []) as { tool: string; reason: string; fix: string }[]
  if (problems.length === 0) return
  logger.debug({ problems }, 'media: tools missing')
  const byFix = new Map<string, string[]>()
  for (const problem of problems) byFix.set(problem.fix, [...(byFix.get(problem.fix) ?? []), problem.reason])
  for (const [fix, reasons] of byFix) sayMissing(`media: ${reasons.join('; ')}; songs and speech answer 503 until then (the rest runs); fix: ${fix}`)
}

/** Chromium for review snapshots and the screenshot helper: one line when it is not there. */
async function checkChromium(chromiumPath: string, logger: Logger): Promise<void> {
  const { chromiumAvailable, DEFAULT_CHROMIUM_PATH } = await import('./platform/page-shots.ts')
  if (await chromiumAvailable(chromiumPath)) return
  logger.debug({ chromiumPath }, 'chromium: not found')
  const fix = chromiumPath === DEFAULT_CHROMIUM_PATH ? 'apt-get install -y chromium' : `point CHROMIUM_PATH at a Chromium binary, or unset it and apt-get install -y chromium`
  sayMissing(
    `chromium is not installed (${chromiumPath} is not an executable): review snapshots of live pages and the screenshot helper fail until then (the rest runs); fix: ${fix}`,
  )
}

/** Where Task/Run resources live and how runs execute: Postgres/PGlite + bubblewrap, or Kubernetes. */
interface SchedulerBackend {
  tasks: ResourceStore<TaskResource>
  runs: ResourceStore<RunResource>
  executor: RunExecutor
  envSecrets?: EnvSecretsPort
  createElector?: (options: { onStartedLeading: (signal: AbortSignal) => Promise<void>; onStoppedLeading?: () => void; onError?: (err: unknown) => void }) => {
    start(): void
    stop(): Promise<void>
  }
  /** Local executor: removes the run dirs of processes that are gone; the count removed. */
  removeStaleWorkDirs?: () => Promise<number>
}

type LocalExecutorModules = [
  typeof import('../controllers/local/postgres-store.ts'),
  typeof import('../controllers/local/sandbox-executor.ts'),
  typeof import('../controllers/local/workdirs.ts'),
]

async function schedulerBackend(config: Config, db: Db, local: LocalExecutorModules | undefined): Promise<SchedulerBackend> {
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
  const [{ PostgresResourceStore }, { createLocalExecutor }, { removeStaleWorkDirs }] =
    local ?? (await Promise.all([import('../controllers/local/postgres-store.ts'), import('../controllers/local/sandbox-executor.ts'), import('../controllers/local/workdirs.ts')]))
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
