import t from 'tap'
import { Type } from '@sinclair/typebox'
import { createCatalog, OPERATIONS_PER_PAGE, paginate } from '../../src/catalog/catalog.ts'
import type { OperationSpec, Registry, ServiceSpec } from '../../src/catalog/types.ts'

const urls = { gateway: 'http://gw.test', scheduler: 'http://sched.test', memory: 'http://mem.test' }

function op(partial: Partial<OperationSpec> & Pick<OperationSpec, 'operationId' | 'path' | 'summary'>): OperationSpec {
  return {
    service: 'svc',
    server: 'gateway',
    method: 'POST',
    description: partial.summary,
    tags: ['test'],
    access: 'payg',
    proof: 'payment',
    pricing: { kind: 'per-unit' },
    schemas: { body: Type.Object({ a: Type.String() }), response: { 200: Type.Object({ ok: Type.Boolean() }) } },
    ...partial,
  }
}

function service(slug: string, operations: OperationSpec[], extra: Partial<ServiceSpec> = {}): ServiceSpec {
  return {
    slug,
    title: slug,
    description: `${slug} service`,
    server: 'gateway',
    access: 'payg',
    meter: { name: 'things', unit: 'thing', unitPriceMicros: 1000n, includedUnits: 0 },
    plans: [],
    operations: operations.map((operation) => ({ ...operation, service: slug })),
    ...extra,
  }
}

const many = Array.from({ length: 23 }, (_, i) =>
  op({ operationId: `filler${i}`, path: `/api/v1/filler/${i}`, summary: `Filler operation number ${i}`, method: i % 2 ? 'GET' : 'POST' }),
)

const registry: Registry = {
  services: [
    service('songmodel-3-pro', [op({ operationId: 'generateSongs', path: '/api/v1/audio/songs/songmodel-3-pro', summary: 'Generate songs' })]),
    service('speech', [op({ operationId: 'speak', path: '/api/v1/audio/speech/x', summary: 'Text to speech', description: 'Speech, not a song' })]),
    service(
      'scheduler',
      [
        op({ operationId: 'getTask', method: 'GET', path: '/api/v1/tasks/{id}', summary: 'Fetch a task', server: 'scheduler', proof: 'wallet', pricing: { kind: 'free' } }),
        op({ operationId: 'deleteTask', method: 'DELETE', path: '/api/v1/tasks/{id}', summary: 'Delete a task', server: 'scheduler', proof: 'wallet', pricing: { kind: 'free' } }),
      ],
      { server: 'scheduler' },
    ),
    service('filler', many),
  ],
}

const catalog = createCatalog(registry, { urls, implemented: new Set(['generateSongs']) })

t.test('q ranks the best match first and only returns matches', async (t) => {
  const ranked = catalog.select({ q: 'song' })
  t.equal(ranked[0]?.spec.operationId, 'generateSongs')
  t.ok(ranked.every((entry) => ['generateSongs', 'speak'].includes(entry.spec.operationId)))
  t.same(catalog.select({ q: 'zzzqqq' }), [])
  t.equal(catalog.select({ q: 'songmodel' })[0]?.spec.operationId, 'generateSongs', 'slug search')
})

t.test('pages hold at most 10 operations and walk everything once', async (t) => {
  const total = catalog.operations.length
  const seen: string[] = []
  let page = 1
  for (;;) {
    const result = catalog.openapiPage({ page })
    const paths = result.document.paths as Record<string, Record<string, { operationId: string }>>
    const ids = Object.values(paths).flatMap((item) => Object.values(item).map((operation) => operation.operationId))
    t.ok(ids.length <= OPERATIONS_PER_PAGE)
    seen.push(...ids)
    t.equal((result.document.info as Record<string, unknown>)['x-next'], result.next)
    if (!result.next) break
    t.equal(result.next, `http://gw.test/openapi.json?page=${page + 1}`)
    page += 1
  }
  t.equal(page, Math.ceil(total / OPERATIONS_PER_PAGE))
  t.same(
    seen,
    catalog.operations.map((entry) => entry.spec.operationId),
  )
})

t.test('next links keep the filters', async (t) => {
  const result = catalog.openapiPage({ q: 'filler', method: 'get' })
  t.equal(result.total, 11)
  t.equal(result.next, 'http://gw.test/openapi.json?q=filler&method=GET&page=2')
})

t.test('path and method filters are exact and combine', async (t) => {
  t.same(
    catalog.select({ path: '/api/v1/tasks/{id}' }).map((e) => e.spec.operationId),
    ['getTask', 'deleteTask'],
  )
  t.same(
    catalog.select({ path: '/api/v1/tasks/tsk_123', method: 'DELETE' }).map((e) => e.spec.operationId),
    ['deleteTask'],
  )
  t.same(catalog.select({ path: '/api/v1/tasks' }), [])
  t.throws(() => catalog.select({ method: 'FETCH' }), { name: 'AppError', field: 'query.method', status: 400 })
})

t.test('page past the end is a 400 naming query.page', async (t) => {
  t.throws(() => catalog.openapiPage({ page: 99 }), { name: 'AppError', status: 400, field: 'query.page' })
  t.equal(catalog.openapiPage({ q: 'zzzqqq' }).pages, 1, 'an empty result is one empty page')
})

t.test('operations carry x-payment-info, servers and implementation status', async (t) => {
  const doc = catalog.openapiPage({ path: '/api/v1/tasks/{id}' }).document as { paths: Record<string, Record<string, Record<string, unknown>>> }
  const get = doc.paths['/api/v1/tasks/{id}']?.get
  t.same(get?.servers, [{ url: 'http://sched.test', description: 'scheduler service' }])
  t.equal(get?.['x-implemented'], false)
  t.match(get?.['x-payment-info'], { access: 'payg', pricing: 'free', price: { amountMicros: '0' } })
  const songs = catalog.openapiPage({ q: 'song' }).document as { paths: Record<string, Record<string, Record<string, unknown>>> }
  const generate = songs.paths['/api/v1/audio/songs/songmodel-3-pro']?.post
  t.equal(generate?.['x-implemented'], true)
  t.match(generate?.['x-payment-info'], { price: { amountMicros: '1000', amountUsd: '0.001000', per: 'thing' } })
  t.same((generate?.['x-payment-info'] as { protocols?: unknown } | undefined)?.protocols, ['x402'], 'MPP charges are listed only when offered (mppCharges)')
  t.ok((generate?.responses as Record<string, unknown>)['402'], 'payg operations document their 402')
})

t.test('two operations with one method and path never share a page', async (t) => {
  const twins = createCatalog(
    {
      services: [
        service('a', [op({ operationId: 'accountA', method: 'GET', path: '/api/v1/account', summary: 'Account of A' })]),
        service('b', [op({ operationId: 'accountB', method: 'GET', path: '/api/v1/account', summary: 'Account of B', server: 'memory' })], { server: 'memory' }),
        service('c', many.slice(0, 3)),
      ],
    },
    { urls, implemented: new Set() },
  )
  const pages = paginate(twins.operations)
  t.equal(pages.length, 2)
  t.same(
    pages[0]?.map((e) => e.spec.operationId),
    ['accountA', 'filler0', 'filler1', 'filler2'],
  )
  t.same(
    pages[1]?.map((e) => e.spec.operationId),
    ['accountB'],
  )
  const first = twins.openapiPage({ q: 'account' })
  t.equal(first.pages, 2)
  t.ok(first.next, 'the twin is on the next page')
})
