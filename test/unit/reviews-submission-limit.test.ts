// The review submission route has its own body limit (SUBMISSION_MAX_BYTES, stated by its registry
// entry), far under the listener's (BODY_LIMIT_BYTES, 16 MiB by default): a larger body answers
// 413 payload_too_large as problem+json before the handler runs; a body under it is parsed and
// validated as usual. The same route through the real CLI: test/e2e/reviews.test.ts.
import t from 'tap'
import { createCatalog } from '../../src/catalog/catalog.ts'
import { registry } from '../../src/catalog/registry.ts'
import { createServiceApp } from '../../src/catalog/service-app.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { SUBMISSION_MAX_BYTES } from '../../src/reviews/limits.ts'

const urls = { gateway: 'http://gw.test', scheduler: 'http://sched.test', memory: 'http://mem.test' }
const capability = 'c'.repeat(32)

/** A submission whose JSON text is exactly `bytes` long (the overall comment fills it). */
function submissionOf(bytes: number): string {
  const empty = JSON.stringify({ comment: '', pins: [], console: [] })
  return JSON.stringify({ comment: 'x'.repeat(bytes - empty.length), pins: [], console: [] })
}

t.test('submitReview: a body over SUBMISSION_MAX_BYTES is 413 payload_too_large before the handler', async (t) => {
  const reached: unknown[] = []
  const catalog = createCatalog(registry, { urls, implemented: new Set(['submitReview']) })
  const deps = {
    catalog,
    logger: createLogger('silent'),
    metrics: createMetrics({ defaultMetrics: false }),
    bodyLimitBytes: 16 * 1024 * 1024,
    payTo: '0x0000000000000000000000000000000000000001',
    readiness: {},
  }
  const app = createServiceApp('gateway', deps, {
    submitReview: async (request) => {
      reached.push(request.body)
      return {
        reviewId: '00000000-0000-4000-8000-000000000000',
        source: { kind: 'url', url: 'https://example.com/' },
        submittedAt: '2026-01-01T00:00:00.000Z',
        comment: '',
        pins: [],
        console: [],
      }
    },
  })
  t.teardown(() => app.close())
  const post = (payload: string) => app.inject({ method: 'POST', url: `/reviews/${capability}/submission`, headers: { 'content-type': 'application/json' }, payload })

  t.ok(SUBMISSION_MAX_BYTES < deps.bodyLimitBytes, 'the route limit is the smaller one, so it is the one that answers')
  const oversize = await post(submissionOf(SUBMISSION_MAX_BYTES + 1))
  t.equal(oversize.statusCode, 413)
  t.match(oversize.headers['content-type'], /^application\/problem\+json/)
  t.match(oversize.json(), { code: 'payload_too_large', status: 413 })

  const atLimit = await post(submissionOf(SUBMISSION_MAX_BYTES))
  t.equal(atLimit.statusCode, 400, 'a body of exactly the limit is parsed, then refused by the schema')
  t.match(atLimit.json(), { code: 'validation_error', field: 'body.comment' }, 'for its comment, not its size')
  t.same(reached, [], 'neither reached the handler')

  const small = await post(JSON.stringify({ comment: 'fine', pins: [], console: [] }))
  t.equal(small.statusCode, 200)
  t.same(reached, [{ comment: 'fine', pins: [], console: [] }], 'a valid submission reaches the handler')
})
