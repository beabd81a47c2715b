// The informer's secondary indexes (client-go Indexer) and the Run-by-Task index the Task
// controller reads: after every add, update, delete and relist, byIndex answers exactly what a scan
// of the cache would, and an object whose indexed value changes moves buckets.
import t, { type Test } from 'tap'
import { Informer } from '../../controllers/informer.ts'
import { RUNS_BY_TASK, runTaskKeys, TASK_LABEL } from '../../controllers/task-controller.ts'
import { GoneError, type ListResult, objectKey, type ResourceStore, type RunResource, type WatchEvent, type WatchOptions } from '../../src/scheduler/contract/index.ts'

/** An in-memory store: list, and one watch at a time that the test feeds or breaks (410). */
class MemoryStore {
  readonly objects = new Map<string, RunResource>()
  rv = 0
  #onEvent: ((event: WatchEvent<RunResource>) => void) | undefined
  #fail: ((err: unknown) => void) | undefined

  async list(): Promise<ListResult<RunResource>> {
    return { items: [...this.objects.values()].map((o) => structuredClone(o)), resourceVersion: String(this.rv) }
  }

  watch(options: WatchOptions, onEvent: (event: WatchEvent<RunResource>) => void): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#onEvent = onEvent
      this.#fail = reject
      options.signal.addEventListener('abort', () => resolve(), { once: true })
    })
  }

  /** Creates or replaces the object; `silent` skips the watch event (a missed one: only a relist shows it). */
  put(run: RunResource, silent = false): void {
    const key = objectKey(run.metadata)
    const type = this.objects.has(key) ? 'MODIFIED' : 'ADDED'
    this.rv += 1
    const stored = structuredClone(run)
    stored.metadata.resourceVersion = String(this.rv)
    this.objects.set(key, stored)
    if (!silent) this.#onEvent?.({ type, object: structuredClone(stored) })
  }

  remove(namespace: string, name: string, silent = false): void {
    const key = objectKey({ namespace, name })
    const old = this.objects.get(key)
    if (old === undefined) return
    this.objects.delete(key)
    this.rv += 1
    if (!silent) this.#onEvent?.({ type: 'DELETED', object: { ...structuredClone(old), metadata: { ...old.metadata, resourceVersion: String(this.rv) } } })
  }

  /** Ends the watch with 410 Gone: the informer relists. */
  expire(): void {
    this.#fail?.(new GoneError('too old resource version'))
  }
}

function run(namespace: string, name: string, names: { label?: string; owner?: string; ref: string }): RunResource {
  return {
    apiVersion: 'jobs.agent-gateway.dev/v1alpha1',
    kind: 'Run',
    metadata: {
      name,
      namespace,
      uid: `uid-${namespace}-${name}`,
      resourceVersion: '0',
      generation: 1,
      creationTimestamp: '2026-11-25T00:00:00.000Z',
      ...(names.label === undefined ? {} : { labels: { [TASK_LABEL]: names.label } }),
      ...(names.owner === undefined ? {} : { ownerReferences: [{ kind: 'Task', name: names.owner, uid: `uid-${names.owner}` }] }),
    },
    spec: { taskRef: { name: names.ref }, trigger: { type: 'schedule', scheduledTime: '2026-11-25T00:00:00.000Z' } },
    status: { phase: 'Pending' },
  }
}

const consistent = (namespace: string, name: string, task: string) => run(namespace, name, { label: task, owner: task, ref: task })

function names(runs: RunResource[]): string[] {
  return runs.map((r) => objectKey(r.metadata)).sort()
}

/** Where the index differs from a scan of the cache (every value, every bucket; no empty value kept). */
function differences(informer: Informer<RunResource>): string[] {
  const expected = new Map<string, string[]>()
  for (const object of informer.list()) {
    for (const value of runTaskKeys(object)) expected.set(value, [...(expected.get(value) ?? []), objectKey(object.metadata)])
  }
  const out: string[] = []
  const values = informer.indexValues(RUNS_BY_TASK).sort()
  if (JSON.stringify(values) !== JSON.stringify([...expected.keys()].sort())) out.push(`values ${values.join(',')}`)
  for (const [value, keys] of expected) {
    const want = JSON.stringify(keys.sort())
    if (JSON.stringify(names(informer.byIndex(RUNS_BY_TASK, value))) !== want) out.push(`byIndex ${value}`)
    if (JSON.stringify(informer.indexKeys(RUNS_BY_TASK, value).sort()) !== want) out.push(`indexKeys ${value}`)
  }
  return out
}

function assertExact(t: Test, informer: Informer<RunResource>, what: string): void {
  t.same(differences(informer), [], `${what}: the index equals a scan of the cache`)
}

const settle = () => new Promise((resolve) => setImmediate(resolve))

async function started(store: MemoryStore): Promise<Informer<RunResource>> {
  const informer = new Informer(store as unknown as ResourceStore<RunResource>, { minBackoffMs: 1 })
  informer.addIndex(RUNS_BY_TASK, runTaskKeys)
  await informer.start()
  return informer
}

async function relisted(store: MemoryStore, informer: Informer<RunResource>): Promise<void> {
  const lists = informer.stats.lists
  store.expire()
  while (informer.stats.lists === lists) await settle()
}

t.test('runTaskKeys: every Task a Run names, namespaced, once', async (t) => {
  t.same(runTaskKeys(consistent('a', 'r', 'nightly')), ['a/nightly'], 'label, owner and taskRef agree: one key')
  t.same(runTaskKeys(run('a', 'r', { ref: 'nightly' })), ['a/nightly'], 'a Run made by hand with only spec.taskRef')
  t.same(runTaskKeys(run('a', 'r', { ref: 'nightly', label: 'other' })).sort(), ['a/nightly', 'a/other'], 'a label naming another Task files it under both')
  t.same(runTaskKeys(consistent('b', 'r', 'nightly')), ['b/nightly'], 'same Task name in another namespace is another Task')
})

t.test('add, update, delete keep byIndex exact; a relabelled Run moves buckets', async (t) => {
  const store = new MemoryStore()
  store.put(consistent('a', 'x-1', 'x'))
  store.put(consistent('a', 'y-1', 'y'))
  store.put(consistent('b', 'x-1', 'x'))
  const informer = await started(store)
  t.teardown(() => informer.stop())
  assertExact(t, informer, 'after the first list')
  t.same(names(informer.byIndex(RUNS_BY_TASK, 'a/x')), ['a/x-1'])
  t.same(names(informer.byIndex(RUNS_BY_TASK, 'b/x')), ['b/x-1'], 'namespaces are separate buckets')
  t.same(informer.byIndex(RUNS_BY_TASK, 'a/none'), [], 'an unknown value: no objects')
  t.same(informer.byIndex('no-such-index', 'a/x'), [], 'an unknown index: no objects')

  store.put(consistent('a', 'x-2', 'x'))
  assertExact(t, informer, 'after an add')
  t.same(names(informer.byIndex(RUNS_BY_TASK, 'a/x')), ['a/x-1', 'a/x-2'])

  // Its task label (and owner, and taskRef) change from x to y: it leaves x's bucket for y's.
  store.put(consistent('a', 'x-2', 'y'))
  assertExact(t, informer, 'after a move')
  t.same(names(informer.byIndex(RUNS_BY_TASK, 'a/x')), ['a/x-1'], 'gone from the old bucket')
  t.same(names(informer.byIndex(RUNS_BY_TASK, 'a/y')), ['a/x-2', 'a/y-1'], 'in the new one')

  // Only the label changes: the Run now names two Tasks and is in both buckets.
  store.put(run('a', 'y-1', { label: 'z', owner: 'y', ref: 'y' }))
  assertExact(t, informer, 'after a relabel')
  t.same(names(informer.byIndex(RUNS_BY_TASK, 'a/z')), ['a/y-1'])
  t.same(names(informer.byIndex(RUNS_BY_TASK, 'a/y')), ['a/x-2', 'a/y-1'])
  // And back: it leaves z's bucket, and the value z is gone from the index.
  store.put(consistent('a', 'y-1', 'y'))
  assertExact(t, informer, 'after relabelling back')
  t.notOk(informer.indexValues(RUNS_BY_TASK).includes('a/z'), 'an emptied value is dropped')

  // A status-only update leaves the buckets alone (and the object in them is the new one).
  store.put({ ...consistent('a', 'x-1', 'x'), status: { phase: 'Succeeded' } })
  assertExact(t, informer, 'after a status update')
  t.equal(informer.byIndex(RUNS_BY_TASK, 'a/x')[0]?.status?.phase, 'Succeeded', 'byIndex returns the cached object')

  store.remove('a', 'x-1')
  assertExact(t, informer, 'after a delete')
  t.same(informer.byIndex(RUNS_BY_TASK, 'a/x'), [], 'the last Run of x deleted: empty bucket')
  t.notOk(informer.indexValues(RUNS_BY_TASK).includes('a/x'))
})

t.test('a relist (after 410) applies what the watch missed to the index', async (t) => {
  const store = new MemoryStore()
  for (let i = 0; i < 4; i += 1) store.put(consistent('a', `x-${i}`, 'x'))
  store.put(consistent('a', 'y-0', 'y'))
  const informer = await started(store)
  t.teardown(() => informer.stop())
  // Missed by the watch: one added, one moved to another Task, one deleted, one relabelled.
  store.put(consistent('a', 'w-0', 'w'), true)
  store.put(consistent('a', 'x-1', 'y'), true)
  store.remove('a', 'x-2', true)
  store.put(run('a', 'x-3', { label: 'v', owner: 'x', ref: 'x' }), true)
  t.same(names(informer.byIndex(RUNS_BY_TASK, 'a/x')), ['a/x-0', 'a/x-1', 'a/x-2', 'a/x-3'], 'stale until the relist')
  await relisted(store, informer)
  assertExact(t, informer, 'after the relist')
  t.same(names(informer.byIndex(RUNS_BY_TASK, 'a/x')), ['a/x-0', 'a/x-3'])
  t.same(names(informer.byIndex(RUNS_BY_TASK, 'a/y')), ['a/x-1', 'a/y-0'])
  t.same(names(informer.byIndex(RUNS_BY_TASK, 'a/w')), ['a/w-0'])
  t.same(names(informer.byIndex(RUNS_BY_TASK, 'a/v')), ['a/x-3'])
})

t.test('an index added to a filled cache (or added twice, by two controllers sharing it) is built once and exact', async (t) => {
  const store = new MemoryStore()
  for (let i = 0; i < 6; i += 1) store.put(consistent('a', `r-${i}`, `t${i % 3}`))
  const informer = new Informer(store as unknown as ResourceStore<RunResource>)
  await informer.start()
  t.teardown(() => informer.stop())
  informer.addIndex(RUNS_BY_TASK, runTaskKeys)
  assertExact(t, informer, 'added after the list')
  informer.addIndex(RUNS_BY_TASK, runTaskKeys)
  assertExact(t, informer, 'added again')
  t.equal(informer.byIndex(RUNS_BY_TASK, 'a/t1').length, 2, 'no duplicates')
})

t.test('random adds, moves, relabels, deletes and relists: the index always equals a scan', async (t) => {
  let seed = 13
  const random = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31
    return seed % n
  }
  const store = new MemoryStore()
  const informer = await started(store)
  t.teardown(() => informer.stop())
  const tasks = ['t0', 't1', 't2', 't3']
  const namespaces = ['a', 'b']
  for (let step = 0; step < 400; step += 1) {
    const namespace = namespaces[random(2)] as string
    const name = `r-${random(30)}`
    const op = random(10)
    const silent = random(4) === 0
    if (op < 5) {
      const task = tasks[random(4)] as string
      const label = random(5) === 0 ? (tasks[random(4)] as string) : task
      store.put(run(namespace, name, { ref: task, ...(random(6) === 0 ? {} : { owner: task }), ...(random(6) === 0 ? {} : { label }) }), silent)
    } else if (op < 8) store.remove(namespace, name, silent)
    else if (op === 8) await relisted(store, informer)
    const wrong = differences(informer)
    if (wrong.length > 0) t.fail(`step ${step} (op ${op}${silent ? ', silent' : ''}): ${wrong.join('; ')}`)
    if (step % 25 === 24) {
      await relisted(store, informer) // the cache now equals the store
      t.equal(informer.list().length, store.objects.size, `step ${step}: the relisted cache holds the store`)
    }
  }
  await relisted(store, informer)
  assertExact(t, informer, 'after 400 random steps')
  let total = 0
  for (const task of tasks) for (const namespace of namespaces) total += informer.byIndex(RUNS_BY_TASK, `${namespace}/${task}`).filter((r) => r.spec.taskRef.name === task).length
  t.equal(total, store.objects.size, 'each Run is in its spec.taskRef Task bucket exactly once')
})
