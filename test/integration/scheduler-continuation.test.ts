// request_continuation on the marketplace rail counts a run's cost once: a finished run
// leaves a run_cost row against the cap and an audit-only `usage` row restating it; the funding
// check must use the escrow store's one balance rule (usage rows left out), as dispatch does.
// Cap 6,000, ceiling 2,000, one finished run costing 1,100, this run holding 2,000: 6,000 − 1,100
// − 2,000 = 2,900 ≥ 2,000, accepted. Counting the usage row too gave 1,800 and refused it.
import t from 'tap'
import { DEFAULT_RATES, estimateCeilingMicros } from '../../src/scheduler/domain/rates.ts'
import { requestContinuation } from '../../src/scheduler/helpers/continuation.ts'
import { parseHelperSpec } from '../../src/scheduler/helpers/run.ts'
import { openWorld, type World } from '../helpers/scheduler-world.ts'

const CAP = 6_000n
const COST = 1_100n
const body = { runtime: 'python', entrypoint: 'main.py', source: 'print(1)', max_runtime_sec: 10, max_sibling_calls: 0, max_amount_usdc_micros: Number(CAP) }

/** A finished marketplace run costing COST: its run_cost row and the usage row restating it. */
async function finishedRun(world: World, taskId: string, runId: string): Promise<void> {
  await world.db.query(`insert into scheduler_runs (id, task_id, trigger, status, cost_micros, finished_at) values ($1, $2, 'schedule', 'succeeded', $3, now())`, [
    runId,
    taskId,
    COST,
  ])
  await world.db.query(`insert into scheduler_ledger (task_id, kind, amount_micros, run_id) values ($1, 'run_cost', $2, $3), ($1, 'usage', $2, $3)`, [taskId, -COST, runId])
}

t.test('a marketplace task: the usage row does not count the same spend twice', async (t) => {
  const world = await openWorld()
  t.teardown(() => world.close())
  const ceiling = estimateCeilingMicros({ max_runtime_sec: 10, max_sibling_calls: 0, dependencies: [], llm: null }, DEFAULT_RATES)
  t.equal(ceiling, 2_000n, 'the ceiling the numbers above assume')
  const pre = await world.service.precheckCreate(body, 'cont-1', CAP)
  if ('existing' in pre) throw new Error('unexpected idempotent hit')
  const { id: taskId } = await world.service.createTask({
    ...pre,
    idempotencyKey: 'cont-1',
    rail: 'marketplace',
    payment: { payer: 'agent:agt_cont', protocol: 'marketplace', amountMicros: CAP, replayKey: null },
  })

  // A finished run of cost 1,100 (its run_cost and its usage restatement), and this run in flight.
  await finishedRun(world, taskId, `${taskId}-r1`)
  await world.db.query(`insert into scheduler_runs (id, task_id, trigger, status, reserved_micros) values ($1, $2, 'schedule', 'running', $3)`, [`${taskId}-r2`, taskId, ceiling])

  const [row] = await world.db.query<{ spec: unknown }>(`select spec from scheduler_tasks where id = $1`, [taskId])
  const run = { runId: `${taskId}-r2`, taskId, taskStatus: 'active', consecutiveContinuations: 0, spec: parseHelperSpec(taskId, row?.spec) }
  const answer = await requestContinuation({ db: world.db, rates: DEFAULT_RATES }, run, 0)
  t.match(answer, { accepted: true, consecutive_continuations: 1 }, 'accepted: 6,000 − 1,100 − 2,000 covers the ceiling')

  // And refused once the cap is really spent: another finished run of 1,100 (2,900 − 1,100 = 1,800).
  await finishedRun(world, taskId, `${taskId}-r0`)
  t.match(await requestContinuation({ db: world.db, rates: DEFAULT_RATES }, run, 0), { accepted: false, reason: 'insufficient_funds' })
})
