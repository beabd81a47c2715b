// The HTTP under every Kubernetes client of the controller (client-node 2.0.1). Connections are
// reused (shareConnections: client-node would open one per request), and the custom resource
// calls and watches go straight to that connection pool (directHttpLibrary, DirectWatch) instead
// of through fetch.
// Measured: bench/k8s-reconcile.bench.ts, docs/BENCHMARKS.md; test/unit/kube-connections.test.ts
// compares the direct path with fetch's.
import { STATUS_CODES } from 'node:http'
import type { Readable } from 'node:stream'
import { StringDecoder } from 'node:string_decoder'
import {
  CustomObjectsApi,
  HttpMethod,
  IsomorphicFetchHttpLibrary,
  RequestContext,
  ResponseContext,
  Watch,
  wrapHttpLibrary,
  type Configuration,
  type HttpLibrary,
  type KubeConfig,
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

/** An event's type and object, as client-node's Watch hands them (the object is what the server sent). */
type WatchCallback<T> = (type: string, object: T) => void

/** Sees each line before it is decoded; true: the caller has dealt with it, it is not decoded (nor called back). */
export type WatchLineFilter = (line: string) => boolean

/**
 * client-node's Watch (same contract: `watch(path, query, callback, done)` resolves to the
 * AbortController of the request; `done` once, with null when the server closes the stream, the
 * error otherwise, a TimeoutError after `requestTimeoutMs` without a byte), over the same shared
 * dispatcher's plain request() instead of fetch: the watch stream read as a Node stream and split
 * into lines here, not through WHATWG streams, Readable.fromWeb and readline, which cost the
 * controller more CPU than decoding the events' JSON. `undecoded` sees each line first and may
 * take it without its decode (the echo of the watcher's own write). A cluster without such a
 * dispatcher (no TLS options) uses client-node's Watch, which decodes every line.
 */
export class DirectWatch {
  /** client-node's Watch's (a private constant there, so its fallback keeps its own 30 s). */
  requestTimeoutMs = 30_000
  readonly #config: KubeConfig
  readonly #fallback: Watch

  constructor(config: KubeConfig) {
    this.#config = config
    this.#fallback = new Watch(config)
  }

  async watch<T>(
    path: string,
    queryParams: Record<string, string | number | boolean | undefined>,
    callback: WatchCallback<T>,
    done: (err: unknown) => void,
    undecoded?: WatchLineFilter,
  ): Promise<AbortController> {
    const cluster = this.#config.getCurrentCluster()
    if (!cluster) throw new Error('No currently active cluster')
    const url = new URL(cluster.server + path)
    url.searchParams.set('watch', 'true')
    for (const [key, value] of Object.entries(queryParams)) if (value !== undefined) url.searchParams.set(key, String(value))
    const context = new RequestContext(url.toString(), HttpMethod.GET)
    await this.#config.applySecurityAuthentication(context)
    const dispatcher = context.getDispatcher()
    if (!isRequestDispatcher(dispatcher)) return this.#fallback.watch(path, queryParams, callback as Parameters<Watch['watch']>[2], done)
    const controller = new AbortController()
    let timedOut = false
    let finished = false
    const timer = setTimeout(() => {
      timedOut = true
      controller.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError'))
    }, this.requestTimeoutMs)
    timer.unref()
    const finish = (err: unknown): void => {
      if (finished) return
      finished = true
      clearTimeout(timer)
      controller.abort()
      done(err !== null && timedOut ? new DOMException('The operation was aborted due to timeout', 'TimeoutError') : err)
    }
    try {
      const response = await dispatcher.request({
        origin: url.origin,
        path: `${url.pathname}${url.search}`,
        method: 'GET',
        headers: { accept: '*/*', ...context.getHeaders() }, // fetch's Accept, as the shipped Watch sends
        signal: controller.signal,
      })
      if (response.statusCode !== 200) {
        await response.body.text().catch(() => '')
        const error = new Error(STATUS_CODES[response.statusCode] ?? 'Internal Server Error') as Error & { statusCode: number }
        error.statusCode = response.statusCode
        throw error
      }
      timer.refresh() // from here on an inactivity timeout
      const body = response.body as unknown as Readable
      const decoder = new StringDecoder('utf8')
      let partial = ''
      body.on('data', (chunk: Buffer) => {
        timer.refresh()
        const text = partial + decoder.write(chunk)
        let start = 0
        for (let end = text.indexOf('\n'); end >= 0; end = text.indexOf('\n', start)) {
          emitLine<T>(text.slice(start, end), callback, undecoded)
          start = end + 1
        }
        partial = text.slice(start)
      })
      body.on('end', () => {
        emitLine<T>(partial + decoder.end(), callback, undecoded)
        finish(null)
      })
      body.on('close', () => finish(null))
      body.on('error', finish)
    } catch (err) {
      finish(err)
    }
    return controller
  }
}

/**
 * One line of a watch stream: an event, handed on. A blank or unparsable line is skipped and a
 * callback's throw swallowed, as client-node's Watch does (the stores catch their own).
 */
function emitLine<T>(line: string, callback: WatchCallback<T>, undecoded: WatchLineFilter | undefined): void {
  if (line.trim() === '') return
  try {
    if (undecoded?.(line) === true) return
    const data = JSON.parse(line) as { type: string; object: T }
    callback(data.type, data.object)
  } catch {
    // as client-node
  }
}
