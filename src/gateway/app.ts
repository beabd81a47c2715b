// The {base_url} application: discovery surface plus the gateway's registry operations.
import type { FastifyInstance } from 'fastify'
import { createServiceApp, type ServiceAppDeps } from '../catalog/service-app.ts'
import { guideHandlers, type OperationHandler } from '../catalog/routes.ts'

/** Operations this role answers today; the rest of the gateway's registry answers 501. */
export const GATEWAY_OPERATIONS = ['getAgentGuide', 'postAgentGuide'] as const

export function buildGatewayApp(deps: ServiceAppDeps): FastifyInstance {
  const handlers: Record<(typeof GATEWAY_OPERATIONS)[number], OperationHandler> = guideHandlers(deps.catalog)
  return createServiceApp('gateway', deps, handlers)
}
