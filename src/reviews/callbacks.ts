// Delivery of a submitted review to its callbackUrl, signed per Standard Webhooks, durably: the job
// is enqueued in the submission's own transaction and retried by the shared pg-boss queue, so a
// restart or a crashed replica loses nothing. Delivery is at-least-once (a crash between the POST
// and recording its answer sends again); receivers dedupe on webhook-id, the same on every attempt.
// Every attempt is logged in review_deliveries and shown to the agent by GET.
import type { Static } from '@sinclair/typebox'
import { Webhook } from 'standardwebhooks'
import type { DeliveryAttempt } from '../catalog/schemas/reviews.ts'
import type { Clock } from '../platform/clock.ts'
import type { Db, Queryable } from '../platform/db/index.ts'
import { EgressRefused, type EgressPolicy, guardedFetch } from '../platform/egress.ts'
import type { Job, JobLogger, JobQueue } from '../platform/jobs.ts'
import type { ReviewKeys } from './keys.ts'
import { CALLBACK_LOG_BODY_CHARS, CALLBACK_TIMEOUT_MS } from './limits.ts'

export const REVIEW_CALLBACK_QUEUE = 'review-callbacks'
export const CALLBACK_USER_AGENT = 'agent-gateway-webhooks/1'
/** The receiver's answer is read up to this much (its first CALLBACK_LOG_BODY_CHARS are logged). */
const CALLBACK_MAX_RESPONSE_BYTES = 64 * 1024

/**
 * pg-boss's back-off delays retry n (1-based) by delaySeconds · 2^(n-1) · (1 + random): with
 * 15 retries of 3 s that is 16 attempts, the last one 3 · (2^15 − 1) s ≈ 27.3 h after the first at
 * the earliest and ≈ 54.6 h at the latest (the final gaps are 13.6–27.3 h).
 */
export const CALLBACK_RETRY = { limit: 15, delaySeconds: 3 } as const

export type DeliveryOutcome = Static<typeof DeliveryAttempt>['outcome']

/** The webhook-id of a review's callback: stable across attempts, receivers dedupe on it. */
export function webhookIdOf(reviewId: string): string {
  return `msg_${reviewId.toLowerCase().replaceAll('-', '')}`
}

export interface CallbackDelivery {
  /**
   * Opens the job queue (when it is not open yet) and creates the queue with its retry policy, once;
   * awaited before the transaction that enqueues: on PGlite, opening the queue inside it would wait
   * for the connection the transaction holds.
   */
  declare(): Promise<void>
  /**
   * In the submission's transaction, after declare(): queues the delivery and sets delivery_state
   * 'pending'. A review without a callback_url is left as it is.
   */
  enqueue(tx: Queryable, reviewId: string): Promise<void>
  /** Declares the queue and starts working it. */
  start(): Promise<void>
  /** The attempts so far, oldest first. */
  attempts(q: Queryable, reviewId: string): Promise<Static<typeof DeliveryAttempt>[]>
}

export interface CallbackDeliveryDeps {
  db: Db
  /** The job queue, opened on the first call (the process's one queue: its owner stops it). */
  jobs: () => Promise<JobQueue>
  keys: ReviewKeys
  /** The address rule of the POST (checked at connect time, the connection pinned to the checked address). */
  egress: EgressPolicy
  clock: Clock
  logger: JobLogger
  retry?: { limit: number; delaySeconds: number }
  /** One attempt's whole time (connect, send, answer); default CALLBACK_TIMEOUT_MS. */
  timeoutMs?: number
  /** Polling interval when the queue is empty (pg-boss default 2 s; tests go lower). */
  pollingIntervalSeconds?: number
}

interface CallbackJob {
  reviewId: string
}

interface ReviewRow {
  callback_url: string | null
  review: unknown
  submitted_at: Date | null
  delivery_state: string
}

interface AttemptResult {
  outcome: DeliveryOutcome
  statusCode: number | null
  error: string | null
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** Text fit for the log column: no NUL (Postgres text refuses it), whole code points, at most CALLBACK_LOG_BODY_CHARS. */
function logText(text: string): string {
  return Array.from(text.replaceAll('\u0000', '').toWellFormed()).slice(0, CALLBACK_LOG_BODY_CHARS).join('')
}

export function createCallbackDelivery(deps: CallbackDeliveryDeps): CallbackDelivery {
  const { db, jobs, keys, egress, clock, logger } = deps
  const retry = deps.retry ?? CALLBACK_RETRY
  const timeoutMs = deps.timeoutMs ?? CALLBACK_TIMEOUT_MS
  const queueOptions = {
    retryLimit: retry.limit,
    retryDelay: retry.delaySeconds,
    retryBackoff: true,
    // Past this pg-boss considers the handler lost; an attempt takes at most timeoutMs plus two statements.
    expireInSeconds: Math.ceil(timeoutMs / 1000) + 60,
  }

  /** One POST; never throws. */
  async function post(url: string, headers: Record<string, string>, body: string, jobSignal: AbortSignal): Promise<AttemptResult> {
    // resolveTarget reports a failed lookup as EgressRefused too; a lookup that failed (or found
    // nothing) is a transient failure, a refused address is final.
    let unresolved = false
    const policy: EgressPolicy = {
      allow: egress.allow,
      isPrivate: egress.isPrivate,
      lookup: async (host) => {
        try {
          const found = await egress.lookup(host)
          if (found.length === 0) unresolved = true
          return found
        } catch (err) {
          unresolved = true
          throw err
        }
      },
    }
    // guardedFetch's own timeout is per socket read; this bounds the whole attempt (a receiver
    // trickling its answer cannot hold the job).
    const deadline = AbortSignal.timeout(timeoutMs)
    const fetchOnce = guardedFetch(policy, { timeoutMs, maxResponseBytes: CALLBACK_MAX_RESPONSE_BYTES })
    try {
      const res = await fetchOnce(url, { method: 'POST', headers, body, signal: AbortSignal.any([jobSignal, deadline]) })
      const text = await res.text()
      if (res.status >= 200 && res.status < 300) return { outcome: 'delivered', statusCode: res.status, error: null }
      const redirect = res.status >= 300 && res.status < 400 ? ' (redirects are not followed)' : ''
      const error = logText(`HTTP ${res.status}${redirect}${text ? `: ${text}` : ''}`)
      return { outcome: res.status === 410 ? 'gone' : 'failed', statusCode: res.status, error }
    } catch (err) {
      if (err instanceof EgressRefused && !unresolved) return { outcome: 'refused', statusCode: null, error: logText(err.message) }
      let message = (err as Error)?.message ?? String(err)
      if (deadline.aborted) message = `no answer within ${timeoutMs} ms`
      else if (jobSignal.aborted) message = `interrupted: ${(jobSignal.reason as Error)?.message ?? 'the job was stopped'}`
      return { outcome: 'failed', statusCode: null, error: logText(message) }
    }
  }

  async function deliver(job: Job<CallbackJob>): Promise<void> {
    const reviewId = job.data?.reviewId
    if (typeof reviewId !== 'string' || !UUID_RE.test(reviewId)) {
      logger.error({ jobId: job.id }, 'review callback: job without a review id; dropped')
      return
    }
    const rows = await db.query<ReviewRow & Record<string, unknown>>(`select callback_url, review, submitted_at, delivery_state from reviews where id = $1`, [reviewId])
    const row = rows[0]
    // Only a pending delivery is attempted: delivered and failed are final (this job ran before or
    // is a duplicate), and a deleted review has nothing to deliver.
    if (row?.delivery_state !== 'pending') return
    if (row.callback_url === null || row.review === null || row.submitted_at === null) {
      logger.error({ reviewId }, 'review callback: pending without a callback URL or a submitted review; dropped')
      return
    }
    // The same bytes on every attempt (jsonb reads back in one key order).
    const body = JSON.stringify({ type: 'review.submitted', timestamp: row.submitted_at.toISOString(), data: row.review })
    const webhookId = webhookIdOf(reviewId)
    const now = clock.now()
    // One signature per master key: a receiver holding the old or the new secret verifies during a rotation.
    const signature = keys
      .webhookSecrets(reviewId)
      .map((secret) => new Webhook(secret).sign(webhookId, now, body))
      .join(' ')
    const headers = {
      'content-type': 'application/json',
      'user-agent': CALLBACK_USER_AGENT,
      'webhook-id': webhookId,
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': signature,
    }

    const attempt = job.retryCount + 1
    const startedMs = clock.nowMs()
    const result = await post(row.callback_url, headers, body, job.signal)
    const durationMs = Math.max(0, Math.round(clock.nowMs() - startedMs))
    const last = job.retryCount >= job.retryLimit
    const state = result.outcome === 'delivered' ? 'delivered' : result.outcome === 'failed' && !last ? null : 'failed'
    await db.transaction(async (tx) => {
      await tx.query(`insert into review_deliveries (review_id, attempt, started_at, duration_ms, outcome, status_code, error) values ($1, $2, $3, $4, $5, $6, $7)`, [
        reviewId,
        attempt,
        new Date(startedMs),
        durationMs,
        result.outcome,
        result.statusCode,
        result.error,
      ])
      // A duplicate run never turns a delivered review back to failed.
      if (state) await tx.query(`update reviews set delivery_state = $2 where id = $1 and delivery_state = 'pending'`, [reviewId, state])
    })

    // The URL may carry the receiver's own token: only its host is logged.
    const host = URL.parse(row.callback_url)?.host
    const fields = { reviewId, attempt, host, outcome: result.outcome, statusCode: result.statusCode, ms: durationMs }
    if (result.outcome === 'delivered') logger.info(fields, 'review callback delivered')
    else logger.warn({ ...fields, error: result.error, final: state === 'failed' }, 'review callback not delivered')
    // A throw makes pg-boss retry (or record the last failure); gone and refused are final.
    if (result.outcome === 'failed') throw new Error(`review callback attempt ${attempt} failed: ${result.error}`)
  }

  let declaring: Promise<JobQueue> | undefined
  let declared: JobQueue | undefined
  const declare = (): Promise<JobQueue> => {
    if (declaring !== undefined) return declaring
    const attempt = jobs().then(async (queue) => {
      await queue.declare(REVIEW_CALLBACK_QUEUE, queueOptions)
      declared = queue
      return queue
    })
    declaring = attempt
    // A failed open or declare is tried again by the next caller.
    attempt.catch(() => {
      if (declaring === attempt) declaring = undefined
    })
    return attempt
  }

  return {
    async declare() {
      await declare()
    },
    async enqueue(tx, reviewId) {
      if (declared === undefined) throw new Error('review callbacks: enqueue before declare()')
      const updated = await tx.query(`update reviews set delivery_state = 'pending' where id = $1 and callback_url is not null returning id`, [reviewId])
      if (updated.length === 0) return
      await declared.send(REVIEW_CALLBACK_QUEUE, { reviewId } satisfies CallbackJob, { tx, ...queueOptions })
    },
    async start() {
      const queue = await declare()
      // Several at once, so one receiver that hangs until the timeout does not hold up the others.
      const workOptions = deps.pollingIntervalSeconds === undefined ? { batchSize: 8 } : { batchSize: 8, pollingIntervalSeconds: deps.pollingIntervalSeconds }
      await queue.work<CallbackJob>(REVIEW_CALLBACK_QUEUE, deliver, workOptions)
    },
    async attempts(q, reviewId) {
      const rows = await q.query<{ attempt: number; started_at: Date; duration_ms: number; outcome: DeliveryOutcome; status_code: number | null; error: string | null }>(
        `select attempt, started_at, duration_ms, outcome, status_code, error from review_deliveries where review_id = $1 order by id`,
        [reviewId],
      )
      return rows.map((r) => ({ attempt: r.attempt, at: r.started_at.toISOString(), outcome: r.outcome, statusCode: r.status_code, error: r.error, durationMs: r.duration_ms }))
    },
  }
}
