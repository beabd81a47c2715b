import { type AnyResource, GoneError, type ListOptions, objectKey, type ResourceStore, type WatchEvent } from '../src/scheduler/contract/index.ts'
import { realTimers, type Timers } from '../src/platform/clock.ts'
// Informer: list → watch from the list's resourceVersion → on GoneError (410) relist; on any other
// error back off (1 s doubling to 30 s by default) and relist. Keeps a cache of the objects and calls
// the handler with the key of every object that was added, changed or removed (level-triggered: the
// handler reads the cache, it gets no diff). A relist emits keys for vanished objects too.
// Secondary indexes (client-go's Indexer): addIndex(name, indexFunc) keeps, for every value an
// object yields, the set of keys of the cached objects yielding it, updated on every add, update,
// delete and relist, so byIndex(name, value) answers in O(matches) instead of scanning the cache
// (the Task controller reads a Task's Runs this way: controllers/task-controller.ts).
// observe(object) puts what one of our own writes got back into the cache at once (client-go's
// mutation cache) and tells the watch it holds that version (WatchOptions.held), so the echo of
// the write, which carries the same resourceVersion, is left out undecoded. An event never takes
// the cache back to an older version than it holds; deletes always apply.

export interface InformerOptions {
  namespace?: string
  labelSelector?: ListOptions['labelSelector']
  minBackoffMs?: number
  maxBackoffMs?: number
  /** Timers for the error backoff (default real). */
  timers?: Timers
  onError?: (err: unknown) => void
}

export type InformerHandler<R> = (type: WatchEvent<R>['type'] | 'SYNC', object: R, old: R | undefined) => void

/** The index values of an object (client-go IndexFunc): none, one, or several. */
export type IndexFunc<R> = (object: R) => string | readonly string[] | undefined

const NO_VALUES: readonly string[] = []

function valuesOf<R>(indexFunc: IndexFunc<R>, object: R | undefined): readonly string[] {
  if (object === undefined) return NO_VALUES
  const values = indexFunc(object)
  return values === undefined ? NO_VALUES : typeof values === 'string' ? [values] : values
}

export class Informer<R extends AnyResource> {
  readonly #store: ResourceStore<R>
  readonly #options: InformerOptions
  readonly #handlers: InformerHandler<R>[] = []
  readonly #cache = new Map<string, R>()
  /** Secondary indexes (client-go Indexer): index name → value → keys. */
  readonly #indexers = new Map<string, IndexFunc<R>>()
  readonly #indexes = new Map<string, Map<string, Set<string>>>()
  #abort = new AbortController()
  #running: Promise<void> | undefined
  #synced = false
  #syncWaiters: (() => void)[] = []
  /**
   * Versions observe() put in the cache before their watch events came: resourceVersion → key.
   * The watch takes an entry off when it leaves that event out; a relist, whose list may be older,
   * forgets them all (their events are then decoded as usual).
   */
  readonly #held = new Map<string, string>()
  /** Counters for tests and metrics (observed: write answers taken into the cache first). */
  readonly stats = { lists: 0, gone: 0, errors: 0, observed: 0 }

  constructor(store: ResourceStore<R>, options: InformerOptions = {}) {
    this.#store = store
    this.#options = options
  }

  on(handler: InformerHandler<R>): void {
    this.#handlers.push(handler)
  }

  get(namespace: string, name: string): R | undefined {
    return this.#cache.get(objectKey({ namespace, name }))
  }

  list(filter?: (object: R) => boolean): R[] {
    const all = [...this.#cache.values()]
    return filter === undefined ? all : all.filter(filter)
  }

  /**
   * Adds a secondary index (client-go AddIndexers): `indexFunc` gives the values an object is filed
   * under. Best called before start(); added later, it is built from the cache at once. Adding a
   * name again replaces that index (so an informer shared by two controllers can take the same index
   * from both). byIndex() then answers without scanning the cache.
   */
  addIndex(name: string, indexFunc: IndexFunc<R>): void {
    this.#indexers.set(name, indexFunc)
    const index = new Map<string, Set<string>>()
    this.#indexes.set(name, index)
    for (const [key, object] of this.#cache) for (const value of valuesOf(indexFunc, object)) fileUnder(index, value, key)
  }

  /** Cached objects filed under `value` in index `name` (client-go ByIndex); [] for an unknown index. */
  byIndex(name: string, value: string): R[] {
    const keys = this.#indexes.get(name)?.get(value)
    if (keys === undefined) return []
    const out: R[] = []
    for (const key of keys) {
      const object = this.#cache.get(key)
      if (object !== undefined) out.push(object)
    }
    return out
  }

  /** Keys filed under `value` in index `name` (client-go IndexKeys), in no particular order. */
  indexKeys(name: string, value: string): string[] {
    return [...(this.#indexes.get(name)?.get(value) ?? [])]
  }

  /** The values index `name` holds (client-go ListIndexFuncValues). */
  indexValues(name: string): string[] {
    return [...(this.#indexes.get(name)?.keys() ?? [])]
  }

  /** Moves `key` from the values of `old` to those of `object` (undefined: absent) in every index. */
  #index(key: string, old: R | undefined, object: R | undefined): void {
    for (const [name, indexFunc] of this.#indexers) {
      const index = this.#indexes.get(name) as Map<string, Set<string>>
      const before = valuesOf(indexFunc, old)
      const after = valuesOf(indexFunc, object)
      if (before.length === 1 && after.length === 1 && before[0] === after[0]) continue // the usual update
      for (const value of before) {
        if (after.includes(value)) continue
        const keys = index.get(value)
        keys?.delete(key)
        if (keys?.size === 0) index.delete(value)
      }
      for (const value of after) fileUnder(index, value, key)
    }
  }

  /**
   * An object one of our writes got back: into the cache now, handlers called, as when its watch
   * event comes (which is then left out). A version older than the cache's changes nothing; before
   * the first list, nothing (the list brings it).
   */
  observe(object: R): void {
    if (!this.#synced || !this.#apply({ type: 'MODIFIED', object })) return
    const key = objectKey(object.metadata)
    if (this.#cache.get(key) !== object) return
    this.stats.observed += 1
    if (this.#held.size >= MAX_HELD) this.#held.clear() // echoes that never came (a watch of another scope): decode them
    this.#held.set(object.metadata.resourceVersion, key)
  }

  get hasSynced(): boolean {
    return this.#synced
  }

  /** Starts the loop; resolves after the first list has filled the cache. */
  start(): Promise<void> {
    if (this.#running === undefined) {
      this.#abort = new AbortController()
      this.#running = this.#loop(this.#abort.signal)
    }
    return this.waitForSync()
  }

  waitForSync(): Promise<void> {
    if (this.#synced) return Promise.resolve()
    return new Promise((resolve) => this.#syncWaiters.push(resolve))
  }

  async stop(): Promise<void> {
    this.#abort.abort()
    await this.#running
    this.#running = undefined
  }

  async #loop(signal: AbortSignal): Promise<void> {
    const min = this.#options.minBackoffMs ?? 1000
    const max = this.#options.maxBackoffMs ?? 30_000
    const timers = this.#options.timers ?? realTimers
    let backoff = min
    while (!signal.aborted) {
      try {
        const rv = await this.#relist()
        backoff = min
        await this.#store.watch({ resourceVersion: rv, signal, held: this.#held }, (event) => void this.#apply(event))
      } catch (err) {
        if (signal.aborted) break
        if (err instanceof GoneError) {
          this.stats.gone += 1
          continue // relist at once
        }
        this.stats.errors += 1
        this.#options.onError?.(err)
        await new Promise<void>((resolve) => {
          const handle = timers.setTimeout(done, backoff)
          function done(): void {
            timers.clearTimeout(handle)
            signal.removeEventListener('abort', done)
            resolve()
          }
          signal.addEventListener('abort', done, { once: true })
        })
        backoff = Math.min(max, backoff * 2)
      }
    }
  }

  async #relist(): Promise<string> {
    const options: ListOptions = {}
    if (this.#options.labelSelector !== undefined) options.labelSelector = this.#options.labelSelector
    const { items, resourceVersion } = await this.#store.list(this.#options.namespace, options)
    this.stats.lists += 1
    // Fill the cache completely (and mark it synced) before telling anyone, so handlers that read
    // the cache see the whole list, not a half-applied one.
    const seen = new Set<string>()
    const changes: [WatchEvent<R>['type'] | 'SYNC', R, R | undefined][] = []
    for (const item of items) {
      const key = objectKey(item.metadata)
      seen.add(key)
      const old = this.#cache.get(key)
      this.#cache.set(key, item)
      this.#index(key, old, item)
      changes.push([old === undefined ? 'ADDED' : 'SYNC', item, old])
    }
    for (const [key, old] of [...this.#cache]) {
      if (seen.has(key)) continue
      this.#cache.delete(key)
      this.#index(key, old, undefined)
      changes.push(['DELETED', old, old])
    }
    this.#held.clear()
    if (!this.#synced) {
      this.#synced = true
      for (const resolve of this.#syncWaiters.splice(0)) resolve()
    }
    for (const [type, object, old] of changes) this.#emit(type, object, old)
    return resourceVersion
  }

  #matches(object: R): boolean {
    const { namespace, labelSelector } = this.#options
    if (namespace !== undefined && object.metadata.namespace !== namespace) return false
    if (labelSelector !== undefined) {
      for (const [k, v] of Object.entries(labelSelector)) if (object.metadata.labels?.[k] !== v) return false
    }
    return true
  }

  /** Applies a watch event (or an observed write); false if it changed nothing. */
  #apply(event: WatchEvent<R>): boolean {
    const object = event.object
    const key = objectKey(object.metadata)
    const old = this.#cache.get(key)
    // Not newer than the cache (which may have taken our write's answer first): nothing new.
    if (event.type !== 'DELETED' && old !== undefined && BigInt(old.metadata.resourceVersion) >= BigInt(object.metadata.resourceVersion)) return false
    if (event.type === 'DELETED' || !this.#matches(object)) {
      if (old === undefined) return false
      this.#cache.delete(key)
      this.#index(key, old, undefined)
      this.#emit('DELETED', object, old)
      return true
    }
    this.#cache.set(key, object)
    this.#index(key, old, object)
    this.#emit(old === undefined ? 'ADDED' : 'MODIFIED', object, old)
    return true
  }

  #emit(type: WatchEvent<R>['type'] | 'SYNC', object: R, old: R | undefined): void {
    for (const handler of this.#handlers) handler(type, object, old)
  }
}

/** Far above the writes in flight at once (a controller's concurrency). */
const MAX_HELD = 4096

function fileUnder(index: Map<string, Set<string>>, value: string, key: string): void {
  let keys = index.get(value)
  if (keys === undefined) index.set(value, (keys = new Set()))
  keys.add(key)
}
