// Retention of review sessions, and the sweep that deletes what no one may read any more.
//
// A session expires REVIEWS_RETENTION_DAYS after created_at. Serving checks the time itself (the
// reviewer page, the site host, bundle.zip and submission answer 410 from that instant), so the
// sweep only has to catch up: it marks due rows 'expired' (the row and a submitted review stay, so
// the agent can still read it) and records their blob keys in review_uploads in the same
// transaction, then deletes the blobs. A blob delete that fails keeps its key there for the next
// sweep. The same table holds upload intents (service.ts create()): an intent older than an hour
// names the blobs of a request that died before its session was written, and is purged likewise.
//
// Replicas share the work: rows are taken with `for update skip locked`, and a taken blob row is
// leased (purge_after pushed forward) while its blobs are deleted, so no two sweeps take one row.
import type { BlobStore } from '../platform/blobs.ts'
import type { Clock } from '../platform/clock.ts'
import { forEachLimited } from '../platform/concurrency.ts'
import type { Db } from '../platform/db/index.ts'
import type { JobLogger, JobQueue } from '../platform/jobs.ts'

export const REVIEW_RETENTION_QUEUE = 'review-retention'
/** Every 15 minutes: a site is already refused at its expiry, the sweep frees its storage. */
export const REVIEW_RETENTION_CRON = '*/15 * * * *'
export const DEFAULT_RETENTION_DAYS = 30
/** An upload intent this old belongs to a request that died (a create takes seconds). */
export const UPLOAD_INTENT_TTL_MS = 60 * 60 * 1000
const DAY_MS = 24 * 60 * 60 * 1000
/** How long a sweep holds a blob row while deleting its blobs (then another sweep may take it). */
const PURGE_LEASE_MS = 10 * 60 * 1000
const DELETES_AT_ONCE = 8

/** The instant a session created at `createdAt` expires. */
export function expiryOf(createdAt: Date, retentionDays: number): Date {
  return new Date(createdAt.getTime() + retentionDays * DAY_MS)
}

export interface SweepResult {
  /** Sessions marked expired by this run. */
  expired: number
  /** Blob rows (expired sessions, dead uploads) fully purged by this run. */
  purged: number
  /** Keys whose delete failed; kept for the next run. */
  failedKeys: number
}

export interface RetentionSweepDeps {
  db: Db
  blobs: BlobStore
  clock: Clock
  logger: JobLogger
  retentionDays: number
  /** Sessions per transaction, and blob rows per claim (default 100). */
  batchSize?: number
}

export interface RetentionSweep {
  /** One run: expires every due session, then purges every due blob row. */
  sweep(): Promise<SweepResult>
  /** Works the queue and schedules the sweep (one per cron slot across replicas). */
  start(jobs: JobQueue): Promise<void>
}

export function createRetentionSweep(deps: RetentionSweepDeps): RetentionSweep {
  const { db, blobs, clock, logger } = deps
  const batchSize = deps.batchSize ?? 100

  /** One transaction: up to batchSize due sessions marked expired, their keys recorded. */
  async function expireBatch(now: Date): Promise<number> {
    const cutoff = new Date(now.getTime() - deps.retentionDays * DAY_MS)
    return db.transaction(async (tx) => {
      const rows = await tx.query<{ id: string }>(
        `update reviews r set status = 'expired', expired_at = $2
          where r.id in (select id from reviews where status <> 'expired' and created_at <= $1 order by created_at limit $3 for update skip locked)
          returning r.id`,
        [cutoff, now, batchSize],
      )
      if (rows.length === 0) return 0
      const ids = rows.map((row) => row.id)
      // Every key the session may own: its files, the original zip, a live page's screenshot.
      await tx.query(
        `insert into review_uploads (review_id, reason, blob_keys, created_at, purge_after)
         select r.id, 'expired',
                array(select distinct f.blob_key from review_files f where f.review_id = r.id)
                  || case when r.bundle_key is null then array['reviews/' || r.id || '/snapshot.png'] else array[r.bundle_key] end, -- snapshotKey() of site-host.ts
                $2, $2
           from reviews r where r.id = any($1::uuid[])
         on conflict (review_id, reason) do nothing`,
        [ids, now],
      )
      // The file list names blobs that are going; the keys live on in review_uploads until deleted.
      await tx.query(`delete from review_files where review_id = any($1::uuid[])`, [ids])
      return rows.length
    })
  }

  /** Takes up to batchSize due blob rows (a lease), deletes their blobs, forgets what went. */
  async function purgeBatch(now: Date): Promise<{ taken: number; purged: number; failedKeys: number }> {
    const taken = await db.query<{ review_id: string; reason: string; blob_keys: string[] }>(
      `update review_uploads u set purge_after = $2, claimed_at = coalesce(u.claimed_at, $3)
        where (u.review_id, u.reason) in (select review_id, reason from review_uploads where purge_after <= $1 order by purge_after limit $4 for update skip locked)
        returning u.review_id, u.reason, u.blob_keys`,
      [now, new Date(now.getTime() + PURGE_LEASE_MS), now, batchSize],
    )
    let purged = 0
    let failedKeys = 0
    for (const row of taken) {
      const failed: string[] = []
      await forEachLimited(row.blob_keys, DELETES_AT_ONCE, async (key) => {
        try {
          await blobs.delete(key)
        } catch (err) {
          failed.push(key)
          logger.warn({ reviewId: row.review_id, key, err: (err as Error)?.message ?? String(err) }, 'review retention: blob delete failed; kept for the next sweep')
        }
      })
      if (failed.length === 0) {
        await db.query(`delete from review_uploads where review_id = $1 and reason = $2`, [row.review_id, row.reason])
        purged++
      } else {
        // Due just after this run's instant: the next sweep retries exactly these keys, this one does not loop on them.
        await db.query(`update review_uploads set blob_keys = $3, purge_after = $4 where review_id = $1 and reason = $2`, [
          row.review_id,
          row.reason,
          failed,
          new Date(now.getTime() + 1),
        ])
        failedKeys += failed.length
      }
    }
    return { taken: taken.length, purged, failedKeys }
  }

  async function sweep(): Promise<SweepResult> {
    const now = clock.now()
    let expired = 0
    for (;;) {
      const n = await expireBatch(now)
      expired += n
      if (n < batchSize) break
    }
    let purged = 0
    let failedKeys = 0
    for (;;) {
      const batch = await purgeBatch(now)
      purged += batch.purged
      failedKeys += batch.failedKeys
      if (batch.taken < batchSize) break
    }
    if (expired > 0 || purged > 0 || failedKeys > 0) logger.info({ expired, purged, failedKeys }, 'review retention: sweep')
    return { expired, purged, failedKeys }
  }

  return {
    sweep,
    async start(jobs) {
      await jobs.work(REVIEW_RETENTION_QUEUE, async () => sweep())
      // A missed slot is caught up by the next one: no retries.
      await jobs.schedule(REVIEW_RETENTION_QUEUE, REVIEW_RETENTION_CRON, {}, { retryLimit: 0, expireInSeconds: 900 })
    },
  }
}
