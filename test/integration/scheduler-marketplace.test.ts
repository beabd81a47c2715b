// The scheduler's marketplace rail end to end in one process, on PGlite and on a throw-away real
// Postgres database: the real gateway app (registration, plan purchase paid by the real x402 client
// over HTTP, settled on an in-memory USDC) and the real scheduler app (fastify inject on its
// registry routes) over one database, with the scheduler world's real ResourceStore, service and
// Task/Run controllers on a FakeClock and a scripted executor (the sandbox is tested elsewhere).
// Covered: create with a plan token (201, rail marketplace, no payment), the 401/402/403/400
// answers of bad, unknown, ended and absent tokens, runs consuming the lifetime cap with one usage
// report and one plan debit per run (also across a repeated finish), the cap running out
// (paused_insufficient_funds + recovery_hint), raising the cap by fund, plan exhaustion pausing
// the task, owner endpoints by token, audit-only ledger rows, and DELETE refunding nothing.
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { createLogger } from '../../src/platform/logger.ts'
import { findPlan, findService } from '../../src/catalog/registry.ts'
import type { ServiceSpec } from '../../src/catalog/types.ts'
import type { Payments } from '../../src/payments/index.ts'
import { DEFAULT_RATES } from '../../src/scheduler/domain/rates.ts'
import { createSchedulerMarketplace } from '../../src/scheduler/marketplace.ts'
import { FakeClock } from '../helpers/fake-clock.ts'
import { worldApps, GATEWAY_URL } from '../helpers/world-apps.ts'
import { openWorld, type World } from '../helpers/scheduler-world.ts'
import { throwawayDatabase } from '../helpers/servers.ts'

const logger = createLogger('silent')
const PLAN = 'scheduler-credit-5'
// max_runtime_sec 10 → ceiling 10 x 100 + 1000 overhead = 2000 micros; a scripted run costs 1100..2000.
const CEILING = 2_000n

interface Harness {
  world: World
  payments: Payments
  scheduler: FastifyInstance
  gatewayBase: string
  /** A registered agent's access token. */
  register(): Promise<{ agentId: string; token: string }>
  /** Buys `scheduler-credit-5` for the token through the gateway's real purchase route (x402). */
  buyPlan(token: string): Promise<Record<string, unknown>>
  call(
    method: string,
    url: string,
    options?: { token?: string; headers?: Record<string, string>; body?: unknown },
  ): Promise<{ status: number; body: any; headers: Record<string, unknown> }>
  /** Advances the clock one cron slot and lets the controllers finish what is due. */
  tick(): Promise<void>
}

function taskBody(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    schedule: { every: 'minute' },
    runtime: 'python',
    entrypoint: 'main.py',
    source: 'print("hello from the marketplace")',
    max_runtime_sec: 10,
    max_sibling_calls: 0,
    max_amount_usdc_micros: 5_000,
    ...overrides,
  }
}

async function harness(t: Test, databaseUrl?: string): Promise<Harness> {
  // Cron slots fall mid-minute; the clock starts near real time so the buyer's x402 authorization
  // (signed on the wall clock) is valid on the server's clock when the plan is bought.
  const start = Math.floor(Date.now() / 60_000) * 60_000 + 30_000
  const clock = new FakeClock(start)
  const world = await openWorld({ ...(databaseUrl ? { databaseUrl } : {}), clock })
  const { payments, token, gateway, gatewayBase, scheduler } = await worldApps(t, world)

  const buyer = privateKeyToAccount(generatePrivateKey())
  token.mint(buyer.address, 100_000_000n)
  const paying = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))

  return {
    world,
    payments,
    scheduler,
    gatewayBase,
    async register() {
      const response = await gateway.inject({ method: 'POST', url: '/auth/register' })
      const body = response.json() as { agentId: string; accessToken: string }
      return { agentId: body.agentId, token: body.accessToken }
    },
    async buyPlan(accessToken) {
      const response = await paying(`${gatewayBase}/plans/${PLAN}/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${accessToken}` } })
      const body = (await response.json()) as Record<string, unknown>
      if (response.status !== 200) throw new Error(`plan purchase: ${response.status} ${JSON.stringify(body)}`)
      return body
    },
    async call(method, url, options = {}) {
      const headers: Record<string, string> = { ...(options.headers ?? {}) }
      if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`
      const response = await scheduler.inject({
        method: method as 'GET',
        url,
        headers,
        ...(options.body === undefined ? {} : { payload: options.body as Record<string, unknown> }),
      })
      return { status: response.statusCode, body: response.body ? response.json() : undefined, headers: response.headers }
    },
    async tick() {
      world.clock.advance(60_000)
      await world.settle()
    },
  }
}

async function usageRows(world: World, taskId: string) {
  return world.db.query<{ run_id: string; units: bigint; included_units: bigint; debited_micros: bigint; plan_id: string | null }>(
    `select run_id, units, included_units, debited_micros, plan_id from scheduler_usage_reports where task_id = $1 order by run_id`,
    [taskId],
  )
}

async function planCredit(world: World, agentId: string): Promise<bigint> {
  const rows = await world.db.query<{ n: bigint }>(`select coalesce(sum(amount_micros), 0)::int8 as n from plan_credit_ledger where agent_id = $1 and plan_id = $2`, [
    agentId,
    PLAN,
  ])
  return rows[0]?.n ?? 0n
}

async function suite(t: Test, databaseUrl?: string): Promise<void> {
  const h = await harness(t, databaseUrl)
  const { world } = h
  const alice = await h.register()
  const bought = await h.buyPlan(alice.token)
  t.match(
    bought,
    { planId: PLAN, agentId: alice.agentId, status: 'active', kind: 'credit', creditMicros: '5000000' },
    'the plan is bought through the gateway with a real x402 payment',
  )
  const bob = await h.register() // registered, no plan
  // Plans of later holders are bought now, while the server's clock still agrees with the wall
  // clock the x402 client signs its authorization on (later the FakeClock runs ahead).
  const dave = await h.register()
  await h.buyPlan(dave.token)
  const erin = await h.register()
  await h.buyPlan(erin.token)
  const frank = await h.register()
  await h.buyPlan(frank.token)
  const create = (key: string, options: { token?: string; headers?: Record<string, string>; body?: Record<string, unknown> } = {}) =>
    h.call('POST', '/api/v1/tasks', { ...options, headers: { 'idempotency-key': key, ...(options.headers ?? {}) }, body: options.body ?? taskBody() })

  let taskId = ''

  await t.test('create: token and payment paths', async (t) => {
    const absent = await create('k-absent', { headers: { 'x-pay-amount-micros': '5000' } })
    t.equal(absent.status, 402, 'no token and no payment: the direct rail 402')
    t.equal(absent.headers['content-type'], 'application/problem+json; charset=utf-8')
    t.equal(absent.body.code, 'payment_required')
    t.match(absent.body.marketplace, { plans: [{ id: PLAN, kind: 'credit', purchase: new RegExp(`/plans/${PLAN}/purchase$`) }] }, 'the 402 names the marketplace alternative')

    const noHeader = await create('k-absent-2')
    t.equal(noHeader.status, 400, 'no token and no X-Pay-Amount-Micros: 400 naming the header')
    t.equal(noHeader.body.field, 'header.x-pay-amount-micros')
    t.match(noHeader.body.detail, /marketplace rail/)

    const unknown = await create('k-unknown', { token: 'agw_not-a-token' })
    t.equal(unknown.status, 401, 'an unknown token: 401')
    t.equal(unknown.headers['content-type'], 'application/problem+json; charset=utf-8')
    t.match(unknown.body, { code: 'bearer_required', field: 'header.authorization', recipe: { register: { method: 'POST' } } })
    t.match(unknown.body.plans, [{ id: PLAN }])

    const garbage = await create('k-garbage', { token: 'whsec_something' })
    t.equal(garbage.status, 401, 'a bearer that is not an access token: 401')
    t.equal(garbage.body.code, 'bearer_required')

    const noPlan = await create('k-noplan', { token: bob.token })
    t.equal(noPlan.status, 403, 'a token without a covering plan: 403')
    t.match(noPlan.body, { code: 'plan_required', ceiling_micros: CEILING.toString(), credit_micros: '0' })
    t.match(noPlan.body.plans, [{ id: PLAN, kind: 'credit' }])

    // A purchase whose payment failed (cancelled by the payment's decision) covers nothing.
    const carol = await h.register()
    const plan = findPlan(PLAN)!
    const replayKey = `test:${carol.agentId}`
    await h.payments.agents.activatePlan({ agentId: carol.agentId, plan, replayKey, bind: async () => {} })
    await world.db.transaction((tx) => h.payments.agents.purchaseOutcomes.failed(tx, replayKey))
    const ended = await create('k-ended', { token: carol.token })
    t.equal(ended.status, 403, 'an ended plan: 403')
    t.equal(ended.body.code, 'plan_required')

    const both = await create('k-both', { token: alice.token, headers: { 'payment-signature': 'e30=', 'x-pay-amount-micros': '5000' } })
    t.ok(both.status === 400 || both.status === 402, 'a payment beside the token selects the direct rail: the (bogus) payment is judged')
    t.match(both.body.code, /^payment_/)
    t.equal((await world.db.query(`select 1 from scheduler_tasks where idempotency_key = 'k-both'`)).length, 0, 'no task')

    const mismatch = await create('k-mismatch', { token: alice.token, headers: { 'x-pay-amount-micros': '999' } })
    t.equal(mismatch.status, 400, 'an X-Pay-Amount-Micros that disagrees is refused on this rail too')

    const created = await create('k-alice', { token: alice.token })
    t.equal(created.status, 201, 'a valid plan token creates the task without any payment')
    t.match(created.body, {
      rail: 'marketplace',
      status: 'active',
      balance_micros: '5000',
      cumulative_cost_micros: '0',
      estimated_ceiling_micros: CEILING.toString(),
      caps: { max_amount_usdc_micros: '5000' },
    })
    t.notOk(created.headers['payment-response'], 'nothing was settled')
    taskId = created.body.id
    const rows = await world.db.query<{ owner: string; rail: string; payment_channel: string }>(`select owner, rail, payment_channel from scheduler_tasks where id = $1`, [taskId])
    t.same(rows[0], { owner: `agent:${alice.agentId}`, rail: 'marketplace', payment_channel: `marketplace:agent:${alice.agentId}` }, 'the owner is the plan holder')
    const payments = await world.db.query(`select 1 from payments_ledger where operation_id = 'createTask'`)
    t.equal(payments.length, 0, 'no payment was recorded for the create')
    const resource = await world.tasks.get('default', taskId)
    t.match(resource?.metadata.labels?.['jobs.agent-gateway.dev/owner'], /^agent-[0-9a-f]{40}$/, 'the Task resource carries a valid owner label')

    const retry = await create('k-alice', { token: alice.token })
    t.equal(retry.status, 200, 'the same Idempotency-Key and body returns the task')
    t.equal(retry.body.id, taskId)
  })

  await t.test('owner endpoints take the plan token', async (t) => {
    const got = await h.call('GET', `/api/v1/tasks/${taskId}`, { token: alice.token })
    t.equal(got.status, 200)
    t.equal(got.body.rail, 'marketplace')
    const stranger = await h.call('GET', `/api/v1/tasks/${taskId}`, { token: bob.token })
    t.equal(stranger.status, 404, "another holder's token sees no such task")
    t.equal(stranger.body.code, 'TASK_NOT_FOUND')
    const anonymous = await h.call('GET', `/api/v1/tasks/${taskId}`)
    t.equal(anonymous.status, 401)
    t.equal(anonymous.body.code, 'wallet_proof_required')
    t.match(anonymous.body.detail, /marketplace rail/)
    t.ok(anonymous.body.extensions['sign-in-with-x'], 'the SIWX challenge is still offered')
    const unknown = await h.call('GET', `/api/v1/tasks/${taskId}`, { token: 'agw_forged' })
    t.equal(unknown.status, 401)
    t.equal(unknown.body.code, 'bearer_required')
    const usage = await h.call('GET', '/api/v1/owner/usage', { token: alice.token })
    t.equal(usage.status, 200)
    t.match(usage.body, { owner: `agent:${alice.agentId}`, tasks: [{ task_id: taskId, rail: 'marketplace' }] })
  })

  await t.test('runs consume the cap; usage is reported once per run', async (t) => {
    const creditBefore = await planCredit(world, alice.agentId)
    t.equal(creditBefore, 5_000_000n)
    let status = 'active'
    for (let slot = 0; slot < 6 && status === 'active'; slot += 1) {
      await h.tick()
      status = (await h.call('GET', `/api/v1/tasks/${taskId}`, { token: alice.token })).body.status
    }
    t.equal(status, 'paused_insufficient_funds', 'the cap ran out')
    const runs = await world.db.query<{ id: string; cost_micros: bigint; status: string }>(
      `select id, cost_micros, status from scheduler_runs where task_id = $1 and status = 'succeeded' order by id`,
      [taskId],
    )
    t.ok(runs.length >= 2, `${runs.length} runs ran on a 5000-micro cap`)
    const spent = runs.reduce((acc, run) => acc + run.cost_micros, 0n)
    t.ok(spent <= 5_000n, 'never beyond the lifetime cap')
    t.ok(5_000n - spent < CEILING, 'paused because what is left is below one ceiling')

    const reports = await usageRows(world, taskId)
    t.same(
      reports.map((row) => [row.run_id, row.units, row.debited_micros, row.plan_id]),
      runs.map((run) => [run.id, run.cost_micros, run.cost_micros, PLAN]),
      'one usage report per run: units = the run cost, debited from the plan',
    )
    t.equal(await planCredit(world, alice.agentId), 5_000_000n - spent, 'the plan credit went down by exactly the runs')
    const debits = await world.db.query<{ request_id: string }>(`select request_id from plan_credit_ledger where agent_id = $1 and kind = 'debit' order by id`, [alice.agentId])
    t.same(
      debits.map((row) => row.request_id),
      runs.map((run) => `scheduler-run:${run.id}`),
    )

    const task = (await h.call('GET', `/api/v1/tasks/${taskId}`, { token: alice.token })).body
    t.match(task, { status: 'paused_insufficient_funds', balance_micros: (5_000n - spent).toString(), cumulative_cost_micros: spent.toString() })
    t.match(task.recovery_hint, {
      reason: 'insufficient_funds',
      shortfall_micros: (CEILING - (5_000n - spent)).toString(),
      action: `POST /api/v1/tasks/${taskId}/fund with top_up_amount_micros >= ${CEILING - (5_000n - spent)}`,
    })
    t.match(task.recovery_hint.message, /remaining cap/)

    // A finish delivered again (a controller retry) and a direct second report change nothing.
    const first = runs[0]!
    const again = await world.service.finishRun(first.id, world.service.lostResult('delivered twice'))
    t.equal(again.run.status, 'succeeded', 'a second finish returns the settled run')
    const row = (await world.db.query<Record<string, unknown>>(`select * from scheduler_runs where id = $1`, [first.id]))[0]!
    const taskRow = (await world.db.query<Record<string, unknown>>(`select * from scheduler_tasks where id = $1`, [taskId]))[0]!
    const effects = await world.db.transaction((tx) => world.service.marketplace.reportRunUsage(tx, taskRow as never, row as never))
    t.same(effects, {}, 'reporting a reported run again does nothing')
    t.equal((await usageRows(world, taskId)).length, runs.length, 'still one report per run')
    t.equal(await planCredit(world, alice.agentId), 5_000_000n - spent, 'and one debit per run')

    const runNow = await h.call('POST', `/api/v1/tasks/${taskId}/runs`, { token: alice.token })
    t.equal(runNow.status, 409, 'a run now on the spent cap is refused')
    t.equal(runNow.body.code, 'TASK_PAUSED_INSUFFICIENT_FUNDS')
  })

  await t.test('ledger rows are audit-only', async (t) => {
    const ledger = await h.call('GET', `/api/v1/tasks/${taskId}/ledger`, { token: alice.token })
    t.equal(ledger.status, 200)
    t.match(ledger.body, { task_id: taskId, rail: 'marketplace', authoritative: false })
    const rows = ledger.body.rows as { kind: string; amount_micros: string; run_id: string | null; tx_hash: string | null }[]
    t.equal(rows[0]?.kind, 'charge', 'the first row records the cap')
    t.equal(rows[0]?.amount_micros, '5000')
    t.ok(
      rows.every((row) => row.tx_hash === null),
      'no row claims an on-chain transaction',
    )
    const costs = rows.filter((row) => row.kind === 'run_cost')
    const usage = rows.filter((row) => row.kind === 'usage')
    t.equal(usage.length, costs.length, 'one usage row per run')
    t.same(usage.map((row) => [row.run_id, row.amount_micros]).sort(), costs.map((row) => [row.run_id, row.amount_micros]).sort(), 'each usage row restates its run cost')
    const spent = costs.reduce((acc, row) => acc - BigInt(row.amount_micros), 0n)
    t.equal(ledger.body.sum_micros, (5_000n - spent).toString(), 'sum_micros is the remaining cap')
    const stranger = await h.call('GET', `/api/v1/tasks/${taskId}/ledger`, { token: bob.token })
    t.equal(stranger.status, 404)
  })

  await t.test('fund raises the cap on this rail only', async (t) => {
    const fund = (key: string, options: { token?: string; headers?: Record<string, string>; amount?: number } = {}) =>
      h.call('POST', `/api/v1/tasks/${taskId}/fund`, {
        ...options,
        headers: { 'idempotency-key': key, ...(options.headers ?? {}) },
        body: { top_up_amount_micros: options.amount ?? 4_000 },
      })
    const paid = await fund('f-paid', { headers: { 'payment-signature': 'e30=', 'x-pay-amount-micros': '4000' } })
    t.equal(paid.status, 409, 'a payment for a marketplace task is refused before any 402')
    t.match(paid.body, { code: 'CHANNEL_MISMATCH', rail: 'marketplace' })
    const bare = await fund('f-bare', { headers: { 'x-pay-amount-micros': '4000' } })
    t.equal(bare.status, 401, 'no token: 401')
    t.equal(bare.body.code, 'bearer_required')
    const stranger = await fund('f-bob', { token: bob.token })
    t.equal(stranger.status, 404)
    const small = await fund('f-small', { token: alice.token, amount: 1 })
    t.equal(small.status, 400, 'a raise that leaves the task short is refused')
    t.equal(small.body.code, 'INSUFFICIENT_FUND_AMOUNT')

    const raised = await fund('f-alice', { token: alice.token })
    t.equal(raised.status, 200, 'the holder raises the cap with the token, no X-Pay-Amount-Micros and no payment')
    t.equal(raised.body.status, 'active', 'and the task resumes')
    t.notOk(raised.body.recovery_hint)
    const again = await fund('f-alice', { token: alice.token })
    t.equal(again.status, 200, 'an idempotent retry')
    const charges = await world.db.query<{ amount_micros: bigint; replay_key: string | null }>(
      `select amount_micros, replay_key from scheduler_ledger where task_id = $1 and kind = 'charge' order by id`,
      [taskId],
    )
    t.same(
      charges,
      [
        { amount_micros: 5_000n, replay_key: null },
        { amount_micros: 4_000n, replay_key: null },
      ],
      'the raise is recorded once, without a payment',
    )

    // A direct-rail task is never funded with a token.
    const pre = await world.service.precheckCreate(taskBody(), 'k-direct', 5_000n)
    if ('existing' in pre) throw new Error('unexpected idempotent hit')
    const { task: direct } = await world.service.createTask({
      ...pre,
      idempotencyKey: 'k-direct',
      payment: { payer: '0x1111111111111111111111111111111111111111', protocol: 'x402', amountMicros: 5_000n, replayKey: 'r-direct' },
    })
    await world.pay('r-direct')
    const wrongRail = await h.call('POST', `/api/v1/tasks/${direct.id as string}/fund`, {
      token: alice.token,
      headers: { 'idempotency-key': 'f-direct' },
      body: { top_up_amount_micros: 1000 },
    })
    t.equal(wrongRail.status, 409)
    t.match(wrongRail.body, { code: 'CHANNEL_MISMATCH', rail: 'direct' })
    const hidden = await h.call('GET', `/api/v1/tasks/${direct.id as string}`, { token: alice.token })
    t.equal(hidden.status, 404, 'a token never reaches a wallet-owned task')
    await world.service.deleteTask(direct.id as string, '0x1111111111111111111111111111111111111111')
  })

  await t.test('plan exhaustion pauses the task; a new plan and resume restart it', async (t) => {
    // Spend the credit down to 3000 micros through the gateway's own plan debit (as other calls would).
    const plans = findService('scheduler')!.plans
    const spent = await h.payments.agents.debitPlan({
      agentId: dave.agentId,
      service: 'scheduler',
      plans,
      costMicros: 4_997_000n,
      operationId: 'elsewhere',
      requestId: 'r-elsewhere',
    })
    t.ok(spent, 'credit spent elsewhere')
    const created = await create('k-dave', { token: dave.token, body: taskBody({ max_amount_usdc_micros: 100_000 }) })
    t.equal(created.status, 201, 'one ceiling of credit is enough to create')
    const id = created.body.id as string
    const run = await h.call('POST', `/api/v1/tasks/${id}/runs`, { token: dave.token })
    t.equal(run.status, 200, 'run now')
    t.equal(run.body.status, 'succeeded')
    const reports = await usageRows(world, id)
    t.equal(reports.length, 1, 'the synchronous run was reported')
    const task = (await h.call('GET', `/api/v1/tasks/${id}`, { token: dave.token })).body
    t.equal(task.status, 'paused_insufficient_funds', 'the plan no longer covers a run: paused, though the cap is far from spent')
    t.match(task.recovery_hint, { reason: 'insufficient_funds', action: new RegExp(`/plans/${PLAN}/purchase, then POST /api/v1/tasks/${id}/resume`) })
    t.match(task.recovery_hint.message, /plan/)
    const resource = await world.tasks.get('default', id)
    t.equal(resource?.spec.suspend, true, 'the Task resource is suspended')
    const blocked = await h.call('POST', `/api/v1/tasks/${id}/resume`, { token: dave.token })
    t.equal(blocked.status, 403, 'resume without a covering plan')
    t.equal(blocked.body.code, 'plan_required')
    await h.tick()
    t.equal((await usageRows(world, id)).length, 1, 'no run while paused')

    // A second purchase (activated directly: the FakeClock is ahead of the wall clock by now).
    await h.payments.agents.activatePlan({ agentId: dave.agentId, plan: findPlan(PLAN)!, replayKey: `test:${dave.agentId}:2` })
    const resumed = await h.call('POST', `/api/v1/tasks/${id}/resume`, { token: dave.token })
    t.equal(resumed.status, 200, 'a new plan, then resume')
    t.equal(resumed.body.status, 'active')
    await h.tick()
    t.ok((await usageRows(world, id)).length >= 2, 'runs again on the schedule')
    const deleted = await h.call('DELETE', `/api/v1/tasks/${id}`, { token: dave.token })
    t.equal(deleted.status, 200)
  })

  await t.test('DELETE refunds nothing and closes nothing', async (t) => {
    await h.tick()
    await world.settle()
    const before = (await h.call('GET', `/api/v1/tasks/${taskId}/ledger`, { token: alice.token })).body
    const stranger = await h.call('DELETE', `/api/v1/tasks/${taskId}`, { token: bob.token })
    t.equal(stranger.status, 404)
    const deleted = await h.call('DELETE', `/api/v1/tasks/${taskId}`, { token: alice.token })
    t.equal(deleted.status, 200)
    t.match(deleted.body, { id: taskId, status: 'deleted', rail: 'marketplace', refunded_micros: '0', refund_tx_hash: null })
    const again = await h.call('DELETE', `/api/v1/tasks/${taskId}`, { token: alice.token })
    t.equal(again.status, 200, 'idempotent')
    t.equal(again.body.refunded_micros, '0')
    await world.settle()
    const refunds = await world.db.query(`select 1 from scheduler_refunds where task_id = $1`, [taskId])
    t.equal(refunds.length, 0, 'no refund row')
    t.notOk(
      world.refunds.some((refund) => !refund.to.startsWith('0x')),
      'nothing was sent on-chain for a marketplace task',
    )
    const after = (await h.call('GET', `/api/v1/tasks/${taskId}/ledger`, { token: alice.token })).body
    t.notOk(
      after.rows.some((row: { kind: string }) => row.kind === 'refund' || row.kind === 'dust_forfeit'),
      'no closing rows',
    )
    t.equal(after.sum_micros, before.sum_micros, 'the audit sum stays at the unused cap')
    t.equal(after.authoritative, false)
    const runs = await world.db.query<{ n: bigint }>(`select count(*)::int8 as n from scheduler_runs where task_id = $1 and status = 'succeeded'`, [taskId])
    t.equal((await usageRows(world, taskId)).length, Number(runs[0]?.n), 'every run with a cost was reported exactly once')
    const got = await h.call('GET', `/api/v1/tasks/${taskId}`, { token: alice.token })
    t.equal(got.body.status, 'deleted')
  })

  await t.test('free included units of a claimed holder are used first', async (t) => {
    // The registry's scheduler meter has no free units; a meter with 2500 shows the rule.
    const base = findService('scheduler') as ServiceSpec
    const service: ServiceSpec = { ...base, meter: { ...base.meter!, includedUnits: 2_500 } }
    const marketplace = createSchedulerMarketplace({ db: world.db, clock: world.clock, rates: DEFAULT_RATES, logger, service, gatewayUrl: GATEWAY_URL })
    const { code } = await h.payments.agents.startClaim(erin.agentId, 'erin@example.com')
    await h.payments.agents.completeClaim(code)
    const created = await create('k-erin', { token: erin.token, body: taskBody({ schedule: undefined }) })
    t.equal(created.status, 201)
    const id = created.body.id as string
    const taskRow = (await world.db.query<Record<string, unknown>>(`select * from scheduler_tasks where id = $1`, [id]))[0]!
    const report = async (runId: string, cost: bigint) => {
      await world.db.query(`insert into scheduler_runs (id, task_id, trigger, status, cost_micros) values ($1, $2, 'manual', 'succeeded', $3)`, [runId, id, cost])
      return world.db.transaction((tx) => marketplace.reportRunUsage(tx, taskRow as never, { id: runId, cost_micros: cost }))
    }
    await report(`${id}-m1`, 1_500n)
    await report(`${id}-m2`, 1_500n)
    const rows = await marketplace.usageOf(id)
    t.same(
      rows.map((row) => [row.units, row.included_units, row.debited_micros]),
      [
        [1_500n, 1_500n, 0n],
        [1_500n, 1_000n, 500n],
      ],
      'free units first, then the plan',
    )
    t.equal(await planCredit(world, erin.agentId), 5_000_000n - 500n)
    await h.call('DELETE', `/api/v1/tasks/${id}`, { token: erin.token })
  })

  await t.test("one plan, two tasks: dispatch counts what the holder's other runs in flight reserved", async (t) => {
    const first = await create('k-frank-a', { token: frank.token })
    const second = await create('k-frank-b', { token: frank.token })
    t.equal(first.status, 201)
    t.equal(second.status, 201)
    const ceiling = BigInt(first.body.estimated_ceiling_micros as string)
    // Leave the plan credit for one and a half ceilings.
    const plans = findService('scheduler')!.plans
    t.ok(
      await h.payments.agents.debitPlan({
        agentId: frank.agentId,
        service: 'scheduler',
        plans,
        costMicros: 5_000_000n - ceiling - ceiling / 2n,
        operationId: 'elsewhere',
        requestId: 'r-frank',
      }),
    )
    world.executor.mode = 'hang' // the first run stays in flight, its ceiling reserved
    world.clock.advance(60_000)
    await world.settle()
    const runs = await world.db.query<{ task_id: string; status: string }>(`select task_id, status from scheduler_runs where task_id = any($1::text[])`, [
      [first.body.id, second.body.id],
    ])
    t.equal(runs.filter((run) => run.status === 'claimed' || run.status === 'running').length, 1, 'one run dispatched: the plan covers one ceiling beside it')
    t.equal(runs.filter((run) => run.status === 'skipped').length, 1, 'the other is skipped')
    const statuses = await Promise.all([first, second].map(async (created) => (await h.call('GET', `/api/v1/tasks/${created.body.id}`, { token: frank.token })).body.status))
    t.same(statuses.sort(), ['active', 'paused_insufficient_funds'], 'and its task paused until the plan covers it')
    world.executor.mode = 'succeed'
  })

  await t.test('discovery names the rail, the plan and the meter', async (t) => {
    const llms = await h.scheduler.inject({ method: 'GET', url: '/llms.txt' })
    t.match(llms.body, /Marketplace rail/)
    t.match(llms.body, /Authorization: Bearer <accessToken>/)
    t.match(llms.body, new RegExp(PLAN))
    const manifest = await fetch(`${h.gatewayBase}/manifest.json`)
    const body = (await manifest.json()) as { services: { slug: string; meters: { name: string }[]; plans: string[] }[] }
    t.match(
      body.services.find((service) => service.slug === 'scheduler'),
      { meters: [{ name: 'scheduler-usage' }], plans: [PLAN] },
    )
  })
}

t.test('PGlite', async (t) => suite(t))

t.test('Postgres', async (t) => {
  const url = await throwawayDatabase(t)
  if (url === undefined) return
  await suite(t, url)
})
