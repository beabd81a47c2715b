// The fastify factory (src/platform/http.ts): request validation (bodies strict, query strings and
// headers coerced), problem+json for every error the framework raises, request ids and metrics.
import t from 'tap'
import { Type } from '@sinclair/typebox'
import { createHttpApp } from '../../src/platform/http.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics, type Metrics } from '../../src/platform/metrics.ts'
import { registry } from '../../src/catalog/registry.ts'
import { createCatalog } from '../../src/catalog/catalog.ts'
import { createServiceApp } from '../../src/catalog/service-app.ts'
import { guideHandlers } from '../../src/catalog/routes.ts'
import type { ServerName } from '../../src/catalog/types.ts'

const PROBLEM = 'application/problem+json; charset=utf-8'

function build(): { app: ReturnType<typeof createHttpApp>; metrics: Metrics } {
  const metrics = createMetrics({ defaultMetrics: false })
  const app = createHttpApp({ name: 'test', logger: createLogger('silent'), metrics, bodyLimitBytes: 1 << 16 })
  // A plain JSON Schema body and the same shape as TypeBox (symbol keys) must behave alike.
  const plainBody = {
    type: 'object',
    properties: {
      env: { type: 'object', additionalProperties: { type: 'string' } },
      count: { type: 'integer', minimum: 0 },
      flag: { type: 'boolean' },
      when: { type: 'string', format: 'date-time' },
      size: { type: 'integer', default: 3 },
    },
    additionalProperties: false,
  }
  const typeboxBody = Type.Object(
    {
      env: Type.Optional(Type.Record(Type.String(), Type.String())),
      count: Type.Optional(Type.Integer({ minimum: 0 })),
      flag: Type.Optional(Type.Boolean()),
      when: Type.Optional(Type.String({ format: 'date-time' })),
      size: Type.Optional(Type.Integer({ default: 3 })),
    },
    { additionalProperties: false },
  )
  const echo = async (request: { body: unknown }) => ({ body: request.body })
  app.post('/plain', { schema: { body: plainBody } }, echo)
  app.post('/typebox', { schema: { body: typeboxBody } }, echo)
  app.get(
    '/items',
    {
      schema: {
        querystring: Type.Object({ page: Type.Optional(Type.Integer({ minimum: 1 })), tag: Type.Optional(Type.Array(Type.String())), on: Type.Optional(Type.Boolean()) }),
        headers: Type.Object({ 'x-limit': Type.Optional(Type.Integer({ minimum: 1 })) }),
      },
    },
    async (request) => {
      const query = request.query as { page?: unknown; tag?: unknown; on?: unknown }
      const limit = (request.headers as Record<string, unknown>)['x-limit']
      return { page: query.page, pageType: typeof query.page, tag: query.tag, on: query.on, limit, limitType: typeof limit }
    },
  )
  app.get('/things/:id', { schema: { params: Type.Object({ id: Type.Integer() }) } }, async (request) => {
    const { id } = request.params as { id: unknown }
    return { id, idType: typeof id }
  })
  app.get('/services/:slug', async (request) => ({ slug: (request.params as { slug: string }).slug }))
  return { app, metrics }
}

t.test('JSON bodies are validated without type coercion', async (t) => {
  const { app } = build()
  t.teardown(() => app.close())
  for (const url of ['/plain', '/typebox']) {
    const numberForString = await app.inject({ method: 'POST', url, payload: { env: { N: 1 } } })
    t.equal(numberForString.statusCode, 400, `${url}: a number where a string is required is rejected`)
    t.equal(numberForString.headers['content-type'], PROBLEM)
    t.match(numberForString.json(), { status: 400, code: 'validation_error', field: 'body.env.N', detail: /body\.env\.N must be string/ })

    const stringForInteger = await app.inject({ method: 'POST', url, payload: { count: '5' } })
    t.equal(stringForInteger.statusCode, 400, `${url}: "5" for an integer is rejected`)
    t.match(stringForInteger.json(), { code: 'validation_error', field: 'body.count' })

    const stringForBoolean = await app.inject({ method: 'POST', url, payload: { flag: 'true' } })
    t.equal(stringForBoolean.statusCode, 400, `${url}: "true" for a boolean is rejected`)
    t.match(stringForBoolean.json(), { field: 'body.flag' })

    const numberForBoolean = await app.inject({ method: 'POST', url, payload: { flag: 1 } })
    t.equal(numberForBoolean.statusCode, 400, `${url}: 1 for a boolean is rejected`)

    const nullForString = await app.inject({ method: 'POST', url, payload: { env: { N: null } } })
    t.equal(nullForString.statusCode, 400, `${url}: null for a string is rejected`)

    const arrayForString = await app.inject({ method: 'POST', url, payload: { env: { N: ['a'] } } })
    t.equal(arrayForString.statusCode, 400, `${url}: an array for a string is rejected`)

    const badFormat = await app.inject({ method: 'POST', url, payload: { when: 'tomorrow' } })
    t.equal(badFormat.statusCode, 400, `${url}: formats are checked (ajv-formats)`)
    t.match(badFormat.json(), { field: 'body.when' })

    const unknown = await app.inject({ method: 'POST', url, payload: { colour: 'red' } })
    t.equal(unknown.statusCode, 400, `${url}: unknown fields are rejected, not removed`)
    t.match(unknown.json(), { field: 'body.colour', detail: 'body.colour is not an allowed field' })

    const good = await app.inject({ method: 'POST', url, payload: { env: { N: '1' }, count: 5, flag: true, when: '2030-01-01T00:00:00Z' } })
    t.equal(good.statusCode, 200, `${url}: a well-typed body passes`)
    t.same(good.json(), { body: { env: { N: '1' }, count: 5, flag: true, when: '2030-01-01T00:00:00Z', size: 3 } }, `${url}: values as sent, defaults filled`)
  }
})

t.test('query strings, headers and path parameters are still coerced', async (t) => {
  const { app } = build()
  t.teardown(() => app.close())
  const page = await app.inject({ method: 'GET', url: '/items?page=2&tag=a&on=true', headers: { 'x-limit': '7' } })
  t.equal(page.statusCode, 200)
  t.same(page.json(), { page: 2, pageType: 'number', tag: ['a'], on: true, limit: 7, limitType: 'number' }, 'page=2 is the integer 2, a single tag an array')
  const badPage = await app.inject({ method: 'GET', url: '/items?page=two' })
  t.equal(badPage.statusCode, 400)
  t.match(badPage.json(), { code: 'validation_error', field: 'query.page' })
  const badHeader = await app.inject({ method: 'GET', url: '/items', headers: { 'x-limit': '0' } })
  t.equal(badHeader.statusCode, 400)
  t.match(badHeader.json(), { field: 'header.x-limit' })
  const thing = await app.inject({ method: 'GET', url: '/things/42' })
  t.same(thing.json(), { id: 42, idType: 'number' })
})

t.test('URLs the router rejects answer problem+json with a request id and are counted', async (t) => {
  const { app, metrics } = build()
  t.teardown(() => app.close())
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  const base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`

  const badEncoding = await fetch(`${base}/services/%E0%A4%A`)
  t.equal(badEncoding.status, 400, 'bad percent-encoding is a 400')
  t.equal(badEncoding.headers.get('content-type'), PROBLEM)
  t.ok(badEncoding.headers.get('x-request-id'), 'x-request-id present')
  t.match(await badEncoding.json(), { status: 400, code: 'validation_error', field: 'path' })

  const longParam = await fetch(`${base}/services/${'a'.repeat(201)}`, { headers: { 'x-request-id': 'given-id-1' } })
  t.equal(longParam.status, 414, 'a path parameter over 200 characters is a 414')
  t.equal(longParam.headers.get('content-type'), PROBLEM)
  t.equal(longParam.headers.get('x-request-id'), 'given-id-1', "the caller's request id is echoed")
  t.match(await longParam.json(), { status: 414, code: 'validation_error', field: 'path' })

  const fine = await fetch(`${base}/services/${'a'.repeat(200)}`)
  t.equal(fine.status, 200, 'exactly 200 characters is fine')
  t.ok(fine.headers.get('x-request-id'))
  await fine.arrayBuffer()

  const text = await metrics.render()
  t.match(text, /agent_gateway_http_request_duration_seconds_count\{listener="test",method="GET",route="unmatched",status="400"\} 1/, 'the 400 is counted')
  t.match(text, /agent_gateway_http_request_duration_seconds_count\{listener="test",method="GET",route="unmatched",status="414"\} 1/, 'the 414 is counted')
  t.match(text, /agent_gateway_http_request_duration_seconds_count\{listener="test",method="GET",route="\/services\/:slug",status="200"\} 1/)
})

t.test('every response carries x-request-id and is counted once', async (t) => {
  const { app, metrics } = build()
  t.teardown(() => app.close())
  const responses = [
    await app.inject({ method: 'GET', url: '/items?page=2' }),
    await app.inject({ method: 'GET', url: '/items?page=0' }),
    await app.inject({ method: 'GET', url: '/nowhere' }),
    await app.inject({ method: 'POST', url: '/plain', headers: { 'content-type': 'application/json' }, payload: '{"env": ' }),
    await app.inject({ method: 'GET', url: '/healthz' }),
  ]
  t.same(
    responses.map((r) => r.statusCode),
    [200, 400, 404, 400, 200],
  )
  for (const response of responses) t.match(response.headers['x-request-id'], /^[A-Za-z0-9_-]+-\d+$/)
  const text = await metrics.render()
  const count = (route: string, status: number) =>
    Number(text.match(new RegExp(`_count\\{listener="test",method="[A-Z]+",route="${route}",status="${status}"\\} (\\d+)`))?.[1] ?? 0)
  t.equal(count('/items', 200), 1)
  t.equal(count('/items', 400), 1)
  t.equal(count('unmatched', 404), 1)
  t.equal(count('/plain', 400), 1)
  t.equal(count('/healthz', 200), 1)
})

t.test('every registry route compiles and answers without a 5xx', async (t) => {
  const urls = { gateway: 'http://gw.test', scheduler: 'http://sched.test', memory: 'http://mem.test' }
  const catalog = createCatalog(registry, { urls, implemented: new Set(['getAgentGuide', 'postAgentGuide']) })
  const deps = {
    catalog,
    logger: createLogger('silent'),
    metrics: createMetrics({ defaultMetrics: false }),
    bodyLimitBytes: 1 << 20,
    payTo: '0x0000000000000000000000000000000000000001',
    readiness: {},
  }
  const scopes: ServerName[] = ['gateway', 'scheduler', 'memory']
  let answered = 0
  for (const scope of scopes) {
    const app = createServiceApp(scope, deps, scope === 'gateway' ? guideHandlers(catalog) : {})
    t.teardown(() => app.close())
    await app.ready()
    for (const entry of catalog.operationsOn(scope)) {
      const url = entry.spec.path.replace(/\{[^}]+\}/g, 'x1')
      const hasBody = entry.spec.schemas.body !== undefined
      const response = await app.inject({ method: entry.spec.method, url, ...(hasBody ? { payload: {} } : {}) })
      t.ok(response.statusCode < 500 || response.statusCode === 501, `${scope} ${entry.spec.method} ${url}: ${response.statusCode}`)
      t.ok(response.headers['x-request-id'], 'x-request-id')
      answered += 1
    }
    const discovery =
      scope === 'gateway'
        ? ['/openapi.json', '/manifest.json', '/services', '/services/songmodel-3-pro', '/llms.txt', '/llms-full.txt', '/auth.md']
        : ['/openapi.json', '/llms.txt']
    for (const url of discovery) t.equal((await app.inject({ method: 'GET', url })).statusCode, 200, `${scope} ${url}`)
  }
  t.equal(answered, catalog.operations.length, 'every operation answered')
})

t.test('prepared URLs are answered before routing, with a request id, and counted', async (t) => {
  const { app, metrics } = build()
  let hooks = 0
  app.addHook('onRequest', async () => {
    hooks += 1
  })
  app.get('/doc', async () => 'routed')
  app.get('/flaky', async () => 'routed after a failed prepared response')
  app.prepared.set('/doc', '/doc', (_request, response, id) => {
    response.writeHead(200, ['x-request-id', id, 'content-type', 'text/plain', 'content-length', '8'])
    response.end('prepared')
    return 200
  })
  app.prepared.set('/flaky', '/flaky', () => {
    throw new Error('not today')
  })
  // While closing, prepared URLs go to fastify, which answers 503 (return503OnClosing).
  let whileClosing: Response | undefined
  app.addHook('preClose', async () => {
    whileClosing = await fetch(`${base}/doc`)
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  const base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`

  const get = await fetch(`${base}/doc`, { headers: { 'x-request-id': 'caller-7' } })
  t.equal(get.status, 200)
  t.equal(await get.text(), 'prepared')
  t.equal(get.headers.get('x-request-id'), 'caller-7', "the caller's request id")
  const head = await fetch(`${base}/doc`, { method: 'HEAD' })
  t.equal(head.status, 200)
  t.equal(await head.text(), '', 'HEAD: no body')
  t.match(head.headers.get('x-request-id'), /-\d+$/, 'a generated request id')
  t.equal(hooks, 0, 'no fastify hook ran for the prepared URL')

  t.equal(await (await fetch(`${base}/doc?x=1`)).text(), 'routed', 'another query string is routed')
  t.equal(await (await fetch(`${base}/doc/`)).text(), 'routed', 'a trailing slash is routed')
  t.equal((await fetch(`${base}/doc`, { method: 'POST' })).status, 404, 'other methods are routed')
  const flaky = await fetch(`${base}/flaky`)
  t.equal(await flaky.text(), 'routed after a failed prepared response', 'a prepared response that throws before writing falls back to the route')
  t.equal(hooks, 4)

  const text = await metrics.render()
  const count = (method: string, route: string, status: number) =>
    Number(text.match(new RegExp(`_count\\{listener="test",method="${method}",route="${route.replace(/\//g, '\\/')}",status="${status}"\\} (\\d+)`))?.[1] ?? 0)
  t.equal(count('GET', '/doc', 200), 3, 'prepared and routed requests of the route are counted together')
  t.equal(count('HEAD', '/doc', 200), 1)
  t.equal(count('GET', '/flaky', 200), 1, 'the fallen-back request is counted once')

  await app.close()
  t.equal(whileClosing?.status, 503, 'a prepared URL answers 503 while the app closes')
})

t.test('prepared URLs added while serving are bounded, fixed ones are kept', async (t) => {
  const { app } = build()
  t.teardown(() => app.close())
  const respond = () => 200
  app.prepared.set('/fixed', '/fixed', respond)
  for (let i = 0; i < 1100; i++) app.prepared.set(`/dyn?i=${i}`, '/dyn', respond, { dynamic: true })
  t.ok(app.prepared.has('/fixed'))
  t.notOk(app.prepared.has('/dyn?i=0'), 'the oldest dynamic URL is gone')
  t.ok(app.prepared.has('/dyn?i=1099'))
  t.notOk(app.prepared.has('/dyn?i=75'))
  t.ok(app.prepared.has('/dyn?i=76'), '1024 dynamic URLs are kept')
})
