// Group commit for database writes: calls made while a batch is being written are written together
// in the next batch (one statement or transaction for many callers). Under load many writes share
// one round trip and one COMMIT; alone, a write goes out at once. Used by the embedded
// ResourceStore (controllers/local/postgres-store.ts) and the scheduler's run dispatch.
interface Pending<I, O> {
  item: I
  resolve: (value: O) => void
  reject: (error: unknown) => void
}

/**
 * `write` gets the items of one batch (at most `max`) and answers one result per item, in order, or
 * throws (every caller of that batch gets the error). Items with the same `key` never share a
 * batch: a later one waits for the next, so writes to one object apply one after the other.
 */
export class Batcher<I, O> {
  readonly #write: (items: I[]) => Promise<O[]>
  readonly #key: (item: I) => string
  readonly #max: number
  #pending: Pending<I, O>[] = []
  #running = false

  constructor(write: (items: I[]) => Promise<O[]>, key: (item: I) => string, max: number) {
    this.#write = write
    this.#key = key
    this.#max = max
  }

  submit(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.#pending.push({ item, resolve, reject })
      if (!this.#running) void this.#drain()
    })
  }

  async #drain(): Promise<void> {
    this.#running = true
    try {
      while (this.#pending.length > 0) {
        // One write per object per batch, in submission order: a second patch of the same object
        // waits for the next batch, so patches apply one after the other.
        const batch: Pending<I, O>[] = []
        const rest: Pending<I, O>[] = []
        const keys = new Set<string>()
        for (const entry of this.#pending) {
          const key = this.#key(entry.item)
          if (batch.length < this.#max && !keys.has(key)) {
            keys.add(key)
            batch.push(entry)
          } else rest.push(entry)
        }
        this.#pending = rest
        try {
          const results = await this.#write(batch.map((entry) => entry.item))
          batch.forEach((entry, i) => entry.resolve(results[i] as O))
        } catch (error) {
          for (const entry of batch) entry.reject(error)
        }
      }
    } finally {
      this.#running = false
    }
  }
}
