// The {scheduler_url} application. Its operations are registered in the catalog; handlers
// arrive with the scheduler issue, until then they answer 501 and the catalog says so.
import type { FastifyInstance } from 'fastify'
import { createServiceApp, type ServiceAppDeps } from '../catalog/service-app.ts'

export const SCHEDULER_OPERATIONS: readonly string[] = []

export function buildSchedulerApp(deps: ServiceAppDeps): FastifyInstance {
  return createServiceApp('scheduler', deps, {})
}
