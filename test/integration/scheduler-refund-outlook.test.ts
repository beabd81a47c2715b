// What DELETE says a task's owner gets back, and when: a run in flight (the refund
// follows its end), a payment still settling (the refund follows its decision: all of it if it
// settles, none of it if it fails), and a plain delete. Then the promise is kept: the refund sent
// matches, and the ledger closes to 0. Also: a scheduled run waits for a settling payment instead
// of pausing the task, and a failed create payment frees the Idempotency-Key.
import t from 'tap'
import { openWorld, type World } from '../helpers/scheduler-world.ts'

const OWNER = '0x1111111111111111111111111111111111111111'
const FUNDED = 100_000n

async function createTask(world: World, key: string, options: { paid?: boolean; payment?: string } = {}): Promise<string> {
  return world.createTask(key, { ...options, owner: OWNER, body: { max_runtime_sec: 30, max_amount_usdc_micros: Number(FUNDED) } })
}

const ledger = async (world: World, taskId: string) =>
  (
    await world.db.query<{ kind: string; amount_micros: bigint; tx_hash: string | null }>(
      `select kind, amount_micros, tx_hash from scheduler_ledger where task_id = $1 order by id`,
      [taskId],
    )
  ).map((row) => [row.kind, row.amount_micros, row.tx_hash !== null])

t.test("a run in flight: the refund is the balance less the run's cost, sent when it ends", async (t) => {
  const world = await openWorld()
  t.teardown(() => world.close())
  const taskId = await createTask(world, 'outlook-run')
  world.executor.mode = 'hang'
  world.clock.advance(60_000)
  await world.settle()
  const { summary } = await world.service.escrow(taskId)
  t.ok(summary.reserved_micros > 0n, 'a run holds its ceiling')

  const deleted = await world.service.deleteTask(taskId, OWNER)
  t.match(deleted.refund, { state: 'after_run', estimated: true, amount_micros: (FUNDED - summary.reserved_micros).toString(), tx_hash: null })
  t.ok(Date.parse(deleted.refund.expected_by as string) >= world.clock.nowMs() + 30_000, "expected by the run's deadline")
  t.equal(deleted.refunded_micros, '0')
  t.equal(world.refunds.length, 0, 'nothing sent while the run holds money')

  // The run ends (here: its resource went with the task and a restarted controller's orphan sweep
  // settles it as lost, at no cost): the escrow closes and refunds all.
  await world.crashAndRestart()
  for (let sweep = 0; sweep < 2; sweep += 1) {
    world.clock.advance(61_000)
    await world.settle()
  }
  t.same(world.refunds, [{ to: OWNER, amount: FUNDED }], 'refunded once the run settled')
  t.same(await ledger(world, taskId), [
    ['charge', FUNDED, true],
    ['refund', -FUNDED, false],
  ])
  const again = await world.service.deleteTask(taskId, OWNER)
  t.match(again.refund, { state: 'confirmed', amount_micros: FUNDED.toString() }, 'DELETE again says it was refunded')
  t.equal(again.refunded_micros, FUNDED.toString())
})

t.test('a payment still settling: runs wait for it; deleted, the refund follows its decision', async (t) => {
  const world = await openWorld()
  t.teardown(() => world.close())
  const settling = await createTask(world, 'outlook-settling', { paid: false })
  const view = await world.service.getTask(settling, OWNER)
  t.match(view, { status: 'active', balance_micros: '0', pending_payment_micros: FUNDED.toString() })
  world.clock.advance(60_000)
  await world.settle()
  t.match(await world.db.query(`select status from scheduler_runs where task_id = $1`, [settling]), [], 'no run started on money not received')
  t.equal((await world.service.getTask(settling, OWNER)).status, 'active', 'and the task is not paused for it')
  await world.pay(`r-outlook-settling`)
  world.clock.advance(60_000)
  await world.settle()
  t.ok((await world.db.query(`select 1 from scheduler_runs where task_id = $1`, [settling])).length > 0, 'once settled, the next slot runs')

  const pending = await createTask(world, 'outlook-pending', { paid: false })
  const deleted = await world.service.deleteTask(pending, OWNER)
  t.match(deleted.refund, { state: 'after_payment', estimated: true, amount_micros: FUNDED.toString() })
  t.equal(world.refunds.length, 0)
  await world.pay(`r-outlook-pending`)
  t.same(world.refunds, [{ to: OWNER, amount: FUNDED }], 'settled after the delete: refunded in full')
  t.same(await ledger(world, pending), [
    ['charge', FUNDED, true],
    ['refund', -FUNDED, false],
  ])

  const failing = await createTask(world, 'outlook-failing', { paid: false })
  const gone = await world.service.deleteTask(failing, OWNER)
  t.match(gone.refund, { state: 'after_payment' })
  await world.pay(`r-outlook-failing`, 'failed')
  t.equal(world.refunds.length, 1, 'a payment that failed is never refunded')
  t.same(await ledger(world, failing), [], 'and never entered the ledger')
})

t.test('a failed create payment deletes its task and frees its Idempotency-Key', async (t) => {
  const world = await openWorld()
  t.teardown(() => world.close())
  const first = await createTask(world, 'outlook-retry', { paid: false })
  await world.pay('r-outlook-retry', 'failed')
  const [row] = await world.db.query<{ status: string }>(`select status from scheduler_tasks where id = $1`, [first])
  t.equal(row?.status, 'deleted')
  t.notOk(
    (await world.tasks.list('default')).items.some((task) => task.metadata.name === first),
    'its Task resource is gone',
  )
  const second = await createTask(world, 'outlook-retry', { payment: 'r-outlook-retry-2' })
  t.not(second, first, 'the same key buys a new task with a new payment')
  t.match(await world.service.getTask(second, OWNER), { status: 'active', balance_micros: FUNDED.toString() })
})
