// End to end: the real CLI, over HTTP only. Drives the discovery surface, bad input, the
// 501 of not-yet-built operations (before any payment or credential), plans and advice limited to
// what is built, readiness and a clean SIGTERM.
import t, { type Test } from 'tap'
import { Validator } from '@seriousme/openapi-schema-validator'
import { startCli, type CliProcess } from '../helpers/cli.ts'

interface OpenapiDoc {
  openapi: string
  info: Record<string, unknown>
  paths: Record<string, Record<string, { operationId: string; 'x-payment-info': Record<string, unknown>; 'x-implemented': boolean }>>
}

function operationIds(doc: OpenapiDoc): string[] {
  return Object.values(doc.paths).flatMap((item) => Object.values(item).map((operation) => operation.operationId))
}

function nextLink(response: Response): string | undefined {
  const header = response.headers.get('link')
  const match = header?.match(/<([^>]+)>;\s*rel="next"/)
  return match?.[1]
}

let cli: CliProcess

interface Manifest {
  services: { slug: string; operations: { operationId: string; method: string; url: string; implemented: boolean }[] }[]
  plans: { id: string; covers: string[]; purchasable: boolean; reason?: string; purchase?: { url: string } }[]
}

/** What this build has built, from its own manifest (so the tests stay true as operations get built). */
async function manifest(): Promise<Manifest & { built: Set<string> }> {
  const body = (await (await fetch(`${cli.gateway}/manifest.json`)).json()) as Manifest
  const built = new Set(
    body.services
      .flatMap((service) => service.operations)
      .filter((operation) => operation.implemented)
      .map((operation) => operation.operationId),
  )
  return { ...body, built }
}

t.before(async () => {
  cli = await startCli({ env: { BODY_LIMIT_BYTES: '65536' } })
})

t.teardown(async () => {
  await cli?.stop('SIGKILL')
})

t.test('both listeners answer health and readiness probes', async (t) => {
  for (const base of [cli.gateway, cli.scheduler, cli.memory]) {
    const health = await fetch(`${base}/healthz`)
    t.equal(health.status, 200, `${base}/healthz`)
    t.same(await health.json(), { status: 'ok' })
    const ready = await fetch(`${base}/readyz`)
    t.equal(ready.status, 200, `${base}/readyz`)
    const body = (await ready.json()) as { status: string; checks: Record<string, boolean> }
    t.equal(body.status, 'ready')
    t.same(
      body.checks,
      base === cli.scheduler ? { database: true, kv: true, executor: true } : { database: true, kv: true },
      'the scheduler also needs its executor (the local sandbox)',
    )
  }
  t.match(cli.output(), /gateway\s+http:\/\/127\.0\.0\.1:\d+/)
  t.match(cli.output(), /scheduler\s+http:\/\/127\.0\.0\.1:\d+/)
})

t.test('openapi.json?q=song ranks the song operation first', async (t) => {
  const response = await fetch(`${cli.gateway}/openapi.json?q=song`)
  t.equal(response.status, 200)
  const doc = (await response.json()) as OpenapiDoc
  const first = Object.entries(doc.paths)[0]
  t.ok(first, 'at least one match')
  t.equal(first?.[0], '/api/v1/audio/songs/songmodel-3-pro')
  const operation = Object.values(first?.[1] ?? {})[0]
  t.equal(operation?.['x-payment-info'].access, 'payg')
  t.match(operation?.['x-payment-info'], { price: { amountMicros: '80000', amountUsd: '0.080000', per: 'song' }, includedUnits: 1 })
  // The embedded default has no Tempo RPC: MPP charges are not offered, so not listed.
  t.same(operation?.['x-payment-info'].protocols, ['x402'])
})

t.test('pages walk every operation exactly once and each page is valid OpenAPI 3.1', async (t) => {
  const manifest = (await (await fetch(`${cli.gateway}/manifest.json`)).json()) as { services: { operations: { operationId: string }[] }[] }
  const expected = manifest.services.flatMap((service) => service.operations.map((operation) => operation.operationId))
  t.ok(expected.length > 20, `registry holds ${expected.length} operations`)

  const seen: string[] = []
  let url: string | undefined = `${cli.gateway}/openapi.json`
  let pages = 0
  const validator = new Validator()
  while (url) {
    const response: Response = await fetch(url)
    t.equal(response.status, 200, url)
    const doc = (await response.json()) as OpenapiDoc
    const result = await validator.validate(doc as unknown as Parameters<Validator['validate']>[0])
    t.ok(result.valid, `page ${pages + 1} validates as OpenAPI ${validator.version}`, { errors: result.errors })
    t.equal(doc.openapi, '3.1.0')
    t.equal(doc.info.version, '1.0.0')
    const ids = operationIds(doc)
    t.ok(ids.length <= 10, 'at most 10 operations a page')
    seen.push(...ids)
    const link = nextLink(response)
    t.equal(link, doc.info['x-next'], 'Link header and info.x-next agree')
    url = link
    pages += 1
    if (pages > 20) break
  }
  t.equal(new Set(seen).size, seen.length, 'no operation twice')
  t.same([...seen].sort(), [...expected].sort(), 'every operation once')
  t.equal(pages, Math.ceil(expected.length / 10))

  const page2 = (await (await fetch(`${cli.gateway}/openapi.json?page=2`)).json()) as OpenapiDoc
  t.same(operationIds(page2), seen.slice(10, 20), '?page=2 is the second page')
})

t.test('path and method filters are exact and combine', async (t) => {
  const response = await fetch(`${cli.gateway}/openapi.json?path=${encodeURIComponent('/api/v1/tasks/{id}')}&method=delete`)
  const doc = (await response.json()) as OpenapiDoc
  t.same(Object.keys(doc.paths), ['/api/v1/tasks/{id}'])
  t.same(Object.keys(doc.paths['/api/v1/tasks/{id}'] ?? {}), ['delete'])
  const servers = (doc.paths['/api/v1/tasks/{id}']?.delete as unknown as { servers: { url: string }[] }).servers
  t.equal(servers[0]?.url, `http://127.0.0.1:${cli.env.SCHEDULER_PORT}`, 'scheduler operations name their server')
})

t.test('discovery documents', async (t) => {
  const services = (await (await fetch(`${cli.gateway}/services`)).json()) as { services: { slug: string }[] }
  t.ok(services.services.some((service) => service.slug === 'songmodel-3-pro'))
  const reviews = (await (await fetch(`${cli.gateway}/services/reviews-create`)).json()) as { access: string; plans: { id: string }[] }
  t.equal(reviews.access, 'plan')
  t.ok(reviews.plans.length >= 1, 'plan service lists its plans')
  const spec = (await (await fetch(`${cli.gateway}/services/songmodel-3-pro/openapi.json`)).json()) as OpenapiDoc
  t.same(Object.keys(spec.paths), ['/api/v1/audio/songs/songmodel-3-pro'])
  const unknown = await fetch(`${cli.gateway}/services/nope`)
  t.equal(unknown.status, 404)
  t.equal(unknown.headers.get('content-type'), 'application/problem+json; charset=utf-8')
  for (const doc of ['/llms.txt', '/llms-full.txt', '/auth.md']) {
    const response = await fetch(`${cli.gateway}${doc}`)
    t.equal(response.status, 200, doc)
    t.match(await response.text(), /songmodel-3-pro|auth\/register/, `${doc} is about this service`)
  }
  const scheduler = await fetch(`${cli.scheduler}/openapi.json`)
  const schedulerDoc = (await scheduler.json()) as OpenapiDoc
  t.ok(
    Object.keys(schedulerDoc.paths).every((p) => p.startsWith('/api/v1')),
    'scheduler openapi holds scheduler operations',
  )
  t.equal((await fetch(`${cli.scheduler}/llms.txt`)).status, 200)
})

t.test('advisor guide ranks from the registry, built operations only', async (t) => {
  const { built } = await manifest()
  for (const [goal, operationId] of [
    ['generate a song for my podcast intro', 'generateSongs'],
    ['make a song', 'generateSongs'],
    ['annotate my web page', 'createReviewSession'],
  ] as const) {
    const get = await fetch(`${cli.gateway}/advisor/agent/guide?goal=${encodeURIComponent(goal)}`)
    t.equal(get.status, 200)
    const guide = (await get.json()) as { recommendations: { operationId: string; implemented: boolean }[]; unavailable: { operationId: string }[]; steps: string[] }
    t.ok(
      guide.recommendations.every((recommendation) => built.has(recommendation.operationId) && recommendation.implemented),
      `${goal}: nothing unbuilt is recommended`,
    )
    if (built.has(operationId)) {
      t.equal(guide.recommendations[0]?.operationId, operationId, `${goal}: ${operationId} first`)
      t.ok(guide.steps.length > 0)
    } else {
      t.equal(guide.unavailable[0]?.operationId, operationId, `${goal}: ${operationId} is mentioned as not available yet`)
    }
  }
  const post = await fetch(`${cli.gateway}/advisor/agent/guide`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ goal: 'run a python script every hour' }),
  })
  t.equal(post.status, 200)
  const postGuide = (await post.json()) as { recommendations: { service: string }[]; steps: string[] }
  t.equal(postGuide.recommendations[0]?.service, 'scheduler')
  t.ok(postGuide.steps.length > 0)
})

t.test('discovery marks the plans that cannot be bought', async (t) => {
  const { plans, services, built } = await manifest()
  t.ok(plans.length > 0)
  for (const plan of plans) {
    const covered = services.filter((service) => plan.covers.includes(service.slug)).flatMap((service) => service.operations)
    const expected = covered.some((operation) => built.has(operation.operationId))
    t.equal(plan.purchasable, expected, `${plan.id}: purchasable iff it covers a built operation`)
    if (plan.purchasable) t.equal(plan.purchase?.url, `${cli.gateway}/plans/${plan.id}/purchase`)
    else t.ok(plan.reason && !plan.purchase, `${plan.id}: a reason and no purchase link`)
  }
  t.ok(
    plans.some((plan) => plan.purchasable),
    'something is for sale',
  )
  const llms = await (await fetch(`${cli.gateway}/llms.txt`)).text()
  for (const plan of plans) t.match(llms, new RegExp(`\`${plan.id}\`.*; ${plan.purchasable ? 'purchasable' : 'NOT purchasable'}`), `llms.txt marks ${plan.id}`)
  for (const service of services.filter((candidate) => candidate.operations.some((operation) => !built.has(operation.operationId)))) {
    const view = (await (await fetch(`${cli.gateway}/services/${service.slug}`)).json()) as { plans: { id: string; purchasable: boolean }[] }
    for (const plan of view.plans) t.equal(plan.purchasable, plans.find((candidate) => candidate.id === plan.id)?.purchasable, `/services/${service.slug} agrees on ${plan.id}`)
  }
})

async function expectProblem(t: Test, response: Response, status: number, field?: string) {
  t.equal(response.status, status)
  t.equal(response.headers.get('content-type'), 'application/problem+json; charset=utf-8')
  const body = (await response.json()) as Record<string, unknown>
  for (const key of ['type', 'title', 'status', 'detail', 'code']) t.ok(key in body, `problem has ${key}`)
  t.equal(body.status, status)
  t.notMatch(JSON.stringify(body), /at .*\.ts:\d+/, 'no stack trace')
  if (field) t.equal(body.field, field)
  return body
}

t.test('bad input gets problem+json 4xx, never 5xx', async (t) => {
  await expectProblem(t, await fetch(`${cli.gateway}/openapi.json?page=0`), 400, 'query.page')
  await expectProblem(t, await fetch(`${cli.gateway}/openapi.json?page=abc`), 400, 'query.page')
  await expectProblem(t, await fetch(`${cli.gateway}/openapi.json?method=FETCH`), 400, 'query.method')
  await expectProblem(t, await fetch(`${cli.gateway}/openapi.json?page=999`), 400, 'query.page')
  await expectProblem(t, await fetch(`${cli.gateway}/openapi.json?bogus=1`), 400, 'query.bogus')
  await expectProblem(t, await fetch(`${cli.gateway}/no/such/route`), 404)
  await expectProblem(t, await fetch(`${cli.scheduler}/api/v2/nothing`), 404)
  const guideUrl = `${cli.gateway}/advisor/agent/guide`
  await expectProblem(t, await fetch(guideUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"goal": ' }), 400, 'body')
  await expectProblem(t, await fetch(guideUrl, { method: 'POST', headers: { 'content-type': 'text/csv' }, body: 'goal,x' }), 415)
  await expectProblem(t, await fetch(guideUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ goal: 'x'.repeat(70_000) }) }), 413)
  await expectProblem(t, await fetch(guideUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({}) }), 400, 'body.goal')
  await expectProblem(t, await fetch(`${cli.gateway}/advisor/agent/guide`), 400, 'query.goal')
  const readiness = await fetch(`${cli.gateway}/readyz`)
  t.equal(readiness.status, 200, 'still healthy after bad input')
})

t.test('operations not built yet answer 501 and the catalog marks them', async (t) => {
  // Reviews were the last plan operation built: without a bearer they answer 401, never 501.
  const review = { url: 'https://example.com/', callbackUrl: 'https://example.com/callback', entryFile: 'index.html' }
  const body = await expectProblem(
    t,
    await fetch(`${cli.gateway}/api/v1/annotate/reviews`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(review) }),
    401,
  )
  t.equal(body.code, 'bearer_required', 'a built plan operation asks for the bearer')
  const doc = (await (await fetch(`${cli.gateway}/openapi.json?path=/api/v1/annotate/reviews`)).json()) as OpenapiDoc
  t.equal(doc.paths['/api/v1/annotate/reviews']?.post?.['x-implemented'], true)
  // Nothing that is not built is sold: an unbuilt paid operation answers 501 before any payment,
  // with no 402 challenge to pay.
  const { built, services } = await manifest()
  const bodies: Record<string, unknown> = { synthesizeSpeech: { text: 'hello' }, generateSongs: { prompt: 'lofi beat', candidateCount: 1 }, rememberMemory: { content: 'a fact' } }
  for (const [operationId, payload] of Object.entries(bodies)) {
    if (built.has(operationId)) continue
    const operation = services.flatMap((service) => service.operations).find((candidate) => candidate.operationId === operationId)
    if (!operation) throw new Error(`${operationId} is not in the manifest`)
    const response = await fetch(operation.url, { method: operation.method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(payload) })
    const problem = await expectProblem(t, response, 501)
    t.match(problem, { code: 'not_implemented', operationId, manifest: `${cli.gateway}/manifest.json` })
    t.equal(response.headers.get('payment-required'), null, `${operationId}: no PAYMENT-REQUIRED`)
    t.equal(response.headers.get('www-authenticate'), null, `${operationId}: no WWW-Authenticate`)
  }
})

t.test('scheduler discovery: catalog, rates and siblings', async (t) => {
  const index = (await (await fetch(`${cli.scheduler}/api/v1`)).json()) as { service: string; operations: { path: string }[]; links: Record<string, string> }
  t.equal(index.service, 'scheduler')
  t.ok(index.operations.some((operation) => operation.path === '/api/v1/tasks'))
  t.equal(index.links.rates, `${cli.scheduler}/api/v1/rates`)
  const rates = (await (await fetch(`${cli.scheduler}/api/v1/rates`)).json()) as {
    llm_profiles: Record<string, { max_cost_usdc_micros_per_run: string }>
    hard_caps: Record<string, number>
  }
  t.same(
    Object.fromEntries(Object.entries(rates.llm_profiles).map(([name, profile]) => [name, profile.max_cost_usdc_micros_per_run])),
    { quick: '50000', standard: '150000', bulk: '150000' },
    'SPEC default LLM reserves',
  )
  t.equal(rates.hard_caps.max_continuation_delay_sec, 600)
  const siblings = (await (await fetch(`${cli.scheduler}/api/v1/_siblings`)).json()) as { siblings: { name: string }[] }
  t.same(siblings.siblings.map((sibling) => sibling.name).sort(), ['cdn', 'forms', 'inbox', 'screenshot', 'urlshortener'])
  const unpaid = await fetch(`${cli.scheduler}/api/v1/tasks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': 'k1', 'x-pay-amount-micros': '1000000' },
    body: JSON.stringify({ runtime: 'python', source: 'print(1)', entrypoint: 'main.py', max_runtime_sec: 10, max_sibling_calls: 0, max_amount_usdc_micros: 1000000 }),
  })
  t.equal(unpaid.status, 402, 'creating a task asks for the escrow first')
  const required = JSON.parse(Buffer.from(unpaid.headers.get('payment-required') ?? '', 'base64').toString()) as { accepts: { amount: string }[] }
  t.equal(required.accepts[0]?.amount, '1000000', 'the 402 price is X-Pay-Amount-Micros')
})

t.test('metrics are exported', async (t) => {
  const metrics = await (await fetch(`${cli.gateway}/metrics`)).text()
  t.match(metrics, /agent_gateway_http_request_duration_seconds_bucket\{[^}]*listener="gateway"/)
})

t.test('documents carry an ETag, answer 304 and come compressed on request', async (t) => {
  const first = await fetch(`${cli.gateway}/manifest.json`)
  const etag = first.headers.get('etag')
  t.ok(etag, 'ETag present')
  const again = await fetch(`${cli.gateway}/manifest.json`, { headers: { 'if-none-match': etag ?? '' } })
  t.equal(again.status, 304)
  const { request } = await import('node:http')
  const encoding = await new Promise<string | undefined>((resolve, reject) => {
    const req = request(`${cli.gateway}/openapi.json?page=2`, { headers: { 'accept-encoding': 'gzip' } }, (res) => {
      res.resume()
      resolve(res.headers['content-encoding'])
    })
    req.on('error', reject)
    req.end()
  })
  t.equal(encoding, 'gzip')
})

t.test('SIGTERM drains and exits 0', async (t) => {
  const code = await cli.stop('SIGTERM')
  t.equal(code, 0)
  t.match(cli.output(), /agent-gateway ready/)
})
