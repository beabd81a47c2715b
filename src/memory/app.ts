// The memory service application (remember / recall / expand / deposits). Handlers arrive with
// the memory issue; until then its registered operations answer 501 and the catalog says so.
import type { FastifyInstance } from 'fastify'
import { createServiceApp, type ServiceAppDeps } from '../catalog/service-app.ts'
import type { Payments } from '../payments/index.ts'

export const MEMORY_OPERATIONS: readonly string[] = []

export function buildMemoryApp(deps: ServiceAppDeps & { payments: Payments }): FastifyInstance {
  // Paid operations (create/fund, remember/deposit) sit behind the same payment guard as the gateway's.
  return createServiceApp('memory', deps, {}, deps.payments.access.wrap)
}
