// The memory service application (remember / recall / expand / deposits). Handlers arrive with
// the memory issue; until then its registered operations answer 501 and the catalog says so.
import type { FastifyInstance } from 'fastify'
import { createServiceApp, type ServiceAppDeps } from '../catalog/service-app.ts'

export const MEMORY_OPERATIONS: readonly string[] = []

export function buildMemoryApp(deps: ServiceAppDeps): FastifyInstance {
  return createServiceApp('memory', deps, {})
}
