// A depositor's payment draws on its deposit (issue 27, item 4), through the real memory listener
// and the real payments assembly on PGlite and Postgres, with the real x402 v2 client: a write paid
// by a wallet whose deposit covers it is debited from the deposit and its authorization is never
// settled (consumed, never broadcast, unusable again); 20 concurrent paid writes against a deposit
// that covers 10 draw exactly 10 and settle the other 10; the same proof twice debits once and
// never settles; a write that dies after consuming the proof leaves neither debit nor consumption.
import t from 'tap'
import type { Test } from 'tap'
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import type { FastifyInstance } from 'fastify'
import { openDb, type Db } from '../../src/platform/db/index.ts'
import { migrate, migrationsDir } from '../../src/platform/db/migrate.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { loadConfig } from '../../src/platform/config.ts'
import { systemClock } from '../../src/platform/clock.ts'
import { openKeyValue } from '../../src/platform/kv/index.ts'
import { registry } from '../../src/catalog/registry.ts'
import { createCatalog } from '../../src/catalog/catalog.ts'
import { openPayments, type Payments } from '../../src/payments/index.ts'
import { createPaymentGuard, type PaymentMethod } from '../../src/payments/guard.ts'
import { createPaymentOutcomes } from '../../src/payments/outcomes.ts'
import { IMPLEMENTED_OPERATIONS } from '../../src/runtime.ts'
import { buildMemoryApp } from '../../src/memory/app.ts'
import { openMemoryRole, type MemoryRole } from '../../src/memory/role.ts'
import { jobQueueOnDemand } from '../../src/roles/job-queue.ts'
import { memoryChain, memoryUsdc, type MemoryUsdc } from '../helpers/memory-chain.ts'
import { throwawayDatabase } from '../helpers/servers.ts'

const logger = createLogger('silent')
const MEMORY_URL = 'http://memory.draw.test'
const GATEWAY_URL = 'http://gateway.draw.test'
const PAY_TO = '0x000000000000000000000000000000000000c0de'
const urls = { gateway: GATEWAY_URL, scheduler: 'http://scheduler.draw.test', memory: MEMORY_URL }
const catalog = createCatalog(registry, { urls, implemented: IMPLEMENTED_OPERATIONS })
const NOTE = { content: 'short note' }

type Json = Record<string, any>

interface World {
  db: Db
  token: MemoryUsdc
  role: MemoryRole
  payments: Payments
  app: FastifyInstance
}

async function world(t: Test, db: Db): Promise<World> {
  await migrate(db, migrationsDir)
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'agw-draw-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const token = memoryUsdc()
  const chain = memoryChain(token)
  token.mint(chain.serviceAddress, 1_000_000_000n)
  const kv = await openKeyValue({ kind: 'memory' })
  const payments = await openPayments({ db, kv, logger, clock: systemClock, registry, dataDir: '', payTo: PAY_TO, gatewayUrl: GATEWAY_URL, chain, reconcileEveryMs: 0 })
  const config = loadConfig({ DATA_DIR: dataDir, PUBLIC_MEMORY_URL: MEMORY_URL, PUBLIC_BASE_URL: GATEWAY_URL, PAY_TO_ADDRESS: PAY_TO })
  const jobs = jobQueueOnDemand({ db, logger })
  const role = await openMemoryRole({ config, db, clock: systemClock, logger, payments, jobs: () => jobs.get() })
  const app = buildMemoryApp({
    catalog,
    logger,
    metrics: createMetrics({ defaultMetrics: false }),
    bodyLimitBytes: 1 << 20,
    payTo: PAY_TO,
    readiness: {},
    payments,
    kv,
    service: role.service,
    money: role.money,
  })
  await app.ready()
  t.teardown(async () => {
    await app.close()
    await role.stop()
    await jobs.stop()
    await payments.close()
    await kv.close()
  })
  return { db, token, role, payments, app }
}

/** A POST as a client makes it: JSON when there is a body. */
const request = (url: string, headers: Record<string, string>, body: unknown) =>
  body === undefined
    ? { method: 'POST' as const, url, headers }
    : { method: 'POST' as const, url, headers: { 'content-type': 'application/json', ...headers }, payload: JSON.stringify(body) }

const client = (account: PrivateKeyAccount) => new x402HTTPClient(new x402Client().register('eip155:8453', new ExactEvmScheme(account)).setSpendControls(false))

/** The 402 of an unpaid call, and `count` fresh x402 v2 proofs for it signed by `account`. */
async function proofs(
  w: World,
  account: PrivateKeyAccount,
  url: string,
  headers: Record<string, string>,
  body: unknown,
  count: number,
): Promise<{ first: Json; signatures: string[] }> {
  const first = await w.app.inject(request(url, headers, body))
  if (first.statusCode !== 402) throw new Error(`expected 402, got ${first.statusCode} ${first.body}`)
  const http = client(account)
  const required = http.getPaymentRequiredResponse((name) => first.headers[name.toLowerCase()] as string | undefined)
  const signatures: string[] = []
  for (let i = 0; i < count; i += 1) signatures.push(http.encodePaymentSignatureHeader(await http.createPaymentPayload(required))['PAYMENT-SIGNATURE'] as string)
  return { first: { ...(first.json() as Json), paymentRequired: required }, signatures }
}

async function paidCall(w: World, url: string, signature: string, headers: Record<string, string>, body: unknown) {
  const response = await w.app.inject(request(url, { 'payment-signature': signature, ...headers }, body))
  return { status: response.statusCode, body: response.json() as Json, headers: response.headers }
}

/** A settled deposit of `micros` paid through the deposit route. */
async function deposit(w: World, account: PrivateKeyAccount, micros: bigint): Promise<void> {
  const headers = { 'x-pay-amount-micros': micros.toString() }
  const { signatures } = await proofs(w, account, '/api/v1/deposits', headers, undefined, 1)
  const answer = await paidCall(w, '/api/v1/deposits', signatures[0] as string, headers, undefined)
  if (answer.status !== 200) throw new Error(`deposit answered ${answer.status} ${JSON.stringify(answer.body)}`)
}

async function balance(db: Db, owner: string): Promise<bigint> {
  return (await db.query<{ b: bigint }>(`select coalesce(sum(amount_micros), 0)::int8 as b from memory_ledger where owner = $1`, [owner]))[0]?.b ?? 0n
}

async function reservations(db: Db, payer: string, operationId: string): Promise<Record<string, number>> {
  const rows = await db.query<{ state: string; n: bigint }>(`select state, count(*)::int8 as n from payment_reservations where payer = $1 and operation_id = $2 group by state`, [
    payer,
    operationId,
  ])
  return Object.fromEntries(rows.map((row) => [row.state, Number(row.n)]))
}

function funded(w: World): PrivateKeyAccount {
  const account = privateKeyToAccount(generatePrivateKey())
  w.token.mint(account.address, 10_000_000n)
  return account
}

async function suite(t: Test, db: Db): Promise<void> {
  const w = await world(t, db)
  const prepared = await w.role.service.prepare(NOTE)

  await t.test('the 402 tells a depositor to sign in instead, in its body and in its SIWX extension (body and PAYMENT-REQUIRED)', async (t) => {
    const { first } = await proofs(w, funded(w), '/api/v1/memories', {}, NOTE, 0)
    t.match(first.depositor, {
      signInInstead: true,
      extension: 'sign-in-with-x',
      header: 'SIGN-IN-WITH-X',
      microsPerMillionTokens: '100000',
      paymentDrawsOnDeposit: true,
      deposit: `${MEMORY_URL}/api/v1/deposits`,
      account: `${MEMORY_URL}/api/v1/account`,
    })
    t.same(first.extensions['sign-in-with-x'].depositor, first.depositor, 'the body SIWX extension carries the hint')
    const inHeader = first.paymentRequired.extensions['sign-in-with-x']
    t.equal(inHeader.info.nonce, first.extensions['sign-in-with-x'].info.nonce, 'PAYMENT-REQUIRED carries the same SIWX challenge')
    t.same(inHeader.depositor, first.depositor)
    t.ok(first.paymentRequired.extensions['payment-identifier'], 'the other v2 extensions are kept')
  })

  await t.test('a paid write of a depositor is debited from the deposit, answered as the deposit rail, and never settled', async (t) => {
    const account = funded(w)
    const owner = account.address.toLowerCase()
    await deposit(w, account, 1_000n)
    const transfers = w.token.transfers
    const wallet = w.token.balanceOf(account.address)
    const { signatures } = await proofs(w, account, '/api/v1/memories', {}, NOTE, 1)
    const answer = await paidCall(w, '/api/v1/memories', signatures[0] as string, {}, NOTE)
    t.equal(answer.status, 201)
    t.match(answer.body, { rail: 'direct', chargedMicros: prepared.costMicros.toString(), balanceMicros: (1_000n - prepared.costMicros).toString() })
    t.same(Object.keys(answer.body).sort(), ['balanceMicros', 'chargedMicros', 'context', 'createdAt', 'id', 'rail', 'tags', 'tokens'], 'the deposit rail body')
    t.notOk(answer.headers['payment-response'], 'no settlement receipt')
    t.notOk(answer.headers['x-payment-status'])
    t.equal(w.token.transfers, transfers, 'nothing moved on-chain')
    t.equal(w.token.balanceOf(account.address), wallet)
    t.equal(await balance(db, owner), 1_000n - prepared.costMicros)
    t.same(await reservations(db, owner, 'rememberMemory'), { consumed: 1 })
    const row = (await db.query<{ effect: string }>(`select effect from payment_reservations where payer = $1 and operation_id = 'rememberMemory'`, [owner]))[0]
    t.equal(row?.effect, 'memory.deposit-draw')
    t.equal((await w.role.service.expand(owner, [answer.body.id])).records[0]?.content, NOTE.content, 'the record is readable')
  })

  await t.test('20 concurrent paid writes against a deposit covering 10: exactly 10 drawn, 10 settled per call, never below 0', async (t) => {
    const account = funded(w)
    const owner = account.address.toLowerCase()
    const covers = 10n * prepared.costMicros
    await deposit(w, account, covers)
    const transfers = w.token.transfers
    const wallet = w.token.balanceOf(account.address)
    const { signatures } = await proofs(w, account, '/api/v1/memories', {}, NOTE, 20)
    const answers = await Promise.all(signatures.map((signature) => paidCall(w, '/api/v1/memories', signature, {}, NOTE)))
    t.ok(
      answers.every((answer) => answer.status === 201),
      'every write is stored',
    )
    const drawn = answers.filter((answer) => answer.body.rail === 'direct')
    const settled = answers.filter((answer) => answer.body.rail === 'payg')
    t.equal(drawn.length, 10, '10 drawn on the deposit')
    t.equal(settled.length, 10, '10 paid per call')
    t.same(
      drawn.map((answer) => BigInt(answer.body.balanceMicros)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
      Array.from({ length: 10 }, (_, i) => BigInt(i) * prepared.costMicros),
      'each saw its own balance, none below 0',
    )
    t.ok(
      settled.every((answer) => answer.headers['payment-response'] !== undefined),
      'the per-call ones carry their receipt',
    )
    t.equal(await balance(db, owner), 0n, 'the deposit is spent, not overdrawn')
    t.same(await reservations(db, owner, 'rememberMemory'), { consumed: 10, settled: 10 })
    t.equal(w.token.transfers - transfers, 10, 'exactly the 10 per-call payments moved on-chain')
    t.equal(wallet - w.token.balanceOf(account.address), 10n * 1_000n)
    const records = await db.query<{ n: bigint }>(`select count(*)::int8 as n from memory_records where owner = $1 and state = 'active'`, [owner])
    t.equal(Number(records[0]?.n), 20)
    const debits = await db.query<{ n: bigint }>(`select count(*)::int8 as n from memory_ledger where owner = $1 and kind = 'debit' and replay_key is not null`, [owner])
    t.equal(Number(debits[0]?.n), 10, 'one debit per drawn write, each naming its forgone proof')
  })

  await t.test('the same proof twice (in turn and at once) debits once and is never settled, not even by the reconciler', async (t) => {
    const account = funded(w)
    const owner = account.address.toLowerCase()
    await deposit(w, account, 1_000n)
    const transfers = w.token.transfers
    const { signatures } = await proofs(w, account, '/api/v1/memories', {}, NOTE, 2)
    const once = await paidCall(w, '/api/v1/memories', signatures[0] as string, {}, NOTE)
    t.equal(once.status, 201)
    const again = await paidCall(w, '/api/v1/memories', signatures[0] as string, {}, NOTE)
    t.equal(again.status, 402)
    t.equal(again.body.reason, 'nonce_already_used')
    const atOnce = await Promise.all([0, 1, 2].map(() => paidCall(w, '/api/v1/memories', signatures[1] as string, {}, NOTE)))
    t.same(atOnce.map((answer) => answer.status).sort(), [201, 402, 402], 'one of three concurrent presentations is served')
    t.equal(await balance(db, owner), 1_000n - 2n * prepared.costMicros, 'two proofs, two debits')
    await w.payments.reconcile({ reservedStaleMs: 0, settlingStaleMs: 0, orphanedBefore: new Date(Date.now() + 60_000) })
    t.same(await reservations(db, owner, 'rememberMemory'), { consumed: 2 }, 'still consumed after reconciliation')
    t.equal(w.token.transfers, transfers, 'never settled')
  })

  await t.test('a write that dies after consuming its proof keeps neither the debit nor the consumption; the proof then works once', async (t) => {
    const account = funded(w)
    const owner = account.address.toLowerCase()
    await deposit(w, account, 1_000n)
    await db.exec(`create function draw_dies() returns trigger language plpgsql as $$ begin
        if new.kind = 'debit' and new.replay_key is not null then raise exception 'the process died here'; end if; return new; end $$;
      create trigger draw_dies before insert on memory_ledger for each row execute function draw_dies();`)
    const { signatures } = await proofs(w, account, '/api/v1/memories', {}, NOTE, 1)
    const died = await paidCall(w, '/api/v1/memories', signatures[0] as string, {}, NOTE)
    await db.exec(`drop trigger draw_dies on memory_ledger; drop function draw_dies();`)
    t.equal(died.status, 500)
    t.equal(await balance(db, owner), 1_000n, 'no debit')
    t.same(await reservations(db, owner, 'rememberMemory'), { released: 1 }, 'the proof is free again, never consumed or settled')
    const records = await db.query<{ n: bigint }>(`select count(*)::int8 as n from memory_records where owner = $1`, [owner])
    t.equal(Number(records[0]?.n), 0, 'no record')
    const retried = await paidCall(w, '/api/v1/memories', signatures[0] as string, {}, NOTE)
    t.equal(retried.status, 201)
    t.equal(retried.body.rail, 'direct')
    t.equal(await balance(db, owner), 1_000n - prepared.costMicros, 'debited once')
  })

  await t.test('a reservation that lapsed while the write ran: nothing debited, the write refused with challenge_expired', async (t) => {
    const account = funded(w)
    const owner = account.address.toLowerCase()
    await deposit(w, account, 1_000n)
    const { signatures, first } = await proofs(w, account, '/api/v1/memories', {}, NOTE, 1)
    const accepted = first.paymentRequired.accepts[0]
    const quote = {
      amountMicros: BigInt(accepted.amount),
      resourceUrl: `${MEMORY_URL}/api/v1/memories`,
      route: 'POST /api/v1/memories',
      description: 'remember',
      payTo: PAY_TO as `0x${string}`,
    }
    const authorized = await w.payments.guard.authorize({ 'payment-signature': signatures[0] as string }, quote, 'rememberMemory')
    t.ok(authorized.forgo, 'an x402 authorization can be forgone')
    await db.query(`update payment_reservations set state = 'released' where replay_key = $1`, [authorized.payment.replayKey])
    await t.rejects(
      w.role.service.rememberPaid(owner, prepared, { amountMicros: 1_000n, replayKey: authorized.payment.replayKey, bind: authorized.bind, forgo: authorized.forgo }, undefined),
      { code: 'payment_invalid', extensions: { reason: 'challenge_expired' } },
    )
    t.equal(await balance(db, owner), 1_000n)
    const records = await db.query<{ n: bigint }>(`select count(*)::int8 as n from memory_records where owner = $1`, [owner])
    t.equal(Number(records[0]?.n), 0)
  })

  await t.test('a payer without a deposit pays per call as before', async (t) => {
    const account = funded(w)
    const transfers = w.token.transfers
    const { signatures } = await proofs(w, account, '/api/v1/memories', {}, NOTE, 1)
    const answer = await paidCall(w, '/api/v1/memories', signatures[0] as string, {}, NOTE)
    t.equal(answer.status, 201)
    t.equal(answer.body.rail, 'payg')
    t.equal(w.token.transfers - transfers, 1)
  })
}

t.test('an MPP proof already on-chain (push) cannot be forgone; a signed transaction (pull) and an x402 authorization can', async (t) => {
  const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  t.teardown(() => db.close())
  await migrate(db, migrationsDir)
  const method = (protocol: 'x402' | 'mpp'): PaymentMethod => ({
    protocol,
    challenge: () => ({ headers: {}, body: {} }),
    async verify(credential) {
      return {
        protocol,
        version: 1,
        payer: PAY_TO,
        amountMicros: 1_000n,
        replayKey: `${protocol}:${credential}`,
        zeroValue: false,
        detail: { mode: credential.replace(/^Payment\s+/, '') },
        settle: async () => ({ status: 'failed', reason: 'not in this test' }),
      }
    },
  })
  const guard = createPaymentGuard({ db, methods: { x402: method('x402'), mpp: method('mpp') }, outcomes: createPaymentOutcomes({ db, logger }), logger })
  const quote = { amountMicros: 1_000n, resourceUrl: `${MEMORY_URL}/x`, route: 'POST /x', description: 'x', payTo: PAY_TO as `0x${string}` }
  const push = await guard.authorize({ authorization: 'Payment push' }, quote, 'op')
  const pull = await guard.authorize({ authorization: 'Payment pull' }, quote, 'op')
  const x402 = await guard.authorize({ 'payment-signature': 'sig' }, quote, 'op')
  t.equal(push.forgo, undefined, 'push: the payer broadcast it already, so it is settled per call')
  t.type(pull.forgo, 'function')
  t.type(x402.forgo, 'function')
})

t.test('on PGlite', async (t) => {
  const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  t.teardown(() => db.close())
  await suite(t, db)
})

t.test('on Postgres', async (t) => {
  const url = await throwawayDatabase(t)
  if (!url) return
  const db = await openDb({ kind: 'postgres', url })
  t.teardown(() => db.close())
  await suite(t, db)
})
