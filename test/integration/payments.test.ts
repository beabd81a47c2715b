// The payment guard + access control of registry operations, end to end in one process: a fastify
// app built from the catalog (createHttpApp + mountOperations + payments.access.wrap) with this
// file's own handlers, a REAL local EVM (anvil dev chain from openPayments), and the REAL x402
// client (@x402/fetch + @x402/evm ExactEvmScheme). The whole suite runs on PGlite (memory://) and
// on a throw-away real Postgres database (skipped, with the reason, when Postgres is unreachable).
import { randomBytes, randomUUID } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import t from 'tap'
import type { Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { encodeAbiParameters, keccak256 } from 'viem'
import type { Address, Hex, LocalAccount } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { createHttpApp } from '../../src/platform/http.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { systemClock } from '../../src/platform/clock.ts'
import { AppError } from '../../src/platform/errors.ts'
import { openDb, type Db } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { openKeyValue, type KeyValue } from '../../src/platform/kv/index.ts'
import { registry } from '../../src/catalog/registry.ts'
import { createCatalog, type Catalog } from '../../src/catalog/catalog.ts'
import type { PlanSpec } from '../../src/catalog/types.ts'
import { mountOperations, type OperationHandler } from '../../src/catalog/routes.ts'
import { openPayments, type Payments } from '../../src/payments/index.ts'
import type { OutcomeHandler } from '../../src/payments/outcomes.ts'
import type { AccessControl } from '../../src/payments/access.ts'
import type { DevChain } from '../../src/payments/chain/index.ts'
import { throwawayDatabase } from '../helpers/servers.ts'

const PUBLIC_URL = 'https://gw.test'
const SONG_PRICE = 80_000n // songmodel-3-pro, per song
const REVIEW_PRICE = 20_000n // reviews-create, per call from plan credit
const SONGS_PATH = '/api/v1/audio/songs/songmodel-3-pro'
const REVIEWS_PATH = '/api/v1/annotate/reviews'
const OPERATIONS = new Set(['generateSongs', 'createReviewSession'])
const CREDIT_PLAN: PlanSpec = (() => {
  const plan = registry.services.flatMap((s) => s.plans).find((p) => p.id === 'reviews-credit-5')
  if (plan?.kind !== 'credit') throw new Error('registry lost the reviews-credit-5 credit plan')
  return plan
})()

const logger = createLogger('silent')
const newAccount = (): LocalAccount => privateKeyToAccount(generatePrivateKey())

interface Problem {
  status: number
  code: string
  reason?: string
  recipe?: Record<string, unknown>
  plans?: { id: string }[]
  priceMicros?: string
  [key: string]: unknown
}

/** What the handlers saw: one entry per run of the work. */
interface WorkLog {
  songs: { prompt: string; protocol: string | undefined; includedUnits: number | undefined; replayKey: string | null | undefined }[]
  reviews: number
  compensations: number
}

async function rpc<T = unknown>(url: string, method: string, params: unknown[] = []): Promise<T> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  })
  const body = (await res.json()) as { result?: T; error?: { message: string } }
  if (body.error) throw new Error(`${method}: ${body.error.message}`)
  return body.result as T
}

/** Empties `who`'s TestUSDC balance (balanceOf is mapping slot 1). */
async function drain(chain: DevChain, who: Address): Promise<void> {
  const slot = keccak256(encodeAbiParameters([{ type: 'address' }, { type: 'uint256' }], [who, 1n]))
  await rpc(chain.rpcUrl, 'anvil_setStorageAt', [chain.usdc, slot, `0x${'0'.repeat(64)}`])
}

/** The handlers under test: songs succeed unless told to fail; reviews likewise. */
const SONG_EFFECT = 'test.song'

function handlers(db: Db, chain: DevChain, work: WorkLog): Record<string, OperationHandler> {
  return {
    async generateSongs(request, reply) {
      const body = request.body as { prompt: string; candidateCount?: number }
      const payment = request.payment
      work.songs.push({ prompt: body.prompt, protocol: payment?.protocol, includedUnits: payment?.includedUnits, replayKey: payment?.replayKey })
      if (body.prompt === 'fail') throw new Error('the song model crashed')
      if (body.prompt === 'fail-4xx') {
        reply.code(409)
        return { code: 'conflict', detail: 'the model refused this prompt' }
      }
      if (body.prompt.startsWith('drain:')) await drain(chain, body.prompt.slice(6) as Address)
      // The song is durable work: bound to its payment, reversed by the payment's decision if unpaid.
      if (payment?.bind) await db.transaction((tx) => (payment.bind as NonNullable<typeof payment.bind>)(tx, SONG_EFFECT))
      return {
        url: `https://media.gw.test/songs/${randomUUID()}.mp3`,
        mimeType: 'audio/mpeg',
        sizeBytes: 1234,
        seconds: 30,
        model: 'songmodel-3-pro',
        price_usdc: '0.080000',
      }
    },
    async createReviewSession(request) {
      const body = request.body as { url?: string }
      work.reviews += 1
      if (body.url?.includes('fail')) throw new AppError('unavailable', 'the review backend is down')
      const reviewId = randomUUID()
      return { reviewId, shareUrl: `https://review.gw.test/${randomUUID()}`, statusUrl: `https://gw.test/api/v1/annotate/reviews/${reviewId}` }
    },
  }
}

async function buildApp(catalog: Catalog, access: AccessControl, table: Record<string, OperationHandler>): Promise<{ app: FastifyInstance; url: string }> {
  const app = createHttpApp({ name: 'gateway', logger, metrics: createMetrics({ defaultMetrics: false }), bodyLimitBytes: 1 << 20 })
  app.decorateRequest('payment', null)
  mountOperations(
    app,
    catalog.operations.filter((entry) => OPERATIONS.has(entry.spec.operationId)),
    table,
    (entry, handler) => access.wrap(entry, handler),
  )
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  if (!address || typeof address !== 'object') throw new Error('not listening')
  return { app, url: `http://127.0.0.1:${address.port}` }
}

function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })
}

async function problem(res: Response): Promise<Problem> {
  return (await res.json()) as Problem
}

function x402Http(account: LocalAccount): x402HTTPClient {
  return new x402HTTPClient(new x402Client().register('eip155:8453', new ExactEvmScheme(account)))
}

/** The REAL client's payment header for the 402 of an unpaid call: captured, not sent. */
async function signProof(account: LocalAccount, url: string, body: unknown, headers: Record<string, string> = {}): Promise<Record<string, string>> {
  const res = await post(url, body, headers)
  if (res.status !== 402) throw new Error(`expected a 402, got ${res.status}`)
  const http = x402Http(account)
  const required = http.getPaymentRequiredResponse((name) => res.headers.get(name), await res.json())
  return http.encodePaymentSignatureHeader(await http.createPaymentPayload(required))
}

/** The 402's decoded v2 PAYMENT-REQUIRED amount. */
function quotedAmount(res: Response): string | undefined {
  const header = res.headers.get('payment-required')
  return header ? decodePaymentRequiredHeader(header).accepts[0]?.amount : undefined
}

function countBy<T>(values: T[]): Map<T, number> {
  const counts = new Map<T, number>()
  for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1)
  return counts
}

async function suite(t: Test, db: Db): Promise<void> {
  const started = performance.now()
  await migrate(db)
  const kv: KeyValue = await openKeyValue({ kind: 'memory' })
  const dataDir = await mkdtemp(path.join(tmpdir(), 'agw-paytest-'))
  const payTo = newAccount().address
  const paymentsOptions = { db, kv, logger, clock: systemClock, registry, dataDir, payTo, gatewayUrl: PUBLIC_URL, reconcileEveryMs: 0 }
  const payments: Payments = await openPayments(paymentsOptions)
  const chain = payments.devChain
  if (!chain) throw new Error('openPayments did not start the dev chain')
  const catalog = createCatalog(registry, { urls: { gateway: PUBLIC_URL, scheduler: 'https://scheduler.gw.test', memory: 'https://memory.gw.test' }, implemented: OPERATIONS })
  const work: WorkLog = { songs: [], reviews: 0, compensations: 0 }
  // The test song's durable work: reversed (counted) when its payment fails.
  const songOutcomes: OutcomeHandler = {
    settled: async () => undefined,
    failed: async () => {
      work.compensations += 1
      return undefined
    },
    reversed: async () => {
      work.compensations += 1
      return undefined
    },
  }
  payments.outcomes.register(SONG_EFFECT, songOutcomes)
  const { app, url } = await buildApp(catalog, payments.access, handlers(db, chain, work))
  t.teardown(async () => {
    await app.close()
    await payments.close()
    await kv.close()
    await db.close()
    await rm(dataDir, { recursive: true, force: true })
  })
  t.comment(`app + anvil + ${db.kind} up in ${Math.round(performance.now() - started)} ms`)
  const songs = url + SONGS_PATH
  const reviews = url + REVIEWS_PATH

  const ledger = (payer: Address) =>
    db.query<{ event: string; amount_micros: bigint; reference: string | null; replay_key: string }>(
      `select event, amount_micros, reference, replay_key from payments_ledger where payer = $1 order by id`,
      [payer.toLowerCase()],
    )
  const reservations = (payer: Address) =>
    db.query<{ state: string; replay_key: string }>(`select state, replay_key from payment_reservations where payer = $1 order by created_at`, [payer.toLowerCase()])
  const balances = (...who: Address[]) => Promise.all(who.map((a) => chain.balanceOf(a)))
  const funded = async (amount: bigint) => {
    const buyer = newAccount()
    if (amount > 0n) await chain.mint(buyer.address, amount)
    return buyer
  }

  await t.test('an unpaid call answers one 402 for x402 v2 and v1 clients (MPP charges: not offered without a Tempo RPC)', async (t) => {
    const res = await post(songs, { prompt: 'jazz', candidateCount: 1 })
    t.equal(res.status, 402)
    t.equal(res.headers.get('cache-control'), 'no-store')
    t.equal(res.headers.get('www-authenticate'), null, 'no Tempo RPC configured: no MPP challenge (test/integration/mpp-offer.test.ts)')
    const required = decodePaymentRequiredHeader(res.headers.get('payment-required') ?? '')
    t.match(required.accepts[0], { scheme: 'exact', network: 'eip155:8453', amount: SONG_PRICE.toString(), payTo })
    t.equal(required.resource?.url, PUBLIC_URL + SONGS_PATH)
    const body = await problem(res)
    t.match(body, { status: 402, code: 'payment_required', x402Version: 1, priceMicros: SONG_PRICE.toString() })
    t.equal(work.songs.length, 0, 'no work ran')
  })

  await t.test('paid call with the real client: 200, PAYMENT-RESPONSE, exact amounts move, one settled row', async (t) => {
    const buyer = await funded(1_000_000n)
    const [payeeBefore] = await balances(payTo)
    const pay = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)))
    const res = await pay(songs, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'jazz', candidateCount: 1 }) })
    t.equal(res.status, 200)
    t.match(await res.json(), { mimeType: 'audio/mpeg', model: 'songmodel-3-pro' })
    t.equal(res.headers.get('cache-control'), 'private')
    const settle = decodePaymentResponseHeader(res.headers.get('payment-response') ?? '')
    t.match(settle, { success: true, network: 'eip155:8453', payer: buyer.address })
    t.match(settle.transaction, /^0x[0-9a-f]{64}$/)
    t.equal(await chain.settlementStatus(settle.transaction as Hex), 'confirmed')
    t.same(await balances(buyer.address, payTo), [1_000_000n - SONG_PRICE, (payeeBefore ?? 0n) + SONG_PRICE])
    const rows = await ledger(buyer.address)
    t.same(
      rows.map((r) => [r.event, r.amount_micros, r.reference]),
      [['settled', SONG_PRICE, settle.transaction]],
    )
    t.same(
      (await reservations(buyer.address)).map((r) => r.state),
      ['settled'],
    )
  })

  await t.test('the same proof fired 50 times in parallel: one 200, 49 × 402 nonce_already_used, moved once', async (t) => {
    const buyer = await funded(1_000_000n)
    const [payeeBefore] = await balances(payTo)
    const proof = await signProof(buyer, songs, { prompt: 'race', candidateCount: 1 })
    t.same(Object.keys(proof), ['PAYMENT-SIGNATURE'])
    const ranBefore = work.songs.length
    const responses = await Promise.all(Array.from({ length: 50 }, () => post(songs, { prompt: 'race', candidateCount: 1 }, proof)))
    const statuses = countBy(responses.map((r) => r.status))
    t.same(Object.fromEntries(statuses), { 200: 1, 402: 49 })
    const reasons = await Promise.all(responses.filter((r) => r.status === 402).map(async (r) => (await problem(r)).reason))
    t.same(Object.fromEntries(countBy(reasons)), { nonce_already_used: 49 })
    const winner = responses.find((r) => r.status === 200)
    t.ok(winner?.headers.get('payment-response'), 'the winner carries the receipt')
    t.equal(work.songs.length - ranBefore, 1, 'the work ran once')
    t.same(await balances(buyer.address, payTo), [1_000_000n - SONG_PRICE, (payeeBefore ?? 0n) + SONG_PRICE], 'balance moved once')
    t.same(
      (await ledger(buyer.address)).map((r) => r.event),
      ['settled'],
    )
  })

  await t.test('work that fails is not charged; the same proof then settles once on a succeeding call', async (t) => {
    const buyer = await funded(SONG_PRICE)
    const [payeeBefore] = await balances(payTo)
    const proof = await signProof(buyer, songs, { prompt: 'fail', candidateCount: 1 })

    const crashed = await post(songs, { prompt: 'fail', candidateCount: 1 }, proof)
    t.equal(crashed.status, 500)
    t.equal(crashed.headers.get('payment-response'), null, 'no receipt')
    t.match(await problem(crashed), { code: 'internal' })
    t.same(await balances(buyer.address, payTo), [SONG_PRICE, payeeBefore ?? 0n], 'nothing moved')
    t.same(await ledger(buyer.address), [], 'no ledger row')
    t.same(
      (await reservations(buyer.address)).map((r) => r.state),
      ['released'],
    )

    const refused = await post(songs, { prompt: 'fail-4xx', candidateCount: 1 }, proof)
    t.equal(refused.status, 409, 'a 4xx from the work reaches the client')
    t.same(
      (await reservations(buyer.address)).map((r) => r.state),
      ['released'],
    )
    t.equal(await chain.balanceOf(buyer.address), SONG_PRICE)

    const ok = await post(songs, { prompt: 'retry', candidateCount: 1 }, proof)
    t.equal(ok.status, 200)
    t.match(decodePaymentResponseHeader(ok.headers.get('payment-response') ?? ''), { success: true })
    t.same(await balances(buyer.address, payTo), [0n, (payeeBefore ?? 0n) + SONG_PRICE])
    t.same(
      (await ledger(buyer.address)).map((r) => r.event),
      ['settled'],
    )
    t.same(
      (await reservations(buyer.address)).map((r) => r.state),
      ['settled'],
    )

    const again = await post(songs, { prompt: 'retry', candidateCount: 1 }, proof)
    t.equal(again.status, 402)
    t.equal((await problem(again)).reason, 'nonce_already_used')
  })

  await t.test('a settlement that fails on chain: 402 settlement_failed, nothing charged, body withheld', async (t) => {
    await t.test('valid authorization, buyer holds no USDC', async (t) => {
      const buyer = await funded(0n)
      const compensationsBefore = work.compensations
      const proof = await signProof(buyer, songs, { prompt: 'jazz', candidateCount: 1 })
      const res = await post(songs, { prompt: 'jazz', candidateCount: 1 }, proof)
      t.equal(res.status, 402)
      const body = await problem(res)
      t.match(body, { code: 'payment_invalid', reason: 'settlement_failed' })
      t.notOk('mimeType' in body || 'url' in body, 'the work result is withheld')
      t.equal(res.headers.get('payment-response'), null)
      t.equal(work.compensations - compensationsBefore, 1, 'the song bound to the payment was reversed')
      t.same(
        (await ledger(buyer.address)).map((r) => r.event),
        ['failed'],
      )
      t.same(
        (await reservations(buyer.address)).map((r) => r.state),
        ['released'],
      )
    })

    await t.test('buyer drained after verification, while the work runs', async (t) => {
      const buyer = await funded(SONG_PRICE)
      const [payeeBefore] = await balances(payTo)
      const body = { prompt: `drain:${buyer.address}`, candidateCount: 1 }
      const proof = await signProof(buyer, songs, body)
      const res = await post(songs, body, proof)
      t.equal(res.status, 402)
      const problemBody = await problem(res)
      t.match(problemBody, { reason: 'settlement_failed' })
      t.notOk('mimeType' in problemBody, 'the work result is withheld')
      t.same(await balances(buyer.address, payTo), [0n, payeeBefore ?? 0n], 'nothing moved')
      t.same(
        (await ledger(buyer.address)).map((r) => r.event),
        ['failed'],
      )
      t.notOk((await ledger(buyer.address)).some((r) => r.event === 'settled'))
    })
  })

  await t.test('settlement not confirmed in time → pending, then reconciled_settled exactly once', async (t) => {
    // The same payments, with a settle timeout short enough to outlast.
    const shortTimeout = await openPayments({ ...paymentsOptions, chain, settleTimeoutMs: 300, reconcileEveryMs: 0 })
    t.teardown(() => shortTimeout.close())
    shortTimeout.outcomes.register(SONG_EFFECT, songOutcomes)
    const access = shortTimeout.access
    const slow = await buildApp(catalog, access, handlers(db, chain, work))
    t.teardown(() => slow.app.close())

    const buyer = await funded(SONG_PRICE)
    const [payeeBefore] = await balances(payTo)
    const proof = await signProof(buyer, slow.url + SONGS_PATH, { prompt: 'slow chain', candidateCount: 1 })
    await rpc(chain.rpcUrl, 'evm_setAutomine', [false])
    let automine = false
    t.teardown(async () => {
      if (!automine) await rpc(chain.rpcUrl, 'evm_setAutomine', [true])
    })
    const res = await post(slow.url + SONGS_PATH, { prompt: 'slow chain', candidateCount: 1 }, proof)
    t.equal(res.status, 200, 'the work is delivered; the payment is pending')
    t.equal(res.headers.get('x-payment-status'), 'pending')
    const reference = res.headers.get('x-payment-reference')
    t.match(reference, /^0x[0-9a-f]{64}$/)
    t.same(
      (await ledger(buyer.address)).map((r) => [r.event, r.reference]),
      [['pending', reference]],
    )
    t.same(
      (await reservations(buyer.address)).map((r) => r.state),
      ['pending'],
    )
    t.equal(await payments.reconcile(), 0, 'nothing decided while the tx is in the mempool')

    const replay = await post(slow.url + SONGS_PATH, { prompt: 'slow chain', candidateCount: 1 }, proof)
    t.equal((await problem(replay)).reason, 'nonce_already_used', 'a pending proof cannot be presented again')

    await rpc(chain.rpcUrl, 'evm_mine')
    await rpc(chain.rpcUrl, 'evm_setAutomine', [true])
    automine = true
    t.equal(await payments.reconcile(), 1)
    t.equal(await shortTimeout.reconcile(), 0, 'a second reconcile changes nothing')
    t.same(
      (await ledger(buyer.address)).map((r) => r.event),
      ['pending', 'reconciled_settled'],
    )
    t.same(
      (await reservations(buyer.address)).map((r) => r.state),
      ['settled'],
    )
    t.same(await balances(buyer.address, payTo), [0n, (payeeBefore ?? 0n) + SONG_PRICE])
  })

  const claimedAgent = async () => {
    const { agentId, accessToken } = await payments.agents.register()
    const { code } = await payments.agents.startClaim(agentId, `${agentId}@example.test`)
    await payments.agents.completeClaim(code)
    return { agentId, accessToken, header: { 'svc-agent-authorization': `Bearer ${accessToken}` } }
  }

  await t.test('free included units: one free song per claimed agent, exactly once', async (t) => {
    await t.test('a claimed agent gets one 200 without paying, then a 402', async (t) => {
      const agent = await claimedAgent()
      const first = await post(songs, { prompt: 'free', candidateCount: 1 }, agent.header)
      t.equal(first.status, 200)
      t.match(work.songs.at(-1), { protocol: 'included', includedUnits: 1, replayKey: null })
      const second = await post(songs, { prompt: 'free', candidateCount: 1 }, agent.header)
      t.equal(second.status, 402)
      t.equal(quotedAmount(second), SONG_PRICE.toString())
    })

    await t.test('10 parallel calls → exactly one 200 (the free unit), nine 402', async (t) => {
      const agent = await claimedAgent()
      const responses = await Promise.all(Array.from({ length: 10 }, () => post(songs, { prompt: 'free', candidateCount: 1 }, agent.header)))
      t.same(Object.fromEntries(countBy(responses.map((r) => r.status))), { 200: 1, 402: 9 })
      for (const r of responses.filter((x) => x.status === 402)) t.equal(quotedAmount(r), SONG_PRICE.toString())
      const claims = await db.query(`select ordinal from included_unit_claims where account_key = $1`, [agent.agentId])
      t.equal(claims.length, 1)
    })

    await t.test('candidateCount 3 with the unit unused is quoted 2 × 80000, and the real client pays it', async (t) => {
      const agent = await claimedAgent()
      const res = await post(songs, { prompt: 'three', candidateCount: 3 }, agent.header)
      t.equal(res.status, 402)
      t.equal(quotedAmount(res), (2n * SONG_PRICE).toString())
      t.equal((await problem(res)).priceMicros, (2n * SONG_PRICE).toString())

      const buyer = await funded(2n * SONG_PRICE)
      const pay = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)))
      const paid = await pay(songs, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...agent.header },
        body: JSON.stringify({ prompt: 'three', candidateCount: 3 }),
      })
      t.equal(paid.status, 200)
      t.match(work.songs.at(-1), { protocol: 'x402', includedUnits: 1 })
      t.equal(await chain.balanceOf(buyer.address), 0n)
      t.same(
        (await ledger(buyer.address)).map((r) => [r.event, r.amount_micros]),
        [['settled', 2n * SONG_PRICE]],
      )
      const after = await post(songs, { prompt: 'three', candidateCount: 3 }, agent.header)
      t.equal(quotedAmount(after), (3n * SONG_PRICE).toString(), 'the unit is spent: full price now')
    })

    await t.test('failed work gives the free unit back', async (t) => {
      const agent = await claimedAgent()
      t.equal((await post(songs, { prompt: 'fail', candidateCount: 1 }, agent.header)).status, 500)
      t.equal((await post(songs, { prompt: 'free', candidateCount: 1 }, agent.header)).status, 200)
    })

    await t.test('an unclaimed agent gets no free unit', async (t) => {
      const { accessToken } = await payments.agents.register()
      const res = await post(songs, { prompt: 'free', candidateCount: 1 }, { 'svc-agent-authorization': `Bearer ${accessToken}` })
      t.equal(res.status, 402)
      t.equal(quotedAmount(res), SONG_PRICE.toString())
    })
  })

  await t.test('plan access: 401 / 403, never 402; exact debits; no overdraft under concurrency; refunds', async (t) => {
    const creditOf = async (agentId: string) =>
      (await db.query<{ sum: bigint }>(`select coalesce(sum(amount_micros), 0)::int8 as sum from plan_credit_ledger where agent_id = $1`, [agentId]))[0]?.sum
    const review = (token?: string) => post(reviews, { url: 'https://example.test/page' }, token ? { authorization: `Bearer ${token}` } : {})

    const anonymous = await review()
    t.equal(anonymous.status, 401)
    const anonymousBody = await problem(anonymous)
    t.match(anonymousBody, { code: 'bearer_required' })
    t.match(anonymousBody.recipe, { register: { method: 'POST' } })
    t.equal(anonymous.headers.get('payment-required'), null, 'never a 402 challenge')

    const { agentId, accessToken } = await payments.agents.register()
    const planless = await review(accessToken)
    t.equal(planless.status, 403)
    const planlessBody = await problem(planless)
    t.equal(planlessBody.code, 'plan_required')
    t.same(planlessBody.plans?.map((p) => p.id).sort(), ['reviews-credit-5', 'reviews-monthly'])

    await payments.agents.activatePlan({ agentId, plan: CREDIT_PLAN, replayKey: `test:${randomUUID()}` })
    const granted = CREDIT_PLAN.creditMicros ?? 0n
    t.equal(await creditOf(agentId), granted)
    for (let i = 1; i <= 3; i += 1) {
      const res = await review(accessToken)
      t.equal(res.status, 200)
      t.equal(res.headers.get('x-plan-id'), 'reviews-credit-5')
      t.equal(res.headers.get('x-plan-credit-remaining-micros'), (granted - BigInt(i) * REVIEW_PRICE).toString())
    }
    t.equal(await creditOf(agentId), granted - 3n * REVIEW_PRICE, 'each call debits exactly 20000 micros')

    const reviewsBefore = work.reviews
    const failed = await post(reviews, { url: 'https://fail.example.test/' }, { authorization: `Bearer ${accessToken}` })
    t.equal(failed.status, 503)
    t.equal(work.reviews - reviewsBefore, 1)
    t.equal(await creditOf(agentId), granted - 3n * REVIEW_PRICE, 'a failing call is refunded')
    const kinds = await db.query<{ kind: string }>(`select kind from plan_credit_ledger where agent_id = $1 order by id`, [agentId])
    t.same(
      kinds.map((k) => k.kind),
      ['grant', 'debit', 'debit', 'debit', 'debit', 'refund'],
    )

    await t.test('20 parallel calls with credit for only 5 → exactly 5 succeed', async (t) => {
      const small = await payments.agents.register()
      await payments.agents.activatePlan({ agentId: small.agentId, plan: { ...CREDIT_PLAN, creditMicros: 5n * REVIEW_PRICE }, replayKey: `test:${randomUUID()}` })
      const responses = await Promise.all(Array.from({ length: 20 }, () => review(small.accessToken)))
      t.same(Object.fromEntries(countBy(responses.map((r) => r.status))), { 200: 5, 403: 15 })
      t.equal(await creditOf(small.agentId), 0n, 'credit spent to zero, never below')
    })
  })

  await t.test('payments_ledger and plan_credit_ledger are append-only', async (t) => {
    await t.rejects(db.query(`update payments_ledger set amount_micros = 0`), /append-only/)
    await t.rejects(db.query(`delete from payments_ledger`), /append-only/)
    await t.rejects(db.query(`update plan_credit_ledger set amount_micros = 0`), /append-only/)
    await t.rejects(db.query(`delete from plan_credit_ledger`), /append-only/)
    const rows = await db.query<{ n: bigint }>(`select count(*)::int8 as n from payments_ledger where event = 'settled'`)
    t.ok((rows[0]?.n ?? 0n) > 0n, 'rows are still there')
  })

  // The state a crash leaves between commit()'s two writes: the 'settled' ledger row is in, the
  // reservation is still 'settling'. Reconciliation must finish it, not trip over the unique index.
  await t.test('reconcile after a crash between the settled ledger row and the reservation update', async (t) => {
    const bug = {}
    const payer = newAccount().address.toLowerCase()
    const nonce = `0x${randomBytes(32).toString('hex')}`
    const replayKey = `x402:${payer}:${nonce}`
    const detail = { from: payer, nonce, validBefore: String(Math.floor(Date.now() / 1000) + 300), payTo, network: 'eip155:8453' }
    await db.query(
      `insert into payment_reservations (replay_key, protocol, payer, amount_micros, operation_id, state, detail, updated_at)
       values ($1, 'x402', $2, $3, 'generateSongs', 'settling', $4, now() - interval '15 minutes')`,
      [replayKey, payer, SONG_PRICE, detail],
    )
    await db.query(
      `insert into payments_ledger (protocol, protocol_version, event, replay_key, payer, payee, amount_micros, operation_id, reference, detail)
       values ('x402', 2, 'settled', $1, $2, $3, $4, 'generateSongs', $5, $6)`,
      [replayKey, payer, payTo, SONG_PRICE, `0x${'ab'.repeat(32)}`, detail],
    )
    let changed: number | undefined
    try {
      changed = await payments.guard.reconcile({ x402: async () => ({ status: 'settled', reference: `0x${'ab'.repeat(32)}` }) }, { settlingStaleMs: 60_000 })
    } catch (error) {
      t.fail(`reconcile threw: ${(error as Error).message}`, bug)
    }
    t.equal(changed, 1, 'reconciled', bug)
    const state = await db.query<{ state: string }>(`select state from payment_reservations where replay_key = $1`, [replayKey])
    t.same(
      state.map((r) => r.state),
      ['settled'],
      'reservation settled',
      bug,
    )
    const events = await db.query<{ event: string }>(`select event from payments_ledger where replay_key = $1 order by id`, [replayKey])
    t.same(
      events.map((r) => r.event),
      ['settled'],
      'still exactly one settlement row',
    )
  })
  // Every replica reconciles the one table: two settling the same undecided authorization at once
  // had all but one refused ("authorization is used"). Each pass claims the rows it decides.
  await t.test('two reconcile passes at once: each undecided settlement is settled again by one of them', async (t) => {
    const keys: string[] = []
    for (let i = 0; i < 4; i += 1) {
      const payer = newAccount().address.toLowerCase()
      const nonce = `0x${randomBytes(32).toString('hex')}`
      keys.push(`x402:${payer}:${nonce}`)
      const detail = { from: payer, nonce, validBefore: String(Math.floor(Date.now() / 1000) + 300), payTo, network: 'eip155:8453' }
      await db.query(
        `insert into payment_reservations (replay_key, protocol, payer, amount_micros, operation_id, state, detail) values ($1, 'x402', $2, $3, 'generateSongs', 'pending', $4)`,
        [keys[i], payer, SONG_PRICE, detail],
      )
    }
    const asked = new Map<string, number>()
    const pass = () =>
      payments.guard.reconcile({
        x402: async ({ replayKey }) => {
          asked.set(replayKey, (asked.get(replayKey) ?? 0) + 1)
          await new Promise((resolve) => setTimeout(resolve, 20))
          return { status: 'pending' }
        },
      })
    await Promise.all([pass(), pass()])
    for (const key of keys) t.equal(asked.get(key), 1, 'asked once')
    await pass()
    for (const key of keys) t.equal(asked.get(key), 2, 'released after the pass: the next one asks again')
    await db.query(`update payment_reservations set state = 'released' where replay_key = any($1::text[])`, [keys])
  })
  t.comment(`suite on ${db.kind}: ${Math.round(performance.now() - started)} ms`)
}

t.test('on PGlite (memory://)', async (t) => {
  await suite(t, await openDb({ kind: 'pglite', dataDir: 'memory://' }))
})

t.test('on a throw-away Postgres database', async (t) => {
  const url = await throwawayDatabase(t)
  if (!url) return
  await suite(t, await openDb({ kind: 'postgres', url }))
})
