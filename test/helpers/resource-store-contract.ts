// The ResourceStore port's contract (controllers/resource-store.ts), run against every backend:
// the Postgres/PGlite store (test/integration/resource-store.test.ts) and the Kubernetes store on
// the fake API server (test/integration/kubernetes.test.ts). Also the TaskController on top of
// the store with a fake clock advancing minute by minute.
//
// A backend gives stores over ONE shared state (each subtest uses its own names) and a way to
// drop the retained watch history. Objects use schema-valid values (the Kubernetes backend's
// server validates them against the CRDs) in the namespaces of CONTRACT_NAMESPACES.
import type { Test } from 'tap'
import { Informer } from '../../controllers/informer.ts'
import { TaskController, type Clock } from '../../controllers/task-controller.ts'
import { FakeClock } from './fake-clock.ts'
import { ConflictError, GoneError, type ResourceStore, type RunResource, type TaskResource, type WatchEvent } from '../../src/scheduler/contract/index.ts'
import { until as waitUntil } from './waiting.ts'
export { FakeClock }

export const API = 'jobs.agent-gateway.dev/v1alpha1'
/** Namespaces the contract writes to; a backend that checks namespaces must have them. */
export const CONTRACT_NAMESPACES = ['default', 'ctl'] as const

export async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise
  } catch (err) {
    return err
  }
  throw new Error('expected a rejection')
}

/** Waits on watches and informers: up to 20 s before a contract test fails. */
export const until = (what: string, check: () => Promise<boolean> | boolean, timeoutMs = 20_000): Promise<void> => waitUntil(what, check, timeoutMs)

export interface ContractStores {
  tasks: ResourceStore<TaskResource>
  runs: ResourceStore<RunResource>
}

export interface ResourceStoreBackend {
  /**
   * Task and Run stores over the backend's one shared state. With `clock`, objects created from
   * now on get their creationTimestamp from it (the controller's slot math starts there).
   * `eventRetention` is a hint for how many watch events to keep (compact() may drop them all).
   */
  stores(options?: { clock?: Clock; eventRetention?: number }): ContractStores
  /** Drops retained watch history of these stores: a watch from an older resourceVersion then gets GoneError. */
  compact(stores: ContractStores): Promise<void>
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

/** Registers the contract's subtests on `t`. */
export function resourceStoreContract(t: Test, backend: ResourceStoreBackend): void {
  t.test('create, AlreadyExists, optimistic spec and status writes', async (t) => {
    const { tasks } = backend.stores()
    const task = await tasks.create(newTask('alpha', { schedule: { cron: '* * * * *' } }))
    t.equal(task.metadata.generation, 1)
    t.match(task.metadata.uid, /^[0-9a-f-]{36}$/)
    const dup = await rejection(tasks.create(newTask('alpha')))
    t.ok(dup instanceof ConflictError && dup.reason === 'AlreadyExists' && dup.code === 409, 'AlreadyExists (409)')

    const replaced = await tasks.replaceSpec({ ...task, spec: { schedule: { cron: '*/5 * * * *' } } })
    t.equal(replaced.metadata.generation, 2, 'a spec change bumps generation')
    t.match(replaced.spec, { schedule: { cron: '*/5 * * * *' } }) // a server may add schema defaults
    t.ok(BigInt(replaced.metadata.resourceVersion) > BigInt(task.metadata.resourceVersion))
    const stale = await rejection(tasks.replaceSpec({ ...task, spec: {} }))
    t.ok(stale instanceof ConflictError && stale.reason === 'Conflict', 'stale resourceVersion → 409 Conflict')

    const withStatus = await tasks.patchStatus('default', 'alpha', { phase: 'Active', lastScheduleTime: '2026-06-01T00:00:00.000Z' })
    t.equal(withStatus.metadata.generation, 2, 'status does not bump generation')
    t.same(withStatus.spec, replaced.spec, 'a status write leaves spec alone')
    const merged = await tasks.patchStatus('default', 'alpha', { lastScheduleTime: null } as never, { resourceVersion: withStatus.metadata.resourceVersion })
    t.same(merged.status, { phase: 'Active' }, 'top-level merge; null removes a key')
    const staleStatus = await rejection(tasks.patchStatus('default', 'alpha', { phase: 'Suspended' }, { resourceVersion: withStatus.metadata.resourceVersion }))
    t.ok(staleStatus instanceof ConflictError && staleStatus.reason === 'Conflict', 'stale status write → Conflict')
    t.same((await tasks.get('default', 'alpha'))?.status, { phase: 'Active' })

    // Nested values are replaced whole (not deep-merged), with or without a resourceVersion.
    const skipped = await tasks.patchStatus('default', 'alpha', { lastSkipped: { slot: '2026-06-01T00:01:00.000Z', reason: 'ConcurrentRunActive' }, active: ['a', 'b'] })
    const current = await tasks.patchStatus('default', 'alpha', { active: ['c'] }, { resourceVersion: skipped.metadata.resourceVersion })
    t.same(current.status, { phase: 'Active', lastSkipped: { slot: '2026-06-01T00:01:00.000Z', reason: 'ConcurrentRunActive' }, active: ['c'] }, 'arrays replaced, other keys kept')
    const unset = await tasks.patchStatus('default', 'alpha', { lastSkipped: null, phase: 'Suspended' } as never)
    t.same(unset.status, { phase: 'Suspended', active: ['c'] }, 'null removes a key without a resourceVersion too')

    const missing = await rejection(tasks.patchStatus('default', 'nope', { phase: 'Active' }))
    t.equal((missing as Error).name, 'NotFoundError', 'status write to a missing object → NotFoundError')
    const missingDelete = await rejection(tasks.delete('default', 'nope'))
    t.equal((missingDelete as Error).name, 'NotFoundError', 'delete of a missing object → NotFoundError')
    t.equal(await tasks.get('default', 'nope'), undefined)
  })

  t.test('create keeps the given status; labels and owner references round-trip', async (t) => {
    const { tasks, runs } = backend.stores()
    const owner = await tasks.create(newTask('labelled'))
    const run = await runs.create({
      ...newRun('labelled-1', owner),
      metadata: { ...newRun('labelled-1', owner).metadata, labels: { 'jobs.agent-gateway.dev/task': 'labelled' } },
      status: { phase: 'Pending' },
    })
    t.same(run.status, { phase: 'Pending' }, 'status stored on create')
    t.same(run.metadata.labels, { 'jobs.agent-gateway.dev/task': 'labelled' })
    t.same(run.metadata.ownerReferences, [{ kind: 'Task', name: 'labelled', uid: owner.metadata.uid }])
    const fetched = await runs.get('default', 'labelled-1')
    t.same(fetched?.status, { phase: 'Pending' })
    t.same(
      (await runs.list('default', { labelSelector: { 'jobs.agent-gateway.dev/task': 'labelled' } })).items.map((r) => r.metadata.name),
      ['labelled-1'],
      'label selector',
    )
    t.same(
      (await runs.list('default', { fieldSelector: { 'status.phase': 'Pending' } })).items.map((r) => r.metadata.name),
      ['labelled-1'],
      'status.phase field selector',
    )
    const relabelled = await runs.replaceSpec({ ...run, metadata: { ...run.metadata, labels: { other: 'x' } } })
    t.same(relabelled.metadata.labels, { other: 'x' }, 'replaceSpec replaces labels')
    t.equal(relabelled.metadata.generation, 1, 'labels alone do not bump generation')
    t.same(relabelled.metadata.ownerReferences, run.metadata.ownerReferences, 'replaceSpec keeps owner references')
    t.same(relabelled.status, { phase: 'Pending' }, 'replaceSpec keeps status')
  })

  t.test('watch delivers events in resourceVersion order from the list RV; cascade delete', async (t) => {
    const { tasks, runs } = backend.stores()
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
      (await runs.list('default')).items.map((r) => r.metadata.name).filter((n) => !n.startsWith('labelled')),
      ['other-1'],
      'owned runs deleted with their task',
    )
    t.same((await runs.list(undefined, { fieldSelector: { 'spec.taskRef.name': 'other' } })).items.length, 1, 'field selector')
    t.equal(await tasks.get('default', 'owner'), undefined)
  })

  t.test('a watch from a compacted resourceVersion is 410 Gone; the informer relists', async (t) => {
    const stores = backend.stores({ eventRetention: 2 })
    const { tasks } = stores
    const before = await tasks.list()
    for (let i = 0; i < 5; i += 1) await tasks.create(newTask(`gone-${i}`))
    await backend.compact(stores)
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
    const { tasks, runs } = backend.stores({ clock })
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
