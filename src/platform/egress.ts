// Outbound traffic to places a caller names (a task's marketplace capabilities and screenshot
// targets, an upstream's audio URL, review pages and callbacks, a sandboxed run's requests) follows
// one egress rule, defined here: the host is compared as DNS sees it (normalizeHost), resolved
// here, loopback / private / link-local (cloud metadata) / reserved addresses and this host's own
// addresses are refused after resolution, and the connection goes to exactly the address that was
// checked, so DNS rebinding cannot slip a private address in. Exact `host:port` pairs in `allow`
// are exempt (an operator's internal service or package index; tests reaching 127.0.0.1).
// guardedFetch applies it to our own requests, egress-proxy.ts to a sandbox's and a browser's.
import dns from 'node:dns/promises'
import http from 'node:http'
import https from 'node:https'
import net from 'node:net'
import os from 'node:os'
import { isPrivateAddress, normalizeHost } from './addresses.ts'

export interface EgressOptions {
  /** `host:port` pairs (as the URL names them) exempt from the address rule. */
  allow?: readonly string[]
  /** Resolver; default the system's (`dns.lookup`, all addresses). */
  lookup?: (host: string) => Promise<Array<{ address: string; family: number }>>
  /**
   * Addresses refused although public; default every address of this host's interfaces (a public
   * IP of the service host is still the service host).
   */
  denyAddresses?: readonly string[]
}

export interface EgressPolicy {
  readonly allow: ReadonlySet<string>
  readonly lookup: (host: string) => Promise<Array<{ address: string; family: number }>>
  readonly isPrivate: (ip: string) => boolean
}

/** Thrown when a target may not be reached; `message` says why (safe to show the task). */
export class EgressRefused extends Error {
  /** The host did not resolve (a lookup error or no address): maybe transient, unlike a refused address. */
  readonly unresolved: boolean
  /** The first address the host resolved to, when it was refused for its addresses. */
  readonly address: string | undefined

  constructor(message: string, details: { unresolved?: boolean; address?: string } = {}) {
    super(message)
    this.name = 'EgressRefused'
    this.unresolved = details.unresolved ?? false
    this.address = details.address
  }
}

function ownAddresses(): string[] {
  return Object.values(os.networkInterfaces()).flatMap((list) => (list ?? []).map((a) => a.address))
}

export function egressPolicy(options: EgressOptions = {}): EgressPolicy {
  // Zone ids (`fe80::1%eth0`) are not part of the address a lookup answers.
  const denied = new Set((options.denyAddresses ?? ownAddresses()).map((a) => a.toLowerCase().replace(/%.*$/, '')))
  return {
    allow: new Set((options.allow ?? []).map((a) => a.toLowerCase())),
    lookup: options.lookup ?? ((host) => dns.lookup(host, { all: true, verbatim: true })),
    isPrivate: (ip) => isPrivateAddress(ip) || denied.has(ip.toLowerCase()),
  }
}

/** `host:port` the way EgressProxy's allow list spells it (IPv6 in brackets). */
export function authority(host: string, port: number): string {
  return net.isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}`
}

/** The address to connect to for host:port, or EgressRefused. */
export async function resolveTarget(policy: EgressPolicy, host: string, port: number): Promise<{ address: string; family: number }> {
  // As DNS sees it: an IP literal with trailing dots is that literal (never handed to a resolver),
  // a name is looked up and matched against `allow` without them.
  const bare = normalizeHost(host)
  const exempt = policy.allow.has(authority(bare, port))
  let addresses: Array<{ address: string; family: number }>
  if (net.isIP(bare)) addresses = [{ address: bare, family: net.isIP(bare) }]
  else {
    try {
      addresses = await policy.lookup(bare)
    } catch (err) {
      throw new EgressRefused(`cannot resolve ${bare}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { unresolved: true })
    }
  }
  if (addresses.length === 0) throw new EgressRefused(`cannot resolve ${bare}`, { unresolved: true })
  const usable = exempt ? addresses : addresses.filter((a) => !policy.isPrivate(a.address))
  if (usable.length === 0) {
    throw new EgressRefused(
      `${bare} resolves to ${addresses.map((a) => a.address).join(', ')}: loopback, private, link-local and metadata addresses are not reachable, nor are this host's own addresses`,
      { address: addresses[0]!.address },
    )
  }
  return usable[0]!
}

export interface GuardedFetchOptions {
  /** Socket idle timeout (default 30 s). */
  timeoutMs?: number
  /** Larger responses are cut off with an error (default 16 MiB). */
  maxResponseBytes?: number
}

const NULL_BODY_STATUSES = new Set([101, 204, 205, 304])

function headerRecord(init: RequestInit['headers']): Record<string, string> {
  const out: Record<string, string> = {}
  new Headers(init).forEach((value, name) => {
    out[name] = value
  })
  return out
}

/**
 * A fetch for the targets a task names: http(s) only, address rule applied after resolution,
 * connection pinned to the checked address (TLS still verifies the host name), redirects not
 * followed. Supports a string/URL input with method, headers, a string/bytes body and a signal.
 */
export function guardedFetch(policy: EgressPolicy, options: GuardedFetchOptions = {}): typeof fetch {
  const timeoutMs = options.timeoutMs ?? 30_000
  const maxBytes = options.maxResponseBytes ?? 16 * 1024 * 1024
  const run = async (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    if (input instanceof Request) throw new TypeError('guardedFetch takes a URL and an init object, not a Request')
    const url = new URL(String(input))
    const secure = url.protocol === 'https:'
    if (!secure && url.protocol !== 'http:') throw new EgressRefused(`${url.protocol} URLs are not supported; use http or https`)
    const host = url.hostname.replace(/^\[|\]$/g, '')
    const port = Number(url.port) || (secure ? 443 : 80)
    const target = await resolveTarget(policy, host, port)
    const headers = { ...headerRecord(init.headers), host: url.host }
    const body = init.body
    if (body !== undefined && body !== null && typeof body !== 'string' && !(body instanceof Uint8Array)) {
      throw new TypeError('guardedFetch sends string or byte bodies only')
    }
    return new Promise<Response>((resolve, reject) => {
      const request = (secure ? https : http).request({
        host: target.address,
        family: target.family,
        port,
        method: init.method ?? 'GET',
        path: `${url.pathname}${url.search}`,
        headers,
        setHost: false,
        agent: false,
        timeout: timeoutMs,
        ...(secure && !net.isIP(host) ? { servername: host } : {}),
        ...(init.signal ? { signal: init.signal } : {}),
      })
      request.on('timeout', () => request.destroy(new Error(`${url.host} did not answer within ${timeoutMs} ms`)))
      request.on('error', reject)
      request.on('response', (res) => {
        const chunks: Buffer[] = []
        let size = 0
        res.on('data', (chunk: Buffer) => {
          size += chunk.length
          if (size > maxBytes) {
            res.destroy()
            reject(new Error(`${url.host} answered with more than ${maxBytes} bytes`))
            return
          }
          chunks.push(chunk)
        })
        res.on('error', reject)
        res.on('end', () => {
          const responseHeaders = new Headers()
          for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) responseHeaders.append(res.rawHeaders[i]!, res.rawHeaders[i + 1]!)
          const status = res.statusCode ?? 502
          try {
            resolve(new Response(NULL_BODY_STATUSES.has(status) ? null : Buffer.concat(chunks), { status, statusText: res.statusMessage ?? '', headers: responseHeaders }))
          } catch (err) {
            reject(err)
          }
        })
      })
      request.end(body ?? undefined)
    })
  }
  return run as typeof fetch
}
