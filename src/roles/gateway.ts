// The gateway role: the gateway listener (discovery, agents, plans, songs and speech sold here,
// MCP), the review sessions it hosts and their isolated origin's listener (REVIEWS_PORT). Reviews
// are part of this role rather than a role of their own: they have no role name, run only beside
// the gateway, and the gateway app serves their operations and reviewer pages.
import { stuckRefunds } from '../payments/refunds.ts'
import type { MediaClient } from '../media/service.ts'
import { early, paid, serviceAppDeps, type RoleContext, type RoleModule } from './context.ts'
import { chromium } from './prerequisites.ts'

export const gatewayRole: RoleModule = {
  name: 'gateway',
  takesPayments: true,
  wants: (_config, roles) => roles.includes('gateway'),
  // Review snapshots of live pages render with Chromium.
  prerequisites: () => [chromium],
  preload(config) {
    const appModule = early(import('../gateway/app.ts'))
    const salesModule = early(import('../gateway/media-sales.ts'))
    const reviewsModule = early(import('../reviews/role.ts'))
    const clientModule = config.mediaUrl ? early(import('../media/client.ts')) : undefined
    return {
      async open(context) {
        const { config, db, blobs, logger } = context
        const { payments, catalog } = paid(context)
        const { registerMediaSales } = await salesModule
        // Songs and speech are sold here: their sales are decided with their payments, and the
        // undelivered part of a settled sale is refunded from the media refund outbox.
        const mediaRefunds = registerMediaSales({ db, payments, logger })
        if (context.orphanedBefore) await mediaRefunds.resumeOrphans(context.orphanedBefore)
        const standing = () => mediaRefunds.standing()
        const client: MediaClient = clientModule
          ? (await clientModule).createHttpMediaClient({ url: config.mediaUrl as string, token: config.mediaInternalToken as string })
          : inProcessMedia(context)
        const { openReviewsRole } = await reviewsModule
        const reviewsSpec = catalog.registry.services.find((service) => service.slug === 'reviews-create')
        const reviews = await openReviewsRole({
          config,
          db,
          blobs,
          clock: context.clock,
          logger,
          jobs: () => context.jobs(),
          plans: reviewsSpec?.plans ?? [],
          priceMicros: reviewsSpec?.meter?.unitPriceMicros ?? 0n,
        })
        const { buildGatewayApp } = await appModule
        return {
          serving: () => reviews.startJobs(),
          refundStandings: [standing],
          diagnostics: { mediaRefunds: () => stuckRefunds({ standing }) },
          loops: [{ name: 'media refund pass', everyMs: 15_000, run: () => mediaRefunds.retryDue() }],
          listeners: [
            {
              name: 'gateway',
              port: config.gatewayPort,
              build: (probes) =>
                buildGatewayApp({
                  ...serviceAppDeps(context, probes),
                  payments,
                  mailer: context.mailer,
                  db,
                  media: { client, hostedBlobs: config.mediaUrl ? undefined : blobs },
                  reviews,
                  localApps: context.localApps,
                }),
            },
            // The isolated origin of review sites: its own listener, never the gateway's origin.
            { name: 'reviews', port: config.reviewsPort, build: () => reviews.siteHost },
          ],
        }
      },
    }
  },
}

/** The media service the media role opened before this one (src/roles/index.ts: media starts first). */
function inProcessMedia(context: RoleContext): MediaClient {
  const media = context.shared.media
  if (!media) throw new Error('the gateway runs without MEDIA_URL but no media service opened in this process')
  return media
}
