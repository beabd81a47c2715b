// Scheduler dispatch lag: N active every-minute tasks (default 10,000) created through the scheduler
// service (precheckCreate + createTask with fake payment facts, as test/helpers/scheduler-world.ts
// does) on a throw-away Postgres database (default) or in-memory PGlite, with the TaskController
// and RunController running in THIS process on the real clock and an executor that records
// Date.now() when execute() is called and answers an immediate success. Per measured cron slot:
//   lag = (execute() called) − (slot time) over all N tasks (a task without a run = ∞):
//   p50 / p90 / p99 / max, how many of N ran, and a per-stage breakdown (Task reconcile picked up,
//   Run resource created, claim started / ended, execute); for the window: runs/s, statements by
//   SQL, CPU of this process and of the Postgres backends, event-loop delay, and the process memory
//   (RSS / heapUsed at start, before creating tasks, after creating, peak during the window).
// Flow: controllers start on the empty database (as in a live deployment where tasks arrive through
// the API); the tasks are created just after a minute boundary, so every task's first slot is the
// next boundary and no catch-up slot is mixed in; the controllers get until 1.5 s before that
// boundary to go quiet; then 1 to 6 consecutive slots are measured in one window that ends when
// every run of every measured slot has executed, or --window-sec after the last slot.
//
//   node --expose-gc bench/dispatch.bench.ts                      (10,000 tasks, Postgres, 1 slot)
//   node --expose-gc bench/dispatch.bench.ts --tasks 2000 --slots 2 --db pglite
//   node bench/dispatch.bench.ts --tasks 2000 --cpu-profile /tmp/dispatch.cpuprofile   (window only)
// Flags: --tasks N, --db postgres|pglite, --slots 1-6 (from the 4th on, finished runs beyond the history limit are deleted as well), --max-parallel N (RunController places,
// default 4 = SANDBOX_MAX_PARALLEL's default; the controller's own lag is measured with
// --max-parallel 10000, i.e. an executor that is never the limit), --concurrency N (TaskController
// queue, default 256 as in production), --ahead-sec N (SCHEDULER_DISPATCH_AHEAD_SEC, default 15;
// 0 = dispatch at the slot), --pool N (DATABASE_POOL_MAX, default 20), --poll-ms N (store watch
// poll, default 100 as in src/runtime.ts), --window-sec N (default 300 = the starting deadline),
// --create-concurrency N (default 8), --cpu-profile FILE (V8 sampling profile of the window;
// prints the top self-time functions).
// Database: BENCH_DATABASE_URL or TEST_DATABASE_URL or postgres://postgres@127.0.0.1:5432/test; an
// admin connection creates ag_bench_<hex> and drops it at the end (also on Ctrl-C).
import { randomBytes } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { Session } from 'node:inspector/promises'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import { openDb, pgErrorCode, type Db, type Queryable, type Row } from '../src/platform/db/index.ts'
import { migrate, migrationsDir } from '../src/platform/db/migrate.ts'
import { systemClock } from '../src/platform/clock.ts'
import { createLogger } from '../src/platform/logger.ts'
import { createMailer } from '../src/platform/mailer.ts'
import { DEFAULT_RATES } from '../src/scheduler/domain/rates.ts'
import { createSchedulerService } from '../src/scheduler/service.ts'
import { createSchedulerSecrets } from '../src/scheduler/secrets.ts'
import { PostgresResourceStore } from '../controllers/local/postgres-store.ts'
import { TaskController, systemClock as controllerClock } from '../controllers/task-controller.ts'
import { RunController } from '../controllers/run-controller.ts'
import { Informer } from '../controllers/informer.ts'
import { fmtMs, log, memory, mib, nextBoundary, percentile, PG_URL, procCpuMs, sleep } from './dispatch-common.ts'
import type { ExecutionRequest, ExecutionResult, ResourceStore, RunExecutor, RunLedger, RunResource, TaskResource } from '../src/scheduler/contract/index.ts'

const { values: args } = parseArgs({
  options: {
    tasks: { type: 'string', default: '10000' },
    db: { type: 'string', default: 'postgres' },
    slots: { type: 'string', default: '1' },
    'max-parallel': { type: 'string', default: '4' },
    concurrency: { type: 'string', default: '256' },
    'poll-ms': { type: 'string', default: '100' },
    'ahead-sec': { type: 'string', default: '15' },
    pool: { type: 'string', default: '20' },
    'window-sec': { type: 'string', default: '300' },
    'create-concurrency': { type: 'string', default: '8' },
    'cpu-profile': { type: 'string' },
  },
})
const N = Number(args.tasks)
const DB_KIND = args.db === 'pglite' ? 'pglite' : 'postgres'
const SLOTS = Math.max(1, Math.min(6, Number(args.slots)))
const MAX_PARALLEL = Number(args['max-parallel'])
const CONCURRENCY = Number(args.concurrency)
const POLL_MS = Number(args['poll-ms'])
/** SCHEDULER_DISPATCH_AHEAD_SEC: cron Runs created and claimed this long before their slot. */
const AHEAD_SEC = Number(args['ahead-sec'])
/** DATABASE_POOL_MAX (default 20). */
const POOL = Number(args.pool)
const WINDOW_MS = Number(args['window-sec']) * 1000
const CREATE_CONCURRENCY = DB_KIND === 'pglite' ? 1 : Number(args['create-concurrency'])
const OWNER = '0x1111111111111111111111111111111111111111'
const NAMESPACE = 'default'

// ---------------------------------------------------------------------------- throw-away database
// (the few lines of test/helpers/servers.ts this needs)

async function openAdmin(): Promise<Db> {
  try {
    return await openDb({ kind: 'postgres', url: PG_URL, poolMax: 1, connectTimeoutMs: 3000 })
  } catch (err) {
    if (pgErrorCode(err) !== '3D000') throw err
    const fallback = new URL(PG_URL)
    fallback.pathname = '/postgres'
    return openDb({ kind: 'postgres', url: fallback.toString(), poolMax: 1, connectTimeoutMs: 3000 })
  }
}

// ---------------------------------------------------------------------------- instrumentation

/** Statements per normalized SQL head, counted while `on`. */
const statements = { on: false, total: 0, busyMs: 0, byHead: new Map<string, { n: number; ms: number }>() }
function countStatement(sql: string, ms: number, weight = 1): void {
  if (!statements.on) return
  statements.total += weight
  statements.busyMs += weight === 0 ? 0 : ms
  const head = sql.replace(/\s+/g, ' ').trim().slice(0, 70)
  const entry = statements.byHead.get(head) ?? { n: 0, ms: 0 }
  entry.n += 1
  entry.ms += ms
  statements.byHead.set(head, entry)
}

function countingQueryable(inner: Queryable): Queryable {
  return {
    async query<T extends Row = Row>(sql: string, params?: readonly unknown[]): Promise<T[]> {
      const t0 = performance.now()
      try {
        return await inner.query<T>(sql, params)
      } finally {
        countStatement(sql, performance.now() - t0)
      }
    },
    async exec(sql: string): Promise<void> {
      const t0 = performance.now()
      try {
        return await inner.exec(sql)
      } finally {
        countStatement(sql, performance.now() - t0)
      }
    },
  }
}

/** The same Db, counting statements (a transaction adds BEGIN and COMMIT). */
function countingDb(inner: Db): Db {
  const q = countingQueryable(inner)
  return {
    kind: inner.kind,
    query: q.query,
    exec: q.exec,
    async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
      const t0 = performance.now()
      try {
        return await inner.transaction((tx) => fn(countingQueryable(tx)))
      } finally {
        // BEGIN and COMMIT are two more round trips; the entry's ms is the whole transaction.
        statements.total += statements.on ? 2 : 0
        countStatement('(transaction: BEGIN + COMMIT; avg = whole transaction)', performance.now() - t0, 0)
      }
    },
    ping: () => inner.ping(),
    close: () => inner.close(),
  }
}

interface RunTimes {
  task: string
  slot: number
  createStart?: number
  created?: number
  claimStart?: number
  claimed?: number
  requested?: number
  executed?: number
  runReconciles: number
}
const runTimes = new Map<string, RunTimes>()
/** Per measured slot: the first TaskController.reconcile of each task at or after it. */
const taskPickedUp = new Map<number, Map<string, number>>()
const executedPerSlot = new Map<number, number>()
let executedOther = 0
let executedTotal = 0
const storeCalls = { list: 0, createMs: 0, creates: 0 }

/** The Run store as the TaskController sees it: creates are timed per run name. */
function timedRuns(inner: ResourceStore<RunResource>): ResourceStore<RunResource> {
  return {
    kind: inner.kind,
    get: (ns, name) => inner.get(ns, name),
    list: (ns, options) => {
      storeCalls.list += 1
      return inner.list(ns, options)
    },
    async create(resource) {
      const name = resource.metadata.name
      const slot = Date.parse(resource.spec.trigger.scheduledTime)
      const times: RunTimes = { task: resource.spec.taskRef.name, slot, createStart: Date.now(), runReconciles: 0 }
      runTimes.set(name, times)
      const t0 = performance.now()
      try {
        const created = await inner.create(resource)
        times.created = Date.now()
        return created
      } finally {
        storeCalls.creates += 1
        storeCalls.createMs += performance.now() - t0
      }
    },
    replaceSpec: (resource) => inner.replaceSpec(resource),
    patchStatus: (ns, name, status, options) => inner.patchStatus(ns, name, status, options),
    delete: (ns, name) => inner.delete(ns, name),
    watch: (options, onEvent) => inner.watch(options, onEvent),
  }
}

function countingTasks(inner: ResourceStore<TaskResource>): ResourceStore<TaskResource> {
  return {
    kind: inner.kind,
    get: (ns, name) => inner.get(ns, name),
    list: (ns, options) => {
      storeCalls.list += 1
      return inner.list(ns, options)
    },
    create: (resource) => inner.create(resource),
    replaceSpec: (resource) => inner.replaceSpec(resource),
    patchStatus: (ns, name, status, options) => inner.patchStatus(ns, name, status, options),
    delete: (ns, name) => inner.delete(ns, name),
    watch: (options, onEvent) => inner.watch(options, onEvent),
  }
}

/** Executes nothing: records when execute() is called, answers success at once. */
class RecordingExecutor implements RunExecutor {
  readonly kind = 'local' as const
  async execute(request: ExecutionRequest): Promise<ExecutionResult> {
    const now = Date.now()
    executedTotal += 1
    const times = runTimes.get(request.runName)
    if (times !== undefined && times.executed === undefined) {
      times.executed = now
      executedPerSlot.set(times.slot, (executedPerSlot.get(times.slot) ?? 0) + 1)
    } else if (times === undefined) executedOther += 1
    const at = new Date(now)
    return {
      outcome: 'succeeded',
      exitCode: 0,
      stdout: 'ok\n',
      stderr: '',
      stdoutBytes: 3,
      stderrBytes: 0,
      startedAt: at,
      finishedAt: at,
      durationMs: 1,
      installDurationMs: 0,
      runtimeVersion: 'bench 1',
    }
  }
}

// ---------------------------------------------------------------------------- main

let admin: Db | undefined
let dbName: string | undefined
let url = PG_URL
if (DB_KIND === 'postgres') {
  admin = await openAdmin()
  dbName = `ag_bench_${randomBytes(6).toString('hex')}`
  await admin.exec(`create database ${dbName}`)
  const u = new URL(PG_URL)
  u.pathname = `/${dbName}`
  url = u.toString()
}
let cleanedUp = false
async function cleanup(): Promise<void> {
  if (cleanedUp) return
  cleanedUp = true
  if (admin !== undefined && dbName !== undefined) {
    await admin.exec(`drop database if exists ${dbName} with (force)`).catch((err: unknown) => log(`drop database failed: ${String(err)}`))
    await admin.close()
  }
}
process.once('SIGINT', () => {
  // Interrupted: the pool's connections die with the database; only dropping it matters now.
  process.on('unhandledRejection', () => {})
  process.on('uncaughtException', () => {})
  void cleanup().then(() => process.exit(130))
})

try {
  await main()
} finally {
  await cleanup()
}

async function main(): Promise<void> {
  const atStart = memory()
  const rawDb = DB_KIND === 'postgres' ? await openDb({ kind: 'postgres', url, poolMax: POOL }) : await openDb({ kind: 'pglite', dataDir: 'memory://' })
  const db = countingDb(rawDb)
  await migrate(rawDb, migrationsDir)
  const tasks = new PostgresResourceStore<TaskResource>(db, { kind: 'Task', pollMs: POLL_MS })
  const runs = new PostgresResourceStore<RunResource>(db, { kind: 'Run', pollMs: POLL_MS })
  const service = createSchedulerService({
    db,
    clock: systemClock,
    rates: DEFAULT_RATES,
    secrets: createSchedulerSecrets(randomBytes(32)),
    tasks,
    runs,
    namespace: NAMESPACE,
    chain: {
      serviceAddress: '0x000000000000000000000000000000000000bE4c',
      transfer: async () => ({ status: 'confirmed', txHash: `0x${randomBytes(32).toString('hex')}`, blockNumber: 1n }),
      resend: async () => ({ status: 'superseded' }),
      inclusion: async () => ({ status: 'included', blockNumber: 1n, blockHash: '0x00', matched: true, final: true }),
      balanceOf: async () => 10n ** 18n,
    },
    mailer: createMailer({ from: 'bench@localhost' }),
    logger: createLogger('silent'),
    logs: { put: async () => undefined, get: async () => undefined },
    publicUrl: 'http://scheduler.bench',
  })
  log(`db ${DB_KIND}${dbName ? ` (${dbName})` : ''}, ${N} tasks, TaskController concurrency ${CONCURRENCY}, RunController maxParallel ${MAX_PARALLEL}, pollMs ${POLL_MS}`)

  // ---- controllers, same process, real clock, instrumented from the outside
  const errors: string[] = []
  let errorCount = 0
  const onError = (where: string, err: unknown) => {
    errorCount += 1
    if (errors.length < 5) errors.push(`${where}: ${(err as Error).message ?? String(err)}`)
  }
  const timed: RunLedger = {
    dispatchRun: async (input) => {
      const times = runTimes.get(input.runId)
      if (times !== undefined && times.claimStart === undefined) times.claimStart = Date.now()
      const result = await service.dispatchRun(input)
      if (times !== undefined && times.claimed === undefined && result.kind === 'claimed') times.claimed = times.requested = Date.now()
      return result
    },
    startRuns: (runIds, adopt) => service.startRuns(runIds, adopt),
    releaseRun: (runId, reason) => service.releaseRun(runId, reason),
    finishRun: (runId, result) => service.finishRun(runId, result),
    lostResult: (reason) => service.lostResult(reason),
  }
  // As src/runtime.ts wires them: one Run informer (one cache of every Run) for both controllers.
  const runInformer = new Informer(timedRuns(runs), { namespace: NAMESPACE })
  const taskController = new TaskController({
    tasks: countingTasks(tasks),
    runs: timedRuns(runs),
    runInformer,
    clock: controllerClock,
    namespace: NAMESPACE,
    concurrency: CONCURRENCY,
    reconcile: { lookaheadMs: AHEAD_SEC * 1000 },
    costOf: (taskName) => service.taskCost(taskName),
    onError,
  })
  const runController = new RunController({
    runs: timedRuns(runs),
    runInformer,
    ledger: timed,
    executor: new RecordingExecutor(),
    namespace: NAMESPACE,
    clock: controllerClock,
    maxParallel: MAX_PARALLEL,
    prepareAheadMs: AHEAD_SEC * 1000,
    onError,
  })
  const taskReconcile = taskController.reconcile.bind(taskController)
  taskController.reconcile = async (key: string) => {
    const now = Date.now()
    for (const [slot, picked] of taskPickedUp) if (now >= slot && !picked.has(key)) picked.set(key, now)
    return taskReconcile(key)
  }
  const runReconcile = runController.reconcile.bind(runController)
  runController.reconcile = async (key: string) => {
    const times = runTimes.get(key.slice(key.indexOf('/') + 1))
    if (times !== undefined) times.runReconciles += 1
    return runReconcile(key)
  }
  // Started first, as in a live deployment where tasks arrive through the API: each new Task is
  // reconciled (status Active, nextRunAt) while the others are being created.
  await runController.start()
  await taskController.start()

  // ---- create N tasks through the service, starting just after a minute boundary so that every
  // task's first slot is the next boundary (no catch-up slot from the creation period)
  if (Date.now() % 60_000 > 3_000) {
    const at = nextBoundary(Date.now()) + 300
    log(`waiting ${((at - Date.now()) / 1000).toFixed(0)} s for a minute boundary before creating the tasks`)
    await sleep(at - Date.now())
  }
  const beforeCreate = memory()
  const createStart = performance.now()
  let next = 0
  await Promise.all(
    Array.from({ length: CREATE_CONCURRENCY }, async () => {
      while (next < N) {
        const i = next++
        const body = {
          schedule: { every: 'minute' },
          runtime: 'python',
          entrypoint: 'main.py',
          source: `print(${i})`,
          max_runtime_sec: 5,
          max_sibling_calls: 0,
          max_amount_usdc_micros: 200_000,
        }
        const key = `bench-${i}`
        const pre = await service.precheckCreate(body, key, BigInt(body.max_amount_usdc_micros))
        if ('existing' in pre) throw new Error('unexpected idempotent hit')
        await service.createTask({
          ...pre,
          idempotencyKey: key,
          payment: { payer: OWNER, protocol: 'x402', amountMicros: BigInt(body.max_amount_usdc_micros), replayKey: `r-${key}` },
        })
        // The escrow payment settles, as the payments module decides it after a real settlement.
        await db.transaction((tx) => service.chargeOutcomes.settled(tx, `r-${key}`, `0x${randomBytes(32).toString('hex')}`))
        if ((i + 1) % 2000 === 0) log(`created ${i + 1} tasks`)
      }
    }),
  )
  const createMs = performance.now() - createStart
  log(`created ${N} tasks in ${(createMs / 1000).toFixed(1)} s (${(N / (createMs / 1000)).toFixed(0)} tasks/s)`)
  const quiet = await quiesce(taskController, runController, nextBoundary(Date.now()) - 1500)
  const [unreconciled] = await rawDb.query<{ n: bigint }>(`select count(*)::int8 as n from resources where kind = 'Task' and (status is null or status ->> 'nextRunAt' is null)`)
  const pendingAtSlot = Number(unreconciled?.n ?? 0n)
  if (pendingAtSlot > 0) log(`${pendingAtSlot} tasks not yet reconciled (no status.nextRunAt) 1.5 s before the first slot`)
  const afterCreate = memory()
  const firstSlot = nextBoundary(Date.now())
  const window = await measureWindow(
    Array.from({ length: SLOTS }, (_, i) => firstSlot + i * 60_000),
    taskController,
    runController,
    db,
  )

  await runController.stop()
  await taskController.stop()
  await rawDb.close()

  // ---- report
  console.log('\n=== Scheduler dispatch ===')
  console.log(
    `db ${DB_KIND}, ${N} every-minute tasks, Node ${process.version}, TaskController concurrency ${CONCURRENCY}, RunController maxParallel ${MAX_PARALLEL}, pollMs ${POLL_MS}, Postgres pool ${POOL}, dispatch ahead ${AHEAD_SEC} s`,
  )
  console.log(
    `create: ${(createMs / 1000).toFixed(1)} s (${(N / (createMs / 1000)).toFixed(0)} tasks/s, controllers running); controllers ${quiet ? 'quiet' : `NOT quiet (${pendingAtSlot} tasks not yet reconciled)`} before the first measured slot`,
  )
  console.log(
    `memory (RSS / heapUsed): at start ${mib(atStart.rss)} / ${mib(atStart.heapUsed)}; before creating ${mib(beforeCreate.rss)} / ${mib(beforeCreate.heapUsed)}; after creating ${mib(afterCreate.rss)} / ${mib(afterCreate.heapUsed)}; peak during the window ${mib(window.mem.rss)} / ${mib(window.mem.heapUsed)}`,
  )
  printWindow(window)
  console.log(`errors: ${errorCount}${errors.length === 0 ? '' : ` (first: ${errors.join(' | ')})`}`)
  console.log(
    `controller stats (whole run): tasks ${JSON.stringify(taskController.stats)}, runs ${JSON.stringify(runController.stats)}, store list() calls ${storeCalls.list}, executions of runs the TaskController did not create ${executedOther}`,
  )
}

/** Waits until the controllers have nothing to do for 2 s, or until `deadline`; true if quiet. */
async function quiesce(tasks: TaskController, runs: RunController, deadline: number): Promise<boolean> {
  const t0 = performance.now()
  let last = ''
  let stableSince = performance.now()
  while (Date.now() < deadline) {
    const now = JSON.stringify([tasks.stats, runs.stats, runs.executing])
    if (now !== last) {
      last = now
      stableSince = performance.now()
    } else if (performance.now() - stableSince >= 2000) {
      log(`quiet after ${((performance.now() - t0) / 1000).toFixed(1)} s`)
      return true
    }
    await sleep(250)
  }
  log(`NOT quiet by ${new Date(deadline).toISOString()} (tasks ${JSON.stringify(tasks.stats)}, runs ${JSON.stringify(runs.stats)})`)
  return false
}

interface SlotResult {
  slot: number
  lags: number[]
  ranWithin60s: number
  stages: Record<string, number[]>
  lastCreated: number
  lastClaimed: number
  lastExecuted: number
  runReconciles: number[]
}

interface WindowResult {
  slots: SlotResult[]
  mem: { rss: number; heapUsed: number }
  cpuMs: number
  wallMs: number
  executed: number
  dbCpuMs: number | undefined
  loopDelay: { p50: number; p99: number; max: number }
  statements: { total: number; busyMs: number; top: [string, { n: number; ms: number }][] }
  stats: { tasks: TaskController['stats']; runs: RunController['stats'] }
  profileTop?: string[]
}

/** Measures the given slots in one window: from 1 s before the first until every run of every slot executed, or WINDOW_MS after the last. */
async function measureWindow(slots: number[], tasks: TaskController, runs: RunController, db: Db): Promise<WindowResult> {
  const first = slots[0] as number
  const last = slots[slots.length - 1] as number
  log(`waiting ${((first - Date.now()) / 1000).toFixed(1)} s for the slot ${new Date(first).toISOString()}${slots.length > 1 ? ` (and ${slots.length - 1} more)` : ''}`)
  await sleep(Math.max(0, first - Date.now() - 1000))
  const taskStats0 = { ...tasks.stats }
  const runStats0 = { ...runs.stats }
  const profile = args['cpu-profile'] === undefined ? undefined : new Session()
  if (profile !== undefined) {
    profile.connect()
    await profile.post('Profiler.enable')
    await profile.post('Profiler.setSamplingInterval', { interval: 500 })
    await profile.post('Profiler.start')
  }
  let peak = { rss: 0, heapUsed: 0 }
  const sampler = setInterval(() => {
    const m = process.memoryUsage()
    peak = { rss: Math.max(peak.rss, m.rss), heapUsed: Math.max(peak.heapUsed, m.heapUsed) }
  }, 100)
  const loop = monitorEventLoopDelay({ resolution: 10 })
  loop.enable()
  statements.on = true
  statements.total = 0
  statements.busyMs = 0
  statements.byHead.clear()
  const dbCpu0 = await postgresCpuMs(db)
  for (const slot of slots) taskPickedUp.set(slot, new Map())
  const executed0 = executedTotal
  const cpu0 = process.cpuUsage()
  const wall0 = performance.now()
  const deadline = last + WINDOW_MS
  let lastLog = Date.now()
  const allDone = () => slots.every((slot) => (executedPerSlot.get(slot) ?? 0) >= N)
  while (Date.now() < deadline && !allDone()) {
    await sleep(50)
    if (Date.now() - lastLog >= 10_000) {
      lastLog = Date.now()
      log(
        `  +${((Date.now() - first) / 1000).toFixed(0)} s: executed ${slots.map((slot) => executedPerSlot.get(slot) ?? 0).join(' + ')} of ${N} per slot (${executedTotal - executed0} in all), rss ${mib(process.memoryUsage().rss)}`,
      )
    }
  }
  const cpu = process.cpuUsage(cpu0)
  const wallMs = performance.now() - wall0
  const executed = executedTotal - executed0
  const dbCpu1 = await postgresCpuMs(db)
  statements.on = false
  loop.disable()
  clearInterval(sampler)
  let profileTop: string[] | undefined
  if (profile !== undefined) {
    const { profile: cpuProfile } = await profile.post('Profiler.stop')
    profile.disconnect()
    writeFileSync(args['cpu-profile'] as string, JSON.stringify(cpuProfile))
    profileTop = topSelfTime(args['cpu-profile'] as string, 25)
  }
  const result: WindowResult = {
    slots: slots.map((slot) => slotResult(slot)),
    mem: peak,
    cpuMs: (cpu.user + cpu.system) / 1000,
    wallMs,
    executed,
    dbCpuMs: dbCpu0 === undefined || dbCpu1 === undefined ? undefined : dbCpu1 - dbCpu0,
    loopDelay: { p50: loop.percentile(50) / 1e6, p99: loop.percentile(99) / 1e6, max: loop.max / 1e6 },
    statements: { total: statements.total, busyMs: statements.busyMs, top: [...statements.byHead].sort((a, b) => b[1].n - a[1].n).slice(0, 22) },
    stats: {
      tasks: Object.fromEntries(Object.entries(tasks.stats).map(([k, v]) => [k, v - (taskStats0 as Record<string, number>)[k]!])) as TaskController['stats'],
      runs: Object.fromEntries(Object.entries(runs.stats).map(([k, v]) => [k, v - (runStats0 as Record<string, number>)[k]!])) as RunController['stats'],
    },
  }
  if (profileTop !== undefined) result.profileTop = profileTop
  for (const r of result.slots)
    log(`slot ${new Date(r.slot).toISOString()}: executed ${executedPerSlot.get(r.slot) ?? 0}/${N}, p50 ${fmtMs(percentile(r.lags, 50))}, p99 ${fmtMs(percentile(r.lags, 99))}`)
  return result
}

function slotResult(slot: number): SlotResult {
  const ofSlot = [...runTimes.values()].filter((t) => t.slot === slot)
  const lags = ofSlot.map((t) => (t.executed === undefined ? Number.POSITIVE_INFINITY : t.executed - slot))
  while (lags.length < N) lags.push(Number.POSITIVE_INFINITY) // tasks that got no Run for this slot at all
  lags.sort((a, b) => a - b)
  const stage = (f: (t: RunTimes) => number | undefined) =>
    ofSlot
      .map(f)
      .filter((v): v is number => v !== undefined && Number.isFinite(v))
      .sort((a, b) => a - b)
  const pickedUp = taskPickedUp.get(slot) ?? new Map<string, number>()
  const picked = (t: RunTimes) => pickedUp.get(`${NAMESPACE}/${t.task}`)
  const max = (values: (number | undefined)[]) => values.reduce<number>((m, v) => (v !== undefined && v > m ? v : m), 0)
  const d = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined ? undefined : a - b)
  return {
    slot,
    lags,
    ranWithin60s: lags.filter((l) => l < 60_000).length,
    stages: {
      'slot → Task reconcile starts': stage((t) => d(picked(t), slot)),
      'reconcile start → Run created': stage((t) => d(t.created, picked(t))),
      'Run created → claim starts': stage((t) => d(t.claimStart, t.created)),
      'claim (claimRun)': stage((t) => d(t.claimed, t.claimStart)),
      'claimed → execute()': stage((t) => d(t.executed, t.claimed)),
      'slot → Run created': stage((t) => d(t.created, slot)),
      'slot → claimed': stage((t) => d(t.claimed, slot)),
    },
    lastCreated: max(ofSlot.map((t) => t.created)) - slot,
    lastClaimed: max(ofSlot.map((t) => t.claimed)) - slot,
    lastExecuted: max(ofSlot.map((t) => t.executed)) - slot,
    runReconciles: ofSlot.map((t) => t.runReconciles).sort((a, b) => a - b),
  }
}

/** CPU time (ms) of the Postgres backends serving this database, from /proc (same host only). */
async function postgresCpuMs(db: Db): Promise<number | undefined> {
  if (db.kind !== 'postgres') return undefined
  try {
    const rows = await db.query<{ pid: number }>('select pid from pg_stat_activity where datname = current_database()')
    return procCpuMs(rows.map((row) => row.pid))
  } catch {
    return undefined
  }
}

function topSelfTime(file: string, n: number): string[] {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as {
    nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[]
    samples: number[]
    timeDeltas: number[]
  }
  const byId = new Map(profile.nodes.map((node) => [node.id, node]))
  const self = new Map<string, number>()
  for (let i = 0; i < profile.samples.length; i += 1) {
    const node = byId.get(profile.samples[i] as number)
    if (node === undefined) continue
    const { functionName, url, lineNumber } = node.callFrame
    const where = url === '' ? '' : ` ${url.replace(/^file:\/\/\/work\/main\//, '').replace(/^.*node_modules\//, 'nm/')}:${lineNumber + 1}`
    const key = `${functionName || '(anonymous)'}${where}`
    self.set(key, (self.get(key) ?? 0) + (profile.timeDeltas[i] ?? 0))
  }
  const total = [...self.values()].reduce((a, b) => a + b, 0)
  return [...self]
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([key, us]) => `${((100 * us) / total).toFixed(1).padStart(5)} %  ${(us / 1000).toFixed(0).padStart(6)} ms  ${key}`)
}

function printWindow(w: WindowResult): void {
  for (const r of w.slots) {
    const lags = r.lags
    console.log(`\n-- slot ${new Date(r.slot).toISOString()} --`)
    console.log(`ran: ${lags.filter(Number.isFinite).length}/${N} within the window, ${r.ranWithin60s}/${N} within 60 s of the slot`)
    console.log(
      `lag slot → execute() over all ${N} tasks (not run = ∞): p50 ${fmtMs(percentile(lags, 50))}, p90 ${fmtMs(percentile(lags, 90))}, p99 ${fmtMs(percentile(lags, 99))}, max ${fmtMs(lags[lags.length - 1] as number)}, min ${fmtMs(lags[0] as number)}`,
    )
    const ran = lags.filter(Number.isFinite)
    if (ran.length < N && ran.length > 0)
      console.log(
        `lag of the ${ran.length} runs that executed: p50 ${fmtMs(percentile(ran, 50))}, p90 ${fmtMs(percentile(ran, 90))}, p99 ${fmtMs(percentile(ran, 99))}, max ${fmtMs(ran[ran.length - 1] as number)}`,
      )
    console.log(`last Run created at +${fmtMs(r.lastCreated)}, last claimed at +${fmtMs(r.lastClaimed)}, last executed at +${fmtMs(r.lastExecuted)}`)
    console.log('stage (runs of this slot)               p50        p90        p99        max')
    for (const [name, values] of Object.entries(r.stages)) {
      console.log(`${name.padEnd(34)} ${[50, 90, 99, 100].map((p) => fmtMs(percentile(values, p)).padStart(10)).join(' ')}   (n=${values.length})`)
    }
    console.log(
      `RunController reconciles per run: p50 ${percentile(r.runReconciles, 50)}, p99 ${percentile(r.runReconciles, 99)}, max ${r.runReconciles[r.runReconciles.length - 1] ?? 0}`,
    )
  }
  console.log(`\n-- window: ${(w.wallMs / 1000).toFixed(1)} s --`)
  console.log(`executions: ${w.executed} (${(w.executed / (w.wallMs / 1000)).toFixed(1)} runs/s, any slot)`)
  console.log(
    `controller process CPU ${(w.cpuMs / 1000).toFixed(1)} s (${((100 * w.cpuMs) / w.wallMs).toFixed(0)} % of one core); Postgres backends of this db ${w.dbCpuMs === undefined ? 'n/a' : `${(w.dbCpuMs / 1000).toFixed(1)} s CPU (${((100 * w.dbCpuMs) / w.wallMs).toFixed(0)} %)`}`,
  )
  console.log(`event-loop delay p50 ${w.loopDelay.p50.toFixed(0)} ms, p99 ${w.loopDelay.p99.toFixed(0)} ms, max ${w.loopDelay.max.toFixed(0)} ms`)
  console.log(`controller stats in the window: tasks ${JSON.stringify(w.stats.tasks)}, runs ${JSON.stringify(w.stats.runs)}`)
  console.log(
    `statements in the window: ${w.statements.total} (${(w.statements.total / Math.max(1, w.executed)).toFixed(1)} per executed run), ${(w.statements.busyMs / 1000).toFixed(1)} s summed latency; most frequent:`,
  )
  for (const [head, { n, ms }] of w.statements.top) console.log(`  ${String(n).padStart(7)}  ${(ms / n).toFixed(2).padStart(7)} ms avg  ${head}`)
  if (w.profileTop !== undefined) {
    console.log('CPU profile of the window, top self time:')
    for (const line of w.profileTop) console.log(`  ${line}`)
  }
}
