// The executor-health port of the scheduler API: operations that sell or start runs answer 503
// while the executor cannot run task scripts (the local executor's prerequisites are missing:
// controllers/local/prerequisites.ts), before any access rule, so no one is asked to pay (no 402)
// for a task that could never run. The Kubernetes executor has no such port: its runner images
// carry everything.
import type { AccessWrapper } from '../catalog/routes.ts'
import { AppError } from '../platform/errors.ts'

export type ExecutorHealthStatus = { ok: true } | { ok: false; reason: string; fix?: string }

export interface ExecutorHealth {
  /** Synchronous and cheap (a cached verdict); called on every request of EXECUTOR_OPERATIONS. */
  check(): ExecutorHealthStatus
}

/** Operations that take money for runs or start one: create, fund, run now, trigger, webhook. */
export const EXECUTOR_OPERATIONS: ReadonlySet<string> = new Set(['createTask', 'fundTask', 'runTaskNow', 'triggerTask', 'runTaskWebhook'])

/** The 503 of an operation refused because the executor is unavailable. */
export function executorUnavailable(status: { reason: string }): AppError {
  return new AppError(
    'unavailable',
    `This scheduler cannot run task scripts right now (${status.reason}), so it takes no task, top-up or run; nothing was charged. Try again later, or use another scheduler.`,
    // Also what a replica answers while its first check has no verdict yet: retried, it goes on.
    { headers: { 'retry-after': '10' }, extensions: { reason: 'executor_unavailable', retryable: true } },
  )
}

/**
 * Wraps an access wrapper so that EXECUTOR_OPERATIONS first ask `health` (outermost: before the
 * idempotency lookup, the payment precheck, the 402 challenge and any owner proof). Without a
 * port (Kubernetes executor, tests) `wrap` is returned as is.
 */
export function requireExecutor(wrap: AccessWrapper, health: ExecutorHealth | undefined): AccessWrapper {
  if (!health) return wrap
  return (entry, handler) => {
    const inner = wrap(entry, handler)
    if (!EXECUTOR_OPERATIONS.has(entry.spec.operationId)) return inner
    return async function executorAvailable(request, reply) {
      const status = health.check()
      if (!status.ok) throw executorUnavailable(status)
      return inner(request, reply)
    }
  }
}
