// The declarative service registry: every operation of SPEC.md with its route, TypeBox schemas,
// access mode, proof, pricing and meter. Routes, /openapi.json, /manifest.json, /services,
// llms.txt, the advisor and the payment guard's prices are all derived from this one table.
// Each service's spec lives in its own module under ./registry/; this module assembles them, in
// the order every derived document lists them, and answers the lookups.
import type { OperationSpec, PlanSpec, Registry, ServiceSpec } from './types.ts'
import { advisor, auth, plans } from './registry/gateway.ts'
import { songs, speech } from './registry/media.ts'
import { memory } from './registry/memory.ts'
import { reviews } from './registry/reviews.ts'
import { scheduler } from './registry/scheduler.ts'

const services = [reviews, songs, speech, advisor, plans, auth, scheduler, memory]

export const registry: Registry = { services }

/** Every operation of the registry with its declared type (literal operationId, its schemas), which `Registry` erases. */
export type RegisteredOperation = (typeof services)[number]['operations'][number]

// ------------------------------------------------------------------ lookups

const byOperationId = new Map<string, { operation: OperationSpec; service: ServiceSpec }>()
for (const service of registry.services) {
  for (const operation of service.operations) {
    if (byOperationId.has(operation.operationId)) throw new Error(`duplicate operationId ${operation.operationId}`)
    byOperationId.set(operation.operationId, { operation, service })
  }
}

export function allOperations(): OperationSpec[] {
  return registry.services.flatMap((service) => service.operations)
}

export function findOperation(operationId: string): OperationSpec | undefined {
  return byOperationId.get(operationId)?.operation
}

export function serviceOf(operationId: string): ServiceSpec | undefined {
  return byOperationId.get(operationId)?.service
}

export function findService(slug: string): ServiceSpec | undefined {
  return registry.services.find((service) => service.slug === slug)
}

export function findPlan(planId: string): PlanSpec | undefined {
  for (const service of registry.services) {
    const plan = service.plans.find((candidate) => candidate.id === planId)
    if (plan) return plan
  }
  return undefined
}
