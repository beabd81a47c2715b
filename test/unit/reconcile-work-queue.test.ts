// The controller's per-key coalescing work queue, on fake timers.
import t from 'tap'
import { WorkQueue } from '../../controllers/work-queue.ts'
import type { Timers } from '../../src/platform/clock.ts'

function fakeTimers() {
  let now = 0
  let next = 1
  const timers = new Map<number, { at: number; fn: () => void }>()
  const api: Timers & { advance(ms: number): void; pending(): number } = {
    setTimeout(fn, ms) {
      const id = next++
      timers.set(id, { at: now + ms, fn })
      return id
    },
    clearTimeout(handle) {
      timers.delete(handle as number)
    },
    advance(ms) {
      now += ms
      for (const [id, timer] of [...timers].sort((a, b) => a[1].at - b[1].at)) {
        if (timer.at > now) continue
        timers.delete(id)
        timer.fn()
      }
    },
    pending: () => timers.size,
  }
  return api
}

const tick = () => new Promise((resolve) => setImmediate(resolve))

t.test('a key added many times before it runs is reconciled once', async (t) => {
  const seen: string[] = []
  const queue = new WorkQueue(async (key) => void seen.push(key), { concurrency: 1 })
  queue.add('ns/b') // occupies the only worker, so ns/a waits in the queue
  for (let i = 0; i < 5; i += 1) queue.add('ns/a')
  t.equal(queue.length, 1, 'queued once')
  await queue.idle()
  t.same(seen, ['ns/b', 'ns/a'])
})

t.test('one in flight per key; a re-add while running runs once more afterwards', async (t) => {
  let running = 0
  let maxRunning = 0
  let calls = 0
  let release: () => void = () => {}
  const queue = new WorkQueue(async () => {
    calls += 1
    running += 1
    maxRunning = Math.max(maxRunning, running)
    if (calls === 1) await new Promise<void>((resolve) => (release = resolve))
    running -= 1
  })
  queue.add('k')
  await tick()
  queue.add('k')
  queue.add('k')
  await tick()
  t.equal(calls, 1, 'not started again while in flight')
  release()
  await queue.idle()
  t.equal(calls, 2, 'the re-adds coalesce into one more run')
  t.equal(maxRunning, 1)
})

t.test('addAfter fires on the injected timers; the latest delay replaces a pending one', async (t) => {
  const timers = fakeTimers()
  const seen: string[] = []
  const queue = new WorkQueue(async (key) => void seen.push(key), { delayTimers: timers })
  queue.addAfter('k', 60_000)
  queue.addAfter('k', 30_000)
  t.equal(timers.pending(), 1)
  timers.advance(29_999)
  await queue.idle()
  t.same(seen, [])
  timers.advance(1)
  await queue.idle()
  t.same(seen, ['k'])
  timers.advance(60_000)
  await queue.idle()
  t.same(seen, ['k'], 'the replaced delay never fires')
})

t.test('failures are retried with exponential backoff, reset on success', async (t) => {
  const timers = fakeTimers()
  let calls = 0
  const errors: unknown[] = []
  const queue = new WorkQueue(
    async () => {
      calls += 1
      if (calls <= 3) throw new Error(`fail ${calls}`)
    },
    { retryTimers: timers, baseRetryMs: 10, onError: (_key, err) => errors.push(err) },
  )
  queue.add('k')
  await queue.idle()
  t.equal(queue.retries('k'), 1)
  timers.advance(9)
  await queue.idle()
  t.equal(calls, 1, 'first retry after 10 ms')
  timers.advance(1)
  await queue.idle()
  t.equal(calls, 2)
  timers.advance(19)
  await queue.idle()
  t.equal(calls, 2, 'second retry after 20 ms')
  timers.advance(1)
  await queue.idle()
  timers.advance(40)
  await queue.idle()
  t.equal(calls, 4)
  t.equal(queue.retries('k'), 0, 'reset after success')
  t.equal(errors.length, 3)
})
