// The gateway side of review sessions: the three registry operations (create on plan credit, read
// with the creating agent's token, the reviewer page's one submission) and the reviewer page itself
// at shareUrl (`/reviews/{capability}`), its scripts, and the original zip of a bundle.
//
// Creating a session is sold on plans, but unlike other plan operations the debit is not taken
// around the handler: it is written in the transaction that writes the session (see service.ts),
// so a session and its charge exist together or not at all, and a retried request with the same
// Idempotency-Key is answered from the first without a second debit.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { CapabilityParams } from '../catalog/schemas/reviews.ts'
import type { Handlers } from '../catalog/routes.ts'
import { planOffer, registrationRecipe } from '../payments/access.ts'
import { accessTokenCredential, credentialsOf } from '../payments/credentials.ts'
import type { Payments } from '../payments/index.ts'
import type { PlanSpec } from '../catalog/types.ts'
import { AppError } from '../platform/errors.ts'
import type { ReviewService } from './service.ts'
import type { StaticAsset } from '../platform/html.ts'
import type { ReviewerAssets, ReviewOrigins } from './types.ts'

import { REVIEW_OPERATIONS } from './operations.ts'

export { REVIEW_OPERATIONS }

export interface ReviewAppDeps {
  service: ReviewService
  payments: Payments
  gatewayUrl: string
  plans: readonly PlanSpec[]
}

/** The operations' handlers; createReviewSession authenticates its bearer itself (see header). */
export function reviewHandlers(deps: ReviewAppDeps): Handlers<(typeof REVIEW_OPERATIONS)[number]> {
  const { service, payments } = deps
  return {
    createReviewSession: async (request, reply) => {
      const credentials = credentialsOf(request.headers)
      const bearer = accessTokenCredential(credentials)
      const agent = bearer?.valid ? await payments.agents.findByToken(bearer.token) : undefined
      if (agent === undefined) {
        throw new AppError(
          'bearer_required',
          bearer === undefined
            ? 'POST /api/v1/annotate/reviews is sold on plans: send Authorization: Bearer <accessToken>'
            : 'Authorization: Bearer carries no known access token; register at POST /auth/register',
          { extensions: { recipe: registrationRecipe(deps.gatewayUrl), plans: deps.plans.map((plan) => planOffer(plan, deps.gatewayUrl)) } },
        )
      }
      const { session, standing } = await service.create(agent.id, request.body, credentials.idempotencyKey)
      if (standing !== undefined) {
        reply.header('x-plan-id', standing.planId)
        if (standing.remainingMicros !== undefined) reply.header('x-plan-credit-remaining-micros', standing.remainingMicros.toString())
        if (standing.remainingCalls !== undefined) reply.header('x-plan-calls-remaining', String(standing.remainingCalls))
      } else {
        reply.header('idempotent-replayed', 'true')
      }
      return session
    },
    getReviewSession: async (request) => {
      const agent = request.payment?.agent
      if (!agent) throw new Error('getReviewSession reached without its bearer rule')
      return service.status(agent.id, request.params.reviewId)
    },
    submitReview: async (request) => service.submit(request.params.capability, request.body),
  }
}

/** The reviewer page's own headers: nothing of it leaks to the framed site, and nothing frames it. */
function reviewerPageHeaders(origins: ReviewOrigins): Record<string, string> {
  return {
    'content-security-policy': [
      "default-src 'none'",
      "script-src 'self'",
      "style-src 'self'",
      "img-src 'self' data: blob:",
      "connect-src 'self'",
      `frame-src ${origins.sitePattern}`,
      "base-uri 'none'",
      "form-action 'none'",
      "frame-ancestors 'none'",
    ].join('; '),
    'referrer-policy': 'no-referrer',
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'cross-origin-opener-policy': 'same-origin',
    'cache-control': 'private, no-store',
  }
}

function sendAsset(request: FastifyRequest, reply: FastifyReply, asset: StaticAsset): Buffer | FastifyReply {
  reply.header('content-type', asset.contentType).header('etag', asset.etag).header('cache-control', 'public, max-age=300').header('x-content-type-options', 'nosniff')
  if (request.headers['if-none-match'] === asset.etag) return reply.code(304).send()
  return asset.body
}

/** The reviewer page at shareUrl, its assets, and bundleUrl. */
export function registerReviewerPages(app: FastifyInstance, deps: { service: ReviewService; assets: ReviewerAssets; origins: ReviewOrigins }): void {
  const { service, assets } = deps
  const pageHeaders = reviewerPageHeaders(deps.origins)
  const missing = () => new AppError('review_not_found', 'No review session has this address; check the link you were given')
  const routes = app.withTypeProvider<TypeBoxTypeProvider>()

  routes.get(
    '/reviews/assets/:name',
    { schema: { params: Type.Object({ name: Type.String({ pattern: '^[a-z-]+\\.(js|css)$' }) }), response: { 200: Type.Any() } } },
    async (request, reply) => {
      const asset = assets.get(request.params.name)
      if (asset === undefined) throw new AppError('not_found', 'No such reviewer asset')
      return sendAsset(request, reply, asset)
    },
  )

  routes.get('/reviews/:capability', { schema: { params: CapabilityParams, response: { 200: Type.String() } } }, async (request, reply) => {
    const view = await service.page(request.params.capability)
    if (view === undefined) throw missing()
    reply.headers(pageHeaders).header('content-type', 'text/html; charset=utf-8')
    return assets.render(view)
  })

  routes.get('/reviews/:capability/bundle.zip', { schema: { params: CapabilityParams, response: { 200: Type.Any() } } }, async (request, reply) => {
    const bundle = await service.bundle(request.params.capability)
    if (bundle === undefined) throw missing()
    reply
      .header('content-type', 'application/zip')
      .header('content-disposition', `attachment; filename="review-${bundle.reviewId}.zip"`)
      .header('x-content-type-options', 'nosniff')
      .header('cache-control', 'private, no-store')
      .header('referrer-policy', 'no-referrer')
    return bundle.data
  })
}
