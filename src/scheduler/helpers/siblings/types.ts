// What a first-party sibling is: a handful of routes (method + path pattern) answering a task's
// call(name, path, body, method) with {status, body}. Errors are thrown as AppError and reach the
// task as problem+json with their status; call() charges the fee only for a status below 400.
import type { BlobStore } from '../../../platform/blobs.ts'
import type { Clock } from '../../../platform/clock.ts'
import type { Db } from '../../../platform/db/index.ts'
import { AppError } from '../../../platform/errors.ts'
import type { Logger } from '../../../platform/logger.ts'
import type { SchedulerRates } from '../../domain/rates.ts'
import type { EgressPolicy } from '../../../platform/egress.ts'

export interface ScreenshotConfig {
  /** Chromium binary; default env CHROMIUM_PATH, else /usr/bin/chromium. */
  chromiumPath?: string
  /** Navigation timeout (default 30 s). */
  timeoutMs?: number
  /** Chromium processes at once (default 2). */
  concurrency?: number
}

export interface SiblingContext {
  readonly db: Db
  readonly blobs: BlobStore
  readonly clock: Clock
  readonly logger: Logger
  readonly rates: SchedulerRates
  readonly publicSchedulerUrl: string
  readonly taskId: string
  readonly runId: string
  readonly egress: EgressPolicy
  /** `allow` list handed to the screenshot's egress proxy (same meaning as EgressPolicy.allow). */
  readonly egressAllow: readonly string[]
  readonly screenshot: ScreenshotConfig
  /** Domain of inbox addresses. */
  readonly inboxDomain: string
}

export interface SiblingRequest {
  readonly method: string
  /** Path without the query string, e.g. /forms/f_x/submissions. */
  readonly pathname: string
  readonly query: URLSearchParams
  readonly body: unknown
}

export interface SiblingResponse {
  readonly status: number
  readonly body: unknown
}

export interface SiblingRoute {
  readonly method: string
  /** Matched against the whole pathname; capture groups are passed as params. */
  readonly pattern: RegExp
  readonly handle: (ctx: SiblingContext, request: SiblingRequest, params: string[]) => Promise<SiblingResponse>
}

/** Runs the route of `routes` matching the request: 404 for an unknown path, 405 for a known path with another method. */
export async function dispatch(name: string, routes: readonly SiblingRoute[], ctx: SiblingContext, request: SiblingRequest): Promise<SiblingResponse> {
  let pathKnown = false
  for (const route of routes) {
    const match = route.pattern.exec(request.pathname)
    if (match === null) continue
    pathKnown = true
    if (route.method !== request.method) continue
    return route.handle(
      ctx,
      request,
      match.slice(1).map((p) => decodeURIComponent(p)),
    )
  }
  const listing = routes.map((r) => `${r.method} ${r.pattern.source.replace(/^\^|\$$/g, '').replaceAll('\\/', '/')}`).join(', ')
  if (pathKnown) throw new AppError('method_not_allowed', `${name} does not answer ${request.method} ${request.pathname}; it has ${listing}`)
  throw new AppError('route_not_found', `${name} has no route ${request.method} ${request.pathname}; it has ${listing}`)
}

/** Query integer in [min, max], default `fallback`; a bad value is a 400 naming query.<name>. */
export function queryInt(query: URLSearchParams, name: string, fallback: number, min: number, max: number): number {
  const raw = query.get(name)
  if (raw === null) return fallback
  const n = Number(raw)
  if (!/^[0-9]+$/.test(raw) || n < min || n > max) {
    throw new AppError('VALIDATION_ERROR', `query.${name} must be an integer from ${min} to ${max}`, { field: `query.${name}` })
  }
  return n
}
