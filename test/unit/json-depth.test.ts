// The JSON nesting bound (src/platform/json-depth.ts): every JSON body of every listener built by
// createHttpApp is refused at parsing when it nests deeper than MAX_JSON_DEPTH, a 400 naming its
// outermost member, before any schema, hook or handler; the walk is iterative (100,000 levels do
// not overflow the stack). canonicalJson and the memory write's canonical body do not overflow
// on deep input either.
import t from 'tap'
import { createHttpApp } from '../../src/platform/http.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { canonicalJson } from '../../src/platform/canonical-json.ts'
import { MAX_JSON_DEPTH, bodyDepthError, memberDepthError, nestsDeeperThan } from '../../src/platform/json-depth.ts'
import { canonicalBody } from '../../src/memory/service.ts'
import { isAppError } from '../../src/platform/errors.ts'
import { readFileSync } from 'node:fs'

/** An object nested `levels` deep (`{}` is 1 level). */
function nestedObject(levels: number): Record<string, unknown> {
  let value: Record<string, unknown> = {}
  for (let i = 1; i < levels; i++) value = { a: value }
  return value
}

/** The same as raw JSON text. */
function nestedText(levels: number): string {
  return `${'{"a":'.repeat(levels - 1)}{}${'}'.repeat(levels - 1)}`
}

t.test('nestsDeeperThan counts objects and arrays, the value itself as level 1', async (t) => {
  t.equal(nestsDeeperThan('x', 0), false, 'a scalar has no levels')
  t.equal(nestsDeeperThan({}, 1), false)
  t.equal(nestsDeeperThan({}, 0), true)
  t.equal(nestsDeeperThan({ a: [1, { b: null }] }, 3), false)
  t.equal(nestsDeeperThan({ a: [1, { b: null }] }, 2), true)
  t.equal(nestsDeeperThan([[], [[]], 'x', { a: [[]] }], 4), false, 'the deepest branch decides')
  t.equal(nestsDeeperThan([[], [[]], 'x', { a: [[]] }], 3), true)
  t.equal(nestsDeeperThan(nestedObject(MAX_JSON_DEPTH), MAX_JSON_DEPTH), false)
  t.equal(nestsDeeperThan(nestedObject(MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH), true)
  t.equal(nestsDeeperThan(JSON.parse(nestedText(200_000)), MAX_JSON_DEPTH), true, '200,000 levels: no stack overflow')
})

t.test('bodyDepthError names the outermost member that is too deep', async (t) => {
  t.equal(bodyDepthError({ content: 'x', metadata: nestedObject(MAX_JSON_DEPTH - 1) }), undefined, 'at the limit')
  const error = bodyDepthError({ content: 'x', tags: [], metadata: nestedObject(MAX_JSON_DEPTH) })
  t.ok(isAppError(error))
  t.match(error?.toProblem(), {
    status: 400,
    code: 'validation_error',
    field: 'body.metadata',
    detail: new RegExp(`at most ${MAX_JSON_DEPTH} levels`),
    errors: [{ field: 'body.metadata' }],
  })
  t.equal(bodyDepthError(JSON.parse(`[1,${'['.repeat(100)}${']'.repeat(100)}]`))?.field, 'body.1', 'an array body names the index')
  t.equal(memberDepthError(nestedObject(MAX_JSON_DEPTH - 1), 'body.metadata'), undefined)
  t.equal(memberDepthError(nestedObject(MAX_JSON_DEPTH), 'body.metadata')?.field, 'body.metadata')
})

t.test('every JSON body of a createHttpApp listener is bounded at parsing', async (t) => {
  const app = createHttpApp({ name: 'test', logger: createLogger('silent'), metrics: createMetrics({ defaultMetrics: false }), bodyLimitBytes: 4 << 20 })
  let handled = 0
  // No body schema, a free-form one, and a route-level preValidation (an access rule's place).
  app.post('/free', async () => ({ ok: ++handled }))
  app.post('/schema', { schema: { body: { type: 'object', additionalProperties: true } } }, async () => ({ ok: ++handled }))
  app.post(
    '/guarded',
    {
      preValidation: async () => {
        throw new Error('the access rule must not run')
      },
    },
    async () => ({ ok: ++handled }),
  )
  t.teardown(() => app.close())
  const post = (url: string, payload: string) => app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload })

  for (const url of ['/free', '/schema', '/guarded']) {
    for (const levels of [MAX_JSON_DEPTH, 5_000, 100_000]) {
      const answer = await post(url, `{"ok":1,"metadata":${nestedText(levels)}}`)
      t.equal(answer.statusCode, 400, `${url}, metadata ${levels} levels: 400`)
      t.match(answer.json(), { code: 'validation_error', field: 'body.metadata' }, `${url}, metadata ${levels} levels: names the field`)
    }
  }
  t.equal(handled, 0, 'no handler ran')
  t.equal((await post('/schema', `{"metadata":${nestedText(MAX_JSON_DEPTH - 1)}}`)).statusCode, 200, 'a body at the limit is accepted')
  t.equal((await post('/free', '{"constructor":{"prototype":{"x":1}}}')).statusCode, 400, "fastify's prototype-poisoning refusal still applies")
  t.match((await post('/free', '{"a":')).json(), { code: 'malformed_json' }, 'malformed JSON is still malformed_json')
  t.match((await post('/free', '')).json(), { code: 'malformed_json' }, 'an empty JSON body too')
})

t.test('canonicalJson is iterative: deep input neither overflows nor changes the output', async (t) => {
  t.equal(canonicalJson({ b: 1n, a: [true, null, 'x', { d: 2, c: [] }], c: undefined, e: {} }), '{"a":[true,null,"x",{"c":[],"d":2}],"b":"1","e":{}}')
  t.equal(canonicalJson([]), '[]')
  t.equal(canonicalJson('x'), '"x"')
  t.throws(() => canonicalJson({ a: [Number.POSITIVE_INFINITY] }), TypeError)
  t.throws(() => canonicalJson({ a: () => 1 }), TypeError)
  t.equal(canonicalJson(JSON.parse(nestedText(100_000))), nestedText(100_000), '100,000 levels')
})

t.test("the memory write's canonical body refuses deep metadata with a 400, not a RangeError", async (t) => {
  t.equal(canonicalBody({ content: 'x', tags: ['t'], metadata: { b: 1, a: [2] } }), JSON.stringify(['x', null, ['t'], { b: 1, a: [2] }]), 'unchanged for a normal write')
  t.throws(() => canonicalBody({ content: 'x', metadata: JSON.parse(nestedText(100_000)) }), { code: 'validation_error', field: 'body.metadata' })
  t.throws(() => canonicalBody({ content: 'x', metadata: nestedObject(MAX_JSON_DEPTH) }), { code: 'validation_error', field: 'body.metadata' })
  t.doesNotThrow(() => canonicalBody({ content: 'x', metadata: nestedObject(MAX_JSON_DEPTH - 1) }))
})

t.test('docs/errors.md states the limit the code enforces', async (t) => {
  const doc = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8').replace(/\s+/g, ' ')
  t.ok(doc.includes(`nest objects and arrays at most ${MAX_JSON_DEPTH} levels deep`), 'docs/errors.md names MAX_JSON_DEPTH')
})
