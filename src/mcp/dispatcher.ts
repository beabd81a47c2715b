// The port a tool call goes through to reach its operation: an HTTP request to the operation's
// route, answered by the SAME fastify app (and so the same access rule, guard, ledger and crash
// safety) the HTTP API uses. In process: `inject` into the role's app; a role this process does not
// run (the Helm chart runs each role as its own Deployment): a real HTTP request to its URL.
import type { FastifyInstance } from 'fastify'
import type { ServerName } from '../catalog/types.ts'

export interface DispatchRequest {
  server: ServerName
  method: string
  /** Path and query, e.g. `/api/v1/tasks/t_1?cursor=x`. */
  url: string
  headers: Record<string, string>
  /** The JSON body, already serialized (content-type is set by the caller). */
  body?: string | undefined
}

export interface DispatchResponse {
  status: number
  /** Lower-case names; a repeated header by its first value. */
  headers: Record<string, string>
  body: string
}

export interface OperationDispatcher {
  dispatch(request: DispatchRequest): Promise<DispatchResponse>
}

/**
 * The role apps of this process, filled as the composition root builds them (the gateway's MCP
 * endpoint is built before the scheduler's and the memory service's apps exist).
 */
export type LocalApps = Map<ServerName, FastifyInstance>

function firstValues(headers: Record<string, string | string[] | number | undefined>): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue
    out[name.toLowerCase()] = Array.isArray(value) ? (value[0] ?? '') : String(value)
  }
  return out
}

/** Upper bound of a forwarded call (a song takes minutes); the caller's own timeout is usually shorter. */
const FORWARD_TIMEOUT_MS = 15 * 60_000

export interface DispatcherOptions {
  local: LocalApps
  /** Base URLs of every role (the catalog's), for the roles not in `local`. */
  urls: Record<ServerName, string>
  fetch?: typeof fetch
}

export function createOperationDispatcher(options: DispatcherOptions): OperationDispatcher {
  const doFetch = options.fetch ?? fetch
  return {
    async dispatch(request) {
      const app = options.local.get(request.server)
      if (app) {
        const response = await app.inject({
          method: request.method as 'GET',
          url: request.url,
          headers: request.headers,
          ...(request.body === undefined ? {} : { payload: request.body }),
        })
        return { status: response.statusCode, headers: firstValues(response.headers), body: response.payload }
      }
      const response = await doFetch(options.urls[request.server] + request.url, {
        method: request.method,
        headers: request.headers,
        ...(request.body === undefined ? {} : { body: request.body }),
        redirect: 'manual',
        signal: AbortSignal.timeout(FORWARD_TIMEOUT_MS),
      })
      const headers: Record<string, string> = {}
      response.headers.forEach((value, name) => {
        headers[name] ??= value
      })
      return { status: response.status, headers, body: await response.text() }
    },
  }
}
