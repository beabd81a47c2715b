// The Task controller puts what its writes got back into its informers' caches at once
// (controllers/task-controller.ts, Informer.observe): with every watch event held back, the Run it
// created and the status it wrote are already what the next reconcile decides on (no second
// create, no status write, no Conflict), and once the held events arrive they start nothing.
import t from 'tap'
import { openDb, type Db } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { PostgresResourceStore } from '../../controllers/local/postgres-store.ts'
import { Informer } from '../../controllers/informer.ts'
import { TaskController } from '../../controllers/task-controller.ts'
import { FakeClock } from '../helpers/fake-clock.ts'
import type { ResourceStore, RunResource, TaskResource, WatchEvent, WatchOptions } from '../../src/scheduler/contract/index.ts'
import { until } from '../helpers/waiting.ts'
import { overriding, quiet } from '../helpers/controller-stores.ts'

const API = 'jobs.agent-gateway.dev/v1alpha1'
const NS = 'default'

/** Every watch of the stores it wraps, delivered or held back while closed (then delivered in order). */
class Gate {
  #closed = false
  readonly #held: (() => void)[] = []

  wrap<R extends TaskResource | RunResource>(store: ResourceStore<R>): ResourceStore<R> {
    return overriding(store, {
      watch: (options: WatchOptions, onEvent: (event: WatchEvent<R>) => void) =>
        store.watch(options, (event) => (this.#closed ? this.#held.push(() => onEvent(event)) : onEvent(event))),
    })
  }

  close(): void {
    this.#closed = true
  }

  /** Opens; returns how many events it had held. */
  open(): number {
    this.#closed = false
    const held = this.#held.splice(0)
    for (const deliver of held) deliver()
    return held.length
  }
}

t.test("the next reconcile decides on the write's answers, before any watch event", async (t) => {
  const db: Db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  await migrate(db)
  t.teardown(() => db.close())
  const clock = new FakeClock('2026-06-01T00:00:30Z')
  const now = { now: () => clock.now(), pollMs: 20 }
  const tasks = new PostgresResourceStore<TaskResource>(db, { kind: 'Task', ...now })
  const runs = new PostgresResourceStore<RunResource>(db, { kind: 'Run', ...now })
  await tasks.create({ apiVersion: API, kind: 'Task', metadata: { name: 'solo', namespace: NS }, spec: { schedule: { cron: '* * * * *' }, concurrencyPolicy: 'Allow' } })

  const gate = new Gate()
  const gatedRuns = gate.wrap(runs)
  const runInformer = new Informer(gatedRuns, { namespace: NS })
  const errors: unknown[] = []
  const c = new TaskController({ tasks: gate.wrap(tasks), runs: gatedRuns, runInformer, clock, namespace: NS, onError: (_where, err) => errors.push(err) })
  t.teardown(() => c.stop())
  await c.start()
  await quiet(c)
  t.equal(c.stats.reconciles, 1)
  t.equal(c.stats.statusWrites, 1)

  gate.close()
  clock.advance(60_000) // the slot of 00:01 is due: a Run and a status write
  await until('the Run and its status write', () => c.stats.runsCreated === 1 && c.stats.statusWrites === 2)
  await c.idle()
  t.ok(runInformer.get(NS, 'solo-202606010001') !== undefined, 'the created Run is in the cache with no watch event delivered')
  t.equal(runInformer.stats.observed, 1)

  await c.reconcile(`${NS}/solo`)
  t.equal(c.stats.reconciles, 3, 'reconciled at once on the cache (not put off until the echo)')
  t.equal(c.stats.runsCreated + c.stats.alreadyExists, 1, 'no second create: the cache has the Run')
  t.equal(c.stats.statusWrites, 2, 'nothing to write: the cache has the status written')
  t.equal(c.stats.conflicts, 0)

  t.equal(gate.open(), 2, 'the held events (the Run ADDED, the Task MODIFIED) arrive late')
  await quiet(c)
  t.equal(c.stats.reconciles, 3, 'the late echoes started no reconcile')
  const stored = await tasks.get(NS, 'solo')
  t.same(stored?.status?.active, ['solo-202606010001'])
  t.same(errors, [])
})
