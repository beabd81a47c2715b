// The platform a process's roles open over: the database and its migrations, the key-value store,
// payments and the catalog (when a role takes payments), the mailer, the metrics, the blob store and
// the host policy. Its modules and the dev chain start loading before the database opens.
import path from 'node:path'
import type { Catalog } from '../catalog/catalog.ts'
import type { DevChain } from '../payments/chain/types.ts'
import type { Payments, PaymentsOptions } from '../payments/index.ts'
import { registerPaymentMetrics } from '../payments/outcomes.ts'
import { registerRefundMetrics, type RefundStanding } from '../payments/refunds.ts'
import type { Address } from '../payments/types.ts'
import type { BlobStore } from '../platform/blobs.ts'
import type { Config } from '../platform/config.ts'
import type { Db } from '../platform/db/index.ts'
import { openDatabase } from '../platform/db/open.ts'
import { createHostPolicy, type HostPolicy } from '../platform/host-policy.ts'
import type { KeyValue } from '../platform/kv/index.ts'
import type { Logger } from '../platform/logger.ts'
import type { Mailer } from '../platform/mailer.ts'
import type { Metrics } from '../platform/metrics.ts'
import type { Role } from '../platform/roles.ts'
import { systemClock } from '../platform/clock.ts'
import { early } from './context.ts'
import { IMPLEMENTED_OPERATIONS } from './operations.ts'

export interface Platform {
  db: Db
  kv: KeyValue
  payments: Payments | undefined
  catalog: Catalog | undefined
  mailer: Mailer
  metrics: Metrics
  blobs: BlobStore
  hosts: HostPolicy | undefined
}

export interface PlatformOpener {
  /** Opens the platform, marking the phases database, migrations, chain and payments. */
  open(unlock: (() => void) | undefined, mark: (phase: string) => void): Promise<Platform>
  /** Closes what open() opened, also after it failed: the mailer, payments, the dev chain, the database and the store. */
  close(): Promise<void>
}

/** Starts the platform's imports and the dev chain (anvil, its own process) beside PGlite's open. */
export function preloadPlatform(config: Config, roles: readonly Role[], takesPayments: boolean, logger: Logger): PlatformOpener {
  const paying = <T>(load: () => Promise<T>): Promise<T> | undefined => (takesPayments ? early(load()) : undefined)
  const migrations = early(import('../platform/db/migrate.ts'))
  const keyValue = early(import('../platform/kv/index.ts'))
  const metricsModule = early(import('../platform/metrics.ts'))
  const mailerModule = early(import('../platform/mailer.ts'))
  const blobsModule = early(import('../platform/blob-store.ts'))
  const paymentsModule = paying(() => import('../payments/index.ts'))
  const registryModule = paying(() => import('../catalog/registry.ts'))
  const catalogModule = paying(() => import('../catalog/catalog.ts'))
  const devChain = config.chainRpcUrl
    ? undefined
    : paying(() =>
        import('../payments/chain/dev.ts').then(({ startDevChain }) =>
          startDevChain({ dataDir: path.join(config.dataDir, 'chain'), logger, ...(config.chainConfirmations ? { confirmations: config.chainConfirmations } : {}) }),
        ),
      )

  let db: Db | undefined
  let kv: KeyValue | undefined
  let payments: Payments | undefined
  let mailer: Mailer | undefined
  return {
    async open(unlock, mark) {
      const database = await openDatabase(config, unlock, logger)
      db = database
      mark('database')
      const { openKeyValue } = await keyValue
      const store = await openKeyValue(config.redisUrl ? { kind: 'redis', url: config.redisUrl } : { kind: 'memory' })
      kv = store
      const { migrate, migrationsDir } = await migrations
      await migrate(database, migrationsDir)
      mark('migrations')

      let catalog: Catalog | undefined
      const { createMetrics } = await metricsModule
      const metrics = createMetrics()
      if (paymentsModule && registryModule && catalogModule) {
        const chain = await devChain
        mark('chain')
        const { openPayments } = await paymentsModule
        const { registry } = await registryModule
        const opened = await openPayments(paymentsOptions(config, { db: database, kv: store, logger, registry, chain }))
        payments = opened
        // The dev chain's faucet and dev routes: as if openPayments had started the chain itself.
        if (chain) opened.devChain = chain
        registerPaymentMetrics(metrics.registry, database)
        const { createCatalog } = await catalogModule
        catalog = createCatalog(registry, {
          urls: { gateway: config.publicBaseUrl, scheduler: config.publicSchedulerUrl, memory: config.publicMemoryUrl },
          implemented: IMPLEMENTED_OPERATIONS,
          mppCharges: opened.mppCharges,
        })
      }
      const { createMailer, warnMailUndelivered } = await mailerModule
      mailer = createMailer({ smtpUrl: config.smtpUrl, from: config.mailFrom })
      // The gateway's dev routes say it themselves; any other process on a real chain says it here.
      if (!(payments?.devChain && roles.includes('gateway'))) warnMailUndelivered(mailer, logger)
      const { openBlobStore } = await blobsModule
      mark('payments')
      return {
        db: database,
        kv: store,
        payments,
        catalog,
        mailer,
        metrics,
        blobs: openBlobStore(config),
        // Every listener answers the same hosts: those of the URLs this deployment is configured with.
        hosts: createHostPolicy({
          bindHost: config.host,
          urls: [config.publicBaseUrl, config.publicSchedulerUrl, config.publicMemoryUrl, config.publicMediaUrl, config.schedulerInternalUrl, config.mediaUrl],
          allowedHosts: config.allowedHosts,
        }),
      }
    },
    async close() {
      mailer?.close()
      await payments?.close().catch(() => {})
      await (await devChain?.catch(() => undefined))?.close().catch(() => {})
      await Promise.allSettled([db?.close(), kv?.close()])
    },
  }
}

/** One set of refund gauges over every refund outbox this process sends from. */
export function registerRefundGauges(platform: Platform, standings: (() => Promise<RefundStanding>)[]): void {
  if (!platform.payments || standings.length === 0) return
  const { chain } = platform.payments
  registerRefundMetrics(platform.metrics.registry, {
    standing: () => combinedStanding(standings),
    walletBalance: () => chain.balanceOf(chain.serviceAddress),
  })
}

function paymentsOptions(config: Config, opened: Pick<PaymentsOptions, 'db' | 'kv' | 'logger' | 'registry'> & { chain: DevChain | undefined }): PaymentsOptions {
  const { chain, ...platform } = opened
  return {
    ...platform,
    clock: systemClock,
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
    // Started beside PGlite; closed here (after payments) on stop.
    ...(chain ? { chain } : {}),
    // Every role decides the open settlements of the work it sells (the effects it registers).
    reconcileEveryMs: 30_000,
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
