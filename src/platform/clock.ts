// Time is a collaborator: everything that reads the time takes a Clock so tests are exact.
export interface Clock {
  now(): Date
  nowMs(): number
}

export const systemClock: Clock = {
  now: () => new Date(),
  nowMs: () => Date.now(),
}

/** Timers on some clock's time line: the real ones, or a test clock's that fire as it advances. */
export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown
  clearTimeout(handle: unknown): void
}

export const realTimers: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
}

/**
 * What waits as well as reads the time: controllers, the Kubernetes Job executor and the leader
 * elector arm their requeues, deadlines and renewals on it, so a test clock
 * (test/helpers/fake-clock.ts) drives them exactly.
 */
export interface TimerClock extends Timers {
  now(): Date
}

export const systemTimerClock: TimerClock & Clock = { ...systemClock, ...realTimers }
