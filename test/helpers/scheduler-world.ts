// A scheduler "world" for integration tests: a real database (PGlite or Postgres) with the real
// migrations, the real ResourceStore backend, service, Task and Run controllers, on a FakeClock,
// with a scripted executor (the sandbox is tested on its own) and a chain port that records
// refunds. Controllers can be crashed (abandoned mid-run, like a killed process) and restarted.
import { randomBytes } from 'node:crypto'
import type { Db } from '../../src/platform/db/index.ts'
import { openDb } from '../../src/platform/db/index.ts'
import { migrate, migrationsDir } from '../../src/platform/db/migrate.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMailer } from '../../src/platform/mailer.ts'
import { DEFAULT_RATES } from '../../src/scheduler/domain/rates.ts'
import { createSchedulerService, type SchedulerService } from '../../src/scheduler/service.ts'
import { createSchedulerSecrets } from '../../src/scheduler/secrets.ts'
import { PostgresResourceStore } from '../../controllers/local/postgres-store.ts'
import { TaskController } from '../../controllers/task-controller.ts'
import { RunController } from '../../controllers/run-controller.ts'
import { FakeClock } from './fake-clock.ts'
import { Informer } from '../../controllers/informer.ts'
import type { ExecutionRequest, ExecutionResult, ResourceStore, RunExecutor, RunResource, TaskResource } from '../../src/scheduler/contract/index.ts'

export type ExecutorMode = 'succeed' | 'fail' | 'timeout' | 'infra' | 'hang'

/** Executes nothing: answers as told, counting executions per run name. */
export class ScriptedExecutor implements RunExecutor {
  readonly kind = 'local' as const
  mode: ExecutorMode = 'succeed'
  readonly executions = new Map<string, number>()
  readonly clock: FakeClock
  #seed = 1

  constructor(clock: FakeClock) {
    this.clock = clock
  }

  async execute(request: ExecutionRequest): Promise<ExecutionResult> {
    this.executions.set(request.runName, (this.executions.get(request.runName) ?? 0) + 1)
    const mode = this.mode
    if (mode === 'hang') return new Promise<ExecutionResult>(() => {}) // a process that dies here never answers
    this.#seed = (this.#seed * 48271) % 2147483647
    const limitMs = request.maxRuntimeSec * 1000
    const durationMs = mode === 'timeout' ? limitMs + 700 : mode === 'infra' ? 0 : 1 + (this.#seed % limitMs)
    const startedAt = this.clock.now()
    return {
      outcome: mode === 'succeed' ? 'succeeded' : mode === 'fail' ? 'failed' : mode === 'timeout' ? 'timed_out' : 'infra_error',
      exitCode: mode === 'succeed' ? 0 : mode === 'fail' ? 1 : null,
      stdout: `ran ${request.runName}\n`,
      stderr: '',
      stdoutBytes: 10,
      stderrBytes: 0,
      startedAt,
      finishedAt: new Date(startedAt.getTime() + durationMs),
      durationMs,
      installDurationMs: 0,
      runtimeVersion: 'scripted 1',
    }
  }
}

export interface World {
  db: Db
  clock: FakeClock
  service: SchedulerService
  executor: ScriptedExecutor
  tasks: ResourceStore<TaskResource>
  runs: ResourceStore<RunResource>
  refunds: { to: string; amount: bigint }[]
  controllers: { tasks: TaskController; runs: RunController }
  /** Waits until the controllers have nothing left to do at this instant. */
  settle(): Promise<void>
  /**
   * Decides the provisional escrow payment `replayKey` as the payments module would after its
   * settlement (settled with a tx hash and confirmed, or failed), including the post-commit work (refunds).
   */
  pay(replayKey: string, outcome?: 'settled' | 'failed'): Promise<void>
  /**
   * A direct-rail task as POST /api/v1/tasks makes it after authorization: `body` over an
   * every-minute python default, its escrow payment (`payment`, default `r-<key>`) settled unless
   * `paid: false`. Returns the task id.
   */
  createTask(key: string, options?: { body?: Record<string, unknown>; owner?: string; payment?: string; paid?: boolean }): Promise<string>
  /** Kills the controllers without letting in-flight runs finish, then starts fresh ones. */
  crashAndRestart(): Promise<void>
  close(): Promise<void>
}

/** The wallet that pays for tasks made by World.createTask unless told otherwise. */
export const WORLD_OWNER = '0x1111111111111111111111111111111111111111'
const TASK_BODY: Record<string, unknown> = {
  schedule: { every: 'minute' },
  runtime: 'python',
  entrypoint: 'main.py',
  source: 'print(1)',
  max_runtime_sec: 10,
  max_sibling_calls: 0,
  max_amount_usdc_micros: 100_000,
}

export interface WorldOptions {
  /** Create and dispatch cron Runs this long before their slot (SCHEDULER_DISPATCH_AHEAD_SEC); default 0. */
  dispatchAheadMs?: number
  databaseUrl?: string
  start?: string
  clock?: FakeClock
  /** Another ResourceStore backend (Kubernetes) and executor (Jobs) instead of Postgres + scripted. */
  stores?: { tasks: ResourceStore<TaskResource>; runs: ResourceStore<RunResource> }
  /** Makes the executor of each (re)started controller, as a new process would. */
  makeRunExecutor?: () => RunExecutor
}

export async function openWorld(options: WorldOptions = {}): Promise<World> {
  const db = options.databaseUrl ? await openDb({ kind: 'postgres', url: options.databaseUrl }) : await openDb({ kind: 'pglite', dataDir: 'memory://' })
  await migrate(db, migrationsDir)
  const clock = options.clock ?? new FakeClock(options.start ?? '2026-11-24T10:00:30Z')
  const logger = createLogger('silent')
  const tasks = options.stores?.tasks ?? new PostgresResourceStore<TaskResource>(db, { kind: 'Task', now: () => clock.now(), pollMs: 20 })
  const runs = options.stores?.runs ?? new PostgresResourceStore<RunResource>(db, { kind: 'Run', now: () => clock.now(), pollMs: 20 })
  const refunds: { to: string; amount: bigint }[] = []
  const blobs = new Map<string, { data: Buffer; contentType: string }>()
  const executor = new ScriptedExecutor(clock)
  const service = createSchedulerService({
    db,
    clock,
    rates: DEFAULT_RATES,
    secrets: createSchedulerSecrets(randomBytes(32)),
    tasks,
    runs,
    namespace: 'default',
    chain: {
      async transfer(to, amount) {
        refunds.push({ to, amount })
        return { status: 'confirmed', txHash: `0x${randomBytes(32).toString('hex')}`, blockNumber: 1n }
      },
      async resend() {
        return { status: 'superseded' }
      },
      // Every refund is mined at once and final; the wallet always holds enough.
      serviceAddress: '0x000000000000000000000000000000000000bE4c',
      async inclusion() {
        return { status: 'included', blockNumber: 1n, blockHash: '0x00', matched: true, final: true }
      },
      async balanceOf() {
        return 10n ** 18n
      },
    },
    mailer: createMailer({ from: 'test@localhost' }),
    logger,
    logs: {
      put: async (key, data, contentType) => void blobs.set(key, { data, contentType }),
      get: async (key) => blobs.get(key),
    },
    publicUrl: 'http://scheduler.test',
    syncSlackMs: 5_000,
  })
  const make = () => {
    // As src/runtime.ts wires them: one Run informer for both controllers.
    const runInformer = new Informer(runs, { namespace: 'default' })
    return {
      tasks: new TaskController({
        tasks,
        runs,
        runInformer,
        clock,
        namespace: 'default',
        reconcile: { lookaheadMs: options.dispatchAheadMs ?? 0 },
        costOf: (taskName) => service.taskCost(taskName),
      }),
      runs: new RunController({
        runs,
        runInformer,
        ledger: service,
        executor: options.makeRunExecutor?.() ?? executor,
        namespace: 'default',
        clock,
        maxParallel: 8,
        prepareAheadMs: options.dispatchAheadMs ?? 0,
      }),
    }
  }
  let controllers = make()
  await controllers.runs.start()
  await controllers.tasks.start()

  const snapshot = () => JSON.stringify([controllers.tasks.stats, controllers.runs.stats, controllers.runs.executing])
  const world: World = {
    db,
    clock,
    service,
    executor,
    tasks,
    runs,
    refunds,
    get controllers() {
      return controllers
    },
    async pay(replayKey, outcome = 'settled') {
      const handler = service.chargeOutcomes
      const after = await db.transaction((tx) => (outcome === 'settled' ? handler.settled(tx, replayKey, `0x${randomBytes(32).toString('hex')}`) : handler.failed(tx, replayKey)))
      if (after) await after()
      if (outcome !== 'settled') return
      // This world's chain is final at once: the payment is recorded settled and confirmed (what a
      // refund checks before it is signed), as the confirmation sweep would right away.
      await db.query(
        `insert into payment_reservations (replay_key, protocol, protocol_version, payer, amount_micros, operation_id, state, decided_at, confirmed_at)
         select c.replay_key, 'x402', 2, t.owner, c.amount_micros, 'createTask', 'settled', now(), now()
           from scheduler_charges c join scheduler_tasks t on t.id = c.task_id where c.replay_key = $1
         on conflict (replay_key) do nothing`,
        [replayKey],
      )
      const confirmed = await db.transaction((tx) => handler.confirmed?.(tx, replayKey) ?? Promise.resolve(undefined))
      if (confirmed) await confirmed()
    },
    async createTask(key, options = {}) {
      const body = { ...TASK_BODY, ...options.body }
      const amount = BigInt(body.max_amount_usdc_micros as number)
      const pre = await service.precheckCreate(body, key, amount)
      if ('existing' in pre) throw new Error(`${key}: an idempotent hit`)
      const replayKey = options.payment ?? `r-${key}`
      const { id } = await service.createTask({ ...pre, idempotencyKey: key, payment: { payer: options.owner ?? WORLD_OWNER, protocol: 'x402', amountMicros: amount, replayKey } })
      if (options.paid !== false) await world.pay(replayKey)
      return id
    },
    async settle() {
      let last = ''
      for (let round = 0; round < 200; round += 1) {
        await controllers.tasks.idle()
        if (executor.mode !== 'hang') await controllers.runs.idle()
        await new Promise((resolve) => setTimeout(resolve, 60))
        const now = snapshot()
        if (now === last) return
        last = now
      }
      throw new Error('the controllers did not settle')
    },
    async crashAndRestart() {
      // A dead process cancels and finishes nothing: stop the old controllers, leave their runs.
      await controllers.runs.stop({ cancelRunning: false })
      await controllers.tasks.stop()
      executor.mode = 'succeed'
      controllers = make()
      await controllers.runs.start()
      await controllers.tasks.start()
    },
    async close() {
      executor.mode = 'succeed'
      void controllers.runs.stop()
      await controllers.tasks.stop()
      await db.close()
    },
  }
  return world
}
