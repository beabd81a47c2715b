// Strings the database cannot store (src/platform/text-safety.ts): U+0000 and unpaired UTF-16
// surrogates are found anywhere in parsed input (values and object keys, at any depth) and named
// as a field; legitimate Unicode passes; the scan is linear. Also the hook as createHttpApp
// installs it: a 400 problem+json naming the field for a body, a query string, a path parameter
// and a header, before schema validation.
import t from 'tap'
import { Type } from '@sinclair/typebox'
import { findUnsafeText, isSafeText, storableText, unsafeCharacter, unsafeTextError, unsafeTextField, unsafeTextInRequest } from '../../src/platform/text-safety.ts'
import { createHttpApp } from '../../src/platform/http.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import type { FastifyRequest } from 'fastify'

const LEGIT = [
  '',
  'plain ascii',
  'emoji 😀👍🏽 and flags 🇫🇷',
  'family 👨‍👩‍👧‍👦 (zero-width joiners)',
  'RTL: שלום עולם · مرحبا بالعالم \u202e override \u200f mark',
  'combining: e\u0301 a\u0308 Z\u0336\u0335',
  'zero-width: a\u200bb\u200cc\u200dd\ufeff',
  'controls other than NUL: \u0001\u0007\t\n\r\u001b\u007f\u0085',
  'noncharacters: \ufffe\uffff \u{10ffff}',
  'astral: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠜎',
  'replacement char \ufffd is fine',
]

t.test('isSafeText: NUL and unpaired surrogates only', async (t) => {
  for (const text of LEGIT) t.ok(isSafeText(text), `legitimate: ${JSON.stringify(text)}`)
  t.notOk(isSafeText('\u0000'), 'NUL alone')
  t.notOk(isSafeText('a\u0000b'), 'NUL inside')
  t.notOk(isSafeText('\ud800'), 'lone high surrogate')
  t.notOk(isSafeText('\udc00'), 'lone low surrogate')
  t.notOk(isSafeText('a\ud83d'), 'high surrogate at the end')
  t.notOk(isSafeText('\ude00a'), 'low surrogate at the start')
  t.notOk(isSafeText('\udc00\ud800'), 'a pair in the wrong order')
  t.notOk(isSafeText('😀\ud800😀'), 'a lone one between pairs')
})

t.test('unsafeCharacter: reason, index and code unit of the first offender', async (t) => {
  t.equal(unsafeCharacter('fine 😀'), undefined)
  t.same(unsafeCharacter('ab\u0000c'), { reason: 'nul', index: 2, codeUnit: 0 })
  t.same(unsafeCharacter('😀x\ud800'), { reason: 'lone_surrogate', index: 3, codeUnit: 0xd800 })
  t.same(unsafeCharacter('x\udfff'), { reason: 'lone_surrogate', index: 1, codeUnit: 0xdfff })
  t.same(unsafeCharacter('\ud800\u0000'), { reason: 'lone_surrogate', index: 0, codeUnit: 0xd800 }, 'the first offender wins')
  t.same(unsafeCharacter('\u0000\ud800'), { reason: 'nul', index: 0, codeUnit: 0 })
})

t.test('storableText: U+FFFD for what cannot be stored, the rest unchanged', async (t) => {
  for (const text of LEGIT) t.equal(storableText(text), text)
  t.equal(storableText('a\u0000b\ud800c\udc00😀'), 'a\ufffdb\ufffdc\ufffd😀')
  t.ok(isSafeText(storableText('\u0000\udfff\ud800')))
})

t.test('findUnsafeText: values and keys at any depth, named by path', async (t) => {
  t.equal(findUnsafeText(undefined), undefined)
  t.equal(findUnsafeText(null), undefined)
  t.equal(findUnsafeText(42), undefined)
  t.equal(findUnsafeText({ a: [1, true, null, { b: LEGIT }], [LEGIT[2] as string]: LEGIT }), undefined, 'legitimate Unicode anywhere passes')
  t.match(findUnsafeText('a\u0000'), { path: [], inKey: false, reason: 'nul' })
  t.match(findUnsafeText({ source: 'print(1)\u0000' }), { path: ['source'], inKey: false, reason: 'nul', index: 8 })
  t.match(findUnsafeText({ env: { MY_KEY: 'v\ud800' } }), { path: ['env', 'MY_KEY'], inKey: false, reason: 'lone_surrogate' })
  t.match(findUnsafeText({ env: { 'MY\u0000KEY': 'v' } }), { path: ['env', 'MY\u0000KEY'], inKey: true, reason: 'nul', index: 2 })
  t.match(findUnsafeText({ tags: ['ok', 'ok', '\udc00'] }), { path: ['tags', 2], inKey: false })
  t.match(findUnsafeText([[['x', { deep: ['\u0000'] }]]]), { path: [0, 0, 1, 'deep', 0] })
  t.equal(findUnsafeText({ bytes: Buffer.from([0, 0xed, 0xa0, 0x80]) }), undefined, 'bytes are not text')
  t.equal(findUnsafeText(new Uint8Array([0])), undefined)
  const query = Object.create(null) as Record<string, unknown>
  query.q = ['fine', 'bad\u0000']
  t.match(findUnsafeText(query), { path: ['q', 1] }, 'null-prototype objects (parsed query strings) too')
})

t.test('deep nesting does not overflow the stack', async (t) => {
  let value: unknown = 'x\u0000'
  for (let i = 0; i < 200_000; i++) value = [value]
  const found = findUnsafeText(value)
  t.equal(found?.path.length, 200_000)
  t.equal(found?.reason, 'nul')
  let clean: unknown = 'fine'
  for (let i = 0; i < 200_000; i++) clean = { a: clean }
  t.equal(findUnsafeText(clean), undefined)
})

t.test('a body-limit-sized string or body of NULs is judged at once', async (t) => {
  // No clock here (a loaded machine makes any threshold flaky): a scan that were quadratic in these
  // 16 Mi inputs would run for hours, and the file's timeout fails it.
  const nuls = '\u0000'.repeat(16 << 20)
  t.match(findUnsafeText({ source: nuls }), { path: ['source'], reason: 'nul', index: 0 }, 'a 16 Mi-character string of NULs')
  const clean = 'é😀'.repeat(4 << 20)
  t.equal(findUnsafeText({ source: clean }), undefined, 'a 12 Mi-code-unit clean string')
  const trailing = `${'a'.repeat(16 << 20)}\ud800`
  t.match(findUnsafeText({ source: trailing }), { reason: 'lone_surrogate', index: 16 << 20 }, 'a lone surrogate at the end of 16 Mi characters')
  const many = Array.from({ length: 200_000 }, (_, i) => ({ [`k${i}`]: 'v' }))
  many.push({ last: '\u0000' })
  t.match(findUnsafeText(many), { path: [200_000, 'last'] }, '200,000 small objects')
})

t.test('field names and problems', async (t) => {
  t.equal(unsafeTextField('body', { path: ['env', 'MY_KEY'], inKey: false, reason: 'nul', index: 0, codeUnit: 0 }), 'body.env.MY_KEY')
  t.equal(unsafeTextField('body', { path: [], inKey: false, reason: 'nul', index: 0, codeUnit: 0 }), 'body')
  t.equal(
    unsafeTextField('body', { path: ['env', 'MY\u0000KEY'], inKey: true, reason: 'nul', index: 2, codeUnit: 0 }),
    'body.env.MY\\u0000KEY',
    'an unsafe key is spelled out, never echoed raw',
  )
  t.equal(
    unsafeTextField('query', { path: ['x\ud800y😀'], inKey: true, reason: 'lone_surrogate', index: 1, codeUnit: 0xd800 }),
    'query.x\\ud800y😀',
    'pairs stay, lone halves are spelled out',
  )
  const long = unsafeTextField('body', { path: [`${'k'.repeat(1000)}\u0000`], inKey: true, reason: 'nul', index: 1000, codeUnit: 0 })
  t.ok(long.length < 80 && long.endsWith('…'), 'a long key is cut')
  const nul = unsafeTextError('body', { path: ['source'], inKey: false, reason: 'nul', index: 1, codeUnit: 0 }).toProblem('/x')
  t.match(nul, { status: 400, code: 'validation_error', field: 'body.source', detail: /^body\.source contains U\+0000 \(NUL\) at index 1/ })
  const key = unsafeTextError('body', { path: ['env', 'A\u0000'], inKey: true, reason: 'nul', index: 1, codeUnit: 0 }).toProblem()
  t.match(key, { field: 'body.env.A\\u0000', detail: /has a key that contains U\+0000/ })
  const lone = unsafeTextError('query', { path: ['q'], inKey: false, reason: 'lone_surrogate', index: 0, codeUnit: 0xdbff }).toProblem()
  t.match(lone, { field: 'query.q', detail: /unpaired UTF-16 surrogate \(U\+DBFF\)/ })
  t.ok(isSafeText(JSON.stringify(key)), 'the problem itself is storable text')
})

t.test('unsafeTextInRequest: params, body, query, headers', async (t) => {
  const request = (parts: Partial<Record<'params' | 'body' | 'query' | 'headers', unknown>>) =>
    ({ params: {}, query: {}, headers: {}, body: undefined, ...parts }) as unknown as FastifyRequest
  t.equal(unsafeTextInRequest(request({ body: { a: 'b' }, query: { q: 'x' }, headers: { host: 'h' } })), undefined)
  t.equal(unsafeTextInRequest(request({ params: { id: '\u0000' } }))?.field, 'path.id')
  t.equal(unsafeTextInRequest(request({ body: 'raw\u0000' }))?.field, 'body')
  t.equal(unsafeTextInRequest(request({ query: { q: '\ud800' } }))?.field, 'query.q')
  t.equal(unsafeTextInRequest(request({ headers: { 'idempotency-key': 'k\u0000' } }))?.field, 'header.idempotency-key')
  t.equal(unsafeTextInRequest(request({ headers: { 'x-many': ['ok', 'k\udc00'] } }))?.field, 'header.x-many.1')
})

t.test('the hook on every createHttpApp listener: 400 naming the field, before the schema', async (t) => {
  const app = createHttpApp({ name: 'test', logger: createLogger('silent'), metrics: createMetrics({ defaultMetrics: false }), bodyLimitBytes: 32 << 20 })
  t.teardown(() => app.close())
  const seen: unknown[] = []
  app.post(
    '/tasks',
    { schema: { body: Type.Object({ source: Type.String({ maxLength: 10 }), env: Type.Optional(Type.Record(Type.String(), Type.String())) }, { additionalProperties: false }) } },
    async (request) => {
      seen.push(request.body)
      return { ok: true }
    },
  )
  app.get('/items/:id', { schema: { params: Type.Object({ id: Type.String() }), querystring: Type.Object({ q: Type.Optional(Type.String()) }) } }, async () => ({ ok: true }))
  app.post('/loose', async (request) => ({ body: request.body })) // no schema at all: still covered
  app.get('/numbers/:n', { schema: { params: Type.Object({ n: Type.Integer() }) } }, async () => ({ ok: true }))
  const post = (url: string, payload: string, headers: Record<string, string> = {}) =>
    app.inject({ method: 'POST', url, payload, headers: { 'content-type': 'application/json', ...headers } })

  const cases: [string, string, string][] = [
    ['NUL in a value', '{"source":"a\\u0000b"}', 'body.source'],
    ['a lone high surrogate', '{"source":"a\\ud800b"}', 'body.source'],
    ['a lone low surrogate', '{"source":"\\udc00"}', 'body.source'],
    ['NUL in a map value', '{"source":"x","env":{"MY_KEY":"\\u0000"}}', 'body.env.MY_KEY'],
    ['NUL in a map key', '{"source":"x","env":{"MY\\u0000KEY":"v"}}', 'body.env.MY\\u0000KEY'],
    ['NUL in an unknown field (reported before additionalProperties)', '{"source":"x","colour":"\\u0000"}', 'body.colour'],
  ]
  for (const [what, payload, field] of cases) {
    const response = await post('/tasks', payload)
    t.equal(response.statusCode, 400, what)
    t.equal(response.headers['content-type'], 'application/problem+json; charset=utf-8')
    t.match(response.json(), { code: 'validation_error', field }, what)
  }
  t.equal((await post('/loose', '{"a":["\\u0000"]}')).json().field, 'body.a.0', 'a route without schemas')

  const fine = await post('/tasks', JSON.stringify({ source: '👨‍👩‍👧😀e\u0301', env: { שלום: 'مرحبا\u200d' } }))
  t.equal(fine.statusCode, 200, 'legitimate Unicode passes')
  t.same(seen.at(-1), { source: '👨‍👩‍👧😀e\u0301', env: { שלום: 'مرحبا\u200d' } }, 'and arrives unchanged')
  t.equal((await post('/tasks', '{"source":"😀\\ud83d\\ude00"}')).statusCode, 200, 'an escaped surrogate pair is a character')

  const query = await app.inject({ method: 'GET', url: '/items/1?q=a%00b' })
  t.equal(query.statusCode, 400)
  t.match(query.json(), { code: 'validation_error', field: 'query.q' })
  const param = await app.inject({ method: 'GET', url: '/items/a%00b' })
  t.equal(param.statusCode, 400)
  t.match(param.json(), { code: 'validation_error', field: 'path.id' })
  t.match((await app.inject({ method: 'GET', url: '/numbers/x' })).json(), { field: 'path.n' }, 'schema errors of path parameters are named path.<name> too')
  // UTF-8 has no surrogates: their would-be bytes are invalid percent-encoding, left as sent in a
  // query string and refused in a path; neither decodes to a lone surrogate.
  const surrogateQuery = await app.inject({ method: 'GET', url: '/items/1?q=%ED%A0%80' })
  t.equal(surrogateQuery.statusCode, 200, 'invalid UTF-8 in a query string stays percent-encoded text')
  const surrogatePath = await app.inject({ method: 'GET', url: '/items/%ED%A0%80' })
  t.match(surrogatePath.json(), { status: 400, field: 'path' }, 'and is refused in a path')

  // Node's HTTP parser refuses NUL in header values itself; a header reaching the app (inject, a
  // proxy's HTTP/2) is scanned all the same.
  const header = await app.inject({ method: 'GET', url: '/items/1', headers: { 'idempotency-key': 'k\ud800' } })
  t.equal(header.statusCode, 400)
  t.match(header.json(), { code: 'validation_error', field: 'header.idempotency-key' })

  // A 16 MiB body of NUL escapes is refused, naming the field.
  const huge = `{"source":"${'\\u0000'.repeat((16 << 20) / 6)}"}`
  const hugeResponse = await post('/tasks', huge)
  t.equal(hugeResponse.statusCode, 400)
  t.match(hugeResponse.json(), { field: 'body.source' })
})
