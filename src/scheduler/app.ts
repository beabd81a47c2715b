// The {scheduler_url} application. Its free discovery operations are answered here; the task,
// run, ledger and account operations are registered in the catalog and answer 402/501 until the
// scheduler's routes are built on its domain (src/scheduler/domain) and controller.
import type { FastifyInstance } from 'fastify'
import { createServiceApp, type ServiceAppDeps } from '../catalog/service-app.ts'
import type { OperationHandler } from '../catalog/routes.ts'
import type { Payments } from '../payments/index.ts'
import { DEFAULT_RATES, ratesView, siblingsView } from './domain/rates.ts'

export const SCHEDULER_OPERATIONS = ['getSchedulerIndex', 'getSchedulerRates', 'listSiblings'] as const

export function buildSchedulerApp(deps: ServiceAppDeps & { payments: Payments }): FastifyInstance {
  const base = deps.catalog.urls.scheduler
  const index = {
    service: 'scheduler',
    version: '1.0.0',
    runtimes: ['python 3.12', 'node 22'],
    links: { openapi: `${base}/openapi.json`, llms: `${base}/llms.txt`, rates: `${base}/api/v1/rates`, siblings: `${base}/api/v1/_siblings` },
    operations: deps.catalog.operationsOn('scheduler').map((entry) => ({
      method: entry.spec.method,
      path: entry.spec.path,
      summary: entry.spec.summary,
      proof: entry.spec.proof,
    })),
  }
  const rates = ratesView(DEFAULT_RATES)
  const siblings = siblingsView(DEFAULT_RATES)
  const handlers: Record<(typeof SCHEDULER_OPERATIONS)[number], OperationHandler> = {
    getSchedulerIndex: async () => index,
    getSchedulerRates: async () => rates,
    listSiblings: async () => siblings,
  }
  // Paid operations (create/fund) sit behind the same payment guard as the gateway's.
  return createServiceApp('scheduler', deps, handlers, deps.payments.access.wrap)
}
