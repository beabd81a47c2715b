// The ResourceStore port's one contract (test/helpers/resource-store-contract.ts) on the Postgres
// store, over PGlite (in memory) and a real Postgres (throw-away database); and what only this
// store promises: concurrent writes group-committed into one statement, each event written with
// its row.
import t from 'tap'
import type { Test } from 'tap'
import { openDb, type Db } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { PostgresResourceStore } from '../../controllers/local/postgres-store.ts'
import type { Clock } from '../../controllers/task-controller.ts'
import { throwawayDatabase } from '../helpers/servers.ts'
import { API, rejection, resourceStoreContract, until, type ContractStores, type ResourceStoreBackend } from '../helpers/resource-store-contract.ts'
import { ConflictError, type RunResource, type TaskResource, type WatchEvent } from '../../src/scheduler/contract/index.ts'

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

function stores(db: Db, options: { clock?: Clock; eventRetention?: number } = {}) {
  const now = options.clock === undefined ? {} : { now: () => (options.clock as Clock).now() }
  // A retention the contract sets is pruned only by its compact(), never by the write path.
  const retention = options.eventRetention === undefined ? {} : { eventRetention: options.eventRetention, compactEvery: 1_000_000 }
  return {
    tasks: new PostgresResourceStore<TaskResource>(db, { kind: 'Task', ...now, ...retention }),
    runs: new PostgresResourceStore<RunResource>(db, { kind: 'Run', ...now, ...retention }),
  }
}

function postgresBackend(db: Db): ResourceStoreBackend {
  return {
    stores: (options) => stores(db, options),
    compact: async ({ tasks, runs }: ContractStores) => {
      for (const store of [tasks, runs]) {
        if (!(store instanceof PostgresResourceStore)) throw new Error('compact() of a store this backend did not make')
        await store.compact()
      }
    },
  }
}

function newTask(name: string) {
  return { apiVersion: API, kind: 'Task' as const, metadata: { name, namespace: 'default' }, spec: {} }
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

  resourceStoreContract(t, postgresBackend(db))

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
}

t.test('PGlite (memory)', async (t) => storeSuite(t, () => openDb({ kind: 'pglite', dataDir: 'memory://' })))

t.test('Postgres', async (t) =>
  storeSuite(t, async () => {
    const url = await throwawayDatabase(t)
    return url === undefined ? undefined : openDb({ kind: 'postgres', url, poolMax: 5 })
  }),
)
