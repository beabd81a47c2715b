// Property test of the scheduler's money and scheduling: random sequences of create / fund / clock
// ticks (cron slots) / trigger / synchronous runs / failing, timing-out and infra-failing runs /
// pause / resume / delete, with controller crash-restarts in between, on the real database, the
// real ResourceStore, service and controllers. After EVERY step:
// - every task's escrow ledger satisfies the invariant (SUM = funded − cumulative cost while open,
//   0 once terminal and settled, reservations within the balance);
// - no run name was executed twice (a cron slot, a trigger, a continuation: each at most once);
// - at most one run per task is in flight;
// - every settled run was charged at most once and never more than it reserved.
import t from 'tap'
import type { Test } from 'tap'
import { AppError } from '../../src/platform/errors.ts'
import { invariantViolations } from '../../src/scheduler/domain/escrow.ts'
import { openWorld, type ExecutorMode, type World } from '../helpers/scheduler-world.ts'
import { throwawayDatabase } from '../helpers/servers.ts'

function prng(seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let x = Math.imul(state ^ (state >>> 15), 1 | state)
    x ^= x + Math.imul(x ^ (x >>> 7), 61 | x)
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

const OWNER = '0x1111111111111111111111111111111111111111'

async function create(world: World, random: () => number, n: number): Promise<string> {
  const body = {
    schedule: { every: 'minute' },
    runtime: random() < 0.5 ? 'node' : 'python',
    entrypoint: 'main.py',
    source: `print(${n})`,
    max_runtime_sec: 5 + Math.floor(random() * 25),
    max_sibling_calls: 0,
    max_amount_usdc_micros: 1_000 + Math.floor(random() * 20_000),
  }
  if (body.runtime === 'node') body.entrypoint = 'main.js'
  const key = `k-${n}-${Math.floor(random() * 1e9)}`
  const pre = await world.service.precheckCreate(body, key, BigInt(body.max_amount_usdc_micros))
  if ('existing' in pre) throw new Error('unexpected idempotent hit')
  const { task } = await world.service.createTask({
    ...pre,
    idempotencyKey: key,
    payment: { payer: OWNER, protocol: 'x402', amountMicros: BigInt(body.max_amount_usdc_micros), replayKey: `r-${key}` },
  })
  await world.pay(`r-${key}`)
  return task.id as string
}

async function check(t: Test, world: World, step: string): Promise<void> {
  const tasks = await world.db.query<{ id: string; status: string }>(`select id, status from scheduler_tasks`)
  for (const task of tasks) {
    const { rows, reservations, summary } = await world.service.escrow(task.id)
    const problems = invariantViolations(rows, reservations)
    if (problems.length > 0) t.fail(`${step}: task ${task.id} ledger: ${problems.join('; ')}`)
    const inFlight = await world.db.query(`select id from scheduler_runs where task_id = $1 and status in ('claimed', 'running')`, [task.id])
    if (inFlight.length > 1) t.fail(`${step}: task ${task.id} has ${inFlight.length} runs in flight`)
    if (['deleted', 'completed', 'terminated'].includes(task.status) && inFlight.length === 0 && summary.balance_micros !== 0n) {
      t.fail(`${step}: terminal task ${task.id} (${task.status}) sums to ${summary.balance_micros}, not 0`)
    }
    // The Task's display mirror of its cost (kubectl's Cost column) has caught up with the ledger.
    const resource = await world.tasks.get('default', task.id).catch(() => undefined)
    const cost = await world.service.taskCost(task.id)
    if (resource !== undefined && inFlight.length === 0 && cost !== undefined && cost > 0n && resource.status?.costMicros !== cost.toString()) {
      t.fail(`${step}: task ${task.id} status.costMicros ${resource.status?.costMicros} but the ledger says ${cost}`)
    }
  }
  for (const [name, count] of world.executor.executions) if (count > 1) t.fail(`${step}: run ${name} executed ${count} times`)
  const charged = await world.db.query<{ run_id: string; n: bigint }>(
    `select run_id, count(*)::int8 as n from scheduler_ledger where kind = 'run_cost' group by run_id having count(*) > 1`,
  )
  if (charged.length > 0) t.fail(`${step}: runs charged twice: ${charged.map((row) => row.run_id).join(', ')}`)
}

/**
 * `aheadTickMs`: with runs dispatched ahead of their slot, a tick stops this long after the
 * dispatch point so prepared runs wait for their instant while the next operation happens (a
 * pause, delete, fund or crash then meets claimed, prepared runs).
 */
async function scenario(t: Test, world: World, seed: number, steps: number, aheadTickMs?: number): Promise<{ claimedAhead: bigint }> {
  const tick = async (): Promise<void> => {
    if (aheadTickMs === undefined) {
      world.clock.advance(60_000)
      return
    }
    // The clock moves to just after the next dispatch point (slot − ahead) first.
    const slot = Math.ceil((world.clock.now().getTime() + 1) / 60_000) * 60_000
    world.clock.advance(Math.max(1, slot - aheadTickMs - world.clock.now().getTime()))
    await world.settle()
    world.clock.advance(aheadTickMs + 500)
  }
  const random = prng(seed)
  const ids: string[] = []
  let created = 0
  const pick = () => ids[Math.floor(random() * ids.length)]
  const expected = (error: unknown) => {
    if (!(error instanceof AppError)) throw error
  }
  for (let step = 0; step < steps; step += 1) {
    const roll = random()
    let label: string
    if (ids.length === 0 || (roll < 0.12 && ids.length < 5)) {
      ids.push(await create(world, random, created++))
      label = 'create'
    } else if (roll < 0.45) {
      const modes: ExecutorMode[] = ['succeed', 'succeed', 'succeed', 'fail', 'timeout', 'infra']
      world.executor.mode = modes[Math.floor(random() * modes.length)] as ExecutorMode
      if (aheadTickMs !== undefined && random() < 0.5) {
        // Stop between dispatch and slot: the runs are claimed and wait for their instant.
        const slot = Math.ceil((world.clock.now().getTime() + 1) / 60_000) * 60_000
        world.clock.advance(Math.max(1, slot - aheadTickMs / 2 - world.clock.now().getTime()))
        label = `tick to between dispatch and slot (${world.executor.mode})`
      } else {
        await tick()
        label = `tick (${world.executor.mode})`
      }
    } else if (roll < 0.55) {
      const id = pick() as string
      const amount = BigInt(1_000 + Math.floor(random() * 10_000))
      const key = `f-${step}`
      try {
        const pre = await world.service.precheckFund(id, { top_up_amount_micros: amount.toString() }, key, amount)
        if (!('existing' in pre)) {
          await world.service.fundTask({
            taskId: id,
            amount: pre.amount,
            idempotencyKey: key,
            payment: { payer: OWNER, protocol: 'x402', amountMicros: amount, replayKey: `rf-${step}` },
          })
          await world.pay(`rf-${step}`)
        }
      } catch (error) {
        expected(error)
      }
      label = 'fund'
    } else if (roll < 0.62) {
      await world.service.pauseTask(pick() as string, OWNER).catch(expected)
      label = 'pause'
    } else if (roll < 0.7) {
      await world.service.resumeTask(pick() as string, OWNER).catch(expected)
      label = 'resume'
    } else if (roll < 0.76) {
      await world.service.triggerTask(pick() as string, OWNER).catch(expected)
      label = 'trigger'
    } else if (roll < 0.82) {
      world.executor.mode = random() < 0.7 ? 'succeed' : 'fail'
      await world.service.runNow(pick() as string, OWNER).catch(expected)
      label = 'run now'
    } else if (roll < 0.88) {
      await world.service.deleteTask(pick() as string, OWNER).catch(expected)
      label = 'delete'
    } else {
      // Crash with runs in flight: the next tick's runs hang, the process dies, a new one starts.
      world.executor.mode = 'hang'
      await tick()
      await world.settle()
      await world.crashAndRestart()
      label = 'crash-restart'
    }
    await world.settle()
    await check(t, world, `seed ${seed} step ${step} (${label})`)
  }
  // Finally delete everything: every ledger must close at 0 and the refunds must match.
  world.executor.mode = 'succeed'
  for (const id of ids) await world.service.deleteTask(id, OWNER).catch(expected)
  await world.settle()
  await check(t, world, `seed ${seed} final`)
  const open = await world.db.query<{ total: bigint }>(`select coalesce(sum(amount_micros), 0)::int8 as total from scheduler_ledger`)
  t.equal(open[0]?.total, 0n, `seed ${seed}: after deleting every task the ledgers sum to 0`)
  const refundRows = await world.db.query<{ total: bigint }>(`select coalesce(sum(amount_micros), 0)::int8 as total from scheduler_refunds where state = 'confirmed'`)
  t.equal(
    world.refunds.reduce((acc, refund) => acc + refund.amount, 0n),
    refundRows[0]?.total,
    `seed ${seed}: every recorded refund was sent once`,
  )
  const executed = [...world.executor.executions.values()].reduce((acc, n) => acc + n, 0)
  t.ok(executed > 0, `seed ${seed}: ${executed} runs executed`)
  if (aheadTickMs !== undefined) {
    // The path under test was taken: runs claimed ahead and started on their slot, and some
    // released unstarted (paused or deleted between dispatch and slot) at no cost.
    const [ahead] = await world.db.query<{ on_slot: bigint; released: bigint; released_cost: bigint }>(
      `select count(*) filter (where trigger = 'schedule' and status <> 'skipped' and created_at < started_at)::int8 as on_slot,
              count(*) filter (where status = 'cancelled' and started_at is null)::int8 as released,
              coalesce(sum(cost_micros) filter (where status = 'cancelled' and started_at is null), 0)::int8 as released_cost
         from scheduler_runs`,
    )
    t.comment(`seed ${seed}: ${ahead?.on_slot} runs claimed before their slot, ${ahead?.released} released unstarted`)
    t.equal(ahead?.released_cost, 0n, `seed ${seed}: released runs cost nothing`)
    return { claimedAhead: ahead?.on_slot ?? 0n }
  }
  return { claimedAhead: 0n }
}

t.test('PGlite: random operation sequences keep the ledger exact and never run a slot twice', async (t) => {
  for (const seed of [1, 2, 3]) {
    const world = await openWorld()
    try {
      await scenario(t, world, seed, 40)
    } finally {
      await world.close()
    }
  }
})

t.test('PGlite, runs dispatched 15 s ahead of their slot: the same properties with prepared runs in between', async (t) => {
  let claimedAhead = 0n
  for (const seed of [4, 5]) {
    const world = await openWorld({ dispatchAheadMs: 15_000 })
    try {
      claimedAhead += (await scenario(t, world, seed, 40, 15_000)).claimedAhead
    } finally {
      await world.close()
    }
  }
  t.ok(claimedAhead > 0n, `the path under test was taken: ${claimedAhead} runs claimed ahead of their slot`)
})

t.test('Postgres: the same properties', async (t) => {
  const url = await throwawayDatabase(t)
  if (url === undefined) return
  const world = await openWorld({ databaseUrl: url, dispatchAheadMs: 15_000 })
  try {
    await scenario(t, world, 7, 40, 15_000)
  } finally {
    await world.close()
  }
})
