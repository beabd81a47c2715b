// Which events start a Task reconcile (controllers/task-controller.ts), on PGlite stores and a fake
// clock: the echo of our own status write and the ADDED event of a Run we created start none (one
// reconcile per Task and slot), while another writer's change that lands during our status write,
// and a Run another creator made under the name we chose, are reconciled.
import t, { type Test } from 'tap'
import { openDb, type Db } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { PostgresResourceStore } from '../../controllers/local/postgres-store.ts'
import { TaskController } from '../../controllers/task-controller.ts'
import { FakeClock } from '../helpers/fake-clock.ts'
import { ConflictError, type ResourceStore, type RunResource, type TaskResource } from '../../src/scheduler/contract/index.ts'
import { until } from '../helpers/waiting.ts'
import { overriding, quiet } from '../helpers/controller-stores.ts'

const API = 'jobs.agent-gateway.dev/v1alpha1'
const NS = 'default'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

async function world(t: Test) {
  const db: Db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  await migrate(db)
  t.teardown(() => db.close())
  const clock = new FakeClock('2026-06-01T00:00:30Z')
  const now = { now: () => clock.now(), pollMs: 20 }
  const tasks = new PostgresResourceStore<TaskResource>(db, { kind: 'Task', ...now })
  const runs = new PostgresResourceStore<RunResource>(db, { kind: 'Run', ...now })
  const task = (name: string, spec: TaskResource['spec'] = { schedule: { cron: '* * * * *' }, concurrencyPolicy: 'Allow' }) =>
    tasks.create({ apiVersion: API, kind: 'Task', metadata: { name, namespace: NS }, spec })
  return { db, clock, tasks, runs, task }
}

function controller(t: Test, tasks: ResourceStore<TaskResource>, runs: ResourceStore<RunResource>, clock: FakeClock) {
  const errors: unknown[] = []
  const c = new TaskController({ tasks, runs, clock, namespace: NS, onError: (_where, err) => errors.push(err) })
  t.teardown(() => c.stop())
  return { c, errors }
}

t.test('one reconcile per Task at start and per slot: our own echoes start none', async (t) => {
  const { clock, tasks, runs, task } = await world(t)
  for (let i = 0; i < 20; i += 1) await task(`t${i}`)
  const { c, errors } = controller(t, tasks, runs, clock)
  await c.start()
  await quiet(c)
  t.equal(c.stats.reconciles, 20, 'one reconcile per Task at start')
  t.equal(c.stats.statusWrites, 20)
  t.equal(c.stats.echoesSkipped, 20, 'the echo of each status write started no reconcile')

  clock.advance(60_000)
  await until('a Run per Task', async () => (await runs.list(NS)).items.length === 20)
  await quiet(c)
  t.equal(c.stats.runsCreated, 20)
  t.equal(c.stats.reconciles, 40, 'one more per Task for the slot: neither its Run ADDED nor its status echo started another')
  for (const item of (await tasks.list(NS)).items) {
    t.same(item.status?.active, [`${item.metadata.name}-202606010001`], `${item.metadata.name}: its Run is active`)
    t.equal(item.status?.lastScheduleTime, '2026-06-01T00:01:00.000Z')
  }
  t.same(errors, [])
})

t.test("another writer's change landing during our status write is reconciled", async (t) => {
  const { clock, tasks, runs, task } = await world(t)
  await task('busy')
  let interfere = false
  // The Task store as the controller sees it: after our status write commits and before its
  // answer, another writer (the API: a trigger) changes the spec, and both events arrive.
  const racing = overriding(tasks, {
    patchStatus: async (...args: Parameters<ResourceStore<TaskResource>['patchStatus']>) => {
      const written = await tasks.patchStatus(...args)
      if (interfere) {
        interfere = false
        await tasks.replaceSpec({ ...written, spec: { ...written.spec, triggerRequestedAt: '2026-06-01T00:00:40.000Z' } })
        await sleep(200)
      }
      return written
    },
  })
  const { c, errors } = controller(t, racing, runs, clock)
  interfere = true
  await c.start()
  await until('the triggered Run', async () => (await runs.list(NS)).items.some((run) => run.spec.trigger.type === 'trigger'))
  await quiet(c)
  const stored = await tasks.get(NS, 'busy')
  t.equal(stored?.status?.lastTriggerHandled, '2026-06-01T00:00:40.000Z', 'the trigger that came in during the write was handled')
  t.ok(c.stats.reconciles >= 2, 'a second reconcile ran for it')
  t.same(errors, [])
})

t.test("a Run another creator made under our Run's name (AlreadyExists) is looked at", async (t) => {
  const { clock, tasks, runs, task } = await world(t)
  await task('shared')
  // The Run store as the controller sees it: someone else creates the slot's Run first, already
  // finished, and its ADDED event arrives before our create answers AlreadyExists.
  const racing = overriding(runs, {
    create: async (resource: Parameters<ResourceStore<RunResource>['create']>[0]) => {
      await runs.create({ ...resource, status: { phase: 'Succeeded', completionTime: '2026-06-01T00:01:00.500Z' } })
      await sleep(200)
      throw new ConflictError('AlreadyExists', `runs "${resource.metadata.name}" already exists`)
    },
  })
  const { c, errors } = controller(t, tasks, racing, clock)
  await c.start()
  await quiet(c)
  clock.advance(60_000)
  await until('the Run', async () => (await runs.list(NS)).items.length === 1)
  await quiet(c)
  t.equal(c.stats.alreadyExists, 1)
  const stored = await tasks.get(NS, 'shared')
  t.same(stored?.status?.active, [], "the other creator's Run had finished: nothing in flight")
  t.equal(stored?.status?.lastRunName, 'shared-202606010001')
  t.equal(stored?.status?.lastRunPhase, 'Succeeded')
  t.same(errors, [])
})
