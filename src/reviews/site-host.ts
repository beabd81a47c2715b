// The isolated origin of review sites (REVIEWS_PORT): `<label>.<PUBLIC_REVIEWS_URL's host>` serves
// the site of that label, a zip bundle from the blob store or a live page through the proxy, with
// the overlay's head tags first in every HTML page and its files at /__agent_gateway__/<name>.
//
// The content is untrusted, so every response carries: nosniff and the stored (never sniffed)
// content type; a CSP that keeps the page on its own origin (no connections, forms or plugins
// elsewhere) and lets only the reviewer page frame it; no referrer; same-origin CORP; no powerful
// features; never a cookie. Only GET and HEAD are answered (405), and a service worker script
// request is refused (403) so a site cannot outlive its review in the browser.
import { createHash } from 'node:crypto'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import { parseRange } from '../media/hosting.ts'
import { isBlobKey, type BlobStore } from '../platform/blobs.ts'
import type { EgressPolicy } from '../platform/egress.ts'
import { AppError } from '../platform/errors.ts'
import { escapeHtml } from '../platform/html.ts'
import { schemaController, sendProblem, toAppError } from '../platform/http.ts'
import type { Logger } from '../platform/logger.ts'
import type { PageShots } from '../platform/page-shots.ts'
import { decodeBody, encodeBody, htmlContentType, injectHeadTags } from './html-rewrite.ts'
import { createSiteProxy, type ProxyAnswer } from './proxy.ts'
import { type HostedSite, type ReviewOrigins, SITE_RESERVED_PREFIX, type SiteAssets, type SiteDirectory, type SiteFile } from './types.ts'

export interface SiteHostDeps {
  directory: SiteDirectory
  blobs: BlobStore
  origins: ReviewOrigins
  assets: SiteAssets
  egress: EgressPolicy
  screenshots: PageShots
  logger: Logger
  /** Sites kept in memory (they never change but expire, which is checked per request); default 1000. */
  siteCacheSize?: number
  /** Milliseconds since the epoch, for expiry (default Date.now). */
  nowMs?: () => number
  /** Live-page proxy bounds; default PROXY_TIMEOUT_MS and PROXY_MAX_RESPONSE_BYTES. */
  proxy?: { timeoutMs?: number; maxResponseBytes?: number }
}

const CSP_SOURCES =
  "default-src 'self' data: blob:; script-src 'self' 'unsafe-inline' 'unsafe-eval' data: blob:; style-src 'self' 'unsafe-inline' data: blob:; " +
  "img-src 'self' data: blob:; font-src 'self' data:; media-src 'self' data: blob:; connect-src 'self'; frame-src 'self'; worker-src 'self' blob:; " +
  "object-src 'none'; base-uri 'self'; form-action 'none'"

/** The Content-Security-Policy of everything a site origin serves. */
export function siteCsp(reviewerOrigin: string): string {
  return `${CSP_SOURCES}; frame-ancestors ${reviewerOrigin}`
}

export const PERMISSIONS_POLICY = 'camera=(), microphone=(), geolocation=(), payment=(), usb=()'
const CACHE_FILES = 'private, max-age=300'
const CACHE_NONE = 'private, no-store'
const SNAPSHOT_SIZE = { width: 1280, height: 800, fullPage: true }

/** Where a live page's screenshot is kept (rendered once per review). */
export function snapshotKey(reviewId: string): string {
  return `reviews/${reviewId}/snapshot.png`
}

function essence(contentType: string): string {
  return contentType.split(';')[0]!.trim().toLowerCase()
}

/** A page of ours on the site origin (the overlay's tags first, so the reviewer can pin on it too). */
function ownPage(tags: string, title: string, body: string): string {
  return (
    `<!doctype html><html><head>${tags}<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">` +
    `<title>${escapeHtml(title)}</title><style>html,body{margin:0;background:#fff;font:15px/1.5 system-ui,sans-serif;color:#222}` +
    '.agw-note{padding:12px 16px;background:#fff4e5;border-bottom:1px solid #f0c36d}.agw-shot{display:block;width:100%;height:auto}' +
    `.agw-missing{padding:48px 16px;text-align:center}</style></head><body>${body}</body></html>`
  )
}

const SNAPSHOT_IMG = (url: string) => `<img class="agw-shot" src="${SITE_RESERVED_PREFIX}snapshot.png" alt="Screenshot of ${escapeHtml(url)}">`

/** A least-recently-used map of bounded size. */
class Lru<K, V> {
  readonly #max: number
  readonly #map = new Map<K, V>()
  constructor(max: number) {
    this.#max = max
  }
  get(key: K): V | undefined {
    const value = this.#map.get(key)
    if (value !== undefined) {
      this.#map.delete(key)
      this.#map.set(key, value)
    }
    return value
  }
  set(key: K, value: V): void {
    this.#map.delete(key)
    this.#map.set(key, value)
    if (this.#map.size > this.#max) this.#map.delete(this.#map.keys().next().value as K)
  }
}

/** If-None-Match against a strong ETag (weak comparison, RFC 9110 §13.1.2). */
function noneMatch(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false
  return header.split(',').some((candidate) => {
    const tag = candidate.trim()
    return tag === '*' || tag === etag || tag === `W/${etag}`
  })
}

export function buildSiteHostApp(deps: SiteHostDeps): FastifyInstance {
  const { directory, blobs, origins, assets, screenshots } = deps
  const csp = siteCsp(origins.reviewer)
  const tags = assets.headTags
  // HTML is served with the tags in it, so its ETag names both the file and the tags.
  const tagsHash = createHash('sha256').update(tags).digest('hex').slice(0, 16)
  const sites = new Lru<string, HostedSite>(deps.siteCacheSize ?? 1000)
  const siteOfRequest = new WeakMap<FastifyRequest, HostedSite>()
  const rendering = new Map<string, Promise<Buffer>>()
  const proxy = createSiteProxy({ egress: deps.egress, headTags: tags, ...deps.proxy })

  /** The headers of every response (see the header comment). */
  const secure = (reply: FastifyReply): void => {
    reply.removeHeader('set-cookie')
    reply.header('x-content-type-options', 'nosniff')
    reply.header('content-security-policy', csp)
    reply.header('referrer-policy', 'no-referrer')
    // Documents too: the reviewer page frames them without COEP, so CORP does not apply to the frame.
    reply.header('cross-origin-resource-policy', 'same-origin')
    reply.header('permissions-policy', PERMISSIONS_POLICY)
    reply.header('origin-agent-cluster', '?1') // no document.domain games between sites
    reply.header('x-dns-prefetch-control', 'off')
    if (!reply.hasHeader('cache-control')) reply.header('cache-control', CACHE_NONE)
  }

  const app = Fastify({
    loggerInstance: deps.logger.child({ listener: 'reviews' }) as FastifyBaseLogger,
    // Per-request lines are left to the gateway listener; this one logs only what fails.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: 1024,
    // Every request goes to the one route: the request target is read as sent (request.originalUrl),
    // so the router never decodes or refuses a path; a live page's odd URLs reach it unchanged.
    rewriteUrl: () => '/',
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    schemaController,
    frameworkErrors: (error, _request, reply) => {
      secure(reply)
      sendProblem(reply, toAppError(error).toProblem())
    },
  })

  // The runtime marks every listener draining before closing them; this one has no readiness
  // endpoint (the probes are the gateway listener's), and close() answers 503 while it drains.
  app.decorate('markDraining', () => {})

  app.setErrorHandler((error: unknown, request: FastifyRequest, reply: FastifyReply) => {
    const appError = toAppError(error)
    if (appError.status >= 500) request.log.warn({ err: error, url: request.originalUrl }, 'review site request failed')
    return sendProblem(reply, appError.toProblem(), appError.headers)
  })
  app.setNotFoundHandler(() => {
    throw new AppError('not_found', 'Nothing here')
  })

  app.addHook('onRequest', async (request) => {
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      throw new AppError('method_not_allowed', 'Review sites answer GET and HEAD only', { headers: { allow: 'GET, HEAD' } })
    }
    if (request.headers['service-worker'] !== undefined) {
      throw new AppError('validation_error', 'Review sites may not install service workers', { status: 403 })
    }
    const label = origins.labelOfHost(request.headers.host)
    if (label === undefined) throw new AppError('not_found', 'This host is not a review site')
    let site = sites.get(label)
    if (site === undefined) {
      site = await directory.siteByLabel(label)
      if (site === undefined) throw new AppError('not_found', 'No review site at this address')
      sites.set(label, site)
    }
    // Checked on every request, cached or not: a site stops being served the instant it expires.
    if (site.expiresAt !== undefined && (deps.nowMs ?? Date.now)() >= site.expiresAt) {
      throw new AppError('review_expired', 'This review session has expired; its site was deleted')
    }
    siteOfRequest.set(request, site)
  })

  app.addHook('onSend', async (_request, reply, payload) => {
    secure(reply)
    return payload
  })

  /** Answers an HTML page of ours. */
  const sendPage = (reply: FastifyReply, status: number, html: string): FastifyReply =>
    reply.code(status).header('content-type', 'text/html; charset=utf-8').header('cache-control', CACHE_NONE).send(html)

  const serveAsset = (request: FastifyRequest, reply: FastifyReply, name: string): FastifyReply => {
    const asset = assets.get(name)
    if (asset === undefined) throw new AppError('not_found', 'No such file of the review overlay')
    reply.header('etag', asset.etag).header('cache-control', CACHE_FILES)
    if (noneMatch(request.headers['if-none-match'], asset.etag)) return reply.code(304).send()
    return reply.code(200).header('content-type', asset.contentType).send(asset.body)
  }

  const snapshotPng = (site: Extract<HostedSite, { kind: 'url' }>): Promise<Buffer> => {
    const pending = rendering.get(site.reviewId)
    if (pending !== undefined) return pending
    const key = snapshotKey(site.reviewId)
    const cacheable = isBlobKey(key)
    const run = (async () => {
      const stored = cacheable ? await blobs.get(key) : undefined
      if (stored !== undefined) return stored.data
      if (!(await screenshots.available())) throw new AppError('unavailable', 'Screenshots are not available on this server (no Chromium)')
      let png: Buffer
      try {
        png = await screenshots.capture(site.url, SNAPSHOT_SIZE)
      } catch (err) {
        throw new AppError('unavailable', `The page could not be rendered: ${(err as Error).message.split('\n')[0]}`, { status: 502, cause: err })
      }
      if (cacheable) await blobs.put(key, png, 'image/png')
      return png
    })()
    rendering.set(site.reviewId, run)
    // Failures are not kept: the next request tries again.
    run.then(
      () => rendering.delete(site.reviewId),
      () => rendering.delete(site.reviewId),
    )
    return run
  }

  const sendProxyAnswer = (reply: FastifyReply, site: Extract<HostedSite, { kind: 'url' }>, answer: ProxyAnswer): FastifyReply => {
    if (answer.kind === 'fallback') {
      const body =
        `<div class="agw-note" role="status"><strong>The live page could not be loaded:</strong> ${escapeHtml(answer.reason)}. ` +
        `Below is a screenshot of <code>${escapeHtml(site.url)}</code>; you can still pin comments on it.</div>${SNAPSHOT_IMG(site.url)}`
      return sendPage(reply, answer.status, ownPage(tags, 'Live page unavailable', body))
    }
    if (answer.kind === 'failed') {
      throw answer.refused
        ? new AppError('url_not_allowed', `Not fetched: ${answer.reason}`, { status: answer.status })
        : new AppError(answer.status === 404 ? 'not_found' : 'unavailable', `Not fetched: ${answer.reason}`, { status: answer.status })
    }
    reply.code(answer.status).headers(answer.headers).header('cache-control', CACHE_NONE)
    return reply.send(answer.body ?? undefined)
  }

  const serveFile = async (request: FastifyRequest, reply: FastifyReply, site: Extract<HostedSite, { kind: 'zip' }>, rawPath: string, query: string) => {
    let path: string
    try {
      path = decodeURIComponent(rawPath)
    } catch {
      return notFoundPage(reply, site)
    }
    if (hasControlCharacter(path) || path.includes('\\')) return notFoundPage(reply, site)
    path = path.normalize('NFC').slice(1)
    if (path === '' && !site.files.has('index.html'))
      return reply
        .code(302)
        .header('location', `/${encodePath(site.entryFile)}`)
        .send()
    if (path === '' || path.endsWith('/')) path += 'index.html'
    const file = site.files.get(path)
    if (file === undefined) {
      // A folder named without its slash: redirect so its page's relative URLs resolve inside it.
      if (site.files.has(`${path}/index.html`))
        return reply
          .code(302)
          .header('location', `/${encodePath(path)}/${query}`)
          .send()
      return notFoundPage(reply, site)
    }
    return sendFile(request, reply, file, 200)
  }

  const notFoundPage = async (reply: FastifyReply, site: Extract<HostedSite, { kind: 'zip' }>) => {
    const custom = site.files.get('404.html')
    if (custom !== undefined) return sendFile(undefined, reply, custom, 404)
    return sendPage(reply, 404, ownPage(tags, 'Not found', '<p class="agw-missing">This page is not part of the uploaded site.</p>'))
  }

  /** A bundle file: HTML with the tags injected, anything else as stored (single ranges honoured). */
  const sendFile = async (request: FastifyRequest | undefined, reply: FastifyReply, file: SiteFile, status: number) => {
    const html = essence(file.contentType) === 'text/html'
    const etag = html ? `"${file.sha256}-${tagsHash}"` : `"${file.sha256}"`
    reply.header('cache-control', CACHE_FILES).header('etag', etag)
    if (status === 200 && noneMatch(request?.headers['if-none-match'], etag)) return reply.code(304).send()
    const disposition = essence(file.contentType) === 'application/octet-stream' ? 'attachment' : 'inline'
    reply.header('content-disposition', disposition)
    if (html) {
      const blob = await blobs.get(file.blobKey)
      if (blob === undefined) throw new AppError('not_found', 'The file is missing from storage')
      const { text, encoding } = decodeBody(blob.data)
      const body = encodeBody(await injectHeadTags(text, tags), encoding)
      return reply.code(status).header('content-type', htmlContentType(file.contentType, encoding)).send(body)
    }
    reply.header('content-type', file.contentType).header('accept-ranges', 'bytes')
    if (request?.method === 'HEAD') return reply.code(status).header('content-length', String(file.bytes)).send()
    const ifRange = headerText(request?.headers['if-range'])
    const range = status === 200 && (ifRange === undefined || ifRange.trim() === etag) ? parseRange(headerText(request?.headers.range), file.bytes) : undefined
    if (range === 'unsatisfiable') {
      throw new AppError('range_not_satisfiable', `The range is outside the file (${file.bytes} bytes)`, { headers: { 'content-range': `bytes */${file.bytes}` } })
    }
    if (range !== undefined) {
      const part = blobs.getRange ? await blobs.getRange(file.blobKey, range.start, range.end) : await blobs.get(file.blobKey)
      if (part === undefined) throw new AppError('not_found', 'The file is missing from storage')
      const data = 'start' in part ? part.data : part.data.subarray(range.start, range.end + 1)
      return reply
        .code(206)
        .header('content-range', `bytes ${range.start}-${range.start + data.length - 1}/${file.bytes}`)
        .send(data)
    }
    const blob = await blobs.get(file.blobKey)
    if (blob === undefined) throw new AppError('not_found', 'The file is missing from storage')
    return reply.code(status).send(blob.data)
  }

  app.route({
    method: ['GET', 'HEAD'],
    url: '/',
    handler: async (request, reply) => {
      const site = siteOfRequest.get(request)
      if (site === undefined) throw new AppError('not_found', 'No review site at this address')
      const target = request.originalUrl
      // Only origin-form request targets name a path here (an absolute-form one would name a host).
      if (!target.startsWith('/')) throw new AppError('not_found', 'Not a path of this site')
      const queryAt = target.indexOf('?')
      const rawPath = queryAt < 0 ? target : target.slice(0, queryAt)
      const query = queryAt < 0 ? '' : target.slice(queryAt)

      if (rawPath.startsWith(SITE_RESERVED_PREFIX)) {
        const name = rawPath.slice(SITE_RESERVED_PREFIX.length)
        if (site.kind === 'url') {
          if (name.startsWith('x/')) {
            return sendProxyAnswer(reply, site, await proxy.handle(site.url, { method: request.method as 'GET' | 'HEAD', url: target, headers: request.headers }))
          }
          if (name === 'snapshot') {
            return sendPage(reply, 200, ownPage(tags, `Screenshot of ${site.url}`, SNAPSHOT_IMG(site.url)))
          }
          if (name === 'snapshot.png') {
            const png = await snapshotPng(site)
            return reply.code(200).header('content-type', 'image/png').header('cache-control', CACHE_FILES).send(png)
          }
        }
        return serveAsset(request, reply, name)
      }
      if (site.kind === 'zip') return serveFile(request, reply, site, rawPath, query)
      return sendProxyAnswer(reply, site, await proxy.handle(site.url, { method: request.method as 'GET' | 'HEAD', url: target, headers: request.headers }))
    },
  })

  return app
}

/** NUL and the other C0 controls (and DEL) name no file. */
function hasControlCharacter(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i)
    if (code < 0x20 || code === 0x7f) return true
  }
  return false
}

function headerText(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value
}

/** A site path as a URL path (each segment percent-encoded). */
function encodePath(path: string): string {
  return path.split('/').map(encodeURIComponent).join('/')
}
