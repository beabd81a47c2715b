// Composition root: opens the platform (src/roles/platform.ts), opens the requested roles over it
// (src/roles: one module per role, in start order), binds their listeners, starts what runs after
// listen, and stops everything in reverse.
//
// Start-up order (docs/architecture.md, "Start-up"): what runs outside this thread starts first and
// runs alongside the rest: the dev chain (anvil), the roles' prerequisite checks (the local
// executor's, Chromium's). The modules of the requested roles load while PGlite opens (a role's
// modules are imported only when it runs here). Then the migrations, the roles, and the listeners,
// all at once.
import { performance } from 'node:perf_hooks'
import type { FastifyInstance } from 'fastify'
import type { Config } from './platform/config.ts'
import type { Logger } from './platform/logger.ts'
import type { Db } from './platform/db/index.ts'
import { openPlatformDb } from './platform/db/open.ts'
import { lockDataDir } from './platform/data-dir-lock.ts'
import type { KeyValue } from './platform/kv/index.ts'
import { systemClock } from './platform/clock.ts'
import { ROLES, type Role } from './platform/roles.ts'
import type { Payments } from './payments/index.ts'
import { stuckSettlements } from './payments/outcomes.ts'
import type { Catalog } from './catalog/catalog.ts'
import type { SchedulerService } from './scheduler/service.ts'
import { early, type Controllers, type Prerequisite, type Probes, type RoleContext, type RoleParts, type SharedServices } from './roles/context.ts'
import { LISTENER_ORDER, ROLE_MODULES } from './roles/index.ts'
import { jobQueueOnDemand } from './roles/job-queue.ts'
import { IMPLEMENTED_OPERATIONS } from './roles/operations.ts'
import { preloadPlatform, registerRefundGauges } from './roles/platform.ts'

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
  controllers: Controllers | undefined
  /** How long each start-up phase took (ms since the phase before it; `total` since start() was called). */
  startup: Record<string, number>
  /** Resident memory at the end of each start-up phase, MB. */
  startupRssMb: Record<string, number>
  stop(): Promise<void>
}

/** Every operation with a handler in this build, whichever roles run in this process. */
export { IMPLEMENTED_OPERATIONS }

/** The database of this process (src/platform/db/open.ts). */
export { openPlatformDb }

/** How long after ready the roles' background workers start (RoleParts.serving). */
const SERVING_DELAY_MS = 1_000

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

export async function start(config: Config, roles: readonly Role[], logger: Logger): Promise<Running> {
  const startedAt = new Date()
  const timer = phaseTimer()
  const wanted = ROLE_MODULES.filter((role) => role.wants(config, roles))
  // A configuration this start cannot serve is refused before anything is opened.
  for (const role of wanted) role.checkConfig?.(config, roles)
  const takesPayments = wanted.some((role) => role.takesPayments)

  // One process per embedded DATA_DIR (PGlite files and the dev chain's state): the lock comes
  // before anything starts.
  const unlock = config.databaseUrl ? undefined : lockDataDir(config.dataDir)

  // Started first, running beside everything below: the prerequisite checks (the roles' own and
  // those they share), then the roles' modules, the platform's modules and the dev chain. The
  // checks' small modules are asked for before the big ones, so their child processes fork this
  // process while it is small (a fork costs several times more once PGlite's memory is mapped) and
  // run beside its imports.
  const prerequisites = new Map<string, Prerequisite>(wanted.flatMap((role) => role.prerequisites?.(config, roles) ?? []).map((check) => [check.name, check]))
  const checked = early(Promise.all([...prerequisites.values()].map((prerequisite) => prerequisite.check(config, logger))))
  const openers = wanted.map((role) => ({ name: role.name, opener: role.preload(config, roles, logger) }))
  const platformOpener = preloadPlatform(config, roles, takesPayments, logger)

  let jobs: ReturnType<typeof jobQueueOnDemand> | undefined
  const opened: RoleParts[] = []
  const apps: FastifyInstance[] = []
  const loops: NodeJS.Timeout[] = []
  // Closes whatever this start opened, in reverse: also the stop of a running process. The
  // listeners close first (in-flight requests finish), then the job queue (its handlers finish),
  // then the roles, then the platform.
  const closeOpened = async () => {
    for (const loop of loops) clearInterval(loop)
    await Promise.allSettled(apps.map((app) => app.close()))
    await jobs?.stop().catch(() => {})
    for (const parts of [...opened].reverse()) await parts.stop?.().catch(() => {})
    await platformOpener.close()
  }
  try {
    const platform = await platformOpener.open(unlock, timer.mark)
    const { db, kv, payments, catalog } = platform
    // PGlite under the data-dir lock: whatever this database holds open from before this start is an orphan.
    const orphans = db.kind === 'pglite' ? { orphanedBefore: startedAt } : {}
    jobs = jobQueueOnDemand({ db, logger })
    const shared: SharedServices = {}
    const context: RoleContext = {
      ...platform,
      config,
      roles,
      logger,
      clock: systemClock,
      orphanedBefore: orphans.orphanedBefore,
      jobs: jobs.get,
      localApps: new Map(),
      shared,
    }
    for (const { name, opener } of openers) {
      const parts = await opener.open(context)
      opened.push(parts)
      for (const [effect, handler] of Object.entries(parts.outcomes ?? {})) payments?.outcomes.register(effect, handler)
      Object.assign(shared, parts.shares)
      timer.mark(name)
    }

    registerRefundGauges(
      platform,
      opened.flatMap((parts) => parts.refundStandings ?? []),
    )
    // Every listener reports what every role contributed, then its own.
    const processProbes: Probes = {
      readiness: Object.assign({ database: () => db.ping(), kv: () => kv.ping() }, ...opened.map((parts) => parts.readiness)),
      diagnostics: Object.assign({ settlements: () => stuckSettlements(db) }, ...opened.map((parts) => parts.diagnostics)),
    }
    const planned = opened.flatMap((parts) => parts.listeners ?? []).sort((a, b) => LISTENER_ORDER.indexOf(a.name) - LISTENER_ORDER.indexOf(b.name))
    for (const listener of planned) {
      apps.push(
        listener.build({
          readiness: { ...processProbes.readiness, ...listener.readiness },
          diagnostics: { ...processProbes.diagnostics, ...listener.diagnostics },
        }),
      )
    }
    timer.mark('apps')

    // Every listener at once (each compiles its routes' schemas while the others bind).
    const bound = await Promise.allSettled(
      planned.map(async (listener, i) => {
        const app = apps[i] as FastifyInstance
        await app.listen({ host: config.host, port: listener.port })
        const address = app.server.address()
        const port = typeof address === 'object' && address ? address.port : listener.port
        return { name: listener.name, url: `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`, app }
      }),
    )
    const refused = bound.find((result) => result.status === 'rejected')
    if (refused) throw refused.reason
    const listeners: Listener[] = bound.map((result) => (result as PromiseFulfilledResult<Listener>).value)
    timer.mark('listen')

    for (const loop of opened.flatMap((parts) => parts.loops ?? [])) {
      const interval = setInterval(() => {
        loop.run().catch((error: unknown) => logger.error({ err: error }, `${loop.name} failed`))
      }, loop.everyMs)
      interval.unref()
      loops.push(interval)
    }
    // The checks started before the database opened: their lines come before ready.
    await checked
    for (const parts of opened) await parts.afterListen?.()
    timer.mark('after-listen')

    // Settlements a crash left undecided are decided from the chain in the background (then every 30 s).
    if (payments) void payments.reconcile(orphans).catch((error: unknown) => logger.error({ err: error }, 'settlement reconciliation failed'))
    // Background workers start a moment after ready: the first requests (probes, the first
    // traffic) are then not queued behind their setup's queries on the database.
    let stopping: Promise<void> | undefined
    const serving = setTimeout(() => {
      for (const parts of opened) {
        parts.serving?.().catch((error: unknown) => {
          if (stopping === undefined) logger.error({ err: error }, 'a background worker failed to start')
        })
      }
    }, SERVING_DELAY_MS)
    serving.unref()
    return {
      scheduler: shared.scheduler,
      controllers: shared.controllers,
      roles: [...roles],
      listeners,
      db,
      kv,
      catalog,
      payments,
      startup: timer.total(),
      startupRssMb: timer.rssMb,
      stop() {
        // Readiness goes 503 first so load balancers stop sending; close() then drains in-flight requests.
        stopping ??= (async () => {
          clearTimeout(serving)
          for (const listener of listeners) listener.app.markDraining()
          await closeOpened()
        })()
        return stopping
      },
    }
  } catch (error) {
    await closeOpened()
    throw error
  }
}
