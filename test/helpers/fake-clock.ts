// A hand-moved clock for controllers and services: now()/nowMs() and timers that fire only when the
// test advances time (in due order), so cron slots and requeues are exact and instant.
export class FakeClock {
  #ms: number
  #timers = new Map<number, { at: number; fn: () => void }>()
  #next = 1

  constructor(start: string | number) {
    this.#ms = typeof start === 'number' ? start : Date.parse(start)
  }

  now(): Date {
    return new Date(this.#ms)
  }

  nowMs(): number {
    return this.#ms
  }

  setTimeout(fn: () => void, ms: number): unknown {
    const id = this.#next++
    this.#timers.set(id, { at: this.#ms + Math.max(0, ms), fn })
    return id
  }

  clearTimeout(handle: unknown): void {
    this.#timers.delete(handle as number)
  }

  /** Timers armed and not yet fired. */
  get pending(): number {
    return this.#timers.size
  }

  /** Moves time forward, firing every timer due on the way in order. */
  advance(ms: number): void {
    const target = this.#ms + ms
    for (;;) {
      const due = [...this.#timers.entries()].filter(([, timer]) => timer.at <= target).sort((a, b) => a[1].at - b[1].at)[0]
      if (due === undefined) break
      this.#timers.delete(due[0])
      this.#ms = Math.max(this.#ms, due[1].at)
      due[1].fn()
    }
    this.#ms = target
  }
}
