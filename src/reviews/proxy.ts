// The live-page proxy of the isolated origin. A url site's origin maps 1:1 onto the live page's
// origin (`<site>/<path>?<q>` is `<target origin>/<path>?<q>`); other origins' resources are reached
// at `/__agent_gateway__/x/<scheme>/<host[:port]>/<path>?<q>`. Every upstream request goes through
// guardedFetch (the egress address rule after resolution, connection pinned, no redirects
// followed), so each request and each redirect hop is checked on its own: redirects are handed to
// the browser as redirects to the mapped path, which it then asks us for.
//
// HTML gets the overlay's head tags and its URLs mapped onto the site origin (html-rewrite.ts); CSS
// gets its url()/@import mapped; everything else (JavaScript included) passes as is. What a script
// fetches from other origins is blocked by the site CSP's connect-src 'self': a known limitation.
import { brotliDecompressSync, gunzipSync, inflateSync, zstdDecompressSync } from 'node:zlib'
import { EgressRefused, guardedFetch, type EgressPolicy } from '../platform/egress.ts'
import { decodeBody, encodeBody, htmlContentType, rewriteCss, rewriteHtml, type UrlMapper } from './html-rewrite.ts'
import { PROXY_MAX_RESPONSE_BYTES, PROXY_TIMEOUT_MS } from './limits.ts'
import { SITE_RESERVED_PREFIX } from './types.ts'

export const PROXY_USER_AGENT = 'Mozilla/5.0 (compatible; AgentGatewayReview/1)'
/** Path prefix of other origins' resources on a site origin. */
export const CROSS_ORIGIN_PREFIX = `${SITE_RESERVED_PREFIX}x/`

/** Upstream headers passed on; everything else (X-Frame-Options, CSP, Set-Cookie, HSTS, Link, CORS, …) is dropped. */
const KEPT_RESPONSE_HEADERS = ['content-type', 'etag', 'last-modified', 'content-language', 'content-range', 'accept-ranges', 'content-disposition'] as const
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308])
const AUTHORITY = /^(?:[a-z0-9-._~%!$&'()*+,;=]+|\[[0-9a-f:.]+\])(?::\d{1,5})?$/i

export interface ProxyRequest {
  method: 'GET' | 'HEAD'
  /** The request target as received: path and query, starting with `/`. */
  url: string
  headers: Record<string, string | string[] | undefined>
}

export type ProxyAnswer =
  | { kind: 'response'; status: number; headers: Record<string, string>; body: Buffer | null }
  /** The page could not be shown: answer the explanation page with the screenshot instead. */
  | { kind: 'fallback'; status: number; reason: string }
  /** A sub-resource could not be fetched (refused, timed out, failed): a problem for the browser. */
  | { kind: 'failed'; status: number; refused: boolean; reason: string }

export interface SiteProxyOptions {
  egress: EgressPolicy
  /** The overlay's head tags, put first in every proxied HTML page. */
  headTags: string
  timeoutMs?: number
  maxResponseBytes?: number
}

export interface SiteProxy {
  /** Answers `request` on the site origin of the live page `siteUrl`. */
  handle(siteUrl: string, request: ProxyRequest): Promise<ProxyAnswer>
}

/** The site-origin path of an absolute http(s) URL: root-relative on the target's origin, else the x/ form. */
export function sitePathOf(targetOrigin: string, url: URL): string {
  const tail = `${url.pathname}${url.search}${url.hash}`
  // The target's own paths under our prefix cannot be served as themselves, and one starting with
  // `//` would read as another host: both take the x/ form.
  if (url.origin === targetOrigin && !url.pathname.startsWith(SITE_RESERVED_PREFIX) && !url.pathname.startsWith('//')) return tail
  return `${CROSS_ORIGIN_PREFIX}${url.protocol.slice(0, -1)}/${url.host}${tail}`
}

/**
 * The live URL a site-origin request target stands for, or undefined when it is not one (not
 * origin-form, or an x/ path that does not name an http(s) scheme and a plain authority).
 */
export function upstreamUrlOf(targetOrigin: string, requestTarget: string): URL | undefined {
  if (!requestTarget.startsWith('/')) return undefined
  let candidate: string
  if (requestTarget.startsWith(CROSS_ORIGIN_PREFIX)) {
    const match = /^(https?)\/([^/?#]+)(.*)$/i.exec(requestTarget.slice(CROSS_ORIGIN_PREFIX.length))
    if (!match || !AUTHORITY.test(match[2]!)) return undefined
    const rest = match[3]!
    candidate = `${match[1]!.toLowerCase()}://${match[2]}${rest.startsWith('/') ? rest : `/${rest}`}`
  } else {
    // Concatenated, never resolved: `//evil.example/` stays a path on the target.
    candidate = `${targetOrigin}${requestTarget}`
  }
  let url: URL
  try {
    url = new URL(candidate)
  } catch {
    return undefined
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.username !== '' || url.password !== '' || url.hostname === '') return undefined
  url.hash = ''
  return url
}

/** Maps URLs found in a document at `documentUrl` onto the site origin of `targetOrigin`. */
export function siteUrlMapper(targetOrigin: string, documentUrl: URL): UrlMapper {
  return (raw, base) => {
    const value = raw.trim()
    if (value === '' || value.startsWith('#')) return null
    const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(value)?.[1]?.toLowerCase()
    if (scheme !== undefined && scheme !== 'http' && scheme !== 'https') return null // javascript:, data:, blob:, mailto:, …
    let resolved: URL
    try {
      resolved = new URL(value, base === undefined || base === '' ? documentUrl : new URL(base, documentUrl))
    } catch {
      return null
    }
    if (resolved.protocol !== 'http:' && resolved.protocol !== 'https:') return null
    return sitePathOf(targetOrigin, resolved)
  }
}

function headerOf(headers: ProxyRequest['headers'], name: string): string | undefined {
  const value = headers[name]
  return Array.isArray(value) ? value.join(', ') : value
}

function essence(contentType: string | null): string {
  return (contentType ?? '').split(';')[0]!.trim().toLowerCase()
}

/** Whether a request is the frame's navigation (a failure then gets the explanation page, not a problem). */
function isNavigation(request: ProxyRequest): boolean {
  const dest = headerOf(request.headers, 'sec-fetch-dest')
  if (dest !== undefined) return dest === 'document' || dest === 'iframe' || dest === 'frame'
  return /\btext\/html\b/i.test(headerOf(request.headers, 'accept') ?? '')
}

function decompress(body: Buffer, encoding: string, maxBytes: number): Buffer {
  const options = { maxOutputLength: maxBytes }
  switch (encoding) {
    case '':
    case 'identity':
      return body
    case 'gzip':
    case 'x-gzip':
      return gunzipSync(body, options)
    case 'deflate':
      return inflateSync(body, options)
    case 'br':
      return brotliDecompressSync(body, options)
    case 'zstd':
      return zstdDecompressSync(body, options)
    default:
      throw new Error(`the page answered with an unsupported content-encoding ${JSON.stringify(encoding)}`)
  }
}

function errorText(err: unknown): string {
  const error = err as Error & { cause?: Error }
  if (error?.name === 'TimeoutError' || error?.name === 'AbortError') return 'the page did not answer in time'
  return (error?.message ?? String(err)).split('\n')[0]!
}

export function createSiteProxy(options: SiteProxyOptions): SiteProxy {
  const timeoutMs = options.timeoutMs ?? PROXY_TIMEOUT_MS
  const maxBytes = options.maxResponseBytes ?? PROXY_MAX_RESPONSE_BYTES
  const fetchUpstream = guardedFetch(options.egress, { timeoutMs, maxResponseBytes: maxBytes })

  return {
    async handle(siteUrl, request) {
      const entry = new URL(siteUrl)
      entry.hash = ''
      const targetOrigin = entry.origin
      const upstream = upstreamUrlOf(targetOrigin, request.url)
      if (upstream === undefined) return { kind: 'failed', status: 404, refused: false, reason: 'this path names no page' }
      const isEntry = upstream.href === entry.href
      const navigation = isEntry || isNavigation(request)

      const headers: Record<string, string> = {
        'user-agent': PROXY_USER_AGENT,
        accept: (headerOf(request.headers, 'accept') ?? '*/*').slice(0, 1000),
        'accept-encoding': 'identity',
      }
      const language = headerOf(request.headers, 'accept-language')
      if (language !== undefined) headers['accept-language'] = language.slice(0, 200)
      const range = headerOf(request.headers, 'range')
      if (range !== undefined && /^bytes=\d*-\d*$/.test(range.trim())) headers.range = range.trim()

      let response: Response
      try {
        response = await fetchUpstream(upstream.href, { method: request.method, headers, signal: AbortSignal.timeout(timeoutMs) })
      } catch (err) {
        const refused = err instanceof EgressRefused
        const reason = refused ? `the address is not reachable from here (${err.message})` : errorText(err)
        if (navigation) return { kind: 'fallback', status: 502, reason }
        return { kind: 'failed', status: refused ? 403 : 502, refused, reason }
      }

      if (REDIRECT_STATUSES.has(response.status)) {
        const location = response.headers.get('location')
        let next: URL | undefined
        try {
          next = location === null ? undefined : new URL(location, upstream)
        } catch {
          next = undefined
        }
        if (next === undefined || (next.protocol !== 'http:' && next.protocol !== 'https:')) {
          const reason = 'the page redirected to an address that is not an http(s) URL'
          return navigation ? { kind: 'fallback', status: 502, reason } : { kind: 'failed', status: 502, refused: false, reason }
        }
        // The browser asks us for the mapped path next, and that request is checked like any other.
        return { kind: 'response', status: 302, headers: { location: sitePathOf(targetOrigin, next) }, body: null }
      }

      const type = essence(response.headers.get('content-type'))
      if (isEntry && (response.status >= 500 || (response.status < 300 && request.method === 'GET' && type !== 'text/html'))) {
        const reason = response.status >= 500 ? `the page answered ${response.status}` : `the page is not HTML (${type || 'no content type'})`
        return { kind: 'fallback', status: 502, reason }
      }

      const out: Record<string, string> = {}
      for (const name of KEPT_RESPONSE_HEADERS) {
        const value = response.headers.get(name)
        if (value !== null) out[name] = value
      }
      out['content-type'] ??= 'application/octet-stream'
      if (request.method === 'HEAD' || response.status === 204 || response.status === 304) {
        return { kind: 'response', status: response.status, headers: out, body: null }
      }

      let body: Buffer
      try {
        body = decompress(Buffer.from(await response.arrayBuffer()), (response.headers.get('content-encoding') ?? '').trim().toLowerCase(), maxBytes)
      } catch (err) {
        const reason = errorText(err)
        return navigation ? { kind: 'fallback', status: 502, reason } : { kind: 'failed', status: 502, refused: false, reason }
      }
      // A part of a file is passed as it is: rewriting needs the whole of it.
      if (response.status !== 206 && (type === 'text/html' || type === 'text/css')) {
        const mapUrl = siteUrlMapper(targetOrigin, upstream)
        const { text, encoding } = decodeBody(body)
        const rewritten = type === 'text/html' ? await rewriteHtml(text, mapUrl, options.headTags) : rewriteCss(text, mapUrl)
        body = encodeBody(rewritten, encoding)
        if (type === 'text/html') out['content-type'] = htmlContentType(out['content-type'], encoding)
        // Not the upstream's bytes any more, but they change together: a weak validator.
        if (out.etag !== undefined && !out.etag.startsWith('W/')) out.etag = `W/${out.etag}`
      }
      return { kind: 'response', status: response.status, headers: out, body }
    },
  }
}
