// Time is a collaborator: everything that reads the time takes a Clock so tests are exact.
export interface Clock {
  now(): Date
  nowMs(): number
}

export const systemClock: Clock = {
  now: () => new Date(),
  nowMs: () => Date.now(),
}

/** A clock tests move by hand. */
export function manualClock(start: Date | number = 0): Clock & { set(ms: number): void; advance(ms: number): void } {
  let current = typeof start === 'number' ? start : start.getTime()
  return {
    now: () => new Date(current),
    nowMs: () => current,
    set: (ms) => {
      current = ms
    },
    advance: (ms) => {
      current += ms
    },
  }
}
