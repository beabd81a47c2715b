// Nothing that is not built is sold. Everything is derived from the
// catalog's `implemented` set: an unbuilt operation answers 501 before any access rule (no 402,
// no 401/403, no debit), a plan covering only unbuilt operations cannot be bought (409
// plan_unavailable before the 402) and the discovery documents say so, and the advisor recommends
// built operations only. The access rule here is a stand-in that answers like the real one (402
// with challenge headers for payments, 401/403 for plan bearers) and records who reached it; the
// real rule runs in test/e2e/payments.test.ts and test/e2e/discovery.test.ts.
import t, { type Test } from 'tap'
import { Type } from '@sinclair/typebox'
import type { FastifyInstance } from 'fastify'
import { allOperations, registry } from '../../src/catalog/registry.ts'
import { createCatalog, type Catalog } from '../../src/catalog/catalog.ts'
import { createServiceApp } from '../../src/catalog/service-app.ts'
import { guideHandlers, type AccessWrapper, type HandlerTable } from '../../src/catalog/routes.ts'
import { buildGuide } from '../../src/catalog/advisor.ts'
import { authMd, llmsTxt, manifestView, serviceView } from '../../src/catalog/documents.ts'
import type { OperationSpec, Registry } from '../../src/catalog/types.ts'
import { AppError } from '../../src/platform/errors.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'

const urls = { gateway: 'http://gw.test', scheduler: 'http://sched.test', memory: 'http://mem.test' }
const payTo = '0x0000000000000000000000000000000000000001'

// A build without reviews: the gateway's own operations, songs and speech, the scheduler and
// memory; reviews are listed but not built. `partial` is an earlier build (no songs, no memory), for the unbuilt
// payg operations and the unbuilt operations of another listener.
const GATEWAY_BUILT = ['getAgentGuide', 'postAgentGuide', 'postAgentQuote', 'registerAgent', 'startAgentClaim', 'verifyAgentClaim', 'purchasePlan']
const operationsOf = (...services: string[]) =>
  allOperations()
    .filter((operation) => services.includes(operation.service))
    .map((operation) => operation.operationId)
const partial = new Set([...GATEWAY_BUILT, ...operationsOf('scheduler')])
const today = new Set([...partial, ...operationsOf('songmodel-3-pro', 'speechmodel-3.1-flash-tts', 'memory')])
const everything = new Set(allOperations().map((operation) => operation.operationId))
const catalogOf = (implemented: ReadonlySet<string>) => createCatalog(registry, { urls, implemented })

/** Answers like the real access rule, before any handler, and records which operations reached it. */
function standInAccess(reached: string[]): AccessWrapper {
  return (entry, handler) =>
    async function standIn(request, reply) {
      reached.push(entry.spec.operationId)
      if (entry.spec.proof === 'payment' || (entry.spec.proof === 'wallet' && entry.spec.server === 'gateway')) {
        throw new AppError('payment_required', 'pay first', { headers: { 'payment-required': 'e30=', 'www-authenticate': 'Payment id="x"' } })
      }
      if (entry.spec.proof === 'plan-bearer') {
        if (!request.headers.authorization) throw new AppError('bearer_required', 'send a token')
        throw new AppError('plan_required', 'buy a plan')
      }
      return handler(request, reply)
    }
}

/** Stand-in handlers for every operation the catalog calls built (the guide answers for real). */
function builtHandlers(catalog: Catalog): HandlerTable {
  const table: HandlerTable = Object.fromEntries(
    catalog.operations.filter((entry) => entry.implemented).map((entry) => [entry.spec.operationId, async () => ({ built: entry.spec.operationId })]),
  )
  return { ...table, ...guideHandlers(catalog) }
}

function apps(t: Test, catalog: Catalog, reached: string[]): Record<'gateway' | 'memory', FastifyInstance> {
  const deps = { catalog, logger: createLogger('silent'), metrics: createMetrics({ defaultMetrics: false }), bodyLimitBytes: 1 << 20, payTo, readiness: {} }
  const handlers = builtHandlers(catalog)
  const gateway = createServiceApp('gateway', deps, handlers, standInAccess(reached))
  const memory = createServiceApp('memory', deps, handlers, standInAccess(reached))
  t.teardown(() => Promise.all([gateway.close(), memory.close()]))
  return { gateway, memory }
}

const noChallenge = (t: Test, headers: Record<string, unknown>, what: string) => {
  t.equal(headers['payment-required'], undefined, `${what}: no PAYMENT-REQUIRED`)
  t.equal(headers['www-authenticate'], undefined, `${what}: no WWW-Authenticate`)
}

t.test('an unbuilt operation answers 501 before any access rule: no 402, no 401/403, nothing debited', async (t) => {
  const reached: string[] = []
  const { gateway, memory } = apps(t, catalogOf(partial), reached)

  const song = await gateway.inject({ method: 'POST', url: '/api/v1/audio/songs/songmodel-3-pro', payload: { prompt: 'lofi beat', candidateCount: 1 } })
  t.equal(song.statusCode, 501, 'unbuilt payg operation: 501, not 402')
  noChallenge(t, song.headers, 'payg')
  const problem = song.json() as Record<string, unknown>
  t.match(problem, { code: 'not_implemented', operationId: 'generateSongs', implemented: false, manifest: 'http://gw.test/manifest.json' })
  t.match(problem.detail, /nothing was charged/)

  for (const headers of [{}, { authorization: 'Bearer agw_unknown' }]) {
    const review = await gateway.inject({ method: 'POST', url: '/api/v1/annotate/reviews', headers, payload: { url: 'https://example.com' } })
    t.equal(review.statusCode, 501, `unbuilt plan operation ${JSON.stringify(headers)}: 501, not 401/403`)
    noChallenge(t, review.headers, 'plan')
    t.equal((review.json() as { code: string }).code, 'not_implemented')
  }

  const remember = await memory.inject({ method: 'POST', url: '/api/v1/memories', payload: { content: 'a fact' } })
  t.equal(remember.statusCode, 501, 'unbuilt operation on another listener')
  t.equal((remember.json() as { manifest: string }).manifest, 'http://gw.test/manifest.json', 'the 501 points at the gateway manifest')
  noChallenge(t, remember.headers, 'memory')

  t.same(reached, [], 'no unbuilt operation reached the access rule')

  // Built operations are still behind their access rule.
  const quote = await gateway.inject({ method: 'POST', url: '/advisor/agent/quote', payload: { goal: 'run a script' } })
  t.equal(quote.statusCode, 402)
  t.ok(quote.headers['payment-required'])
  t.same(reached, ['postAgentQuote'])
})

t.test('a bad body is still refused by the schema, before the 501', async (t) => {
  const { gateway } = apps(t, catalogOf(partial), [])
  const bad = await gateway.inject({ method: 'POST', url: '/api/v1/audio/songs/songmodel-3-pro', payload: { prompt: 'x', candidateCount: 4 } })
  t.equal(bad.statusCode, 400)
})

t.test('a plan is purchasable only while it covers a built operation', async (t) => {
  const catalog = catalogOf(today)
  const unsold = catalog.plans.filter((plan) => !plan.purchasable).map((plan) => plan.spec.id)
  t.same(unsold.sort(), ['reviews-credit-5', 'reviews-monthly'])
  for (const plan of catalog.plans) {
    const covered = catalog.operations.filter((entry) => plan.spec.covers.includes(entry.service.slug))
    t.equal(
      plan.purchasable,
      covered.some((entry) => entry.implemented),
      `${plan.spec.id}: purchasable iff a covered operation is built`,
    )
    t.same(
      plan.builtOperations,
      covered.filter((entry) => entry.implemented).map((entry) => entry.spec.operationId),
    )
    if (!plan.purchasable) t.match(plan.reason, /createReviewSession/, 'the reason names the unbuilt operations')
    else t.equal(plan.reason, undefined)
  }
  t.ok(catalog.plan('scheduler-credit-5')?.builtOperations.includes('createTask'))
  t.equal(catalog.plan('no-such-plan'), undefined)
  t.ok(
    catalogOf(everything).plans.every((plan) => plan.purchasable),
    'every plan goes on sale once its operations are built',
  )
  t.ok(catalogOf(new Set([...today, 'createReviewSession'])).plan('reviews-monthly')?.purchasable, 'one built operation is enough')
})

t.test('POST /plans/{planId}/purchase refuses an unpurchasable plan with 409 before the 402', async (t) => {
  const reached: string[] = []
  const { gateway } = apps(t, catalogOf(today), reached)
  for (const planId of ['reviews-credit-5', 'reviews-monthly']) {
    const refused = await gateway.inject({ method: 'POST', url: `/plans/${planId}/purchase`, headers: { 'svc-agent-authorization': 'Bearer agw_x' } })
    t.equal(refused.statusCode, 409, `${planId}: 409`)
    noChallenge(t, refused.headers, planId)
    const body = refused.json() as { code: string; planId: string; field: string; reason: string; plans: { id: string; purchasable: boolean }[]; manifest: string }
    t.match(body, { code: 'plan_unavailable', planId, field: 'path.planId', manifest: 'http://gw.test/manifest.json' })
    t.match(body.reason, /not built|none of/)
    t.same(
      body.plans.map((plan) => plan.id),
      ['scheduler-credit-5', 'memory-credit-5'],
      'it offers the plans that can be bought',
    )
    t.ok(body.plans.every((plan) => plan.purchasable))
  }
  const anonymous = await gateway.inject({ method: 'POST', url: '/plans/reviews-credit-5/purchase' })
  t.equal(anonymous.statusCode, 409, 'refused before asking for a buyer too')
  t.same(reached, [], 'the access rule (402) was never reached')

  const sold = await gateway.inject({ method: 'POST', url: '/plans/scheduler-credit-5/purchase', headers: { 'svc-agent-authorization': 'Bearer agw_x' } })
  t.equal(sold.statusCode, 402, 'a plan covering a built service still answers the 402')
  t.ok(sold.headers['payment-required'])
  t.same(reached, ['purchasePlan'])
})

t.test('the purchase follows the catalog: a plan goes on sale when a covered operation is built', async (t) => {
  const { gateway } = apps(t, catalogOf(new Set([...today, 'createReviewSession'])), [])
  const response = await gateway.inject({ method: 'POST', url: '/plans/reviews-credit-5/purchase', headers: { 'svc-agent-authorization': 'Bearer agw_x' } })
  t.equal(response.statusCode, 402)
})

t.test('discovery documents mark plans that cannot be bought', async (t) => {
  const catalog = catalogOf(today)
  const context = { catalog, payTo }
  const manifest = manifestView(context) as { plans: Record<string, unknown>[] }
  const byId = new Map(manifest.plans.map((plan) => [plan.id as string, plan]))
  t.same([...byId.keys()].sort(), ['memory-credit-5', 'reviews-credit-5', 'reviews-monthly', 'scheduler-credit-5'], 'every plan is listed once')
  for (const id of ['reviews-credit-5', 'reviews-monthly']) {
    const plan = byId.get(id)
    t.equal(plan?.purchasable, false, `${id} is marked`)
    t.match(plan?.reason, /not built|none of/)
    t.notOk(plan && 'purchase' in plan, `${id} has no purchase link`)
  }
  t.match(byId.get('scheduler-credit-5'), { purchasable: true, purchase: { method: 'POST', url: 'http://gw.test/plans/scheduler-credit-5/purchase' } })
  t.notOk(byId.get('scheduler-credit-5') && 'reason' in (byId.get('scheduler-credit-5') as object))

  const reviews = serviceView(context, 'reviews-create') as { plans: { id: string; purchasable: boolean }[]; howToBuy: string[] }
  t.ok(reviews.plans.length > 0 && reviews.plans.every((plan) => plan.purchasable === false), '/services/reviews-create marks its plans')
  t.match(reviews.howToBuy[0], /Not available yet/)
  t.notMatch(reviews.howToBuy.join(' '), /answers a priced 402/, 'no buying recipe for an unbuilt service')
  const scheduler = serviceView(context, 'scheduler') as { plans: { id: string; purchasable: boolean }[]; howToBuy: string[] }
  t.same(
    scheduler.plans.map((plan) => plan.purchasable),
    [true],
  )
  t.notMatch(scheduler.howToBuy[0], /Not available yet/)

  const llms = llmsTxt(context)
  t.match(llms, /`reviews-credit-5` \(credit\).*NOT purchasable/)
  t.match(llms, /`reviews-monthly` \(subscription\).*NOT purchasable/)
  t.match(llms, /`scheduler-credit-5` \(credit\).*; purchasable/)
  t.match(authMd(context), /`reviews-credit-5` \(credit\).*NOT purchasable/)

  const built = manifestView({ catalog: catalogOf(everything), payTo }) as { plans: Record<string, unknown>[] }
  t.ok(
    built.plans.every((plan) => plan.purchasable === true && 'purchase' in plan),
    'once built, every plan has its purchase link',
  )

  // Served as is.
  const { gateway } = apps(t, catalog, [])
  const served = (await gateway.inject({ method: 'GET', url: '/manifest.json' })).json() as { plans: { id: string; purchasable: boolean }[] }
  t.same(
    served.plans
      .filter((plan) => !plan.purchasable)
      .map((plan) => plan.id)
      .sort(),
    ['reviews-credit-5', 'reviews-monthly'],
  )
  const openapi = (await gateway.inject({ method: 'GET', url: '/openapi.json?path=/plans/x/purchase' })).json() as {
    paths: Record<string, Record<string, { description: string }>>
  }
  t.notMatch(openapi.paths['/plans/{planId}/purchase']?.post?.description ?? '', /reviews-/, 'the built purchase operation does not advertise plan ids')
})

t.test('the advisor recommends built operations only', async (t) => {
  // The build before songs and memory: a goal whose operation is not built yet.
  const catalog = catalogOf(partial)
  const goals = [
    'annotate my web page',
    'make a song',
    'generate a song for my podcast intro',
    'text to speech narration',
    'human feedback on my website',
    'remember facts about the user',
    'run a python script every hour',
    'buy a subscription plan',
  ]
  for (const goal of goals) {
    const guide = buildGuide(catalog, { goal })
    t.ok(
      guide.recommendations.every((recommendation) => partial.has(recommendation.operationId) && recommendation.implemented),
      `${goal}: nothing unbuilt is recommended`,
    )
    t.ok(
      guide.unavailable.every((entry) => !partial.has(entry.operationId)),
      `${goal}: unavailable lists unbuilt operations only`,
    )
    t.notMatch(JSON.stringify(guide.recommendations), /reviews-credit-5|reviews-monthly/, `${goal}: no unpurchasable plan is suggested`)
  }

  const annotate = buildGuide(catalog, { goal: 'annotate my web page' })
  t.notOk(annotate.recommendations.some((recommendation) => recommendation.service === 'reviews-create'))
  t.equal(annotate.unavailable[0]?.operationId, 'createReviewSession', 'the matching unbuilt operation is mentioned apart')
  t.match(annotate.notes.join(' '), /not available yet/i)

  const song = buildGuide(catalog, { goal: 'make a song' })
  t.notOk(song.recommendations.some((recommendation) => recommendation.operationId === 'generateSongs'))
  t.equal(song.unavailable[0]?.operationId, 'generateSongs')
  t.same(song.recommendations, [], 'weak built matches are not promoted in place of the song')
  t.match(song.notes.join(' '), /Nothing built matches "make a song" yet/)
  t.same(song.steps, [], 'no steps toward something that cannot be bought')

  t.equal(buildGuide(catalog, { goal: 'run a python script every hour' }).recommendations[0]?.operationId, 'createTask')
  t.same(buildGuide(catalog, { goal: 'run a python script every hour' }).unavailable, [])
  t.equal(buildGuide(catalog, { goal: 'buy a subscription plan' }).recommendations[0]?.operationId, 'purchasePlan')

  // Once built, the same goals recommend them.
  const built = catalogOf(everything)
  t.equal(buildGuide(built, { goal: 'make a song' }).recommendations[0]?.operationId, 'generateSongs')
  t.equal(buildGuide(built, { goal: 'annotate my web page' }).recommendations[0]?.operationId, 'createReviewSession')
  t.same(buildGuide(built, { goal: 'annotate my web page' }).unavailable, [])

  // Over HTTP the guide carries `unavailable` (the response schema keeps it).
  const { gateway } = apps(t, catalog, [])
  const served = (await gateway.inject({ method: 'GET', url: `/advisor/agent/guide?goal=${encodeURIComponent('annotate my web page')}` })).json() as {
    unavailable: { operationId: string }[]
  }
  t.equal(served.unavailable[0]?.operationId, 'createReviewSession')
})

t.test('the advisor never suggests a plan that cannot be bought', async (t) => {
  const op = (operationId: string, service: string, path: string, summary: string): OperationSpec => ({
    operationId,
    service,
    server: 'gateway',
    method: 'POST',
    path,
    summary,
    description: summary,
    tags: ['notes'],
    access: 'plan',
    proof: 'plan-bearer',
    pricing: { kind: 'plan-credit' },
    schemas: { body: Type.Object({ text: Type.String() }), response: { 200: Type.Object({}) } },
  })
  const meter = { name: 'requests', unit: 'request', unitPriceMicros: 1000n, includedUnits: 0 }
  const live = { id: 'notes-live', kind: 'credit' as const, title: 'Live', description: 'live', priceMicros: 1_000_000n, creditMicros: 1_000_000n, covers: ['notes'] }
  const dead = { id: 'drafts-dead', kind: 'credit' as const, title: 'Dead', description: 'dead', priceMicros: 1_000_000n, creditMicros: 1_000_000n, covers: ['drafts'] }
  const synthetic: Registry = {
    services: [
      {
        slug: 'notes',
        title: 'Notes',
        description: 'notes',
        server: 'gateway',
        access: 'plan',
        meter,
        plans: [live, dead],
        operations: [op('writeNote', 'notes', '/notes', 'Write a note')],
      },
      {
        slug: 'drafts',
        title: 'Drafts',
        description: 'drafts',
        server: 'gateway',
        access: 'plan',
        meter,
        plans: [dead],
        operations: [op('writeDraft', 'drafts', '/drafts', 'Write a draft note')],
      },
    ],
  }
  const catalog = createCatalog(synthetic, { urls, implemented: new Set(['writeNote']) })
  t.equal(catalog.plan('drafts-dead')?.purchasable, false)
  const guide = buildGuide(catalog, { goal: 'write a note' })
  t.equal(guide.recommendations[0]?.operationId, 'writeNote')
  t.match(guide.recommendations[0]?.howToPay, /notes-live/)
  t.notMatch(guide.recommendations[0]?.howToPay, /drafts-dead/, 'the unpurchasable plan is left out')
  t.notOk(
    guide.recommendations.some((recommendation) => recommendation.operationId === 'writeDraft'),
    'the unbuilt operation is not recommended',
  )
})
