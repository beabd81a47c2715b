// Review sessions in a gateway process: the service, the reviewer page's assets, the isolated
// origin's listener (REVIEWS_PORT), and on the shared job queue the callback delivery worker and the
// retention sweep (expired sessions' sites and dead uploads' blobs deleted).
import type { FastifyInstance } from 'fastify'
import type { Config } from '../platform/config.ts'
import type { BlobStore } from '../platform/blobs.ts'
import type { Clock } from '../platform/clock.ts'
import type { Db } from '../platform/db/index.ts'
import { egressPolicy } from '../platform/egress.ts'
import type { JobQueue } from '../platform/jobs.ts'
import type { Logger } from '../platform/logger.ts'
import { createPageShots } from '../platform/page-shots.ts'
import type { PlanSpec } from '../catalog/types.ts'
import { createCallbackDelivery } from './callbacks.ts'
import { createReviewKeys, reviewsMasterKeys } from './keys.ts'
import { reviewOrigins } from './origins.ts'
import { createRetentionSweep } from './retention.ts'
import { createReviewService, type ReviewService } from './service.ts'
import { buildSiteHostApp } from './site-host.ts'
import type { ReviewerAssets, ReviewOrigins } from './types.ts'
import { createReviewerAssets, createSiteAssets } from './ui/assets.ts'

export interface ReviewsRole {
  service: ReviewService
  origins: ReviewOrigins
  assets: ReviewerAssets
  /** The isolated origin's application (listen on REVIEWS_PORT). */
  siteHost: FastifyInstance
  /**
   * Starts the background work on the job queue (callback deliveries, the retention sweep), opening
   * the queue if no submission has yet: called once the process serves.
   */
  startJobs(): Promise<void>
}

export async function openReviewsRole(deps: {
  config: Config
  db: Db
  blobs: BlobStore
  clock: Clock
  logger: Logger
  /** The process's job queue, opened on the first call (its owner stops it): callback deliveries and the retention sweep run on it. */
  jobs: () => Promise<JobQueue>
  plans: readonly PlanSpec[]
  priceMicros: bigint
}): Promise<ReviewsRole> {
  const { config, db, blobs, clock, logger, jobs } = deps
  const keys = createReviewKeys(await reviewsMasterKeys(db, config.reviewsSecretKeys?.join(',')))
  const egress = egressPolicy({ allow: config.reviewsEgressAllow })
  const origins = reviewOrigins(config.publicReviewsUrl, new URL(config.publicBaseUrl).origin)
  const callbacks = createCallbackDelivery({
    db,
    jobs,
    keys,
    egress,
    clock,
    logger: logger.child({ component: 'review-callbacks' }),
    retry: { limit: config.reviewsCallbackRetryLimit, delaySeconds: config.reviewsCallbackRetryDelaySec },
  })
  const retentionDays = config.reviewsRetentionDays
  const retention = createRetentionSweep({ db, blobs, clock, retentionDays, logger: logger.child({ component: 'review-retention' }) })
  const service = createReviewService({
    db,
    blobs,
    keys,
    callbacks,
    origins,
    egress,
    clock,
    plans: deps.plans,
    priceMicros: deps.priceMicros,
    gatewayUrl: config.publicBaseUrl,
    retentionDays,
  })
  const siteHost = buildSiteHostApp({
    directory: service.directory,
    blobs,
    origins,
    assets: createSiteAssets(origins.reviewer),
    egress,
    screenshots: createPageShots({ chromiumPath: config.chromiumPath, egressAllow: config.reviewsEgressAllow }),
    logger: logger.child({ component: 'reviews-site' }),
    nowMs: () => clock.nowMs(),
  })
  return {
    service,
    origins,
    assets: createReviewerAssets(),
    siteHost,
    async startJobs() {
      await callbacks.start()
      await retention.start(await jobs())
    },
  }
}
