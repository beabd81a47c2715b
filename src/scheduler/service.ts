// The scheduler wing, assembled: one object over the modules that each own a concern, serving
// its three callers — the HTTP app (task commands, reads, accounts and keys), the run
// controller (the run ledger port) and the payments module (the escrow payments' outcome).
//   escrow-store.ts   balance, reservations, runs in flight, ledger rows (the only SQL that knows them)
//   task-store.ts     every write of a task row, and its reads
//   run-store.ts      every write of a run row, and its reads
//   task-core.ts      loading tasks, state-machine facts and effects, post-commit work, the task view
//   task-resources.ts Task/Run resource writes, the status-change outbox, orphan removal
//   tasks.ts          task commands: create, fund, pause, resume, trigger, PATCH, env, clone, webhook, delete, synchronous runs
//   task-reads.ts     runs, logs, ledger, owner usage, refund outlook, settled cost
//   run-ledger.ts     the controller's port: dispatch, start, finish, release
//   charges.ts        escrow payments: provisional until their settlement is decided
//   refunds.ts        on-chain refunds, an outbox of signed transactions
//   accounts.ts       accounts and API keys
import type { Db } from '../platform/db/index.ts'
import type { Clock } from '../platform/clock.ts'
import type { Logger } from '../platform/logger.ts'
import type { Mailer } from '../platform/mailer.ts'
import type { SchedulerRates } from './domain/rates.ts'
import { escrowOf, settledChargeKeys } from './escrow-store.ts'
import { createSchedulerMarketplace, type SchedulerMarketplace } from './marketplace.ts'
import type { SchedulerSecrets } from './secrets.ts'
import { createRefunds, type RefundChain } from '../payments/refunds.ts'
import { createTaskResources } from './task-resources.ts'
import { createTaskCore } from './task-core.ts'
import { createTaskReads, type LogStore } from './task-reads.ts'
import { createRunLedger } from './run-ledger.ts'
import { createTaskCommands, type EnvSecretsPort } from './tasks.ts'
import { createChargeOutcomes } from './charges.ts'
import { createAccounts } from './accounts.ts'
import type { ResourceStore, RunResource, TaskResource } from './contract/index.ts'

export { SCHEDULER_CHARGE_EFFECT, type PaymentFacts } from './charges.ts'
export { TASK_API_VERSION } from './task-resources.ts'
export type { EnvSecretsPort } from './tasks.ts'
export type { LogStore } from './task-reads.ts'
export type { DispatchInput, DispatchResult, RunClaim } from './run-ledger.ts'

export interface SchedulerServiceDeps {
  db: Db
  clock: Clock
  rates: SchedulerRates
  secrets: SchedulerSecrets
  tasks: ResourceStore<TaskResource>
  runs: ResourceStore<RunResource>
  namespace: string
  chain: RefundChain
  /** Asks the chain about payments now (the confirmation sweep), for refunds that return them. */
  confirm?: (replayKeys: readonly string[]) => Promise<unknown>
  mailer: Mailer
  logger: Logger
  logs: LogStore
  /** Public base of the scheduler ({scheduler_url}). */
  publicUrl: string
  /** Base URL run sandboxes use to reach the helper endpoint (defaults to publicUrl). */
  internalUrl?: string
  envSecrets?: EnvSecretsPort
  /** How long a synchronous run may wait beyond its own caps (default 60 s). */
  syncSlackMs?: number
  /** Public base of the gateway ({base_url}), named in marketplace-rail answers (plan purchase links). */
  gatewayUrl?: string
  /** The marketplace rail (plan access, usage reports); default: the registry's scheduler plans on this database. */
  marketplace?: SchedulerMarketplace
}

export function createSchedulerService(deps: SchedulerServiceDeps) {
  const { db, clock, rates, secrets, logger } = deps
  const marketplace = deps.marketplace ?? createSchedulerMarketplace({ db, clock, rates, logger, gatewayUrl: deps.gatewayUrl })
  const refunds = createRefunds({
    db,
    chain: deps.chain,
    logger,
    source: { of: async (q, taskId) => ({ replayKeys: await settledChargeKeys(q, taskId), refundedElsewhereMicros: 0n }) },
    ...(deps.confirm ? { confirm: deps.confirm } : {}),
  })
  const resources = createTaskResources({ db, clock, logger, tasks: deps.tasks, runs: deps.runs, namespace: deps.namespace })
  const core = createTaskCore({ db, clock, rates, marketplace, resources, refunds })
  const reads = createTaskReads({ db, clock, secrets, logs: deps.logs, publicUrl: deps.publicUrl, outputCap: rates.hard_caps.max_output_bytes_in_run })
  const runLedger = createRunLedger({
    db,
    clock,
    rates,
    logger,
    secrets,
    mailer: deps.mailer,
    logs: deps.logs,
    marketplace,
    core,
    resources,
    reads,
    publicUrl: deps.publicUrl,
    internalUrl: deps.internalUrl ?? deps.publicUrl,
  })
  const commands = createTaskCommands({
    db,
    clock,
    rates,
    secrets,
    marketplace,
    core,
    resources,
    reads,
    runLedger,
    syncSlackMs: deps.syncSlackMs ?? 60_000,
    publicUrl: deps.publicUrl,
    envSecrets: deps.envSecrets,
    confirm: deps.confirm,
  })
  const accounts = createAccounts({ db, clock, reads })

  /**
   * The scheduler's crash recovery, run at start and on a timer: Task resources a status change
   * still owes a write (and orphans of crashed creates), and refunds that are due (new, failed, or
   * interrupted mid-send). `orphanedBefore`: every writer before this instant is known dead (the
   * embedded default's data-dir lock), so its leases and grace periods need not run out.
   */
  async function recover(options: { orphanedBefore?: Date } = {}): Promise<{ resources: number; refunds: number }> {
    if (options.orphanedBefore !== undefined) await refunds.resumeOrphans(options.orphanedBefore)
    return { resources: await resources.recover(options.orphanedBefore), refunds: await refunds.retryDue() }
  }

  return {
    ...commands,
    ...reads,
    ...runLedger,
    ...accounts,
    currentView: core.currentView,
    recover,
    chargeOutcomes: createChargeOutcomes({ clock, core }),
    /** Outstanding refunds (metrics, readiness detail). */
    refundStanding: () => refunds.standing(),
    /** Escrow of one task, for invariant checks. */
    escrow: (taskId: string) => escrowOf(db, taskId),
    /** The marketplace rail: plan access of create/fund/owner calls, usage reports of runs. */
    marketplace,
  }
}

export type SchedulerService = ReturnType<typeof createSchedulerService>
