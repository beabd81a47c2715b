// The ResourceStore port on PGlite (in memory) and on a real Postgres (throw-away database), and the
// Task controller on top of it with a fake clock advancing minute by minute.
import t from 'tap'
import type { Test } from 'tap'
import { openDb, type Db } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { PostgresResourceStore } from '../../controllers/local/postgres-store.ts'
import { Informer } from '../../controllers/informer.ts'
import { TaskController } from '../../controllers/task-controller.ts'
import { throwawayDatabase } from '../helpers/servers.ts'
import { FakeClock } from '../helpers/fake-clock.ts'
import { ConflictError, GoneError, type ResourceStore, type RunResource, type TaskResource, type WatchEvent } from '../../src/scheduler/contract/index.ts'
import { until } from '../helpers/waiting.ts'

const API = 'jobs.agent-gateway.dev/v1alpha1'

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise
  } catch (err) {
    return err
  }
  throw new Error('expected a rejection')
}

function sortDeep(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortDeep)
  if (value !== null && typeof value === 'object')
    return Object.fromEntries(
      Object.entries(value)
        .sort(([a], [b]) => (a < b ? -1 : 1))
        .map(([k, v]) => [k, sortDeep(v)]),
    )
  return value
}

function stores(db: Db, clock?: FakeClock, extra: { eventRetention?: number; compactEvery?: number } = {}) {
  const now = clock === undefined ? {} : { now: () => clock.now() }
  return {
    tasks: new PostgresResourceStore<TaskResource>(db, { kind: 'Task', ...now, ...extra }),
    runs: new PostgresResourceStore<RunResource>(db, { kind: 'Run', ...now, ...extra }),
  }
}

function newTask(name: string, spec: TaskResource['spec'] = {}) {
  return { apiVersion: API, kind: 'Task' as const, metadata: { name, namespace: 'default' }, spec }
}

function newRun(name: string, task: TaskResource) {
  return {
    apiVersion: API,
    kind: 'Run' as const,
    metadata: { name, namespace: 'default', ownerReferences: [{ kind: 'Task', name: task.metadata.name, uid: task.metadata.uid }] },
    spec: { taskRef: { name: task.metadata.name }, trigger: { type: 'schedule' as const, scheduledTime: '2026-06-01T00:00:00.000Z' } },
  }
}

async function storeSuite(t: Test, open: () => Promise<Db | undefined>): Promise<void> {
  const db = await open()
  if (db === undefined) return
  t.teardown(() => db.close())
  await migrate(db)

  t.test('create, AlreadyExists, optimistic spec and status writes', async (t) => {
    const { tasks } = stores(db)
    const task = await tasks.create(newTask('alpha', { schedule: { cron: '* * * * *' } }))
    t.equal(task.metadata.generation, 1)
    t.match(task.metadata.uid, /^[0-9a-f-]{36}$/)
    const dup = await rejection(tasks.create(newTask('alpha')))
    t.ok(dup instanceof ConflictError && dup.reason === 'AlreadyExists' && dup.code === 409, 'AlreadyExists (409)')

    const replaced = await tasks.replaceSpec({ ...task, spec: { schedule: { cron: '*/5 * * * *' } } })
    t.equal(replaced.metadata.generation, 2, 'a spec change bumps generation')
    t.ok(BigInt(replaced.metadata.resourceVersion) > BigInt(task.metadata.resourceVersion))
    const stale = await rejection(tasks.replaceSpec({ ...task, spec: {} }))
    t.ok(stale instanceof ConflictError && stale.reason === 'Conflict', 'stale resourceVersion → 409 Conflict')

    const withStatus = await tasks.patchStatus('default', 'alpha', { phase: 'Active', lastScheduleTime: 'x' })
    t.equal(withStatus.metadata.generation, 2, 'status does not bump generation')
    const merged = await tasks.patchStatus('default', 'alpha', { lastScheduleTime: null } as never, { resourceVersion: withStatus.metadata.resourceVersion })
    t.same(merged.status, { phase: 'Active' }, 'top-level merge; null removes a key')
    const staleStatus = await rejection(tasks.patchStatus('default', 'alpha', { phase: 'Suspended' }, { resourceVersion: withStatus.metadata.resourceVersion }))
    t.ok(staleStatus instanceof ConflictError && staleStatus.reason === 'Conflict', 'stale status write → Conflict')
    t.same((await tasks.get('default', 'alpha'))?.status, { phase: 'Active' })
    t.equal(await tasks.get('default', 'nope'), undefined)
  })

  t.test('concurrent writes are group-committed: every caller gets its own result, events equal the objects', async (t) => {
    const { tasks, runs } = stores(db)
    const listed = await runs.list('default')
    const events: WatchEvent<RunResource>[] = []
    const abort = new AbortController()
    const watching = runs.watch({ resourceVersion: listed.resourceVersion, signal: abort.signal }, (e) => events.push(e))
    const owner = await tasks.create(newTask('batched'))
    const names = Array.from({ length: 120 }, (_, i) => `batched-${String(i).padStart(3, '0')}`)
    // 120 creates at once (plus one duplicate name), then two patches per run at once: each patch
    // must apply on top of the other (merge), never lost in a batch.
    const created = await Promise.allSettled([...names, names[0] as string].map((name) => runs.create(newRun(name, owner))))
    t.equal(created.filter((r) => r.status === 'fulfilled').length, 120, 'every distinct name created')
    const refused = created.filter((r) => r.status === 'rejected')
    t.equal(refused.length, 1, 'the duplicate name is refused')
    t.ok(refused[0]?.status === 'rejected' && refused[0].reason instanceof ConflictError && refused[0].reason.reason === 'AlreadyExists', 'AlreadyExists')
    const patched = await Promise.all(
      names.flatMap((name, i) => [
        runs.patchStatus('default', name, { phase: 'Running', startTime: `2026-06-01T00:00:${String(i % 60).padStart(2, '0')}.000Z` }),
        runs.patchStatus('default', name, { exitCode: 0, durationMs: i }),
      ]),
    )
    const rvs = new Set(patched.map((r) => r.metadata.resourceVersion))
    t.equal(rvs.size, patched.length, 'every write has its own resourceVersion')
    const stale = await rejection(runs.patchStatus('default', names[1] as string, { phase: 'Failed' }, { resourceVersion: (patched[0] as RunResource).metadata.resourceVersion }))
    t.ok(stale instanceof ConflictError && stale.reason === 'Conflict', 'an optimistic patch with a stale resourceVersion is a Conflict')
    for (const [i, name] of names.entries()) {
      const run = (await runs.get('default', name)) as RunResource
      if (run.status?.phase !== 'Running' || run.status.durationMs !== i || run.status.exitCode !== 0) {
        t.fail(`both patches applied to ${name}: ${JSON.stringify(run.status)}`)
        break
      }
    }
    await runs.delete('default', names[2] as string)
    await until('all events', async () => events.length >= 120 + 240 + 1)
    abort.abort()
    await watching
    const order = events.map((e) => BigInt(e.object.metadata.resourceVersion))
    t.ok(
      order.every((rv, i) => i === 0 || rv > (order[i - 1] as bigint)),
      'events strictly ordered by resourceVersion',
    )
    // The event object is written by SQL in the same statement as the row: it must be the object.
    const latest = new Map<string, RunResource>()
    for (const event of events) if (event.type !== 'DELETED') latest.set(event.object.metadata.name, event.object)
    const mismatch = (await runs.list('default')).items.filter(
      (run) => latest.has(run.metadata.name) && JSON.stringify(sortDeep(latest.get(run.metadata.name))) !== JSON.stringify(sortDeep(run)),
    )
    t.same(
      mismatch.map((run) => run.metadata.name),
      [],
      'each last event object equals the stored object (metadata, spec, status)',
    )
    const deleted = events.find((e) => e.type === 'DELETED')
    t.equal(deleted?.object.metadata.name, names[2], 'DELETED event carries the object')
    t.ok(BigInt(deleted?.object.metadata.resourceVersion ?? '0') > BigInt((patched.at(-1) as RunResource).metadata.resourceVersion), 'with a new resourceVersion')
    await tasks.delete('default', 'batched')
  })

  t.test('watch delivers events in resourceVersion order from the list RV; cascade delete', async (t) => {
    const { tasks, runs } = stores(db)
    const listed = await runs.list('default')
    const events: WatchEvent<RunResource>[] = []
    const abort = new AbortController()
    const watching = runs.watch({ resourceVersion: listed.resourceVersion, signal: abort.signal }, (e) => events.push(e))
    const owner = await tasks.create(newTask('owner'))
    const other = await tasks.create(newTask('other'))
    await runs.create(newRun('owner-1', owner))
    await runs.create(newRun('owner-2', owner))
    await runs.create(newRun('other-1', other))
    await runs.patchStatus('default', 'owner-1', { phase: 'Running' })
    await tasks.delete('default', 'owner')
    await until('6 run events', async () => events.length >= 6)
    abort.abort()
    await watching
    t.same(
      events.map((e) => `${e.type} ${e.object.metadata.name}`),
      ['ADDED owner-1', 'ADDED owner-2', 'ADDED other-1', 'MODIFIED owner-1', 'DELETED owner-1', 'DELETED owner-2'],
    )
    const rvs = events.map((e) => BigInt(e.object.metadata.resourceVersion))
    t.ok(
      rvs.every((rv, i) => i === 0 || rv > (rvs[i - 1] as bigint)),
      'strictly increasing resourceVersions',
    )
    t.same(
      (await runs.list('default')).items.map((r) => r.metadata.name),
      ['other-1'],
      'owned runs deleted with their task',
    )
    t.same((await runs.list(undefined, { fieldSelector: { 'spec.taskRef.name': 'other' } })).items.length, 1, 'field selector')
    t.equal(await tasks.get('default', 'owner'), undefined)
  })

  t.test('a watch from a compacted resourceVersion is 410 Gone; the informer relists', async (t) => {
    const { tasks } = stores(db, undefined, { eventRetention: 2, compactEvery: 1_000_000 })
    const before = await tasks.list()
    for (let i = 0; i < 5; i += 1) await tasks.create(newTask(`gone-${i}`))
    await tasks.compact()
    const err = await rejection(tasks.watch({ resourceVersion: before.resourceVersion, signal: new AbortController().signal }, () => {}))
    t.ok(err instanceof GoneError && err.code === 410, 'GoneError (410)')

    // An informer whose first list is stale (old RV) hits 410 on its watch and relists.
    let lists = 0
    const staleFirst: ResourceStore<TaskResource> = Object.assign(Object.create(tasks) as ResourceStore<TaskResource>, {
      list: async (...args: Parameters<typeof tasks.list>) => {
        const result = await tasks.list(...args)
        lists += 1
        return lists === 1 ? { items: result.items, resourceVersion: before.resourceVersion } : result
      },
      watch: tasks.watch.bind(tasks),
    })
    const informer = new Informer(staleFirst, { namespace: 'default' })
    await informer.start()
    await until('a relist after 410', async () => informer.stats.gone >= 1 && informer.stats.lists >= 2)
    await tasks.create(newTask('after-relist'))
    await until('the informer sees new objects', async () => informer.get('default', 'after-relist') !== undefined)
    await informer.stop()
    t.equal(informer.stats.gone, 1)
  })

  t.test('controller: one Run per slot, one catch-up after a crash, two controllers at once', async (t) => {
    const clock = new FakeClock('2026-06-01T00:00:30Z') // half a minute off the slots: each advance passes slot + padding
    const { tasks, runs } = stores(db, clock)
    const namespace = 'ctl'
    await tasks.create({ apiVersion: API, kind: 'Task', metadata: { name: 'tick', namespace }, spec: { schedule: { cron: '* * * * *' }, concurrencyPolicy: 'Allow' } })
    const runNames = async () => (await runs.list(namespace)).items.map((r) => r.metadata.name)
    const errors: unknown[] = []
    const make = () => {
      const controller = new TaskController({ tasks, runs, clock, namespace, onError: (_where, err) => errors.push(err) })
      t.teardown(() => controller.stop())
      return controller
    }

    const a = make()
    await a.start()
    const expected: string[] = []
    for (let minute = 1; minute <= 5; minute += 1) {
      clock.advance(60_000)
      expected.push(`tick-2026060100${String(minute).padStart(2, '0')}`)
      await until(`run for minute ${minute}`, async () => (await runNames()).length === expected.length)
    }
    await a.idle()
    t.same(await runNames(), expected, 'exactly one Run per slot with the slot names')

    // Crash: stop the controller, 30 minutes pass, a new one starts.
    await a.stop()
    clock.advance(30 * 60_000)
    const b = make()
    await b.start()
    expected.push('tick-202606010035')
    await until('the catch-up run', async () => (await runNames()).length === expected.length)
    await new Promise((resolve) => setTimeout(resolve, 300))
    await b.idle()
    t.same(await runNames(), expected, 'exactly one catch-up (the latest missed slot)')
    const task = await tasks.get(namespace, 'tick')
    t.equal(task?.status?.lastScheduleTime, '2026-06-01T00:35:00.000Z')
    t.equal(task?.status?.missedSlots, 29)

    // A second controller on the same store: both reconcile every slot, each slot gets one Run.
    const c = make()
    await c.start()
    for (let minute = 36; minute <= 38; minute += 1) {
      clock.advance(60_000)
      expected.push(`tick-2026060100${minute}`)
      await until(`run for minute ${minute}`, async () => (await runNames()).length === expected.length)
    }
    await new Promise((resolve) => setTimeout(resolve, 300))
    await Promise.all([b.idle(), c.idle()])
    t.same(await runNames(), expected, 'no duplicate or extra Run with two controllers')
    t.equal(b.stats.runsCreated + c.stats.runsCreated, 4, 'one successful create per slot across both controllers')
    t.comment(`controller stats b=${JSON.stringify(b.stats)} c=${JSON.stringify(c.stats)}`)
    await Promise.all([b.stop(), c.stop()])
    t.notOk(
      errors.some((e) => !(e instanceof ConflictError)),
      'only optimistic-concurrency conflicts were retried',
    )
  })
}

t.test('PGlite (memory)', async (t) => storeSuite(t, () => openDb({ kind: 'pglite', dataDir: 'memory://' })))

t.test('Postgres', async (t) =>
  storeSuite(t, async () => {
    const url = await throwawayDatabase(t)
    return url === undefined ? undefined : openDb({ kind: 'postgres', url, poolMax: 5 })
  }),
)
