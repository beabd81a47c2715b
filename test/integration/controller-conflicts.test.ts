// A resourceVersion Conflict is routine for a controller (client-go semantics): a second writer
// changed the Task between the informer's read and the controller's optimistic status write. The
// Task controller requeues the key, counts it and logs it at debug, without a stack; nothing reaches
// onError (which the runtime logs at error with the stack). Real PGlite ResourceStore, real race.
import t from 'tap'
import { openDb } from '../../src/platform/db/index.ts'
import { migrate, migrationsDir } from '../../src/platform/db/migrate.ts'
import { captureLogs } from '../helpers/log-capture.ts'
import { PostgresResourceStore } from '../../controllers/local/postgres-store.ts'
import { TaskController } from '../../controllers/task-controller.ts'
import { WorkQueue } from '../../controllers/work-queue.ts'
import { FakeClock } from '../helpers/fake-clock.ts'
import { ConflictError, isConflict, type RunResource, type TaskResource } from '../../src/scheduler/contract/index.ts'
import { until } from '../helpers/waiting.ts'

const API = 'jobs.agent-gateway.dev/v1alpha1'

t.test('a Task status Conflict is requeued and logged at debug, never as an error', async (t) => {
  const { logger, lines } = captureLogs('debug')
  const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  t.teardown(() => db.close())
  await migrate(db, migrationsDir)
  const clock = new FakeClock('2026-06-01T00:00:30Z')
  const tasks = new PostgresResourceStore<TaskResource>(db, { kind: 'Task', now: () => clock.now(), pollMs: 20 })
  const runs = new PostgresResourceStore<RunResource>(db, { kind: 'Run', now: () => clock.now(), pollMs: 20 })
  await tasks.create({ apiVersion: API, kind: 'Task', metadata: { name: 'tick', namespace: 'default' }, spec: { schedule: { cron: '* * * * *' }, concurrencyPolicy: 'Allow' } })

  // Another writer (the scheduler API, a second controller) changes the Task just before each of the
  // controller's first two status writes: those writes carry a stale resourceVersion.
  let races = 2
  const racing = new Proxy(tasks, {
    get(target, property, receiver) {
      if (property !== 'patchStatus') {
        const value = Reflect.get(target, property, receiver) as unknown
        return typeof value === 'function' ? value.bind(target) : value
      }
      return async (namespace: string, name: string, status: TaskResource['status'], options?: { resourceVersion?: string }) => {
        if (races > 0 && options?.resourceVersion !== undefined) {
          races -= 1
          await target.patchStatus(namespace, name, { note: `other writer ${races}` } as TaskResource['status'])
        }
        return target.patchStatus(namespace, name, status, options)
      }
    },
  })

  const errors: unknown[] = []
  const controller = new TaskController({
    tasks: racing,
    runs,
    clock,
    namespace: 'default',
    logger,
    // As src/runtime.ts wires it: anything here is an error line with a stack.
    onError: (where, err) => {
      errors.push(err)
      logger.error({ err }, `controller: ${where}`)
    },
  })
  t.teardown(() => controller.stop())
  await controller.start()
  clock.advance(60_000)
  await until('the slot is recorded in the Task status', async () => (await tasks.get('default', 'tick'))?.status?.lastScheduleTime === '2026-06-01T00:01:00.000Z')
  await controller.idle()

  t.equal(races, 0, 'both races happened')
  t.ok(controller.stats.conflicts >= 2, `the conflicts were counted (${controller.stats.conflicts})`)
  t.same(errors, [], 'nothing reached onError')
  t.notOk(
    lines.some((line) => line.level >= 50),
    'no error line',
  )
  const debug = lines.filter((line) => /conflict/i.test(line.msg))
  t.ok(debug.length >= 2, 'a line per conflict')
  for (const line of debug) {
    t.equal(line.level, 20, 'at debug')
    t.equal(line.key, 'default/tick')
    t.notOk(line.err, 'no error object, so no stack')
  }
  t.equal((await runs.list('default')).items.length, 1, 'the slot got its Run')
  t.equal((await tasks.get('default', 'tick'))?.status?.lastScheduleTime, '2026-06-01T00:01:00.000Z', 'the status write went through on a retry')
})

t.test('the work queue retries routine failures like others but reports them through onRoutine', async (t) => {
  const reported: string[] = []
  let calls = 0
  const queue = new WorkQueue(
    async () => {
      calls += 1
      if (calls === 1) throw new ConflictError('Conflict', 'the object has been modified')
      if (calls === 2) throw new Error('database down')
    },
    { isRoutine: isConflict, onRoutine: (key) => reported.push(`routine ${key}`), onError: (key) => reported.push(`error ${key}`), baseRetryMs: 1 },
  )
  queue.add('ns/a')
  await until('three attempts', () => calls === 3)
  await queue.idle()
  t.same(reported, ['routine ns/a', 'error ns/a'], 'a Conflict is routine, anything else an error; both retried')
  t.equal(queue.retries('ns/a'), 0, 'succeeded in the end')
})
