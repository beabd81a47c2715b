// Pure cron reconciler with a fake clock: a tiny in-memory "world" applies the actions the way the
// controller adapter does (AlreadyExists on createRun is success), and runs finish at once unless told.
import t from 'tap'
import { reconcileTask, triggerRunName, type Action } from '../../controllers/task-reconciler.ts'
import type { RunResource, TaskResource, TaskResourceSpec } from '../../src/scheduler/contract/index.ts'

const MIN = 60_000

function makeTask(name: string, spec: TaskResourceSpec, created: string): TaskResource {
  return {
    apiVersion: 'jobs.agent-gateway.dev/v1alpha1',
    kind: 'Task',
    metadata: { name, namespace: 'default', uid: `uid-${name}`, resourceVersion: '1', generation: 1, creationTimestamp: created },
    spec,
  }
}

class World {
  task: TaskResource
  runs = new Map<string, RunResource>()
  created: string[] = []
  lastActions: Action[] = []
  autoFinish: boolean
  constructor(task: TaskResource, autoFinish = true) {
    this.task = task
    this.autoFinish = autoFinish
  }
  reconcile(now: Date, options = {}): Action[] {
    const actions = reconcileTask({ task: this.task, runs: [...this.runs.values()], now }, options)
    this.apply(actions, now)
    return actions
  }
  apply(actions: Action[], now: Date): void {
    this.lastActions = actions
    for (const action of actions) {
      if (action.type === 'createRun') {
        if (this.runs.has(action.name)) continue // AlreadyExists = done
        this.created.push(action.name)
        this.runs.set(action.name, {
          apiVersion: 'v',
          kind: 'Run',
          metadata: { name: action.name, namespace: 'default', uid: action.name, resourceVersion: '1', generation: 1, creationTimestamp: now.toISOString() },
          spec: { taskRef: { name: this.task.metadata.name }, trigger: { type: action.trigger, scheduledTime: action.slot } },
          status: this.autoFinish ? { phase: 'Succeeded', completionTime: now.toISOString() } : { phase: 'Pending' },
        })
      } else if (action.type === 'deleteRun') this.runs.delete(action.name)
      else if (action.type === 'patchTaskStatus') this.task = { ...this.task, status: action.status }
    }
  }
  /** Reconciles every `stepMs` from `from` to `to` inclusive. */
  run(from: Date, to: Date, stepMs = MIN, options = {}): void {
    for (let ms = from.getTime(); ms <= to.getTime(); ms += stepMs) this.reconcile(new Date(ms), options)
  }
}

const at = (iso: string) => new Date(iso)
const everyMinute: TaskResourceSpec = { schedule: { cron: '* * * * *' }, successfulRunsHistoryLimit: 100 }

t.test('every-minute schedule over 10 minutes creates exactly 10 runs with slot names', async (t) => {
  const world = new World(makeTask('tick', everyMinute, '2026-06-01T00:00:00.000Z'))
  world.run(at('2026-06-01T00:00:00Z'), at('2026-06-01T00:10:00Z'), 15_000)
  t.same(
    world.created,
    Array.from({ length: 10 }, (_, i) => `tick-2026060100${String(i + 1).padStart(2, '0')}`),
  )
  t.equal(world.task.status?.lastScheduleTime, '2026-06-01T00:10:00.000Z')
  t.equal(world.task.status?.nextRunAt, '2026-06-01T00:11:00.000Z')
  const requeue = world.lastActions.find((a) => a.type === 'requeueAfter')
  t.same(requeue, { type: 'requeueAfter', ms: MIN }, 'requeues until the next slot')
})

t.test('controller down for 30 minutes: one catch-up for the latest missed slot only', async (t) => {
  const world = new World(makeTask('tick', everyMinute, '2026-06-01T00:00:00.000Z'))
  world.run(at('2026-06-01T00:01:00Z'), at('2026-06-01T00:05:00Z'))
  t.equal(world.created.length, 5)
  world.reconcile(at('2026-06-01T00:35:20Z'))
  t.same(world.created.slice(5), ['tick-202606010035'])
  t.equal(world.task.status?.missedSlots, 29)
  world.reconcile(at('2026-06-01T00:35:40Z'))
  t.equal(world.created.length, 6, 'no second catch-up')
})

t.test('a missed slot older than the starting deadline is skipped and recorded', async (t) => {
  const world = new World(makeTask('daily', { schedule: { cron: '0 3 * * *' } }, '2026-06-01T00:00:00.000Z'))
  world.reconcile(at('2026-06-01T03:10:00Z'))
  t.same(world.created, [])
  t.same(world.task.status?.lastSkipped, { slot: '2026-06-01T03:00:00.000Z', reason: 'MissedStartingDeadline' })
  const w2 = new World(makeTask('daily', { schedule: { cron: '0 3 * * *' }, startingDeadlineSeconds: 3600 }, '2026-06-01T00:00:00.000Z'))
  w2.reconcile(at('2026-06-01T03:10:00Z'))
  t.same(w2.created, ['daily-202606010300'], 'within a longer deadline it runs')
})

t.test('restart replays the same observed state: no new run, no status write', async (t) => {
  const world = new World(makeTask('tick', everyMinute, '2026-06-01T00:00:00.000Z'))
  world.run(at('2026-06-01T00:01:00Z'), at('2026-06-01T00:03:00Z'))
  world.reconcile(at('2026-06-01T00:03:10Z')) // settles status.active after the run finished
  const again = reconcileTask({ task: world.task, runs: [...world.runs.values()], now: at('2026-06-01T00:03:30Z') })
  t.same(
    again.filter((a) => a.type !== 'requeueAfter'),
    [],
    'nothing to do',
  )
  // Crash after createRun but before the status write: the replay names the same run.
  const before = world.task
  const first = reconcileTask({ task: before, runs: [...world.runs.values()], now: at('2026-06-01T00:04:00Z') })
  const replay = reconcileTask({ task: before, runs: [...world.runs.values()], now: at('2026-06-01T00:04:05Z') })
  t.same(
    first.filter((a) => a.type === 'createRun'),
    replay.filter((a) => a.type === 'createRun'),
  )
})

t.test('two controllers reconciling the same state produce the same names', async (t) => {
  const a = new World(makeTask('tick', everyMinute, '2026-06-01T00:00:00.000Z'))
  const b = new World(makeTask('tick', everyMinute, '2026-06-01T00:00:00.000Z'))
  a.run(at('2026-06-01T00:00:00Z'), at('2026-06-01T00:05:30Z'), 7_000)
  b.run(at('2026-06-01T00:00:03Z'), at('2026-06-01T00:05:30Z'), 11_000)
  t.same(a.created, b.created)
  t.equal(a.created.length, 5)
  // Same stale snapshot seen by both: identical actions.
  const snapshot = { task: a.task, runs: [...a.runs.values()], now: at('2026-06-01T00:06:00Z') }
  t.same(reconcileTask(snapshot), reconcileTask(snapshot))
})

t.test('DST: daily 02:30 Europe/Berlin runs once on spring-forward and fall-back days', async (t) => {
  const spec: TaskResourceSpec = { schedule: { cron: '30 2 * * *', timezone: 'Europe/Berlin' }, successfulRunsHistoryLimit: 10 }
  const spring = new World(makeTask('nightly', spec, '2026-03-28T12:00:00.000Z'))
  spring.run(at('2026-03-28T12:00:00Z'), at('2026-03-29T12:00:00Z'))
  t.same(spring.created, ['nightly-202603290130'], '03:30 CEST, once')
  const fall = new World(makeTask('nightly', spec, '2026-10-24T12:00:00.000Z'))
  fall.run(at('2026-10-24T12:00:00Z'), at('2026-10-25T12:00:00Z'))
  t.same(fall.created, ['nightly-202610250030'], 'first 02:30 (CEST), once')
})

t.test('end_at is inclusive; afterwards the task completes and nothing is created', async (t) => {
  const world = new World(makeTask('tick', { ...everyMinute, endAt: '2026-06-01T00:03:00Z' }, '2026-06-01T00:00:00.000Z'))
  world.run(at('2026-06-01T00:00:00Z'), at('2026-06-01T00:10:00Z'))
  t.same(world.created, ['tick-202606010001', 'tick-202606010002', 'tick-202606010003'])
  t.equal(world.task.status?.phase, 'Completed')
  t.equal(world.task.status?.nextRunAt, undefined)
  t.notOk(
    world.lastActions.some((a) => a.type === 'requeueAfter'),
    'no requeue after the end',
  )
  world.apply([{ type: 'patchTaskStatus', status: { ...world.task.status, lastTriggerHandled: undefined } }], new Date())
  world.task = { ...world.task, spec: { ...world.task.spec, triggerRequestedAt: '2026-06-01T00:11:00Z' } }
  world.reconcile(at('2026-06-01T00:11:30Z'))
  t.equal(world.created.length, 3, 'a completed task creates nothing, not even on trigger')
})

t.test('paused, deleted and on-demand tasks create no scheduled runs', async (t) => {
  const paused = new World(makeTask('p', { ...everyMinute, suspend: true }, '2026-06-01T00:00:00.000Z'))
  paused.run(at('2026-06-01T00:00:00Z'), at('2026-06-01T00:10:00Z'))
  t.same(paused.created, [])
  t.equal(paused.task.status?.phase, 'Suspended')
  const statusWrites = reconcileTask({ task: paused.task, runs: [], now: at('2026-06-01T00:20:00Z') })
  t.same(statusWrites, [], 'a suspended task is quiet (no status write per reconcile)')

  const deleted = makeTask('d', everyMinute, '2026-06-01T00:00:00.000Z')
  deleted.metadata.deletionTimestamp = '2026-06-01T00:00:30.000Z'
  t.same(reconcileTask({ task: deleted, runs: [], now: at('2026-06-01T00:05:00Z') }), [])

  const onDemand = new World(makeTask('od', {}, '2026-06-01T00:00:00.000Z'))
  onDemand.run(at('2026-06-01T00:00:00Z'), at('2026-06-01T01:00:00Z'))
  t.same(onDemand.created, [])
  t.equal(onDemand.task.status?.phase, 'OnDemand')
})

t.test('triggerRequestedAt newer than the last handled → exactly one trigger run', async (t) => {
  const world = new World(makeTask('od', {}, '2026-06-01T00:00:00.000Z'))
  world.task = { ...world.task, spec: { triggerRequestedAt: '2026-06-01T00:00:10.123Z' } }
  world.run(at('2026-06-01T00:00:11Z'), at('2026-06-01T00:05:00Z'))
  t.same(world.created, [triggerRunName('od', at('2026-06-01T00:00:10.123Z'))])
  t.equal(world.runs.get(world.created[0] as string)?.spec.trigger.type, 'trigger')
  world.task = { ...world.task, spec: { triggerRequestedAt: '2026-06-01T00:06:00Z' } }
  world.run(at('2026-06-01T00:06:01Z'), at('2026-06-01T00:08:00Z'))
  t.equal(world.created.length, 2, 'a newer request gives one more run')
})

t.test('a trigger while a run is active is queued, not skipped', async (t) => {
  const world = new World(makeTask('busy', everyMinute, '2026-06-01T00:00:00.000Z'), false)
  world.run(at('2026-06-01T00:01:00Z'), at('2026-06-01T00:01:30Z'))
  t.same(world.task.status?.active, ['busy-202606010001'], 'the scheduled run is in flight')
  world.task = { ...world.task, spec: { ...world.task.spec, triggerRequestedAt: '2026-06-01T00:01:40.000Z' } }
  world.reconcile(at('2026-06-01T00:01:41Z'))
  const name = triggerRunName('busy', at('2026-06-01T00:01:40.000Z'))
  t.same(world.created, ['busy-202606010001', name], 'the trigger run is created behind it')
  t.equal(world.runs.get(name)?.spec.trigger.type, 'trigger')
  t.equal(world.task.status?.lastSkipped, undefined, 'nothing recorded as skipped')
  t.equal(world.task.status?.lastTriggerHandled, '2026-06-01T00:01:40.000Z')
  world.reconcile(at('2026-06-01T00:01:42Z'))
  t.equal(world.created.length, 2, 'once per request instant')
})

t.test('never a second run while one is active: the slot is skipped and recorded', async (t) => {
  const world = new World(makeTask('slow', everyMinute, '2026-06-01T00:00:00.000Z'), false)
  world.run(at('2026-06-01T00:01:00Z'), at('2026-06-01T00:03:00Z'))
  t.same(world.created, ['slow-202606010001'])
  t.same(world.task.status?.lastSkipped, { slot: '2026-06-01T00:03:00.000Z', reason: 'ConcurrentRunActive' })
  t.same(world.task.status?.active, ['slow-202606010001'])
  const run = world.runs.get('slow-202606010001') as RunResource
  run.status = { phase: 'Succeeded', completionTime: '2026-06-01T00:03:30.000Z' }
  world.reconcile(at('2026-06-01T00:04:00Z'))
  t.same(world.created, ['slow-202606010001', 'slow-202606010004'], 'runs again once the active run finished')
  const allow = new World(makeTask('fast', { ...everyMinute, concurrencyPolicy: 'Allow' }, '2026-06-01T00:00:00.000Z'), false)
  allow.run(at('2026-06-01T00:01:00Z'), at('2026-06-01T00:03:00Z'))
  t.equal(allow.created.length, 3, 'Allow overlaps')
})

t.test('history limits keep the last N succeeded and M failed runs', async (t) => {
  const world = new World(makeTask('h', { schedule: { cron: '* * * * *' }, successfulRunsHistoryLimit: 2, failedRunsHistoryLimit: 1 }, '2026-06-01T00:00:00.000Z'))
  world.run(at('2026-06-01T00:01:00Z'), at('2026-06-01T00:05:00Z'))
  world.reconcile(at('2026-06-01T00:05:10Z'))
  t.same([...world.runs.keys()].sort(), ['h-202606010004', 'h-202606010005'])
  for (const name of ['h-202606010004', 'h-202606010005']) {
    ;(world.runs.get(name) as RunResource).status = { phase: 'Failed', completionTime: `2026-06-01T00:0${name.endsWith('4') ? 4 : 5}:30.000Z` }
  }
  const actions = reconcileTask({ task: world.task, runs: [...world.runs.values()], now: at('2026-06-01T00:05:40Z') })
  t.same(
    actions.filter((a) => a.type === 'deleteRun'),
    [{ type: 'deleteRun', name: 'h-202606010004' }],
  )
})

t.test('an invalid schedule creates nothing and says why', async (t) => {
  const actions = reconcileTask({ task: makeTask('bad', { schedule: { cron: '61 * * * *' } }, '2026-06-01T00:00:00.000Z'), runs: [], now: at('2026-06-01T01:00:00Z') })
  const patch = actions.find((a) => a.type === 'patchTaskStatus')
  t.equal(patch?.type === 'patchTaskStatus' ? patch.status.phase : undefined, 'Invalid')
  t.match(
    patch?.type === 'patchTaskStatus' ? patch.status.conditions : undefined,
    [{ type: 'Ready', status: 'False', reason: 'InvalidSchedule', message: /61/ }],
    'Ready=False with the reason',
  )
  t.notOk(actions.some((a) => a.type === 'createRun'))
})

t.test("lookahead: the next slot's Run is created ahead with notBefore = the slot, once, and is not in flight until then", async (t) => {
  const task = makeTask('ahead', everyMinute, '2026-06-01T00:00:10.000Z')
  const options = { lookaheadMs: 15_000 }
  const early = reconcileTask({ task, runs: [], now: at('2026-06-01T00:00:30Z') }, options)
  t.same(
    early.filter((a) => a.type === 'createRun'),
    [],
    'nothing before the dispatch point',
  )
  t.same(
    early.find((a) => a.type === 'requeueAfter'),
    { type: 'requeueAfter', ms: 15_000 },
    'wakes at slot − lookahead',
  )
  const ahead = reconcileTask({ task, runs: [], now: at('2026-06-01T00:00:45Z') }, options)
  const create = ahead.find((a) => a.type === 'createRun')
  t.same(create, { type: 'createRun', name: 'ahead-202606010001', slot: '2026-06-01T00:01:00.000Z', trigger: 'schedule', notBefore: '2026-06-01T00:01:00.000Z' })
  t.same(
    ahead.find((a) => a.type === 'requeueAfter'),
    { type: 'requeueAfter', ms: 15_000 },
    'then wakes at the slot',
  )
  const status = (ahead.find((a) => a.type === 'patchTaskStatus') as { status: { active?: string[]; activeCount?: number } } | undefined)?.status
  t.same(status?.active, [], 'a run waiting for its slot is not in flight')
  const waiting: RunResource = {
    apiVersion: 'v',
    kind: 'Run',
    metadata: { name: 'ahead-202606010001', namespace: 'default', uid: 'r1', resourceVersion: '2', generation: 1, creationTimestamp: '2026-06-01T00:00:45.000Z' },
    spec: { taskRef: { name: 'ahead' }, trigger: { type: 'schedule', scheduledTime: '2026-06-01T00:01:00.000Z' }, notBefore: '2026-06-01T00:01:00.000Z' },
    status: { phase: 'Pending' },
  }
  const again = reconcileTask({ task, runs: [waiting], now: at('2026-06-01T00:00:50Z') }, options)
  t.same(
    again.filter((a) => a.type === 'createRun' || a.type === 'deleteRun'),
    [],
    'a repeated reconcile creates nothing twice',
  )
  const atSlot = reconcileTask({ task: { ...task, status: { lastScheduleTime: '2026-06-01T00:00:10.000Z' } }, runs: [waiting], now: at('2026-06-01T00:01:00.100Z') }, options)
  t.same(
    atSlot.filter((a) => a.type === 'createRun' || a.type === 'deleteRun'),
    [],
    "at the slot the existing Run is the slot's run",
  )
  const slotStatus = (atSlot.find((a) => a.type === 'patchTaskStatus') as { status: { active?: string[]; lastScheduleTime?: string } }).status
  t.same(slotStatus.active, ['ahead-202606010001'], 'in flight from its slot on')
  t.equal(slotStatus.lastScheduleTime, '2026-06-01T00:01:00.000Z')
  const paused = reconcileTask({ task: { ...task, spec: { ...everyMinute, suspend: true } }, runs: [waiting], now: at('2026-06-01T00:00:50Z') }, options)
  t.same(
    paused.filter((a) => a.type === 'deleteRun'),
    [{ type: 'deleteRun', name: 'ahead-202606010001' }],
    'suspended before its slot: the waiting Run is deleted',
  )
  const rescheduled = reconcileTask({ task: { ...task, spec: { ...everyMinute, schedule: { cron: '*/5 * * * *' } } }, runs: [waiting], now: at('2026-06-01T00:00:50Z') }, options)
  t.same(
    rescheduled.filter((a) => a.type === 'deleteRun'),
    [{ type: 'deleteRun', name: 'ahead-202606010001' }],
    'a schedule that no longer has that slot: deleted',
  )
})

t.test('reconcileRun: runs with notBefore are prepared ahead and released if they go away before starting', async (t) => {
  const { reconcileRun } = await import('../../controllers/run-controller.ts')
  const now = at('2026-06-01T00:00:50Z')
  const run: RunResource = {
    apiVersion: 'v',
    kind: 'Run',
    metadata: { name: 'r', namespace: 'default', uid: 'r', resourceVersion: '2', generation: 1, creationTimestamp: '2026-06-01T00:00:45.000Z' },
    spec: { taskRef: { name: 't' }, trigger: { type: 'schedule', scheduledTime: '2026-06-01T00:01:00.000Z' }, notBefore: '2026-06-01T00:01:00.000Z' },
    status: { phase: 'Pending' },
  }
  const base = { executing: false, prepared: false, canAdopt: false, now }
  t.same(reconcileRun({ ...base, run, prepareAheadMs: 0 }), { type: 'requeueAfter', ms: 10_000 }, 'no lookahead: wait for the instant')
  t.same(reconcileRun({ ...base, run, prepareAheadMs: 5_000 }), { type: 'requeueAfter', ms: 5_000 }, 'wait for the prepare point')
  t.same(reconcileRun({ ...base, run, prepareAheadMs: 15_000 }), { type: 'prepare', dueAt: Date.parse('2026-06-01T00:01:00Z') }, 'prepared ahead, due at its instant')
  t.same(reconcileRun({ ...base, run, prepared: true, prepareAheadMs: 15_000 }), { type: 'none' }, 'prepared once')
  t.same(reconcileRun({ ...base, run: undefined, prepared: true, prepareAheadMs: 15_000 }), { type: 'release' }, 'deleted while prepared: released')
  t.same(
    reconcileRun({ ...base, run: { ...run, spec: { ...run.spec, cancelRequested: true } }, prepared: true, prepareAheadMs: 15_000 }),
    { type: 'release' },
    'cancelled while prepared: released',
  )
  t.same(reconcileRun({ ...base, run: undefined, executing: true, prepareAheadMs: 15_000 }), { type: 'abort' }, 'deleted while executing: aborted')
  t.same(
    reconcileRun({ ...base, run: { ...run, spec: { taskRef: { name: 't' }, trigger: run.spec.trigger } }, prepareAheadMs: 15_000 }),
    { type: 'prepare', dueAt: now.getTime() },
    'no notBefore: due now',
  )
  t.same(reconcileRun({ ...base, run: { ...run, status: { phase: 'Running' } }, prepareAheadMs: 0 }), { type: 'settleLost' }, 'Running but not ours (local): lost')
  t.same(reconcileRun({ ...base, canAdopt: true, run: { ...run, status: { phase: 'Running' } }, prepareAheadMs: 0 }), { type: 'adopt' }, 'Running but not ours (Jobs): adopted')
})

t.test('status names the latest finished run still kept, and the latest success even after history deleted it', async (t) => {
  const world = new World(makeTask('l', { schedule: { cron: '* * * * *' }, successfulRunsHistoryLimit: 2, failedRunsHistoryLimit: 0 }, '2026-06-01T00:00:00.000Z'), false)
  const finish = (name: string, phase: 'Succeeded' | 'Failed', completionTime: string) => ((world.runs.get(name) as RunResource).status = { phase, completionTime })
  world.reconcile(at('2026-06-01T00:01:00Z'))
  t.equal(world.task.status?.lastRunName, undefined, 'nothing finished yet')
  finish('l-202606010001', 'Succeeded', '2026-06-01T00:01:20.000Z')
  world.reconcile(at('2026-06-01T00:01:30Z'))
  t.match(world.task.status, { lastRunName: 'l-202606010001', lastRunPhase: 'Succeeded', lastSuccessfulTime: '2026-06-01T00:01:20.000Z' })
  const progress = reconcileTask({ task: world.task, runs: [...world.runs.values()], now: at('2026-06-01T00:01:40Z') })
  t.notOk(
    progress.some((a) => a.type === 'patchTaskStatus'),
    'a settled state writes nothing',
  )

  world.reconcile(at('2026-06-01T00:02:00Z'))
  ;(world.runs.get('l-202606010002') as RunResource).status = { phase: 'Running', startTime: '2026-06-01T00:02:01.000Z' }
  const running = reconcileTask({ task: world.task, runs: [...world.runs.values()], now: at('2026-06-01T00:02:05Z') })
  t.notOk(
    running.some((a) => a.type === 'patchTaskStatus'),
    "a run's progress costs no status write",
  )

  // Failed with failedRunsHistoryLimit 0: deleted in the same pass, so the kept success is the last run.
  finish('l-202606010002', 'Failed', '2026-06-01T00:02:30.000Z')
  world.reconcile(at('2026-06-01T00:02:40Z'))
  t.notOk(world.runs.has('l-202606010002'), 'the failure is not kept')
  t.match(world.task.status, { lastRunName: 'l-202606010001', lastRunPhase: 'Succeeded', lastSuccessfulTime: '2026-06-01T00:01:20.000Z' })

  for (const minute of ['03', '04']) {
    world.reconcile(at(`2026-06-01T00:${minute}:00Z`))
    finish(`l-2026060100${minute}`, 'Succeeded', `2026-06-01T00:${minute}:10.000Z`)
  }
  world.reconcile(at('2026-06-01T00:04:20Z'))
  t.same([...world.runs.keys()].sort(), ['l-202606010003', 'l-202606010004'], 'history keeps two successes')
  t.match(world.task.status, { lastRunName: 'l-202606010004', lastRunPhase: 'Succeeded', lastSuccessfulTime: '2026-06-01T00:04:10.000Z' })
})

t.test('lookahead: a run that finished before its slot was recorded is not put back in flight (one status write per run)', async (t) => {
  const world = new World(makeTask('q', everyMinute, '2026-06-01T00:00:00.000Z'), false)
  const options = { lookaheadMs: 15_000 }
  world.reconcile(at('2026-06-01T00:00:50Z'), options)
  t.same(world.created, ['q-202606010001'], 'created ahead')
  // Started at the slot and finished before the slot's bookkeeping reconcile.
  ;(world.runs.get('q-202606010001') as RunResource).status = { phase: 'Succeeded', completionTime: '2026-06-01T00:01:00.500Z' }
  const actions = world.reconcile(at('2026-06-01T00:01:02Z'), options)
  const patch = actions.find((a) => a.type === 'patchTaskStatus')
  t.match(patch?.type === 'patchTaskStatus' ? patch.status : undefined, { active: [], activeCount: 0, lastRunName: 'q-202606010001', lastScheduleTime: '2026-06-01T00:01:00.000Z' })
  const again = reconcileTask({ task: world.task, runs: [...world.runs.values()], now: at('2026-06-01T00:01:03Z') }, options)
  t.notOk(
    again.some((a) => a.type === 'patchTaskStatus'),
    'nothing left to write',
  )
})
