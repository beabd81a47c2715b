// Runs caught by a controller restart, as docs/scheduler.md ("How a task runs") says they end, on the
// whole scheduler (real PGlite, ResourceStore, service and controllers on a fake clock):
// - a local run executing when the controller died is settled as lost when the new one starts:
//   status failed, exit_code null, cost 0 (its reservation released, no run_cost), the error naming
//   the restart, Run phase Failed, outcome infra_error (counted toward the 5-in-a-row rule);
// - a run claimed ahead of its slot (prepared, not started) is prepared anew and runs at its slot;
// - a Kubernetes run whose Job outlives the controller is re-attached, not lost, also when the old
//   controller died before writing the Run's Running phase.
import t from 'tap'
import { FakeClock } from '../helpers/fake-clock.ts'
import { openWorld, type World } from '../helpers/scheduler-world.ts'
import type { ExecutionRequest, ExecutionResult, RunExecutor, RunResource } from '../../src/scheduler/contract/index.ts'

const OWNER = '0x1111111111111111111111111111111111111111'
const FUNDED = 100_000n

async function createTask(world: World, key: string): Promise<string> {
  return world.createTask(key, { owner: OWNER, body: { max_amount_usdc_micros: Number(FUNDED) } })
}

async function runRows(world: World, taskId: string) {
  return world.db.query<{ id: string; status: string; outcome: string | null; error: string | null; cost_micros: bigint; reserved_micros: bigint; exit_code: number | null }>(
    `select id, status, outcome, error, cost_micros, reserved_micros, exit_code from scheduler_runs where task_id = $1 order by id`,
    [taskId],
  )
}

async function runCostRows(world: World, runId: string): Promise<bigint[]> {
  return (await world.db.query<{ amount_micros: bigint }>(`select amount_micros from scheduler_ledger where kind = 'run_cost' and run_id = $1`, [runId])).map(
    (row) => row.amount_micros,
  )
}

t.test('local executor: a run executing at the restart ends failed, uncharged, with a named error', async (t) => {
  const world = await openWorld()
  t.teardown(() => world.close())
  const taskId = await createTask(world, 'lost-1')
  world.executor.mode = 'hang' // the sandbox is running when the process dies
  world.clock.advance(60_000)
  await world.settle()
  const [inFlight] = await runRows(world, taskId)
  t.equal(inFlight?.status, 'running', 'running when the controller dies')
  const runId = inFlight?.id as string
  t.equal((await world.runs.get('default', runId))?.status?.phase, 'Running')

  await world.crashAndRestart()
  await world.settle()
  const [lost] = await runRows(world, taskId)
  t.match(
    lost,
    { status: 'failed', outcome: 'infra_error', exit_code: null, cost_micros: 0n, reserved_micros: 0n, error: 'the executor restarted while the run was in flight' },
    'settled as lost',
  )
  t.same(await runCostRows(world, runId), [], 'no run_cost row')
  const view = await world.service.getRun(runId, OWNER)
  t.match(view, { status: 'failed', exit_code: null, cost_micros: '0', error: 'the executor restarted while the run was in flight' }, 'what GET /api/v1/runs/{id} answers')
  t.match((await world.runs.get('default', runId))?.status, { phase: 'Failed', costMicros: '0' }, 'the Run resource mirrors it')
  const { summary } = await world.service.escrow(taskId)
  t.equal(summary.balance_micros, FUNDED, 'the escrow is whole: nothing charged')
  t.equal(summary.reserved_micros, 0n, 'the reservation is released')
  const [task] = await world.db.query<{ status: string; consecutive_infra_failures: number }>(`select status, consecutive_infra_failures from scheduler_tasks where id = $1`, [
    taskId,
  ])
  t.match(task, { status: 'active', consecutive_infra_failures: 1 }, 'counted as a run lost to the service; the task stays active')
  t.equal(world.controllers.runs.stats.lost, 1)

  // The next slot runs normally and resets the count.
  world.clock.advance(60_000)
  await world.settle()
  const rows = await runRows(world, taskId)
  t.equal(rows.length, 2)
  t.equal(rows[1]?.status, 'succeeded', 'the next slot runs')
  t.equal(world.executor.executions.get(runId), 1, 'the lost run was never executed again')
})

t.test('local executor: a run claimed ahead of its slot is prepared anew after the restart and runs on its slot', async (t) => {
  const world = await openWorld({ dispatchAheadMs: 15_000 })
  t.teardown(() => world.close())
  const taskId = await createTask(world, 'lost-2')
  world.clock.advance(20_000) // 10:00:50: past the dispatch point (10:00:45) of the 10:01 slot
  await world.settle()
  const [claimed] = await runRows(world, taskId)
  t.equal(claimed?.status, 'claimed', 'claimed (reserved), waiting for its slot')
  const runId = claimed?.id as string
  t.equal(world.controllers.runs.prepared, 1)

  await world.crashAndRestart()
  await world.settle()
  t.equal((await runRows(world, taskId))[0]?.status, 'claimed', 'still claimed after the restart, not lost or released')
  t.equal(world.controllers.runs.prepared, 1, 'prepared again by the new controller')
  world.clock.advance(11_000) // past the slot
  await world.settle()
  const [ran] = await runRows(world, taskId)
  t.equal(ran?.status, 'succeeded', 'it ran on its slot')
  t.equal(world.executor.executions.get(runId), 1, 'once')
  t.equal((await runCostRows(world, runId)).length, 1, 'charged once')
  t.equal(world.controllers.runs.stats.lost, 0)
})

/** A Kubernetes-like executor: its "Job" outlives the controller; a new controller's execute re-attaches to it. */
class JobLikeExecutor implements RunExecutor {
  readonly kind = 'kubernetes' as const
  readonly calls: string[] = []
  #finish: ((result: ExecutionResult) => void)[] = []
  readonly clock: FakeClock
  constructor(clock: FakeClock) {
    this.clock = clock
  }
  execute(request: ExecutionRequest): Promise<ExecutionResult> {
    this.calls.push(request.runName)
    return new Promise((resolve) => this.#finish.push(resolve))
  }
  /** The Job completes: every attached execute answers. */
  complete(): void {
    const startedAt = this.clock.now()
    for (const resolve of this.#finish.splice(0)) {
      resolve({
        outcome: 'succeeded',
        exitCode: 0,
        stdout: 'hi\n',
        stderr: '',
        stdoutBytes: 3,
        stderrBytes: 0,
        startedAt,
        finishedAt: new Date(startedAt.getTime() + 2_000),
        durationMs: 2_000,
        installDurationMs: 0,
        runtimeVersion: 'python 3.12',
      })
    }
  }
}

for (const phaseWritten of [true, false]) {
  t.test(`kubernetes executor: the run is re-attached, not lost (Running phase ${phaseWritten ? 'written' : 'never written'} before the crash)`, async (t) => {
    const clock = new FakeClock('2026-11-24T10:00:30Z')
    const jobs = new JobLikeExecutor(clock)
    const world = await openWorld({ clock, makeRunExecutor: () => jobs })
    t.teardown(async () => {
      jobs.complete()
      await world.close()
    })
    const taskId = await createTask(world, `k8s-${phaseWritten}`)
    world.executor.mode = 'hang' // (tells world.settle not to wait for executions)
    clock.advance(60_000)
    await world.settle()
    const [started] = await runRows(world, taskId)
    t.equal(started?.status, 'running')
    const runId = started?.id as string
    if (!phaseWritten) {
      // The old controller died between marking the run started and writing its Running phase.
      await world.runs.patchStatus('default', runId, { phase: null, startTime: null } as unknown as RunResource['status'])
      await world.settle()
      t.equal((await world.runs.get('default', runId))?.status?.phase, undefined)
    }

    await world.crashAndRestart()
    world.executor.mode = 'hang'
    await world.settle()
    t.same(jobs.calls, [runId, runId], 'the new controller attached to the same run')
    t.equal((await runRows(world, taskId))[0]?.status, 'running', 'not settled as lost')
    t.equal(world.controllers.runs.stats.lost, 0)
    t.equal(world.controllers.runs.stats.adopted, 1)

    jobs.complete()
    world.executor.mode = 'succeed'
    await world.settle()
    const [done] = await runRows(world, taskId)
    t.match(done, { status: 'succeeded', outcome: 'succeeded', exit_code: 0 })
    t.equal((await runCostRows(world, runId)).length, 1, 'charged once')
    t.equal((await world.runs.get('default', runId))?.status?.phase, 'Succeeded')
  })
}
