// The HTTP under every Kubernetes client of the controller (client-node 2.0.1). Connections are
// reused (shareConnections: client-node would open one per request), and the custom resource
// calls go straight to that connection pool (directHttpLibrary) instead of through fetch.
// Measured: bench/k8s-reconcile.bench.ts, docs/BENCHMARKS.md; test/unit/kube-connections.test.ts
// compares the direct path with fetch's.
import {
  CustomObjectsApi,
  IsomorphicFetchHttpLibrary,
  ResponseContext,
  wrapHttpLibrary,
  type Configuration,
  type HttpLibrary,
  type KubeConfig,
  type RequestContext,
} from '@kubernetes/client-node'
import { isRecord } from './json.ts'

const SHARED = Symbol.for('agent-gateway.kubeconfig.shared-dispatcher')

/**
 * client-node 2.0.1 builds a NEW undici Agent for every request whenever the cluster has TLS
 * options (a CA, client certs, or skipTLSVerify: i.e. always in a cluster), so no connection is
 * ever reused: a TCP (+TLS) handshake per call. This memoizes the dispatcher per cluster and TLS
 * material on the given KubeConfig (idempotent; a rotated certificate gets a new one, the old one
 * is closed gracefully). Measured: bench/k8s-reconcile.bench.ts, docs/BENCHMARKS.md.
 */
export function shareConnections(kubeConfig: KubeConfig): KubeConfig {
  const target = kubeConfig as unknown as Record<string | symbol, unknown> & { createDispatcher: (cluster: unknown, agentOptions: Record<string, unknown>) => unknown }
  if (target[SHARED] === true || typeof target.createDispatcher !== 'function') return kubeConfig
  const original = target.createDispatcher.bind(kubeConfig)
  // Called on every request with a fresh agentOptions (the CA, cert and key read again as new
  // Buffers): matched by content, the Buffers compared bytewise (no serializing or hashing them).
  const cache: { cluster: string; options: Record<string, unknown>; dispatcher: unknown }[] = []
  target.createDispatcher = (cluster, agentOptions) => {
    const clusterKey = JSON.stringify(cluster) ?? ''
    const hit = cache.find((entry) => entry.cluster === clusterKey && sameAgentOptions(entry.options, agentOptions))
    if (hit !== undefined) return hit.dispatcher
    const dispatcher = original(cluster, agentOptions)
    cache.push({ cluster: clusterKey, options: { ...agentOptions }, dispatcher })
    if (cache.length > 4) {
      const old = cache.shift()?.dispatcher as { close?: () => Promise<void> } | undefined
      void old?.close?.().catch(() => {})
    }
    return dispatcher
  }
  target[SHARED] = true
  return kubeConfig
}

function sameOptionValue(a: unknown, b: unknown): boolean {
  if (a === b) return true
  if (Buffer.isBuffer(a) || Buffer.isBuffer(b)) return Buffer.isBuffer(a) && Buffer.isBuffer(b) && a.equals(b)
  if (Array.isArray(a) || Array.isArray(b)) return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((item, i) => sameOptionValue(item, b[i]))
  return isRecord(a) && isRecord(b) && sameAgentOptions(a, b)
}

/** The same TLS material and settings (keys with undefined values count as absent). */
function sameAgentOptions(a: Record<string, unknown>, b: Record<string, unknown>): boolean {
  for (const key of new Set([...Object.keys(a), ...Object.keys(b)])) if (!sameOptionValue(a[key], b[key])) return false
  return true
}

/** What directHttpLibrary needs of an undici Dispatcher (client-node's own undici, whatever its version). */
interface RequestDispatcher {
  request(options: {
    origin: string
    path: string
    method: string
    headers: Record<string, string>
    body?: string
    signal?: AbortSignal
  }): Promise<{ statusCode: number; headers: Record<string, string | string[] | undefined>; body: { text(): Promise<string>; arrayBuffer(): Promise<ArrayBuffer> } }>
}

function isRequestDispatcher(value: unknown): value is RequestDispatcher {
  return typeof value === 'object' && value !== null && typeof (value as { request?: unknown }).request === 'function'
}

const fetchLibrary = new IsomorphicFetchHttpLibrary()

/**
 * client-node's generated APIs send every call through undici's fetch (WHATWG Request, Headers
 * and streams around each call; a string body is written as a stream). This library hands the
 * call to the same undici dispatcher (the one shareConnections keeps: same connections, TLS,
 * timeouts) through its plain request(): same method, URL, headers (the API's Accept and
 * Content-Type, auth, User-Agent), body and signal; the response's status, headers (lowercase,
 * repeated values joined by ", " as fetch joins them) and body. What fetch would add and we
 * leave out: it asks for gzip (the API server then compresses lists over 128 KiB) and follows
 * redirects (the resource endpoints never redirect). Calls without such a dispatcher (a cluster
 * without TLS options) or with a non-string body go through fetch as before. Measured:
 * bench/k8s-reconcile.bench.ts, docs/BENCHMARKS.md.
 */
export const directHttpLibrary: HttpLibrary = (() => {
  const direct = wrapHttpLibrary({
    async send(request: RequestContext): Promise<ResponseContext> {
      const dispatcher = request.getDispatcher() as unknown as RequestDispatcher
      const url = new URL(request.getUrl())
      const body = request.getBody() as string | undefined
      const signal = request.getSignal()
      const response = await dispatcher.request({
        origin: url.origin,
        path: `${url.pathname}${url.search}`,
        method: request.getHttpMethod(),
        headers: request.getHeaders(),
        ...(body === undefined ? {} : { body }),
        ...(signal === undefined ? {} : { signal: signal as AbortSignal }),
      })
      const headers: Record<string, string> = {}
      for (const [name, value] of Object.entries(response.headers)) if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(', ') : value
      const stream = response.body
      return new ResponseContext(response.statusCode, headers, {
        text: () => stream.text(),
        binary: async () => Buffer.from(await stream.arrayBuffer()),
        stream: () => null,
      })
    },
  })
  return {
    send(request) {
      const body = request.getBody()
      const straight = isRequestDispatcher(request.getDispatcher()) && (body === undefined || typeof body === 'string')
      return straight ? direct.send(request) : fetchLibrary.send(request)
    },
  }
})()

/** client-node's CustomObjectsApi for `kubeConfig` (auth, server, User-Agent as makeApiClient sets them) over directHttpLibrary. */
export function makeCustomObjectsApi(kubeConfig: KubeConfig): CustomObjectsApi {
  return shareConnections(kubeConfig).makeApiClient(
    class extends CustomObjectsApi {
      constructor(configuration: Configuration) {
        super({ ...configuration, httpApi: directHttpLibrary })
      }
    },
  )
}
