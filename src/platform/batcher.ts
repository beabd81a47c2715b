// Group commit for database writes: calls made while a batch is being written are written together
// in the next batch (one statement or transaction for many callers). Under load many writes share
// one round trip and one COMMIT; alone, a write goes out at once. Used by the embedded
// ResourceStore (controllers/local/postgres-store.ts) and the scheduler's run dispatch.
//
// A batch fails per item, never as a whole: when the database refuses a batch because of its data
// (see isItemFault: a NUL in a string, invalid JSON, a constraint), the batch is split in halves
// and each half written again, down to single items, so only the callers of the offending items
// get the error and every valid neighbour is written. A batch write must therefore be atomic (one
// statement, or one transaction): when it throws, none of its items was applied.
import { pgErrorCode } from './db/errors.ts'

/**
 * SQLSTATE classes whose errors are caused by the data of the statement rather than by the server
 * or the connection: 21 cardinality violation, 22 data exception (untranslatable or invalid
 * characters, invalid JSON text, out-of-range values), 23 integrity constraint violation, 54
 * program limit exceeded (a value too large for an index row or a jsonb).
 */
const ITEM_FAULT_CLASSES = new Set(['21', '22', '23', '54'])

/**
 * true when a batch failed because the database refused some of its data (a SQLSTATE of class 21,
 * 22, 23 or 54): nothing was written, and writing its items in smaller batches finds the item at
 * fault. Connection errors, timeouts, cancellations and server failures are not: every caller of
 * the batch gets them, as a retry could not tell which item (if any) is at fault.
 */
export function isItemFault(error: unknown): boolean {
  const code = pgErrorCode(error)
  return code !== undefined && ITEM_FAULT_CLASSES.has(code.slice(0, 2))
}

export interface BatcherOptions {
  /** Whether a batch that threw `error` is split to find the items at fault; default isItemFault. */
  isolate?: (error: unknown) => boolean
}

interface Pending<I, O> {
  item: I
  resolve: (value: O) => void
  reject: (error: unknown) => void
}

/**
 * `write` gets the items of one batch (at most `max`) and answers one result per item, in order, or
 * throws, applying nothing. A throw that `isolate` accepts (default isItemFault) is narrowed down:
 * the batch is written again in halves, in submission order, until single items fail alone; any
 * other throw reaches every caller of the batch. One faulty item among n costs about 2·log2(n)
 * extra writes; the worst case (every item faulty) 2n − 1. Items with the same `key` never share
 * a batch: a later one waits for the next, so writes to one object apply one after the other.
 */
export class Batcher<I, O> {
  readonly #write: (items: I[]) => Promise<O[]>
  readonly #key: (item: I) => string
  readonly #max: number
  readonly #isolate: (error: unknown) => boolean
  #pending: Pending<I, O>[] = []
  #running = false

  constructor(write: (items: I[]) => Promise<O[]>, key: (item: I) => string, max: number, options: BatcherOptions = {}) {
    this.#write = write
    this.#key = key
    this.#max = max
    this.#isolate = options.isolate ?? isItemFault
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
        await this.#settle(batch)
      }
    } finally {
      this.#running = false
    }
  }

  /** Writes `batch` and settles its callers; a batch refused for its data is split (see the class). */
  async #settle(batch: Pending<I, O>[]): Promise<void> {
    let results: O[]
    try {
      results = await this.#write(batch.map((entry) => entry.item))
    } catch (error) {
      let split = false
      try {
        split = batch.length > 1 && this.#isolate(error)
      } catch {
        // a throwing predicate: treat the error as the batch's
      }
      if (!split) {
        for (const entry of batch) entry.reject(error)
        return
      }
      const half = Math.ceil(batch.length / 2)
      await this.#settle(batch.slice(0, half))
      await this.#settle(batch.slice(half))
      return
    }
    for (const [i, entry] of batch.entries()) entry.resolve(results[i] as O)
  }
}
