// The process's one job queue (src/platform/jobs.ts), opened when a role first asks for it: a
// process whose roles need none (no reviews, memory without dreaming) starts no pollers competing
// with requests for the database, and never loads pg-boss. The roles that share it declare queues of
// their own names (review-callbacks, review-retention, memory.dream.*), so their jobs never mix.
import type { Db } from '../platform/db/index.ts'
import type { JobQueue } from '../platform/jobs.ts'
import type { Logger } from '../platform/logger.ts'

/** Handlers still running at stop get this long (a dream pass is the longest job). */
const STOP_GRACE_MS = 10_000

export interface JobQueueOnDemand {
  /** The queue, opened on the first call. */
  get(): Promise<JobQueue>
  /** Stops the queue if it was opened (its handlers finish or are aborted); the database stays open. */
  stop(): Promise<void>
}

export function jobQueueOnDemand(options: { db: Db; logger: Logger }): JobQueueOnDemand {
  let opening: Promise<JobQueue> | undefined
  return {
    get() {
      opening ??= import('../platform/jobs.ts').then(({ openJobQueue }) => openJobQueue({ db: options.db, logger: options.logger.child({ component: 'jobs' }) }))
      return opening
    },
    async stop() {
      const queue = await opening?.catch(() => undefined)
      await queue?.stop({ timeoutMs: STOP_GRACE_MS })
    },
  }
}
