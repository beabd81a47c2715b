// A forward proxy that holds its clients to the egress rule (egress.ts): plain forward-proxy HTTP
// (absolute-form requests) and CONNECT tunnels, every host resolved and checked here after
// resolution, and the connection made to exactly the address that was checked, so DNS rebinding
// cannot slip a private address in. Its clients have no other way out: a sandboxed task run
// (controllers/local/sandbox.ts, over a unix socket bind-mounted into the sandbox) and the
// Chromium of a page-shot (page-shots.ts, on a loopback port).
//
// Two narrow exceptions, both set by the service, never by the client:
// - `allow`: exact "host:port" pairs exempt from the address rule (the operator's package
//   index / registry mirror), revocable with `revokeAllow()` once the install phase is over;
// - `helper`: absolute-form requests for one virtual host (default `agw-helper.internal`) are
//   forwarded to the service's per-run helper endpoint.

import { chmod, chown } from 'node:fs/promises'
import http from 'node:http'
import https from 'node:https'
import net from 'node:net'
import type { Duplex } from 'node:stream'
import { EgressRefused, type EgressPolicy, egressPolicy, resolveTarget } from './egress.ts'

export interface EgressLogEntry {
  at: number
  kind: 'connect' | 'http'
  host: string
  port: number
  /** The resolved address the proxy connected to (or refused). */
  address?: string
  decision: 'allowed' | 'refused' | 'helper' | 'bad_request'
  reason?: string
  /** HTTP status the proxy answered with when it did not tunnel (403, 400, 502, 504). */
  status?: number
}

export interface EgressProxyOptions {
  /** Exact `host:port` pairs exempt from the address rule (EgressOptions.allow). */
  allow?: readonly string[]
  /** Requests for `http://<host>/…` are forwarded to `target` (the per-run helper endpoint). */
  helper?: { host?: string; target: string }
  /** Addresses refused although public (EgressOptions.denyAddresses; default this host's own). */
  denyAddresses?: readonly string[]
  /** Resolver; defaults to the system's (`dns.lookup`, so /etc/hosts counts). */
  lookup?: (host: string) => Promise<Array<{ address: string; family: number }>>
  connectTimeoutMs?: number
  onLog?: (entry: EgressLogEntry) => void
  clock?: () => number
}

export const HELPER_HOST = 'agw-helper.internal'

// ---------------------------------------------------------------------------------------------
// Proxy

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authorization', 'proxy-authenticate', 'te', 'trailer', 'transfer-encoding', 'upgrade'])

function forwardHeaders(raw: string[]): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {}
  const connectionListed = new Set<string>()
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() === 'connection') {
      for (const n of raw[i + 1]!.split(',')) connectionListed.add(n.trim().toLowerCase())
    }
  }
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!
    const lower = name.toLowerCase()
    if (HOP_BY_HOP.has(lower) || connectionListed.has(lower)) continue
    const prev = out[name]
    out[name] = prev === undefined ? raw[i + 1]! : [...(Array.isArray(prev) ? prev : [prev]), raw[i + 1]!]
  }
  return out
}

/** `host:port` (IPv6 in brackets) → parts, or null. */
function splitHostPort(authority: string): { host: string; port: number } | null {
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(authority) ?? /^([^:]+):(\d+)$/.exec(authority)
  if (!m) return null
  const port = Number(m[2])
  if (!Number.isInteger(port) || port < 1 || port > 65535) return null
  return { host: m[1]!.toLowerCase(), port }
}

type Verdict = { ok: true; address: string; family: number } | { ok: false; status: number; reason: string; address?: string }

export class EgressProxy {
  readonly server: http.Server
  private policy: EgressPolicy
  private readonly helper: { host: string; target: URL } | undefined
  private readonly connectTimeoutMs: number
  private readonly onLog: ((e: EgressLogEntry) => void) | undefined
  private readonly clock: () => number
  /** Parses HTTP inside CONNECT tunnels to the helper host; never listens itself. */
  private readonly helperServer: http.Server
  private readonly sockets = new Set<Duplex>()
  readonly log: EgressLogEntry[] = []

  constructor(options: EgressProxyOptions = {}) {
    this.policy = egressPolicy({
      ...(options.allow ? { allow: options.allow } : {}),
      ...(options.lookup ? { lookup: options.lookup } : {}),
      ...(options.denyAddresses ? { denyAddresses: options.denyAddresses } : {}),
    })
    this.helper = options.helper ? { host: (options.helper.host ?? HELPER_HOST).toLowerCase(), target: new URL(options.helper.target) } : undefined
    this.connectTimeoutMs = options.connectTimeoutMs ?? 10_000
    this.onLog = options.onLog
    this.clock = options.clock ?? Date.now
    this.server = http.createServer({ requestTimeout: 0, headersTimeout: 30_000 })
    this.server.on('connection', (s: net.Socket) => this.track(s))
    this.server.on('request', (req, res) => void this.onRequest(req, res))
    this.server.on('connect', (req, socket, head) => void this.onConnect(req, socket, head))
    this.helperServer = http.createServer((req, res) => this.onHelperRequest(req, res, req.url ?? '/'))
  }

  /** Drop the `allow` exceptions (called when the dependency install phase ends). */
  revokeAllow(): void {
    this.policy = { ...this.policy, allow: new Set() }
  }

  /** Listen on a unix socket path (owned by `owner` when given, mode 0600) or a TCP port. */
  async listen(where: string | number, owner?: { uid: number; gid: number }): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject)
      const done = () => {
        this.server.off('error', reject)
        resolve()
      }
      if (typeof where === 'string') this.server.listen(where, done)
      else this.server.listen(where, '127.0.0.1', done)
    })
    if (typeof where === 'string') {
      if (owner) await chown(where, owner.uid, owner.gid)
      await chmod(where, 0o600)
    }
  }

  address(): net.AddressInfo | string | null {
    return this.server.address()
  }

  /** Stop listening and cut every open connection and tunnel. */
  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy()
    this.sockets.clear()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }

  private track<T extends Duplex>(s: T): T {
    this.sockets.add(s)
    s.once('close', () => this.sockets.delete(s))
    return s
  }

  private record(entry: Omit<EgressLogEntry, 'at'>): void {
    const e = { at: this.clock(), ...entry }
    if (this.log.length < 1000) this.log.push(e)
    this.onLog?.(e)
  }

  /** The egress rule for host:port: the address to connect to, or why not (502 unresolvable, 403 refused). */
  async check(host: string, port: number): Promise<Verdict> {
    try {
      const target = await resolveTarget(this.policy, host, port)
      return { ok: true, address: target.address, family: target.family }
    } catch (err) {
      if (!(err instanceof EgressRefused)) throw err
      return { ok: false, status: err.unresolved ? 502 : 403, reason: err.message, ...(err.address === undefined ? {} : { address: err.address }) }
    }
  }

  private async onConnect(req: http.IncomingMessage, client: Duplex, head: Buffer): Promise<void> {
    this.track(client)
    client.on('error', () => client.destroy())
    const target = splitHostPort(req.url ?? '')
    const deny = (status: number, text: string, reason: string) => {
      client.end(`HTTP/1.1 ${status} ${text}\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nagent-gateway egress proxy: ${reason}\n`)
    }
    if (!target) {
      this.record({ kind: 'connect', host: req.url ?? '', port: 0, decision: 'bad_request', status: 400 })
      return deny(400, 'Bad Request', 'CONNECT needs host:port')
    }
    if (this.helper && target.host === this.helper.host) {
      // A tunnel to the helper host carries plain HTTP: parse it here and map the paths.
      this.record({ kind: 'connect', ...target, decision: 'helper' })
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n')
      if (head.length) client.unshift(head)
      this.helperServer.emit('connection', client)
      return
    }
    const v = await this.check(target.host, target.port)
    if (!v.ok) {
      this.record({ kind: 'connect', ...target, address: v.address, decision: 'refused', reason: v.reason, status: v.status })
      return deny(v.status, v.status === 403 ? 'Forbidden' : 'Bad Gateway', v.reason)
    }
    const upstream = this.track(net.connect({ host: v.address, port: target.port }))
    const timer = setTimeout(() => upstream.destroy(new Error('connect timeout')), this.connectTimeoutMs)
    upstream.once('connect', () => {
      clearTimeout(timer)
      this.record({ kind: 'connect', ...target, address: v.address, decision: 'allowed' })
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n')
      if (head.length) upstream.write(head)
      upstream.pipe(client)
      client.pipe(upstream)
    })
    upstream.once('error', (err) => {
      clearTimeout(timer)
      if (upstream.bytesRead === 0 && upstream.bytesWritten === 0 && !client.destroyed) {
        const timeout = err.message === 'connect timeout'
        this.record({ kind: 'connect', ...target, address: v.address, decision: 'allowed', reason: err.message, status: timeout ? 504 : 502 })
        deny(timeout ? 504 : 502, timeout ? 'Gateway Timeout' : 'Bad Gateway', `cannot reach ${target.host}:${target.port} (${v.address}): ${err.message}`)
      } else client.destroy()
    })
    client.once('close', () => upstream.destroy())
  }

  /** Absolute-form requests (plain HTTP proxying; https:// URLs too, for clients such as axios). */
  private async onRequest(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let url: URL
    try {
      url = new URL(req.url ?? '')
      if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('scheme')
    } catch {
      this.record({ kind: 'http', host: '', port: 0, decision: 'bad_request', status: 400 })
      return fail(res, 400, 'this is a forward proxy: send absolute-form http:// or https:// requests, or CONNECT')
    }
    const host = url.hostname.toLowerCase().replace(/^\[|\]$/g, '')
    const port = Number(url.port) || (url.protocol === 'https:' ? 443 : 80)
    if (this.helper && host === this.helper.host) return this.onHelperRequest(req, res, url.pathname + url.search)
    const v = await this.check(host, port)
    if (!v.ok) {
      this.record({ kind: 'http', host, port, address: v.address, decision: 'refused', reason: v.reason, status: v.status })
      req.resume()
      return fail(res, v.status, v.reason)
    }
    this.record({ kind: 'http', host, port, address: v.address, decision: 'allowed' })
    forward(req, res, url, v.address, false, this.connectTimeoutMs)
  }

  /** A helper call (origin-form path such as /generate_text) → the service's helper endpoint. */
  private onHelperRequest(req: http.IncomingMessage, res: http.ServerResponse, pathAndQuery: string): void {
    const base = this.helper!.target
    const target = new URL(base.href.replace(/\/$/, '') + (pathAndQuery.startsWith('/') ? pathAndQuery : `/${pathAndQuery}`))
    this.record({ kind: 'http', host: this.helper!.host, port: 80, decision: 'helper' })
    forward(req, res, target, target.hostname.replace(/^\[|\]$/g, ''), true, this.connectTimeoutMs)
  }
}

function fail(res: http.ServerResponse, status: number, reason: string): void {
  if (!res.headersSent) res.writeHead(status, { 'content-type': 'text/plain', connection: 'close' })
  res.end(`agent-gateway egress proxy: ${reason}\n`)
}

/** Relays one request to `target`, connecting to the already-checked `address`. */
function forward(req: http.IncomingMessage, res: http.ServerResponse, target: URL, address: string, rewriteHost: boolean, timeoutMs: number): void {
  const headers = forwardHeaders(req.rawHeaders)
  if (rewriteHost) {
    for (const k of Object.keys(headers)) if (k.toLowerCase() === 'host') delete headers[k]
    headers.host = target.host
  }
  const tls = target.protocol === 'https:'
  const upstream = (tls ? https : http).request({
    host: address,
    port: Number(target.port) || (tls ? 443 : 80),
    method: req.method,
    path: target.pathname + target.search,
    headers,
    setHost: false,
    ...(tls && !net.isIP(target.hostname) ? { servername: target.hostname } : {}),
    agent: false,
    timeout: timeoutMs,
  })
  upstream.on('timeout', () => upstream.destroy(new Error('timeout')))
  upstream.on('response', (up) => {
    res.writeHead(up.statusCode ?? 502, up.statusMessage, forwardHeaders(up.rawHeaders))
    up.pipe(res)
  })
  upstream.on('error', (err) => {
    if (res.headersSent) res.destroy()
    else fail(res, 502, `cannot reach ${target.host} (${address}): ${err.message}`)
  })
  res.on('close', () => upstream.destroy())
  req.pipe(upstream)
}

export function createEgressProxy(options: EgressProxyOptions = {}): EgressProxy {
  return new EgressProxy(options)
}
