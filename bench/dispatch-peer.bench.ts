// Peer of bench/dispatch.bench.ts: the same "slot → handler called" lag, measured for graphile-worker
// (a Postgres job queue; its README claims jobs start ~4 ms after being enqueued) on the same
// Postgres, with a task handler that records Date.now() on entry and returns at once. N jobs
// (default 10,000) are all due at the same instant, the cron slot (a minute boundary), and per job:
//   lag = (handler entered) − (slot time) over all N jobs (a job that did not run = ∞):
//   p50 / p90 / p99 / max, how many of N ran within 60 s; for the window (1 s before the slot until
//   every job ran, or --window-sec after the slot): runs/s, CPU of this process and of the Postgres
//   backends of the database, event-loop delay, graphile-worker's own job fetches (getJob calls,
//   empty ones), and the process memory (RSS / heapUsed at start, after the runner started, after
//   the jobs were added, peak during the window); the Node and exact graphile-worker versions.
//
// Modes:
//   --mode runAt (the main one): the runner (workers) is started first; --lead-sec (default 10) before
//     the slot, N jobs with runAt = the slot are added in bulk with WorkerUtils.addJobs (the
//     graphile_worker.add_jobs SQL function, one statement per --add-batch jobs), the way our
//     scheduler creates Runs ahead of time. graphile-worker has no timer for future jobs: add_jobs
//     NOTIFYs at insert time (when the jobs are not due yet, so the woken workers find nothing) and
//     an idle worker then looks again only every `pollInterval` ms ("How long to wait between
//     polling for jobs in milliseconds (for jobs scheduled in the future/retries)", default 2000) —
//     so for jobs due at a future instant the start latency is bounded by pollInterval, not by the
//     ~4 ms of the README (that is for jobs due now, woken by LISTEN/NOTIFY). --poll-ms sets it;
//     --lead-sec 0 adds the jobs at the slot itself (due at once, the NOTIFY path; the lag then
//     includes the bulk insert).
//   --mode cron: graphile-worker's own cron. Its crontab takes one line per recurring item and each
//     item needs a distinct identifier (`?id=`, otherwise the task name; duplicates are rejected), so
//     N distinct every-minute jobs are N lines `* * * * * bench_task ?id=bench_<i> {i:<i>}` (passed
//     as the `crontab` option). That does express 10,000 every-minute jobs: at slot + 1 ms the cron
//     loop inserts all items matching the minute in ONE statement (a JSON array → add_job() per item
//     + an upsert of _private_known_crontabs, each add_job a NOTIFY), and the jobs are visible only
//     when that statement commits, so the lag includes that bulk insert (reported as "cron insert
//     committed at +X"). Cron items live in the worker process (not in the database), one item list
//     per process; the runner is started after a minute boundary so that the measured slot is the
//     first one it schedules (no backfill: `fill` is not set). At cron start every item is looked up
//     in the known-crontabs rows with Array.find (O(N²) comparisons, once per start, not per minute).
//
//   node --expose-gc bench/dispatch-peer.bench.ts                         (10,000 jobs, runAt, 64 workers)
//   node --expose-gc bench/dispatch-peer.bench.ts --tasks 2000 --concurrency default   (graphile's default: 1)
//   node --expose-gc bench/dispatch-peer.bench.ts --tasks 2000 --mode cron
//   node --expose-gc bench/dispatch-peer.bench.ts --tasks 2000 --poll-ms 100     (our store polls every 100 ms)
// Flags: --tasks N (default 10000), --mode runAt|cron (default runAt), --concurrency N|default
// (graphile-worker `concurrency` = jobs run at once in this process, default 64; `default` = not set,
// i.e. graphile-worker's concurrentJobs default of 1), --pool N (`maxPoolSize` of the runner's pg
// pool, default 20 = our DATABASE_POOL_MAX; one connection is its LISTEN client), --poll-ms N
// (`pollInterval`, default 2000 = graphile-worker's default), --node-time (`useNodeTime`; default:
// Postgres' clock, same host), --lead-sec N (runAt: add the jobs this long before the slot, default
// 10), --add-batch N (runAt: jobs per addJobs call, default 1000), --local-queue N (preset
// worker.localQueue.size, batch-fetching; default off as in graphile-worker), --complete-batch-ms N
// (preset worker.completeJobBatchDelay; default off), --window-sec N (default 300, as ours).
// Database: BENCH_DATABASE_URL or TEST_DATABASE_URL or postgres://postgres@127.0.0.1:5432/test; an
// admin connection creates ag_bench_<hex> and drops it at the end (also on Ctrl-C / SIGTERM).
// The jobs are added by a separate WorkerUtils pool (2 connections), i.e. "the application".
import { randomBytes } from 'node:crypto'
import { EventEmitter } from 'node:events'
import { readFileSync } from 'node:fs'
import { loadavg } from 'node:os'
import { dirname, join } from 'node:path'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import pg from 'pg'
import { Logger, makeWorkerUtils, run, type AddJobsJobSpec, type Runner, type RunnerOptions, type Task, type WorkerEvents, type WorkerUtils } from 'graphile-worker'
import { fmtMs, log, memory, mib, nextBoundary, percentile, PG_URL, procCpuMs, sleep } from './dispatch-common.ts'

const { values: args } = parseArgs({
  options: {
    tasks: { type: 'string', default: '10000' },
    mode: { type: 'string', default: 'runAt' },
    concurrency: { type: 'string', default: '64' },
    pool: { type: 'string', default: '20' },
    'poll-ms': { type: 'string', default: '2000' },
    'node-time': { type: 'boolean', default: false },
    'lead-sec': { type: 'string', default: '10' },
    'add-batch': { type: 'string', default: '1000' },
    'local-queue': { type: 'string' },
    'complete-batch-ms': { type: 'string' },
    'window-sec': { type: 'string', default: '300' },
  },
})
const N = Number(args.tasks)
const MODE = args.mode === 'cron' ? 'cron' : 'runAt'
if (args.mode !== 'cron' && args.mode !== 'runAt') throw new Error(`--mode must be runAt or cron, not ${args.mode}`)
/** undefined = graphile-worker's default (preset worker.concurrentJobs = 1). */
const CONCURRENCY = args.concurrency === 'default' ? undefined : Number(args.concurrency)
const POOL = Number(args.pool)
const POLL_MS = Number(args['poll-ms'])
const NODE_TIME = args['node-time'] === true
const LEAD_MS = Number(args['lead-sec']) * 1000
const ADD_BATCH = Number(args['add-batch'])
const LOCAL_QUEUE = args['local-queue'] === undefined ? undefined : Number(args['local-queue'])
const COMPLETE_BATCH_MS = args['complete-batch-ms'] === undefined ? undefined : Number(args['complete-batch-ms'])
const WINDOW_MS = Number(args['window-sec']) * 1000
const TASK = 'bench_task'
for (const [name, value] of Object.entries({ tasks: N, pool: POOL, 'poll-ms': POLL_MS, 'add-batch': ADD_BATCH, 'window-sec': WINDOW_MS })) {
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name} must be a positive number`)
}
if (!(LEAD_MS >= 0)) throw new Error('--lead-sec must be 0 or more')
if (CONCURRENCY !== undefined && !(CONCURRENCY >= 1)) throw new Error('--concurrency must be a positive number or "default"')
if (POOL < 2) throw new Error('--pool must be at least 2 (graphile-worker: maxPoolSize must be at least 2)')

/** The installed graphile-worker's package.json version (its exports map hides ./package.json). */
function graphileWorkerVersion(): string {
  const entry = fileURLToPath(import.meta.resolve('graphile-worker'))
  let dir = dirname(entry)
  for (let i = 0; i < 4; i += 1, dir = dirname(dir)) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string }
      if (pkg.name === 'graphile-worker' && pkg.version !== undefined) return pkg.version
    } catch {
      // keep walking up
    }
  }
  return 'unknown'
}
const GW_VERSION = graphileWorkerVersion()

/** graphile-worker's messages at warning/error only (its info level logs every completed job). */
let shuttingDown = false
const gwLogger = new Logger(() => (level, message) => {
  if (shuttingDown) return // the forced drop of the database makes its connections fail
  if (level === 'error' || level === 'warning') log(`graphile-worker ${level}: ${message}`)
})

// ---------------------------------------------------------------------------- throw-away database

function pgCode(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err && typeof err.code === 'string' ? err.code : undefined
}

async function openAdmin(): Promise<pg.Client> {
  const connect = async (url: string) => {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 })
    client.on('error', () => {}) // the admin connection only matters for create / drop
    await client.connect()
    return client
  }
  try {
    return await connect(PG_URL)
  } catch (err) {
    if (pgCode(err) !== '3D000') throw err
    const fallback = new URL(PG_URL)
    fallback.pathname = '/postgres'
    return connect(fallback.toString())
  }
}

const admin = await openAdmin()
const dbName = `ag_bench_${randomBytes(6).toString('hex')}`
await admin.query(`create database ${dbName}`)
const dbUrl = (() => {
  const u = new URL(PG_URL)
  u.pathname = `/${dbName}`
  return u.toString()
})()
let cleanedUp = false
/** `waitForClose`: false when interrupted (the pools are still open; the forced drop ends them). */
async function cleanup(waitForClose = true): Promise<void> {
  if (cleanedUp) return
  cleanedUp = true
  shuttingDown = true
  // graphile-worker's release ends its pg pools without awaiting pool.end() and removes its error
  // handlers first: give those connections up to 5 s to close, and do not let a connection that
  // the forced drop terminates (57P01 admin_shutdown) crash the process on an unhandled 'error'.
  process.on('uncaughtException', (err) => {
    if (pgCode(err) === '57P01') return
    log(`uncaught exception during cleanup: ${err.stack ?? String(err)}`)
    process.exitCode = 1
  })
  for (let i = 0; waitForClose && i < 50; i += 1) {
    const open = await admin.query<{ n: number }>('select count(*)::int as n from pg_stat_activity where datname = $1', [dbName]).catch(() => undefined)
    if (open === undefined || (open.rows[0]?.n ?? 0) === 0) break
    await sleep(100)
  }
  await admin.query(`drop database if exists ${dbName} with (force)`).catch((err: unknown) => log(`drop database failed: ${String(err)}`))
  await admin.end().catch(() => undefined)
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    // Interrupted: the pools' connections die with the database; only dropping it matters now.
    process.on('unhandledRejection', () => {})
    process.on('uncaughtException', () => {})
    void cleanup(false).then(() => process.exit(signal === 'SIGINT' ? 130 : 143))
  })
}

// ---------------------------------------------------------------------------- instrumentation

/** Per job index: Date.now() when the handler was entered for the measured slot (0 = not yet). */
const executedAt = new Float64Array(N)
let executedMeasured = 0
let executedTotal = 0
let duplicates = 0
let otherSlot = 0
let measuredSlot = 0

/** The task handler: records the entry time and returns at once (a succeeded job). */
const benchTask: Task = (payload) => {
  const now = Date.now()
  executedTotal += 1
  const p = payload as { i?: number; _cron?: { ts: string } }
  const i = p.i
  const slot = p._cron === undefined ? measuredSlot : Date.parse(p._cron.ts)
  if (typeof i !== 'number' || i < 0 || i >= N || slot !== measuredSlot) {
    otherSlot += 1
    return
  }
  if (executedAt[i] !== 0) {
    duplicates += 1
    return
  }
  executedAt[i] = now
  executedMeasured += 1
}

/** graphile-worker's events, counted while `on`. */
const gw = { on: false, getJob: 0, getJobEmpty: 0, notifications: 0, cronSchedule: 0, cronScheduled: 0 }

/** CPU time (ms) of the Postgres backends of the bench database, from /proc (same host only). */
async function postgresCpuMs(): Promise<number | undefined> {
  try {
    const { rows } = await admin.query<{ pid: number }>('select pid from pg_stat_activity where datname = $1', [dbName])
    return procCpuMs(rows.map((row) => row.pid))
  } catch {
    return undefined
  }
}

// ---------------------------------------------------------------------------- main

try {
  await main()
} finally {
  await cleanup()
}

async function main(): Promise<void> {
  const atStart = memory()
  const events: WorkerEvents = new EventEmitter() as WorkerEvents
  const cronTimes: { schedule?: number; scheduled?: number } = {}
  events.on('worker:getJob:start', () => {
    if (gw.on) gw.getJob += 1
  })
  events.on('worker:getJob:empty', () => {
    if (gw.on) gw.getJobEmpty += 1
  })
  events.on('pool:listen:notification', () => {
    if (gw.on) gw.notifications += 1
  })
  events.on('cron:schedule', ({ timestamp }) => {
    gw.cronSchedule += 1
    if (timestamp === measuredSlot) cronTimes.schedule = Date.now()
  })
  events.on('cron:scheduled', ({ timestamp }) => {
    gw.cronScheduled += 1
    if (timestamp === measuredSlot) cronTimes.scheduled = Date.now()
  })

  const utils: WorkerUtils = await makeWorkerUtils({ connectionString: dbUrl, maxPoolSize: 2, logger: gwLogger, useNodeTime: NODE_TIME })
  await utils.migrate()
  const concurrencyLabel = CONCURRENCY === undefined ? '1 (graphile-worker default)' : String(CONCURRENCY)
  log(
    `db ${dbName}, graphile-worker ${GW_VERSION}, mode ${MODE}, ${N} jobs, concurrency ${concurrencyLabel}, pool ${POOL}, pollInterval ${POLL_MS} ms${LOCAL_QUEUE === undefined ? '' : `, localQueue ${LOCAL_QUEUE}`}${COMPLETE_BATCH_MS === undefined ? '' : `, completeJobBatchDelay ${COMPLETE_BATCH_MS} ms`}`,
  )

  // cron: start the runner just after a minute boundary, so the next boundary is the first slot its
  // cron schedules, with ≥ 45 s for parsing the crontab and registering the N items.
  if (MODE === 'cron' && Date.now() % 60_000 > 15_000) {
    const at = nextBoundary(Date.now()) + 300
    log(`waiting ${((at - Date.now()) / 1000).toFixed(0)} s for a minute boundary before starting the runner`)
    await sleep(at - Date.now())
  }
  let crontab = ''
  if (MODE === 'cron') {
    const lines: string[] = []
    for (let i = 0; i < N; i += 1) lines.push(`* * * * * ${TASK} ?id=bench_${i} {i:${i}}`)
    crontab = lines.join('\n')
  }
  const options: RunnerOptions = {
    connectionString: dbUrl,
    maxPoolSize: POOL,
    pollInterval: POLL_MS,
    useNodeTime: NODE_TIME,
    noHandleSignals: true,
    logger: gwLogger,
    events,
    taskList: { [TASK]: benchTask },
    crontab, // '' in runAt mode: no crontab (and no reading ./crontab)
  }
  if (CONCURRENCY !== undefined) options.concurrency = CONCURRENCY
  if (LOCAL_QUEUE !== undefined || COMPLETE_BATCH_MS !== undefined) {
    options.preset = {
      worker: {
        ...(LOCAL_QUEUE === undefined ? {} : { localQueue: { size: LOCAL_QUEUE } }),
        ...(COMPLETE_BATCH_MS === undefined ? {} : { completeJobBatchDelay: COMPLETE_BATCH_MS }),
      },
    }
  }
  const startT0 = performance.now()
  const runner: Runner = await run(options)
  const startMs = performance.now() - startT0
  runner.promise.catch((err: unknown) => log(`runner failed: ${String(err)}`))
  log(`runner started in ${startMs.toFixed(0)} ms`)
  const afterStart = memory()

  let addMs = Number.NaN
  let addDoneBeforeSlot = Number.NaN
  let slot: number
  let afterAdd: { rss: number; heapUsed: number }
  let window: WindowResult
  if (MODE === 'runAt') {
    slot = nextBoundary(Date.now() + LEAD_MS + 3000)
    measuredSlot = slot
    const addAt = slot - LEAD_MS
    log(`waiting ${((addAt - Date.now()) / 1000).toFixed(0)} s to add ${N} jobs with runAt ${new Date(slot).toISOString()} (${LEAD_MS / 1000} s before it)`)
    const adding = (async () => {
      await sleep(addAt - Date.now())
      const runAt = new Date(slot)
      const t0 = performance.now()
      for (let from = 0; from < N; from += ADD_BATCH) {
        const specs: AddJobsJobSpec[] = []
        for (let i = from; i < Math.min(N, from + ADD_BATCH); i += 1) specs.push({ identifier: TASK, payload: { i }, runAt })
        await utils.addJobs(specs)
      }
      addMs = performance.now() - t0
      addDoneBeforeSlot = slot - Date.now()
      log(`added ${N} jobs in ${(addMs / 1000).toFixed(2)} s (${(N / (addMs / 1000)).toFixed(0)} jobs/s), ${(addDoneBeforeSlot / 1000).toFixed(1)} s before the slot`)
    })()
    if (LEAD_MS > 1000) {
      await adding
      afterAdd = memory()
      window = await measureWindow(slot)
    } else {
      // Jobs added (about) when they are due: the window (from 1 s before the slot) runs meanwhile.
      afterAdd = memory()
      window = await measureWindow(slot)
      await adding
    }
  } else {
    slot = nextBoundary(Date.now())
    measuredSlot = slot
    afterAdd = memory()
    window = await measureWindow(slot)
  }
  // The cron insert statement may still be running if the window ended early (not all ran).
  await runner.stop()
  await utils.release()

  // ---- report
  const lags: number[] = []
  for (let i = 0; i < N; i += 1) lags.push(executedAt[i] === 0 ? Number.POSITIVE_INFINITY : (executedAt[i] as number) - slot)
  lags.sort((a, b) => a - b)
  const ran = lags.filter(Number.isFinite)
  const ranWithin60s = lags.filter((l) => l < 60_000).length
  const [load1, load5] = loadavg()
  console.log('\n=== graphile-worker dispatch (peer of bench/dispatch.bench.ts) ===')
  console.log(
    `graphile-worker ${GW_VERSION}, Node ${process.version}, mode ${MODE}, ${N} jobs due at ${new Date(slot).toISOString()}, concurrency ${concurrencyLabel}, pool (maxPoolSize) ${POOL}, pollInterval ${POLL_MS} ms, useNodeTime ${NODE_TIME}, localQueue ${LOCAL_QUEUE ?? 'off'}, completeJobBatchDelay ${COMPLETE_BATCH_MS ?? 'off'}; load average at the end ${load1?.toFixed(2)} / ${load5?.toFixed(2)} (1 / 5 min)`,
  )
  if (MODE === 'runAt')
    console.log(
      `add: ${N} jobs via WorkerUtils.addJobs (add_jobs, ${ADD_BATCH} per call) starting ${LEAD_MS / 1000} s before the slot, in ${(addMs / 1000).toFixed(2)} s (${(N / (addMs / 1000)).toFixed(0)} jobs/s), done ${addDoneBeforeSlot >= 0 ? `${fmtMs(addDoneBeforeSlot)} before` : `${fmtMs(-addDoneBeforeSlot)} after`} the slot`,
    )
  else
    console.log(
      `cron: ${N} crontab lines; runner (incl. crontab parse + registering the items) started in ${(startMs / 1000).toFixed(1)} s; cron insert of the slot's jobs started at +${fmtMs((cronTimes.schedule ?? Number.NaN) - slot)}, committed at +${fmtMs((cronTimes.scheduled ?? Number.NaN) - slot)}`,
    )
  console.log(
    `memory (RSS / heapUsed): at start ${mib(atStart.rss)} / ${mib(atStart.heapUsed)}; after the runner started ${mib(afterStart.rss)} / ${mib(afterStart.heapUsed)}; ${MODE === 'runAt' ? 'after adding the jobs' : 'before the slot'} ${mib(afterAdd.rss)} / ${mib(afterAdd.heapUsed)}; peak during the window ${mib(window.mem.rss)} / ${mib(window.mem.heapUsed)}`,
  )
  console.log(`\n-- slot ${new Date(slot).toISOString()} --`)
  console.log(`ran: ${ran.length}/${N} within the window, ${ranWithin60s}/${N} within 60 s of the slot`)
  console.log(
    `lag slot → handler over all ${N} jobs (not run = ∞): p50 ${fmtMs(percentile(lags, 50))}, p90 ${fmtMs(percentile(lags, 90))}, p99 ${fmtMs(percentile(lags, 99))}, max ${fmtMs(lags[lags.length - 1] as number)}, min ${fmtMs(lags[0] as number)}`,
  )
  if (ran.length < N && ran.length > 0)
    console.log(
      `lag of the ${ran.length} jobs that ran: p50 ${fmtMs(percentile(ran, 50))}, p90 ${fmtMs(percentile(ran, 90))}, p99 ${fmtMs(percentile(ran, 99))}, max ${fmtMs(ran[ran.length - 1] as number)}`,
    )
  if (ran.length > 1) {
    const spread = (ran[ran.length - 1] as number) - (ran[0] as number)
    console.log(
      `first job ran at +${fmtMs(ran[0] as number)}, last at +${fmtMs(ran[ran.length - 1] as number)} (${spread > 0 ? (ran.length / (spread / 1000)).toFixed(0) : 'n/a'} jobs/s between them)`,
    )
  }
  console.log(`\n-- window: ${(window.wallMs / 1000).toFixed(1)} s --`)
  console.log(
    `executions: ${window.executed} (${(window.executed / (window.wallMs / 1000)).toFixed(1)} runs/s, from 1 s before the slot until the last one ran); duplicates ${duplicates}, jobs of another slot ${otherSlot}`,
  )
  console.log(
    `bench process CPU ${(window.cpuMs / 1000).toFixed(1)} s (${((100 * window.cpuMs) / window.wallMs).toFixed(0)} % of one core); Postgres backends of this db ${window.dbCpuMs === undefined ? 'n/a' : `${(window.dbCpuMs / 1000).toFixed(1)} s CPU (${((100 * window.dbCpuMs) / window.wallMs).toFixed(0)} %)`}`,
  )
  console.log(`event-loop delay p50 ${window.loopDelay.p50.toFixed(0)} ms, p99 ${window.loopDelay.p99.toFixed(0)} ms, max ${window.loopDelay.max.toFixed(0)} ms`)
  console.log(`graphile-worker in the window: getJob calls ${window.gw.getJob} (empty ${window.gw.getJobEmpty}), LISTEN notifications ${window.gw.notifications}`)
  if (MODE === 'cron') {
    console.log(
      `note: graphile-worker cron items are rows of the crontab given to the worker process (N lines, distinct ?id=); at each minute the cron loop inserts all matching jobs in one statement, so the jobs start only after that bulk insert commits (+${fmtMs((cronTimes.scheduled ?? Number.NaN) - slot)} here)`,
    )
  } else {
    console.log(`note: jobs due in the future are found by polling (pollInterval ${POLL_MS} ms); the NOTIFY of add_jobs comes when they are added, before they are due`)
  }
}

interface WindowResult {
  mem: { rss: number; heapUsed: number }
  cpuMs: number
  wallMs: number
  executed: number
  dbCpuMs: number | undefined
  loopDelay: { p50: number; p99: number; max: number }
  gw: { getJob: number; getJobEmpty: number; notifications: number }
}

/** From 1 s before the slot until every job ran, or WINDOW_MS after the slot. */
async function measureWindow(slot: number): Promise<WindowResult> {
  log(`waiting ${((slot - Date.now()) / 1000).toFixed(1)} s for the slot ${new Date(slot).toISOString()}`)
  await sleep(Math.max(0, slot - Date.now() - 1000))
  let peak = { rss: 0, heapUsed: 0 }
  const sampler = setInterval(() => {
    const m = process.memoryUsage()
    peak = { rss: Math.max(peak.rss, m.rss), heapUsed: Math.max(peak.heapUsed, m.heapUsed) }
  }, 100)
  const loop = monitorEventLoopDelay({ resolution: 10 })
  loop.enable()
  const dbCpu0 = await postgresCpuMs()
  gw.on = true
  const executed0 = executedTotal
  const cpu0 = process.cpuUsage()
  const wall0 = performance.now()
  const deadline = slot + WINDOW_MS
  let lastLog = Date.now()
  while (Date.now() < deadline && executedMeasured < N) {
    await sleep(20)
    if (Date.now() - lastLog >= 10_000) {
      lastLog = Date.now()
      log(`  +${((Date.now() - slot) / 1000).toFixed(0)} s: ran ${executedMeasured} of ${N}, rss ${mib(process.memoryUsage().rss)}`)
    }
  }
  const cpu = process.cpuUsage(cpu0)
  const wallMs = performance.now() - wall0
  gw.on = false
  const executed = executedTotal - executed0
  const dbCpu1 = await postgresCpuMs()
  loop.disable()
  clearInterval(sampler)
  log(`slot ${new Date(slot).toISOString()}: ran ${executedMeasured}/${N}`)
  return {
    mem: peak,
    cpuMs: (cpu.user + cpu.system) / 1000,
    wallMs,
    executed,
    dbCpuMs: dbCpu0 === undefined || dbCpu1 === undefined ? undefined : dbCpu1 - dbCpu0,
    loopDelay: { p50: loop.percentile(50) / 1e6, p99: loop.percentile(99) / 1e6, max: loop.max / 1e6 },
    gw: { getJob: gw.getJob, getJobEmpty: gw.getJobEmpty, notifications: gw.notifications },
  }
}
