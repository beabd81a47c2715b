// The informer's mutation cache (controllers/informer.ts observe()): a write's answer is in the
// cache at once and handed to the watch as held (so its echo can be left out undecoded); an event
// never takes the cache back to an older version, a newer one always applies, deletes always
// apply, and a relist forgets what was held.
import t from 'tap'
import { Informer } from '../../controllers/informer.ts'
import { GoneError, type HeldVersions, type ListResult, objectKey, type RunResource, type WatchEvent, type WatchOptions } from '../../src/scheduler/contract/index.ts'

/** A store whose watch the test feeds (a store that ignores `held`, as the Postgres one does). */
class FedStore {
  items: RunResource[] = []
  held: HeldVersions | undefined
  #onEvent: ((event: WatchEvent<RunResource>) => void) | undefined
  #fail: ((err: unknown) => void) | undefined
  watches = 0

  async list(): Promise<ListResult<RunResource>> {
    return { items: this.items.map((o) => structuredClone(o)), resourceVersion: '10' }
  }

  watch(options: WatchOptions, onEvent: (event: WatchEvent<RunResource>) => void): Promise<void> {
    this.watches += 1
    this.held = options.held
    return new Promise((resolve, reject) => {
      this.#onEvent = onEvent
      this.#fail = reject
      options.signal.addEventListener('abort', () => resolve(), { once: true })
    })
  }

  send(type: WatchEvent<RunResource>['type'], object: RunResource): void {
    this.#onEvent?.({ type, object: structuredClone(object) })
  }

  expire(): void {
    this.#fail?.(new GoneError('too old resource version'))
  }
}

function run(name: string, resourceVersion: string, phase = 'Pending', labels: Record<string, string> = { app: 'x' }): RunResource {
  return {
    apiVersion: 'jobs.agent-gateway.dev/v1alpha1',
    kind: 'Run',
    metadata: { name, namespace: 'ns', uid: `uid-${name}`, resourceVersion, generation: 1, creationTimestamp: '2026-01-01T00:00:00.000Z', labels },
    spec: { taskRef: { name: 't' }, trigger: { type: 'schedule', scheduledTime: '2026-01-01T00:00:00.000Z' } },
    status: { phase },
  } as RunResource
}

async function started(store: FedStore) {
  const informer = new Informer(store as never, { labelSelector: { app: 'x' } })
  const events: string[] = []
  informer.on((type, object) => events.push(`${type} ${object.metadata.name}@${object.metadata.resourceVersion}`))
  await informer.start()
  await new Promise((resolve) => setImmediate(resolve))
  t.teardown(() => informer.stop())
  return { informer, events }
}

t.test("a write's answer is in the cache at once, its echo changes nothing, and the watch is told it is held", async (t) => {
  const store = new FedStore()
  store.items = [run('a', '5')]
  const { informer, events } = await started(store)
  events.length = 0
  informer.observe(run('a', '12', 'Running'))
  t.equal(informer.get('ns', 'a')?.metadata.resourceVersion, '12', 'in the cache before any event')
  t.same(events, ['MODIFIED a@12'], 'handlers told, as for a watch event')
  t.equal(store.held?.get('12'), objectKey({ namespace: 'ns', name: 'a' }), 'the watch may leave its echo out')
  t.equal(informer.stats.observed, 1)

  store.send('MODIFIED', run('a', '11', 'Pending', {})) // older, and out of the selection: no delete
  store.send('MODIFIED', run('a', '12', 'Running')) // the echo, decoded by a store that ignores `held`
  t.same(events, ['MODIFIED a@12'], 'neither an older event nor the echo is applied')
  t.equal(informer.get('ns', 'a')?.metadata.resourceVersion, '12')

  store.send('MODIFIED', run('a', '13', 'Succeeded'))
  t.same(events, ['MODIFIED a@12', 'MODIFIED a@13'], 'a newer version always applies')
  informer.observe(run('a', '12', 'Running'))
  t.equal((informer.get('ns', 'a')?.status as { phase?: string } | undefined)?.phase, 'Succeeded', 'an older answer changes nothing')
  t.equal(informer.stats.observed, 1)

  store.send('DELETED', run('a', '13', 'Succeeded'))
  t.equal(informer.get('ns', 'a'), undefined, 'a delete always applies')
  t.same(events.at(-1), 'DELETED a@13')
})

t.test('an answer for a new object is ADDED; a relist forgets what was held', async (t) => {
  const store = new FedStore()
  const { informer, events } = await started(store)
  informer.observe(run('b', '20'))
  t.same(events, ['ADDED b@20'])
  t.equal(store.held?.get('20'), 'ns/b')
  store.items = [run('b', '19')] // a list older than the answer (it was served before the write)
  store.expire()
  await new Promise((resolve) => setTimeout(resolve, 20))
  t.equal(store.watches, 2, 'relisted and watching again')
  t.equal(store.held?.get('20'), undefined, 'the echo is decoded again: the cache went back to the list')
  t.equal(informer.get('ns', 'b')?.metadata.resourceVersion, '19')
  store.send('MODIFIED', run('b', '20'))
  t.equal(informer.get('ns', 'b')?.metadata.resourceVersion, '20', 'the echo then applies')
})

t.test('before the first list, an answer is left to the list', async (t) => {
  const store = new FedStore()
  const informer = new Informer(store as never)
  informer.observe(run('c', '3'))
  t.equal(informer.get('ns', 'c'), undefined)
  t.equal(informer.stats.observed, 0)
})
