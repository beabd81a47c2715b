// End to end through the real CLI with real third-party clients: @x402/fetch (x402 v2 and v1)
// and the mppx client buy plans, settling on the embedded local EVM (anvil) and on a scripted
// Tempo JSON-RPC responder (no Tempo node can be installed here); replays are refused; the
// advisor takes single-use $0 proofs; nothing that is not built is sold (on the real gateway app
// with the review service unbuilt, its operations answer 501 before any access rule and its plans
// are refused with 409 before the 402); the plan bought (scheduler-credit-5) opens the scheduler's
// marketplace rail, which answers 401/403, never 402; claims go through the dev outbox; and
// everything survives a restart.
import t, { type Test } from 'tap'
import { mkdtempSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { x402Client } from '@x402/core/client'
import { decodePaymentResponseHeader } from '@x402/core/http'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { ExactEvmSchemeV1 } from '@x402/evm/exact/v1/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { Mppx, tempo } from 'mppx/client'
import { Receipt } from 'mppx'
import { createClient, http as viemHttp } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { tempo as tempoChain } from 'viem/tempo/chains'
import { startCli, type CliProcess } from '../helpers/cli.ts'
import { balanceOf, faucet } from '../helpers/dev-chain.ts'
import { startTempoRpc, type TempoRpcResponder } from '../helpers/tempo-rpc.ts'
import { memoryChain, memoryUsdc, type MemoryUsdc } from '../helpers/memory-chain.ts'
import { mediaDown } from '../helpers/media.ts'
import { registry } from '../../src/catalog/registry.ts'
import { createCatalog } from '../../src/catalog/catalog.ts'
import { buildGatewayApp } from '../../src/gateway/app.ts'
import { openPayments } from '../../src/payments/index.ts'
import { systemClock } from '../../src/platform/clock.ts'
import { openDb } from '../../src/platform/db/index.ts'
import { migrate, migrationsDir } from '../../src/platform/db/migrate.ts'
import { openKeyValue } from '../../src/platform/kv/index.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMailer } from '../../src/platform/mailer.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { IMPLEMENTED_OPERATIONS } from '../../src/runtime.ts'

// The plan the tests buy: one covering a built service (the scheduler's marketplace rail).
const PLAN = 'scheduler-credit-5'
const PLAN_PRICE = 5_000_000n

let cli: CliProcess
let rpc: TempoRpcResponder
const dataDir = mkdtempSync(path.join(os.tmpdir(), 'agw-pay-'))

t.before(async () => {
  rpc = await startTempoRpc()
  cli = await startCli({ dataDir, env: { TEMPO_RPC_URL: rpc.url } })
})
t.teardown(async () => {
  await cli?.stop('SIGKILL')
  await rpc?.close()
})

// Every operation the CLI lists is built, so what happens to an unbuilt one is shown on the real
// gateway app in this process, built as the CLI builds it but with the review service left out
// (its operations unbuilt in the catalog and without handlers), over PGlite and an in-memory USDC.
const UNBUILT_GATEWAY_URL = 'https://gw.unbuilt.test'
const UNBUILT_PAY_TO = '0x000000000000000000000000000000000000c0de'

async function reviewsUnbuilt(t: Test): Promise<{ base: string; token: MemoryUsdc }> {
  const logger = createLogger('silent')
  const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  await migrate(db, migrationsDir)
  const kv = await openKeyValue({ kind: 'memory' })
  const token = memoryUsdc()
  const payments = await openPayments({
    db,
    kv,
    logger,
    clock: systemClock,
    registry,
    dataDir: '',
    payTo: UNBUILT_PAY_TO,
    gatewayUrl: UNBUILT_GATEWAY_URL,
    chain: memoryChain(token),
    reconcileEveryMs: 0,
  })
  const reviewOperations = new Set(
    registry.services.filter((service) => service.slug === 'reviews-create').flatMap((service) => service.operations.map((operation) => operation.operationId)),
  )
  const catalog = createCatalog(registry, {
    urls: { gateway: UNBUILT_GATEWAY_URL, scheduler: 'https://scheduler.unbuilt.test', memory: 'https://memory.unbuilt.test' },
    implemented: new Set([...IMPLEMENTED_OPERATIONS].filter((operationId) => !reviewOperations.has(operationId))),
  })
  const mailer = createMailer({ from: 'test@localhost' })
  const app = buildGatewayApp({
    catalog,
    logger,
    metrics: createMetrics({ defaultMetrics: false }),
    bodyLimitBytes: 1_000_000,
    payTo: UNBUILT_PAY_TO,
    readiness: {},
    payments,
    mailer,
    db,
    media: { client: mediaDown },
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(async () => {
    await app.close()
    mailer.close()
    await payments.close()
    await kv.close()
    await db.close()
  })
  return { base: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, token }
}

async function json<T = Record<string, unknown>>(response: Response): Promise<T> {
  return (await response.json()) as T
}

async function register(gateway = cli.gateway): Promise<string> {
  const response = await fetch(`${gateway}/auth/register`, { method: 'POST' })
  t.equal(response.status, 201)
  return (await json<{ accessToken: string }>(response)).accessToken
}

/** Creates an on-demand scheduler task on the marketplace rail: the plan token alone, no payment. */
function marketplaceTask(token: string, key: string): Promise<Response> {
  return fetch(`${cli.scheduler}/api/v1/tasks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'idempotency-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ runtime: 'python', entrypoint: 'main.py', source: 'print("hi")', max_runtime_sec: 10, max_sibling_calls: 0, max_amount_usdc_micros: 5_000 }),
  })
}

/**
 * A fetch that records the payment header it sent, so the test can replay it. With `v1Only` it
 * hides the v2 PAYMENT-REQUIRED header, as a v1 client that reads only the JSON body would see.
 */
function recording(options: { v1Only?: boolean } = {}): { fetch: typeof fetch; sent: Headers[] } {
  const sent: Headers[] = []
  return {
    sent,
    fetch: async (input, init) => {
      const request = new Request(input, init)
      sent.push(new Headers(request.headers))
      const response = await fetch(request)
      if (!options.v1Only || response.status !== 402) return response
      const headers = new Headers(response.headers)
      headers.delete('payment-required')
      return new Response(await response.arrayBuffer(), { status: response.status, headers })
    },
  }
}

t.test('x402 v2 with @x402/fetch buys a plan, settles on the local EVM, and a replay is refused', async (t) => {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, 20_000_000n)
  const payeeBefore = await balanceOf(cli.gateway, '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266')
  const token = await register()
  const { fetch: tracked, sent } = recording()
  const payFetch = wrapFetchWithPayment(tracked, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))
  const response = await payFetch(`${cli.gateway}/plans/${PLAN}/purchase`, {
    method: 'POST',
    headers: { 'svc-agent-authorization': `Bearer ${token}` },
  })
  t.equal(response.status, 200)
  const body = await json<{ planId: string; status: string; creditMicros: string }>(response)
  t.match(body, { planId: PLAN, status: 'active', creditMicros: '5000000' })
  const receipt = decodePaymentResponseHeader(response.headers.get('payment-response') ?? '')
  t.equal(receipt.success, true)
  t.match(receipt.transaction, /^0x[0-9a-f]{64}$/)
  t.equal(await balanceOf(cli.gateway, buyer.address), 15_000_000n, 'buyer paid exactly the plan price')
  t.equal((await balanceOf(cli.gateway, '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266')) - payeeBefore, PLAN_PRICE, 'payee received it')

  const proof = sent.map((headers) => headers.get('payment-signature')).find(Boolean)
  t.ok(proof, 'the client sent PAYMENT-SIGNATURE')
  const replay = await fetch(`${cli.gateway}/plans/${PLAN}/purchase`, {
    method: 'POST',
    headers: { 'svc-agent-authorization': `Bearer ${token}`, 'payment-signature': proof ?? '' },
  })
  t.equal(replay.status, 402)
  t.equal((await json(replay)).reason, 'nonce_already_used')
  t.equal(await balanceOf(cli.gateway, buyer.address), 15_000_000n, 'nothing charged for the replay')

  // The plan now covers the scheduler: the token alone creates a task on the marketplace rail.
  const task = await marketplaceTask(token, 'x402-v2-plan')
  t.equal(task.status, 201, 'the bought plan opens the marketplace rail')
  t.match(await json(task), { rail: 'marketplace' })
  t.equal(task.headers.get('payment-response'), null, 'nothing paid for the task itself')
})

t.test('x402 v1 (X-PAYMENT) buys a plan', async (t) => {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, 5_000_000n)
  const token = await register()
  const { fetch: tracked, sent } = recording({ v1Only: true })
  const payFetch = wrapFetchWithPayment(tracked, new x402Client().registerV1('base', new ExactEvmSchemeV1(buyer)).setSpendControls(false))
  const response = await payFetch(`${cli.gateway}/plans/${PLAN}/purchase`, { method: 'POST', headers: { authorization: `Bearer ${token}` } })
  t.equal(response.status, 200)
  t.ok(response.headers.get('x-payment-response'), 'v1 receipt header')
  t.ok(
    sent.some((headers) => headers.get('x-payment')),
    'the v1 client sent X-PAYMENT',
  )
  t.equal(await balanceOf(cli.gateway, buyer.address), 0n)
})

t.test('MPP with the mppx client buys a plan through the Tempo RPC port, and a replay is refused', async (t) => {
  const account = privateKeyToAccount(generatePrivateKey())
  const token = await register()
  const authorizations: string[] = []
  const agent = Mppx.create({
    methods: [tempo({ account, getClient: () => createClient({ chain: tempoChain, transport: viemHttp(rpc.url, { retryCount: 0 }) }) })],
    polyfill: false,
    fetch: async (input, init) => {
      const authorization = new Headers(init?.headers).get('authorization')
      if (authorization) authorizations.push(authorization)
      return fetch(input, init)
    },
  })
  const broadcastsBefore = rpc.broadcasts.length
  const response = await agent.fetch(`${cli.gateway}/plans/${PLAN}/purchase`, {
    method: 'POST',
    headers: { 'svc-agent-authorization': `Bearer ${token}` },
  })
  t.equal(response.status, 200)
  const receipt = Receipt.fromResponse(response)
  t.equal(receipt.status, 'success')
  t.equal(rpc.broadcasts.length - broadcastsBefore, 1, 'one transaction broadcast')
  const credential = authorizations.find((value) => value.startsWith('Payment '))
  const replay = await fetch(`${cli.gateway}/plans/${PLAN}/purchase`, {
    method: 'POST',
    headers: { 'svc-agent-authorization': `Bearer ${token}`, authorization: credential ?? '' },
  })
  t.equal(replay.status, 402)
  t.equal(rpc.broadcasts.length - broadcastsBefore, 1, 'the replay broadcast nothing')
  const unpaid = await fetch(`${cli.gateway}/plans/${PLAN}/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${token}` } })
  t.match(unpaid.headers.get('www-authenticate'), /^Payment .*method="tempo"/, 'with TEMPO_RPC_URL a priced 402 advertises MPP')
  // ... and so does discovery (runtime.ts passes payments.mppCharges to createCatalog).
  const manifest = await json<{ protocols: { mpp: unknown }; services: { operations: { operationId: string; 'x-payment-info': { protocols: string[] } }[] }[] }>(
    await fetch(`${cli.gateway}/manifest.json`),
  )
  t.match(manifest.protocols.mpp, { charges: true, proofs: true })
  const purchase = manifest.services.flatMap((service) => service.operations).find((operation) => operation.operationId === 'purchasePlan')
  t.same(purchase?.['x-payment-info'].protocols, ['x402', 'mpp'], 'purchasePlan lists MPP')
})

t.test('advisor quote takes a single-use $0 wallet proof (x402 and MPP)', async (t) => {
  const wallet = privateKeyToAccount(generatePrivateKey())
  const url = `${cli.gateway}/advisor/agent/quote`
  const init = { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ goal: 'run a python script every hour', budgetMicros: '100000' }) }
  const unpaid = await fetch(url, init)
  t.equal(unpaid.status, 402)
  const required = JSON.parse(Buffer.from(unpaid.headers.get('payment-required') ?? '', 'base64').toString()) as { accepts: { amount: string }[] }
  t.equal(required.accepts[0]?.amount, '0', 'the quote costs 0')
  const { fetch: tracked, sent } = recording()
  const payFetch = wrapFetchWithPayment(tracked, new x402Client().register('eip155:8453', new ExactEvmScheme(wallet)).setSpendControls(false))
  const quote = await payFetch(url, init)
  t.equal(quote.status, 200)
  const guide = await json<{ recommendations: { service: string }[] }>(quote)
  t.equal(guide.recommendations[0]?.service, 'scheduler')
  const proof = sent.map((headers) => headers.get('payment-signature')).find(Boolean) ?? ''
  const reuse = await fetch(url, { ...init, headers: { ...init.headers, 'payment-signature': proof } })
  t.equal(reuse.status, 402, 'a $0 proof is single-use')

  const mppAgent = Mppx.create({
    methods: [tempo({ account: wallet, getClient: () => createClient({ chain: tempoChain, transport: viemHttp(rpc.url, { retryCount: 0 }) }) })],
    polyfill: false,
    fetch,
  })
  const requestsBefore = rpc.requests.length
  const mppQuote = await mppAgent.fetch(url, init)
  t.equal(mppQuote.status, 200, 'MPP $0 proof accepted')
  t.equal(rpc.requests.length - requestsBefore, 0, 'the $0 proof is verified locally: no Tempo RPC call')
})

/** The operations a gateway answers 501 for, and the plans it sells and does not, from its /manifest.json. */
async function unbuilt(gateway: string): Promise<{ operations: { operationId: string; method: string; url: string }[]; unsold: string[]; sold: string[] }> {
  const manifest = await json<{
    services: { operations: { operationId: string; method: string; url: string; implemented: boolean }[] }[]
    plans: { id: string; purchasable: boolean }[]
  }>(await fetch(`${gateway}/manifest.json`))
  return {
    operations: manifest.services.flatMap((service) => service.operations).filter((operation) => !operation.implemented),
    unsold: manifest.plans.filter((plan) => !plan.purchasable).map((plan) => plan.id),
    sold: manifest.plans.filter((plan) => plan.purchasable).map((plan) => plan.id),
  }
}

/** A request each unbuilt review operation's schema accepts, so only the missing handler can answer. */
const REVIEW_REQUESTS: Record<string, { method: string; path: string; body?: unknown }> = {
  createReviewSession: { method: 'POST', path: '/api/v1/annotate/reviews', body: { url: 'https://example.com' } },
  getReviewSession: { method: 'GET', path: '/api/v1/annotate/reviews/00000000-0000-4000-8000-000000000000' },
  submitReview: { method: 'POST', path: '/reviews/aaaaaaaaaaaaaaaaaaaaaaaa/submission', body: { comment: '', pins: [], console: [] } },
}

t.test('an unbuilt operation answers 501 before any access rule: no 401, no 403, no 402', async (t) => {
  const gateway = await reviewsUnbuilt(t)
  const { operations } = await unbuilt(gateway.base)
  t.same(operations.map((operation) => operation.operationId).sort(), Object.keys(REVIEW_REQUESTS).sort(), 'the fixture leaves exactly the review operations unbuilt')
  const token = await register(gateway.base)
  const credentials: [string, Record<string, string>][] = [
    ['no credential', {}],
    ['a registered token', { authorization: `Bearer ${token}` }],
    ['an unknown token', { authorization: 'Bearer agw_not-a-token' }],
  ]
  for (const [operationId, request] of Object.entries(REVIEW_REQUESTS)) {
    for (const [credential, headers] of credentials) {
      const what = `${operationId}, ${credential}`
      const response = await fetch(`${gateway.base}${request.path}`, {
        method: request.method,
        headers: request.body === undefined ? headers : { 'content-type': 'application/json', ...headers },
        body: request.body === undefined ? undefined : JSON.stringify(request.body),
      })
      t.equal(response.status, 501, `${what}: 501`)
      t.equal(response.headers.get('payment-required'), null, `${what}: no PAYMENT-REQUIRED`)
      t.equal(response.headers.get('www-authenticate'), null, `${what}: no WWW-Authenticate`)
      t.match(await json(response), { code: 'not_implemented', operationId, manifest: `${UNBUILT_GATEWAY_URL}/manifest.json` }, `${what}: not_implemented`)
    }
  }
})

t.test('the marketplace rail answers 401 and 403 with plans that can be bought, never 402', async (t) => {
  const { sold } = await unbuilt(cli.gateway)
  const anonymousKey = await marketplaceTask('agw_not-a-token', 'rail-unknown')
  t.equal(anonymousKey.status, 401)
  const problem = await json<{ code: string; recipe: { register: { url: string } } }>(anonymousKey)
  t.equal(problem.code, 'bearer_required')
  t.equal(problem.recipe.register.url, `${cli.gateway}/auth/register`)
  const token = await register()
  const noPlan = await marketplaceTask(token, 'rail-no-plan')
  t.equal(noPlan.status, 403)
  const refusal = await json<{ code: string; plans: { id: string }[] }>(noPlan)
  t.equal(refusal.code, 'plan_required')
  t.same(
    refusal.plans.map((plan) => plan.id),
    [PLAN],
  )
  t.ok(
    refusal.plans.every((plan) => sold.includes(plan.id)),
    'every plan offered can be bought',
  )
})

t.test('a plan covering only unbuilt operations is not sold: 409 before the 402', async (t) => {
  const gateway = await reviewsUnbuilt(t)
  const { unsold, sold } = await unbuilt(gateway.base)
  t.same(unsold.sort(), ['reviews-credit-5', 'reviews-monthly'], 'the review plans cover only unbuilt operations')
  t.ok(sold.includes(PLAN), `${PLAN} is purchasable`)
  const token = await register(gateway.base)
  const buyer = privateKeyToAccount(generatePrivateKey())
  gateway.token.mint(buyer.address, 20_000_000n)
  const payFetch = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))
  for (const planId of unsold) {
    for (const headers of [{}, { 'svc-agent-authorization': `Bearer ${token}` }] as Record<string, string>[]) {
      const refused = await fetch(`${gateway.base}/plans/${planId}/purchase`, { method: 'POST', headers })
      t.equal(refused.status, 409, `${planId}: 409, not 402`)
      t.equal(refused.headers.get('payment-required'), null)
      t.equal(refused.headers.get('www-authenticate'), null)
      const body = await json<{ code: string; planId: string; reason: string; plans: { id: string }[] }>(refused)
      t.match(body, { code: 'plan_unavailable', planId })
      t.ok(body.reason.length > 0, 'it says why')
      t.same(
        body.plans.map((plan) => plan.id),
        sold,
        'it offers what can be bought',
      )
    }
    // A paying client gets nowhere either: there is no challenge to pay.
    const paid = await payFetch(`${gateway.base}/plans/${planId}/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${token}` } })
    t.equal(paid.status, 409, `${planId}: a paying client gets 409`)
  }
  t.equal(gateway.token.balanceOf(buyer.address), 20_000_000n, 'nothing was charged')
  t.equal(gateway.token.transfers, 0, 'no transfer was mined')
  const offered = await fetch(`${gateway.base}/plans/${PLAN}/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${token}` } })
  t.equal(offered.status, 402, 'a plan covering a built service still answers the 402')
  t.ok(offered.headers.get('payment-required'))
})

t.test('bad payment input: malformed proofs and two credentials are 400, wrong ones 402 with a reason', async (t) => {
  const token = await register()
  const url = `${cli.gateway}/plans/${PLAN}/purchase`
  const send = (headers: Record<string, string>) => fetch(url, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${token}`, ...headers } })
  const malformed = await send({ 'payment-signature': 'not base64 at all!' })
  t.equal(malformed.status, 400)
  t.equal((await json(malformed)).reason, 'malformed')
  const both = await send({ 'payment-signature': 'e30=', 'x-payment': 'e30=' })
  t.equal(both.status, 400)
  t.equal((await json(both)).reason, 'multiple_credentials')
  const forged = await send({ authorization: 'Payment eyJjaGFsbGVuZ2UiOnt9fQ' })
  t.ok([400, 402].includes(forged.status), `forged MPP credential refused (${forged.status})`)
  const noBuyer = await fetch(url, { method: 'POST' })
  t.equal(noBuyer.status, 401, 'a plan purchase must name the buyer')
  const noPlan = await send({})
  t.equal(noPlan.status, 402)
  const missing = await fetch(`${cli.gateway}/plans/no-such-plan/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${token}` } })
  t.equal(missing.status, 404)
})

t.test('a human claims an agent through the e-mailed code', async (t) => {
  const token = await register()
  const start = await fetch(`${cli.gateway}/auth/claim`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'human@example.com' }),
  })
  t.equal(start.status, 202)
  const outbox = await json<{ messages: { to: string; text: string }[] }>(await fetch(`${cli.gateway}/dev/outbox`))
  const mail = outbox.messages.filter((message) => message.to === 'human@example.com').at(-1)
  const code = mail?.text.match(/Your code: (\S+)/)?.[1]
  t.ok(code, 'the outbox holds the code')
  const verify = await fetch(`${cli.gateway}/auth/claim/verify`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ code }) })
  t.equal(verify.status, 200)
  const claimed = await json<{ claimedEmail: string; includedUnits: { service: string; left: number }[] }>(verify)
  t.equal(claimed.claimedEmail, 'human@example.com')
  t.same(claimed.includedUnits.find((unit) => unit.service === 'songmodel-3-pro')?.left, 1)
})

t.test('agents, plans and chain balances survive a restart', async (t) => {
  const token = await register()
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, 5_000_000n)
  const payFetch = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))
  const bought = await payFetch(`${cli.gateway}/plans/${PLAN}/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${token}` } })
  t.equal(bought.status, 200)
  t.equal(await cli.stop('SIGTERM'), 0)
  cli = await startCli({ dataDir, env: { TEMPO_RPC_URL: rpc.url } })
  const task = await marketplaceTask(token, 'after-restart')
  t.equal(task.status, 201, 'token and plan still valid after restart')
  t.equal(await balanceOf(cli.gateway, buyer.address), 0n, 'chain state kept')
})
