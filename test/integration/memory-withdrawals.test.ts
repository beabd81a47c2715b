// What a withdrawal answers (DELETE /api/v1/deposits, and the same tool over MCP), on a real database
// (PGlite, and Postgres when it answers: real concurrency there), through the real memory listener
// with real SIGN-IN-WITH-X proofs. Every answer says which withdrawal it is about (withdrawalId),
// what it returns (refundedMicros), where that refund stands now (status, txHash read from the
// refund itself, so a repeat sees its transaction once it is sent), what is still settling and so
// not in it (settlingMicros), and whether this call created it (replay). Ten concurrent
// withdrawals make exactly one refund, and every answer tells that refund's real state.
import t from 'tap'
import type { Test } from 'tap'
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { randomBytes, randomUUID } from 'node:crypto'
import { Ajv } from 'ajv'
import addFormatsModule from 'ajv-formats'
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv'
import { createSIWxPayload, encodeSIWxHeader } from '@x402/extensions/sign-in-with-x'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { keccak256, toHex } from 'viem'
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
import { WithdrawResult } from '../../src/catalog/schemas/memory.ts'
import { openPayments, type Payments } from '../../src/payments/index.ts'
import type { ChainPort } from '../../src/payments/chain/types.ts'
import { IMPLEMENTED_OPERATIONS } from '../../src/runtime.ts'
import { buildMemoryApp } from '../../src/memory/app.ts'
import { openMemoryRole, type MemoryRole } from '../../src/memory/role.ts'
import { jobQueueOnDemand } from '../../src/roles/job-queue.ts'
import { buildToolTable } from '../../src/mcp/tools.ts'
import { requestOf, resultOf, META } from '../../src/mcp/calls.ts'
import { createOperationDispatcher } from '../../src/mcp/dispatcher.ts'
import { memoryChain, memoryUsdc } from '../helpers/memory-chain.ts'
import { throwawayDatabase } from '../helpers/servers.ts'

const logger = createLogger('silent')
const MEMORY_URL = 'http://memory.withdrawals.test'
const GATEWAY_URL = 'http://gateway.withdrawals.test'
const PAY_TO = '0x000000000000000000000000000000000000c0de'
const urls = { gateway: GATEWAY_URL, scheduler: 'http://scheduler.withdrawals.test', memory: MEMORY_URL }
const catalog = createCatalog(registry, { urls, implemented: IMPLEMENTED_OPERATIONS })

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv
const checkAnswer = addFormats(new Ajv({ allErrors: true })).compile(JSON.parse(JSON.stringify(WithdrawResult)) as object)

type Json = Record<string, any>

/**
 * The in-memory chain with a switch: while `held`, a refund transfer is signed and "broadcast" but
 * not mined (the chain answers pending); resending it later mines it.
 */
function switchableChain() {
  const token = memoryUsdc()
  const base = memoryChain(token)
  token.mint(base.serviceAddress, 1_000_000_000n)
  let nonce = 1_000
  const control = { held: false }
  const chain: ChainPort = {
    ...base,
    async transfer(to, amount, options) {
      if (!control.held) return base.transfer(to, amount, options)
      const signed = { hash: keccak256(toHex(`held:${to}:${amount}:${nonce}`)), nonce, raw: toHex(`held:${to}:${amount}:${nonce}`) }
      nonce += 1
      await options?.onSigned?.(signed)
      return { status: 'pending', txHash: signed.hash }
    },
    async resend(tx, expected) {
      if (control.held) return { status: 'pending', txHash: tx.hash }
      return base.resend(tx, expected)
    },
  }
  return { chain, control, token }
}

interface Node {
  role: MemoryRole
  payments: Payments
  app: FastifyInstance
}

/** One memory replica over `db`, wired as src/runtime.ts wires the memory listener. */
async function node(t: Test, db: Db, dataDir: string, chain: ChainPort): Promise<Node> {
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
  return { role, payments, app }
}

/** A SIGN-IN-WITH-X proof for one DELETE /api/v1/deposits on `at` (from its 401 challenge). */
async function proofFor(at: Node, account: PrivateKeyAccount): Promise<string> {
  const first = await at.app.inject({ method: 'DELETE', url: '/api/v1/deposits' })
  if (first.statusCode !== 401) throw new Error(`expected 401, got ${first.statusCode} ${first.body}`)
  const challenge = (first.json() as Json).extensions?.['sign-in-with-x']
  const chain = challenge.supportedChains[0]
  return encodeSIWxHeader(await createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, account, `${MEMORY_URL}/api/v1/deposits`))
}

/** DELETE /api/v1/deposits as the wallet makes it; the 200 body. */
async function withdraw(at: Node, account: PrivateKeyAccount, proof?: string): Promise<Json> {
  const response = await at.app.inject({ method: 'DELETE', url: '/api/v1/deposits', headers: { 'sign-in-with-x': proof ?? (await proofFor(at, account)) } })
  if (response.statusCode !== 200) throw new Error(`withdrawal answered ${response.statusCode} ${response.body}`)
  return response.json() as Json
}

/**
 * A deposit as the deposit route records it: a reservation, the deposit bound to it, then (unless
 * `settling`) its settlement decided, and (when `confirmed`) confirmed on-chain.
 */
async function depositOf(db: Db, at: Node, owner: string, micros: bigint, stage: 'settling' | 'unconfirmed' | 'confirmed'): Promise<string> {
  const key = `dep-${randomUUID()}`
  await db.query(
    `insert into payment_reservations (replay_key, protocol, protocol_version, payer, amount_micros, operation_id, state, detail)
     values ($1, 'x402', 2, $2, $3, 'depositMemoryFunds', 'reserved', '{}')`,
    [key, owner, micros],
  )
  await at.role.money.deposit(owner, {
    amountMicros: micros,
    replayKey: key,
    bind: async (tx, effect) => {
      await tx.query(`update payment_reservations set state = 'settling', effect = $2 where replay_key = $1`, [key, effect])
    },
  })
  if (stage !== 'settling') await settle(db, at, key, stage === 'confirmed')
  return key
}

async function settle(db: Db, at: Node, key: string, confirmed: boolean): Promise<void> {
  await at.payments.outcomes.decide(key, { status: 'settled', reference: `0x${randomBytes(32).toString('hex')}` }, 'request')
  if (confirmed) await db.query(`update payment_reservations set confirmed_at = now() where replay_key = $1`, [key])
}

async function refundsOf(db: Db, owner: string) {
  return db.query<{ refund_id: string; amount_micros: bigint; state: string; tx_hash: string | null }>(
    `select refund_id, amount_micros, state, tx_hash from memory_refunds where owner = $1 order by created_at`,
    [owner],
  )
}

/** Sends every due refund now (the role's timer would, within 15 s). */
async function retryNow(db: Db, at: Node): Promise<void> {
  await db.query(`update memory_refunds set next_attempt_at = now() where state not in ('confirmed', 'cancelled')`)
  await at.role.money.refunds.retryDue()
}

function wellFormed(t: Test, answer: Json, label: string): void {
  t.ok(checkAnswer(answer), `${label}: matches the declared response schema ${JSON.stringify(checkAnswer.errors ?? [])}`)
  for (const field of ['withdrawalId', 'refundedMicros', 'status', 'txHash', 'settlingMicros', 'replay']) t.ok(field in answer, `${label}: carries ${field}`)
}

async function suite(t: Test, db: Db, dataDir: string): Promise<void> {
  await migrate(db, migrationsDir)
  const { chain, control } = switchableChain()
  const a = await node(t, db, dataDir, chain)
  const b = await node(t, db, dataDir, chain)

  await t.test('first withdrawal, its repeat, and nothing to withdraw: every answer is complete and says what it is', async (t) => {
    const account = privateKeyToAccount(generatePrivateKey())
    const owner = account.address.toLowerCase()
    await depositOf(db, a, owner, 1_000n, 'confirmed')
    const first = await withdraw(a, account)
    wellFormed(t, first, 'first')
    const [refund] = await refundsOf(db, owner)
    t.match(first, { withdrawalId: refund?.refund_id, refundedMicros: '1000', status: 'confirmed', txHash: refund?.tx_hash, settlingMicros: '0', replay: false })
    t.match(first.txHash, /^0x[0-9a-f]{64}$/)
    const again = await withdraw(a, account)
    wellFormed(t, again, 'repeat')
    t.same(again, { ...first, replay: true }, 'a repeat answers the same refund, marked as a replay')
    t.equal((await refundsOf(db, owner)).length, 1, 'nothing was refunded twice')

    const stranger = privateKeyToAccount(generatePrivateKey())
    const none = await withdraw(a, stranger)
    wellFormed(t, none, 'nothing to withdraw')
    t.same(none, { withdrawalId: null, refundedMicros: '0', status: 'none', txHash: null, settlingMicros: '0', replay: true })
  })

  await t.test('a refund broadcast and not mined yet: the answer and every repeat carry its transaction', async (t) => {
    const account = privateKeyToAccount(generatePrivateKey())
    const owner = account.address.toLowerCase()
    await depositOf(db, a, owner, 2_000n, 'confirmed')
    control.held = true
    try {
      const first = await withdraw(a, account)
      wellFormed(t, first, 'first')
      const [refund] = await refundsOf(db, owner)
      t.equal(refund?.state, 'sending')
      t.match(refund?.tx_hash, /^0x[0-9a-f]{64}$/, 'the refund has its transaction')
      t.match(first, { withdrawalId: refund?.refund_id, refundedMicros: '2000', status: 'sending', txHash: refund?.tx_hash, replay: false })
      const repeat = await withdraw(b, account)
      t.match(repeat, { withdrawalId: refund?.refund_id, status: 'sending', txHash: refund?.tx_hash, replay: true }, 'a repeat on another replica reads the refund as it stands')
    } finally {
      control.held = false
    }
    await retryNow(db, a)
    const [refund] = await refundsOf(db, owner)
    t.equal(refund?.state, 'confirmed')
    const later = await withdraw(a, account)
    t.match(later, { withdrawalId: refund?.refund_id, status: 'confirmed', txHash: refund?.tx_hash, replay: true }, 'once mined, the repeat says confirmed')
  })

  await t.test('a deposit still settling is not in the refund, is said to be settling, and is refunded once it settles', async (t) => {
    const account = privateKeyToAccount(generatePrivateKey())
    const owner = account.address.toLowerCase()
    await depositOf(db, a, owner, 3_000n, 'confirmed')
    const early = await depositOf(db, a, owner, 500n, 'settling')
    const first = await withdraw(a, account)
    wellFormed(t, first, 'with a deposit settling')
    t.match(first, { refundedMicros: '3000', status: 'confirmed', settlingMicros: '500', replay: false }, 'the settled part is refunded; the settling part is named')
    const repeat = await withdraw(a, account)
    t.match(repeat, { withdrawalId: first.withdrawalId, refundedMicros: '3000', settlingMicros: '500', replay: true })

    await settle(db, a, early, true)
    const late = await depositOf(db, a, owner, 700n, 'settling')
    const second = await withdraw(a, account)
    wellFormed(t, second, 'second')
    t.match(second, { refundedMicros: '500', status: 'confirmed', settlingMicros: '700', replay: false }, 'the deposit that settled meanwhile is refunded')
    t.not(second.withdrawalId, first.withdrawalId)

    // Nothing withdrawable, a new deposit settling: not an earlier refund answered again.
    await settle(db, a, late, false)
    await withdraw(a, account) // the 700, waiting for its confirmation
    const settling = await depositOf(db, a, owner, 900n, 'settling')
    const waiting = await withdraw(a, account)
    wellFormed(t, waiting, 'only a deposit settling')
    t.same(
      waiting,
      { withdrawalId: null, refundedMicros: '0', status: 'none', txHash: null, settlingMicros: '900', replay: true },
      'nothing refunded by this call; the 900 is settling',
    )
    t.equal((await refundsOf(db, owner)).length, 3, 'no refund made for a deposit not settled')

    await settle(db, a, settling, true)
    await db.query(`update payment_reservations set confirmed_at = now() where replay_key = $1`, [late])
    const last = await withdraw(a, account)
    t.match(last, { refundedMicros: '900', settlingMicros: '0', replay: false })
    await retryNow(db, a)
    const refunds = await refundsOf(db, owner)
    t.same(
      refunds.map((row) => [row.amount_micros, row.state]),
      [
        [3_000n, 'confirmed'],
        [500n, 'confirmed'],
        [700n, 'confirmed'],
        [900n, 'confirmed'],
      ],
      'every deposit refunded exactly once',
    )
  })

  await t.test('a deposit settled but not confirmed on-chain: refunded, waiting for the confirmation, and said so', async (t) => {
    const account = privateKeyToAccount(generatePrivateKey())
    const owner = account.address.toLowerCase()
    const key = await depositOf(db, a, owner, 4_000n, 'unconfirmed')
    const first = await withdraw(a, account)
    wellFormed(t, first, 'waiting')
    t.match(first, { refundedMicros: '4000', status: 'waiting', txHash: null, settlingMicros: '0', replay: false })
    await db.query(`update payment_reservations set confirmed_at = now() where replay_key = $1`, [key])
    await retryNow(db, a)
    const [refund] = await refundsOf(db, owner)
    t.match(await withdraw(b, account), { withdrawalId: first.withdrawalId, status: 'confirmed', txHash: refund?.tx_hash, replay: true })
  })

  await t.test('10 concurrent withdrawals of one owner: one refund, and every answer tells its real state', async (t) => {
    const account = privateKeyToAccount(generatePrivateKey())
    const owner = account.address.toLowerCase()
    await depositOf(db, a, owner, 10_000n, 'confirmed')
    const proofs = await Promise.all(Array.from({ length: 10 }, () => proofFor(a, account)))
    const answers = await Promise.all(proofs.map((proof) => withdraw(a, account, proof)))
    const refunds = await refundsOf(db, owner)
    t.equal(refunds.length, 1, 'exactly one refund')
    const refund = refunds[0]
    t.equal(refund?.state, 'confirmed')
    t.equal(answers.filter((answer) => answer.replay === false).length, 1, 'one answer created it, the others replay it')
    for (const [i, answer] of answers.entries()) {
      wellFormed(t, answer, `answer ${i}`)
      t.match(
        answer,
        { withdrawalId: refund?.refund_id, refundedMicros: '10000', status: 'confirmed', txHash: refund?.tx_hash, settlingMicros: '0' },
        `answer ${i} is the refund as sent`,
      )
    }
  })

  await t.test('10 concurrent withdrawals across two replicas while the refund is in flight: one refund, no answer untrue', async (t) => {
    const account = privateKeyToAccount(generatePrivateKey())
    const owner = account.address.toLowerCase()
    await depositOf(db, a, owner, 20_000n, 'confirmed')
    const nodes = Array.from({ length: 10 }, (_, i) => (i % 2 === 0 ? a : b))
    const proofs = await Promise.all(nodes.map((at) => proofFor(at, account)))
    control.held = true
    let answers: Json[]
    try {
      answers = await Promise.all(nodes.map((at, i) => withdraw(at, account, proofs[i])))
    } finally {
      control.held = false
    }
    const refunds = await refundsOf(db, owner)
    t.equal(refunds.length, 1, 'exactly one refund')
    const refund = refunds[0]
    t.equal(answers.filter((answer) => answer.replay === false).length, 1)
    for (const [i, answer] of answers.entries()) {
      wellFormed(t, answer, `answer ${i}`)
      t.match(answer, { withdrawalId: refund?.refund_id, refundedMicros: '20000' })
      // Read on the other replica before it was claimed or signed, a refund has no transaction yet:
      // then the answer says pending or sending with none; once signed, every answer carries it.
      if (answer.txHash !== null) t.equal(answer.txHash, refund?.tx_hash, `answer ${i}: its transaction`)
      else t.ok(['pending', 'sending'].includes(answer.status), `answer ${i}: no transaction only before it is signed (${answer.status})`)
      t.not(answer.status, 'confirmed', `answer ${i}: not confirmed before it was mined`)
    }
    t.ok(
      answers.filter((answer) => answer.replay === true && answer.withdrawalId === refund?.refund_id && answer.txHash === refund?.tx_hash).length >= 4,
      'the replays on the replica that sent it carry its transaction',
    )
    await retryNow(db, a)
    t.match(await withdraw(b, account), { withdrawalId: refund?.refund_id, status: 'confirmed', txHash: (await refundsOf(db, owner))[0]?.tx_hash, replay: true })
  })

  await t.test('over MCP: the withdraw tool answers the same, valid against its output schema', async (t) => {
    const account = privateKeyToAccount(generatePrivateKey())
    const owner = account.address.toLowerCase()
    await depositOf(db, a, owner, 5_000n, 'confirmed')
    const table = buildToolTable(catalog)
    const tool = table.tools.get('withdrawMemoryDeposit')
    if (tool === undefined) throw new Error('no withdrawMemoryDeposit tool')
    const dispatcher = createOperationDispatcher({ local: new Map([['memory', a.app]]), urls })
    const context = { headers: {}, forwardedFor: '127.0.0.1', requestId: 'mcp-1' }
    const call = async () => resultOf(await dispatcher.dispatch(requestOf(tool, {}, { [META.signInWithX]: await proofFor(a, account) }, context)), undefined)
    const check = new AjvJsonSchemaValidator().getValidator(tool.definition.outputSchema as object)
    const first = await call()
    const again = await call()
    const [refund] = await refundsOf(db, owner)
    for (const [label, result, replay] of [
      ['first', first, false],
      ['repeat', again, true],
    ] as const) {
      t.notOk(result.isError, `${label}: not an error`)
      t.ok(check(result.structuredContent).valid, `${label}: valid against the tool's output schema`)
      wellFormed(t, result.structuredContent as Json, `MCP ${label}`)
      t.match(result.structuredContent, { withdrawalId: refund?.refund_id, refundedMicros: '5000', status: 'confirmed', txHash: refund?.tx_hash, settlingMicros: '0', replay })
    }
  })
}

t.test('PGlite', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'agw-memwd-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  t.teardown(() => db.close())
  await suite(t, db, dir)
})

t.test('Postgres', async (t) => {
  const url = await throwawayDatabase(t)
  if (url === undefined) return
  const dir = mkdtempSync(path.join(os.tmpdir(), 'agw-memwd-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const db = await openDb({ kind: 'postgres', url })
  t.teardown(() => db.close())
  await suite(t, db, dir)
})
