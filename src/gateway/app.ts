// The {base_url} application: discovery surface, registration and claims, plan purchase, the
// advisor, and the dev-only faucet and outbox of the embedded default.
import type { FastifyInstance } from 'fastify'
import { createServiceApp, type ServiceAppDeps } from '../catalog/service-app.ts'
import { guideHandlers, type OperationHandler } from '../catalog/routes.ts'
import type { Mailer } from '../platform/mailer.ts'
import type { Payments } from '../payments/index.ts'
import { gatewayHandlers, registerDevRoutes } from './handlers.ts'

/** Operations this role answers today; the rest of the gateway's registry answers 501. */
export const GATEWAY_OPERATIONS = ['getAgentGuide', 'postAgentGuide', 'postAgentQuote', 'registerAgent', 'startAgentClaim', 'verifyAgentClaim', 'purchasePlan'] as const

export interface GatewayDeps extends ServiceAppDeps {
  payments: Payments
  mailer: Mailer
}

export function buildGatewayApp(deps: GatewayDeps): FastifyInstance {
  const handlers: Record<(typeof GATEWAY_OPERATIONS)[number], OperationHandler> = {
    ...guideHandlers(deps.catalog),
    ...gatewayHandlers({ catalog: deps.catalog, payments: deps.payments, mailer: deps.mailer }),
  }
  const app = createServiceApp('gateway', deps, handlers, deps.payments.access.wrap)
  registerDevRoutes(app, { payments: deps.payments, mailer: deps.mailer })
  return app
}
