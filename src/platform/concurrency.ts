// Bounded concurrency for I/O over a list (blob writes and deletes): at most `limit` at once.

/** Runs `run` on every item, `limit` at a time, in order of start; rejects with the first failure. */
export async function forEachLimited<T>(items: readonly T[], limit: number, run: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0
  const worker = async () => {
    while (next < items.length) await run(items[next++] as T)
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker))
}
