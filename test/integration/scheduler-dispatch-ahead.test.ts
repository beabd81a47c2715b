// Cron runs dispatched ahead of their slot (SCHEDULER_DISPATCH_AHEAD_SEC): the Run is created and
// claimed (escrow reserved) before the slot, started exactly at the slot, released at no cost when
// the task is paused or deleted in between, and a claim whose Run resource vanished while no
// controller watched is settled by the orphan sweep. Service + both controllers on PGlite with a
// fake clock (the same wiring as the property test).
import t from 'tap'
import { openWorld, type World } from '../helpers/scheduler-world.ts'

const OWNER = '0x1111111111111111111111111111111111111111'
const AHEAD_MS = 15_000

async function createTask(world: World, n: number): Promise<string> {
  return world.createTask(`ahead-${n}`, { owner: OWNER, body: { source: `print(${n})`, max_amount_usdc_micros: 50_000 } })
}

async function runRows(world: World, taskId: string) {
  return world.db.query<{ id: string; status: string; reserved_micros: bigint; cost_micros: bigint | null; created_at: Date; started_at: Date | null }>(
    `select id, status, reserved_micros, cost_micros, created_at, started_at from scheduler_runs where task_id = $1 order by created_at`,
    [taskId],
  )
}

/** Moves the fake clock to `iso` and lets the controllers finish what that instant asks. */
async function at(world: World, iso: string): Promise<void> {
  world.clock.advance(Date.parse(iso) - world.clock.now().getTime())
  await world.settle()
}

t.test('a cron run is claimed ahead of its slot and started on it; pause in between releases it at no cost', async (t) => {
  const world = await openWorld({ dispatchAheadMs: AHEAD_MS, start: '2026-11-24T10:00:05Z' })
  t.teardown(() => world.close())
  const id = await createTask(world, 1)
  await world.settle()

  await at(world, '2026-11-24T10:00:40Z')
  t.same(await runRows(world, id), [], 'nothing before the dispatch point (slot − 15 s, + 2 s padding)')

  await at(world, '2026-11-24T10:00:48Z')
  const [claimed] = await runRows(world, id)
  t.equal(claimed?.id, `${id}-202611241001`, 'the slot run exists')
  t.equal(claimed?.status, 'claimed', 'claimed at the dispatch point')
  t.ok((claimed?.reserved_micros ?? 0n) > 0n, 'the per-run ceiling is reserved')
  t.equal(world.executor.executions.size, 0, 'not executed before its slot')
  t.equal(world.controllers.runs.prepared, 1, 'held by the controller until its instant')
  const run = await world.runs.get('default', `${id}-202611241001`)
  t.equal(run?.spec.notBefore, '2026-11-24T10:01:00.000Z', 'the Run carries its slot as notBefore')

  await at(world, '2026-11-24T10:01:00Z')
  const [started] = await runRows(world, id)
  t.equal(world.executor.executions.get(`${id}-202611241001`), 1, 'executed once, at the slot')
  t.equal(started?.started_at?.toISOString(), '2026-11-24T10:01:00.000Z', 'started exactly at the slot')
  t.equal(started?.status, 'succeeded')

  // The next slot's run is dispatched at about 10:01:47; pausing before 10:02 releases it.
  await at(world, '2026-11-24T10:01:48Z')
  const second = (await runRows(world, id)).find((row) => row.id === `${id}-202611241002`)
  t.equal(second?.status, 'claimed', 'the next slot is claimed ahead')
  const before = await world.service.escrow(id)
  await world.service.pauseTask(id, OWNER)
  await world.settle()
  const released = (await runRows(world, id)).find((row) => row.id === `${id}-202611241002`)
  t.equal(released?.status, 'cancelled', 'paused before its slot: the claim is released')
  t.equal(released?.cost_micros, 0n, 'at no cost')
  t.equal(released?.started_at, null, 'never started')
  const after = await world.service.escrow(id)
  t.equal(after.summary.reserved_micros, 0n, 'no reservation left')
  t.equal(after.summary.balance_micros, before.summary.balance_micros, 'the balance is untouched')
  t.equal(await world.runs.get('default', `${id}-202611241002`), undefined, 'the waiting Run was deleted')
  await at(world, '2026-11-24T10:02:30Z')
  t.equal(world.executor.executions.get(`${id}-202611241002`), undefined, 'and never executed')
})

t.test('deleting a task between dispatch and slot releases the claim and closes the escrow', async (t) => {
  const world = await openWorld({ dispatchAheadMs: AHEAD_MS, start: '2026-11-24T10:00:05Z' })
  t.teardown(() => world.close())
  const id = await createTask(world, 2)
  await at(world, '2026-11-24T10:00:50Z')
  t.equal((await runRows(world, id))[0]?.status, 'claimed')
  await world.service.deleteTask(id, OWNER)
  await world.settle()
  await at(world, '2026-11-24T10:01:10Z')
  t.equal(world.executor.executions.size, 0, 'nothing executed')
  t.equal((await runRows(world, id))[0]?.status, 'cancelled', 'the claim was released')
  const { summary } = await world.service.escrow(id)
  t.equal(summary.balance_micros, 0n, 'the escrow closed at 0 (refunded)')
  t.same(
    world.refunds.map((refund) => refund.amount),
    [50_000n],
    'the whole deposit went back: a released run costs nothing',
  )
})

t.test('a run still in flight at the dispatch point does not skip the slot; the next slot waits for it', async (t) => {
  const world = await openWorld({ dispatchAheadMs: AHEAD_MS, start: '2026-11-24T10:00:05Z' })
  t.teardown(() => world.close())
  const id = await createTask(world, 3)
  // A manual run in flight across the dispatch point of the 10:01 slot, finished before the slot.
  await at(world, '2026-11-24T10:00:30Z')
  const claim = await world.service.claimRun({ runId: `${id}-manual`, taskId: id, trigger: 'manual' })
  t.equal(claim.kind, 'claimed')
  await at(world, '2026-11-24T10:00:50Z')
  t.same(
    (await runRows(world, id)).map((row) => row.id),
    [`${id}-manual`],
    'the slot run is deferred, not skipped, while another run is in flight',
  )
  await world.service.releaseRun(`${id}-manual`, 'test: the manual run ends')
  await at(world, '2026-11-24T10:00:57Z')
  t.equal((await runRows(world, id)).find((row) => row.id === `${id}-202611241001`)?.status, 'claimed', 'claimed once the other run ended')
  await at(world, '2026-11-24T10:01:00Z')
  t.equal(world.executor.executions.get(`${id}-202611241001`), 1, 'and run on its slot')
})

t.test('the orphan sweep settles a claim whose Run resource vanished while no controller watched', async (t) => {
  const world = await openWorld({ dispatchAheadMs: AHEAD_MS, start: '2026-11-24T10:00:05Z' })
  t.teardown(() => world.close())
  const id = await createTask(world, 4)
  // Claimed with no Run resource (an API process that died between claim and resource create).
  const claim = await world.service.claimRun({ runId: `${id}-orphan`, taskId: id, trigger: 'manual' })
  t.equal(claim.kind, 'claimed')
  t.equal(await world.controllers.runs.sweep(), 0, 'younger than a minute: left alone')
  t.equal((await runRows(world, id)).find((row) => row.id === `${id}-orphan`)?.status, 'claimed', 'still claimed')
  // The controller sweeps every minute by itself; an explicit sweep finds nothing left then.
  world.clock.advance(61_000)
  await world.settle()
  await world.controllers.runs.sweep()
  const orphan = (await runRows(world, id)).find((row) => row.id === `${id}-orphan`)
  t.equal(orphan?.status, 'cancelled', 'older than a minute with no Run: settled')
  t.equal(orphan?.cost_micros, 0n, 'released at no cost')
  t.equal((await world.service.escrow(id)).summary.reserved_micros, 0n)
})
