// Per-key coalescing work queue (client-go workqueue semantics): a key added many times before it is
// processed is processed once; at most one handler runs per key (a key re-added while in flight is
// processed again after it finishes); addAfter delays a key (requeue at the next slot); failures are
// retried with per-key exponential backoff. Delays run on injected timers so tests can use a fake clock.
// Routine failures (`isRoutine`: a resourceVersion Conflict when two writers race) are retried the
// same way but reported through `onRoutine` (a debug line), not `onError`.
import { realTimers, type Timers } from '../src/platform/clock.ts'

export interface WorkQueueOptions {
  /** Parallel keys (default 4). */
  concurrency?: number
  /** Timers for addAfter (requeues): the controller's clock. */
  delayTimers?: Timers
  /** Timers for retry backoff (default real timers). */
  retryTimers?: Timers
  baseRetryMs?: number
  maxRetryMs?: number
  onError?: (key: string, err: unknown) => void
  /** Failures that are part of normal operation: retried like any other, reported through onRoutine instead of onError. */
  isRoutine?: (err: unknown) => boolean
  onRoutine?: (key: string, err: unknown) => void
}

export class WorkQueue {
  readonly #handler: (key: string) => Promise<void>
  readonly #concurrency: number
  readonly #delayTimers: Timers
  readonly #retryTimers: Timers
  readonly #baseRetryMs: number
  readonly #maxRetryMs: number
  readonly #onError: (key: string, err: unknown) => void
  readonly #isRoutine: (err: unknown) => boolean
  readonly #onRoutine: (key: string, err: unknown) => void
  readonly #queue: string[] = []
  readonly #queued = new Set<string>()
  readonly #active = new Set<string>()
  readonly #dirty = new Set<string>()
  readonly #failures = new Map<string, number>()
  readonly #delayed = new Map<string, { handle: unknown; timers: Timers }>()
  #stopped = false
  #idleWaiters: (() => void)[] = []

  constructor(handler: (key: string) => Promise<void>, options: WorkQueueOptions = {}) {
    this.#handler = handler
    this.#concurrency = options.concurrency ?? 4
    this.#delayTimers = options.delayTimers ?? realTimers
    this.#retryTimers = options.retryTimers ?? realTimers
    this.#baseRetryMs = options.baseRetryMs ?? 5
    this.#maxRetryMs = options.maxRetryMs ?? 30_000
    this.#onError = options.onError ?? (() => {})
    this.#isRoutine = options.isRoutine ?? (() => false)
    this.#onRoutine = options.onRoutine ?? (() => {})
  }

  add(key: string): void {
    if (this.#stopped) return
    if (this.#active.has(key)) {
      this.#dirty.add(key)
      return
    }
    if (this.#queued.has(key)) return
    this.#queued.add(key)
    this.#queue.push(key)
    this.#pump()
  }

  /**
   * Adds key after ms. A key has at most one pending delay: a new addAfter replaces it (the latest
   * reconcile knows best when the key is next due).
   */
  addAfter(key: string, ms: number, timers: Timers = this.#delayTimers): void {
    if (this.#stopped) return
    const existing = this.#delayed.get(key)
    if (existing !== undefined) {
      existing.timers.clearTimeout(existing.handle)
      this.#delayed.delete(key)
    }
    if (ms <= 0) {
      this.add(key)
      return
    }
    const handle = timers.setTimeout(() => {
      this.#delayed.delete(key)
      this.add(key)
    }, ms)
    this.#delayed.set(key, { handle, timers })
  }

  /** Number of failures recorded for key since its last success. */
  retries(key: string): number {
    return this.#failures.get(key) ?? 0
  }

  get length(): number {
    return this.#queue.length
  }

  /** Resolves when nothing is queued or in flight (delayed keys don't count). */
  idle(): Promise<void> {
    if (this.#queue.length === 0 && this.#active.size === 0) return Promise.resolve()
    return new Promise((resolve) => this.#idleWaiters.push(resolve))
  }

  stop(): void {
    this.#stopped = true
    for (const entry of this.#delayed.values()) entry.timers.clearTimeout(entry.handle)
    this.#delayed.clear()
    this.#queue.length = 0
    this.#queued.clear()
    this.#dirty.clear()
  }

  #pump(): void {
    while (!this.#stopped && this.#active.size < this.#concurrency && this.#queue.length > 0) {
      const key = this.#queue.shift() as string
      this.#queued.delete(key)
      this.#active.add(key)
      void this.#run(key)
    }
    if (this.#queue.length === 0 && this.#active.size === 0) {
      const waiters = this.#idleWaiters
      this.#idleWaiters = []
      for (const resolve of waiters) resolve()
    }
  }

  async #run(key: string): Promise<void> {
    try {
      await this.#handler(key)
      this.#failures.delete(key)
    } catch (err) {
      const failures = (this.#failures.get(key) ?? 0) + 1
      this.#failures.set(key, failures)
      if (this.#isRoutine(err)) this.#onRoutine(key, err)
      else this.#onError(key, err)
      const delay = Math.min(this.#maxRetryMs, this.#baseRetryMs * 2 ** (failures - 1))
      this.addAfter(key, delay, this.#retryTimers)
    } finally {
      this.#active.delete(key)
      if (this.#dirty.delete(key)) this.add(key)
      this.#pump()
    }
  }
}
