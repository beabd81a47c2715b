// Discovery documents are answered two ways: by their fastify routes (the first request of an
// /openapi.json query, trailing slashes, percent-encoded slugs, and app.inject) and as prepared
// responses before routing (src/platform/http.ts). Both must answer the same bytes and headers.
import t from 'tap'
import { request as httpRequest } from 'node:http'
import { registry } from '../../src/catalog/registry.ts'
import { createCatalog } from '../../src/catalog/catalog.ts'
import { createServiceApp } from '../../src/catalog/service-app.ts'
import { guideHandlers, negotiateEncoding, etagMatches, renderDocument, type CompressionEffort } from '../../src/catalog/routes.ts'
import { brotliDecompressSync, gunzipSync } from 'node:zlib'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'

const urls = { gateway: 'http://gw.test', scheduler: 'http://sched.test', memory: 'http://mem.test' }
const catalog = createCatalog(registry, { urls, implemented: new Set(['getAgentGuide', 'postAgentGuide']) })
const metrics = createMetrics({ defaultMetrics: false })
const app = createServiceApp(
  'gateway',
  { catalog, logger: createLogger('silent'), metrics, bodyLimitBytes: 1 << 20, payTo: '0x0000000000000000000000000000000000000001', readiness: {} },
  guideHandlers(catalog),
)
let base = ''
t.before(async () => {
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`
})
t.teardown(() => app.close())

interface Raw {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: Buffer
}

/** Over the socket (node:http, so compressed bodies stay as sent). */
async function get(path: string, headers: Record<string, string> = {}, method = 'GET'): Promise<Raw> {
  return await new Promise((resolve, reject) => {
    httpRequest(`${base}${path}`, { method, headers }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }))
      res.on('error', reject)
    })
      .on('error', reject)
      .end()
  })
}

/** Through fastify's router (app.inject never reaches the server's request listener). */
async function routed(path: string, headers: Record<string, string> = {}, method: 'GET' | 'HEAD' = 'GET'): Promise<Raw> {
  const response = await app.inject({ method, url: path, headers })
  return { status: response.statusCode, headers: response.headers as Raw['headers'], body: response.rawPayload }
}

const comparable = (headers: Raw['headers']) => {
  const { date: _date, connection: _connection, 'keep-alive': _keepAlive, 'x-request-id': _id, ...rest } = headers
  return rest
}

const documents = [
  '/openapi.json',
  '/openapi.json?q=song',
  '/openapi.json?page=2',
  '/manifest.json',
  '/services',
  '/services/songmodel-3-pro',
  '/services/memory/openapi.json',
  '/llms.txt',
  '/llms-full.txt',
  '/auth.md',
]

t.test('prepared and routed answers are the same, in every coding, for GET and HEAD, and 304', async (t) => {
  for (const path of documents) {
    await get(path) // an /openapi.json query is prepared once its route has answered it
    t.ok(app.prepared.has(path), `${path} is prepared`)
    const variants: Record<string, string>[] = [{}, { 'accept-encoding': 'br, gzip' }, { 'accept-encoding': 'gzip' }, { 'accept-encoding': 'gzip;q=0, identity' }]
    for (const headers of variants) {
      const fast = await get(path, headers)
      const slow = await routed(path, headers)
      t.equal(fast.status, 200, `${path} ${JSON.stringify(headers)}`)
      t.same(comparable(fast.headers), comparable(slow.headers), `${path} ${JSON.stringify(headers)}: same headers`)
      t.ok(fast.body.equals(slow.body), `${path} ${JSON.stringify(headers)}: same bytes`)
      t.ok(fast.headers['x-request-id'] && slow.headers['x-request-id'], 'both carry x-request-id')
      t.equal(fast.headers.vary, 'accept-encoding')
      t.equal(fast.headers['cache-control'], 'public, max-age=60')
      t.equal(Number(fast.headers['content-length']), fast.body.length)
      t.equal(fast.headers['content-encoding'], { br: 'br', gzip: 'gzip', identity: undefined }[negotiateEncoding(headers['accept-encoding'])])
    }
    const etag = (await get(path)).headers.etag as string
    const fast = await get(path, { 'if-none-match': `W/${etag}, "other"` })
    const slow = await routed(path, { 'if-none-match': etag })
    t.equal(fast.status, 304, `${path}: 304 on a matching If-None-Match`)
    t.equal(slow.status, 304)
    t.equal(fast.body.length, 0)
    t.same(comparable(fast.headers), comparable(slow.headers), `${path}: same 304 headers`)
    const head = await get(path, {}, 'HEAD')
    const headRouted = await routed(path, {}, 'HEAD')
    t.equal(head.status, 200)
    t.equal(head.body.length, 0, `${path}: HEAD has no body`)
    t.same(comparable(head.headers), comparable(headRouted.headers), `${path}: same HEAD headers`)
  }
})

t.test('URLs that are not prepared are routed as before', async (t) => {
  const slash = await get('/services/')
  t.equal(slash.status, 200, 'trailing slash')
  t.ok(slash.body.equals((await get('/services')).body))
  const encoded = await get('/services/songmodel%2D3-pro')
  t.equal(encoded.status, 200, 'percent-encoded slug')
  t.ok(encoded.body.equals((await get('/services/songmodel-3-pro')).body))
  const unknown = await get('/services/nope')
  t.equal(unknown.status, 404)
  t.equal(unknown.headers['content-type'], 'application/problem+json; charset=utf-8')
  t.ok(unknown.headers['x-request-id'])
  const bad = await get('/openapi.json?page=0')
  t.equal(bad.status, 400)
  t.notOk(app.prepared.has('/openapi.json?page=0'), 'a rejected query is not prepared')
  t.equal((await get('/openapi.json?page=0')).status, 400, 'and stays rejected')
})

t.test('prepared answers are counted under their route template', async (t) => {
  const before = await metrics.render()
  const count = (text: string, route: string) => Number(text.match(new RegExp(`_count\\{listener="gateway",method="GET",route="${route}",status="200"\\} (\\d+)`))?.[1] ?? 0)
  await get('/services/songmodel-3-pro')
  await get('/services/memory')
  await get('/openapi.json?page=3')
  await get('/openapi.json?page=3')
  const after = await metrics.render()
  t.equal(count(after, '/services/:slug') - count(before, '/services/:slug'), 2)
  t.equal(count(after, '/openapi.json') - count(before, '/openapi.json'), 2)
})

/** The body a rendered document sends for one Accept-Encoding, without a server. */
function bodyFor(text: string, effort: CompressionEffort, coding: 'br' | 'gzip'): Buffer {
  const chunks: Buffer[] = []
  const response = { writeHead: () => response, end: (body: Buffer) => chunks.push(body) }
  renderDocument('application/json', text, { effort }).respond({ headers: { 'accept-encoding': coding } } as never, response as never, 'id')
  return Buffer.concat(chunks)
}

t.test('compression effort: documents of the fixed set are squeezed harder, and every variant decodes to the text', async (t) => {
  const text = (await get('/openapi.json')).body.toString()
  for (const coding of ['br', 'gzip'] as const) {
    const decode = coding === 'br' ? brotliDecompressSync : gunzipSync
    const [best, fast] = [bodyFor(text, 'best', coding), bodyFor(text, 'fast', coding)]
    t.equal(decode(best).toString(), text, `${coding} best decodes to the text`)
    t.equal(decode(fast).toString(), text, `${coding} fast decodes to the text`)
    t.ok(best.length < fast.length, `${coding}: best ${best.length} B < fast ${fast.length} B`)
  }
  t.same((await get('/openapi.json', { 'accept-encoding': 'br' })).body, bodyFor(text, 'best', 'br'), 'the unfiltered page 1 is served at the best effort')
  const search = (await get('/openapi.json?q=song')).body.toString()
  t.same((await get('/openapi.json?q=song', { 'accept-encoding': 'br' })).body, bodyFor(search, 'fast', 'br'), 'a search is served at the fast effort')
})

t.test('encoding negotiation and ETag comparison', async (t) => {
  t.equal(negotiateEncoding(undefined), 'identity')
  t.equal(negotiateEncoding('gzip, deflate, br'), 'br')
  t.equal(negotiateEncoding('br;q=0.5, gzip'), 'gzip')
  t.equal(negotiateEncoding('*'), 'br')
  t.equal(negotiateEncoding('br;q=0, gzip;q=0'), 'identity')
  t.equal(negotiateEncoding('gzip;q=0.5, identity'), 'identity')
  t.ok(etagMatches('"a", "b"', '"b"'))
  t.ok(etagMatches('W/"b"', '"b"'))
  t.ok(etagMatches('*', '"b"'))
  t.notOk(etagMatches('"c"', '"b"'))
})

t.test('the pages of /openapi.json link to each other per RFC 8288: first, prev, next, last', async (t) => {
  const links = (header: string | string[] | undefined): Record<string, string> =>
    Object.fromEntries([...String(header ?? '').matchAll(/<([^>]+)>;\s*rel="([a-z]+)"/g)].map((match) => [match[2] as string, match[1] as string]))
  const first = await get('/openapi.json')
  const pages = (JSON.parse(first.body.toString()) as { info: { 'x-pages': number } }).info['x-pages']
  t.ok(pages >= 3, `${pages} pages`)
  const page = (n: number) => `http://gw.test/openapi.json?page=${n}`
  t.same(links(first.headers.link), { first: page(1), next: page(2), last: page(pages) }, 'page 1: no prev')
  for (const fetched of [await get('/openapi.json?page=2'), await routed('/openapi.json?page=2')]) {
    t.same(links(fetched.headers.link), { first: page(1), prev: page(1), next: page(3), last: page(pages) }, 'page 2: prev and next')
  }
  t.same(links((await get(`/openapi.json?page=${pages}`)).headers.link), { first: page(1), prev: page(pages - 1), last: page(pages) }, 'the last page: no next')
  const search = links((await get('/openapi.json?q=task&page=2')).headers.link)
  t.equal(search.prev, 'http://gw.test/openapi.json?q=task&page=1', 'a search keeps its query in every link')
  t.equal(search.first, 'http://gw.test/openapi.json?q=task&page=1')
  t.equal((await get('/openapi.json?path=/auth/register')).headers.link, undefined, 'a single page links nowhere')
})
