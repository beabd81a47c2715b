// The {scheduler_url} application. Its operations are registered in the catalog; handlers
// arrive with the scheduler issue, until then they answer 501 and the catalog says so.
import type { FastifyInstance } from 'fastify'
import { createServiceApp, type ServiceAppDeps } from '../catalog/service-app.ts'
import type { Payments } from '../payments/index.ts'

export const SCHEDULER_OPERATIONS: readonly string[] = []

export function buildSchedulerApp(deps: ServiceAppDeps & { payments: Payments }): FastifyInstance {
  // Paid operations (create/fund, remember/deposit) sit behind the same payment guard as the gateway's.
  return createServiceApp('scheduler', deps, {}, deps.payments.access.wrap)
}
