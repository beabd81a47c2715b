// The payment crash drill's scenario runner (test/integration/payment-crash.test.ts and
// payment-crash-facilitator.test.ts): the real gateway and scheduler apps, the real x402 client
// signing, a real anvil chain. A process is killed at EVERY step of a paid request (each
// statement, transaction commit, chain call and, in facilitator mode, facilitator call, before it
// runs and after it ran but before its answer arrived: crashable.ts), then a fresh process on the
// same database and chain reconciles, every task is deleted and every refund sent. Then, for every
// buyer, on-chain: balance = minted - what the plans they hold cost (tasks are deleted without
// runs, so everything paid into escrow comes back), the service wallet gained exactly that, and
// the database agrees with the chain (a payment is settled in the database iff its authorization
// was used on-chain; no provisional work, reservation or refund is left over). In facilitator
// mode also: the facilitator settled each authorization at most once, and every authorization
// used on-chain was broadcast by the facilitator's wallet, never by the process.
import { randomBytes } from 'node:crypto'
import type { Test } from 'tap'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { createPublicClient, http, type Address, type Hex } from 'viem'
import type { Db } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import type { Clock } from '../../src/platform/clock.ts'
import { ANVIL_ACCOUNT_0_KEY, type StartedDevChain } from '../../src/payments/chain/dev.ts'
import type { KillPoint } from './crashable.ts'
import { boot, createCall, fundCall, PLAN_PRICE, purchaseCall, send, shutdown, sign, type Call, type ProcessOptions } from './paid-process.ts'
import { FACILITATOR_KEY, type TestFacilitator } from './x402-facilitator.ts'
import { releaseOrphanedClaims } from '../../src/payments/check-claims.ts'

const MINTED = 20_000_000n

/**
 * `broke-*`: the buyer signs but holds no USDC, so the settlement fails and the work is reversed.
 * `purchase-id`: a purchase carrying an x402 payment-identifier, retried after the restart with a
 * new proof and the same id (right away, and once the dead request's lease lapsed): it is answered
 * without a second charge.
 */
export type Kind = 'create' | 'fund' | 'purchase' | 'delete' | 'broke-create' | 'broke-purchase' | 'purchase-id'

export const ALL_KINDS: readonly Kind[] = ['create', 'fund', 'purchase', 'delete', 'broke-create', 'broke-purchase', 'purchase-id']

export interface SuiteOptions {
  /** self: our settler wallet broadcasts; facilitator: `facilitator` verifies and settles (the settler key only refunds). */
  mode: 'self' | 'facilitator'
  /** The test facilitator (one per test file, on the same dev chain); facilitator mode only. */
  facilitator?: TestFacilitator
  /** One subtest per kind: killed before and after every step. */
  kinds: readonly Kind[]
  /** The requests of the seeded concurrent subtest (killed in the middle of all of them); none = no such subtest. */
  concurrent?: readonly Kind[]
}

interface Scenario {
  kinds: Kind[]
  kill: KillPoint | undefined
}

interface Outcome {
  /** Steps the armed part took (to enumerate kill points). */
  steps: number
  killed: boolean
  trace: string[]
}

export async function paymentCrashSuite(t: Test, db: Db, dev: StartedDevChain, options: SuiteOptions): Promise<void> {
  const { facilitator } = options
  if ((options.mode === 'facilitator') !== (facilitator !== undefined)) throw new Error('facilitator mode needs a facilitator, and only it')
  const processOptions: ProcessOptions = facilitator ? { facilitatorUrl: facilitator.url } : {}
  const facilitatorWallet = privateKeyToAccount(FACILITATOR_KEY).address.toLowerCase()
  const reader = createPublicClient({ transport: http(dev.rpcUrl) })
  await migrate(db)
  const settlerKey = ANVIL_ACCOUNT_0_KEY
  // Payments land in the refunding wallet (in facilitator mode too: the facilitator pays only the gas).
  const payTo = privateKeyToAccount(settlerKey).address
  const balance = (who: Address) => dev.balanceOf(who)

  /** Runs one scenario: setup, the armed requests (killed at `kill`), restart, reconcile, delete all, check. */
  async function run(t: Test, scenario: Scenario): Promise<Outcome> {
    const buyers = scenario.kinds.map(() => privateKeyToAccount(generatePrivateKey()))
    const minted = scenario.kinds.map((kind) => (kind.startsWith('broke-') ? 0n : MINTED))
    await Promise.all(buyers.map((buyer, i) => (minted[i] ? dev.mint(buyer.address, minted[i] as bigint) : undefined)))
    const serviceBefore = await balance(payTo)
    const first = await boot(db, dev, settlerKey, payTo, undefined, processOptions)
    // Setup (unarmed): what each request needs, and its signed proof.
    const prepared: { kind: Kind; buyer: PrivateKeyAccount; call?: Call; proof?: Record<string, string>; taskId?: string; paymentId?: string }[] = []
    for (const [i, kind] of scenario.kinds.entries()) {
      const buyer = buyers[i] as PrivateKeyAccount
      if (kind === 'create' || kind === 'broke-create') {
        const call = createCall(`crash-${randomBytes(6).toString('hex')}`)
        prepared.push({ kind, buyer, call, proof: await sign(first, buyer, call) })
      } else if (kind === 'purchase' || kind === 'broke-purchase' || kind === 'purchase-id') {
        const registration = await first.gateway.inject({ method: 'POST', url: '/auth/register' })
        const call = purchaseCall((registration.json() as { accessToken: string }).accessToken)
        const paymentId = kind === 'purchase-id' ? `pay_crash_${randomBytes(8).toString('hex')}` : undefined
        prepared.push({ kind, buyer, call, proof: await sign(first, buyer, call, paymentId), ...(paymentId ? { paymentId } : {}) })
      } else {
        const create = createCall(`crash-setup-${randomBytes(6).toString('hex')}`)
        const created = await send(first, create, await sign(first, buyer, create))
        if (created.status !== 201) throw new Error(`setup create answered ${created.status}: ${JSON.stringify(created.body)}`)
        const taskId = created.body.id as string
        if (kind === 'fund') {
          const call = fundCall(taskId, `crash-fund-${randomBytes(6).toString('hex')}`)
          prepared.push({ kind, buyer, call, proof: await sign(first, buyer, call), taskId })
        } else prepared.push({ kind, buyer, taskId })
      }
    }
    // The armed part: every request at once; the process dies at the kill point.
    first.life.killAt = scenario.kill
    first.life.armed = true
    await Promise.allSettled(prepared.map((p) => (p.kind === 'delete' ? first.service.deleteTask(p.taskId as string, p.buyer.address) : send(first, p.call as Call, p.proof))))
    const outcome: Outcome = { steps: first.life.steps, killed: first.life.killed, trace: [...first.life.trace] }
    await shutdown(first)

    // The restarted process: decide what the dead one left open, as its timers would (the stale
    // windows and refund leases taken as passed), then delete everything and send every refund.
    // Its clock can jump past every authorization's validBefore: what is still open then (a
    // settlement that cannot complete: the buyer is broke) can never move and is decided failed.
    const restartedAt = new Date()
    let offsetMs = 0
    const clock: Clock = { now: () => new Date(Date.now() + offsetMs), nowMs: () => Date.now() + offsetMs }
    const second = await boot(db, dev, settlerKey, payTo, clock, processOptions)
    // The dead process's claims on settlements it was asking the chain about lapse (at once on
    // PGlite, where the start knows it; after CHECK_CLAIM_MS on Postgres).
    await releaseOrphanedClaims(db, restartedAt)
    const payers = buyers.map((b) => b.address.toLowerCase())
    const problems: string[] = []
    // The buyer of a purchase-id retries at once (the dead request's lease still runs: at most a 409
    // asking to retry, never a second charge).
    const retries = prepared.filter((p) => p.paymentId !== undefined)
    for (const p of retries) {
      const soon = await send(second, p.call as Call, await sign(second, p.buyer, p.call as Call, p.paymentId))
      if (soon.status !== 200 && soon.status !== 409) problems.push(`retry right after the restart answered ${soon.status} ${JSON.stringify(soon.body)}`)
    }
    const openPayments = async () =>
      Number(
        (
          await db.query<{ n: bigint }>(`select count(*)::int8 as n from payment_reservations where payer = any($1::text[]) and state in ('reserved', 'settling', 'pending')`, [
            payers,
          ])
        )[0]?.n ?? 0n,
      )
    // Then once its lease lapsed: answered (the first answer, a new purchase if nothing was bought,
    // or "paid, answer not replayable"), reconciling while the dead request's payment is decided.
    await db.query(`update payment_identifiers set lease_until = now() - interval '1 second' where state = 'in_flight' and payment_id = any($1::text[])`, [
      retries.map((p) => p.paymentId),
    ])
    const retried = new Map<string, { status: number; code: unknown; replay: boolean }>()
    for (let pass = 0; pass < 10; pass += 1) {
      for (const p of retries) {
        if (retried.has(p.paymentId as string)) continue
        const answer = await send(second, p.call as Call, await sign(second, p.buyer, p.call as Call, p.paymentId))
        if (answer.status !== 409 || answer.body.code !== 'payment_in_progress') {
          retried.set(p.paymentId as string, { status: answer.status, code: answer.body.code, replay: answer.headers['x-payment-identifier-replay'] === 'true' })
        }
      }
      if ((await openPayments()) === 0 && retried.size === retries.length) break
      if (pass === 3) offsetMs = 3_600_000
      await second.payments.reconcile({ reservedStaleMs: 0, settlingStaleMs: 0 })
    }
    const tasks = await db.query<{ id: string; owner: string; status: string }>(`select id, owner, status from scheduler_tasks where owner = any($1::text[])`, [payers])
    for (const task of tasks) {
      if (task.status !== 'deleted') await second.service.deleteTask(task.id, task.owner)
    }
    // An escrow closes once its charges are confirmed (the dev chain: mined and saved, which a busy
    // machine may take a moment to do), so the passes confirm, then refund, until nothing is open.
    for (let pass = 0; pass < 50; pass += 1) {
      await second.payments.confirmations.sweep()
      await db.query(`update scheduler_refunds set next_attempt_at = now() where state <> 'confirmed'`)
      await second.service.recover({ orphanedBefore: restartedAt })
      const open = await db.query(
        `select 1 from scheduler_refunds r join scheduler_tasks t on t.id = r.task_id where t.owner = any($1::text[]) and r.state <> 'confirmed'
         union all select 1 from scheduler_tasks t where owner = any($1::text[]) and (select coalesce(sum(amount_micros), 0) from scheduler_ledger l where l.task_id = t.id) <> 0`,
        [payers],
      )
      if (open.length === 0) break
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    await shutdown(second)

    // The checks.
    const where = `kill ${scenario.kill ? `${scenario.kill.when} step ${scenario.kill.step} (${outcome.trace[scenario.kill.step - 1] ?? 'beyond the last step'})` : 'none'} of ${scenario.kinds.join('+')}`
    if ((await openPayments()) > 0) problems.push('open reservations left')
    for (const p of retries) {
      const answer = retried.get(p.paymentId as string)
      const buyer = p.buyer.address.toLowerCase()
      const [plans] = await db.query<{ n: bigint }>(
        `select count(*)::int8 as n from plan_purchases p join payment_reservations r on r.replay_key = p.replay_key where r.payer = $1 and p.state = 'active'`,
        [buyer],
      )
      if (!answer) problems.push('the retry was never answered')
      else if (answer.status === 200 && plans?.n !== 1n) problems.push(`the retry answered 200 and the buyer holds ${plans?.n} plans`)
      else if (answer.status === 409 && answer.code !== 'payment_identifier_conflict') problems.push(`the retry answered 409 ${String(answer.code)}`)
      else if (answer.status !== 200 && answer.status !== 409) problems.push(`the retry answered ${answer.status}`)
      if ((plans?.n ?? 0n) > 1n) problems.push(`one payment identifier bought ${plans?.n} plans`)
    }
    const leftovers = await db.query<{ what: string }>(
      `select 'provisional charge' as what from scheduler_charges c join scheduler_tasks t on t.id = c.task_id where t.owner = any($1::text[]) and c.state = 'provisional'
       union all select 'refund not confirmed' from scheduler_refunds r join scheduler_tasks t on t.id = r.task_id where t.owner = any($1::text[]) and r.state <> 'confirmed'
       union all select 'charge row without tx hash' from scheduler_ledger l join scheduler_tasks t on t.id = l.task_id where t.owner = any($1::text[]) and l.kind = 'charge' and l.tx_hash is null
       union all select 'task not deleted' from scheduler_tasks where owner = any($1::text[]) and status <> 'deleted'
       union all select 'Task resource left: ' || name from resources where kind = 'Task'
       union all select 'escrow not closed to 0' from scheduler_tasks t where owner = any($1::text[]) and (select coalesce(sum(amount_micros), 0) from scheduler_ledger l where l.task_id = t.id) <> 0`,
      [payers],
    )
    problems.push(...leftovers.map((row) => row.what))
    // The database agrees with the chain about every payment.
    const reservations = await db.query<{ state: string; detail: { from: Hex; nonce: Hex } }>(`select state, detail from payment_reservations where payer = any($1::text[])`, [
      payers,
    ])
    for (const r of reservations) {
      const used = await dev.isAuthorizationUsed(r.detail.from, r.detail.nonce)
      if (used !== (r.state === 'settled')) problems.push(`reservation ${r.state} but authorization ${used ? 'used' : 'unused'} on-chain`)
    }
    // Conservation, per buyer and for the service wallet.
    const plans = await db.query<{ payer: string; n: bigint }>(
      `select r.payer, count(*)::int8 as n from plan_purchases p join payment_reservations r on r.replay_key = p.replay_key where r.payer = any($1::text[]) and p.state = 'active' group by r.payer`,
      [payers],
    )
    const held = new Map(plans.map((row) => [row.payer, row.n]))
    let kept = 0n
    for (const [i, buyer] of buyers.entries()) {
      const cost = (held.get(buyer.address.toLowerCase()) ?? 0n) * PLAN_PRICE
      kept += cost
      const actual = await balance(buyer.address)
      const expected = (minted[i] as bigint) - cost
      if (actual !== expected) problems.push(`buyer ${buyer.address} holds ${actual}, conservation says ${expected}`)
    }
    const serviceAfter = await balance(payTo)
    if (serviceAfter - serviceBefore !== kept) problems.push(`service wallet moved ${serviceAfter - serviceBefore}, conservation says ${kept}`)
    if (facilitator) {
      // Settled at most once by the facilitator; every used authorization carried by its wallet's transaction.
      const settled = new Map<string, number>()
      for (const call of facilitator.settles) {
        if (payers.includes(call.payer) && call.success) settled.set(call.nonce, (settled.get(call.nonce) ?? 0) + 1)
      }
      for (const [nonce, times] of settled) if (times > 1) problems.push(`the facilitator settled authorization ${nonce} ${times} times`)
      for (const proc of [first, second]) problems.push(...proc.ownBroadcasts.map((auth) => `the process itself tried to broadcast authorization ${auth}`))
      for (const r of reservations) {
        if (!(await dev.isAuthorizationUsed(r.detail.from, r.detail.nonce))) continue
        const hash = await dev.findAuthorizationTx(r.detail.from, r.detail.nonce)
        const sender = hash ? (await reader.getTransaction({ hash })).from.toLowerCase() : undefined
        if (sender !== facilitatorWallet) problems.push(`authorization ${r.detail.nonce} used on-chain by a transaction from ${sender ?? 'nowhere found'}, not the facilitator`)
      }
    }
    t.same(problems, [], where)
    return outcome
  }

  for (const kind of options.kinds) {
    await t.test(`${kind}: killed before and after every step`, async (t) => {
      const clean = await run(t, { kinds: [kind], kill: undefined })
      if (options.mode === 'facilitator' && kind.startsWith('broke-')) {
        // The facilitator's /verify checks the balance: refused there, before anything is reserved.
        t.equal(clean.trace.at(-1), 'facilitator: /verify', `an uninterrupted ${kind} is refused at /verify after ${clean.steps} steps`)
      } else t.ok(clean.steps > 3, `an uninterrupted ${kind} takes ${clean.steps} steps`)
      for (let step = 1; step <= clean.steps; step += 1) {
        for (const when of ['before', 'after'] as const) {
          const outcome = await run(t, { kinds: [kind], kill: { step, when } })
          if (!outcome.killed) t.fail(`the kill at ${when} step ${step} never happened`)
        }
      }
    })
  }

  const { concurrent } = options
  if (concurrent === undefined || concurrent.length === 0) return
  await t.test('many requests at once, killed in the middle (seeded)', async (t) => {
    let seed = 20261125
    const random = () => {
      seed = (seed * 48271) % 2147483647
      return seed / 2147483647
    }
    const kinds = [...concurrent]
    const clean = await run(t, { kinds, kill: undefined })
    for (let round = 0; round < 6; round += 1) {
      const step = 1 + Math.floor(random() * clean.steps)
      await run(t, { kinds, kill: { step, when: random() < 0.5 ? 'before' : 'after' } })
    }
  })
}
