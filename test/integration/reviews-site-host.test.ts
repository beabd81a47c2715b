// The isolated origin of review sites (src/reviews/site-host.ts) over an in-memory SiteDirectory,
// a LocalBlobStore in a temp dir and a fake overlay, asked with app.inject and Host headers:
// bundle files with their headers, the head tags, 304/Range/HEAD, 404s for unknown labels and for
// traversal attempts, service-worker and method refusals; the live proxy against a node:http site
// on 127.0.0.1 (HTML/CSS rewritten, upstream headers dropped, redirects and sub-resources to
// addresses the egress rule refuses never fetched, DNS to a private address refused), the fallback
// page, and snapshot.png rendered once by real Chromium.
import { createHash } from 'node:crypto'
import dns from 'node:dns/promises'
import { mkdtemp, rm } from 'node:fs/promises'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { gzipSync } from 'node:zlib'
import t, { type Test } from 'tap'
import { createLocalBlobStore, type BlobStore } from '../../src/platform/blobs.ts'
import { egressPolicy } from '../../src/platform/egress.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { chromiumAvailable, createPageShots, type PageShots } from '../../src/platform/page-shots.ts'
import { newSiteLabel, reviewOrigins } from '../../src/reviews/origins.ts'
import { PROXY_USER_AGENT } from '../../src/reviews/proxy.ts'
import { buildSiteHostApp, PERMISSIONS_POLICY, siteCsp, snapshotKey } from '../../src/reviews/site-host.ts'
import type { HostedSite, SiteAssets, SiteFile } from '../../src/reviews/types.ts'

const REVIEWER = 'http://localhost:4020'
const origins = reviewOrigins('http://{site}.localhost:4025', REVIEWER)
const TAGS = '<script src="/__agent_gateway__/overlay.js"></script>'
const OVERLAY = Buffer.from('console.log("overlay")')
const assets: SiteAssets = {
  headTags: TAGS,
  get: (name) => (name === 'overlay.js' ? { body: OVERLAY, contentType: 'text/javascript; charset=utf-8', etag: '"overlay-1"' } : undefined),
}
const PROBLEM = 'application/problem+json; charset=utf-8'
const PNG_BYTES = Buffer.concat([Buffer.from('89504e470d0a1a0a', 'hex'), Buffer.alloc(100, 7)])

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex')
const hostOf = (label: string) => new URL(origins.site(label)).host

/** A local page server; `hits` counts the requests it saw, `seen` keeps their headers. */
async function pageServer(t: Test, handler: (req: http.IncomingMessage, res: http.ServerResponse, port: number) => void) {
  const seen: http.IncomingHttpHeaders[] = []
  const paths: string[] = []
  const server = http.createServer((req, res) => {
    seen.push(req.headers)
    paths.push(req.url ?? '')
    handler(req, res, (server.address() as AddressInfo).port)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const port = (server.address() as AddressInfo).port
  return { port, base: `http://127.0.0.1:${port}`, seen, paths }
}

async function closedPort(): Promise<number> {
  const server = http.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}

interface WorldOptions {
  allow?: string[]
  lookup?: (host: string) => Promise<Array<{ address: string; family: number }>>
  screenshots?: PageShots
}

async function world(t: Test, options: WorldOptions = {}) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-site-host-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const blobs = createLocalBlobStore(dir)
  const sites = new Map<string, HostedSite>()
  const lookups: string[] = []
  const noShots: PageShots = { available: async () => false, capture: async () => Promise.reject(new Error('no Chromium')) }
  const app = buildSiteHostApp({
    directory: {
      siteByLabel: async (label) => {
        lookups.push(label)
        return sites.get(label)
      },
    },
    blobs,
    origins,
    assets,
    egress: egressPolicy({ allow: options.allow ?? [], ...(options.lookup ? { lookup: options.lookup } : {}) }),
    screenshots: options.screenshots ?? noShots,
    logger: createLogger('silent'),
  })
  t.teardown(() => app.close())
  await app.ready()

  const zipSite = async (files: Record<string, [string | Buffer, string]>, entryFile = 'index.html') => {
    const label = newSiteLabel()
    const reviewId = `rv_${label.slice(2, 12)}`
    const map = new Map<string, SiteFile>()
    for (const [name, [content, contentType]] of Object.entries(files)) {
      const data = Buffer.isBuffer(content) ? content : Buffer.from(content)
      const blobKey = `reviews/${reviewId}/files/${sha256(Buffer.from(name)).slice(0, 16)}`
      await blobs.put(blobKey, data, contentType)
      map.set(name, { path: name, blobKey, contentType, bytes: data.length, sha256: sha256(data) })
    }
    sites.set(label, { kind: 'zip', reviewId, label, entryFile, files: map })
    return { label, host: hostOf(label), reviewId }
  }
  const urlSite = (url: string) => {
    const label = newSiteLabel()
    const reviewId = `rv_${label.slice(2, 12)}`
    sites.set(label, { kind: 'url', reviewId, label, url })
    return { label, host: hostOf(label), reviewId }
  }
  const get = (host: string, url: string, headers: Record<string, string> = {}, method: 'GET' | 'HEAD' | 'POST' | 'PUT' | 'DELETE' = 'GET') =>
    app.inject({ method, url, headers: { host, ...headers } })
  return { app, blobs, zipSite, urlSite, get, lookups }
}

function securityHeaders(t: Test, headers: Record<string, unknown>, what: string) {
  t.equal(headers['x-content-type-options'], 'nosniff', `${what}: nosniff`)
  t.equal(headers['content-security-policy'], siteCsp(REVIEWER), `${what}: CSP`)
  t.match(headers['content-security-policy'], `frame-ancestors ${REVIEWER}`, `${what}: only the reviewer frames it`)
  t.equal(headers['referrer-policy'], 'no-referrer', `${what}: no referrer`)
  t.equal(headers['cross-origin-resource-policy'], 'same-origin', `${what}: CORP`)
  t.equal(headers['permissions-policy'], PERMISSIONS_POLICY, `${what}: permissions`)
  t.notOk('set-cookie' in headers, `${what}: no cookie`)
}

const BUNDLE: Record<string, [string | Buffer, string]> = {
  'index.html': ['<!doctype html><html><head><title>Home</title><link rel="stylesheet" href="css/site.css"></head><body><h1>Hi</h1></body></html>', 'text/html; charset=utf-8'],
  'css/site.css': ['body{background:url(../img/a.png)}', 'text/css; charset=utf-8'],
  'img/a.png': [PNG_BYTES, 'image/png'],
  'app.js': ['console.log(1)', 'text/javascript; charset=utf-8'],
  'data.bin': [Buffer.from([0, 1, 2, 3]), 'application/octet-stream'],
  'docs/index.html': ['<p>docs</p>', 'text/html'],
  'notes.txt': ['<script>alert(1)</script>', 'text/plain; charset=utf-8'],
}

t.test('origins: labels, hosts and the site pattern', async (t) => {
  const label = newSiteLabel()
  t.match(label, /^s-[a-z2-7]{26}$/)
  t.not(newSiteLabel(), label)
  t.equal(origins.site(label), `http://${label}.localhost:4025`)
  t.equal(origins.labelOfHost(`${label}.localhost:4025`), label)
  t.equal(origins.labelOfHost(`${label.toUpperCase()}.LocalHost:4025`), label, 'case-insensitive')
  t.equal(origins.labelOfHost(`${label}.localhost:4026`), undefined, 'another port')
  t.equal(origins.labelOfHost(`${label}.localhost`), undefined, 'no port')
  t.equal(origins.labelOfHost('localhost:4025'), undefined)
  t.equal(origins.labelOfHost(`a.${label}.localhost:4025`), undefined, 'one label only')
  t.equal(origins.labelOfHost(`${label}.evil.test:4025`), undefined)
  t.equal(origins.labelOfHost(undefined), undefined)
  t.equal(origins.sitePattern, 'http://*.localhost:4025')
  t.equal(origins.reviewer, REVIEWER)
  const cluster = reviewOrigins('https://{site}.Reviews.Example.com/', 'https://agents.example.com/')
  t.equal(cluster.site('s-abc'), 'https://s-abc.reviews.example.com')
  t.equal(cluster.labelOfHost('s-abc.reviews.example.com'), 's-abc')
  t.equal(cluster.labelOfHost('s-abc.reviews.example.com:443'), 's-abc', 'the default port spelled out')
  t.equal(cluster.sitePattern, 'https://*.reviews.example.com')
  t.equal(cluster.reviewer, 'https://agents.example.com')
  for (const bad of ['http://localhost:4025', 'http://x.{site}.localhost', 'http://{site}.localhost/path', 'ftp://{site}.x.test', 'http://{site}', 'http://u@{site}.x.test']) {
    t.throws(() => reviewOrigins(bad, REVIEWER), RangeError, bad)
  }
  t.throws(() => reviewOrigins('http://{site}.localhost:4025', 'javascript:alert(1)'), RangeError)
})

t.test('bundle files: bytes, content types and headers on every response', async (t) => {
  const w = await world(t)
  const site = await w.zipSite(BUNDLE)
  const home = await w.get(site.host, '/')
  t.equal(home.statusCode, 200)
  t.equal(home.headers['content-type'], 'text/html; charset=utf-8')
  t.equal(home.body, `<!doctype html><html><head>${TAGS}<title>Home</title><link rel="stylesheet" href="css/site.css"></head><body><h1>Hi</h1></body></html>`)
  t.equal(home.headers['cache-control'], 'private, max-age=300')
  t.equal(home.headers['content-disposition'], 'inline')
  securityHeaders(t, home.headers, 'index')
  t.same((await w.get(site.host, '/index.html')).body, home.body, '/index.html is the same page')

  const expectations: Array<[string, string]> = [
    ['/css/site.css', 'text/css; charset=utf-8'],
    ['/img/a.png', 'image/png'],
    ['/app.js', 'text/javascript; charset=utf-8'],
    ['/notes.txt', 'text/plain; charset=utf-8'],
    ['/data.bin', 'application/octet-stream'],
  ]
  for (const [url, type] of expectations) {
    const response = await w.get(site.host, url)
    t.equal(response.statusCode, 200, url)
    t.equal(response.headers['content-type'], type, `${url}: the stored type`)
    t.equal(response.headers.etag, `"${sha256(Buffer.isBuffer(BUNDLE[url.slice(1)]![0]) ? (BUNDLE[url.slice(1)]![0] as Buffer) : Buffer.from(BUNDLE[url.slice(1)]![0]))}"`)
    securityHeaders(t, response.headers, url)
  }
  t.ok((await w.get(site.host, '/img/a.png')).rawPayload.equals(PNG_BYTES), 'the stored bytes')
  t.equal((await w.get(site.host, '/data.bin')).headers['content-disposition'], 'attachment', 'octet-stream downloads')
  t.equal((await w.get(site.host, '/notes.txt')).body, '<script>alert(1)</script>', 'text stays text (no injection, nosniff)')

  const plain = await w.get(site.host, '/docs/')
  t.equal(plain.body, `${TAGS}<p>docs</p>`, 'a page without <head>: tags before the first element')
  t.equal(plain.headers['content-type'], 'text/html; charset=utf-8', 'a UTF-8 page gets its charset')
  const folder = await w.get(site.host, '/docs?x=1')
  t.equal(folder.statusCode, 302)
  t.equal(folder.headers.location, '/docs/?x=1', 'a folder without its slash redirects into it')

  t.equal(w.lookups.length, 1, 'the site is looked up once, then cached')
})

t.test('bundle files: 304, Range and HEAD', async (t) => {
  const w = await world(t)
  const site = await w.zipSite(BUNDLE)
  const etag = `"${sha256(PNG_BYTES)}"`
  const notModified = await w.get(site.host, '/img/a.png', { 'if-none-match': etag })
  t.equal(notModified.statusCode, 304)
  t.equal(notModified.body, '')
  securityHeaders(t, notModified.headers, '304')
  const html = await w.get(site.host, '/')
  t.not(html.headers.etag, `"${sha256(Buffer.from(BUNDLE['index.html']![0]))}"`, 'the HTML ETag names the injected tags too')
  t.equal((await w.get(site.host, '/', { 'if-none-match': String(html.headers.etag) })).statusCode, 304)

  const part = await w.get(site.host, '/img/a.png', { range: 'bytes=0-7' })
  t.equal(part.statusCode, 206)
  t.equal(part.headers['content-range'], `bytes 0-7/${PNG_BYTES.length}`)
  t.ok(part.rawPayload.equals(PNG_BYTES.subarray(0, 8)))
  const beyond = await w.get(site.host, '/img/a.png', { range: 'bytes=9999-' })
  t.equal(beyond.statusCode, 416)
  t.equal(beyond.headers['content-type'], PROBLEM)
  securityHeaders(t, beyond.headers, '416')

  const head = await w.get(site.host, '/img/a.png', {}, 'HEAD')
  t.equal(head.statusCode, 200)
  t.equal(head.headers['content-length'], String(PNG_BYTES.length))
  t.equal(head.body, '')
})

t.test('unknown sites, unknown files and traversal attempts are clean 404s', async (t) => {
  const w = await world(t)
  const site = await w.zipSite(BUNDLE)
  const unknown = await w.get(hostOf(newSiteLabel()), '/')
  t.equal(unknown.statusCode, 404)
  t.equal(unknown.headers['content-type'], PROBLEM)
  t.equal(unknown.json().code, 'not_found')
  securityHeaders(t, unknown.headers, 'unknown label')
  for (const host of ['localhost:4025', 'evil.test', `${site.label}.localhost:9999`, `${site.label}.evil.test:4025`]) {
    const other = await w.get(host, '/')
    t.equal(other.statusCode, 404, `host ${host}`)
    t.equal(other.headers['content-type'], PROBLEM)
  }
  const attempts = [
    '/..%2f..%2fetc/passwd',
    '/%2e%2e/%2e%2e/etc/passwd',
    '/../../etc/passwd',
    '/css/..%2f..%2f..%2findex.html',
    '/index.html%00',
    '/index.html%00.png',
    '/%00',
    '/%252e%252e%252findex.html',
    '/img%252fa.png',
    '/..%5c..%5cindex.html',
    '/%c0%ae%c0%ae/index.html',
    '/%E0%A4%A',
    '/%zz',
    '/index%2',
    '/nope.html',
    '/CSS/SITE.CSS',
  ]
  for (const url of attempts) {
    const response = await w.get(site.host, url)
    t.equal(response.statusCode, 404, url)
    t.match(response.headers['content-type'], /^text\/html/, `${url}: a page`)
    t.match(response.body, TAGS, `${url}: with the overlay`)
    securityHeaders(t, response.headers, url)
  }

  const custom = await w.zipSite({ ...BUNDLE, '404.html': ['<html><head></head><body>custom missing</body></html>', 'text/html; charset=utf-8'] })
  const missing = await w.get(custom.host, '/nope')
  t.equal(missing.statusCode, 404)
  t.equal(missing.body, `<html><head>${TAGS}</head><body>custom missing</body></html>`, "the site's own 404.html")

  const noIndex = await w.zipSite({ 'pages/start.html': ['<p>s</p>', 'text/html'] }, 'pages/start.html')
  const root = await w.get(noIndex.host, '/')
  t.equal(root.statusCode, 302)
  t.equal(root.headers.location, '/pages/start.html', 'no index.html: / goes to the entry file')
})

t.test('methods, service workers and overlay files', async (t) => {
  const w = await world(t)
  const site = await w.zipSite(BUNDLE)
  for (const method of ['POST', 'PUT', 'DELETE'] as const) {
    const response = await w.get(site.host, '/', { 'content-type': 'application/json' }, method)
    t.equal(response.statusCode, 405, method)
    t.equal(response.headers.allow, 'GET, HEAD')
    securityHeaders(t, response.headers, method)
  }
  const worker = await w.get(site.host, '/app.js', { 'service-worker': 'script' })
  t.equal(worker.statusCode, 403, 'a service worker script is refused')
  t.equal(worker.headers['content-type'], PROBLEM)
  const overlay = await w.get(site.host, '/__agent_gateway__/overlay.js')
  t.equal(overlay.statusCode, 200)
  t.ok(overlay.rawPayload.equals(OVERLAY))
  t.equal(overlay.headers['content-type'], 'text/javascript; charset=utf-8')
  t.equal(overlay.headers.etag, '"overlay-1"')
  t.equal((await w.get(site.host, '/__agent_gateway__/overlay.js', { 'if-none-match': '"overlay-1"' })).statusCode, 304)
  t.equal((await w.get(site.host, '/__agent_gateway__/nope.js')).statusCode, 404)
  t.equal((await w.get(site.host, '/__agent_gateway__/snapshot.png')).statusCode, 404, 'bundles have no snapshot')
  t.equal((await w.get(site.host, '/__agent_gateway__/x/http/example.com/')).statusCode, 404, 'bundles proxy nothing')
})

/** The live test site: HTML, CSS, redirects and the headers a real site sends. */
async function liveSite(t: Test, otherPort: number) {
  return pageServer(t, (req, res, port) => {
    const url = req.url ?? '/'
    const hostile = {
      'x-frame-options': 'DENY',
      'content-security-policy': "frame-ancestors 'none'",
      'content-security-policy-report-only': "default-src 'none'",
      'set-cookie': 'session=abc; Path=/',
      'strict-transport-security': 'max-age=31536000',
      'access-control-allow-origin': '*',
      link: '<https://tracker.example/x.js>; rel=preload',
      'clear-site-data': '"*"',
      'service-worker-allowed': '/',
      etag: '"v1"',
    }
    if (url === '/' || url === '/index.html') {
      res.writeHead(200, { ...hostile, 'content-type': 'text/html; charset=utf-8' })
      res.end(
        `<!doctype html><html><head><meta http-equiv="Content-Security-Policy" content="default-src 'none'"><link rel="stylesheet" href="/style.css"></head>` +
          `<body><img src="http://127.0.0.1:${port}/img.png"><script src="http://127.0.0.1:${otherPort}/other.js"></script><a href="https://example.com/x">x</a></body></html>`,
      )
    } else if (url === '/style.css') {
      res.writeHead(200, { 'content-type': 'text/css' })
      res.end(`@import "http://127.0.0.1:${otherPort}/more.css"; body{background:url(img.png)}`)
    } else if (url === '/gzipped.html') {
      res.writeHead(200, { 'content-type': 'text/html', 'content-encoding': 'gzip' })
      res.end(gzipSync('<head><title>z</title></head>'))
    } else if (url === '/img.png') {
      res.writeHead(200, { 'content-type': 'image/png' })
      res.end(PNG_BYTES)
    } else if (url === '/redirect-same') {
      res.writeHead(302, { location: '/target?x=1' })
      res.end()
    } else if (url === '/redirect-private') {
      res.writeHead(302, { location: 'http://10.0.0.1/admin' })
      res.end()
    } else if (url === '/redirect-loopback') {
      res.writeHead(301, { location: `http://127.0.0.1:${otherPort}/secret` })
      res.end()
    } else if (url === '/boom') {
      res.writeHead(500, { 'content-type': 'text/plain' })
      res.end('boom')
    } else {
      res.writeHead(404, { 'content-type': 'text/html' })
      res.end('<p>missing</p>')
    }
  })
}

t.test('live proxy: rewritten HTML and CSS, hostile headers dropped, nothing forwarded', async (t) => {
  const other = await pageServer(t, (_req, res) => res.end('secret'))
  const live = await liveSite(t, other.port)
  const w = await world(t, { allow: [`127.0.0.1:${live.port}`] })
  const site = w.urlSite(`${live.base}/`)
  const page = await w.get(site.host, '/', { cookie: 'reviewer=1', authorization: 'Bearer x', referer: `${REVIEWER}/reviews/r`, 'accept-language': 'fr', accept: 'text/html' })
  t.equal(page.statusCode, 200)
  t.equal(page.headers['content-type'], 'text/html; charset=utf-8')
  t.ok(page.body.startsWith(`<!doctype html><html><head>${TAGS}<link rel="stylesheet" href="/style.css">`), 'tags first, meta CSP dropped')
  t.match(page.body, '<img src="/img.png">', 'absolute same-origin → root-relative')
  t.match(page.body, `<script src="/__agent_gateway__/x/http/127.0.0.1:${other.port}/other.js"></script>`, 'cross-origin → x/ form')
  t.match(page.body, '<a href="/__agent_gateway__/x/https/example.com/x">')
  for (const name of [
    'x-frame-options',
    'content-security-policy-report-only',
    'set-cookie',
    'strict-transport-security',
    'access-control-allow-origin',
    'link',
    'clear-site-data',
    'service-worker-allowed',
  ]) {
    t.notOk(name in page.headers, `upstream ${name} dropped`)
  }
  securityHeaders(t, page.headers, 'proxied page')
  t.equal(page.headers['cache-control'], 'private, no-store')
  t.equal(page.headers.etag, 'W/"v1"', 'the validator kept, weak as the bytes changed')
  const sent = live.seen.at(-1)!
  t.equal(sent['user-agent'], PROXY_USER_AGENT)
  t.equal(sent['accept-encoding'], 'identity')
  t.equal(sent['accept-language'], 'fr')
  t.notOk(sent.cookie ?? sent.authorization ?? sent.referer, "the reviewer's cookie, authorization and referer stay here")
  t.equal(sent.host, `127.0.0.1:${live.port}`)

  const css = await w.get(site.host, '/style.css')
  t.equal(css.body, `@import "/__agent_gateway__/x/http/127.0.0.1:${other.port}/more.css"; body{background:url("/img.png")}`)
  t.equal(css.headers['content-type'], 'text/css')
  const png = await w.get(site.host, '/img.png')
  t.ok(png.rawPayload.equals(PNG_BYTES), 'other types pass as they are')
  const gz = await w.get(site.host, '/gzipped.html')
  t.equal(gz.body, `<head>${TAGS}<title>z</title></head>`, 'a compressed answer is decompressed')
  t.notOk('content-encoding' in gz.headers)
  const missing = await w.get(site.host, '/missing')
  t.equal(missing.statusCode, 404, "the site's own 404 passes")
  t.equal(missing.body, `${TAGS}<p>missing</p>`)
  live.paths.length = 0
  t.equal((await w.get(site.host, '/caf%E9?q=%FF&r')).statusCode, 404)
  t.equal((await w.get(site.host, '//evil.example/x')).statusCode, 404)
  t.same(live.paths, ['/caf%E9?q=%FF&r', '//evil.example/x'], 'paths reach the live site exactly as sent, on its own host')
  const same = await w.get(site.host, '/redirect-same')
  t.equal(same.statusCode, 302)
  t.equal(same.headers.location, '/target?x=1')
  const post = await w.get(site.host, '/', {}, 'POST')
  t.equal(post.statusCode, 405, 'live pages are viewed, not submitted to')
  t.equal(other.seen.length, 0, 'the other origin was never asked')
})

t.test('live proxy: private and loopback destinations are refused, never fetched', async (t) => {
  const other = await pageServer(t, (_req, res) => res.end('secret'))
  const live = await liveSite(t, other.port)
  const lookup = async (host: string) => (host === 'rebind.test' ? [{ address: '127.0.0.1', family: 4 }] : dns.lookup(host, { all: true }))
  const w = await world(t, { allow: [`127.0.0.1:${live.port}`], lookup })
  const site = w.urlSite(`${live.base}/`)

  const toPrivate = await w.get(site.host, '/redirect-private')
  t.equal(toPrivate.statusCode, 302)
  t.equal(toPrivate.headers.location, '/__agent_gateway__/x/http/10.0.0.1/admin', 'handed to the browser in the x/ form')
  const followed = await w.get(site.host, String(toPrivate.headers.location), { 'sec-fetch-dest': 'image' })
  t.equal(followed.statusCode, 403)
  t.equal(followed.json().code, 'url_not_allowed')
  t.match(followed.json().detail, /10\.0\.0\.1/)
  const navigated = await w.get(site.host, String(toPrivate.headers.location), { 'sec-fetch-dest': 'iframe' })
  t.equal(navigated.statusCode, 502, 'a frame navigation gets the explanation page')
  t.match(navigated.body, /not reachable/)

  const toLoopback = await w.get(site.host, '/redirect-loopback')
  t.equal(toLoopback.headers.location, `/__agent_gateway__/x/http/127.0.0.1:${other.port}/secret`)
  t.equal((await w.get(site.host, String(toLoopback.headers.location), { 'sec-fetch-dest': 'script' })).statusCode, 403)
  t.equal(
    (await w.get(site.host, `/__agent_gateway__/x/http/127.0.0.1:${other.port}/other.js`, { 'sec-fetch-dest': 'script' })).statusCode,
    403,
    'a sub-resource on a loopback port not allowed',
  )
  t.equal((await w.get(site.host, '/__agent_gateway__/x/http/169.254.169.254/latest/meta-data/', { 'sec-fetch-dest': 'empty' })).statusCode, 403, 'cloud metadata')
  t.equal((await w.get(site.host, '/__agent_gateway__/x/http/[::1]:80/', { 'sec-fetch-dest': 'empty' })).statusCode, 403, 'IPv6 loopback')
  t.equal((await w.get(site.host, '/__agent_gateway__/x/file/etc/passwd')).statusCode, 404, 'no other schemes')
  t.equal(other.seen.length, 0, 'the loopback server was never reached')

  const rebind = w.urlSite(`http://rebind.test:${other.port}/`)
  const rebound = await w.get(rebind.host, '/')
  t.equal(rebound.statusCode, 502, 'a name resolving to a private address: the fallback page')
  t.match(rebound.body, /rebind\.test resolves to 127\.0\.0\.1/)
  const reboundPort = w.urlSite(`http://rebind.test:${live.port}/`)
  t.equal((await w.get(reboundPort.host, '/')).statusCode, 502, 'the allow list names host:port as the URL does, not the address')
  t.equal(other.seen.length, 0, 'still never reached')
})

t.test('live proxy: the fallback page when the entry cannot be shown', async (t) => {
  const live = await liveSite(t, await closedPort())
  const port = await closedPort()
  const w = await world(t, { allow: [`127.0.0.1:${port}`, `127.0.0.1:${live.port}`] })
  const down = w.urlSite(`http://127.0.0.1:${port}/`)
  const page = await w.get(down.host, '/')
  t.equal(page.statusCode, 502)
  t.equal(page.headers['content-type'], 'text/html; charset=utf-8')
  t.ok(page.body.startsWith(`<!doctype html><html><head>${TAGS}`), 'with the overlay')
  t.match(page.body, '<img class="agw-shot" src="/__agent_gateway__/snapshot.png"')
  t.match(page.body, /ECONNREFUSED|could not|connect/i)
  securityHeaders(t, page.headers, 'fallback')
  const failing = w.urlSite(`${live.base}/boom`)
  const boom = await w.get(failing.host, '/boom')
  t.equal(boom.statusCode, 502)
  t.match(boom.body, 'the page answered 500')
  const image = w.urlSite(`${live.base}/img.png`)
  const notHtml = await w.get(image.host, '/img.png')
  t.equal(notHtml.statusCode, 502)
  t.match(notHtml.body, 'the page is not HTML (image/png)')
  const snapshot = await w.get(down.host, '/__agent_gateway__/snapshot')
  t.equal(snapshot.statusCode, 200)
  t.ok(snapshot.body.startsWith(`<!doctype html><html><head>${TAGS}`))
  t.match(snapshot.body, '<img class="agw-shot" src="/__agent_gateway__/snapshot.png"')
  const noChromium = await w.get(down.host, '/__agent_gateway__/snapshot.png')
  t.equal(noChromium.statusCode, 503, 'no Chromium: a problem, not a hang')
  t.equal(noChromium.headers['content-type'], PROBLEM)
})

t.test('snapshot.png: rendered once per review by Chromium, kept in the blob store', async (t) => {
  const chromium = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
  if (!(await chromiumAvailable(chromium))) {
    t.comment(`no Chromium at ${chromium}: snapshot rendering not exercised (install chromium or set CHROMIUM_PATH)`)
    t.skip(`rendering a page needs Chromium at ${chromium}`, () => {})
    return
  }
  const live = await pageServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' })
    res.end('<html><body style="background:#c00"><h1>Live</h1></body></html>')
  })
  const real = createPageShots({ chromiumPath: chromium, egressAllow: [`127.0.0.1:${live.port}`], timeoutMs: 30_000 })
  let captures = 0
  const counted: PageShots = {
    available: () => real.available(),
    capture: (url, options) => {
      captures++
      return real.capture(url, options)
    },
  }
  const w = await world(t, { allow: [`127.0.0.1:${live.port}`], screenshots: counted })
  const site = w.urlSite(`${live.base}/`)
  const [a, b] = await Promise.all([w.get(site.host, '/__agent_gateway__/snapshot.png'), w.get(site.host, '/__agent_gateway__/snapshot.png')])
  t.equal(a.statusCode, 200)
  t.equal(a.headers['content-type'], 'image/png')
  t.ok(a.rawPayload.subarray(0, 8).equals(PNG_BYTES.subarray(0, 8)), 'a PNG')
  t.equal(a.rawPayload.readUInt32BE(16), 1280, 'of the snapshot width')
  t.ok(b.rawPayload.equals(a.rawPayload), 'the concurrent request got the same render')
  t.equal(captures, 1, 'single flight')
  securityHeaders(t, a.headers, 'snapshot.png')
  const stored = await w.blobs.get(snapshotKey(site.reviewId))
  t.ok(stored?.data.equals(a.rawPayload), 'kept under reviews/<id>/snapshot.png')
  const again = await w.get(site.host, '/__agent_gateway__/snapshot.png')
  t.ok(again.rawPayload.equals(a.rawPayload))
  t.equal(captures, 1, 'served from the blob store afterwards')
})

t.test('snapshot.png: a stored snapshot is served without Chromium', async (t) => {
  const w = await world(t)
  const site = w.urlSite('http://example.invalid/')
  await (w.blobs as BlobStore).put(snapshotKey(site.reviewId), PNG_BYTES, 'image/png')
  const response = await w.get(site.host, '/__agent_gateway__/snapshot.png')
  t.equal(response.statusCode, 200)
  t.ok(response.rawPayload.equals(PNG_BYTES))
})
