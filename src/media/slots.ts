// A counting semaphore for generations (renders, upstream calls): at most `limit` run at once,
// the rest wait in arrival order. A waiter whose signal aborts leaves the queue at once, so a
// caller that went away never holds a place; a freed slot passes straight to the next waiter.

export interface Slots {
  run<T>(signal: AbortSignal, work: () => Promise<T>): Promise<T>
}

export function createSlots(limit: number): Slots {
  let active = 0
  const waiting: Array<() => void> = []
  const release = () => {
    const next = waiting.shift()
    if (next) next()
    else active -= 1
  }
  const acquire = (signal: AbortSignal) =>
    new Promise<void>((resolve, reject) => {
      if (active < limit) {
        active += 1
        return resolve()
      }
      const go = () => {
        signal.removeEventListener('abort', onAbort)
        resolve()
      }
      const onAbort = () => {
        waiting.splice(waiting.indexOf(go), 1)
        reject(signal.reason)
      }
      waiting.push(go)
      signal.addEventListener('abort', onAbort, { once: true })
    })
  return {
    async run<T>(signal: AbortSignal, work: () => Promise<T>): Promise<T> {
      await acquire(signal)
      try {
        signal.throwIfAborted()
        return await work()
      } finally {
        release()
      }
    },
  }
}
