// Informer: list → watch from the list's resourceVersion → on GoneError (410) relist; on any other
// error back off (1 s doubling to 30 s by default) and relist. Keeps a cache of the objects and calls
// the handler with the key of every object that was added, changed or removed (level-triggered: the
// handler reads the cache, it gets no diff). A relist emits keys for vanished objects too.
import {
  GoneError,
  objectKey,
  type AnyResource,
  type ListOptions,
  type ResourceStore,
  type WatchEvent,
} from './resource-store.ts'
import { realTimers, type Timers } from './work-queue.ts'

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

export class Informer<R extends AnyResource> {
  readonly #store: ResourceStore<R>
  readonly #options: InformerOptions
  readonly #handlers: InformerHandler<R>[] = []
  readonly #cache = new Map<string, R>()
  /** Secondary indexes (client-go Indexer): index name → value → keys. */
  readonly #indexers = new Map<string, (object: R) => string | undefined>()
  readonly #indexes = new Map<string, Map<string, Set<string>>>()
  #abort = new AbortController()
  #running: Promise<void> | undefined
  #synced = false
  #syncWaiters: (() => void)[] = []
  /** Counters for tests and metrics. */
  readonly stats = { lists: 0, gone: 0, errors: 0 }

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

  /** Adds a secondary index; call before start(). byIndex() then answers without scanning the cache. */
  addIndex(name: string, valueOf: (object: R) => string | undefined): void {
    this.#indexers.set(name, valueOf)
    this.#indexes.set(name, new Map())
    for (const [key, object] of this.#cache) this.#index(key, undefined, object)
  }

  /** Objects whose index `name` value is `value`. */
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

  #index(key: string, old: R | undefined, object: R | undefined): void {
    for (const [name, valueOf] of this.#indexers) {
      const index = this.#indexes.get(name) as Map<string, Set<string>>
      const before = old === undefined ? undefined : valueOf(old)
      const after = object === undefined ? undefined : valueOf(object)
      if (before === after) continue
      if (before !== undefined) {
        const keys = index.get(before)
        keys?.delete(key)
        if (keys?.size === 0) index.delete(before)
      }
      if (after !== undefined) {
        let keys = index.get(after)
        if (keys === undefined) index.set(after, (keys = new Set()))
        keys.add(key)
      }
    }
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
        await this.#store.watch({ resourceVersion: rv, signal }, (event) => this.#apply(event))
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

  #apply(event: WatchEvent<R>): void {
    const object = event.object
    const key = objectKey(object.metadata)
    const old = this.#cache.get(key)
    if (event.type === 'DELETED' || !this.#matches(object)) {
      if (old === undefined) return
      this.#cache.delete(key)
      this.#index(key, old, undefined)
      this.#emit('DELETED', object, old)
      return
    }
    if (old !== undefined && BigInt(old.metadata.resourceVersion) >= BigInt(object.metadata.resourceVersion)) return
    this.#cache.set(key, object)
    this.#index(key, old, object)
    this.#emit(old === undefined ? 'ADDED' : 'MODIFIED', object, old)
  }

  #emit(type: WatchEvent<R>['type'] | 'SYNC', object: R, old: R | undefined): void {
    for (const handler of this.#handlers) handler(type, object, old)
  }
}
