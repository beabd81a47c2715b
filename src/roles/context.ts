// The roles wing's contract with the composition root (src/runtime.ts): the one context every role
// opens over, and the parts a role hands back (listeners, money, probes, loops, start and stop),
// which the runtime binds, starts and stops for every role alike.
import type { FastifyInstance } from 'fastify'
import type { Catalog } from '../catalog/catalog.ts'
import type { ServiceAppDeps } from '../catalog/service-app.ts'
import type { LocalApps } from '../mcp/dispatcher.ts'
import type { MediaService } from '../media/service.ts'
import type { Payments } from '../payments/index.ts'
import type { OutcomeHandler } from '../payments/outcomes.ts'
import type { RefundStanding } from '../payments/refunds.ts'
import type { BlobStore } from '../platform/blobs.ts'
import type { Clock } from '../platform/clock.ts'
import type { Config } from '../platform/config.ts'
import type { Db } from '../platform/db/index.ts'
import type { HostPolicy } from '../platform/host-policy.ts'
import type { HttpAppOptions, ReadinessCheck } from '../platform/http.ts'
import type { JobQueue } from '../platform/jobs.ts'
import type { KeyValue } from '../platform/kv/index.ts'
import type { Logger } from '../platform/logger.ts'
import type { Mailer } from '../platform/mailer.ts'
import type { Metrics } from '../platform/metrics.ts'
import type { Role } from '../platform/roles.ts'
import type { SchedulerService } from '../scheduler/service.ts'
import type { RunController } from '../../controllers/run-controller.ts'
import type { TaskController } from '../../controllers/task-controller.ts'

export type Diagnostics = NonNullable<HttpAppOptions['diagnostics']>

/** What one listener's /readyz checks (503 when one fails) and reports under `detail`. */
export interface Probes {
  readiness: Record<string, ReadinessCheck>
  diagnostics: Diagnostics
}

export interface PlannedListener {
  name: string
  port: number
  /** Checks only this listener depends on (the local executor: the scheduler's, not the gateway's). */
  readiness?: Record<string, ReadinessCheck>
  /** Details only this listener reports (the memory service's modes, the media tools). */
  diagnostics?: Diagnostics
  /** Called once every role has opened, with the probes of the whole process plus this listener's own. */
  build(probes: Probes): FastifyInstance
}

/** A pass the runtime runs every `everyMs` (unref'd) from listen to stop; a failed pass is logged as "<name> failed". */
export interface BackgroundLoop {
  name: string
  everyMs: number
  run(): Promise<unknown>
}

export interface Controllers {
  tasks: TaskController
  runs: RunController
}

/** What a role opened that the roles after it (in start order) and the running process use. */
export interface SharedServices {
  /** The in-process media service (media role), which the gateway sells from when MEDIA_URL is unset. */
  media?: MediaService
  scheduler?: SchedulerService
  /** The controllers of the first term (a Lease holder builds new ones per term). */
  controllers?: Controllers
}

export interface RoleParts {
  listeners?: PlannedListener[]
  /** Payment outcome handlers by effect, registered before any listener binds. */
  outcomes?: Record<string, OutcomeHandler>
  /** The refund outboxes this role sends from: one set of refund gauges per process. */
  refundStandings?: (() => Promise<RefundStanding>)[]
  /** Checks and details every listener of the process reports. */
  readiness?: Record<string, ReadinessCheck>
  diagnostics?: Diagnostics
  loops?: BackgroundLoop[]
  /** Work that starts once every listener is bound: controllers, leader election, recovery passes. */
  afterListen?: () => Promise<void>
  /**
   * Background workers started once the process serves (after ready), not awaited: what needs them
   * first opens them itself. A failure is logged by the runtime.
   */
  serving?: () => Promise<void>
  shares?: SharedServices
  /** Releases what open() and afterListen started; runs after the listeners closed and the job queue stopped. */
  stop?: () => Promise<void>
}

export interface RoleContext {
  config: Config
  roles: readonly Role[]
  logger: Logger
  clock: Clock
  db: Db
  kv: KeyValue
  blobs: BlobStore
  metrics: Metrics
  mailer: Mailer
  hosts: HostPolicy | undefined
  /** Open when a role of this process takes payments or sends refunds (not in a media-only process). */
  payments: Payments | undefined
  /** Built with payments. */
  catalog: Catalog | undefined
  /**
   * Set on PGlite under the data-dir lock: no other process shares this database, so any payment or
   * refund left open before this start is an orphan, decided now rather than after the stale windows
   * that protect the requests of other replicas on Postgres.
   */
  orphanedBefore: Date | undefined
  /** The process's one job queue, opened by the first role that asks; the runtime stops it. */
  jobs(): Promise<JobQueue>
  /** The role apps of this process the gateway's MCP tool calls go into; each role adds its own as it builds it. */
  localApps: LocalApps
  shared: Readonly<SharedServices>
}

/** A system prerequisite checked once per process, beside the platform's open, and awaited after listen. */
export interface Prerequisite {
  name: string
  check(config: Config, logger: Logger): Promise<void>
}

/** The opener a role's preload returns: it awaits what preload started. */
export interface RoleOpener {
  open(context: RoleContext): Promise<RoleParts>
}

export interface RoleModule {
  /** The start-up phase this role's open is timed under. */
  readonly name: string
  /** The process opens payments and the catalog when a wanted role says so. */
  readonly takesPayments: boolean
  wants(config: Config, roles: readonly Role[]): boolean
  /** Throws a ConfigError for a configuration this role cannot serve, before anything is opened. */
  checkConfig?(config: Config, roles: readonly Role[]): void
  prerequisites?(config: Config, roles: readonly Role[]): readonly Prerequisite[]
  /** Starts the role's imports (and checks of its own) so that they overlap the database's open. */
  preload(config: Config, roles: readonly Role[], logger: Logger): RoleOpener
}

/**
 * A promise started early and awaited later: its rejection is reported where it is awaited, never as
 * an unhandled rejection while start-up is busy elsewhere (or has failed first).
 */
export function early<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => {})
  return promise
}

/** The payments and catalog of a role that takes payments (the runtime opens them for it). */
export function paid(context: RoleContext): { payments: Payments; catalog: Catalog } {
  const { payments, catalog } = context
  if (!payments || !catalog) throw new Error('a role that takes payments opened without payments')
  return { payments, catalog }
}

/** What every catalog-built listener (gateway, scheduler-api, memory) is built with. */
export function serviceAppDeps(context: RoleContext, probes: Probes): ServiceAppDeps {
  const { catalog, payments } = paid(context)
  return {
    catalog,
    logger: context.logger,
    metrics: context.metrics,
    bodyLimitBytes: context.config.bodyLimitBytes,
    payTo: context.config.payTo,
    offerReceiptSigners: payments.offerReceipt.signerAddresses,
    readiness: probes.readiness,
    diagnostics: probes.diagnostics,
    hosts: context.hosts,
  }
}
