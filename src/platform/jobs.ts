// The shared Postgres-backed job queue: pg-boss over our Db port, so the same queue runs on a real
// Postgres (a pool; several replicas) and on embedded PGlite (one connection, one process).
//
// Guarantees (pg-boss's, kept as they are):
// - Claiming is exactly-once across replicas: a fetch is `SELECT … FOR UPDATE SKIP LOCKED` then an
//   UPDATE to 'active' in one statement, so two workers never hold the same job.
// - Delivery is at-least-once: a job whose handler throws, times out (expireInSeconds) or whose
//   replica dies is retried up to retryLimit (with retryDelay, doubled with jitter when
//   retryBackoff); a replica that vanishes mid-job leaves it 'active' until maintenance expires it.
//   Handlers must therefore be idempotent.
// - Cron: schedule() stores one row per name; every replica's timekeeper checks it, but only one
//   per interval runs the check (an UPDATE … RETURNING on pg-boss's version row) and the send is a
//   singleton per (name, 60 s slot), so a slot is sent once however many replicas run.
//
// The Db adapter (what pg-boss sends, checked against pg-boss 10.4.2):
// - Single statements, with or without parameters, whose rows pg-boss reads: Db.query (extended
//   protocol, our codec; pg-boss only reads ids, jsonb data, counts via parseInt/parseFloat, and
//   timestamps, which our codec maps compatibly).
// - Parameterless multi-statement scripts: its construction and migration plans and the maintenance
//   commands, all `BEGIN; SET LOCAL …; SELECT pg_advisory_xact_lock(…); …; COMMIT;`. pg-boss never
//   reads their rows. They run through Db.transaction(tx => tx.exec(script)): the script's own
//   BEGIN/COMMIT only warn inside ours, and when a statement fails (e.g. "already exists" when two
//   replicas install the schema at once, which pg-boss expects and ignores) our transaction rolls
//   the block back. A bare exec() would leave a pooled connection — or PGlite's only one — inside
//   an aborted transaction block, failing every later statement on it.
// - create_queue creates and attaches a partition of the job table; replicas doing it at once
//   deadlock on the parent's locks, so it runs in a transaction behind an advisory lock per schema.
// - pg-boss completes and fails a job without awaiting the call; a rejection there would be an
//   unhandled rejection (a crash). Those two commands are recognised and their errors logged
//   instead (the job then stays 'active' until maintenance expires and retries it).
//
// What is switched off: pg-boss's state monitor (a count of every job every interval; nothing
// reads it). Maintenance (expiry of stuck jobs, archiving) and the timekeeper (cron) stay on: both
// run a few statements a minute and are needed for retries of lost jobs and for schedules.
import { createRequire } from 'node:module'
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises'
import PgBoss from 'pg-boss'
import type { Db, Queryable } from './db/index.ts'

/** The logger calls the queue makes (a pino Logger fits). */
export interface JobLogger {
  debug(obj: object, msg?: string): void
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
  error(obj: object, msg?: string): void
}

/**
 * pg-boss queue policies: 'standard' (no limits); 'short' (at most one queued job per
 * singletonKey); 'singleton' (at most one active per key); 'stately' (at most one queued, one
 * retrying and one active per key).
 */
export type QueuePolicy = 'standard' | 'short' | 'singleton' | 'stately'

export interface RetryOptions {
  /** Retries after the first attempt (pg-boss default 2). */
  retryLimit?: number
  /** Seconds before a retry (default 0; at least 1 with back-off). */
  retryDelay?: number
  /** Double the delay per retry, with jitter. */
  retryBackoff?: boolean
  /** A handler still running after this long fails the job (default 15 min; < 24 h). */
  expireInSeconds?: number
}

export interface QueueOptions extends RetryOptions {
  policy?: QueuePolicy
}

export interface SendOptions extends RetryOptions {
  /** Deduplication key; what it limits depends on the queue's policy. */
  singletonKey?: string
  /** Delay before the job may start. */
  startAfterSeconds?: number
  /**
   * Enqueue inside the caller's transaction (committed or rolled back with it). The queue must
   * have been declared (declare/work/send/schedule) by this JobQueue first.
   */
  tx?: Queryable
}

export interface WorkOptions {
  /** Jobs fetched per poll, handled concurrently (default 1). */
  batchSize?: number
  /** Seconds between polls when the queue is empty (default 2, at least 0.5). */
  pollingIntervalSeconds?: number
}

export interface Job<T> {
  id: string
  name: string
  data: T
  /** 0 on the first attempt. */
  retryCount: number
  retryLimit: number
  /** Aborted when the job expires (expireInSeconds) or the queue stops past its grace period. */
  signal: AbortSignal
}

export type JobHandler<T> = (job: Job<T>) => Promise<unknown>

export interface JobQueue {
  readonly schema: string
  /** Creates the queue (idempotent) and sets its policy and defaults. */
  declare(name: string, options?: QueueOptions): Promise<void>
  /** Polls `name` and runs `handler` per job (a throw fails the job: it is retried per its options). */
  work<T = unknown>(name: string, handler: JobHandler<T>, options?: WorkOptions): Promise<void>
  /** The job's id, or null when a singleton rule dropped it. */
  send(name: string, data: object, options?: SendOptions): Promise<string | null>
  /** One send per cron slot (UTC, 5 fields, minute resolution) across all replicas. */
  schedule(name: string, cron: string, data?: object, options?: RetryOptions & { tz?: string }): Promise<void>
  unschedule(name: string): Promise<void>
  /**
   * Stops polling and the timers, waits up to timeoutMs for running handlers, then aborts their
   * signals and waits for them and for pg-boss's last statements. The Db stays open (the caller
   * owns it): close it after this resolves.
   */
  stop(options?: { timeoutMs?: number }): Promise<void>
}

export interface OpenJobQueueOptions {
  db: Db
  logger: JobLogger
  /** Postgres schema of pg-boss's tables (letters, digits, underscores; default 'pgboss'). */
  schema?: string
  /** Run cron schedules on this instance (default true). */
  schedule?: boolean
  /** Expire stuck jobs and archive old ones (default true). */
  supervise?: boolean
  /** Tuning (tests): pg-boss's intervals, in seconds. */
  maintenanceIntervalSeconds?: number
  cronMonitorIntervalSeconds?: number
  cronWorkerIntervalSeconds?: number
  clockMonitorIntervalSeconds?: number
}

interface PgBossPlans {
  completeJobs(schema: string): string
  failJobsById(schema: string): string
}

const TX_SCRIPT = /^\s*BEGIN\s*;/i
/** pg-boss's create_queue call: it creates and attaches a partition of the job table. */
const CREATE_QUEUE = /^\s*SELECT\s+\w+\.create_queue\(/i
const SCHEMA_RE = /^[A-Za-z_][A-Za-z0-9_]{0,49}$/
const DEFAULT_STOP_TIMEOUT_MS = 10_000
/** After their signals abort, how long handlers get to settle. */
const ABORT_SETTLE_MS = 5000

/** The texts of pg-boss's un-awaited complete/fail commands (empty if its internals moved). */
function unawaitedCommands(schema: string): Set<string> {
  try {
    const plans = createRequire(import.meta.url)('pg-boss/src/plans.js') as PgBossPlans
    return new Set([plans.completeJobs(schema), plans.failJobsById(schema)])
  } catch {
    return new Set()
  }
}

export async function openJobQueue(options: OpenJobQueueOptions): Promise<JobQueue> {
  const queue = new PgBossJobQueue(options)
  await queue.start()
  return queue
}

class PgBossJobQueue implements JobQueue {
  readonly schema: string
  readonly #db: Db
  readonly #logger: JobLogger
  readonly #boss: PgBoss
  readonly #unawaited: Set<string>
  /** Queues this instance created or declared (send with a tx needs one). */
  readonly #known = new Set<string>()
  /** Running handlers' abort controllers. */
  readonly #running = new Set<AbortController>()
  #pendingSql = 0
  #stopping = false
  #closed = false
  #stopped: Promise<void> | undefined

  constructor(options: OpenJobQueueOptions) {
    const schema = options.schema ?? 'pgboss'
    if (!SCHEMA_RE.test(schema)) throw new RangeError(`job queue schema must be letters, digits and underscores (at most 50), got ${JSON.stringify(schema)}`)
    this.schema = schema
    this.#db = options.db
    this.#logger = options.logger
    this.#unawaited = unawaitedCommands(schema)
    const config: PgBoss.ConstructorOptions = {
      db: { executeSql: (text: string, values?: unknown[]) => this.#executeSql(text, values) },
      schema,
      migrate: true,
      schedule: options.schedule ?? true,
      supervise: options.supervise ?? true,
    }
    // pg-boss rejects keys present with an undefined value.
    if (options.maintenanceIntervalSeconds !== undefined) config.maintenanceIntervalSeconds = options.maintenanceIntervalSeconds
    if (options.cronMonitorIntervalSeconds !== undefined) config.cronMonitorIntervalSeconds = options.cronMonitorIntervalSeconds
    if (options.cronWorkerIntervalSeconds !== undefined) config.cronWorkerIntervalSeconds = options.cronWorkerIntervalSeconds
    if (options.clockMonitorIntervalSeconds !== undefined) config.clockMonitorIntervalSeconds = options.clockMonitorIntervalSeconds
    this.#boss = new PgBoss(config)
    // An 'error' event without a listener would throw; pg-boss reports its background failures here.
    this.#boss.on('error', (err: unknown) => {
      const e = err as { message?: unknown; queue?: unknown }
      this.#logger.warn({ err: String(e?.message ?? err), queue: e?.queue, schema }, 'job queue: background error')
    })
  }

  async start(): Promise<void> {
    await this.#boss.start()
  }

  async #executeSql(text: string, values: unknown[] | undefined): Promise<{ rows: unknown[] }> {
    if (this.#closed) {
      const err = new Error('job queue stopped')
      if (this.#unawaited.has(text)) {
        this.#logger.warn({ schema: this.schema }, 'job queue: a job finished after the queue stopped; it will expire and be retried')
        return { rows: [{ count: 0 }] }
      }
      throw err
    }
    this.#pendingSql++
    try {
      const params = values ?? []
      if (params.length === 0 && TX_SCRIPT.test(text)) {
        try {
          await this.#db.transaction((tx) => tx.exec(text))
        } catch (err) {
          // Two replicas installing at once: the loser may meet the winner's schema as a unique
          // violation on a catalog index rather than "already exists"; both mean pg-boss's install
          // race, which it expects and ignores by that message (the winner's install committed).
          const { code, message } = err as { code?: unknown; message?: unknown }
          if (code === '23505' && typeof message === 'string' && /"pg_(namespace|type|class)_/.test(message)) {
            throw new Error(`already exists (a concurrent install won: ${message})`)
          }
          throw err
        }
        return { rows: [] }
      }
      if (CREATE_QUEUE.test(text)) {
        // Two replicas attaching partitions at once deadlock on the job table's locks (40P01, seen
        // when every role of a fresh install starts together): one creation at a time per schema.
        return {
          rows: await this.#db.transaction(async (tx) => {
            await tx.query('select pg_advisory_xact_lock(hashtext($1))', [`agent-gateway:pg-boss:create_queue:${this.schema}`])
            return tx.query(text, params)
          }),
        }
      }
      return { rows: await this.#db.query(text, params) }
    } catch (err) {
      if (this.#unawaited.has(text)) {
        this.#logger.error({ err: (err as Error)?.message ?? String(err), schema: this.schema }, 'job queue: recording a job result failed; it will expire and be retried')
        return { rows: [{ count: 0 }] }
      }
      throw err
    } finally {
      this.#pendingSql--
    }
  }

  #assertOpen(): void {
    if (this.#stopping) throw new Error('job queue is stopping')
  }

  async #ensure(name: string): Promise<void> {
    if (this.#known.has(name)) return
    await this.#boss.createQueue(name) // ON CONFLICT DO NOTHING: an existing queue keeps its policy
    this.#known.add(name)
  }

  async declare(name: string, options: QueueOptions = {}): Promise<void> {
    this.#assertOpen()
    const queue: PgBoss.Queue = { name, policy: options.policy ?? 'standard' }
    if (options.retryLimit !== undefined) queue.retryLimit = options.retryLimit
    if (options.retryDelay !== undefined) queue.retryDelay = options.retryDelay
    if (options.retryBackoff !== undefined) queue.retryBackoff = options.retryBackoff
    if (options.expireInSeconds !== undefined) queue.expireInSeconds = options.expireInSeconds
    await this.#boss.createQueue(name, { ...queue })
    // createQueue keeps an existing queue as it was; bring it to these options (every replica
    // declares the same, so this converges).
    await this.#boss.updateQueue(name, { ...queue })
    this.#known.add(name)
  }

  async work<T = unknown>(name: string, handler: JobHandler<T>, options: WorkOptions = {}): Promise<void> {
    this.#assertOpen()
    await this.#ensure(name)
    const workOptions: PgBoss.WorkOptions & { includeMetadata: true } = { includeMetadata: true, batchSize: options.batchSize ?? 1 }
    if (options.pollingIntervalSeconds !== undefined) workOptions.pollingIntervalSeconds = options.pollingIntervalSeconds
    await this.#boss.work<T>(name, workOptions, (jobs) => this.#handle(name, jobs, handler))
  }

  /**
   * One fetched batch. pg-boss completes every id when this resolves and fails every id still
   * below 'completed' when it throws; so on a partial failure the successes are completed here
   * first, and the throw then fails exactly the others (still 'active', so no other worker holds
   * them in between).
   */
  async #handle<T>(name: string, jobs: PgBoss.JobWithMetadata<T>[], handler: JobHandler<T>): Promise<void> {
    const settled = await Promise.allSettled(jobs.map((job) => this.#runOne(name, job, handler)))
    const failures: { id: string; reason: unknown }[] = []
    const successes: string[] = []
    settled.forEach((result, i) => {
      const id = jobs[i]!.id
      if (result.status === 'fulfilled') successes.push(id)
      else failures.push({ id, reason: result.reason })
    })
    if (failures.length === 0) return
    if (successes.length > 0) await this.#boss.complete(name, successes)
    const first = failures[0]!.reason
    if (failures.length === 1) throw first
    throw new Error(`${failures.length} jobs failed; first: ${(first as Error)?.message ?? String(first)}`)
  }

  async #runOne<T>(name: string, job: PgBoss.JobWithMetadata<T>, handler: JobHandler<T>): Promise<void> {
    const controller = new AbortController()
    const expireMs = Number(job.expireInSeconds) * 1000
    const expiry =
      Number.isFinite(expireMs) && expireMs > 0 ? setTimeout(() => controller.abort(new Error(`job ${job.id} expired after ${expireMs / 1000} s`)), expireMs) : undefined
    expiry?.unref()
    this.#running.add(controller)
    const started = Date.now()
    try {
      await handler({ id: job.id, name, data: job.data, retryCount: job.retryCount, retryLimit: job.retryLimit, signal: controller.signal })
      this.#logger.debug({ queue: name, jobId: job.id, ms: Date.now() - started }, 'job done')
    } catch (err) {
      const willRetry = job.retryCount < job.retryLimit
      this.#logger.warn(
        { queue: name, jobId: job.id, retryCount: job.retryCount, retryLimit: job.retryLimit, willRetry, err: (err as Error)?.message ?? String(err) },
        willRetry ? 'job failed; it will be retried' : 'job failed for the last time',
      )
      throw err
    } finally {
      if (expiry) clearTimeout(expiry)
      this.#running.delete(controller)
    }
  }

  async send(name: string, data: object, options: SendOptions = {}): Promise<string | null> {
    this.#assertOpen()
    const sendOptions: PgBoss.SendOptions = {}
    if (options.singletonKey !== undefined) sendOptions.singletonKey = options.singletonKey
    if (options.retryLimit !== undefined) sendOptions.retryLimit = options.retryLimit
    if (options.retryDelay !== undefined) sendOptions.retryDelay = options.retryDelay
    if (options.retryBackoff !== undefined) sendOptions.retryBackoff = options.retryBackoff
    if (options.expireInSeconds !== undefined) sendOptions.expireInSeconds = options.expireInSeconds
    if (options.startAfterSeconds !== undefined && options.startAfterSeconds > 0) sendOptions.startAfter = options.startAfterSeconds
    if (options.tx !== undefined) {
      if (!this.#known.has(name)) throw new Error(`job queue ${name} must be declared before a send inside a transaction`)
      const tx = options.tx
      sendOptions.db = { executeSql: async (text: string, values?: unknown[]) => ({ rows: await tx.query(text, values ?? []) }) }
    } else {
      await this.#ensure(name)
    }
    return this.#boss.send(name, data, sendOptions)
  }

  async schedule(name: string, cron: string, data: object = {}, options: RetryOptions & { tz?: string } = {}): Promise<void> {
    this.#assertOpen()
    await this.#ensure(name)
    const scheduleOptions: PgBoss.ScheduleOptions = { tz: options.tz ?? 'UTC' }
    if (options.retryLimit !== undefined) scheduleOptions.retryLimit = options.retryLimit
    if (options.retryDelay !== undefined) scheduleOptions.retryDelay = options.retryDelay
    if (options.retryBackoff !== undefined) scheduleOptions.retryBackoff = options.retryBackoff
    if (options.expireInSeconds !== undefined) scheduleOptions.expireInSeconds = options.expireInSeconds
    await this.#boss.schedule(name, cron, data, scheduleOptions)
  }

  async unschedule(name: string): Promise<void> {
    this.#assertOpen()
    await this.#boss.unschedule(name)
  }

  stop(options: { timeoutMs?: number } = {}): Promise<void> {
    this.#stopped ??= this.#stop(options.timeoutMs ?? DEFAULT_STOP_TIMEOUT_MS)
    return this.#stopped
  }

  async #stop(timeoutMs: number): Promise<void> {
    this.#stopping = true
    const started = Date.now()
    const grace = Math.max(0, timeoutMs)
    // Handlers get `grace` ms, then their signals abort: they fail through pg-boss's normal path
    // while pg-boss still waits for them (its own timeout is longer), so its shutdown never has to
    // fail jobs a handler is still holding.
    const abortAll = (): void => {
      if (this.#running.size > 0) this.#logger.warn({ running: this.#running.size }, 'job queue: aborting handlers still running at stop')
      for (const controller of this.#running) controller.abort(new Error('job queue stopped'))
    }
    const abortTimer = setTimeout(abortAll, grace)
    try {
      // Stops the workers' polling and the timers, then waits for the handlers.
      await this.#boss.stop({ graceful: true, wait: true, close: false, timeout: Math.max(1000, grace + ABORT_SETTLE_MS) })
    } catch (err) {
      this.#logger.warn({ err: (err as Error)?.message ?? String(err) }, 'job queue: stop reported an error')
    }
    // A poll in flight when polling stopped may still have handed a job over: it runs until the
    // grace period ends, then is aborted (it fails and is retried later).
    await this.#settle(started + grace)
    clearTimeout(abortTimer)
    abortAll()
    // Always drained, past the grace period too: pg-boss records a result without awaiting it.
    await this.#settle(Date.now() + ABORT_SETTLE_MS)
    this.#closed = true
  }

  /** Until no handler runs and no statement is in flight (checked across a turn of the event loop), or the deadline. */
  async #settle(deadline: number): Promise<void> {
    for (;;) {
      if (this.#running.size === 0 && this.#pendingSql === 0) {
        await nextTurn()
        if (this.#running.size === 0 && this.#pendingSql === 0) return
      }
      if (Date.now() >= deadline) return
      await sleep(20)
    }
  }
}
