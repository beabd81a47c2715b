// The topology drill's "Ingress": one node:http front per public service, spreading requests
// round-robin across that service's replicas. A replica that refuses the connection (killed,
// not listening yet) is skipped and the next one tried, as a load balancer drops an endpoint that
// fails its connect; when none accepts, the front answers 503 problem+json with Retry-After, as an
// Ingress without ready endpoints does. A replica that dies after it took the request resets the
// client's connection (the client sees the call cut off, as through a TCP-level proxy), and the
// front never retries a request a replica may have acted on.
import http from 'node:http'
import type { AddressInfo } from 'node:net'

export interface Backend {
  /** Label of the replica (e.g. gateway-1). */
  name: string
  port: number
  /** As an Endpoints entry: false while the replica is not ready (killed, starting); unset = ready. */
  ready?: boolean
}

export interface Route {
  /** Requests whose path starts with this prefix go to `backends` of this route (first match wins). */
  prefix: string
  backends: Backend[]
}

export interface Front {
  url: string
  port: number
  /** Requests proxied, refused connections skipped, requests answered 503 by the front itself, client connections reset. */
  stats: { proxied: number; skipped: number; unavailable: number; reset: number }
  close(): Promise<void>
}

const unavailableBody = (name: string) =>
  JSON.stringify({
    type: 'about:blank',
    title: 'Service unavailable',
    status: 503,
    detail: `no replica of ${name} accepted the connection (drill front)`,
    code: 'no_ready_replica',
  })

// A proxy's connections are its own: the replica's `Keep-Alive: timeout=72` passed through would
// have clients reuse a socket this front closed after 5 s idle (a request cut off at random).
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade'])

function endToEnd(raw: string[]): string[] {
  const kept: string[] = []
  for (let i = 0; i + 1 < raw.length; i += 2) if (!HOP_BY_HOP.has((raw[i] as string).toLowerCase())) kept.push(raw[i] as string, raw[i + 1] as string)
  return kept
}

function withoutHopByHop(headers: http.IncomingHttpHeaders): http.IncomingHttpHeaders {
  return Object.fromEntries(Object.entries(headers).filter(([name]) => !HOP_BY_HOP.has(name)))
}

/**
 * Starts a front on a free port of 127.0.0.1 (or `port`) over `routes`; the last route should have
 * prefix '/'. The backends are read at each request: flip their `ready` to take them in and out.
 */
export async function startFront(name: string, routes: Route[], port = 0): Promise<Front> {
  const cursors = new Map<Route, number>()
  const stats = { proxied: 0, skipped: 0, unavailable: 0, reset: 0 }
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('error', () => res.destroy())
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      const route = routes.find((candidate) => (req.url ?? '/').startsWith(candidate.prefix))
      // Only ready replicas get requests, as an Ingress routes to the ready endpoints of a Service.
      const ready = route?.backends.filter((backend) => backend.ready !== false) ?? []
      if (!route || ready.length === 0) return unavailable(res)
      const first = cursors.get(route) ?? 0
      cursors.set(route, first + 1)
      attempt(ready, first % ready.length, 0, req, res, body)
    })
  })
  const attempt = (backends: Backend[], first: number, tried: number, req: http.IncomingMessage, res: http.ServerResponse, body: Buffer) => {
    if (tried >= backends.length) return unavailable(res)
    const backend = backends[(first + tried) % backends.length] as Backend
    const headers = { ...withoutHopByHop(req.headers), 'x-forwarded-for': req.socket.remoteAddress ?? '127.0.0.1', 'x-forwarded-host': req.headers.host ?? '' }
    const upstream = http.request({ host: '127.0.0.1', port: backend.port, method: req.method, path: req.url, headers, agent: false })
    let connected = false
    upstream.on('socket', (socket) => socket.once('connect', () => (connected = true)))
    upstream.on('response', (answer) => {
      stats.proxied += 1
      res.writeHead(answer.statusCode ?? 502, endToEnd(answer.rawHeaders) as unknown as http.OutgoingHttpHeaders)
      answer.pipe(res)
      answer.on('error', () => {
        stats.reset += 1
        res.destroy()
      })
      answer.on('aborted', () => {
        stats.reset += 1
        res.destroy()
      })
    })
    upstream.on('error', (error: NodeJS.ErrnoException) => {
      if (!connected && (error.code === 'ECONNREFUSED' || error.code === 'ECONNRESET' || error.code === 'EPIPE') && !res.headersSent) {
        // Refused before the replica saw the request: the next replica takes it.
        stats.skipped += 1
        attempt(backends, first, tried + 1, req, res, body)
        return
      }
      stats.reset += 1
      res.destroy()
    })
    upstream.end(body)
  }
  const unavailable = (res: http.ServerResponse) => {
    stats.unavailable += 1
    res.writeHead(503, { 'content-type': 'application/problem+json', 'retry-after': '1' })
    res.end(unavailableBody(name))
  }
  server.keepAliveTimeout = 5_000
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, '127.0.0.1', () => resolve())
  })
  const bound = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${bound}`,
    port: bound,
    stats,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
