// Which Host and Origin a listener answers: the guard against DNS rebinding and cross-site writes.
//
// A page on a domain its owner controls can re-point that domain at 127.0.0.1, and the visitor's
// browser then talks to our loopback listeners as if they were the page's own origin (the dev
// faucet, plan purchases, owner endpoints, /mcp). What gives it away is the Host header: the
// browser sends the page's domain. So a listener refuses a Host that is none of ours:
//
// - admitted: the hosts of every URL the configuration names (public and internal ones), the
//   loopback names (`localhost`, `*.localhost`: browsers resolve those themselves), IP literals (a
//   rebinding page cannot make the browser send one: it names a domain), and ALLOWED_HOSTS
//   entries (exact, or `*.suffix`), for proxies that rewrite Host;
// - on a state-changing method, a browser's Origin must be the request's own host (a same-origin
//   page), a configured URL's origin, or an ALLOWED_HOSTS host; a cross-site form or fetch is refused.
//
// The guard is on when the listeners bind to loopback (the machine a browser runs on) or when
// ALLOWED_HOSTS is set; `ALLOWED_HOSTS=*` turns it off. In a cluster the pods bind 0.0.0.0 behind
// an Ingress, whose callers (probes by pod IP, Services by name) the operator lists if wanted.
// The review sites' listener is not guarded here: it answers only its own {site} hosts anyway.
import net from 'node:net'
import { normalizeHost } from './addresses.ts'

export interface HostRefusal {
  code: 'host_not_allowed' | 'origin_not_allowed'
  detail: string
}

export interface HostPolicy {
  /** undefined: admitted; otherwise why not. */
  check(host: string | undefined, origin: string | undefined, method: string): HostRefusal | undefined
}

export interface HostPolicyOptions {
  /** The interface the listeners bind to (HOST). */
  bindHost: string
  /** Every URL the configuration names for this deployment: their hosts and origins are ours. */
  urls: readonly (string | undefined)[]
  /** ALLOWED_HOSTS: exact names or `*.suffix`; `['*']` turns the guard off. undefined = not set. */
  allowedHosts: readonly string[] | undefined
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])

/** The host name of a Host header value (`name:port`, `[v6]:port`), as DNS sees it. */
function hostName(value: string): string {
  const trimmed = value.trim()
  if (trimmed.startsWith('[')) {
    const end = trimmed.indexOf(']')
    return end < 0 ? trimmed.toLowerCase() : normalizeHost(trimmed.slice(0, end + 1))
  }
  const colon = trimmed.lastIndexOf(':')
  return normalizeHost(colon < 0 ? trimmed : trimmed.slice(0, colon))
}

function isLoopbackBind(host: string): boolean {
  const name = normalizeHost(host)
  return name === 'localhost' || name === '::1' || (net.isIPv4(name) && name.startsWith('127.'))
}

/** The policy of one deployment, or undefined when the guard is off. */
export function createHostPolicy(options: HostPolicyOptions): HostPolicy | undefined {
  const listed = (options.allowedHosts ?? []).map((entry) => entry.trim().toLowerCase()).filter(Boolean)
  if (listed.includes('*')) return undefined
  if (!isLoopbackBind(options.bindHost) && options.allowedHosts === undefined) return undefined
  const exact = new Set<string>()
  const suffixes: string[] = []
  const origins = new Set<string>()
  const listedExact = new Set<string>()
  const listedSuffixes: string[] = []
  for (const entry of listed) {
    if (entry.startsWith('*.')) listedSuffixes.push(entry.slice(1))
    else listedExact.add(hostName(entry))
  }
  const listedHost = (name: string) => listedExact.has(name) || listedSuffixes.some((suffix) => name.endsWith(suffix) && name.length > suffix.length)
  for (const name of listedExact) exact.add(name)
  suffixes.push(...listedSuffixes)
  for (const raw of options.urls) {
    if (!raw) continue
    let parsed: URL
    try {
      parsed = new URL(raw)
    } catch {
      continue
    }
    exact.add(normalizeHost(parsed.hostname))
    origins.add(parsed.origin)
  }
  const admitted = (name: string): boolean =>
    name === 'localhost' ||
    name.endsWith('.localhost') ||
    net.isIP(name) !== 0 ||
    exact.has(name) ||
    suffixes.some((suffix) => name.endsWith(suffix) && name.length > suffix.length)

  return {
    check(host, origin, method) {
      // HTTP/1.0 requests may carry no Host; a browser always sends one.
      if (host !== undefined && !admitted(hostName(host))) {
        return { code: 'host_not_allowed', detail: `This server does not answer for the host ${JSON.stringify(host.slice(0, 100))}; set ALLOWED_HOSTS if a proxy rewrites Host` }
      }
      if (origin === undefined || SAFE_METHODS.has(method)) return undefined
      if (origins.has(origin)) return undefined
      let parsed: URL | undefined
      try {
        parsed = origin === 'null' ? undefined : new URL(origin)
      } catch {
        parsed = undefined
      }
      // A same-origin page (its origin is the host it asks), or a host of ours.
      if (parsed !== undefined && host !== undefined && parsed.host.toLowerCase() === host.trim().toLowerCase()) return undefined
      if (parsed !== undefined && listedHost(normalizeHost(parsed.hostname))) return undefined
      return { code: 'origin_not_allowed', detail: `Requests that change state are not accepted from pages of ${JSON.stringify(origin.slice(0, 100))}` }
    },
  }
}
