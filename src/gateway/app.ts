// The {base_url} application: discovery surface, registration and claims, plan purchase, the
// advisor, songs and speech (sold here, made by the media role), review sessions and their reviewer
// page, the hosted audio when the media role shares this process, and the dev-only faucet and
// outbox of the embedded default.
import type { FastifyInstance } from 'fastify'
import { createServiceApp, type ServiceAppDeps } from '../catalog/service-app.ts'
import { guideHandlers, type AccessWrapper, type OperationHandler } from '../catalog/routes.ts'
import type { BlobStore } from '../platform/blobs.ts'
import type { Db } from '../platform/db/index.ts'
import { AppError } from '../platform/errors.ts'
import type { Mailer } from '../platform/mailer.ts'
import type { Payments } from '../payments/index.ts'
import { registerAudioHosting } from '../media/hosting.ts'
import { checkSongRequest, type SongShape } from '../media/request-rules.ts'
import type { MediaClient } from '../media/service.ts'
import { gatewayHandlers, registerDevRoutes } from './handlers.ts'
import { mediaHandlers } from './media-handlers.ts'
import { registerReviewerPages, reviewHandlers } from '../reviews/app.ts'
import type { ReviewService } from '../reviews/service.ts'
import type { ReviewerAssets, ReviewOrigins } from '../reviews/types.ts'
import { createOperationDispatcher, type LocalApps } from '../mcp/dispatcher.ts'
import { registerMcpRoute } from '../mcp/server.ts'

import { GATEWAY_OPERATIONS } from './operations.ts'

export { GATEWAY_OPERATIONS }

export interface GatewayDeps extends ServiceAppDeps {
  payments: Payments
  mailer: Mailer
  db: Db
  media: {
    client: MediaClient
    /** Set when the media role runs in this process: its hosted audio is served here too. */
    hostedBlobs?: BlobStore | undefined
  }
  /** Unset in tests of other operations: the review operations then answer 501. */
  reviews?: { service: ReviewService; assets: ReviewerAssets; origins: ReviewOrigins } | undefined
  /**
   * The role apps of this process that the MCP endpoint's tool calls go into (filled by the caller
   * as it builds them; this app adds itself); roles not in it are reached over HTTP at catalog.urls.
   */
  localApps?: LocalApps | undefined
}

export function buildGatewayApp(deps: GatewayDeps): FastifyInstance {
  const meterPrice = (slug: string) => deps.catalog.registry.services.find((service) => service.slug === slug)?.meter?.unitPriceMicros ?? 0n
  const handlers: Partial<Record<(typeof GATEWAY_OPERATIONS)[number], OperationHandler>> = {
    ...guideHandlers(deps.catalog),
    ...gatewayHandlers({ catalog: deps.catalog, payments: deps.payments, mailer: deps.mailer }),
    ...mediaHandlers({ db: deps.db, media: deps.media.client, prices: { song: meterPrice('songmodel-3-pro'), speech: meterPrice('speechmodel-3.1-flash-tts') } }),
  }
  if (deps.reviews) {
    Object.assign(
      handlers,
      reviewHandlers({
        service: deps.reviews.service,
        payments: deps.payments,
        gatewayUrl: deps.catalog.urls.gateway,
        plans: deps.catalog.registry.services.find((service) => service.slug === 'reviews-create')?.plans ?? [],
      }),
    )
  }
  // Checked before the access rule, so nobody meets a 402 for work that would be refused after
  // payment: the rules a body's schema cannot state (400 naming the field), and the media tools
  // (503 with the command that installs them).
  const client = deps.media.client
  const ready = async (kind: 'song' | 'speech') => {
    const missing = await client.unavailable?.(kind)
    if (missing) throw new AppError('media_unavailable', `${kind === 'song' ? 'Songs' : 'Speech'} cannot be made on this server right now: ${missing}. Nothing was charged.`)
  }
  const prechecks: Record<string, (body: unknown) => Promise<void>> = {
    generateSongs: async (body) => {
      checkSongRequest(body as SongShape)
      await ready('song')
    },
    synthesizeSpeech: () => ready('speech'),
  }
  const wrap: AccessWrapper = (entry, handler) => {
    // Its plan debit is written with the session it pays for (src/reviews/app.ts).
    if (entry.spec.operationId === 'createReviewSession') return handler
    const paid = deps.payments.access.wrap(entry, handler)
    const precheck = prechecks[entry.spec.operationId]
    if (precheck === undefined) return paid
    return async (request, reply) => {
      await precheck(request.body)
      return paid(request, reply)
    }
  }
  const app = createServiceApp('gateway', deps, handlers, wrap)
  if (deps.media.hostedBlobs) registerAudioHosting(app, { blobs: deps.media.hostedBlobs })
  if (deps.reviews) registerReviewerPages(app, deps.reviews)
  registerDevRoutes(app, { payments: deps.payments, mailer: deps.mailer })
  const localApps = deps.localApps ?? new Map()
  localApps.set('gateway', app)
  registerMcpRoute(app, {
    catalog: deps.catalog,
    dispatcher: createOperationDispatcher({ local: localApps, urls: deps.catalog.urls }),
    bodyLimitBytes: deps.bodyLimitBytes,
    logger: deps.logger,
  })
  return app
}
